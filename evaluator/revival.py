"""The live layer's revival after an evaluation from scratch, set at a time on frames.

After a maintained evaluation from scratch, the live layer (what suppression and reference
counting keep) is revived top-down from the complete layer (:meth:`MaintainedEngine._live`):
the queries' roots make their ``Goal`` tuples live, a live tuple makes live what it supports
— candidates embedding it whose every embedded source is live, counted tuples whose count
rises from zero — and the aggregate groups it touches are recomputed. Tuple at a time that is
about 2 µs a tuple in Python sets, counts dicts and index lookups (large-clique-17: 17,000
tuples, 30–37 ms); here each relation's tuples are rows of one *universe* frame taken from
the complete layer's frames, and a wave is a handful of array operations on row numbers:

* a **suppressed source** (``SearchSpace``) can be live only where the suppressing relation
  keeps one of its tuples within the bounds (:meth:`MaintainedEngine._suppression_keeps`):
  its universe is those tuples' leading columns, made distinct;
* any other relation's universe is its complete frame (within the bounds, where a ``.bound``
  prunes it);
* the tuples a live tuple embeds or is embedded by are read off *links* — per universe row,
  the row of the embedded source's universe holding its columns — made once by one lookup;
* a counted relation's counts are an array over its universe: the rules deriving it run on
  frames over a wave's new tuples (:meth:`~.columnar.ColumnarStratum.run_variant`), their
  output is looked up in the universe, and the rows whose count rises from zero are the
  next wave.

Waves go in passes, in stratum order, as the Spark twin's revival does
(:meth:`~.spark_maintenance.SparkMaintainedEngine._revive_all`): a pass follows the plan
trees one level down. Revival is a fixpoint — a candidate not supported yet is queued again
by the tuple that makes it supported — so the order of its waves changes nothing it revives;
the live tuples, the counts (every derivation from a live tuple, once) and the aggregate
groups are those of the tuple path, which stays for updates and for small layers (no frames
kept: :func:`~.columnar.maintains_on_frames`) and for programs whose revival reads more than
this path handles (:func:`plan`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from reopt.evaluator.columnar import Maintained, mode, names
from reopt.evaluator.compiler import DELTA, Scan, Variant
from reopt.evaluator.frames import (
    DENSE_SPAN,
    Frame,
    KeyTable,
    concat,
    distinct_rows,
    group_best,
    lookup,
)

if TYPE_CHECKING:
    from reopt.evaluator.maintenance import MaintainedEngine

TABLE_SPAN = 32
"""A universe's rows are looked up off a table of its packed keys (:class:`~.frames.KeyTable`)
where their span is at most this many entries per row (or :data:`~.frames.DENSE_SPAN`):
large-clique-17's 9,451 ``Goal`` rows span 131,071 keys, 14 a row."""

SET_FROM = 1_500
"""``auto``: a revival from scratch runs set at a time where the maintained relation's
complete layer holds at least this many selected tuples (and is on frames: from
:data:`~.columnar.MIN_SELECTED`); below, tuple at a time is as fast. Measured in process,
interleaved, 11 rounds: large-snowflake-18 (1,240 selected) revives in 4.4 ms on tuples and
5.2 set at a time (``optimize()`` 61.2 against 63.0 ms), large-tree-18 (1,637) in 7.5
against 6.6 (66.7 against 65.1 ms), large-clique-17 (7,652) in 39 against 7."""

Link = tuple[str, tuple[int, ...]]
"""An embedded source and the columns of the embedding relation that hold its tuple."""


@dataclass(frozen=True)
class RevivalPlan:
    """What a set-at-a-time revival reads off the program (:func:`plan`)."""

    order: tuple[str, ...]
    """The revived relations, in stratum order (a pass visits them so)."""
    counted: dict[str, tuple[Variant, ...]]
    """Relation → the variants deriving a counted relation from its new tuples."""
    embedding: dict[str, tuple[Link, ...]]
    """Relation → (relation embedding it, those columns) whose candidates its new tuples
    make (one per distinct embedding, as :meth:`MaintainedEngine._spread` queues them)."""
    grouped: dict[str, tuple[str, ...]]
    """Relation → the aggregates over it whose groups its live tuples touch."""


def plan(engine: MaintainedEngine) -> RevivalPlan | None:
    """How ``engine``'s revival runs set at a time, or None where this path does not apply:
    no frames of the complete layer, or (``auto``) fewer selected tuples than
    :data:`SET_FROM`; aggregates the revival reads (then its groups are set
    wave by wave); a counted relation derived by a rule that reads another relation of the
    layer than the new tuples'; a revived relation without a frame; a suppressed source
    whose candidates are not all the suppressing relation's leading columns; bounds keyed
    by more than one column."""
    frames = engine._frames
    if frames is None or not engine._regroup_after or (
            mode() == "auto" and len(engine.complete[engine.plan.target]) < SET_FROM):
        return None
    prog = engine.program
    revived = [p for s in prog.strata for p in s.preds
               if p in engine._layer and p not in engine._kept and p not in prog.aggregates
               and p not in engine._post]
    if any(p not in frames.full for p in revived) or not _keeps_whole(engine):
        return None
    if any(len(next(iter(caps), ())) > 1 for caps in engine._caps.values()):
        return None
    counted: dict[str, list[Variant]] = {}
    embedding: dict[str, list[Link]] = {}
    grouped: dict[str, list[str]] = {}
    for p in revived:
        for v in prog.triggers.get(p, ()):
            h = v.head_pred
            if h in engine._post:
                continue
            if h in engine.counts:
                if any(isinstance(op, Scan) and (op.version != DELTA or op.pred != p)
                       for op in v.ops):
                    return None
                counted.setdefault(p, []).append(v)
            elif h in prog.aggregates:
                grouped.setdefault(p, []).append(h)
            elif v.embeds is not None and (h, v.embeds) not in embedding.get(p, []):
                embedding.setdefault(p, []).append((h, v.embeds))
    reach = {h for links in embedding.values() for h, _ in links} | {
        v.head_pred for vs in counted.values() for v in vs}
    tests = {src for p in reach if p not in engine.counts
             for atoms in engine._support_cols.get(p, ()) for src, _ in atoms}
    if not reach <= set(revived) or not tests <= set(revived):
        return None
    return RevivalPlan(tuple(revived), {p: tuple(vs) for p, vs in counted.items()},
                       {p: tuple(ls) for p, ls in embedding.items()},
                       {p: tuple(dict.fromkeys(hs)) for p, hs in grouped.items()})


def _keeps_whole(engine: MaintainedEngine) -> bool:
    """Whether every suppressed source's candidates are the leading columns of the
    suppressing relation's tuples (:meth:`MaintainedEngine.keeps_whole`), which is on
    frames."""
    frames = engine._frames
    assert frames is not None
    return all(engine.keeps_whole(source) and pruned in frames.full
               for source, pruned in engine._suppressing.items())


class SetRevival:
    """One revival from scratch on the complete layer's frames (module doc)."""

    def __init__(self, engine: MaintainedEngine, shape: RevivalPlan):
        self.engine, self.shape = engine, shape
        frames = engine._frames
        assert frames is not None
        self.frames: Maintained = frames
        self.universe: dict[str, Frame] = {}
        self.within: dict[str, np.ndarray | None] = {}
        self._links: dict[tuple[str, str, tuple[int, ...]], np.ndarray] = {}
        self._tables: dict[str, KeyTable | None] = {}
        for p in shape.order:
            if p not in engine._suppressing:
                self.universe[p] = frames.full[p]
                self.within[p] = self._within(p, frames.full[p])
        for p in shape.order:
            if p in engine._suppressing:
                self._kept(p)
        self.live = {p: np.zeros(u.height, dtype=bool) for p, u in self.universe.items()}
        self.counts = {h: np.zeros(self.universe[h].height, dtype=np.int64)
                       for h in engine.counts if h in self.universe}
        self._tests = {p: [[self._link(p, src, cols) for src, cols in atoms]
                           for atoms in engine._support_cols[p]]
                       for p in shape.order if p not in self.counts and p in engine._support_cols}

    # -- universes and links -------------------------------------------------------------------
    def _kept(self, source: str) -> None:
        """The suppressed ``source``'s universe: the distinct leading columns of the
        suppressing relation's tuples within the bounds (module doc); and the link from
        those tuples to it, which is how that relation embeds the source."""
        engine = self.engine
        pruned, lead = engine._suppressing[source], engine._suppressed_key[source]
        whole = self.frames.full[pruned]
        within = self.within[pruned]
        at = np.flatnonzero(within) if within is not None else np.arange(whole.height)
        cols = [whole.cols[f"c{j}"][at] for j in lead]
        first, inverse = distinct_rows(cols, len(at))
        types = [whole.types[f"c{j}"] for j in lead]
        self.universe[source] = Frame({f"c{i}": c[first] for i, c in enumerate(cols)},
                                      {f"c{i}": t for i, t in enumerate(types)}, len(first))
        self.within[source] = None
        link = np.full(whole.height, -1, dtype=np.int64)
        link[at] = inverse
        self._links[(pruned, source, lead)] = link

    def _within(self, pred: str, f: Frame) -> np.ndarray | None:
        """Which rows of ``f`` are within their bound (:meth:`MaintainedEngine._within`),
        where bounds are keyed by one column (:func:`plan`); None: all."""
        caps = self.engine._caps.get(pred)
        if not caps or not f.height:
            return None
        sel = self.engine.live_program.features.aggsel[pred]
        values, at = np.unique(f.python(f"c{sel.key[0]}"), return_inverse=True)
        cap = np.array([np.nan if (c := caps.get((v,))) is None else c
                        for v in values.tolist()], dtype=np.float64)
        return ~(f.cols[f"c{sel.value}"] > cap[at.reshape(-1)])

    def _link(self, p: str, src: str, cols: tuple[int, ...]) -> np.ndarray:
        """Per row of ``p``'s universe, the row of ``src``'s universe holding its columns
        ``cols`` (-1: none)."""
        key = (p, src, cols)
        got = self._links.get(key)
        if got is None:
            u = self.universe[p]
            got = self._links[key] = self._rows_of(src, [u.cols[f"c{j}"] for j in cols],
                                                   u.height)
        return got

    def _rows_of(self, p: str, values: list[np.ndarray], n: int) -> np.ndarray:
        """Per row of the columns ``values`` (``n`` rows, a whole tuple of ``p``), the row of
        ``p``'s universe holding it (-1: none): off a table of the universe's packed keys
        where they pack into a span of at most :data:`TABLE_SPAN` entries per row, else
        probed through the complete layer's index by every column where the universe is its
        frame, else by a lookup."""
        if not n:
            return np.full(n, -1, dtype=np.int64)
        u = self.universe[p]
        if p not in self._tables:
            cols = [u.cols[c] for c in names(len(u.types))]
            self._tables[p] = KeyTable.of(cols, u.height,
                                          max(DENSE_SPAN, TABLE_SPAN * u.height))
        table = self._tables[p]
        if table is not None:
            return table.rows(values, n)
        out = np.full(n, -1, dtype=np.int64)
        if u is self.frames.full.get(p):
            li, ri = self.frames._probe(p, tuple(range(len(values))), values)
            out[li] = ri
            return out
        on = names(len(values))
        left = Frame(dict(zip(on, values, strict=True)), dict(u.types), n)
        right = u.with_column("row", np.arange(u.height, dtype=np.int64), "long")
        row, found = lookup(left, right, on, "row")
        out[found] = row[found]
        return out

    def rows_of(self, p: str, rows: Iterable[tuple]) -> np.ndarray:
        """The universe rows of ``p`` holding ``rows`` (those it holds)."""
        u = self.universe[p]
        on = names(len(u.types))
        f = Frame.from_rows(rows, on, [u.types[c] for c in on])
        at = self._rows_of(p, [f.cols[c] for c in on], f.height)
        return at[at >= 0]

    # -- the revival ---------------------------------------------------------------------------
    def run(self, work: Iterable[tuple[str, Iterable[tuple]]],
            counts: Mapping[str, Mapping[tuple, int]]) -> None:
        """Revive from the seeds' queued tuples ``work`` and the counts they made, then put
        the live tuples, counts and aggregate groups into the engine's live layer."""
        for h, by in counts.items():
            if by and h in self.counts:
                rows = list(by)
                at = self.rows_of(h, rows)
                if len(at) != len(rows):
                    raise AssertionError(f"a counted {h} tuple outside the complete layer")
                np.add.at(self.counts[h], at, np.fromiter(by.values(), np.int64, len(by)))
        pending: dict[str, list[np.ndarray]] = {}
        for p, rows in work:
            pending.setdefault(p, []).append(self.rows_of(p, rows))
        while pending:
            for p in self.shape.order:
                got = pending.pop(p, None)
                if got is not None:
                    self._wave(p, got, pending)
        self._hand_over()

    def _wave(self, p: str, got: list[np.ndarray], pending: dict[str, list[np.ndarray]]
              ) -> None:
        """Make the supported ones of the queued rows ``got`` (universe rows of ``p``, with
        repeats) live and queue what they support."""
        live = self.live[p]
        queued = np.zeros(len(live), dtype=bool)  # (each row once: a mask of the universe,
        for rows in got:                          # not a sort of the rows)
            queued[rows] = True
        rows = np.flatnonzero(queued & ~live)
        rows = rows[self._supported(p, rows)]
        if not len(rows):
            return
        live[rows] = True
        fresh = np.zeros(len(live), dtype=bool)
        fresh[rows] = True
        for h, cols in self.shape.embedding.get(p, ()):
            link = self._link(h, p, cols)
            hit = np.flatnonzero(fresh[link] & (link >= 0))
            if len(hit):
                pending.setdefault(h, []).append(hit)
        vs = self.shape.counted.get(p, ())
        if vs:
            delta = {p: self.universe[p].take(rows)}
            derived: dict[str, list[Frame]] = {}
            for v in vs:
                derived.setdefault(v.head_pred, []).append(self.frames.run_variant(v, delta))
            for h, parts in derived.items():
                self._count(h, concat(parts), pending)

    def _supported(self, p: str, rows: np.ndarray) -> np.ndarray:
        """Which of ``rows`` belong in the live layer given what is live now
        (:meth:`MaintainedEngine._supported`: within the bounds and kept by suppression by
        construction of the universe)."""
        counts = self.counts.get(p)
        if counts is not None:
            return counts[rows] > 0
        within = self.within[p]
        tests = self._tests.get(p)
        if not tests:
            return np.ones(len(rows), dtype=bool) if within is None else within[rows]
        ok = np.zeros(len(rows), dtype=bool)
        for atoms, links in zip(self.engine._support_cols[p], tests, strict=True):
            each = np.ones(len(rows), dtype=bool)
            for (src, _), link in zip(atoms, links, strict=True):
                at = link[rows]
                each &= (at >= 0) & self.live[src][np.maximum(at, 0)]
            ok |= each
        return ok if within is None else ok & within[rows]

    def _count(self, h: str, derived: Frame, pending: dict[str, list[np.ndarray]]) -> None:
        """Count the tuples ``derived`` of the counted relation ``h`` (a bag: one per
        derivation, from every rule deriving it, looked up at once); queue those whose count
        rose from zero."""
        if not derived.height:
            return
        at = self._rows_of(h, [derived.cols[c] for c in names(len(derived.types))],
                           derived.height)
        if (at < 0).any():
            raise AssertionError(f"a derived {h} tuple outside the complete layer")
        counts = self.counts[h]
        more = np.bincount(at, minlength=len(counts))
        rose = np.flatnonzero((counts == 0) & (more > 0))
        counts += more
        if len(rose):
            pending.setdefault(h, []).append(rose)

    def _hand_over(self) -> None:
        """The live tuples into the engine's live layer (each relation keeping its frame
        beside its tuples, for what counts it: :meth:`Relation.keep_frame`), the counts
        into its counts, and the aggregate groups the live tuples touch computed on the
        frames. The tuples are made here, as the tuple path makes them — and the maintained
        relation's index by group and the suppressing relation's complete tuples, which the
        tuple path makes too (its groups, its candidates): left to the first update, they
        were made there, with what allocating them costs in a large heap (the engine
        benchmark's first update of large-clique-17: 140 → 180 ms, in a process that had
        run every other query)."""
        engine = self.engine
        for p in self.shape.order:
            at = np.flatnonzero(self.live[p])
            frame = self.universe[p].take(at)
            rows = frame.rows(names(len(frame.types)))
            if len(engine.full[p]):
                raise AssertionError(f"{p} revived from scratch into a live relation")
            rel = engine.full[p] = type(engine.full[p])(rows)  # (a set made in C, no loop)
            rel.keep_frame(frame)
            counts = self.counts.get(p)
            if counts is not None:
                engine.counts[p].update(zip(rows, counts[at].tolist(), strict=True))
            for agg in self.shape.grouped.get(p, ()):
                self._aggregate(agg, frame)
        plan = engine.plan
        engine.full[plan.target].index(tuple(range(plan.key)))
        for pruned in engine._suppressing.values():
            engine.complete[pruned].rows  # noqa: B018 - made now (docstring)

    def _aggregate(self, agg: str, frame: Frame) -> None:
        """The aggregate ``agg``'s groups over the live tuples ``frame`` of the relation it
        aggregates (from empty: a revival from scratch touches every group it holds), as
        :meth:`MaintainedEngine._set_groups` computes them: the group's key with the best
        value put at the aggregate's position."""
        engine = self.engine
        plan, (pos, func) = engine.plan, engine.program.aggregates[agg]
        if len(engine.full[agg]):
            raise AssertionError(f"{agg} revived from scratch into a live relation")
        if not frame.height:
            return
        by = names(plan.key)
        ids, best = group_best(frame, by, f"c{plan.aggregates[agg]}", func)
        _, first = np.unique(ids, return_index=True)
        groups = frame.take(first).rows(by)
        engine.full[agg].add([(*g[:pos], b, *g[pos:])
                              for g, b in zip(groups, best[ids[first]].tolist(), strict=True)])


def revive(engine: MaintainedEngine, shape: RevivalPlan,
           work: Iterable[tuple[str, Iterable[tuple]]]) -> None:
    """Revive ``engine``'s live layer set at a time from the seeds' queued ``work``."""
    SetRevival(engine, shape).run(work, engine.counts)

