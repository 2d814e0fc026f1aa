"""Set-at-a-time evaluation of a stratum on columnar frames (:mod:`.frames`).

The tuple engine (:mod:`.python_engine`) runs each rule variant as generated nested loops and
calls the built-ins once per tuple; on a large plan space that is hundreds of thousands of
Python calls per rule. Here the same compiled ops run a whole relation at a time:

* a :class:`~.compiler.Scan` is a join of the bindings with the relation on the variables
  already bound (an anti-join when negated, a cross join when nothing is bound), after the
  constant and repeated-variable checks filtered the relation;
* a :class:`~.compiler.Call` is one call of the built-in's batch form
  (:mod:`reopt.costmodel.builtins`) over the bindings' columns, its ``row`` output taking the
  bindings it came from;
* a :class:`~.compiler.Filter` is a vectorized predicate (or, ``x = expr`` with ``x`` free, a
  new column).

The stratum's loop — semi-naive, or rank by rank under ``.schedule`` — and the release step
(aggregate, aggregate selection, bound) work on frames with the tuple engine's semantics, bag
for bag: each variant yields the same tuples with the same multiplicity, so the relations and
the counts of :class:`~.python_engine.RunStats` are identical. The tuple engine hands a stratum
over (:func:`eligible`, :func:`wanted`) and takes the relations back, as tuples built from the
frames on first read (:meth:`~.python_engine.Relation.of_rows`; a from-scratch optimization
never reads most of a large stratum as tuples, so it never builds them); the strata that
prune by deleting (tuple source suppression, reference counting) stay with it, and so do small
evaluations, where a frame operation's fixed cost outweighs its loop.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from reopt.costmodel.builtins import DOUBLE, LONG, STRING
from reopt.costmodel.errors import ReoptError
from reopt.evaluator.ast import Aggregate, Arith, Const, Var
from reopt.evaluator.compiler import (
    BOUND,
    COMPARE,
    CONST,
    DELTA,
    OLD,
    SAME,
    Call,
    CompiledProgram,
    Scan,
    Stratum,
    Variant,
    _py_type,
    match_terms,
)
from reopt.evaluator.failures import CRASHES, rule_failure
from reopt.evaluator.features import ASCENDING, AggSel
from reopt.evaluator.frames import (
    NUMPY,
    STRINGS,
    Frame,
    Index,
    KeyIndex,
    aggregate,
    anti,
    beside,
    column,
    concat,
    distinct,
    distinct_hashed,
    group_best,
    join,
    lookup,
    row_hash,
    runs_by,
    stacked,
)

if TYPE_CHECKING:
    from reopt.evaluator.python_engine import PythonEngine

MODES = ("auto", "always", "never")
MIN_TUPLES = 10_000
"""``auto``: a stratum runs columnar when the relations it reads from below hold at least this
many tuples, :data:`BOUNDED_READS` times as many if a ``.bound`` prunes it (measured on the
workload under ``cout``: at about 10,000 csg-cmp pairs frames and tuples break even; below, a
frame operation's fixed cost outweighs its loop)."""
BOUNDED_READS = 1.25
"""``auto``: a stratum with a relation pruned by a ``.bound`` runs columnar from
``BOUNDED_READS × MIN_TUPLES`` tuples read on: its bound prunes most of what it would derive
(from scratch under ``cout``, ``all``: clique-14-s0-9's PlanCost stratum derives 2,960 tuples
from 10,452 SearchSpace tuples, star-12-s0-1's 1,000 of 11,276), so the tuple engine's work,
which follows what is derived, stays below the frames' fixed cost per rank longer.
Interleaved, warm, 9 rounds (load 4–5): clique-14-s0-9 50.9 → 41.3 ms, star-12-s0-1 54.8 →
46.4 ms on tuples; clique-14-s0-4 (22,062 read, 10,513 derived) 91 → 109 ms, so it stays
on frames, as does every ``io`` run of the engine benchmark."""
EXPECTED = 8.0
"""``auto``: a recursive stratum the tuple engine began also goes on on frames when the
iteration a delta starts is expected to derive ``EXPECTED × MIN_DELTA`` tuples
(:func:`takes_over`). The expectation runs high on the enumeration — the first ``Goal``, the
whole query, has the most splits: TPC-H Q5 under ``io`` expects 3,072 ``SearchSpace`` tuples
from 48 ``Goal`` tuples and derives 329 — and a small stratum loses on frames (Q5 7.1 →
8.2 ms, Q8Join 9.2 → 9.8 with 2 here), hence eight times :data:`MIN_DELTA`: the cliques,
whose first splits are many, take over one iteration sooner (large-clique-14 expects
366,000 from 856 ``Goal`` tuples and derives 14,480: 168 → 134 ms from scratch, warm, in
process, 8 rounds, load 5–6). With 2, chain-12-s0-15 (``io``) 15%, star-12-s0-1 8% and
large-snowflake-18 6% faster, but Q5 12% and Q8Join 5% slower (12 rounds, load 5)."""
MIN_SELECTED = 1_000
"""``auto``: a maintained evaluation keeps its complete layer on frames after an evaluation
from scratch, for revival's lookups, when it holds at least this many selected tuples
(:func:`maintains_on_frames`)."""
MIN_DELTA = 500
"""``auto``: a recursive stratum the tuple engine began goes on on frames once one iteration
derives this many tuples and the next still derives new ones (:func:`takes_over`; measured
from scratch under ``cout``, interleaved, against 2,000: clique-14-s0-4 10% faster,
tree-13-s0-3 16%, star-12-s0-1 6%; TPC-H Q5, Q8Join and chain-12 unchanged)."""


def mode() -> str:
    """``REOPT_COLUMNAR``: ``auto`` (default), ``always`` or ``never``."""
    value = os.environ.get("REOPT_COLUMNAR", "auto")
    if value not in MODES:
        raise ReoptError(f"REOPT_COLUMNAR={value!r}: expected one of {', '.join(MODES)}")
    return value


def eligible(program: CompiledProgram, stratum: Stratum) -> bool:
    """Whether the stratum can run on frames: none of its relations is pruned by deletion
    (suppression, reference counting) — the deletion cascade is the tuple engine's."""
    f = program.features
    pruned = set(f.refcount) | set(f.suppress) | set(f.suppress.values())
    return not pruned.intersection(stratum.preds)


def wanted(engine: PythonEngine, stratum: Stratum) -> bool:
    """Whether this evaluation should run the stratum on frames (see :data:`MIN_TUPLES`)."""
    how = mode()
    if how == "never":
        return False
    able, reads, bounded = engine.program.memoized(("frames: reads", stratum.preds),
                                                   lambda: _reads(engine.program, stratum))
    if not able or how == "always":
        return able
    least = MIN_TUPLES * BOUNDED_READS if bounded else MIN_TUPLES
    return sum(len(engine.full[p]) for p in reads) >= least


def _reads(program: CompiledProgram, stratum: Stratum) -> tuple[bool, tuple[str, ...], bool]:
    """Whether ``stratum`` is :func:`eligible`, the relations of lower strata its rules
    scan, and whether a relation of it is pruned by a ``.bound`` (:data:`BOUNDED_READS`) —
    read off the program once, not per evaluation (every stratum of every evaluation asks
    :func:`wanted`: on TPC-H Q3 its sets were 2% of an optimization)."""
    own = set(stratum.preds)
    reads = {op.pred for v in (*stratum.base, *stratum.deltas) for op in v.ops
             if isinstance(op, Scan) and op.pred not in own}
    bounded = bool(own.intersection(program.features.bound))
    return eligible(program, stratum), tuple(sorted(reads)), bounded


def takes_over(engine: PythonEngine, stratum: Stratum, before: int, expected: float) -> bool:
    """Whether a recursive stratum the tuple engine began goes on on frames (``auto``), called
    with an iteration's non-empty delta: the iteration before it derived at least
    :data:`MIN_DELTA` tuples (``before``), and this one still derived new tuples; or the
    iteration this delta starts is expected to derive that many (``expected``: see
    :class:`Yields`).

    One large iteration alone does not say the stratum goes on: on a chain query the
    enumeration's largest iteration is its last (large-chain-18: 696 ``SearchSpace`` tuples,
    then no new ``Goal``), and moving to frames there paid the conversion for one cheap
    iteration (12.3 ms against 10.6 on tuples). Waiting for the next iteration's new tuples
    costs that one iteration on tuples where the stratum does go on (its alternate, cheap
    step in the enumeration: ``SearchSpace`` to ``Goal``, a projection) — unless that
    iteration is the expensive one: on large-clique-14 428 ``SearchSpace`` tuples give 856
    ``Goal`` tuples, from which the next iteration derives 14,480 ``SearchSpace`` tuples (the
    first ``Goal`` gave 428), 18 ms on tuples and 10 ms more to turn them into frames."""
    return mode() == "auto" and eligible(engine.program, stratum) and (
        before >= MIN_DELTA or expected >= MIN_DELTA * EXPECTED)


class Yields:
    """New tuples per delta tuple, as a semi-naive stratum's iterations showed them, by the
    relations a delta held: what the iteration a delta starts is expected to derive is its
    size times the yield of the last iteration started by a delta of the same relations (the
    enumeration alternates between two relations of very different yields)."""

    def __init__(self) -> None:
        self._last: dict[frozenset[str], float] = {}
        self._started: tuple[frozenset[str], int] | None = None
        self._variants: dict[int, float] = {}

    def expected(self, delta: Mapping[str, Any], size: int) -> float:
        """What the iteration ``delta`` starts is expected to derive (0 if no iteration began
        from a delta of its relations yet). ``delta`` holds ``size`` tuples, which are also
        what the last started iteration derived; ``delta`` is then taken as started."""
        if self._started is not None:
            preds, before = self._started
            self._last[preds] = size / before
        preds = frozenset(p for p, d in delta.items() if len(d))
        self._started = (preds, size)
        return size * self._last.get(preds, 0.0)

    def of_variant(self, v: Variant) -> float:
        """What the last run of the delta variant ``v`` derived per delta tuple (0 before
        its first)."""
        return self._variants.get(id(v), 0.0)

    def ran(self, v: Variant, delta: int, derived: int) -> None:
        """The delta variant ``v`` derived ``derived`` tuples from ``delta``."""
        self._variants[id(v)] = derived / delta


def resume(engine: PythonEngine, stratum: Stratum, delta: Mapping[str, Any],
           fresh: Collection[str]) -> None:
    """Evaluate the rest of ``stratum`` on frames (see :meth:`ColumnarStratum.resume`);
    ``fresh``: its relations that were empty when the stratum began."""
    ColumnarStratum(engine, stratum, fresh).resume(delta)


def unseen(program: CompiledProgram, stratum: Stratum, fresh: Collection[str]) -> frozenset[str]:
    """The relations of a semi-naive ``stratum`` whose tuples derived after its first release
    are never among those it holds already, so a release need not look them up in it (nor
    keep the whole-tuple index that would take): a relation empty when the stratum began,
    with no facts, no inputs and no aggregate, every rule of which reads one relation ``Q``
    of the stratum, once, and repeats that atom's columns in its head at the same positions
    ``E`` (:attr:`~.compiler.Variant.embeds`). A tuple derived from a new ``Q`` tuple then
    holds it at ``E``; every tuple held already holds at ``E`` a ``Q`` tuple that was there
    before — and a delta's tuples never were (on large-clique-17, 223,788 SearchSpace tuples
    from new Goal tuples, each release probing an index of all of them before)."""
    out = set()
    prog = program
    for p in stratum.preds:
        if (p not in fresh or prog.facts.get(p) or p in prog.inputs or p in prog.aggregates
                or p in prog.features.aggsel or p in prog.features.bound):
            continue
        deltas = [v for v in stratum.deltas if v.head_pred == p]
        shapes = {(v.delta_pred, v.embeds) for v in deltas}
        if len(shapes) != 1 or next(iter(shapes))[1] is None:
            continue
        recursive = {id(v.rule) for v in deltas}
        if all(id(v.rule) in recursive for v in stratum.base if v.head_pred == p):
            out.add(p)
    return frozenset(out)


def names(n: int) -> list[str]:
    """The column names of a relation of arity ``n`` on frames: ``c0``, ``c1``, …"""
    return [f"c{i}" for i in range(n)]


def var_column(name: str) -> str:
    """The column that holds variable ``name``'s values in a rule's binding frame (``$``:
    never a relation's column name, :func:`names`)."""
    return f"${name}"


_BETTER = {"min": np.less, "max": np.greater}


class ColumnarStratum:
    """One stratum of one evaluation, run on frames for a :class:`PythonEngine`."""

    def __init__(self, engine: PythonEngine, stratum: Stratum,
                 fresh: Collection[str] | None = None):
        """``fresh``: the stratum's relations empty when it began (a stratum resumed from
        the tuple engine; else those empty now)."""
        self.stratum = stratum
        own = set(stratum.preds)
        f = engine.program.features
        if fresh is None:
            fresh = [p for p in own if not len(engine.full[p])]
        self.unseen = unseen(engine.program, stratum, fresh) if stratum.schedule is None \
            else frozenset()
        """Relations a release need not look its tuples up in (:func:`unseen`)."""
        reads = {op.pred for v in (*stratum.base, *stratum.deltas) for op in v.ops
                 if isinstance(op, Scan)} | own
        for p in own:
            sel = f.aggsel.get(p)
            if sel is not None:
                reads.add(sel.agg)
            if p in f.bound:
                reads.add(f.bound[p])
        self._frames_of(engine, engine.full, reads, own)

    def _frames_of(self, engine: PythonEngine, rels: Mapping[str, Any],
                   preds: Iterable[str], growing: Iterable[str] = ()) -> None:
        """Frames of the relations ``preds`` of ``rels`` (the engine's), with no index yet;
        ``growing``: those of them releases will append to."""
        self.engine = engine
        self.program = engine.program
        self.types = self.program.schemas
        self.ctx = engine.ctx
        self.stats = engine.stats
        self.full: dict[str, Frame] = {p: self._frame(engine, rels[p], p) for p in preds}
        self.before: dict[str, Frame] = {}
        """Relation → its frame before its last release (an ``OLD`` scan's relation: the
        first rows of the full one, as releases append)."""
        self.indexes: dict[tuple[str, tuple[int, ...]], Index | KeyIndex] = {}
        """(relation, columns) → its rows by those columns, kept up to date as releases
        append (a scan of a large relation by a few bindings probes it)."""
        self.growing = frozenset(growing)
        """The relations releases append to (the stratum's own)."""
        self._bounds: dict[str, tuple[Frame, list[str], Frame]] = {}
        """Bound relation → (its frame, key names, :meth:`_tightest`'s answer for them)."""
        self._probed: dict[tuple[str, tuple[int, ...], int | None],
                           tuple[Frame, list[np.ndarray], tuple[np.ndarray, np.ndarray]]] = {}
        """(relation, columns, below) → the last probe's frame, values and answer
        (:meth:`_probe`)."""
        self._growing_key_index: dict[tuple[str, tuple[int, ...]],
                                      tuple[Frame, KeyIndex | None]] = {}
        """(growing relation, columns) → its frame and its rows by those columns' packed key
        (:meth:`_growing_keys`)."""

    def _index(self, pred: str, cols: tuple[int, ...]) -> Index | KeyIndex:
        """``pred``'s rows by ``cols``: of a relation that does not grow here (read from a
        lower stratum, or a maintained layer's), by its packed key where the columns pack
        (:class:`~.frames.KeyIndex`); else by hash, kept up to date as releases append."""
        idx = self.indexes.get((pred, cols))
        if idx is None:
            f = self.full[pred]
            values = [f.cols[f"c{j}"] for j in cols]
            if pred not in self.growing:
                idx = KeyIndex.of(values, f.height)
            if idx is None:
                idx = Index(row_hash(values, f.height), np.arange(f.height, dtype=np.int64))
            self.indexes[(pred, cols)] = idx
        return idx

    def _frame(self, engine: PythonEngine, rel: Any, pred: str) -> Frame:
        """Relation ``rel`` of ``pred`` as a frame: the one a stratum on frames left while
        ``rel`` is the relation it handed back, unchanged, else built from the tuples."""
        kept = engine.frames.get(pred)
        if kept is not None and kept[0] is rel and kept[1] == rel.version:
            return kept[2]
        return self._frame_of(rel.rows, pred)

    def _frame_of(self, rows: Any, pred: str) -> Frame:
        types = self.types[pred]
        return Frame.from_rows(rows, names(len(types)), types)

    def _empty(self, pred: str) -> Frame:
        types = self.types[pred]
        return Frame.empty(names(len(types)), types)

    # -- the stratum -------------------------------------------------------------------------
    def run(self) -> None:
        if self.stratum.schedule is not None:
            self._scheduled()
        else:
            self._seminaive()
        self._hand_back()

    def _hand_back(self) -> None:
        """The stratum's relations back to the engine, their frames kept: as relations whose
        tuples are made from the frame when first read (:meth:`Relation.of_rows`; a frame's
        rows are distinct, as releases leave them)."""
        for p in self.stratum.preds:
            frame, cols = self.full[p], names(len(self.types[p]))
            rel = self.engine.full[p] = type(self.engine.full[p]).of_rows(
                lambda frame=frame, cols=cols: frame.rows(cols), frame.height,
                lambda key, frame=frame, cols=cols: runs_by(frame, [cols[j] for j in key]))
            self.engine.frames[p] = (rel, rel.version, frame)

    def _live_base(self) -> list[Variant]:
        own = set(self.stratum.preds)
        return [v for v in self.stratum.base
                if not any(isinstance(op, Scan) and not op.negated and op.pred in own
                           and self.full[op.pred].height == 0 for op in v.ops)]

    def resume(self, delta: Mapping[str, Any]) -> None:
        """Go on with a semi-naive stratum the tuple engine began: ``delta`` (relation →
        tuples) was released last and is in the relations already."""
        frames = {}
        for p, rel in delta.items():
            new = frames[p] = self._frame_of(rel.rows, p)
            # the delta last, as a release leaves it; the rest picked from the tuples (a set
            # difference of frames keys every column: 4 ms for 3,848 SearchSpace tuples)
            fresh = rel.rows
            old = self._frame_of([r for r in self.engine.full[p].rows if r not in fresh], p) \
                if fresh else self.full[p]
            self.before[p], self.full[p] = old, stacked([old, new])
        self._seminaive(frames)
        self._hand_back()

    def _seminaive(self, delta: Mapping[str, Frame] | None = None) -> None:
        st = self.stratum
        pending: dict[str, list[Frame]] = {p: [] for p in st.preds}
        if delta is None:
            for v in self._live_base():
                pending[v.head_pred].append(self.run_variant(v, {}))
        while True:
            if delta is None:
                delta = {p: self._release(p, self._concat(p, fs)) for p, fs in pending.items()}
                self._iterated(delta)
            if not st.recursive or not any(d.height for d in delta.values()):
                return
            pending = {p: [] for p in st.preds}
            for v in st.deltas:
                if delta[v.delta_pred].height:  # type: ignore[index]
                    pending[v.head_pred].append(self.run_variant(v, delta))
            delta = None

    def _scheduled(self) -> None:
        """Rank by rank, in the steps :class:`~.compiler.RankSteps` orders (as the tuple
        engine's ``_run_scheduled``)."""
        st = self.stratum
        sched, steps = st.schedule, st.steps
        assert sched is not None and steps is not None
        rank_fn = self.program.builtins[sched.rank]
        n_in = len(rank_fn.inputs)
        sign = 1 if sched.direction == ASCENDING else -1
        pending: dict[str, dict[int, list[Frame]]] = {p: {} for p in st.preds}
        ranks: list[int] = []
        queued: set[int] = set()
        done: set[str] = set()
        current: int | None = None

        def add(pred: str, rows: Frame) -> None:
            if rows.height == 0:
                return
            row, rank = rank_fn.batch(self.ctx, *(rows.python(c) for c in names(n_in)))
            rank = np.asarray(rank, dtype=np.int64)
            if len(row) != rows.height:
                raise ReoptError(f".schedule {sched.rank}: not one rank per tuple of {pred}")
            rank = rank[np.argsort(np.asarray(row), kind="stable")]
            buckets = pending[pred]
            for k in sorted(np.unique(rank).tolist(), key=lambda k: sign * k):
                part = rows.filter(rank == k)
                bucket = buckets.get(k)
                if bucket is None:
                    if current is not None and (sign * k < sign * current or
                                                (k == current and pred in done)):
                        first = part.rows(names(len(self.types[pred])))[0]
                        raise ReoptError(
                            f".schedule {sched.direction} {sched.rank}: {pred}{first} "
                            f"has rank {k} but rank {current} is being released")
                    buckets[k] = bucket = []
                    if k != current and k not in queued:
                        queued.add(k)
                        heapq.heappush(ranks, sign * k)
                bucket.append(part)

        def at_current(pred: str) -> bool:
            return current in pending[pred]

        for v in self._live_base():
            add(v.head_pred, self.run_variant(v, {}))
        while ranks:
            current = sign * heapq.heappop(ranks)
            queued.discard(current)
            done = set()
            ran = True
            while ran and any(map(at_current, st.preds)):
                ran = False
                for step, _ in steps.walk(at_current, done):
                    ran = True
                    delta = {p: self._release(p, self._concat(p, pending[p].pop(current)))
                             for p in step}
                    self._iterated(delta)
                    for v in st.deltas:
                        d = delta.get(v.delta_pred)  # type: ignore[arg-type]
                        if d is not None and d.height:
                            add(v.head_pred, self.run_variant(v, delta))
            left = [p for p in st.preds if current in pending[p]]
            if left:
                raise ReoptError(f".schedule: {', '.join(left)} depend on each other within "
                                 f"rank {current}; the rank must separate them")

    def _iterated(self, delta: Mapping[str, Frame]) -> None:
        self.stats.iterations += 1
        self.program.budget.step(self.stats.iterations, {p: d.height for p, d in delta.items()},
                                 lambda p: self.full[p].height if p in self.full
                                 else len(self.engine.full[p]), self.program.rules)

    def _concat(self, pred: str, parts: list[Frame]) -> Frame:
        return concat(parts) if parts else self._empty(pred)

    # -- releasing: aggregate, selection, bound ------------------------------------------------
    def _release(self, pred: str, rows: Frame) -> Frame:
        """Insert candidate tuples of ``pred``; returns the ones that were new."""
        prog, stats = self.program, self.stats
        stats.produced[pred] = stats.produced.get(pred, 0) + rows.height
        agg = prog.aggregates.get(pred)
        cols = names(len(self.types[pred]))
        if agg is not None and rows.height:
            pos, func = agg
            rows = aggregate(rows, [c for i, c in enumerate(cols) if i != pos], cols[pos], func)
        sel = prog.features.aggsel.get(pred)
        if sel is not None and rows.height:
            rows = self._select(sel, rows)
        # hashed and sorted once: for distinct, the probe of the relation, its index's add
        whole = tuple(range(len(cols)))
        looked_up = pred not in self.unseen
        new, hashes, at = distinct_hashed(rows, cols, looked_up or (pred, whole) in
                                          self.indexes)
        have = self.before[pred] = self.full[pred]
        if have.height and new.height and looked_up:
            assert hashes is not None and at is not None  # (ordered: looked up)
            li, ri = self._probe(pred, whole, [new.cols[c] for c in cols], sorted_hashes=(
                hashes, at))
            seen = np.zeros(new.height, dtype=bool)
            seen[li] = True
            if seen.any():
                fresh = ~seen
                keep = fresh[at]
                at = (np.cumsum(fresh) - 1)[at[keep]]
                hashes = hashes[keep]
                new = new.filter(fresh)
        self.append(pred, new, None if hashes is None else {whole: (hashes, at)})
        stats.derived[pred] = stats.derived.get(pred, 0) + new.height
        return new

    def append(self, pred: str, rows: Frame,
               hashed: Mapping[tuple[int, ...], tuple[np.ndarray, np.ndarray]] | None = None
               ) -> None:
        """Append ``rows`` to ``pred``'s frame, and to every index of it; ``hashed``: per
        index columns, the rows' hashes on them ascending and the row of each (as
        :func:`~.frames.distinct_hashed` gives them), so that index is not hashed again."""
        if not rows.height:
            return
        have = self.full[pred]
        self.full[pred] = stacked([have, rows])
        for (p, cols), idx in self.indexes.items():
            if p != pred:
                continue
            known = hashed.get(cols) if hashed else None
            if known is not None:
                idx.add_sorted(known[0], known[1] + have.height)
            else:
                idx.add(row_hash([rows.cols[f"c{j}"] for j in cols], rows.height),
                        np.arange(have.height, have.height + rows.height, dtype=np.int64))

    def _select(self, sel: AggSel, rows: Frame) -> Frame:
        """Aggregate selection (as the tuple engine's ``_select``): per group, the tuples with
        the best value, if that value beats the group's current aggregate and does not exceed
        its bound."""
        key = [f"c{k}" for k in sel.key]
        val = f"c{sel.value}"
        better = _BETTER[sel.func]
        ids, best = group_best(rows, key, val, sel.func)
        rows = rows.filter(rows.cols[val] == best[ids])
        for pred, beats in ((sel.agg, True),
                            (self.program.features.bound.get(sel.target), False)):
            if pred is None or not rows.height or not self.full[pred].height:
                continue
            on = key[:len(self.full[pred].cols) - 1]  # a bound's key may be a prefix
            limits = self._limits(pred, on) if beats else self._tightest(pred, on)
            limit, found = lookup(rows, limits, on, "__v")
            v = rows.cols[val]
            keep = ~found | (better(v, limit) if beats else ~better(limit, v))
            rows = rows.filter(keep)
        return rows

    def _limits(self, pred: str, on: list[str]) -> Frame:
        """``pred``'s key columns named ``on`` and its last column as ``__v``."""
        have = self.full[pred]
        hc = list(have.cols)
        return have.select([(hc[i], on[i]) for i in range(len(on))] + [(hc[-1], "__v")])

    def _tightest(self, pred: str, on: list[str]) -> Frame:
        """:meth:`_limits` of a bound relation with the tightest bound of each key, once:
        made again only when the relation's frame changed since (a bound read from a
        lower stratum never does, and every release of every rank asked for it — on
        clique-14-s0-9 a group-by and a distinct of one row, 28 times)."""
        have = self.full[pred]
        hit = self._bounds.get(pred)
        if hit is not None and hit[0] is have and hit[1] == on:
            return hit[2]
        limits = self._limits(pred, on)
        ids, low = group_best(limits, on, "__v", "min")
        limits = distinct(limits.filter(limits.cols["__v"] == low[ids]))
        self._bounds[pred] = (have, on, limits)
        return limits

    # -- one variant, set at a time ------------------------------------------------------------
    def run_variant(self, v: Variant, delta: Mapping[str, Frame]) -> Frame:
        """The head tuples ``v`` derives (a bag, as the tuple engine's list)."""
        try:
            return self._run(v, delta)
        except ReoptError:
            raise
        except CRASHES as e:
            raise rule_failure(v, e, self.program.builtins, self.ctx) from e

    def _run(self, v: Variant, delta: Mapping[str, Frame]) -> Frame:
        b = Frame.unit()
        for op in v.ops:
            if b.height == 0:
                return self._empty(v.head_pred)
            if isinstance(op, Scan):
                b = self._scan(b, op, delta)
            elif isinstance(op, Call):
                b = self._call(b, op)
            else:
                left_free = isinstance(op.left, Var) and var_column(op.left.name) not in b.cols
                right_free = isinstance(op.right, Var) and var_column(op.right.name) not in b.cols
                if op.op == "=" and (left_free or right_free):
                    free, other = (op.left, op.right) if left_free else (op.right, op.left)
                    col, kind = self._term(b, other)
                    b = b.with_column(var_column(free.name), col, kind)  # type: ignore[union-attr]
                else:
                    b = b.filter(self._compare(b, op.op, op.left, op.right))
        if b.height == 0:
            return self._empty(v.head_pred)
        head = [t.var if isinstance(t, Aggregate) else t for t in v.head]
        types = self.types[v.head_pred][:len(head)]  # a cut variant projects a prefix
        cols, kinds = {}, {}
        for c, t, ty in zip(names(len(head)), head, types, strict=True):
            col, kind = self._term(b, t)
            cols[c] = self._as(col, kind, ty)
            kinds[c] = ty
        return Frame(cols, kinds, b.height)

    def _term(self, b: Frame, t: Any) -> tuple[np.ndarray, str]:
        """A term's values over the bindings, and their column type."""
        if isinstance(t, Const):
            kind = _py_type(t.value)
            # (a read-only view repeating one value: frames never write into a column)
            return np.broadcast_to(column([t.value], kind)[:1], (b.height,)), kind
        if isinstance(t, Arith):
            (left, lk), (right, rk) = self._term(b, t.left), self._term(b, t.right)
            kind = DOUBLE if DOUBLE in (lk, rk) else LONG
            return (left + right if t.op == "+" else left - right), kind
        name = var_column(t.name)
        return b.cols[name], b.types[name]

    @staticmethod
    def _as(col: np.ndarray, kind: str, want: str) -> np.ndarray:
        """A column as the head's type (long and double mix, as numbers do)."""
        if kind == want:
            return col
        if {kind, want} != {LONG, DOUBLE}:
            raise ReoptError(f"a {kind} value where a {want} column is")
        return col.astype(NUMPY[want])

    def _compare(self, b: Frame, op: str, left: Any, right: Any) -> np.ndarray:
        (lc, lk), (rc, rk) = self._term(b, left), self._term(b, right)
        if STRING in (lk, rk) and op not in ("=", "!="):  # codes do not keep the order
            lc = STRINGS.decode(lc) if lk == STRING else lc
            rc = STRINGS.decode(rc) if rk == STRING else rc
        return np.asarray(COMPARE[op](lc, rc), dtype=bool)

    def _probe(self, pred: str, cols: tuple[int, ...], values: list[np.ndarray],
               below: int | None = None,
               sorted_hashes: tuple[np.ndarray, np.ndarray] | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """The (row of ``values``, row of ``pred``) pairs equal on ``cols`` — by hash through
        the index, then value by value — among the first ``below`` rows of ``pred``;
        ``sorted_hashes``: the rows' hashes ascending and the row of each, known already.
        The last answer per (relation, columns, ``below``) is kept and given again for the
        same arrays of ``values`` while the relation's frame is the same: the delta
        variants of one release that scan the delta first and then probe one relation by
        the same delta columns (R7 and R8 by a new plan's expression, to find its parents
        in SearchSpace) probe once."""
        rel = self.full[pred]
        memo = self._probed.get((pred, cols, below))
        if (memo is not None and memo[0] is rel and len(memo[1]) == len(values)
                and all(a is b for a, b in zip(memo[1], values, strict=True))):
            return memo[2]
        got = self._probe_once(pred, cols, values, below, sorted_hashes)
        self._probed[(pred, cols, below)] = (rel, values, got)
        return got

    def _probe_once(self, pred: str, cols: tuple[int, ...], values: list[np.ndarray],
                    below: int | None,
                    sorted_hashes: tuple[np.ndarray, np.ndarray] | None
                    ) -> tuple[np.ndarray, np.ndarray]:
        n = len(values[0]) if values else 0
        rel = self.full[pred]
        idx = (self._growing_keys(pred, cols, n) if sorted_hashes is None else None
               ) or self._index(pred, cols)
        if isinstance(idx, KeyIndex):  # exact keys: nothing to compare
            li, ri = idx.probe(values, n)
            return (li, ri) if below is None else (li[ri < below], ri[ri < below])
        if sorted_hashes is not None:
            hashes, at = sorted_hashes
            li, ri = idx.probe_sorted(hashes)
            li = at[li]
        else:
            li, ri = idx.probe(row_hash(values, n))
        if below is not None:
            keep = ri < below
            li, ri = li[keep], ri[keep]
        eq = np.ones(len(li), dtype=bool)
        for v, j in zip(values, cols, strict=True):
            eq &= v[li] == rel.cols[f"c{j}"][ri]
        return li[eq], ri[eq]

    def _growing_keys(self, pred: str, cols: tuple[int, ...], n: int) -> KeyIndex | None:
        """For ``n`` probes of a relation releases append to, at most as many rows as probes:
        its rows by their packed key, made for its frame as it is now (kept while that frame
        is, as a probe of the same release by other delta columns reads it too) — a pass
        over its rows and a sort of their keys, instead of hashing and sorting the probes
        for its hash index; None otherwise, or when the columns do not pack."""
        rel = self.full[pred]
        if pred not in self.growing or not n or rel.height > n:
            return None
        hit = self._growing_key_index.get((pred, cols))
        if hit is not None and hit[0] is rel:
            return hit[1]
        idx = KeyIndex.of([rel.cols[f"c{j}"] for j in cols], rel.height)
        self._growing_key_index[(pred, cols)] = (rel, idx)
        return idx

    def _scan(self, b: Frame, op: Scan, delta: Mapping[str, Frame]) -> Frame:
        if op.version != DELTA:
            hit = self._indexed_scan(b, op, delta)
            if hit is not None:
                return hit
        if op.version == DELTA:
            rel = delta[op.pred]
        elif op.version == OLD and op.pred in delta:  # without the delta: as before it
            rel = self.before[op.pred]
        else:
            rel = self._whole(op.pred)
        return self._scan_rows(b, op, rel)

    def _scan_rows(self, b: Frame, op: Scan, rel: Frame) -> Frame:
        """The bindings ``b`` joined (anti-joined when ``op`` is negated) with ``rel``, tuples
        of ``op``'s relation — every tuple the scan may read, as columns ``c<j>`` (those the
        scan's arguments name at least) — after its constant and repeated-variable checks."""
        checks, binds = match_terms(op.args, {c[1:] for c in b.cols})
        for j, kind, x in checks:
            if kind == CONST:
                rel = rel.filter(rel.cols[f"c{j}"] == self._const(x, rel.types[f"c{j}"]))
            elif kind == SAME:
                rel = rel.filter(rel.cols[f"c{j}"] == rel.cols[f"c{x}"])
        keys = [(j, x) for j, kind, x in checks if kind == BOUND]
        on = [var_column(x) for _, x in keys]
        rel = rel.select([(f"c{j}", var_column(x)) for j, x in keys + binds])
        if op.negated:
            return anti(b, rel, on)
        return join(b, rel, on)

    def _whole(self, pred: str) -> Frame:
        """Every tuple of ``pred`` (a scan that binds no key reads them all)."""
        return self.full[pred]

    def _indexed_scan(self, b: Frame, op: Scan, delta: Mapping[str, Frame]) -> Frame | None:
        """A scan of a full relation by bound variables, through its index (None when no
        variable is bound or a key mixes long and double: the general join then)."""
        rel = self.full[op.pred]
        checks, binds = match_terms(op.args, {c[1:] for c in b.cols})
        keys = [(j, x) for j, kind, x in checks if kind == BOUND]
        if not keys or any(b.types[var_column(x)] != rel.types[f"c{j}"] for j, x in keys):
            return None
        below = self.before[op.pred].height if op.version == OLD and op.pred in delta else None
        li, ri = self._probe(op.pred, tuple(j for j, _ in keys),
                             [b.cols[var_column(x)] for _, x in keys], below)
        keep = np.ones(len(li), dtype=bool)
        for j, kind, x in checks:
            if kind == CONST:
                keep &= rel.cols[f"c{j}"][ri] == self._const(x, rel.types[f"c{j}"])
            elif kind == SAME:
                keep &= rel.cols[f"c{j}"][ri] == rel.cols[f"c{x}"][ri]
        li, ri = li[keep], ri[keep]
        if op.negated:
            hit = np.zeros(b.height, dtype=bool)
            hit[li] = True
            return b.filter(~hit)
        return _joined_rows(b, li, rel, ri, binds)

    @staticmethod
    def _const(value: Any, kind: str) -> Any:
        return column([value], kind)[0] if kind == STRING else value

    def _call(self, b: Frame, op: Call) -> Frame:
        fn = self.program.builtins[op.name]
        args = [self._input(b, t) for t in op.inputs]
        row, *outs = fn.batch(self.ctx, *args)
        row = np.asarray(row, dtype=np.int64)
        if not _every_row(row, b.height):  # (most built-ins answer each row once, in order)
            b = b.take(row)
        checks, binds = match_terms(op.outputs, {c[1:] for c in b.cols})
        made: dict[tuple[int, str], np.ndarray] = {}  # a column a built-in gives twice: once
        values = [made.get((id(col), ty)) for col, ty in zip(outs, fn.outputs, strict=True)]
        for j, (col, ty) in enumerate(zip(outs, fn.outputs, strict=True)):
            if values[j] is None:
                values[j] = made[(id(col), ty)] = column(col, ty)
        if checks:
            keep = np.ones(b.height, dtype=bool)
            for j, kind, x in checks:
                if kind == CONST:
                    keep &= values[j] == self._const(x, fn.outputs[j])
                elif kind == BOUND:
                    keep &= values[j] == b.cols[var_column(x)]
                else:
                    keep &= values[j] == values[x]
            if not keep.all():
                b = b.filter(keep)
                values = [v[keep] for v in values]
        if not binds:
            return b
        return b.with_columns({var_column(x): values[j] for j, x in binds},
                              {var_column(x): fn.outputs[j] for j, x in binds})

    def _input(self, b: Frame, t: Any) -> Any:
        """One input column of a built-in: numbers as numpy, strings as ``object``."""
        col, kind = self._term(b, t)
        return STRINGS.read(col) if kind == STRING else col


def _joined_rows(b: Frame, li: np.ndarray, rel: Frame, ri: np.ndarray,
                 binds: Iterable[tuple[int, str]]) -> Frame:
    """The bindings' rows ``li`` of ``b``, each with the variables ``binds`` (column of
    ``rel``, variable) read off the row ``ri`` of ``rel`` it met: one frame built, not one
    per variable, its columns gathered when read (:class:`~.frames.Gathered`: the next
    steps often keep a few of the rows)."""
    binds = list(binds)
    return beside(b, li, {var_column(x): rel.cols[f"c{j}"] for j, x in binds},
                  {var_column(x): rel.types[f"c{j}"] for j, x in binds}, ri)


def _every_row(row: np.ndarray, n: int) -> bool:
    """Whether a built-in's ``row`` output names each of the ``n`` input rows once, in
    order (then the bindings need no gather)."""
    global _ROWS
    if len(row) != n:
        return False
    if len(_ROWS) < n:
        _ROWS = np.arange(max(n, 2 * len(_ROWS)), dtype=np.int64)
    return bool(np.array_equal(row, _ROWS[:n]))


_ROWS = np.arange(1024, dtype=np.int64)
"""0, 1, 2, …: compared against, never written (grown by :func:`_every_row`)."""


class Maintained(ColumnarStratum):
    """Frames of a maintained evaluation's complete layer (:mod:`.maintenance`) right after
    an evaluation from scratch, for the live layer's revival to look a large layer up on —
    one probe for many keys — instead of building hash indexes over all of it. Updates run
    on tuples and drop these frames (they would lag)."""

    def __init__(self, engine: PythonEngine, rels: Mapping[str, Any], preds: Iterable[str]):
        self._frames_of(engine, rels, preds)
        # the engine holds these frames: a reference back would be a cycle that keeps a
        # replaced evaluation's whole layer alive until a full collection (on large-clique-17
        # one of 136,037 objects, about 0.2 s); lookups need no engine
        del self.engine

    def lookup(self, pred: str, cols: tuple[int, ...], keys: list[tuple]
               ) -> tuple[list[int], list[tuple]]:
        """The rows of ``pred`` whose columns ``cols`` equal one of ``keys``: for each
        match, the key's position and the row (as a tuple)."""
        if not keys:
            return [], []
        types = self.types[pred]
        at = Frame.from_rows(keys, names(len(cols)), [types[c] for c in cols])
        li, ri = self._probe(pred, cols, list(at.cols.values()))
        rows = self.full[pred].take(ri).rows(names(len(types)))
        return li.tolist(), rows


def maintains_on_frames(tuples: int) -> bool:
    """Whether a maintained evaluation whose complete layer holds ``tuples`` selected tuples
    keeps it on frames after an evaluation from scratch, for revival (:class:`Maintained`)."""
    how = mode()
    return how == "always" or (how == "auto" and tuples >= MIN_SELECTED)


BATCHED_DELTA = 40
"""``auto``: a delta variant of a stratum on tuples runs on frames, its built-ins called once
for the delta instead of once per tuple (:func:`batched`), from a delta of this many tuples
on. chain-12-s0-15 under ``io``: the enumeration's splits of 46 ``Goal`` tuples, 688
``SearchSpace`` tuples, were about 1,760 ``join_alternatives`` calls node by node (2,032 →
272 an optimization) and are one ``joins_batch`` call here — 15.5 → 13.2 ms from scratch
(warm, in process, 7 rounds). With 32, tree-11-s0-8 under ``cout`` (32 ``Goal`` tuples)
ran 9% slower: a small batch pays the model's arrays of the join graph (``halves_arrays``,
``_SplitClasses``) that the tuple engine's few nodes never need."""
BATCHED_YIELD = 16.0
"""``auto``: … when the variant's last run derived at least this many tuples per delta tuple
(the first ``Goal``, the whole query, splits into many): with any yield, chain-12-s0-15
under ``cout`` (55 ``Goal`` tuples, 3 ``SearchSpace`` tuples each) ran 15% and TPC-H Q8Join
(``io``, 68, 3.6 each) 4–10% slower."""
SMALL_READ = 256
"""``auto``: … and every other relation it scans holds at most this many tuples (facts:
their frames and indexes are made for the one run, where a large relation's would cost
more than the calls save)."""


def batched(engine: PythonEngine, v: Variant, n: int, last: float) -> bool:
    """Whether the tuple engine runs the delta variant ``v`` on frames for one iteration
    (``auto``): its delta holds ``n`` ≥ :data:`BATCHED_DELTA` tuples, its last run derived
    ``last`` ≥ :data:`BATCHED_YIELD` tuples per delta tuple, every built-in it calls has a
    batch form of its own (called once for the delta instead of once per tuple), and every
    other relation it scans — the whole relation, no older version — holds at most
    :data:`SMALL_READ` tuples (their frames and indexes are made for this one run)."""
    if mode() != "auto" or n < BATCHED_DELTA or last < BATCHED_YIELD:
        return False
    calls = [engine.program.builtins[op.name] for op in v.ops if isinstance(op, Call)]
    if not calls or not all(b.native for b in calls):
        return False
    return all(op.version == DELTA or (op.version != OLD
                                       and len(engine.full[op.pred]) <= SMALL_READ)
               for op in v.ops if isinstance(op, Scan))


class _OneRun(ColumnarStratum):
    """Frames of the relations ``reads`` a delta variant scans besides its delta, for one run
    of it on frames (:func:`run_batched`): no stratum around it, as :class:`Maintained`
    holds frames without one."""

    def __init__(self, engine: PythonEngine, reads: Iterable[str]):
        self._frames_of(engine, engine.full, reads)


def run_batched(engine: PythonEngine, v: Variant, delta: Mapping[str, Any]) -> list[tuple]:
    """The tuples ``v`` derives from ``delta`` (relation → tuples), run on frames (a bag:
    the tuple engine's tuples, as many times each)."""
    once = _OneRun(engine, {op.pred for op in v.ops
                            if isinstance(op, Scan) and op.version != DELTA})
    p = v.delta_pred
    got = once.run_variant(v, {p: once._frame_of(delta[p].rows, p)})
    return got.rows(names(len(got.cols)))


def run(engine: PythonEngine, stratum: Stratum) -> None:
    """Evaluate ``stratum`` on frames for ``engine`` and hand its relations back (their
    tuples built on first read)."""
    ColumnarStratum(engine, stratum).run()
