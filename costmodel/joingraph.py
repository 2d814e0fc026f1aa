"""Join-graph enumeration in proportion to the csg-cmp pairs (DPccp).

The plan space of a query is its connected sub-expressions (csgs) and, for each, the ways to
split it into two connected, adjacent halves (csg-cmp pairs). Scanning every subset of an
expression and testing connectivity finds them, but its work grows with Σ 2^|S| over the
expressions; this module enumerates exactly the csgs and the pairs, each once, over bitsets:
``EnumerateCsg`` / ``EnumerateCmp`` of Moerkotte and Neumann, *Analysis of Two Existing and One
New Dynamic Programming Algorithm for the Generation of Optimal Bushy Join Trees without Cross
Products* (VLDB 2006). Every set it builds is a result, so the work is proportional to the
number of csgs plus the number of pairs (:attr:`JoinGraph.examined` counts the sets built;
``tests/test_enumeration.py`` holds it to a small multiple of the pairs).

The pairs are computed once per join graph and grouped by their union, each pair once with the
side holding the union's lowest relation on the left (:meth:`JoinGraph.halves`, what a
symmetric cost model joins) and in both orders (:meth:`JoinGraph.lefts`), sorted; this serves
top-down search (an expression's splits at once) and bottom-up dynamic programming alike, and
:meth:`JoinGraph.pair_arrays` hands the same pairs to batch callers as ``int64`` columns. Large
graphs are enumerated by the same algorithm compiled (:mod:`~reopt.costmodel.ccp`,
:func:`compiled_by_default`).

A disconnected graph is planned with cross products between components only: its expressions
are the csgs of each component plus the unions of two or more whole components, split into two
unions of whole components.

Relations are bits of a Python ``int``; the ``int64`` columns of the batch interface (the
final operator's pseudo-expression takes one bit more) hold at most :data:`MAX_RELATIONS`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

MAX_RELATIONS = 62
"""The most relations a query may join: expressions are ``int64`` bitsets in the batch
interface, and the final operator's pseudo-expression needs one bit above the relations."""


def bits(mask: int) -> list[int]:
    """The positions of the set bits of ``mask``, lowest first."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


COMPILED_FROM = 14
"""The fewest relations for which :class:`JoinGraph` enumerates with the compiled kernel by
default. Loading it costs a process about 2 s and 130 MB once (numba and the cached machine
code); the Python enumeration of a graph of fewer relations takes milliseconds, of a dense
17-relation one 0.10 s against the kernel's 0.05 s (grouping included)."""
ENUMERATION_ENV = "REOPT_ENUMERATION"
"""``python``, ``compiled`` or ``auto`` (the default: compiled from :data:`COMPILED_FROM`
relations, when numba can be imported)."""


def compiled_by_default(n: int) -> bool:
    """Whether a graph of ``n`` relations enumerates with the compiled kernel unless told."""
    choice = os.environ.get(ENUMERATION_ENV, "auto").strip().lower()
    if choice == "python":
        return False
    if choice not in ("auto", "compiled") or (choice == "auto" and n < COMPILED_FROM):
        return False
    from reopt.costmodel import ccp

    return ccp.AVAILABLE


class JoinGraph:
    """The join graph of one query: relations ``0..n-1``, ``neighbors[i]`` a bitset."""

    def __init__(self, n: int, neighbors: Sequence[int]):
        if n > MAX_RELATIONS:
            raise ValueError(
                f"a query may join at most {MAX_RELATIONS} relations, this one joins {n}")
        self.n = n
        self.neighbors = list(neighbors)
        self.all = (1 << n) - 1
        self.examined = 0
        """Sets the enumeration built (every one a csg or a csg-cmp pair's complement)."""
        self.compiled = compiled_by_default(n)
        """Enumerate with the compiled kernel (:mod:`~reopt.costmodel.ccp`) rather than the
        Python methods below, which the tests compare it with (:func:`compiled_by_default`)."""
        self._nb: dict[int, int] = {1 << i: nb for i, nb in enumerate(self.neighbors)}
        self.components = self._components()
        self._csgs: list[int] | None = None
        self._halves: dict[int, list[int]] | None = None
        self._flat: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        """:meth:`halves` as arrays, when the compiled enumeration made them
        (:meth:`flat_halves`)."""
        self._halves_arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        """:meth:`halves` as arrays made from its lists (:meth:`halves_arrays`)."""
        self._lefts: dict[int, list[int]] | None = None
        self._flat_lefts: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        """:meth:`lefts` as arrays (:meth:`flat_lefts`; made when first read)."""
        self._enumerated = False
        """Whether :meth:`_enumerate` ran (its pairs counted, :attr:`_flat` or
        :attr:`_halves` made)."""
        self._pairs = 0
        self._budget: int | None = None
        """While :meth:`pairs_within` enumerates: the most sets it may examine."""

    # -- neighbourhoods ----------------------------------------------------------------------
    def neighborhood(self, s: int) -> int:
        """Relations adjacent to some relation of ``s``, not in ``s`` (memoized per set)."""
        hit = self._nb.get(s)
        if hit is None:
            hit, m, nbs = 0, s, self.neighbors
            while m:
                low = m & -m
                hit |= nbs[low.bit_length() - 1]
                m ^= low
            self._nb[s] = hit
        return hit & ~s

    def _components(self) -> list[int]:
        seen, out = 0, []
        for i in range(self.n):
            if seen >> i & 1:
                continue
            reach = frontier = 1 << i
            while frontier:
                frontier = self.neighborhood(reach) & ~reach
                reach |= frontier
            out.append(reach)
            seen |= reach
        return out

    # -- EnumerateCsg / EnumerateCmp ---------------------------------------------------------
    def _grow(self, s: int, x: int, out: list[int]) -> None:
        """``EnumerateCsgRec``: append every connected ``s ∪ t`` with ``t`` a non-empty set of
        relations reachable from ``s`` without entering ``x`` (``x`` holds ``s``). The
        recursion runs on an explicit stack: the same sets, each once, in another order."""
        nbs, memo, budget = self.neighbors, self._nb, self._budget
        examined = self.examined
        stack = [(s, x)]
        try:
            while stack:
                s, x = stack.pop()
                nb = memo.get(s)  # neighborhood(s), inlined
                if nb is None:
                    nb, m = 0, s
                    while m:
                        low = m & -m
                        nb |= nbs[low.bit_length() - 1]
                        m ^= low
                    memo[s] = nb
                nb &= ~x
                if not nb:
                    continue
                # counted before they are built: a star's hub has 2^(n-1) - 1 of them, which
                # the budget must refuse without making the list
                examined += (1 << nb.bit_count()) - 1
                if budget is not None and examined > budget:
                    raise _OverBudget
                xn = x | nb
                t = nb
                while t:
                    out.append(s | t)
                    stack.append((s | t, xn))
                    t = (t - 1) & nb
        finally:
            self.examined = examined

    def csgs(self) -> list[int]:
        """Every connected subset of the graph, each once (``EnumerateCsg``)."""
        if self._csgs is None and self.compiled:
            self._enumerate()  # the compiled kernel finds the csgs with the pairs
        if self._csgs is None:
            out: list[int] = []
            for i in reversed(range(self.n)):
                v = 1 << i
                out.append(v)
                self.examined += 1
                self._grow(v, (v << 1) - 1, out)
            self._csgs = out
        return self._csgs

    # -- splits grouped by union -------------------------------------------------------------
    def halves(self) -> dict[int, list[int]]:
        """Expression → the left sides of its splits in ONE order, sorted: the side holding
        the expression's lowest relation (``EnumerateCmp`` finds each pair with its csg on
        that side). The csg-cmp pairs grouped by their union, plus the cross-product splits of
        unions of whole components. Computed once; what a symmetric cost model (``cout``)
        joins, and what :meth:`lefts` doubles into both orders."""
        if self._halves is None:
            self._enumerate()
        if self._halves is None:  # the compiled kernel's arrays, as lists on first read
            self._halves = self._halves_of_flat()
        return self._halves

    def _enumerate(self) -> None:
        """Enumerate the csg-cmp pairs once and count them. Of a connected graph the compiled
        kernel keeps its pairs as arrays only (:meth:`flat_halves`), and :meth:`halves` makes
        its lists when first read: a batch cost model reads the arrays alone, and on
        large-clique-17 the 223,771 pairs' lists cost about 15 ms."""
        if self._enumerated:
            return
        by_union = None
        if self.compiled:
            pairs = self._compiled_halves()
        else:
            by_union = self._python_halves()
            pairs = sum(len(got) for got in by_union.values())
        comps = self.components
        if len(comps) > 1:
            if by_union is None:
                by_union = self._halves_of_flat()
            for u in self.component_unions():
                low = u & -u
                got = [m for m in _submasks_over(u, comps) if m & low]
                self.examined += 2 * len(got)
                got.sort()
                by_union[u] = got
                pairs += len(got)
        self._pairs = pairs
        self._halves = by_union
        self._enumerated = True

    def _halves_of_flat(self) -> dict[int, list[int]]:
        """The compiled enumeration's arrays (:attr:`_flat`) as :meth:`halves`' lists."""
        if self._flat is None:
            return {}
        unions, bounds, ordered = self._flat
        lefts = ordered.tolist()
        cuts = bounds.tolist()
        return dict(zip(unions.tolist(), (lefts[a:b] for a, b in zip(cuts[:-1], cuts[1:],
                                                                       strict=True)),
                        strict=True))

    def _python_halves(self) -> dict[int, list[int]]:
        """:meth:`halves` of the connected components in Python: ``EnumerateCmp`` of every csg
        ``s1`` (each ``s2`` whose lowest relation is above ``s1``'s, so each unordered pair is
        found once), inlined — the same pairs and the same count of sets examined (both
        independent of the order in which ``EnumerateCsgRec`` visits its sets, which here is
        a stack's), with the per-call work of recursive methods (attribute lookups, a list
        per call) left out of the loop that runs once per csg-cmp pair."""
        csgs = self.csgs()
        nbs, memo, budget = self.neighbors, self._nb, self._budget
        memo_get = memo.get
        examined = self.examined
        by_union: dict[int, list[int]] = {}
        union_get = by_union.get
        try:
            for s1 in csgs:
                low = s1 & -s1
                x = ((low << 1) - 1) | s1
                nb = memo_get(s1)  # neighborhood(s1), inlined
                if nb is None:
                    nb, m = 0, s1
                    while m:
                        bit = m & -m
                        nb |= nbs[bit.bit_length() - 1]
                        m ^= bit
                    memo[s1] = nb
                nb &= ~x
                rest = nb
                while rest:  # EnumerateCmp: each neighbour v, then EnumerateCsgRec from it
                    v = rest & -rest
                    rest ^= v
                    examined += 1
                    got = union_get(s1 | v)
                    if got is None:
                        by_union[s1 | v] = [s1]
                    else:
                        got.append(s1)
                    stack = [(v, x | (((v << 1) - 1) & nb))]
                    while stack:
                        s, excluded = stack.pop()
                        grow = memo_get(s)
                        if grow is None:
                            grow, m = 0, s
                            while m:
                                bit = m & -m
                                grow |= nbs[bit.bit_length() - 1]
                                m ^= bit
                            memo[s] = grow
                        grow &= ~excluded  # (s is inside excluded)
                        if not grow:
                            continue
                        examined += (1 << grow.bit_count()) - 1
                        if budget is not None and examined > budget:
                            raise _OverBudget
                        wider = excluded | grow
                        t = grow
                        while t:
                            s2 = s | t
                            got = union_get(s1 | s2)
                            if got is None:
                                by_union[s1 | s2] = [s1]
                            else:
                                got.append(s1)
                            stack.append((s2, wider))
                            t = (t - 1) & grow
        finally:
            self.examined = examined
        for got in by_union.values():
            got.sort()
        return by_union

    def _compiled_halves(self) -> int:
        """Enumerate the connected components' pairs by the compiled enumeration
        (:mod:`~reopt.costmodel.ccp`) into :attr:`_flat` and return their count; also sets
        :meth:`csgs` and counts the sets examined."""
        from reopt.costmodel import ccp

        budget = (self._budget - self.examined) if self._budget is not None else 2**62
        found, unions, bounds, ordered, examined, over = ccp.enumerate_pairs(
            np.asarray(self.neighbors, dtype=np.int64), budget)
        self.examined += int(examined)
        if over:
            raise _OverBudget
        self._csgs = found.tolist()
        if not len(ordered):
            return 0
        self._flat = (unions, bounds, ordered)
        return len(ordered)

    def flat_halves(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """:meth:`halves` as three arrays — the expressions ascending, where each one's left
        sides start (and, last, where the final one's end), and every left side, ascending
        per expression — or None where the compiled enumeration did not make them (Python
        enumeration; a disconnected graph, whose cross-product splits are added after):
        what a batch of many OR nodes' splits reads (:meth:`CostModel.joins_batch`)."""
        self._enumerate()
        return self._flat if len(self.components) == 1 else None

    def halves_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`halves` as :meth:`flat_halves`' three arrays whichever enumeration made them:
        the compiled one's own, else made once from the lists (a Python enumeration, below
        :data:`COMPILED_FROM` relations; a disconnected graph's cross-product splits
        included) — what a symmetric model's batch of many OR nodes' splits reads
        (``cout``'s :meth:`~reopt.costmodel.models.CostModel.joins_batch`)."""
        flat = self.flat_halves()
        if flat is not None:
            return flat
        if self._halves_arrays is None:
            by_union = self.halves()
            unions = sorted(by_union)
            bounds = np.zeros(len(unions) + 1, dtype=np.int64)
            np.cumsum([len(by_union[u]) for u in unions], out=bounds[1:])
            lefts = np.fromiter((h for u in unions for h in by_union[u]), np.int64,
                                int(bounds[-1]))
            self._halves_arrays = (np.asarray(unions, dtype=np.int64), bounds, lefts)
        return self._halves_arrays

    def flat_lefts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`lefts` as three arrays, in the form of :meth:`flat_halves` — the expressions
        ascending, where each one's left sides start (and, last, where the final one's end),
        and every left side, both orders, ascending per expression — made once, from the
        compiled enumeration's arrays or else from :meth:`halves` (:meth:`halves_arrays`):
        what a batch of many OR nodes' splits in both orders reads (an asymmetric model's
        :meth:`~reopt.costmodel.models.CostModel.joins_batch`)."""
        if self._flat_lefts is None:
            unions, bounds, halves = self.halves_arrays()  # (either enumeration's)
            union = np.repeat(unions, np.diff(bounds))
            union, left = _by_union(np.concatenate((union, union)),
                                    np.concatenate((halves, union ^ halves)), self.n)
            starts = np.flatnonzero(np.diff(union, prepend=-1))
            self._flat_lefts = (union[starts], np.append(starts, len(left)).astype(np.int64),
                                left)
        return self._flat_lefts

    def halves_of(self, expr: int) -> list[int]:
        """``halves().get(expr, [])``, one expression's left sides, read off the compiled
        enumeration's arrays while :meth:`halves`' lists are not made: a cost model that
        answers in batches asks for a few expressions' splits only."""
        self._enumerate()
        if self._halves is not None or self._flat is None:
            return self.halves().get(expr, [])
        return _lefts_in(self._flat, expr)

    def lefts_of(self, expr: int) -> list[int]:
        """``lefts().get(expr, [])``, one expression's left sides in both orders, read off
        :meth:`flat_lefts` while :meth:`lefts`' lists are not made: a cost model that
        answers in batches asks for a few expressions' splits only (on clique-14-s0-4 the
        lists of its 44,096 splits cost about 30 ms). A graph the Python enumeration made
        (small) reads its lists."""
        self._enumerate()
        if self._lefts is not None or self._flat is None:
            return self.lefts().get(expr, [])
        return _lefts_in(self.flat_lefts(), expr)

    def split_count(self, expr: int) -> int:
        """``len(lefts_of(expr))``, without the list."""
        self._enumerate()
        if self._lefts is not None or self._flat is None:
            return len(self.lefts().get(expr, ()))
        a, b = _span(self.flat_lefts(), expr)
        return b - a

    def lefts(self) -> dict[int, list[int]]:
        """Expression → the left sides of its splits in both orders, sorted (the right side
        of ``left`` is ``expr ^ left``): :meth:`halves` and their complements. Computed
        once."""
        if self._lefts is None:
            self._lefts = {u: sorted([*got, *(u ^ h for h in got)])
                           for u, got in self.halves().items()}
        return self._lefts

    def splits(self, expr: int) -> list[tuple[int, int]]:
        """The splits ``(left, right)`` of one expression, both orders, sorted by left."""
        return [(left, expr ^ left) for left in self.lefts().get(expr, ())]

    def component_unions(self) -> list[int]:
        """Unions of two or more whole components (expressions only a cross product makes)."""
        comps = self.components
        out = []
        for pick in range(1, 1 << len(comps)):
            if pick & (pick - 1):
                out.append(sum(c for j, c in enumerate(comps) if pick >> j & 1))
        return out

    @property
    def pair_count(self) -> int:
        """Unordered splits of all expressions (csg-cmp pairs, plus cross-product splits of
        a disconnected graph)."""
        self._enumerate()
        return self._pairs

    def pairs_within(self, max_pairs: int) -> int | None:
        """The number of pairs (:attr:`pair_count`) if it is at most ``max_pairs``, else
        None — in time proportional to the smaller of the two: the enumeration stops once it
        has examined more than ``2 · max_pairs + n`` sets, which only a graph of more than
        ``max_pairs`` pairs makes it do (at most 2 · pairs + n). A graph within the budget
        keeps its enumeration: the optimizer that follows does not repeat it."""
        if not self._enumerated:
            start = self.examined
            self._budget = start + 2 * max_pairs + self.n
            try:
                self._enumerate()
                # the loops test the budget where they count a batch of sets, not after the
                # single sets counted last, and the two enumerations count in other orders:
                # one last test makes the refusal (and the sets examined) the same for both
                if self.examined > self._budget:
                    raise _OverBudget
            except _OverBudget:
                self._csgs, self._halves, self._flat, self.examined = None, None, None, start
                self._enumerated = False
                return None
            finally:
                self._budget = None
        return self._pairs if self._pairs <= max_pairs else None

    def expressions(self) -> list[int]:
        """Every valid expression, smaller ones first (popcount, then value)."""
        out = list(self.csgs())
        if len(self.components) > 1:
            out += self.component_unions()
        out.sort()
        out.sort(key=int.bit_count)  # (stable: by value within a size; no Python key call)
        return out

    def pair_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The splits as ``int64`` columns ``(union, left, right)``, grouped by union in
        :meth:`expressions` order, each group sorted by ``left`` (the batch form)."""
        by_union = self.lefts()
        unions: list[int] = []
        lefts: list[int] = []
        for e in self.expressions():
            got = by_union.get(e)
            if got:
                unions += [e] * len(got)
                lefts += got
        u = np.asarray(unions, dtype=np.int64)
        left = np.asarray(lefts, dtype=np.int64)
        return u, left, u ^ left

    # -- tests of single sets ----------------------------------------------------------------
    def is_connected(self, mask: int) -> bool:
        if not mask:
            return False
        reach = mask & -mask
        while True:
            grow = self.neighborhood(reach) & mask
            if not grow:
                return reach == mask
            reach |= grow


Flat = tuple[np.ndarray, np.ndarray, np.ndarray]
"""Splits as arrays: :meth:`JoinGraph.flat_halves`, :meth:`JoinGraph.flat_lefts`."""


def _span(flat: Flat, expr: int) -> tuple[int, int]:
    """Where ``expr``'s left sides start and end in splits given as arrays (0, 0: none)."""
    unions, bounds, _ = flat
    at = int(np.searchsorted(unions, expr))
    if at == len(unions) or unions[at] != expr:
        return 0, 0
    return int(bounds[at]), int(bounds[at + 1])


def _lefts_in(flat: Flat, expr: int) -> list[int]:
    """The left sides of ``expr`` in splits given as arrays."""
    a, b = _span(flat, expr)
    return flat[2][a:b].tolist()


class _OverBudget(Exception):
    """The enumeration examined more sets than :meth:`JoinGraph.pairs_within` allows."""


def _submasks_over(union: int, comps: list[int]) -> list[int]:
    """Non-empty proper sub-unions of whole components of ``union``."""
    parts = [c for c in comps if c & union]
    out = []
    for pick in range(1, (1 << len(parts)) - 1):
        out.append(sum(c for j, c in enumerate(parts) if pick >> j & 1))
    return out


def _by_union(union: np.ndarray, left: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The pairs ``(union, left)`` of relation sets of ``n`` relations ordered by union, each
    union's left sides ascending: one sort of the pairs packed into one number (``union``
    above ``left``; the pairs are distinct) where ``2n`` bits fit, else a lexsort (on
    large-clique-17's 223,771 pairs 6 ms against 12)."""
    if 2 * n <= 62:
        packed = np.sort((union << n) | left)
        return packed >> n, packed & ((1 << n) - 1)
    order = np.lexsort((left, union))
    return union[order], left[order]
