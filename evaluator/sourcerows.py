"""A maintained relation's source tuples on numpy, for re-derivation to start from the
children that are there.

An update re-derives a stale group from its source tuples (for the optimizer: an OR node's
SearchSpace alternatives, R6–R8). On a large query most of them derive nothing: a child they
join with is absent from the bounded complete layer, or a comparison of the rule fails (a
scan's ``lExpr = 0`` for a join). Joined one by one in the generated loops, each still costs
a Python iteration. The source relation never changes between evaluations (no statistics
built-in runs before the maintained stratum), so when a from-scratch evaluation left it on a
frame, its tuples are ordered once into runs by group, each gets the hash of every group
key it joins with, and each rule variant a mask of the tuples passing its comparisons; an
update then picks a rank's source tuples for a variant with a few array operations — the
groups' runs, the variant's mask, and whether each child group is held (its hash among the
held groups', counted per hash) — and hands only those to the loop.

What a variant is tested with is read off it (:func:`~.maintenance.source_tests`); a test
that cannot be evaluated exactly on the columns here (an order comparison of strings, columns
of different types) is left to the loop, which applies every test anyway: dropping fewer
tuples is always exact.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any

import numpy as np

from reopt.costmodel.builtins import STRING
from reopt.evaluator.frames import (
    STRINGS,
    Frame,
    Index,
    KeyIndex,
    PackedKeys,
    row_hash,
    runs_by,
)

PICK_FROM = 256
"""Source tuples from which a source relation's, and a batch's, are picked on arrays (below,
the loops over them cost less than the arrays' fixed cost: a pick costs tens of µs)."""


BUILD_AFTER = 2.0
"""The share of a source relation's tuples made from its columns after which they are all
built at once instead (:class:`SourceRows`): made from ten columns, a tuple costs about
0.5 µs, taken from the built array 0.03, and building them all about 1.1 µs a tuple (the
relation's set with them; large-clique-14 and -17, 115,000 and 224,000 SearchSpace tuples:
138 and 236 ms). Building once as many were made one by one as the build would cost keeps a
session within twice the better of the two whatever it reads next (the rent-or-buy rule).
Since a rank's re-derivation reads large batches on frames (:mod:`.bulk`), tuples are made
only for small batches and the parents' reach: at a quarter (before), an adaptive round after
a rebuild paid the build for a few thousand tuples (large-clique-14's round 2: 291-298 →
208-232 ms at 2)."""


COMPARED_BEFORE_INDEX = 16
"""Probes of some columns answered by comparing their packed values with each
(:meth:`SourceRows._index`) before those are sorted instead: on large-tree-18's 42,000
SearchSpace tuples a pass costs about 7 µs and the sort about 0.4 ms, some 57 passes, so a
session that keeps probing pays at most about 1.3 sorts, and one that probes a key or two
(a first update) none. (Counting scans instead, whatever their probes, cost
large-clique-17's first update, which probes dozens of keys a call, 5-20 ms more in
short A/B runs.)"""


class SourceRows:
    """The source relation's tuples on ``frame``'s columns, their groups' runs, per held test
    the hash of the group each tuple joins with, and per variant its comparisons as a mask
    (:meth:`pick`). Only the tuples asked for are made Python tuples (:meth:`_tuples`): a
    session's first update reads a few groups of a source relation a from-scratch evaluation
    left on a frame, and building all its tuples first cost most of that update (a
    115,000-tuple SearchSpace: about 40 ms, and 10 more for an index by group)."""

    @staticmethod
    def of(rows: np.ndarray | None, frame: Frame, key: tuple[int, ...],
           tests: Mapping[int, Sequence[tuple[str, Any, Any]]],
           held: Iterable[tuple], build: Callable[[], np.ndarray | None] | None = None
           ) -> SourceRows | None:
        """The arrays for these tuples, or None where runs could disagree with Python's
        equality of keys (then the loops take every tuple)."""
        try:
            return SourceRows(rows, frame, key, tests, held, build)
        except _Unequal:
            return None

    def __init__(self, rows: np.ndarray | None, frame: Frame, key: tuple[int, ...],
                 tests: Mapping[int, Sequence[tuple[str, Any, Any]]],
                 held: Iterable[tuple], build: Callable[[], np.ndarray | None] | None = None):
        """``rows``: the tuples as an object array in ``frame``'s row order where they are
        built already (picked from it then), else None (made from the columns, until as many
        were made as :data:`BUILD_AFTER` of them: then ``build`` gives the array, if it
        can: a session that reads much of the relation pays the build once); ``key``:
        the source's columns holding the group key; ``tests``: per variant (by id) its
        :func:`~.maintenance.source_tests`; ``held``: the groups the maintained relation
        holds now (kept up to date by :meth:`set_held`).

        Whether a tuple's child group is held is told by the hash of the child's key
        (:func:`~.frames.row_hash`), counted per hash among the held groups: keys that
        collide only make a tuple look held, which keeps it — never drops one that
        derives."""
        self._rows, self._build, self._made = rows, build, 0
        n = self.height = frame.height
        col = [frame.cols[f"c{j}"] for j in range(len(frame.cols))]
        kinds = [frame.types[f"c{j}"] for j in range(len(frame.cols))]
        self._col, self._kinds = col, kinds
        self._hashed: dict[tuple[int, ...], KeyIndex | Index] = {}
        """Columns → the tuples by their values packed into one number where they pack
        (sorted by radix passes: a few ms on a large relation, against 6-8 for a sort of
        hashes), else by the hash of their values (:meth:`readers`)."""
        order, starts = runs_by(frame, [f"c{j}" for j in key])
        self.order = order
        bounds = np.append(starts, n).tolist()
        groups = self._tuples(order[starts], key)
        self.run: dict[tuple, int] = dict(zip(groups, range(len(groups))))  # noqa: B905
        """Group → the number of its run (:attr:`start`, :attr:`count`): every group the
        source's tuples name."""
        if len(self.run) != len(groups):  # two runs of keys equal in Python
            raise _Unequal
        self.start = np.asarray(starts, dtype=np.int64)
        self.count = np.diff(np.asarray(bounds, dtype=np.int64))
        self._spanned: tuple[Sequence[tuple], np.ndarray, np.ndarray] | None = None
        """The last groups asked about and their runs' starts and counts (:meth:`_spans`):
        a rank's variants pick from the same groups one after the other."""
        firsts = order[starts]
        self._group_hash: list[int] = row_hash([col[j][firsts] for j in key],
                                               len(firsts)).tolist()
        """Per run, the hash of its group's key (the groups a held test can find: the
        source's), hashed on the runs' first tuples only."""
        self.held_count: dict[int, int] = {}
        self._held: np.ndarray | None = None
        self.hold(held)
        self._key, self._tests = key, tests
        self._hashes: dict[tuple[int, ...], np.ndarray] = {}
        """Columns → the hash of every tuple's values there (:meth:`_held_hashes`)."""
        self._compared: dict[Any, np.ndarray | None] = {}
        """A comparison (its function and sides) → its mask (:meth:`_variant_tests`)."""
        self._variant: dict[int, tuple[np.ndarray | None, list[np.ndarray]]] = {}
        """Variant → its comparisons' mask and the hashes its held tests read, made when it
        first picks (a session's first update picks for a few of them) from masks and
        hashes made once for every variant (a rule and its cut test the same)."""

    def hold(self, held: Iterable[tuple]) -> None:
        """The groups the maintained relation holds are now ``held`` (all of them: after it
        was evaluated afresh, these arrays of a source relation kept)."""
        self.held_count, self._held = {}, None
        for g in held:
            self.set_held(g, True)

    def set_held(self, g: tuple, held: bool) -> None:
        """Group ``g`` of the maintained relation is now held (or no longer)."""
        h = self.hash_of(g)
        if h is None:
            return  # (no source tuple joins a group that has no source tuples)
        n = self.held_count.get(h, 0) + (1 if held else -1)
        if n:
            self.held_count[h] = n
        else:
            del self.held_count[h]
        self._held = None

    def hash_of(self, g: tuple) -> int | None:
        """The hash of group ``g``'s key, None where no source tuple names it."""
        at = self.run.get(g)
        return None if at is None else self._group_hash[at]

    def _variant_tests(self, v: int) -> tuple[np.ndarray | None, list[np.ndarray]]:
        """Variant ``v``'s comparisons evaluated here as one mask (None: none is), and per
        held test the hash of the group each tuple joins with (tests on columns of other
        types than the key's are left to the loop)."""
        made = self._variant.get(v)
        if made is not None:
            return made
        ts = self._tests.get(v, ())
        mask, held = None, []
        col, kinds, key = self._col, self._kinds, self._key
        for kind, what, sides in ts:
            if kind == "held":
                if len(what) == len(key) and all(
                        col[a].dtype == col[b].dtype and kinds[a] == kinds[b]
                        for a, b in zip(what, key)):  # noqa: B905
                    held.append(self._held_hashes(what))
                continue
            m = self._comparison(what, sides)
            if m is not None:
                mask = m if mask is None else mask & m
        made = self._variant[v] = (mask, held)
        return made

    def _comparison(self, compare: Any, sides: tuple) -> np.ndarray | None:
        """:func:`_compare` on these columns, made once per comparison."""
        try:
            return self._compared[compare, sides]
        except KeyError:
            m = self._compared[compare, sides] = _compare(compare, sides, self._col,
                                                          self._kinds, self.height)
            return m
        except TypeError:  # (a constant that does not hash: not kept)
            return _compare(compare, sides, self._col, self._kinds, self.height)

    def _held_hashes(self, cols: tuple[int, ...]) -> np.ndarray:
        """The hash of every tuple's values in ``cols`` (:func:`~.frames.row_hash`)."""
        h = self._hashes.get(cols)
        if h is None:
            h = self._hashes[cols] = row_hash([self._col[j] for j in cols], self.height)
        return h

    def _spans(self, groups: Sequence[tuple]) -> tuple[np.ndarray, np.ndarray]:
        """The starts and counts of the runs of those of ``groups`` that have source tuples,
        looked up in C; the same list object (unchanged) asked again is answered from the
        last call."""
        last = self._spanned
        if last is not None and last[0] is groups:
            return last[1], last[2]
        at = np.fromiter(map(self.run.get, groups, repeat(-1)), np.int64, len(groups))
        at = at[at >= 0]
        start, count = self.start[at], self.count[at]
        self._spanned = (groups, start, count)
        return start, count

    def tuples(self, groups: Sequence[tuple]) -> int:
        """How many source tuples ``groups`` have."""
        return int(self._spans(groups)[1].sum())

    def of_groups(self, groups: Sequence[tuple]) -> list[tuple]:
        """Every source tuple of ``groups``."""
        return self._tuples(self._positions(groups))

    def _positions(self, groups: Sequence[tuple]) -> np.ndarray:
        """The rows of the source tuples of ``groups``, run after run."""
        start, count = self._spans(groups)
        total = int(count.sum())
        if not total:
            return np.empty(0, dtype=np.int64)
        lo = np.repeat(start - (np.cumsum(count) - count), count)
        return self.order[lo + np.arange(total, dtype=np.int64)]

    def _tuples(self, pos: np.ndarray, cols: Sequence[int] | None = None) -> list[tuple]:
        """The tuples at rows ``pos`` (their columns ``cols``; all by default) as Python
        values, equal to those a frame's tuples are built as (:meth:`Frame.rows`: strings
        decoded, numbers through ``tolist``)."""
        if cols is None:
            if self._rows is None and self._build is not None and (
                    self._made > BUILD_AFTER * self.height):
                self._rows, self._build = self._build(), None
            if self._rows is not None:
                return self._rows[pos].tolist()
            self._made += len(pos)
            cols = range(len(self._col))
        if not len(pos):
            return []
        values = [(STRINGS.decode(self._col[j][pos]) if self._kinds[j] == STRING
                   else self._col[j][pos]).tolist() for j in cols]
        return list(zip(*values, strict=True))

    def pick(self, v: int, groups: Sequence[tuple]) -> list[tuple]:
        """The source tuples of ``groups`` that pass variant ``v``'s tests evaluated here."""
        return self.rows_at(self.picked(v, groups))

    def rows_at(self, pos: np.ndarray) -> list[tuple]:
        """The source tuples at rows ``pos`` (of :meth:`picked`)."""
        return self._tuples(pos)

    def frame_at(self, pos: np.ndarray) -> Frame:
        """The source tuples at rows ``pos`` (of :meth:`picked`) as a frame, columns ``c<j>``:
        a rank's re-derivation on frames reads them without making them tuples."""
        return Frame({f"c{j}": c[pos] for j, c in enumerate(self._col)},
                     {f"c{j}": k for j, k in enumerate(self._kinds)}, len(pos))

    def picked(self, v: int, groups: Sequence[tuple]) -> np.ndarray:
        """The rows of the source tuples of ``groups`` that pass variant ``v``'s tests
        evaluated here (:meth:`pick`)."""
        pos = self._positions(groups)
        total = len(pos)
        if not total:
            return pos
        mask, tests = self._variant_tests(v)
        keep = mask[pos] if mask is not None else np.ones(total, dtype=bool)
        if tests:
            held = self._held
            if held is None:  # (sorted, for binary searches; made again after changes)
                held = self._held = np.sort(np.fromiter(self.held_count, np.uint64,
                                                        len(self.held_count)))
            if not len(held):
                return pos[:0]
            for hashes in tests:
                at = hashes[pos[keep]]
                i = np.minimum(np.searchsorted(held, at), len(held) - 1)
                keep[keep] = held[i] == at
        return pos[keep]

    def readers(self, cols: tuple[int, ...], keys: Collection[tuple]) -> list[tuple] | None:
        """The tuples whose columns ``cols`` hold one of ``keys`` (distinct) — the source
        tuples a join on those columns reads — found by binary searches of their values
        packed into one number (:class:`~.frames.KeyIndex`), or where they do not pack of
        their hashes, confirmed on the columns (a collision costs a comparison, never a
        wrong tuple); None when a key's values cannot be compared as the columns hold them
        (then the caller joins in Python). The first call for some columns sorts them (a
        few milliseconds, where a hash index of the tuples costs tens of them on a large
        relation)."""
        values = self._probe(cols, keys)
        if values is None:
            return None
        if not keys:
            return []
        idx = self._index(cols, len(keys))
        if isinstance(idx, PackedKeys):  # (exact keys: nothing to confirm)
            return self._tuples(idx.scan(values, len(keys)))
        if isinstance(idx, KeyIndex):
            return self._tuples(idx.probe(values, len(keys))[1])
        which, pos = idx.probe(row_hash(values, len(keys)))  # (the key probed, the tuple)
        if not len(pos):
            return []
        same = np.ones(len(pos), dtype=bool)
        for j, v in zip(cols, values):  # noqa: B905
            same &= self._col[j][pos] == v[which]
        return self._tuples(pos[same])

    def _index(self, cols: tuple[int, ...], probes: int) -> PackedKeys | KeyIndex | Index:
        """What :meth:`readers` looks ``probes`` keys of ``cols`` up in: their values
        packed and compared with each key while the keys so compared stay within
        :data:`COMPARED_BEFORE_INDEX` (a session's first update probes a key or two), else
        sorted into a :class:`~.frames.KeyIndex` (the rent-or-buy rule); where they do not
        pack, an index of their hashes."""
        idx = self._hashed.get(cols)
        if idx is None:
            n, columns = self.height, [self._col[j] for j in cols]
            idx = self._hashed[cols] = PackedKeys.of(columns, n) or Index(
                row_hash(columns, n), np.arange(n, dtype=np.int64))
        if isinstance(idx, PackedKeys) and idx.compared + probes > COMPARED_BEFORE_INDEX:
            idx = self._hashed[cols] = idx.index()
        return idx

    def _probe(self, cols: tuple[int, ...], keys: Collection[tuple]) -> list[np.ndarray] | None:
        """The values of ``keys`` per column, as the columns ``cols`` hold them (string
        codes: -1 for a string no frame holds), so that equal values compare and hash
        alike; None unless every column holds integers or strings and every key's value
        there is one."""
        arrays = []
        for k, j in enumerate(cols):
            values = [key[k] for key in keys]
            if self._kinds[j] == STRING:
                if not all(type(x) is str for x in values):
                    return None
                code = STRINGS.code.get
                arrays.append(np.fromiter((code(x, -1) for x in values), np.int64, len(values)))
            elif self._col[j].dtype == np.int64:
                if not all(type(x) is int and -2**63 <= x < 2**63 for x in values):
                    return None
                arrays.append(np.fromiter(values, np.int64, len(values)))
            else:
                return None
        return arrays


class _Unequal(Exception):
    """Runs that do not follow Python's equality of keys (:meth:`SourceRows.of`)."""


def _compare(compare: Any, sides: tuple, col: list[np.ndarray], kinds: list[str], n: int
             ) -> np.ndarray | None:
    """A comparison of source columns and constants as a mask, or None where the columns
    cannot decide it exactly (strings compared by order, mixed kinds, unknown values)."""
    vals = []
    kind = None
    for k, x in sides:
        if k == "col":
            if kind is not None and kinds[x] != kind:
                return None
            kind = kinds[x]
            vals.append(col[x])
        else:
            vals.append(x)
    if kind == STRING:
        if compare.__name__ not in ("eq", "ne"):
            return None  # (codes are not in the strings' order)
        coded = []
        for (k, _), v in zip(sides, vals):  # noqa: B905
            if k == "col":
                coded.append(v)
            elif not isinstance(v, str):
                return None
            else:
                c = STRINGS.code.get(v)
                coded.append(np.int64(-1) if c is None else np.int64(c))  # -1: no such code
        vals = coded
    elif any(k == "const" and (isinstance(x, str) or x is None) for k, x in sides):
        return None
    out = compare(vals[0], vals[1])
    if not isinstance(out, np.ndarray) or out.dtype != np.bool_ or out.shape != (n,):
        return None
    return out
