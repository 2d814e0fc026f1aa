"""``reopt run``: execute a query split by split, observing and re-planning between splits.

The largest input of the query (the relation whose table takes the most bytes on disk among
the tables the query names once; a self-joined table is never split) is cut into ``K`` splits
by hash: split ``i`` holds the rows with ``pmod(xxhash64(key), K) = i``, ``key`` being the
chosen column or the table's first (TPC-H: its key, ``l_orderkey`` for lineitem). Hash splits
are disjoint, cover the table, and are of about equal size whatever the key's skew in value.
Range splits cut the column at its approximate quantiles and run in the column's order (by a
date: in time order, so drifting data differs from split to split). Each split runs
the query with the other relations whole; inner joins distribute over the split, and the
splits' answers are combined into the whole query's answer by the rules of
:mod:`reopt.combine`. No answer is collected to the driver: each split's stays in Spark, and
:mod:`reopt.answer` combines them there and digests the result (an answer may be far larger
than the driver: Q8Join at SF 1 has about 24 million groups).

Strategies, each over the same splits:

``static``
    reopt's first plan (catalog statistics, the split relation scaled to one split), never
    changed.
``adaptive``
    after each split, its observations (:meth:`~reopt.execute.Execution.deltas`, scaled by
    the next split's size over this one's) go into the incremental session
    (:meth:`~reopt.api.Optimizer.update`); the next split runs the new best plan. Over
    range splits of a column the query itself filters, each split is planned for its own
    range instead (:mod:`reopt.splitaware`).
``hindsight``
    before each split, an untimed first run of the current plan on that split observes it;
    the plan re-optimized with those observations is the one timed: the best an adaptive
    scheme could do with what the plan's nodes observe.
``spark``
    Spark SQL's own plan for the query text over the split: cost-based optimization and join
    reordering on, ``ANALYZE TABLE … COMPUTE STATISTICS FOR ALL COLUMNS`` on every table
    (written as Parquet tables of a scratch database, the split table as the split; untimed),
    adaptive execution on.

Per-subset splits (``reopt run --per-subset KEY``, Query Mesh's plan per data subset): the
subsets are ``M`` ranges of a key column of the split relation, the splits take them in turn
(split ``i`` in subset ``i mod M``), and ``adaptive`` keeps one optimizer session per subset,
each fed only its own subset's observations and running its own plan on its subset's splits
(:class:`Session`).

Each split of the split relation is written once, as Parquet in a scratch folder, before the
first strategy runs (untimed), and every strategy reads that file: a split costs each of them
the same read, not a pass over the whole table through the split's condition.

An empty split (no rows of the split relation) is run, adds nothing to the answer, and its
observations are not pushed: the plan stays as it was (a documented no-op).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import shutil
import tempfile
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reopt.answer import Answer, json_value, keep, release, settle
from reopt.api import Optimizer
from reopt.combine import Combiner, combiner
from reopt.costmodel.cardinality import Estimator
from reopt.costmodel.errors import ReoptError
from reopt.costmodel.query import Query
from reopt.execute import (
    ExecutionError,
    NodeRun,
    execute,
    find_tables,
    read_tables,
)
from reopt.plan import PlanNode
from reopt.splitaware import SplitAware

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

STRATEGIES = ("static", "adaptive", "hindsight", "spark")
SPLIT_BY = ("hash", "range", "subset")
SPARK_SETTINGS = {
    "spark.sql.cbo.enabled": "true",
    "spark.sql.cbo.joinReorder.enabled": "true",
    "spark.sql.cbo.planStats.enabled": "true",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.codegen.wholeStage": "true",
}
"""Spark SQL settings of the ``spark`` strategy, restored after each split."""
SPARK_JOINS = re.compile(r"\b(BroadcastHashJoin|ShuffledHashJoin|SortMergeJoin|"
                         r"BroadcastNestedLoopJoin|CartesianProduct)\b")


def _finite(x: float) -> float | None:
    """``x``, or None (JSON null) when it is not a number: a CPU time that cannot be read."""
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class Splits:
    """How the split relation is cut: ``condition(i)`` selects split ``i``."""

    alias: str
    table: str
    column: str
    k: int
    rows: list[int]
    """Rows of the split table in each split."""
    by: str = "hash"
    conditions: tuple[str, ...] = ()
    """``range`` and ``subset``: the condition of each split (``hash``: computed)."""
    subsets: tuple[int, ...] = ()
    """``subset`` only: the subset (range of ``column``) each split belongs to."""
    subset_conditions: tuple[str, ...] = ()
    """``subset`` only: the condition of each subset (a range of ``column``)."""
    bounds: tuple[tuple[Any, Any], ...] = ()
    """``range`` only: each split's values of ``column`` as ``[lo, hi)``, None unbounded (the
    first split also holds the NULLs)."""

    def condition(self, i: int) -> str:
        if self.conditions:
            return self.conditions[i]
        return f"pmod(xxhash64(`{self.column}`), {self.k}) = {i}"

    def subset(self, i: int) -> int | None:
        """The subset split ``i`` belongs to; None when the splits are not per subset."""
        return self.subsets[i] if self.subsets else None

    def to_json(self) -> dict[str, Any]:
        out = {"alias": self.alias, "table": self.table, "by": self.by,
               "column": self.column, "k": self.k, "rows": self.rows,
               "conditions": [self.condition(i) for i in range(self.k)]}
        if self.subsets:
            out["subsets"] = list(self.subsets)
            out["subset_conditions"] = list(self.subset_conditions)
        return out


@dataclass
class SplitRun:
    """One split under one strategy."""

    index: int
    split_rows: int
    plan: str
    plan_changed: bool
    reopt_seconds: float
    execution_seconds: float
    result_rows: int
    nodes: list[NodeRun] = field(default_factory=list)
    execution_cpu_seconds: float = float("nan")
    """CPU seconds of the driver's JVM during the execution
    (:func:`reopt.spark.jvm_cpu_seconds`: all of it under a ``local`` master)."""
    statistics_seconds: float | None = None
    """``spark`` only: writing and ``ANALYZE``-ing the split's tables (not in execution)."""
    subset: int | None = None
    """Per-subset splits only: the subset (range of the key) the split's data falls in."""

    def to_json(self) -> dict[str, Any]:
        out = {"split": self.index, "split_rows": self.split_rows, "plan": self.plan,
                "plan_changed": self.plan_changed, "reopt_seconds": self.reopt_seconds,
                "execution_seconds": self.execution_seconds,
                "execution_cpu_seconds": _finite(self.execution_cpu_seconds),
                "result_rows": self.result_rows,
                "nodes": [n.to_json() for n in self.nodes]}
        if self.subset is not None:
            out["subset"] = self.subset
        if self.statistics_seconds is not None:
            out["statistics_seconds"] = self.statistics_seconds
        return out


@dataclass
class Session:
    """One incrementally maintained optimizer of a run: the whole run's, or (``adaptive``
    with per-subset splits) one subset's, fed only the observations of that subset's
    splits."""

    subset: int | None
    optimizer: Optimizer
    plan: PlanNode
    deltas: list[str] = field(default_factory=list)
    """Every delta pushed into it after its first plan, in order."""
    updates: list[tuple[int, list[str]]] = field(default_factory=list)
    """Each update pushed after a split: that split's index and the batch of deltas (what a
    benchmark replays to time other optimizers on the same statistics)."""
    plan_changes: int = 0

    def to_json(self, condition: str | None) -> dict[str, Any]:
        return {"subset": self.subset, "condition": condition, "plan": plan_shape(self.plan),
                "plan_changes": self.plan_changes, "deltas": len(self.deltas)}


@dataclass
class StrategyRun:
    """A whole run of one strategy: its splits and the combined answer."""

    strategy: str
    splits: list[SplitRun]
    answer: Answer
    """The combined answer, combined and digested in Spark (:mod:`reopt.answer`): its row
    count, digest and first rows; the rows themselves never reach the driver."""
    sessions: list[Session] = field(default_factory=list)
    """The optimizer sessions after the run: one per subset for ``adaptive`` over per-subset
    splits (in subset order), else one (none for ``spark``)."""
    subset_conditions: tuple[str, ...] = ()

    @property
    def answer_digest(self) -> str:
        """:func:`reopt.answer.digest` of the combined answer."""
        return self.answer.digest

    @property
    def result_rows(self) -> int:
        return self.answer.result_rows

    @property
    def columns(self) -> list[str]:
        return self.answer.columns

    def to_json(self) -> dict[str, Any]:
        out = {"strategy": self.strategy, "result_rows": self.result_rows,
               "answer_digest": self.answer_digest, "columns": self.columns,
               "head": [[json_value(v) for v in row] for row in self.answer.head],
               "combine_seconds": self.answer.seconds,
               "reopt_seconds": sum(s.reopt_seconds for s in self.splits),
               "execution_seconds": sum(s.execution_seconds for s in self.splits),
               "execution_cpu_seconds": _finite(sum(s.execution_cpu_seconds
                                                    for s in self.splits)),
               "plan_changes": sum(s.plan_changed for s in self.splits),
               "splits": [s.to_json() for s in self.splits]}
        if any(x.subset is not None for x in self.sessions):
            out["subsets"] = [x.to_json(self.subset_conditions[x.subset])
                              for x in self.sessions if x.subset is not None]
        return out


def plan_shape(plan: PlanNode) -> str:
    """The plan in one line: operators and join order (``hashjoin(tablescan orders, …)``)."""
    if plan.alt.log_op == "scan":
        return f"{plan.op} {plan.relations[0]}"
    inner = ", ".join(plan_shape(c) for c in plan.children)
    return f"{plan.op}({inner})"


def choose_split(query: Query, data_dir: str | Path) -> tuple[str, str]:
    """(alias, table) of the query's largest input by bytes on disk, among tables the query
    names once (splitting a self-joined table would split both its relations)."""
    sources = find_tables(query, data_dir)
    counts: dict[str, int] = {}
    for r in query.relations:
        counts[r.table] = counts.get(r.table, 0) + 1

    def size(src: Any) -> int:
        path = Path(src.path)
        if path.is_dir():
            return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        return path.stat().st_size

    candidates = [r for r in query.relations if counts[r.table] == 1]
    if not candidates:
        raise ExecutionError(f"query {query.name}: every table is joined with itself; no "
                             "input can be split")
    best = max(candidates, key=lambda r: size(sources[r.table]))
    return best.alias, best.table


def make_splits(query: Query, data_dir: str | Path, k: int, spark: SparkSession,
                alias: str | None = None, by: str = "hash", column: str | None = None,
                subsets: int = 2) -> Splits:
    """Choose the split relation (``alias``, else :func:`choose_split`) and its splits:
    ``hash`` of ``column`` (default: the table's first), ``range``s of ``column`` cut at
    its approximate quantiles (equal-sized splits in the column's order: a date column
    gives the splits in time order), or ``subset``: ``subsets`` ranges of ``column`` (at its
    quantiles) taking the splits in turn — split ``i`` is the part ``i // subsets`` of the
    hash split (by the table's first column) of range ``i mod subsets`` (see
    :func:`_subset_splits`); count each split's rows (one Spark pass, two for ``range`` and
    ``subset``)."""
    from pyspark.sql import functions as F

    if k < 1:
        raise ReoptError(f"the number of splits must be at least 1, got {k}")
    if by == "subset" and not 1 <= subsets <= k:
        raise ReoptError(f"--subsets {subsets}: each of the subsets needs a split; give "
                         f"between 1 and --splits ({k}) subsets")
    if alias is None:
        alias, table = choose_split(query, data_dir)
    else:
        if alias not in query.aliases:
            raise ReoptError(f"query {query.name} has no relation '{alias}' to split "
                             f"(it has {', '.join(query.aliases)})")
        table = query.relations[query.index(alias)].table
        if sum(r.table == table for r in query.relations) > 1:
            raise ReoptError(f"query {query.name} joins table '{table}' with itself; "
                             f"'{alias}' cannot be split")
    if by not in SPLIT_BY:
        raise ReoptError(f"unknown split kind '{by}' (choose from {', '.join(SPLIT_BY)})")
    df = read_tables(query, data_dir, spark)[table]
    if column is None:
        if by == "subset":
            raise ReoptError("per-subset splits need a key column")
        column = df.columns[0]
    else:
        found = {c.lower(): c for c in df.columns}.get(column.lower())
        if found is None:
            what = "to split by" if by != "subset" else "to make subsets of (--per-subset)"
            raise ExecutionError(f"{data_dir}: table '{table}' has no column '{column}' "
                                 f"{what} (it is the split input, relation '{alias}'; its "
                                 f"columns: {', '.join(df.columns)})")
        column = found
    if by == "subset":
        return _subset_splits(df, alias, table, column, k, subsets)
    if by == "hash":
        counts = {int(r[0]): int(r[1]) for r in df.groupBy(
            F.expr(f"pmod(xxhash64(`{column}`), {k})")).count().collect()}
        return Splits(alias, table, column, k, [counts.get(i, 0) for i in range(k)])
    conditions, bounds = _range_conditions(df, column, k)
    rows = df.select(*[F.count_if(F.expr(c)).alias(f"s{i}")
                       for i, c in enumerate(conditions)]).first()
    return Splits(alias, table, column, k, [int(n) for n in rows], "range", tuple(conditions),
                  bounds=bounds)


def _subset_splits(df: Any, alias: str, table: str, key: str, k: int, m: int) -> Splits:
    """``k`` splits over ``m`` subsets: the subsets are ranges of ``key`` cut at its
    approximate ``j/m`` quantiles; split ``i`` belongs to subset ``i mod m`` and is part
    ``i // m`` of that subset's hash split by the table's first column (into as many parts
    as the subset has splits). The splits thus come in passes, each pass one split of every
    subset in ``key`` order: data of every subset keeps arriving, as in a stream."""
    from pyspark.sql import functions as F

    ranges, _ = _range_conditions(df, key, m)
    first = df.columns[0]
    owners = tuple(i % m for i in range(k))
    parts = [owners.count(j) for j in range(m)]
    conditions = tuple(f"{ranges[j]} AND pmod(xxhash64(`{first}`), {parts[j]}) = {i // m}"
                       for i, j in enumerate(owners))
    rows = df.select(*[F.count_if(F.expr(c)).alias(f"s{i}")
                       for i, c in enumerate(conditions)]).first()
    return Splits(alias, table, key, k, [int(n) for n in rows], "subset", conditions, owners,
                  tuple(ranges))


def _range_conditions(df: Any, column: str, k: int
                      ) -> tuple[list[str], tuple[tuple[Any, Any], ...]]:
    """``k`` conditions cutting ``column`` at its approximate ``i/k`` quantiles, and each
    one's ``[lo, hi)`` (None unbounded; :attr:`Splits.bounds`); NULLs go to the first split.
    Equal boundaries (a skewed column) leave empty splits."""
    from pyspark.sql import functions as F

    if k == 1:
        return ["true"], ((None, None),)
    fractions = ", ".join(repr(i / k) for i in range(1, k))
    cuts = df.select(F.expr(f"percentile_approx(`{column}`, array({fractions}))")).first()[0]
    if cuts is None:  # an empty table: every row (none) in the first split
        return ["true"] + ["false"] * (k - 1), ()
    bounds = [_literal(v) for v in cuts]
    col = f"`{column}`"
    out = [f"({col} IS NULL OR {col} < {bounds[0]})"]
    out += [f"({col} >= {lo} AND {col} < {hi})" for lo, hi in pairwise(bounds)]
    out.append(f"{col} >= {bounds[-1]}")
    return out, tuple(pairwise([None, *cuts, None]))


def _literal(v: Any) -> str:
    """A Spark SQL literal of a quantile value (a number, date, timestamp or string)."""
    import datetime as dt

    if isinstance(v, dt.datetime):
        return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
    if isinstance(v, dt.date):
        return f"DATE '{v.isoformat()}'"
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return repr(v) if not hasattr(v, "to_eng_string") else str(v)


@contextlib.contextmanager
def spark_settings(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """``settings`` for the block, every one put back (or unset) after."""
    conf = spark.conf
    before = {k: conf.get(k, None) for k in settings}
    excluded = conf.get("spark.sql.optimizer.excludedRules", None)
    try:
        for k, v in settings.items():
            conf.set(k, v)
        if excluded:  # Spark's own join reordering must be allowed for its baseline
            from reopt.spark import REORDER_JOIN

            conf.set("spark.sql.optimizer.excludedRules",
                     ",".join(r for r in excluded.split(",") if r and r != REORDER_JOIN))
        yield
    finally:
        for k, v in [*before.items(), ("spark.sql.optimizer.excludedRules", excluded)]:
            if v is None:
                conf.unset(k)
            else:
                conf.set(k, v)


class Loop:
    """The split runs of one query over one data folder, shared by the strategies."""

    def __init__(self, make_optimizer: Callable[[], Optimizer], data_dir: str | Path, k: int,
                 spark: SparkSession, deltas: list[str] | None = None,
                 split: str | None = None, by: str = "hash", column: str | None = None,
                 subsets: int = 2):
        self.make_optimizer = make_optimizer
        self.data_dir = data_dir
        self.spark = spark
        self.deltas = list(deltas or [])
        probe = make_optimizer()
        self.query = probe.query
        self.combiner: Combiner = combiner(self.query.sql, self.query.name) if k > 1 else \
            _whole(self.query.sql)
        self.split_query = dataclasses.replace(self.query, sql=self.combiner.split_sql)
        self.splits = make_splits(self.query, data_dir, k, spark, split, by, column, subsets)
        self._estimator = Estimator(self.query, probe.catalog)
        self._scratch: str | None = None
        self._inputs: list[Any] = []
        self._tables: dict[str, Any] = {}
        """The query's tables, read once (each read of a Parquet folder is a Spark job)."""

    def split_input(self, i: int) -> Any:
        """Split ``i`` of the split table as a DataFrame over its own Parquet file; all the
        splits are written on the first call (one pass over the table), into a scratch folder
        removed with the Loop (:meth:`close`)."""
        if not self._inputs:
            s = self.splits
            self._scratch = tempfile.mkdtemp(prefix="reopt-splits-")
            weakref.finalize(self, shutil.rmtree, self._scratch, True)
            self._tables = read_tables(self.query, self.data_dir, self.spark)
            table = self._tables[s.table]
            for j in range(s.k):
                path = str(Path(self._scratch) / f"split-{j}.parquet")
                table.filter(s.condition(j)).write.parquet(path)
                self._inputs.append(self.spark.read.parquet(path))
        return self._inputs[i]

    def close(self) -> None:
        """Remove the written splits (also done when the Loop is collected)."""
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch, self._inputs, self._tables = None, [], {}

    def run(self, strategy: str, progress: Callable[[SplitRun], None] | None = None,
            per_subset: bool = True, split_aware: bool = True) -> StrategyRun:
        """One strategy over the splits. ``per_subset=False`` makes ``adaptive`` keep one
        session over per-subset splits too (the baseline a plan per subset is measured
        against: the same splits, one plan adapting to all of them). ``split_aware=False``
        makes ``adaptive`` over range splits carry the observations scaled by the splits'
        sizes alone, even where the query filters the split column (:meth:`split_aware`)."""
        if strategy not in STRATEGIES:
            raise ReoptError(f"unknown strategy '{strategy}' (choose from "
                             f"{', '.join(STRATEGIES)})")
        runs: list[SplitRun] = []
        partials: list[DataFrame] = []
        columns: list[str] = []
        sessions: dict[int | None, Session] = {}
        steps = (self._spark_splits() if strategy == "spark"
                 else self._reopt_splits(strategy, sessions, per_subset, split_aware))
        try:
            for split, cols, frame in steps:
                runs.append(split)
                partials.append(frame)
                columns = columns or cols
                if progress is not None:
                    progress(split)
        except BaseException:
            for frame in partials:
                release(frame)
            raise
        answer = settle(self.combiner, partials, columns)
        return StrategyRun(strategy, runs, answer,
                           [sessions[k] for k in sorted(sessions, key=lambda k: k or 0)],
                           self.splits.subset_conditions)

    def _first_plan(self, subset: int | None) -> tuple[Session, float]:
        """A fresh optimizer's first plan (the catalog, ``--delta``, the split relation
        scaled to one split) and the seconds it took, the optimizer's construction aside."""
        s = self.splits
        o = self.make_optimizer()
        t0 = time.perf_counter()
        step = o.optimize()
        first = [f"card {s.alias} *{1 / s.k!r}"] if s.k > 1 else []
        if first or self.deltas:
            step = o.update(self.deltas + first)
        return Session(subset, o, step.plan), time.perf_counter() - t0

    def split_aware(self) -> SplitAware | None:
        """Fresh split-aware estimates for an ``adaptive`` run over range splits of a column
        the query filters itself (:mod:`reopt.splitaware`); None otherwise."""
        s = self.splits
        if not s.bounds:  # hash and per-subset splits: the splits' sizes say it all
            return None
        return SplitAware.of(self.query, self._estimator, s.alias, s.column, s.rows, s.bounds)

    def _reopt_splits(self, strategy: str, sessions: dict[int | None, Session],
                      per_subset: bool = True, split_aware: bool = True
                      ) -> Iterator[tuple[SplitRun, list[str], DataFrame]]:
        """``static``, ``adaptive``, ``hindsight``. ``adaptive`` over per-subset splits keeps
        one session per subset: a split runs its subset's current plan, and its observations
        go to that session only, scaled by the rows of the subset's next split over its own;
        ``plan_changed`` then compares with the subset's previous split. ``adaptive`` over
        range splits of a column the query filters plans each split for its own range
        (:meth:`split_aware`)."""
        s = self.splits
        per_subset = per_subset and strategy == "adaptive" and bool(s.subsets)
        aware = self.split_aware() if strategy == "adaptive" and split_aware else None
        last: dict[int | None, str] = {}
        pending: dict[int | None, float] = {}
        """Optimization time not yet reported: counted in the session's next split."""
        for i in range(s.k):
            key = s.subset(i) if per_subset else None
            if key not in sessions:
                sessions[key], pending[key] = self._first_plan(key)
                if aware is not None:
                    pending[key] += self._push(sessions[key], aware.first())
            session = sessions[key]
            reopt = pending.pop(key, 0.0)
            split = self.split_input(i)
            inputs = {**self._tables, s.table: split}
            o = session.optimizer
            if strategy == "hindsight" and s.rows[i] > 0:
                seen = execute(session.plan, self.split_query, self.data_dir, self.spark,
                               inputs=inputs, keep=True)
                release(seen.frame)
                t0 = time.perf_counter()
                session.plan = o.update(seen.deltas()).plan
                reopt += time.perf_counter() - t0
                session.deltas += seen.deltas()
            run = execute(session.plan, self.split_query, self.data_dir, self.spark,
                          inputs=inputs, keep=True)
            shape = plan_shape(session.plan)
            changed = key in last and shape != last[key]
            session.plan_changes += changed
            yield (SplitRun(i, s.rows[i], shape, changed, reopt, run.seconds, run.result_rows,
                            run.nodes, run.cpu_seconds, subset=s.subset(i)),
                   run.columns, run.frame)
            last[key] = shape
            nxt = next((j for j in range(i + 1, s.k)
                        if not per_subset or s.subset(j) == key), None)
            if strategy == "adaptive" and nxt is not None and s.rows[i] > 0 and s.rows[nxt] > 0:
                deltas = (run.deltas(s.rows[nxt] / s.rows[i], scaled=s.alias) if aware is None
                          else aware.after(i, nxt, run.nodes))
                pending[key] = self._push(session, deltas)
                session.updates.append((i, deltas))

    @staticmethod
    def _push(session: Session, deltas: list[str]) -> float:
        """Update the session's optimizer and plan with ``deltas``; the seconds it took."""
        t0 = time.perf_counter()
        session.plan = session.optimizer.update(deltas).plan
        session.deltas += deltas
        return time.perf_counter() - t0

    def _spark_splits(self) -> Iterator[tuple[SplitRun, list[str], DataFrame]]:
        """Spark's own plans: the tables written as Parquet tables of a scratch database
        (the split table once per split), ``ANALYZE``d, the query text run over them; the
        writing and the statistics are untimed (``statistics_seconds``)."""
        from pyspark.sql import functions as F

        from reopt.execute import observed_counts
        from reopt.spark import jvm_cpu_seconds

        s = self.splits
        spark = self.spark
        tables = read_tables(self.query, self.data_dir, spark)
        db = f"reopt_run_{uuid.uuid4().hex[:12]}"
        scratch = tempfile.mkdtemp(prefix="reopt-run-")
        current = spark.catalog.currentDatabase()

        def store(table: str, df: Any) -> None:
            df.write.mode("overwrite").format("parquet").saveAsTable(f"{db}.{table}")
            spark.sql(f"ANALYZE TABLE {db}.{table} COMPUTE STATISTICS FOR ALL COLUMNS")

        spark.sql(f"CREATE DATABASE {db} LOCATION '{Path(scratch).as_uri()}'")
        try:
            t0 = time.perf_counter()
            for t, df in tables.items():
                if t != s.table:
                    store(t, df)
            stats = time.perf_counter() - t0
            previous: str | None = None
            for i in range(s.k):
                t0 = time.perf_counter()
                store(s.table, self.split_input(i))
                stats += time.perf_counter() - t0
                spark.catalog.setCurrentDatabase(db)
                try:
                    with spark_settings(spark, SPARK_SETTINGS):
                        t0, cpu0 = time.perf_counter(), jvm_cpu_seconds(spark)
                        counted = f"reopt_spark_{db}_{i}"
                        answer = spark.sql(self.split_query.sql).observe(
                            counted, F.count(F.lit(1)).alias("rows"))
                        frame = keep(answer)
                        seconds = time.perf_counter() - t0
                        cpu = jvm_cpu_seconds(spark) - cpu0
                        executed = answer._jdf.queryExecution().executedPlan().toString()
                        rows = observed_counts(answer)[counted]
                finally:
                    spark.catalog.setCurrentDatabase(current)
                final = executed.split("== Initial Plan ==")[0]  # AQE prints both plans
                shape = "spark: " + (", ".join(SPARK_JOINS.findall(final)) or "no join")
                yield (SplitRun(i, s.rows[i], shape, previous is not None and shape != previous,
                                0.0, seconds, rows, execution_cpu_seconds=cpu,
                                statistics_seconds=stats, subset=s.subset(i)),
                       list(answer.columns), frame)
                previous, stats = shape, 0.0
        finally:
            spark.catalog.setCurrentDatabase(current)
            spark.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")
            shutil.rmtree(scratch, ignore_errors=True)


def _whole(sql: str) -> Combiner:
    """One split: the query runs as written (ORDER BY, LIMIT, HAVING and all)."""
    return Combiner(sql, [], False, [], None)
