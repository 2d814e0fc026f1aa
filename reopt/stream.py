"""A continuous-query executor on Spark: windowed stream joins in micro-batches, each result
exactly once, under a plan tree that may change between micro-batches. The operations on
frames (building a leaf, a join, a union, collecting a state's rows, the final answer) are
methods of their own, which :mod:`reopt.streamlocal` overrides to run the same executor in
process on pandas (``--executor local``, the default; everything else here is shared).

Input is a folder as ``reopt data stream`` writes it: ``STREAM/SSSSSS.parquet``, the records
of one stream with event time ``ts`` in stream second ``[S, S+1)``. A micro-batch is
``batch_seconds`` seconds of stream time; batches are read by a plain loop over the files in
stream-time order, not by Structured Streaming's file source: that source orders files by
modification time and cuts batches by file counts, so a batch would not be a stretch of event
time, the run would not be reproducible, and its stateful operators may not be rearranged
between batches — here the state is reopt's own, and any plan may run any batch.

Semantics (CQL's sliding windows): a result is one combination of tuples, one per FROM item,
meeting the query's conditions, all alive at the same instant — with ``t`` the newest of
their event times, every tuple ``i`` has ``t - ts_i < window_i``. It is emitted in the
micro-batch that holds ``t`` (the batch in which its newest tuple arrived), exactly once.

State: each stream keeps a window buffer (a pandas frame of its unexpired records, expired by
event time at the end of every batch: a record with ``ts <= end - window`` can never join
again). With ``state="windows"`` that is all: no intermediate join state is kept, so the
join tree may change between micro-batches with nothing to migrate; each batch recomputes the
old sides it needs from the buffers. With ``state="intermediate"`` (the default: measured
1.5× faster per batch on both generated workloads, BENCHMARKS.md) every join but the root
also keeps its results over the windows' contents (:mod:`reopt.streamstate`:
pandas on the driver, a result expiring with its oldest tuple), updated with the join's new
results of each batch, and the old side of a join is read from its child's state instead.
A plan change then migrates the states (``migration``): *moving* builds the new tree's
states from the old tree's (a relation set both trees have is reused, the others are joined
from the reused states and the buffers) before the batch runs; *parallel* runs the new plan
beside the old ones on the tuples from the switch on, with empty states, until the old
plans' tuples have expired, each result emitted by exactly one plan
(:mod:`reopt.streamstate` states the rule).

A batch runs the plan tree as a symmetric windowed join on Spark DataFrames: at a join of
``L`` and ``R``, the new results are ``ΔL ⋈ (R_old ∪ ΔR) ∪ L_old ⋈ ΔR`` — new tuples of each
side probe the other side's window state, and a combination with new tuples on both sides is
produced once (by the first term). ``old`` of a subtree is the join of its buffers before the
batch. Joins carry the plan's operator as a Spark join hint (:data:`STREAM_JOIN_HINTS`) and
the window conditions of every tuple they hold. Filters, join conditions and the SELECT list
are the query's, prepared as :mod:`reopt.execute` prepares a batch plan.

After every batch, the observations as deltas for the rate model: ``rate STREAM =R`` (arrivals
in the batch per second; none for a stream that delivered nothing, whose rate must be > 0)
and ``sel A.x=B.y =S`` for every equi-join predicate, measured on the windows' contents at
the batch's end (matching pairs over all pairs; none when a window is empty or no pair
matches, since a selectivity must be > 0).
"""

from __future__ import annotations

import dataclasses
import math
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import sqlglot
from sqlglot import exp

from reopt.costmodel.cardinality import Adjustments, Estimator
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.errors import ReoptError
from reopt.costmodel.query import Query
from reopt.costmodel.sql import sql_without_windows
from reopt.execute import JOIN_HINTS, _name, _prepare, _Prepared, collect
from reopt.plan import PlanNode
from reopt.streamchange import Evidence
from reopt.streamstate import EXPIRY_SLACK, RelSet, Track, expire, join_nodes, retire, state_label

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TIME = "ts"
"""The event-time column every stream record carries (seconds of stream time)."""
STREAM_JOIN_HINTS = {**JOIN_HINTS, "shj": "shuffle_hash", "nlj": "shuffle_replicate_nl"}
"""Join operator -> Spark join hint on its right input; the rate model's symmetric hash join
(``shj``) and nested loops (``nlj``) as Spark's shuffled hash and nested-loop joins."""
STATES = ("windows", "intermediate")
"""What the executor keeps between batches: per-stream window buffers only, or those and
every non-root join's results (module doc)."""
MIGRATIONS = ("moving", "parallel")
"""How intermediate state follows a plan change (module doc)."""


class StreamError(ReoptError):
    """A query or stream folder the executor cannot run; one line."""


@dataclass
class MicroBatch:
    """One micro-batch after it ran: what arrived, what it emitted, what it observed."""

    index: int
    start: float
    end: float
    plan: str
    """The plan tree that ran it, one line (``join(join(p, a), b)`` with operators)."""
    arrivals: dict[str, int]
    state: dict[str, int]
    """Records each stream's window buffer holds after expiry at the batch's end."""
    columns: list[str]
    rows: list[tuple]
    seconds: float
    deltas: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    """Per stream, records dropped (a file that cannot be read, a record outside its file's
    second or without a time); counted, never fatal."""
    migration: str | None = None
    """How the batch's plan took over from the previous one: ``moving``, ``parallel``,
    ``reuse`` (the new tree has only relation sets the running one keeps: nothing to move),
    or None (no plan change, or no intermediate state to migrate)."""
    migration_seconds: float = 0.0
    """Wall time of the migration itself (part of ``seconds``)."""
    join_state: dict[str, int] = field(default_factory=dict)
    """Rows each stateful join keeps after the batch (``a+p``), summed over the plans
    running (``state="intermediate"`` only)."""
    plans: list[str] = field(default_factory=list)
    """Every plan that ran the batch, oldest first: more than one during a parallel-track
    migration."""
    cpu_seconds: float = 0.0
    """The driver process's CPU time in the batch (``time.process_time``): the in-process
    executors' work, less disturbed than ``seconds`` by other processes on a loaded machine
    (on Spark it misses the JVM's work)."""
    evidence: dict[str, Evidence] = field(default_factory=dict)
    """What each observed statistic was estimated from (``rate bids`` -> arrivals over
    seconds, every stream's, none arrived included; ``sel A.x=B.y`` -> matching pairs over
    pairs): how sure it is, for the change trigger (:mod:`reopt.streamchange`)."""

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "start": self.start, "end": self.end, "plan": self.plan,
                "arrivals": self.arrivals, "state": self.state, "results": len(self.rows),
                "seconds": self.seconds, "deltas": self.deltas, "skipped": self.skipped,
                "migration": self.migration, "migration_seconds": self.migration_seconds,
                "join_state": self.join_state, "plans": self.plans,
                "cpu_seconds": self.cpu_seconds}


def _sel_key(p: Any) -> str:
    """The statistic a join predicate's ``sel`` delta sets (``sel A.x=B.y``)."""
    return f"sel {p.left.alias}.{p.left.column}={p.right.alias}.{p.right.column}"


def plan_line(node: PlanNode) -> str:
    """The plan tree in one line: ``shj(nlj(p, a), b)``."""
    if not node.children:
        return node.relations[0]
    if len(node.children) == 1:
        return plan_line(node.children[0])
    return f"{node.op}({', '.join(plan_line(c) for c in node.children)})"


def _check_query(query: Query, catalog: Catalog) -> None:
    """Only select-project-join queries over streams run continuously here."""
    for r in query.relations:
        if not catalog.table(r.table).is_stream:
            raise StreamError(f"query {query.name}: '{r.table}' is a stored table; the stream "
                              "executor joins streams only (a table join is not supported yet)")
    tree = sqlglot.parse_one(query.sql)
    if (query.aggregates or query.group_by or tree.find(exp.AggFunc) is not None
            or tree.args.get("group") is not None):
        raise StreamError(f"query {query.name}: the stream executor emits join results; "
                          "aggregates and GROUP BY over windows are not supported yet")


class ContinuousQuery:
    """A windowed join query over the stream files in ``data_dir``, run batch by batch.

    ``windows`` come from the query's window clauses, else the catalog (with ``adjustments``,
    ``window`` deltas). :meth:`step` runs the next micro-batch under a given plan;
    :meth:`run` runs them all, asking ``plan_for`` for each batch's plan. ``spark`` may be
    None until the first batch (set :attr:`spark`): the query and the folder are checked
    without it, so bad input fails before Spark starts.
    """

    def __init__(self, query: Query, catalog: Catalog, data_dir: str | Path,
                 spark: SparkSession | None, batch_seconds: int = 1,
                 adjustments: Adjustments | None = None, state: str = "intermediate",
                 migration: str = "moving"):
        if isinstance(batch_seconds, bool) or not isinstance(batch_seconds, int) \
                or batch_seconds < 1:
            raise StreamError(f"batch seconds must be a whole number >= 1, got {batch_seconds!r}")
        if state not in STATES:
            raise StreamError(f"unknown state '{state}' (choose from {', '.join(STATES)})")
        if migration not in MIGRATIONS:
            raise StreamError(f"unknown migration '{migration}' (choose from "
                              f"{', '.join(MIGRATIONS)})")
        self.state = state
        self.migration = migration
        self.tracks: list[Track] = []
        """The plans running with their intermediate states, oldest first (intermediate
        state only; more than one during a parallel-track migration)."""
        query = dataclasses.replace(query, sql=sql_without_windows(query.sql, catalog))
        _check_query(query, catalog)
        self.query = query
        self.spark = spark
        self.batch_seconds = batch_seconds
        est = Estimator(query, catalog, adjustments or Adjustments())
        self.windows = {a: float(est.window(a)) for a in query.aliases}
        self.tables = list(dict.fromkeys(r.table for r in query.relations))
        self.root = Path(data_dir)
        self.files, self.schemas = self._discover()
        self.seconds = max((max(f) + 1 for f in self.files.values() if f), default=0)
        schemas = {t: [f.name for f in s] for t, s in self.schemas.items()}
        self.view = f"reopt_stream_{uuid.uuid4().hex[:12]}"
        self.prepared: _Prepared = _prepare(query, schemas, self.view)
        self.time_of = {}
        for i, r in enumerate(query.relations):
            col = {c.lower(): c for c in schemas[r.table]}[TIME]
            self.prepared.needed[i].add(col)
            self.time_of[i] = col
        self.horizon = {t: max(w for a, w in self.windows.items()
                               if query.table_of(a) == t) for t in self.tables}
        self.buffers = {t: self._empty(t) for t in self.tables}
        self.batch = 0

    # -- the stream files ----------------------------------------------------------------------
    def _discover(self) -> tuple[dict[str, dict[int, Path]], dict[str, pa.Schema]]:
        files, schemas = {}, {}
        for t in self.tables:
            folder = self.root / t
            if not folder.is_dir():
                raise StreamError(f"{self.root}: no stream folder '{t}' (query "
                                  f"{self.query.name} reads it)")
            found = {int(p.stem): p for p in folder.glob("*.parquet") if p.stem.isdigit()}
            if not found:
                raise StreamError(f"{folder}: no stream files (SSSSSS.parquet, one per second)")
            schema = None
            for second in sorted(found):
                try:
                    schema = pq.read_schema(found[second])
                    break
                except (OSError, pa.ArrowException):
                    continue
            if schema is None:
                raise StreamError(f"{folder}: no readable stream file")
            if TIME not in {n.lower() for n in schema.names}:
                raise StreamError(f"{folder}: records have no '{TIME}' column (event time)")
            files[t], schemas[t] = found, schema
        return files, schemas

    def _empty(self, table: str) -> pd.DataFrame:
        return self.schemas[table].empty_table().to_pandas()

    def _read(self, table: str, start: int, end: int, skipped: dict[str, int]) -> pd.DataFrame:
        """The records of ``table`` in stream seconds ``[start, end)``; unreadable files and
        records outside their second are counted in ``skipped`` and dropped."""
        frames = []
        schema = self.schemas[table]
        time_col = next(n for n in schema.names if n.lower() == TIME)
        for second in range(start, end):
            path = self.files[table].get(second)
            if path is None:  # a stalled source: nothing arrived
                continue
            try:
                frame = pq.read_table(path).cast(schema).to_pandas()
            except (OSError, pa.ArrowException, ValueError):
                skipped[table] = skipped.get(table, 0) + 1
                continue
            ts = frame[time_col]
            ok = ts.notna() & (ts >= second) & (ts < second + 1)
            if not ok.all():
                skipped[table] = skipped.get(table, 0) + int((~ok).sum())
                frame = frame[ok]
            frames.append(frame)
        if not frames:
            return self._empty(table)
        return pd.concat(frames, ignore_index=True)

    # -- one micro-batch on Spark --------------------------------------------------------------
    def _frame(self, table: str, pdf: pd.DataFrame) -> DataFrame:
        from pyspark.sql.pandas.types import from_arrow_schema

        schema = from_arrow_schema(self.schemas[table])
        if len(pdf) == 0:
            return self._no_rows(schema)
        return self.spark.createDataFrame(pdf, schema=schema)

    def _no_rows(self, schema: Any) -> DataFrame:
        """An empty frame of ``schema`` with no partitions. ``createDataFrame`` of an empty
        list or pandas frame has one partition per core of a Python-side RDD, each a task that
        runs a Python worker, and a nested-loop join runs one task per pair of its sides'
        partitions: on the first batches, where the windows and join states are empty, those
        tasks were most of a batch (segtolls drift on Spark, batch 0: 2.0–2.2 s -> 0.5–0.8 s)."""
        return self.spark.createDataFrame(self.spark.sparkContext.emptyRDD(), schema)

    def _leaf(self, alias: str, frames: dict[str, tuple[DataFrame, DataFrame]]
              ) -> tuple[DataFrame, DataFrame]:
        from pyspark.sql import functions as F

        i = self.query.index(alias)
        old, new = frames[self.query.table_of(alias)]
        out = []
        for df in (old, new):
            df = df.select(*[F.col(f"`{c}`").alias(_name(i, c))
                             for c in sorted(self.prepared.needed[i])])
            for text in self.prepared.filters.get(i, []):
                df = df.filter(F.expr(text))
            out.append(df)
        return out[0], out[1]

    def _window_condition(self, held: set[int]) -> str:
        times = [_name(i, self.time_of[i]) for i in sorted(held)]
        newest = f"greatest({', '.join(times)})"
        return " AND ".join(f"({newest} - {t} < {self.windows[self.query.aliases[i]]!r})"
                            for i, t in zip(sorted(held), times, strict=True))

    def _join(self, node: PlanNode, left: DataFrame, right: DataFrame, lset: set[int],
              rset: set[int]) -> DataFrame:
        from pyspark.sql import functions as F

        both = lset | rset
        conds = [f"({text})" for used, text in self.prepared.conditions
                 if used <= both and not used <= lset and not used <= rset]
        conds.append(self._window_condition(both))
        hint = STREAM_JOIN_HINTS.get(node.op)
        if hint is not None:
            right = right.hint(hint)
        return left.join(right, F.expr(" AND ".join(conds)), "inner")

    # the operations a batch is made of, on Spark; reopt.streamlocal runs them on pandas
    def _check_session(self) -> None:
        if self.spark is None:
            raise StreamError("no Spark session: set ContinuousQuery.spark before a batch")

    def _session(self) -> AbstractContextManager[None]:
        from reopt.spark import execution_settings

        return execution_settings(self.spark)

    def _union(self, a: DataFrame, b: DataFrame) -> DataFrame:
        return a.unionByName(b)

    def _rows(self, df: DataFrame) -> pd.DataFrame:
        """A frame's rows on the driver (one Spark job)."""
        return df.toPandas()

    def _schema(self, df: DataFrame) -> Any:
        return df.schema

    def _owned(self, delta: DataFrame, cut: float, held: set[int]) -> DataFrame:
        """``delta`` without the combinations whose tuples all have ``ts >= cut`` (a later
        track's, :mod:`reopt.streamstate`)."""
        from pyspark.sql import functions as F

        return delta.filter(F.expr(" OR ".join(
            f"({_name(i, self.time_of[i])} < {cut!r})" for i in sorted(held))))

    def _answer(self, delta: DataFrame) -> tuple[list[str], list[tuple]]:
        """The batch's new join results through the constant conditions and the SELECT
        list: (columns, rows)."""
        from pyspark.sql import functions as F

        if self.prepared.constant:
            delta = delta.filter(F.expr(" AND ".join(f"({c})" for c in self.prepared.constant)))
        delta.createOrReplaceTempView(self.view)
        try:
            answer = self.spark.sql(self.prepared.final_sql)
            return list(answer.columns), collect(answer)
        finally:
            self.spark.catalog.dropTempView(self.view)

    def _delta(self, node: PlanNode, frames: dict[str, tuple[DataFrame, DataFrame]]
               ) -> tuple[DataFrame, DataFrame, set[int]]:
        """(old, delta, relation indexes) of ``node``'s subtree: its results among the
        buffers before the batch, and its new results in the batch."""
        log = node.alt.log_op
        if log == "scan":
            old, new = self._leaf(node.relations[0], frames)
            return old, new, {self.query.index(node.relations[0])}
        if log != "join":  # a sort enforcer or the final operator: the SELECT list runs later
            return self._delta(node.children[0], frames)
        lo, ld, ls = self._delta(node.children[0], frames)
        ro, rd, rs = self._delta(node.children[1], frames)
        delta = self._union(self._join(node, ld, self._union(ro, rd), ls, rs),
                            self._join(node, lo, rd, ls, rs))
        return self._join(node, lo, ro, ls, rs), delta, ls | rs

    def step(self, plan: PlanNode, migration: str | None = None) -> MicroBatch:
        """Run the next micro-batch under ``plan`` (any plan of the query; the previous
        batch's plan need not be the same). With intermediate state, a plan change migrates
        the states by ``migration`` (default: the query's :attr:`migration`). Past the
        stream's last second, a :class:`StreamError`."""
        self._check_session()
        if set(plan.relations) != set(self.query.aliases):
            raise StreamError(f"the plan covers {sorted(plan.relations)}, query "
                              f"{self.query.name} has {sorted(self.query.aliases)}")
        migration = self.migration if migration is None else migration
        if migration not in MIGRATIONS:
            raise StreamError(f"unknown migration '{migration}' (choose from "
                              f"{', '.join(MIGRATIONS)})")
        start, end = self._next_batch()
        t0, c0 = time.perf_counter(), time.process_time()
        skipped: dict[str, int] = {}
        arrived = {t: self._read(t, start, end, skipped) for t in self.tables}
        moved: tuple[str | None, float] = (None, 0.0)
        with self._session():
            if self.state == "windows":
                frames = {t: (self._frame(t, self.buffers[t]), self._frame(t, arrived[t]))
                          for t in self.tables}
                _, delta, _ = self._delta(plan, frames)
                collected: list[dict[RelSet, pd.DataFrame]] = []
            else:
                moved = self._migrate(plan, migration, float(start))
                delta, collected = self._tracks_delta(arrived)
            columns, rows = self._answer(delta)
        plans = [plan_line(t.plan) for t in self.tracks] or [plan_line(plan)]
        self._advance_states(collected, float(end))
        self._slide(arrived, end)
        seconds = time.perf_counter() - t0
        batch = MicroBatch(self.batch, float(start), float(end), plan_line(plan),
                           {t: len(f) for t, f in arrived.items()},
                           {t: len(f) for t, f in self.buffers.items()}, columns, rows,
                           seconds, skipped=skipped, migration=moved[0],
                           migration_seconds=moved[1], join_state=self.join_state(),
                           plans=plans, cpu_seconds=time.process_time() - c0)
        self.observe(batch)
        self.batch += 1
        return batch

    # -- intermediate state (state="intermediate") ---------------------------------------------
    def _state_frame(self, rows: pd.DataFrame | None, schema: Any) -> DataFrame:
        """A state's rows as a DataFrame of the join's schema (an empty one without rows).
        The rows are put in the schema's column order first: Spark maps a pandas frame's
        columns to a schema by position, and a state kept by one tree (``join(s, x)``) is
        reused by another that orders the same columns differently (``join(x, s)``)."""
        if rows is None or len(rows) == 0:
            return self._no_rows(schema)
        return self.spark.createDataFrame(rows[schema.fieldNames()], schema=schema)

    def _times(self, rels: RelSet) -> dict[str, float]:
        """A state's time columns and their windows (what expires its rows)."""
        return {_name(i, self.time_of[i]): self.windows[self.query.aliases[i]] for i in rels}

    def _leaf_frames(self, since: float, arrived: dict[str, pd.DataFrame] | None
                     ) -> dict[str, tuple[DataFrame, DataFrame]]:
        """Per stream, (window buffer, arrivals) as DataFrames, the buffer cut to the tuples
        with ``ts >= since`` (a parallel track's new plan reads only those)."""
        frames = {}
        for t in self.tables:
            buf = self.buffers[t]
            if since != -math.inf:
                time_col = next(c for c in buf.columns if c.lower() == TIME)
                buf = buf[buf[time_col] >= since]
            new = self._empty(t) if arrived is None else arrived[t]
            frames[t] = (self._frame(t, buf), self._frame(t, new))
        return frames

    def _old(self, node: PlanNode, frames: dict[str, tuple[DataFrame, DataFrame]],
             states: dict[RelSet, pd.DataFrame | None]) -> tuple[DataFrame, set[int]]:
        """``node``'s results over the state before the batch: a join's kept state where
        ``states`` has it, else the join of its children's."""
        log = node.alt.log_op
        if log == "scan":
            old, _ = self._leaf(node.relations[0], frames)
            return old, {self.query.index(node.relations[0])}
        if log != "join":
            return self._old(node.children[0], frames, states)
        lo, ls = self._old(node.children[0], frames, states)
        ro, rs = self._old(node.children[1], frames, states)
        joined = self._join(node, lo, ro, ls, rs)
        rels = frozenset(ls | rs)
        if rels in states:
            return self._state_frame(states[rels], self._schema(joined)), ls | rs
        return joined, ls | rs

    def _migrate(self, plan: PlanNode, migration: str, start: float
                 ) -> tuple[str | None, float]:
        """Make ``plan`` the newest track before the batch from ``start``; (how, seconds)."""
        t0 = time.perf_counter()
        sets = [rels for rels, _ in join_nodes(plan, self.query.aliases)]
        if not self.tracks:
            self.tracks = [Track(plan, -math.inf, dict.fromkeys(sets))]
            return None, 0.0
        newest = self.tracks[-1]
        if plan_line(plan) == plan_line(newest.plan):
            return None, 0.0
        if all(rels in newest.states for rels in sets):  # same relation sets: swap the plan
            self.tracks[-1] = Track(plan, newest.since, {r: newest.states[r] for r in sets})
            return "reuse", time.perf_counter() - t0
        if migration == "parallel":
            self.tracks.append(Track(plan, start, dict.fromkeys(sets)))
            return "parallel", time.perf_counter() - t0
        # moving state: the oldest track's states are complete (it reads all tuples)
        kept = self.tracks[0].states
        states: dict[RelSet, pd.DataFrame | None] = {}
        frames = self._leaf_frames(-math.inf, None)
        for rels, node in join_nodes(plan, self.query.aliases):  # children first
            if rels in kept:
                states[rels] = kept[rels]
                continue
            old, _ = self._old(node, frames, states)
            states[rels] = expire(self._rows(old), self._times(rels), start)
        self.tracks = [Track(plan, -math.inf, states)]
        return "moving", time.perf_counter() - t0

    def _track_delta(self, node: PlanNode, frames: dict[str, tuple[DataFrame, DataFrame]],
                     track: Track, collected: dict[RelSet, pd.DataFrame]
                     ) -> tuple[DataFrame | None, DataFrame, set[int]]:
        """:meth:`_delta` over a track's states: a stateful join's old side is its kept
        state, and its new results are collected (into ``collected``, to update the state)
        once, then read back by its parent."""
        log = node.alt.log_op
        if log == "scan":
            old, new = self._leaf(node.relations[0], frames)
            return old, new, {self.query.index(node.relations[0])}
        if log != "join":
            return self._track_delta(node.children[0], frames, track, collected)
        lo, ld, ls = self._track_delta(node.children[0], frames, track, collected)
        ro, rd, rs = self._track_delta(node.children[1], frames, track, collected)
        delta = self._union(self._join(node, ld, self._union(ro, rd), ls, rs),
                            self._join(node, lo, rd, ls, rs))
        rels = frozenset(ls | rs)
        if rels not in track.states:  # the root: nothing joins its results
            return None, delta, ls | rs
        rows = collected[rels] = self._rows(delta)
        schema = self._schema(delta)
        return (self._state_frame(track.states[rels], schema), self._state_frame(rows, schema),
                ls | rs)

    def _tracks_delta(self, arrived: dict[str, pd.DataFrame]
                      ) -> tuple[DataFrame, list[dict[RelSet, pd.DataFrame]]]:
        """The batch's results over every track, each kept to the results it owns (a track
        followed by one starting at ``T`` drops those whose tuples all have ``ts >= T``)."""
        out, collected = None, []
        for k, track in enumerate(self.tracks):
            got: dict[RelSet, pd.DataFrame] = {}
            _, delta, held = self._track_delta(track.plan, self._leaf_frames(track.since,
                                                                             arrived),
                                               track, got)
            if k + 1 < len(self.tracks):
                delta = self._owned(delta, self.tracks[k + 1].since, held)
            out = delta if out is None else self._union(out, delta)
            collected.append(got)
        return out, collected

    def _advance_states(self, collected: list[dict[RelSet, pd.DataFrame]], end: float
                        ) -> None:
        """After the batch ending at ``end``: each state gains its join's new results and
        loses what expired; tracks whose tuples have all expired are dropped."""
        for track, got in zip(self.tracks, collected, strict=True):
            for rels, rows in got.items():
                kept = track.states[rels]
                both = rows if kept is None or len(kept) == 0 else pd.concat(
                    [kept, rows], ignore_index=True)
                track.states[rels] = expire(both, self._times(rels), end)
        if self.tracks:
            self.tracks = retire(self.tracks, end, max(self.windows.values()))

    def join_state(self) -> dict[str, int]:
        """Rows each stateful join keeps now, summed over the running plans (``a+p``)."""
        out: dict[str, int] = {}
        for track in self.tracks:
            for rels, n in track.sizes().items():
                label = state_label(rels, self.query.aliases)
                out[label] = out.get(label, 0) + n
        return out

    def _next_batch(self) -> tuple[int, int]:
        """``[start, end)`` of the next micro-batch in stream seconds (every executor's
        batches are the same stretches); past the stream's last second, a
        :class:`StreamError`."""
        start = self.batch * self.batch_seconds
        if start >= self.seconds:
            raise StreamError(f"{self.root}: the stream ends at {self.seconds} s; no batch "
                              f"{self.batch} (from {start} s)")
        return start, start + self.batch_seconds

    def _slide(self, arrived: dict[str, pd.DataFrame], end: float) -> None:
        """The windows slide at a batch's end: append the arrivals, then expire by event
        time (shared with the eddy, :mod:`reopt.eddy`, which keeps the same buffers)."""
        for t in self.tables:
            both = pd.concat([self.buffers[t], arrived[t]], ignore_index=True)
            time_col = next(c for c in both.columns if c.lower() == TIME)
            self.buffers[t] = both[both[time_col] > end - self.horizon[t] - EXPIRY_SLACK
                                   ].reset_index(drop=True)

    # -- checkpoints (reopt.streamcheckpoint) --------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """What the next batches depend on: the next batch's index, the window buffers and
        the running plans with their join states. The frames are the executor's own, not
        copies: serialize the snapshot before the next batch runs."""
        return {"batch": self.batch, "buffers": dict(self.buffers), "tracks": list(self.tracks)}

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Continue from :meth:`snapshot`'s point (the same query over the same folder)."""
        if set(snapshot["buffers"]) != set(self.tables):
            raise StreamError(f"the checkpoint holds streams {sorted(snapshot['buffers'])}, "
                              f"query {self.query.name} reads {sorted(self.tables)}")
        self.batch = snapshot["batch"]
        self.buffers = dict(snapshot["buffers"])
        self.tracks = list(snapshot["tracks"])

    # -- observations --------------------------------------------------------------------------
    def _window_contents(self, alias: str, end: float) -> pd.DataFrame:
        buf = self.buffers[self.query.table_of(alias)]
        time_col = next(c for c in buf.columns if c.lower() == TIME)
        return buf[buf[time_col] > end - self.windows[alias]]

    def observe(self, batch: MicroBatch) -> None:
        """Set ``batch``'s observations as ``rate``/``sel`` delta texts (see the module doc)
        and, for every stream and predicate, the evidence behind them."""
        seconds = batch.end - batch.start
        deltas = [f"rate {t} ={n / seconds:.6g}" for t, n in batch.arrivals.items() if n > 0]
        evidence = {f"rate {t}": Evidence(n, seconds) for t, n in batch.arrivals.items()}
        for p, matches, pairs in self._join_counts(batch.end):
            evidence[_sel_key(p)] = Evidence(matches, pairs)
            if matches > 0:
                deltas.append(f"{_sel_key(p)} ={matches / pairs:.6g}")
        batch.deltas, batch.evidence = deltas, evidence

    def _join_counts(self, end: float) -> Iterator[tuple[Any, int, int]]:
        """Per equi-join predicate whose sides' windows both hold tuples at ``end``: the
        predicate, the matching pairs and all pairs among the windows' contents."""
        for p in self.query.joins:
            sides = []
            for ref in (p.left, p.right):
                contents = self._window_contents(ref.alias, end)
                column = {c.lower(): c for c in contents.columns}[ref.column.lower()]
                sides.append(contents[column])
            a, b = sides
            if len(a) == 0 or len(b) == 0:
                continue
            yield p, int((a.value_counts() * b.value_counts()).sum()), len(a) * len(b)

    def run(self, plan_for: PlanNode | Callable[[MicroBatch | None],
                                                 PlanNode | tuple[PlanNode, str]],
            last: MicroBatch | None = None) -> Iterator[MicroBatch]:
        """Every remaining micro-batch in stream-time order. ``plan_for`` is a plan, or a
        function of the previous batch (None before the first; ``last`` when resuming after
        it) returning the next batch's plan, or (plan, migration) to choose the migration of
        this switch: where a re-planning loop plugs in."""
        while self.batch * self.batch_seconds < self.seconds:
            chosen = plan_for if isinstance(plan_for, PlanNode) else plan_for(last)
            plan, migration = chosen if isinstance(chosen, tuple) else (chosen, None)
            last = self.step(plan, migration)
            yield last

