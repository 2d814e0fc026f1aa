"""Run a reopt plan tree on Spark and observe the true rows of every scan and join.

:func:`execute` turns a :class:`~reopt.plan.PlanNode` into a PySpark DataFrame plan with the
same join order and operators, runs it once, and returns the result rows, a digest of them,
and the observed output rows of every plan node. Nothing is counted in a separate pass, and
nothing is added to the plan to count: the rows are the output-row counts (SQL metrics) Spark
keeps anyway for every scan, filter and join of the executed physical plan, read after the
run by walking that plan alongside reopt's (:func:`reopt.sparkplan.node_counts`). An
earlier version put a ``DataFrame.observe`` node (Spark's ``CollectMetrics``) on every scan
and join; each one cut the whole-stage generated code in two, and they more than doubled the
JVM CPU time of a split of ``pclerk`` at SF 1 (BENCHMARKS.md, "Why reopt's plans ran slower
than Spark's").

How each reopt operator maps (the plan's right input is the build/inner side):

==============================  =========================================================
reopt operator                  Spark
==============================  =========================================================
``tablescan``, ``indexscan``,   read the table's Parquet/CSV, keep the columns the query
``indexprobe``, ``scan``        uses, apply the relation's filters (Spark has no indexes:
                                an index scan is a scan, a probe reads the inner once)
``hashjoin``                    ``SHUFFLE_HASH`` hint on the right input: shuffled hash join
                                building on the right
``sortmerge``                   ``MERGE`` hint: sort-merge join (Spark sorts its inputs)
``indexnl``                     ``BROADCAST`` hint on the right (the indexed inner): the
                                inner becomes an in-memory hash index every outer row probes
``blocknl``                     ``SHUFFLE_REPLICATE_NL`` hint: Spark's nested-loop
                                (cartesian) join, with the condition if there is one
``broadcast`` (``dist``)        ``BROADCAST`` hint on the right: broadcast hash join (broadcast
                                nested-loop join without an equi-join predicate)
``shuffle`` (``dist``)          ``MERGE`` hint: shuffled sort-merge join
``join`` (``cout``)             no hint: a logical model names no operator, Spark chooses
``sort`` (enforcer)             nothing: Spark's sort-merge join sorts its own inputs
``hashagg``, ``sortagg``,       the query's SELECT list, GROUP BY and ORDER BY, run by
``topsort`` (final)             Spark SQL over the joined rows
==============================  =========================================================

Conditions: every conjunct of WHERE and ON that names one relation filters that relation's
scan; one that names several is the join condition of the lowest join holding them all; one
that names none filters the joined rows. The plan's order is kept: Spark's join reordering is
off for the run (:func:`reopt.spark.execution_settings`). Its adaptive execution is on, limited
to cutting the plan short: a join whose input stage ran empty is replaced by an empty relation
with every join above it, and the scans only they needed are never run; those nodes observe
nothing (``NodeRun.observed`` None, no delta), the joins found empty observe 0 rows.

The digest (:func:`answer_digest`) is the SHA-256 of the sorted result rows, each value
normalized (numbers to 12 significant digits, dates in ISO form), so two plans of one query
— or Spark SQL's own answer — give the same digest whatever order or float rounding.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import decimal
import hashlib
import math
import numbers
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import sqlglot
from sqlglot import exp

from reopt.costmodel.errors import ReoptError
from reopt.costmodel.query import Query
from reopt.plan import PlanNode
from reopt.sparkplan import final_plan, node_counts

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

JOIN_HINTS = {
    "hashjoin": "shuffle_hash",
    "sortmerge": "merge",
    "indexnl": "broadcast",
    "blocknl": "shuffle_replicate_nl",
    "broadcast": "broadcast",
    "shuffle": "merge",
}
"""reopt join operator -> the Spark join hint put on its right input (no entry: no hint)."""
SCAN_OPS = ("tablescan", "indexscan", "indexprobe", "scan")
DIGITS = 12
"""Significant digits a number keeps in the digest."""


class ExecutionError(ReoptError):
    """The data cannot answer the query (a missing table or column); one line."""


@dataclass
class NodeRun:
    """One plan node after the run: what the optimizer estimated and what Spark saw."""

    op: str
    logical: str
    relations: tuple[str, ...]
    estimated: float
    observed: int | None
    """None: Spark never ran the node (adaptive execution cut the plan short above an empty
    input, :mod:`reopt.sparkplan`), so nothing was observed."""
    scanned: int | None = None
    """For a scan with filters, the rows read before them (``observed`` is after them); None
    also when Spark ran the scan but its count before the filters was lost with the part of
    the plan adaptive execution replaced (``filtered`` tells the two apart)."""
    filtered: bool = False
    """A scan with filters: ``observed`` is a set's rows, not the table's."""

    def to_json(self) -> dict[str, Any]:
        out = {"op": self.op, "logical": self.logical, "relations": list(self.relations),
               "estimated": self.estimated, "observed": self.observed}
        if self.scanned is not None:
            out["scanned"] = self.scanned
        return out


@dataclass
class Execution:
    """What :func:`execute` returns: the answer and the plan's nodes in pre-order."""

    columns: list[str]
    rows: list[tuple]
    digest: str
    seconds: float
    nodes: list[NodeRun] = field(default_factory=list)
    spark_plan: str = ""
    """Spark's executed physical plan (its joins show the operators the hints chose)."""
    cpu_seconds: float = float("nan")
    """CPU seconds of the driver's JVM during the run (:func:`reopt.spark.jvm_cpu_seconds`:
    the whole query's under a ``local`` master)."""
    frame: DataFrame | None = None
    """With ``execute(…, keep=True)``: the answer kept in Spark (:func:`reopt.answer.keep`);
    ``rows`` is then empty and ``digest`` is ``""`` (the caller digests the combined answer
    in Spark, :mod:`reopt.answer`)."""
    kept_rows: int | None = None
    """With ``keep=True``: the answer's row count, observed as it was kept."""

    @property
    def result_rows(self) -> int:
        """The answer's rows: counted in Spark if it was kept there, else collected."""
        return len(self.rows) if self.kept_rows is None else self.kept_rows

    def deltas(self, scale: float = 1.0, scaled: str | None = None) -> list[str]:
        """The observations as deltas for the next optimization, each count times ``scale``
        (the size of the data the next run will see relative to this one), rounded; with
        ``scaled`` (an alias), only the counts of sets holding that relation are (the next run
        sees another split of it, the other relations whole). First the
        rows each scanned relation has before its filters (``card ALIAS =N``, at least 1: a
        table's rows are a statistic, and must be positive), then the output of every
        filtered scan and join as an observation (``card {a,b} := N``: pinned, never moved by
        later corrections of its subsets; 0 is estimated as one row), smallest sets first. A
        sort or the final operator adds nothing (a sort keeps its input; the final's groups
        are not a relation set)."""
        if not (math.isfinite(scale) and scale > 0):
            raise ReoptError(f"scale must be a finite number > 0, got {scale}")

        def n_of(rows: int, relations: tuple[str, ...]) -> int:
            return round(rows * scale) if scaled is None or scaled in relations else rows

        bases, sets = observed_rows(self.nodes)
        return observation_deltas({a: max(1, n_of(n, (a,))) for a, n in bases.items()},
                                  {r: n_of(n, r) for r, n in sets.items()})

    def to_json(self) -> dict[str, Any]:
        return {"columns": self.columns, "result_rows": self.result_rows, "digest": self.digest,
                "seconds": self.seconds, "nodes": [n.to_json() for n in self.nodes],
                "deltas": self.deltas()}


def observed_rows(nodes: Iterable[NodeRun]
                  ) -> tuple[dict[str, int], dict[tuple[str, ...], int]]:
    """What a run's nodes observed: each scanned relation's rows before its filters, and the
    output rows of every filtered scan and join (by relation set). Nodes Spark never ran
    observed nothing."""
    bases: dict[str, int] = {}
    sets: dict[tuple[str, ...], int] = {}
    for n in nodes:
        if n.observed is None:
            continue
        if n.logical == "scan":
            if n.scanned is not None:  # a filtered scan: its table's rows, and its set's
                bases[n.relations[0]] = n.scanned
            elif not n.filtered:  # no filters: its rows are its table's
                bases[n.relations[0]] = n.observed
                continue
        if n.logical in ("scan", "join"):
            sets[n.relations] = n.observed
    return bases, sets


def observation_deltas(bases: dict[str, int], sets: dict[tuple[str, ...], int]) -> list[str]:
    """Rows before filters as ``card ALIAS =N`` (statistics), then each set's rows as an
    observation ``card {a,b} := N``, smallest sets first (:meth:`Execution.deltas`)."""
    return ([f"card {a} ={rows}" for a, rows in bases.items()] +
            [f"card {{{','.join(r)}}} := {rows}"
             for r, rows in sorted(sets.items(), key=lambda kv: len(kv[0]))])


# -- the digest ---------------------------------------------------------------------------------
def _cell(v: Any) -> str:
    if v is None:
        return "\\N"
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (numbers.Number, decimal.Decimal)):
        x = float(v)
        if math.isnan(x):  # pandas' NULL in a numeric column
            return "\\N"
        if x == 0:
            return "0"
        return format(x, f".{DIGITS}g")
    if isinstance(v, (_dt.datetime, _dt.date)):
        return v.isoformat()
    return str(v)


def answer_digest(rows: Iterable[Sequence[Any]]) -> str:
    """SHA-256 of the rows as a multiset: each value normalized (:data:`DIGITS` significant
    digits for numbers, so a sum added in another order digests the same; ISO dates), rows
    sorted, one line each."""
    lines = sorted("\x1f".join(_cell(v) for v in row) for row in rows)
    h = hashlib.sha256()
    for line in lines:
        h.update(line.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


# -- the query's SQL, addressed to the plan's renamed columns ------------------------------------
def _name(index: int, column: str) -> str:
    """The column's name in the plan's DataFrames: unique per relation, no dots."""
    return f"_r{index}_{column}"


class _Rewriter:
    """Resolves the query's columns against the data and renames them to :func:`_name`."""

    def __init__(self, query: Query, schemas: dict[str, list[str]]):
        self.query = query
        self.position = {a: i for i, a in enumerate(query.aliases)}
        # relation index -> lower-case column -> the data's column name
        self.columns = [{c.lower(): c for c in schemas[r.table]} for r in query.relations]
        self.needed: list[set[str]] = [set() for _ in query.relations]

    def resolve(self, column: exp.Column) -> tuple[int, str] | None:
        name = column.name.lower()
        qualifier = column.table.lower()
        if qualifier:
            i = self.position.get(qualifier)
            if i is None:
                raise ExecutionError(f"query {self.query.name}: unknown relation '{qualifier}'")
            if name not in self.columns[i]:
                raise ExecutionError(
                    f"query {self.query.name}: column '{qualifier}.{name}' is not in the data "
                    f"of table '{self.query.relations[i].table}'")
            return i, self.columns[i][name]
        owners = [i for i, cols in enumerate(self.columns) if name in cols]
        if len(owners) > 1:
            names = ", ".join(self.query.aliases[i] for i in owners)
            raise ExecutionError(f"query {self.query.name}: column '{name}' is in the data of "
                                 f"several relations ({names})")
        if not owners:
            return None
        return owners[0], self.columns[owners[0]][name]

    def rename(self, e: exp.Expression, outputs: frozenset[str] = frozenset(),
               prefer_output: bool = False) -> tuple[exp.Expression, set[int]]:
        """``e`` with every column renamed; the relations it uses. An unqualified name in
        ``outputs`` (a select-list alias) stays as it is if ``prefer_output`` or if no
        relation has such a column (as the front-end reads GROUP BY / ORDER BY)."""
        used: set[int] = set()

        def visit(node: exp.Expression) -> exp.Expression:
            if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star):
                return node
            name = node.name.lower()
            if not node.table and name in outputs and prefer_output:
                return node
            found = self.resolve(node)
            if found is None:
                if not node.table and name in outputs:
                    return node
                raise ExecutionError(f"query {self.query.name}: column '{name}' is in the data "
                                     "of no relation of the query")
            i, column = found
            used.add(i)
            self.needed[i].add(column)
            return exp.column(_name(i, column))

        return e.copy().transform(visit), used

    def star(self, item: exp.Expression) -> list[exp.Expression] | None:
        """``*`` / ``x.*`` expanded to the relations' columns in FROM order, else None."""
        if isinstance(item, exp.Star):
            indexes = range(len(self.columns))
        elif isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
            indexes = [self.position[item.table.lower()]]
        else:
            return None
        out: list[exp.Expression] = []
        for i in indexes:
            for column in self.columns[i].values():
                self.needed[i].add(column)
                out.append(exp.alias_(exp.column(_name(i, column)), column, quoted=True))
        return out


@dataclass
class _Prepared:
    final_sql: str  # over the view {view}
    filters: dict[int, list[str]]
    conditions: list[tuple[frozenset[int], str]]
    constant: list[str]
    needed: list[set[str]]


def _select_of(sql: str) -> exp.Select:
    tree = sqlglot.parse_one(sql.removeprefix("\ufeff"))
    while isinstance(tree, exp.Subquery):
        tree = tree.this
    if not isinstance(tree, exp.Select):
        raise ExecutionError("only a SELECT block can be executed")
    return tree


def _conjuncts(e: exp.Expression | None) -> list[exp.Expression]:
    if e is None:
        return []
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.And):
        return _conjuncts(e.left) + _conjuncts(e.right)
    return [e]


def _prepare(query: Query, schemas: dict[str, list[str]], view: str) -> _Prepared:
    if not query.sql:
        raise ExecutionError(f"query {query.name} has no SQL text to execute")
    select = _select_of(query.sql)
    rw = _Rewriter(query, schemas)
    outputs = frozenset(i.alias.lower() for i in select.expressions if isinstance(i, exp.Alias))
    conditions: list[exp.Expression] = _conjuncts(select.args.get("where") and
                                                  select.args["where"].this)
    for join in select.args.get("joins") or []:
        conditions += _conjuncts(join.args.get("on"))
    filters: dict[int, list[str]] = {}
    joins: list[tuple[frozenset[int], str]] = []
    constant: list[str] = []
    for c in conditions:
        renamed, used = rw.rename(c)
        text = renamed.sql(dialect="spark")
        if len(used) == 1:
            filters.setdefault(next(iter(used)), []).append(text)
        elif used:
            joins.append((frozenset(used), text))
        else:
            constant.append(text)
    final = select.copy()
    items: list[exp.Expression] = []
    for item in select.expressions:
        expanded = rw.star(item)
        if expanded is not None:
            items += expanded
            continue
        renamed, _ = rw.rename(item)
        if isinstance(item, exp.Column):  # keep the output name a bare column has
            renamed = exp.alias_(renamed, item.name, quoted=True)
        items.append(renamed)
    final.set("expressions", items)
    group = select.args.get("group")
    if group is not None:
        final.set("group", exp.Group(expressions=[
            rw.rename(g, outputs)[0] for g in group.expressions]))
    having = select.args.get("having")
    if having is not None:
        final.set("having", exp.Having(this=rw.rename(having.this, outputs)[0]))
    order = select.args.get("order")
    if order is not None:
        final.set("order", exp.Order(expressions=[
            rw.rename(o, outputs, prefer_output=True)[0] for o in order.expressions]))
    final.set("from_" if "from_" in final.args else "from", exp.From(this=exp.to_table(view)))
    final.set("joins", None)
    final.set("where", None)
    return _Prepared(final.sql(dialect="spark"), filters, joins, constant, rw.needed)


# -- data ----------------------------------------------------------------------------------------
def find_tables(query: Query, data_dir: str | Path) -> dict[str, Any]:
    """Table -> where its data is, for every table the query uses, found in ``data_dir`` as
    ``reopt stats`` finds tables (``X.parquet`` files or folders, CSV); no Spark needed, so
    the CLI checks this before starting it."""
    from reopt.costmodel import stats

    sources = {s.name: s for s in stats._discover([str(data_dir)])}
    out = {}
    for table in dict.fromkeys(r.table for r in query.relations):
        src = sources.get(table.lower())
        if src is None:
            raise ExecutionError(f"{data_dir}: no table '{table}' (query {query.name} uses it; "
                                 f"the folder has {', '.join(sorted(sources)) or 'none'})")
        out[table] = src
    return out


def read_tables(query: Query, data_dir: str | Path, spark: SparkSession,
                have: Iterable[str] = ()) -> dict[str, DataFrame]:
    """Table -> DataFrame for every table the query uses (see :func:`find_tables`), except
    those in ``have`` (each must still be in ``data_dir``). Reading a Parquet folder runs a
    Spark job (its schema): a caller running many plans over the same tables reads them once
    and passes them as ``inputs`` (:class:`reopt.adaptive.Loop`)."""
    from reopt.costmodel import stats

    skip = set(have)
    return {t: stats._read(spark, src) for t, src in find_tables(query, data_dir).items()
            if t not in skip}


# -- the plan as DataFrames ----------------------------------------------------------------------
class _Builder:
    def __init__(self, query: Query, tables: dict[str, DataFrame], prepared: _Prepared,
                 restrict: dict[str, str]):
        self.query = query
        self.tables = tables
        self.prepared = prepared
        self.restrict = restrict
        self.scanned: dict[int, str] = {}
        """id(scan node) -> the observation counting a restricted relation's rows (its split)
        before the relation's filters (Spark merges the two filters into one operator)."""
        self.run = uuid.uuid4().hex[:8]

    def scan(self, node: PlanNode) -> DataFrame:
        from pyspark.sql import functions as F

        alias = node.relations[0]
        i = self.query.index(alias)
        df = self.tables[self.query.relations[i].table]
        filters = self.prepared.filters.get(i, [])
        if alias in self.restrict:  # one split of this relation: its rows are the split's
            df = df.filter(F.expr(self.restrict[alias]))
            if filters:  # the split's rows, counted before the filters (a rare path)
                name = f"reopt_{self.run}_{len(self.scanned)}"
                self.scanned[id(node)] = name
                df = df.observe(name, F.count(F.lit(1)).alias("rows"))
        df = df.select(*[F.col(f"`{c}`").alias(_name(i, c))
                         for c in sorted(self.prepared.needed[i])])
        for text in filters:
            df = df.filter(F.expr(text))
        return df

    def join(self, node: PlanNode, left: DataFrame, right: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        lset = {self.query.index(a) for a in node.children[0].relations}
        rset = {self.query.index(a) for a in node.children[1].relations}
        both = lset | rset
        conds = [text for used, text in self.prepared.conditions
                 if used <= both and not used <= lset and not used <= rset]
        hint = JOIN_HINTS.get(node.op)
        if hint is not None:
            right = right.hint(hint)
        if conds:
            return left.join(right, F.expr(" AND ".join(f"({c})" for c in conds)), "inner")
        return left.crossJoin(right)

    def build(self, node: PlanNode) -> DataFrame:
        log = node.alt.log_op
        if log == "scan":
            return self.scan(node)
        if log == "join":
            left, right = (self.build(c) for c in node.children)
            return self.join(node, left, right)
        if log == "sort" or len(node.children) == 1:  # a sort enforcer or the final operator
            return self.build(node.children[0])
        raise ExecutionError(f"cannot execute plan operator '{node.op}' ({log})")


def collect(df: DataFrame) -> list[tuple]:
    """The rows of ``df`` as tuples, through Arrow (``toPandas``: many times faster than
    ``collect()`` for a large answer). Numbers come as numpy or ``Decimal`` values, dates as
    ``datetime.date``; a NULL in a numeric column may come as NaN (the digest reads both as
    NULL). A driver out of room — Spark loses task results, runs out of heap, or exceeds
    ``spark.driver.maxResultSize``, for the answer or for an input the plan broadcasts (the
    driver collects it first) — is a one-line :class:`ExecutionError`, not a JVM stack
    trace."""
    try:
        frame = df.toPandas()
    except Exception as e:  # noqa: BLE001 (Py4J and Spark raise several kinds)
        text = str(e)
        reason = next((r for r in TOO_LARGE if r in text), None)
        if reason is None:
            raise
        raise ExecutionError(f"the Spark driver ran out of room ({reason}): the answer or an "
                             f"input the plan broadcasts is too large for it; aggregate the "
                             f"answer, run on less data (more splits), shuffle instead of "
                             f"broadcasting (a cost delta), or give the driver more memory "
                             f"(spark.driver.memory, spark.driver.maxResultSize)") from None
    return list(frame.itertuples(index=False, name=None))


TOO_LARGE = ("TaskResultLost", "OutOfMemoryError", "Java heap space", "maxResultSize")
"""What Spark says when an answer does not fit on the driver (:func:`collect`)."""


def observed_counts(answer: DataFrame) -> dict[str, int]:
    """Name -> count of every observation in the executed plan of ``answer``."""
    scala = answer._jdf.queryExecution().observedMetrics()
    out = {}
    it = scala.iterator()
    while it.hasNext():
        pair = it.next()
        out[pair._1()] = int(pair._2().getLong(0))
    return out


def execute(plan: PlanNode, query: Query, data_dir: str | Path,
            spark: SparkSession, restrict: dict[str, str] | None = None,
            inputs: dict[str, DataFrame] | None = None, keep: bool = False) -> Execution:
    """Run ``plan`` (a plan of ``query``) over the tables in ``data_dir`` on ``spark``.

    Returns the result rows, their :func:`answer_digest`, the wall time of the run (planning
    and execution, not reading the schemas) and, for every plan node in pre-order, the
    estimated and the observed output rows. Raises :class:`ExecutionError` (one line) when a
    table of the query is missing from ``data_dir`` or a column of the query is in none of
    its relations' data. Empty tables are fine (empty answer, zero rows observed).

    ``restrict`` maps an alias to a Spark SQL condition over its table's own columns: that
    relation reads only the rows meeting it (one split of it, :mod:`reopt.adaptive`), and its
    scan observes them as the table's rows. ``inputs`` maps a table to a DataFrame read
    instead of its data in ``data_dir`` (a split written out once, :class:`reopt.adaptive.Loop`:
    every strategy then reads the same split file, not the whole table through a filter).
    ``keep=True`` collects nothing: the answer is kept in Spark (``Execution.frame``,
    :func:`reopt.answer.keep`) and only its row count reaches the driver — the adaptive loop's
    way, whose answers may be far larger than the driver.
    """
    from reopt.spark import execution_settings, jvm_cpu_seconds

    relations = set(query.aliases)
    if set(plan.relations) != relations:
        raise ExecutionError(f"the plan covers {sorted(plan.relations)}, query {query.name} "
                             f"has {sorted(relations)}")
    tables = {**read_tables(query, data_dir, spark, have=inputs or ()), **(inputs or {})}
    schemas = {t: df.columns for t, df in tables.items()}
    view = f"reopt_plan_{uuid.uuid4().hex[:12]}"
    prepared = _prepare(query, schemas, view)
    unknown = set(restrict or ()) - relations
    if unknown:
        raise ExecutionError(f"query {query.name} has no relation {sorted(unknown)[0]!r} to "
                             "restrict")
    builder = _Builder(query, tables, prepared, dict(restrict or {}))
    with execution_settings(spark):
        t0, cpu0 = time.perf_counter(), jvm_cpu_seconds(spark)
        joined = builder.build(plan)
        if prepared.constant:
            from pyspark.sql import functions as F

            joined = joined.filter(F.expr(" AND ".join(f"({c})" for c in prepared.constant)))
        joined.createOrReplaceTempView(view)
        try:
            answer = spark.sql(prepared.final_sql)
            frame, kept_rows = None, None
            if keep:
                from pyspark.sql import functions as F

                from reopt.answer import keep as keep_frame

                counted = f"reopt_{builder.run}_answer"
                answer = answer.observe(counted, F.count(F.lit(1)).alias("rows"))
                frame, rows = keep_frame(answer), []
            else:
                rows = collect(answer)
            columns = list(answer.columns)
            metrics = observed_counts(answer)
            if keep:
                kept_rows = metrics.pop(counted)
            physical = answer._jdf.queryExecution().executedPlan()
            spark_plan = final_plan(physical).toString()
        finally:
            spark.catalog.dropTempView(view)
        seconds, cpu = time.perf_counter() - t0, jvm_cpu_seconds(spark) - cpu0
    counts = node_counts(plan, physical)
    result_rows = len(rows) if kept_rows is None else kept_rows

    def observed(n: PlanNode) -> int | None:
        """A scan's or join's count (None: never run); a sort's, its input's; the final's,
        the answer's."""
        while n.alt.log_op == "sort":
            n = n.children[0]
        if n.alt.log_op not in ("scan", "join"):
            return result_rows
        return counts[id(n)][0] if id(n) in counts else None

    def filtered(n: PlanNode) -> bool:
        return n.alt.log_op == "scan" and bool(prepared.filters.get(query.index(n.relations[0])))

    def scanned(n: PlanNode) -> int | None:
        """A filtered scan's rows before its filters (a restricted one's: its split's, counted
        by an observation Spark loses with a replaced part of the plan); None for a scan
        never run."""
        if not filtered(n) or id(n) not in counts:
            return None
        name = builder.scanned.get(id(n))
        return metrics.get(name) if name is not None else counts[id(n)][1]

    nodes = [NodeRun(n.op, n.alt.log_op, tuple(n.relations), float(n.rows), observed(n),
                     scanned(n), filtered(n)) for n in plan.walk()]
    return Execution(columns, rows, "" if keep else answer_digest(rows), seconds, nodes,
                     spark_plan, cpu, frame, kept_rows)


@contextlib.contextmanager
def spark_sql_frame(query: Query, data_dir: str | Path, spark: SparkSession
                    ) -> Iterator[DataFrame]:
    """Spark SQL's own plan for the query's text over the data in ``data_dir``, the tables
    registered as views under their names while the block runs (dropped after)."""
    tables = read_tables(query, data_dir, spark)
    for table, df in tables.items():
        df.createOrReplaceTempView(table)
    try:
        yield spark.sql(query.sql)
    finally:
        for table in tables:
            spark.catalog.dropTempView(table)


def spark_sql_answer(query: Query, data_dir: str | Path, spark: SparkSession) -> list[tuple]:
    """Spark SQL's own answer to the query's text: the oracle an executed plan must agree
    with."""
    with spark_sql_frame(query, data_dir, spark) as frame:
        return collect(frame)
