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

The pairs are computed once per join graph and grouped by their union (:meth:`JoinGraph.lefts`,
both orders, sorted), which serves top-down search (an expression's splits at once) and
bottom-up dynamic programming alike; :meth:`JoinGraph.pair_arrays` hands the same pairs to
batch callers as ``int64`` columns.

A disconnected graph is planned with cross products between components only: its expressions
are the csgs of each component plus the unions of two or more whole components, split into two
unions of whole components.

Relations are bits of a Python ``int``; the ``int64`` columns of the batch interface (the
final operator's pseudo-expression takes one bit more) hold at most :data:`MAX_RELATIONS`.
"""

from __future__ import annotations

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
        self._nb: dict[int, int] = {1 << i: nb for i, nb in enumerate(self.neighbors)}
        self.components = self._components()
        self._csgs: list[int] | None = None
        self._lefts: dict[int, list[int]] | None = None
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
        relations reachable from ``s`` without entering ``x``."""
        nb = self.neighborhood(s) & ~x
        if not nb:
            return
        # counted before they are built: a star's hub has 2^(n-1) - 1 of them, which the
        # budget must refuse without making the list
        self.examined += (1 << nb.bit_count()) - 1
        if self._budget is not None and self.examined > self._budget:
            raise _OverBudget
        subs = []
        t = nb
        while t:
            subs.append(t)
            t = (t - 1) & nb
        for t in subs:
            out.append(s | t)
        xn = x | nb
        for t in subs:
            self._grow(s | t, xn, out)

    def csgs(self) -> list[int]:
        """Every connected subset of the graph, each once (``EnumerateCsg``)."""
        if self._csgs is None:
            out: list[int] = []
            for i in reversed(range(self.n)):
                v = 1 << i
                out.append(v)
                self.examined += 1
                self._grow(v, (v << 1) - 1, out)
            self._csgs = out
        return self._csgs

    def complements(self, s1: int) -> list[int]:
        """Every ``s2`` forming a csg-cmp pair with the csg ``s1`` whose lowest relation is
        above ``s1``'s lowest (``EnumerateCmp``): each unordered pair is found once."""
        low = s1 & -s1
        x = ((low << 1) - 1) | s1
        nb = self.neighborhood(s1) & ~x
        out: list[int] = []
        for i in reversed(bits(nb)):
            v = 1 << i
            out.append(v)
            self.examined += 1
            self._grow(v, x | (((v << 1) - 1) & nb), out)
        return out

    # -- splits grouped by union -------------------------------------------------------------
    def lefts(self) -> dict[int, list[int]]:
        """Expression → the left sides of its splits, sorted (the right side of ``left`` is
        ``expr ^ left``; both orders of every pair are there): the csg-cmp pairs grouped by
        their union, plus the cross-product splits of unions of whole components. Computed
        once."""
        if self._lefts is not None:
            return self._lefts
        by_union: dict[int, list[int]] = {}
        pairs = 0
        for s1 in self.csgs():
            for s2 in self.complements(s1):
                u = s1 | s2
                got = by_union.get(u)
                if got is None:
                    by_union[u] = [s1, s2]
                else:
                    got.append(s1)
                    got.append(s2)
        for got in by_union.values():
            got.sort()
            pairs += len(got) >> 1
        comps = self.components
        if len(comps) > 1:
            for u in self.component_unions():
                got = _submasks_over(u, comps)
                self.examined += len(got)
                got.sort()
                by_union[u] = got
                pairs += len(got) >> 1
        self._pairs = pairs
        self._lefts = by_union
        return by_union

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
        self.lefts()
        return self._pairs

    def pairs_within(self, max_pairs: int) -> int | None:
        """The number of pairs (:attr:`pair_count`) if it is at most ``max_pairs``, else
        None — in time proportional to the smaller of the two: the enumeration stops once it
        has examined more than ``2 · max_pairs + n`` sets, which only a graph of more than
        ``max_pairs`` pairs makes it do (at most 2 · pairs + n). A graph within the budget
        keeps its enumeration: the optimizer that follows does not repeat it."""
        if self._lefts is None:
            start = self.examined
            self._budget = start + 2 * max_pairs + self.n
            try:
                self.lefts()
            except _OverBudget:
                self._csgs, self._lefts, self.examined = None, None, start
                return None
            finally:
                self._budget = None
        return self._pairs if self._pairs <= max_pairs else None

    def expressions(self) -> list[int]:
        """Every valid expression, smaller ones first (popcount, then value)."""
        out = list(self.csgs())
        if len(self.components) > 1:
            out += self.component_unions()
        out.sort(key=lambda m: (m.bit_count(), m))
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


class _OverBudget(Exception):
    """The enumeration examined more sets than :meth:`JoinGraph.pairs_within` allows."""


def _submasks_over(union: int, comps: list[int]) -> list[int]:
    """Non-empty proper sub-unions of whole components of ``union``."""
    parts = [c for c in comps if c & union]
    out = []
    for pick in range(1, (1 << len(parts)) - 1):
        out.append(sum(c for j, c in enumerate(parts) if pick >> j & 1))
    return out
