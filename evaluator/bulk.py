"""A rank's re-derivation set at a time, on frames.

An update re-derives the maintained relation's stale groups, and the parents a changed child
reaches, a rank at a time (:mod:`.maintenance`): a rank's groups read only lower ranks, so
each rule runs once over all their source tuples. In a large round (an adaptive loop's batch
of observations) that is thousands of groups and tens of thousands of source tuples a rank;
through the generated loops each candidate costs a hash lookup per child it reads and a
Python call per built-in (about 4 µs on the optimizer's rules). Here a rank's source tuples
run through a variant as one frame, on the ops of the from-scratch frame path
(:class:`~.columnar.ColumnarStratum`): the delta's scan binds the source columns, each
built-in is called once through its batch form, comparisons are vectorized.

What differs from a stratum evaluated on frames is the relations the variant joins with: the
complete layer's, held as tuples and changing rank by rank as groups settle — a frame of one
made whole for every rank would cost what it saves. A scan of one reads the tuples matching
the bindings' distinct keys instead, looked up in the relation's index (one lookup per child
read, not per source tuple) and joined to the bindings as a small frame.

The variant derives the tuples the tuple engine's loops derive, as many times: in the form
that reads each distinct value of a keyed scan's columns once (``distinct``: a bounded
layer's re-derivation; :func:`~.python_engine._source`), each key's matching tuples are
projected on the columns read and made distinct first, as those loops visit them. A variant
whose scans are not all of that shape (a relation scanned without a bound key, or without
its delta, or by columns of another type than the bindings') raises :class:`Unframed`; the
caller runs it on tuples.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reopt.evaluator.columnar import ColumnarStratum, names, var_column
from reopt.evaluator.compiler import BOUND, DELTA, FULL, SAME, Scan, Variant, match_terms
from reopt.evaluator.frames import Frame, distinct
from reopt.evaluator.python_engine import PythonEngine, Relation, key_of


class Unframed(Exception):
    """A variant this path cannot run on frames (module doc): run it on tuples."""


class RankFrames(ColumnarStratum):
    """Variants run on frames over relations held as tuples (module doc); it holds no
    frames, so one is made for each run."""

    def __init__(self, engine: PythonEngine, rels: Mapping[str, Relation],
                 distinct_values: bool):
        """``rels``: the relations the variants' scans read (the complete layer);
        ``distinct_values``: derive as the tuple engine's distinct form does."""
        self._frames_of(engine, {}, ())
        self.rels = rels
        self.distinct_values = distinct_values

    def derive(self, v: Variant, source: str, delta: Frame) -> Frame:
        """The head tuples ``v`` derives from the tuples ``delta`` of ``source`` (a bag);
        :class:`Unframed` where it cannot run here."""
        return self.run_variant(v, {source: delta})

    def _scan(self, b: Frame, op: Scan, delta: Mapping[str, Frame]) -> Frame:
        if op.version == DELTA:
            return super()._scan(b, op, delta)
        return self._scan_rows(b, op, self._matching(b, op))

    def _matching(self, b: Frame, op: Scan) -> Frame:
        """The tuples of ``op``'s relation whose bound columns hold a binding's values, as
        a frame of the columns the scan reads (made distinct where the tuple engine's
        distinct form reads distinct values: module doc)."""
        if op.version != FULL:
            raise Unframed(f"{op.pred} scanned {op.version}")
        checks, binds = match_terms(op.args, {c[1:] for c in b.cols})
        keyed = [(j, kind, x) for j, kind, x in checks if kind != SAME]  # (the loops' key)
        keys = [(j, x) for j, kind, x in keyed if kind == BOUND]
        types = self.types[op.pred]
        if not keys or any(b.types[var_column(x)] != types[j] for j, x in keys):
            raise Unframed(f"{op.pred} scanned without a key of its columns' types")
        probe = names(len(keys))
        wanted = distinct(b.select([(var_column(x), c) for (_, x), c in zip(keys, probe,
                                                                        strict=True)]))
        values = wanted.rows(probe)
        if len(keys) < len(keyed):  # (constants in the key, as the loops look it up)
            values = [_key(keyed, v) for v in values]
        idx = self.rels[op.pred].index(tuple(j for j, _, _ in keyed))
        read = sorted({j for j, _, _ in checks} | {j for j, _ in binds}
                      | {x for _, kind, x in checks if kind == SAME})
        get, rows = key_of(tuple(read)), []
        add = rows.extend
        if (self.distinct_values and not op.negated and binds
                and len(keyed) + len(binds) < len(op.args) and len(keyed) == len(checks)):
            for k in values:  # (the loops' distinct values, per key: tied tuples read once)
                add(dict.fromkeys(map(get, idx.get(k, ()))))
        else:
            for k in values:
                add(map(get, idx.get(k, ())))
        return Frame.from_rows(rows, [f"c{j}" for j in read], [types[j] for j in read])


def _key(keyed: list[tuple[int, str, Any]], bound: tuple) -> tuple:
    """A lookup key of ``keyed`` (a scan's checks but repeated variables, in order): the
    bound variables' values ``bound`` in turn, the constants as they are."""
    values = iter(bound)
    return tuple(next(values) if kind == BOUND else x for _, kind, x in keyed)
