"""A maintained relation's source tuples on numpy, for re-derivation to start from the
children that are there.

An update re-derives a stale group from its source tuples (for the optimizer: an OR node's
SearchSpace alternatives, R6–R8). On a large query most of them derive nothing: a child they
join with is absent from the bounded complete layer, or a comparison of the rule fails (a
scan's ``lExpr = 0`` for a join). Joined one by one in the generated loops, each still costs
a Python iteration. The source relation never changes between evaluations (no statistics
built-in runs before the maintained stratum), so when a from-scratch evaluation left it on a
frame, every source tuple gets, once, an id for its group and for each group it joins with,
and each rule variant a mask of the tuples passing its comparisons; an update then picks a
rank's source tuples for a variant with a few array operations — the groups' runs, the
variant's mask, and whether each child group is held — and hands only those to the loop.

What a variant is tested with is read off it (:func:`~.maintenance.source_tests`); a test
that cannot be evaluated exactly on the columns here (an order comparison of strings, columns
of different types) is left to the loop, which applies every test anyway: dropping fewer
tuples is always exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from reopt.costmodel.builtins import STRING
from reopt.evaluator.frames import STRINGS, Frame, keys, runs_by
from reopt.evaluator.python_engine import key_of

PICK_FROM = 256
"""Source tuples from which a source relation's are picked on arrays (below, the loops over
them cost less than the arrays' fixed cost)."""


class SourceRows:
    """The source relation's tuples (``rows``, an object array in ``frame``'s row order),
    their group ids, and per variant its exact tests as arrays (:meth:`pick`)."""

    @staticmethod
    def of(rows: np.ndarray, frame: Frame, key: tuple[int, ...],
           tests: Mapping[int, Sequence[tuple[str, Any, Any]]],
           held: Iterable[tuple]) -> SourceRows | None:
        """The arrays for these tuples, or None where ids could disagree with Python's
        equality (NaN in a key column: one id here, unequal keys there)."""
        if any(frame.cols[f"c{j}"].dtype.kind == "f" and np.isnan(frame.cols[f"c{j}"]).any()
               for j in range(len(frame.cols))):
            return None
        try:
            return SourceRows(rows, frame, key, tests, held)
        except _Unequal:
            return None

    def __init__(self, rows: np.ndarray, frame: Frame, key: tuple[int, ...],
                 tests: Mapping[int, Sequence[tuple[str, Any, Any]]],
                 held: Iterable[tuple]):
        """``key``: the source's columns holding the group key; ``tests``: per variant (by
        id) its :func:`~.maintenance.source_tests`; ``held``: the groups the maintained
        relation holds now (kept up to date by :meth:`set_held`)."""
        self.rows = rows
        n = frame.height
        col = [frame.cols[f"c{j}"] for j in range(len(frame.cols))]
        kinds = [frame.types[f"c{j}"] for j in range(len(frame.cols))]
        sets = [key]
        for ts in tests.values():
            for kind, cols, _ in ts:
                if kind == "held" and cols not in sets and len(cols) == len(key) and all(
                        col[a].dtype == col[b].dtype and kinds[a] == kinds[b]
                        for a, b in zip(cols, key)):  # noqa: B905
                    sets.append(cols)
        # one id space over the group keys and every key a held test reads
        joint = [np.concatenate([col[s[j]] for s in sets]) for j in range(len(key))]
        ids = keys([a.astype(np.int64) if a.dtype == np.bool_ else a for a in joint],
                   n * len(sets))
        uniq, first, ids = np.unique(ids, return_index=True, return_inverse=True)
        ids = ids.astype(np.int64).reshape(-1)
        self.ids = {s: ids[i * n:(i + 1) * n] for i, s in enumerate(sets)}
        self.id_of: dict[tuple, int] = {}
        for i, p in enumerate(first.tolist()):
            s = sets[p // n]
            self.id_of[key_of(s)(rows[p % n])] = i
        if len(self.id_of) != len(uniq):  # two ids for keys equal in Python
            raise _Unequal
        self.held = np.zeros(len(uniq), dtype=bool)
        for g in held:
            self.set_held(g, True)
        order, starts = runs_by(frame, [f"c{j}" for j in key])
        self.order = order
        group = self.ids[key][order[starts]] if n else np.empty(0, np.int64)
        bounds = np.append(starts, n)
        self.start = np.zeros(len(uniq), dtype=np.int64)
        self.count = np.zeros(len(uniq), dtype=np.int64)
        self.start[group] = bounds[:-1]
        self.count[group] = np.diff(bounds)
        self.masks: dict[int, np.ndarray | None] = {}
        self.held_by: dict[int, list[np.ndarray]] = {}
        for v, ts in tests.items():
            mask = None
            for kind, what, sides in ts:
                if kind == "held":
                    if what in self.ids:
                        self.held_by.setdefault(v, []).append(self.ids[what])
                    continue
                m = _compare(what, sides, col, kinds, n)
                if m is not None:
                    mask = m if mask is None else mask & m
            self.masks[v] = mask

    def set_held(self, g: tuple, held: bool) -> None:
        """Group ``g`` of the maintained relation is now held (or not)."""
        i = self.id_of.get(g)
        if i is not None:
            self.held[i] = held

    def pick(self, v: int, groups: Sequence[tuple]) -> list[tuple]:
        """The source tuples of ``groups`` that pass variant ``v``'s exact tests."""
        gids = np.fromiter((i for g in groups if (i := self.id_of.get(g)) is not None),
                           np.int64)
        count = self.count[gids]
        total = int(count.sum())
        if not total:
            return []
        lo = np.repeat(self.start[gids] - (np.cumsum(count) - count), count)
        pos = self.order[lo + np.arange(total, dtype=np.int64)]
        mask = self.masks.get(v)
        keep = mask[pos] if mask is not None else np.ones(total, dtype=bool)
        for ids in self.held_by.get(v, ()):
            keep &= self.held[ids[pos]]
        return self.rows[pos[keep]].tolist()


class _Unequal(Exception):
    """Ids that do not follow Python's equality of keys (:meth:`SourceRows.of`)."""


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
