"""The ``spark`` engine: the compiled delta plans as Spark DataFrame plans.

Every relation is a DataFrame with one typed column per attribute (``long`` → ``bigint``,
``double``, ``string``, ``boolean``, as :attr:`CompiledProgram.schemas` says) named as the rule
heads name them (:func:`reopt.evaluator.driver.column_names`). The engine interprets exactly the
ops the ``python`` engine interprets and gives the same relations, ``iterations`` and
``derived``. Strata derived when read (``.ondemand``) are evaluated eagerly here, with the
others (the declaration changes cost, never the answer), and counted apart
(:meth:`SparkEngine.run_stratum`).

How a rule becomes a DataFrame plan
-----------------------------------
A variant's ops are applied left to right to a *bindings frame* holding one column per variable
bound so far (internal names ``_v0, _v1, …``, so rule variables never clash with each other
under Spark's case-insensitive resolution). Before the first op it is a one-row frame without
variables. Expressions are handed to Spark as SQL text (``selectExpr``, ``filter``), which
costs one round trip to the JVM per operation instead of one per column object; a projection's
expressions travel as one string (:func:`_sel`), not as a list PySpark would convert element
by element.

* ``Scan(pred, version, args)`` reads the FULL, DELTA or OLD frame of ``pred``. A constant
  argument becomes a ``filter`` on the relation, a variable repeated within the atom a
  column-equality ``filter``, a wildcard is simply not selected; the ``selectExpr`` renames the
  remaining columns to their variables' columns. Filtering and projecting *before* the join
  keeps the other side small. Then the relation is **joined** on the variables already bound
  (a key stays one column), or crossed with the bindings when none is; the relation itself
  when the scan is the first op.
* A negated ``Scan`` is an anti-join on its (all bound) variables: it keeps the bindings that
  have no matching tuple, exactly ``!pred(...)``.
* Joins (:func:`_window_join`) use single-input operators only: the bindings and the
  relation's columns in one ``union`` in ONE partition, one window per join key. A semi- or
  anti-join keeps the bindings whose window has (has no) relation row; an inner join collects
  the relation rows of the window (``collect_list`` of structs) and ``inline``-s them next to
  each binding. Spark neither shuffles (one partition satisfies any clustering) nor
  broadcasts: a broadcast would send every derived relation through the driver and cost a
  job per join and step; a sort-merge or hash join of two ``coalesce(1)`` frames would get
  its exchanges back, because the optimizer pushes semi- and anti-joins below the
  ``coalesce``.
* Facts and inputs (relations no rule derives; at most :data:`LOCAL_MAX` tuples) are known on
  the driver and never change, so a non-first scan of one needs no join: the tuples that pass
  the atom's constants become a literal array that ``inline`` expands next to each binding,
  followed by a ``filter`` on the bound variables (negated: ``filter(NOT (…match…))``). A
  broadcast would cost one Spark job per scan and iteration; the literal costs none.
* ``Call(fn, inputs, outputs)`` runs the built-in **inside Spark**: ``mapInPandas`` streams
  the bindings frame to Python workers as Arrow batches, and :func:`_expand` calls the
  function once per row and emits one row per result tuple (zero, one or many) with the output
  variables appended; outputs that are constants or already-bound variables are equality
  checks on the result. Consecutive calls (R7/R8 call three functions in a row) are fused into
  one ``mapInPandas`` that runs them in sequence over the same batch, so a row crosses the
  JVM↔Python boundary once per run of calls, not once per call (one helper, :func:`_expand`,
  serves a lone call and a fused run alike). Better still, the ops after a variant's last
  scan of a derived relation (its *tail*: calls, comparisons, scans of facts) run with the
  python engine's semantics in ONE ``mapInPandas`` for all the variants of a head relation
  (:meth:`SparkEngine.run_group`), which also computes the ranks of a scheduled stratum.
  The query contexts (the :class:`~reopt.costmodel.space.PlanSpace` of every query) travel
  to the executors once per evaluation as a broadcast variable, unpickled once per Python
  worker. The input columns of a batch are taken as Python lists (``tolist``), so the
  functions see
  ``int``/``float``/``str``/``bool`` exactly as in the python engine, and the columns a row
  carries through are copied by position (``iloc``), never converted: doubles are
  bit-identical.
* ``Filter(op, l, r)`` is a SQL comparison in ``filter``; ``x = e`` with ``x`` unbound is an
  assignment, a new column in ``selectExpr("*", …)``.
* The head is a ``selectExpr`` of the head terms cast to the relation's column types (a
  constant is a typed literal); a head with ``min<x>``/``max<x>`` is a ``groupBy`` on the other
  head terms with ``min``/``max``, per variant, as in the python engine.

Fixpoint (semi-naive, as :meth:`PythonEngine.evaluate`)
-------------------------------------------------------
Per stratum, the base variants run once, then the delta variants while some delta is not
empty; a delta variant whose DELTA relation was empty in the last iteration is skipped. For
each relation the variants' frames are ``union``-ed and merged with FULL in one aggregate:
candidates tagged new ∪ FULL tagged old, ``groupBy`` all columns, a group is new when all its
members are (``min`` of the tag). That frame — FULL ∪ DELTA, tagged — is
``localCheckpoint``-ed; the new DELTA is its ``filter`` on the tag (the distinct candidates not
in FULL), the new FULL its projection (``FULL ∪ DELTA``), and OLD the FULL frame of before.
Checkpointing every iteration makes the next iteration's plans start from materialized data:
planning time and lineage stay constant instead of growing with the iterations (a final
relation's plan is a projection of one checkpoint). The only action per step is ONE job
(:meth:`SparkEngine._measure`): a global aggregate over the union of what the step needs
measured — each DELTA's count (materializing the checkpoints, testing termination, filling
``RunStats.derived``, deciding which delta variants run next) and, in a scheduled stratum, the
lowest pending rank per relation. Only those numbers (one row) reach the driver during the
fixpoint; :attr:`SparkRelation.rows` collects a final relation once, when asked.

Scheduled strata (``.schedule``) release rank by rank, exactly as the python engine does:
each relation's pending candidates are one checkpointed frame with a rank column (a string
the tails compute with the rank built-in, or a constant when the head keeps the delta atom's
rank columns); a release takes ``filter(rank = k)`` and leaves the rest pending. When the
compiler fixed the order of a rank's steps (:attr:`RankSteps.fused`: plain relations, then
each aggregate after its inputs), the whole rank is one pass of lazy steps settled by ONE job
— for costing and bounds, one job per rank instead of one per step.

Pruning (:mod:`reopt.evaluator.features`), in :meth:`SparkEngine._release` as in
:meth:`PythonEngine._release`:

* aggregate selection: per group, a window ``min``/``max`` keeps the best candidates of the
  release; a lookup (a window join) of the group's current aggregate — and, with ``.bound``,
  of its bound — drops those that do not improve on it (or exceed the bound);
* tuple source suppression: the rejected candidates' source tuples that keep no tuple in the
  relation (two anti-joins) start a deletion cascade (below);
* reference counts are a frame of (tuple, count) per counted relation; a release adds one per
  produced tuple (``union``, ``groupBy`` all columns, ``sum``);
* the deletion cascade (:meth:`SparkEngine._delete`) runs by *generation*, like semi-naive
  rounds: a round deletes, relation by relation in stratum order, everything the previous
  round asked to delete from it, as one frame. :meth:`SparkEngine._split` tags the
  relation's tuples that are to go (FULL tagged 0 ∪ the candidates tagged 1, grouped on all
  columns) and is the round's ONE checkpoint of that relation: the deleted tuples and the new
  FULL are its two filters. What the deletions cause is the next round's work, one frame per
  relation: for a head that embeds the deleted tuples, a semi-join of it on the embedded
  columns; for a counted head, the trigger variants re-derive the lost derivations and
  :meth:`SparkEngine._uncount` subtracts them (counts ∪ one ``-1`` per derivation, summed,
  checkpointed) — the tuples reaching zero go; for an aggregate, the groups that lost inputs
  and have none left (:meth:`SparkEngine._regroup`). One job per round (plus one that tests
  whether a cascade has anything to delete at all) counts the deleted tuples (sizes,
  ``RunStats.deleted``) and the next round's work, so a relation without work is not
  touched and plans never nest from round to round. The result is the python engine's,
  which deletes piece by piece: what a cascade deletes does not depend on the order (each
  derivation loses its count once, when the first of its tuples goes; an aggregate group goes
  once all its inputs have).

Partitions. The relations are small (bounded by the plan space: hundreds to thousands of
tuples per query), so Spark's fixed costs — a job, a stage, a task, a Python worker round
trip — dominate, not data volume. Every relation is therefore kept in ONE partition
(``coalesce(1)``): aggregates, windows and joins then need no exchange (a single partition
already satisfies any clustering), so a step is one Spark job of one stage.

Planning. Frames are small but their plans are not (unions, windows, generators over a dozen
columns); :mod:`reopt.spark` switches the optimizer's constraint propagation off, which on
these plans grew exponentially (a minute to plan one checkpoint).

Differences from the python engine: ``RunStats.produced`` is not filled (counting the
candidate tuples with their duplicates would cost one more Spark job per relation and
iteration); ``RunStats.deleted`` is; the python engine's check that pruning never changes an
aggregate group's value (it only removes groups) is not repeated; Spark's grouping compares
doubles with NaN equal to NaN (Python sets do not), irrelevant for costs and cardinalities.
"""

from __future__ import annotations

import functools
import math
import time
import uuid
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from reopt.costmodel.builtins import BUILTINS
from reopt.costmodel.errors import ReoptError
from reopt.evaluator.ast import Aggregate, Arith, Const, Var, Wildcard
from reopt.evaluator.compiler import (
    BOOLEAN,
    BOUND,
    COMPARE,
    CONST,
    DELTA,
    DOUBLE,
    LONG,
    OLD,
    SAME,
    STRING,
    Call,
    CompiledProgram,
    Filter,
    Scan,
    Stratum,
    Variant,
    _py_type,
    match_terms,
)
from reopt.evaluator.driver import column_names
from reopt.evaluator.failures import CRASHES, executor_failure, rule_label
from reopt.evaluator.features import ASCENDING, AggSel, aggregate_inputs
from reopt.evaluator.ondemand import OnDemandStats, apart
from reopt.evaluator.python_engine import RunStats, _getter
from reopt.spark import worker_reopt_error

SPARK_TYPES: dict[str, T.DataType] = {
    LONG: T.LongType(), DOUBLE: T.DoubleType(), STRING: T.StringType(), BOOLEAN: T.BooleanType(),
}
SQL_TYPES = {LONG: "BIGINT", DOUBLE: "DOUBLE", STRING: "STRING", BOOLEAN: "BOOLEAN"}
LOCAL_MAX = 64
"""Facts and inputs of at most this many tuples are inlined into plans (see _scan_local)."""
_ZERO = {LONG: 0, DOUBLE: 0.0, STRING: "", BOOLEAN: False}
PANDAS_DTYPES = {LONG: "int64", DOUBLE: "float64", STRING: object, BOOLEAN: "bool"}

# One built-in call inside a fused run: (fn, inputs, binds, checks) where
#   inputs: ((is_column, column name or constant), ...)
#   binds:  ((output position, new column, type), ...)
#   checks: ((output position, kind, operand), ...) with kind "k" (constant), "c" (a column
#           bound before) or "o" (another output position of the same result: a variable
#           repeated among the outputs).
CallStep = tuple[Any, tuple, tuple, tuple]


# -- built-in calls (runs on the executors) -----------------------------------------------------
def _expand(ctx: Mapping[int, Any], steps: tuple[CallStep, ...], batch: pd.DataFrame):
    """Apply a run of built-in calls to one pandas batch of bindings: per row, call the
    function, keep the result tuples that pass the checks, and append the bound outputs.
    Returns the expanded batch (input columns copied by position, new columns appended)."""
    src = list(range(len(batch)))  # input row of every current row
    new: dict[str, list] = {}  # columns bound by earlier steps, aligned with src
    base: dict[str, list] = {}
    types: dict[str, str] = {}

    def aligned(name: str) -> list:
        if name in new:
            return new[name]
        if name not in base:
            base[name] = batch[name].tolist()
        col = base[name]
        return [col[i] for i in src]

    for fn, inputs, binds, checks in steps:
        n = len(src)
        args = [aligned(v) if is_col else [v] * n for is_col, v in inputs]
        chk = [(j, kind, aligned(v) if kind == "c" else v) for j, kind, v in checks]
        carried = list(new.items())
        src2: list[int] = []
        new2: dict[str, list] = {name: [] for name in new}
        outs = [(j, []) for j, _, _ in binds]
        for r, a in enumerate(zip(*args, strict=True) if args else [()] * n):
            for res in fn(ctx, *a):
                for j, kind, v in chk:
                    if kind == "k":
                        if res[j] != v:
                            break
                    elif kind == "c":
                        if res[j] != v[r]:
                            break
                    elif res[j] != res[v]:
                        break
                else:
                    src2.append(src[r])
                    for name, vals in carried:
                        new2[name].append(vals[r])
                    for j, vals in outs:
                        vals.append(res[j])
        src = src2
        new = new2
        for (_, name, ty), (_, vals) in zip(binds, outs, strict=True):
            new[name] = vals
            types[name] = ty
    out = batch.iloc[src].reset_index(drop=True)
    for name, vals in new.items():
        out[name] = pd.Series(vals, dtype=PANDAS_DTYPES[types[name]])
    return out


_CTX: dict[str, Any] = {}
"""The query contexts a Python worker unpickled, by evaluation token (workers are reused)."""


def _context(ctx_bc, token: str) -> Mapping[int, Any]:
    ctx = _CTX.get(token)
    if ctx is None:
        while len(_CTX) > 1:  # the current contexts and the previous ones (an update
            _CTX.pop(next(iter(_CTX)))  # compares them), never more
        ctx = _CTX[token] = cloudpickle.loads(ctx_bc.value)
    return ctx


def _map_batches(ctx_bc, token: str, steps: tuple[CallStep, ...], label: str,
                 batches: Iterator[pd.DataFrame]):
    """Run of built-in calls of the rule ``label`` (:func:`rule_label`) over each batch."""
    ctx = _context(ctx_bc, token)
    for batch in batches:
        try:
            out = _expand(ctx, steps, batch)
        except CRASHES as e:  # a rule fed a built-in what it cannot take: say which
            raise executor_failure(label, e, BUILTINS, ctx) from None
        yield out


Tail = tuple[tuple[str, ...], tuple[str, ...], tuple, tuple, tuple | None, str]
"""One variant's Python tail in a fused run (see :meth:`SparkEngine.run_group`): the wide
columns holding its variables, the variables, the compiled ops the python engine runs, the
head terms, the rank to append (None, ``("k", rank)`` or ``("fn", name, inputs)``), and its
rule (:func:`rule_label`), named when a built-in it calls fails."""






def _tail_step(op, schema: dict[str, int], ctx, builtins, local):
    """One op of a tail over rows of Python values, with the python engine's semantics:
    a scan of a local relation (facts, inputs), a built-in call, a comparison or
    assignment. Binds new variables in ``schema``; returns rows → rows."""
    if isinstance(op, Filter):
        left_free = isinstance(op.left, Var) and op.left.name not in schema
        right_free = isinstance(op.right, Var) and op.right.name not in schema
        if op.op == "=" and (left_free or right_free):
            free, src = (op.left, op.right) if left_free else (op.right, op.left)
            get = _getter(src, schema)
            schema[free.name] = len(schema)
            return lambda rows: [r + (get(r),) for r in rows]
        cmp = COMPARE[op.op]
        lhs, rhs = _getter(op.left, schema), _getter(op.right, schema)
        return lambda rows: [r for r in rows if cmp(lhs(r), rhs(r))]
    if isinstance(op, Call):
        fn = builtins[op.name].fn
        args = [_getter(t, schema) for t in op.inputs]
        matched, named = match_terms(op.outputs, schema)
        checks = [(j, kind, schema[v] if kind == BOUND else v) for j, kind, v in matched]
        binds = [j for j, _ in named]
        for _, name in named:
            schema[name] = len(schema)

        def call(rows):
            out = []
            for r in rows:
                for res in fn(ctx, *[a(r) for a in args]):
                    if all(res[j] == (v if kind == "k" else r[v] if kind == "c" else res[v])
                           for j, kind, v in checks):
                        out.append(r + tuple(res[j] for j in binds))
            return out

        return call
    # a scan of a local relation
    matched, named = match_terms(op.args, schema)
    keyed = [(j, kind, v) for j, kind, v in matched if kind != SAME]
    keys = [j for j, _, _ in keyed]
    srcs = [(kind == CONST, v if kind == CONST else schema[v]) for _, kind, v in keyed]
    repeats = [(v, j) for j, kind, v in matched if kind == SAME]
    news = [j for j, _ in named]
    index: dict[tuple, list[tuple]] = {}
    for m in local[op.pred]:
        if all(m[a] == m[b] for a, b in repeats):
            index.setdefault(tuple(m[c] for c in keys), []).append(m)
    if op.negated:
        return lambda rows: [r for r in rows
                             if tuple([v if c else r[v] for c, v in srcs]) not in index]
    for _, name in named:
        schema[name] = len(schema)
    return lambda rows: [r + tuple(m[c] for c in news) for r in rows
                         for m in index.get(tuple([v if c else r[v] for c, v in srcs]), ())]


def _run_tails(ctx: Mapping[int, Any], builtins: Mapping[str, Any],
               local: Mapping[str, list[tuple]], tails: tuple[Tail, ...], tag: str,
               names: tuple[str, ...], types: tuple[str, ...], batch: pd.DataFrame):
    """Finish the variants of one batch of a fused run: each row belongs to the variant its
    ``tag`` column names; returns the head tuples (and ranks) of all of them."""
    where: dict[int, list[int]] = {}
    for i, g in enumerate(batch[tag].tolist()):
        where.setdefault(g, []).append(i)
    out: list[list] = [[] for _ in names]
    for g, pos in where.items():
        try:
            _run_tail(ctx, builtins, local, tails[g], batch, pos, out)
        except CRASHES as e:  # a rule fed a built-in what it cannot take: say which
            raise executor_failure(tails[g][5], e, builtins, ctx) from None
    return pd.DataFrame({n: pd.Series(vals, dtype=PANDAS_DTYPES[t])
                         for n, t, vals in zip(names, types, out, strict=True)})


def _run_tail(ctx: Mapping[int, Any], builtins: Mapping[str, Any],
              local: Mapping[str, list[tuple]], tail: Tail, batch: pd.DataFrame,
              pos: list[int], out: list[list]) -> None:
    """One variant's tail over its rows (``pos``) of the batch, appended to ``out``."""
    slots, variables, ops, head, rank, _ = tail
    data = [batch[c].tolist() for c in slots]
    rows = [tuple(c[i] for c in data) for i in pos]
    schema = {v: j for j, v in enumerate(variables)}
    for op in ops:
        rows = _tail_step(op, schema, ctx, builtins, local)(rows)
    if not rows:
        return
    gets = [_getter(t.var if isinstance(t, Aggregate) else t, schema) for t in head]
    got = [tuple(g(r) for g in gets) for r in rows]
    for j in range(len(gets)):
        out[j].extend(r[j] for r in got)
    if rank is not None:
        if rank[0] == "k":
            out[-1].extend([str(rank[1])] * len(got))
        else:
            fn, n = builtins[rank[1]].fn, rank[2]
            out[-1].extend(str(fn(ctx, *r[:n])[0][0]) for r in got)


def _tail_batches(ctx_bc, token: str, builtins, local, tails: tuple[Tail, ...], tag: str,
                  names: tuple[str, ...], types: tuple[str, ...],
                  batches: Iterator[pd.DataFrame]):
    ctx = _context(ctx_bc, token)
    for batch in batches:
        yield _run_tails(ctx, builtins, local, tails, tag, names, types, batch)


# -- relations ---------------------------------------------------------------------------------
class SparkRelation:
    """A final relation: ``df`` (the DataFrame), ``rows`` (a set of tuples, collected once on
    first use) and ``len`` (a count, without collecting)."""

    def __init__(self, df: DataFrame, size: int | None = None):
        self.df = df
        self._rows: set[tuple] | None = None
        self._size = size

    @property
    def rows(self) -> set[tuple]:
        if self._rows is None:
            self._rows = {tuple(r) for r in self.df.collect()}
            self._size = len(self._rows)
        return self._rows

    def __len__(self) -> int:
        if self._size is None:
            self._size = self.df.count()
        return self._size

    def __repr__(self) -> str:
        return f"SparkRelation({', '.join(self.df.columns)})"


class _Bindings:
    """The bindings frame of a variant being built: the frame, each variable's column and
    type, and whether it is still the one-row frame without variables."""

    def __init__(self, unit: DataFrame):
        self.df = unit
        self.unit = True
        self.cols: dict[str, str] = {}
        self.types: dict[str, str] = {}

    def bind(self, var: str, ty: str) -> str:
        self.unit = False
        col = f"_v{len(self.cols)}"
        self.cols[var] = col
        self.types[var] = ty
        return col

    def term(self, t) -> str:
        if isinstance(t, Arith):
            return f"({self.term(t.left)} {t.op} {self.term(t.right)})"
        return _sql_lit(t.value) if isinstance(t, Const) else _ident(self.cols[t.name])

    def type_of(self, t) -> str:
        if isinstance(t, Arith):
            sides = (self.type_of(t.left), self.type_of(t.right))
            return DOUBLE if DOUBLE in sides else LONG
        return _py_type(t.value) if isinstance(t, Const) else self.types[t.name]


@dataclass(frozen=True)
class _Rank:
    """The rank column a scheduled stratum's candidates carry: the built-in, the column, the
    rank being released (None for the base variants) and the stratum's relations."""

    fn: str
    col: str
    k: int | None
    preds: tuple[str, ...]


# -- the engine ---------------------------------------------------------------------------------
class SparkEngine:
    name = "spark"

    def __init__(self, compiled: CompiledProgram, ctx: Mapping[int, Any],
                 spark: SparkSession | None = None):
        if spark is None:
            from reopt.spark import get_spark

            spark = get_spark()
        self.program = compiled
        self.ctx = ctx
        self.spark = spark
        self.columns = {p: _unique_names(column_names(compiled, p)) for p in compiled.schemas}
        self._tag = {p: _fresh("_new", cols) for p, cols in self.columns.items()}
        self._cnt = {p: _fresh("_n", cols) for p, cols in self.columns.items()}
        self._schema = {p: T.StructType([T.StructField(n, SPARK_TYPES[t]) for n, t in
                                         zip(cols, compiled.schemas[p], strict=True)])
                        for p, cols in self.columns.items()}
        self._agg_inputs = aggregate_inputs(compiled.rules, compiled.aggregates)
        self._order = [p for s in compiled.strata for p in s.preds]
        """The order in which a round of a deletion cascade visits relations."""
        self._unit = _sel(spark.range(0, 1, 1, 1), "0 AS _unit")
        self.on_demand = OnDemandStats()
        """The work of the strata derived when read (``.ondemand``), which this engine
        runs eagerly (:meth:`run_stratum`)."""
        self._ctx_bc = None
        self._token = ""
        self._local: dict[str, list[tuple]] = {}
        self._empty: dict[str, DataFrame] = {}

    def _frame(self, pred: str, rows) -> DataFrame:
        """A relation given on the driver (facts, inputs, an empty delta) as an inline table
        (``VALUES``): a local relation in the plan, nothing to compute or checkpoint. A
        relation without columns is a frame without columns, of one row or none."""
        if not self.program.schemas[pred]:
            return self.spark.range(0, 1 if rows else 0, 1, 1).select()
        cols = [f"CAST({_ident(f'col{i + 1}')} AS {SQL_TYPES[t]}) AS {_ident(n)}"
                for i, (n, t) in enumerate(zip(self.columns[pred], self.program.schemas[pred],
                                               strict=True))]
        rows = list(dict.fromkeys(rows))
        if rows:
            values = ", ".join("(" + ", ".join(_sql_lit(v) for v in r) + ")" for r in rows)
        else:  # one typed row that WHERE false removes (an empty local relation)
            values = "(" + ", ".join(_sql_lit(_ZERO[t]) for t in self.program.schemas[pred]) + ")"
        return self.spark.sql(f"SELECT {', '.join(cols)} FROM VALUES {values}"
                              + ("" if rows else " WHERE false"))

    # -- variants ----------------------------------------------------------------------------
    def run_group(self, variants: list[Variant], full: Mapping[str, DataFrame],
                  delta: Mapping[str, DataFrame | None], old: Mapping[str, DataFrame],
                  rank: _Rank | None = None) -> DataFrame | None:
        """The head tuples of ``variants`` (all of one relation; None when every one of them
        reads a relation known to be empty), with a rank column when ``rank`` is given.

        Each variant runs in Spark up to its *tail*, the ops after its last scan of a derived
        relation (built-in calls, comparisons, scans of facts): all tails of the group run in
        ONE ``mapInPandas`` over the union of the variants' bindings, with the python engine's
        own code (:func:`_run_tails`), which also computes ranks. A variant whose tail calls
        nothing and whose rank is known (or not needed) stays entirely in Spark."""
        frames: list[DataFrame] = []
        tails: list[tuple[_Bindings, tuple, tuple, tuple | None, str]] = []
        for v in variants:
            if self._skip(v):
                continue
            rk = self._rank_of(v, rank)
            cut = self._tail_start(v)
            python = rk is not None and rk[0] == "fn" or any(
                isinstance(op, Call) for op in v.ops[cut:])
            b = self._bindings(v, full, delta, old, cut if python else len(v.ops))
            if python:
                tails.append((b, v.ops[cut:], v.head, rk, rule_label(v.rule)))
                continue
            df = self._project(b, v)
            if rk is not None and rank is not None:
                df = _sel(df, "*", f"{_sql_lit(str(rk[1]))} AS {_ident(rank.col)}")
            frames.append(df)
        if tails:
            frames.append(self._fused(variants[0].head_pred, tails, rank))
        return _union(frames) if frames else None

    def run_variant(self, v: Variant, full: Mapping[str, DataFrame],
                    delta: Mapping[str, DataFrame | None],
                    old: Mapping[str, DataFrame]) -> DataFrame:
        """The head tuples of one variant, entirely as Spark operators."""
        return self._project(self._bindings(v, full, delta, old, len(v.ops)), v)

    def _rank_of(self, v: Variant, rank: _Rank | None) -> tuple | None:
        """How the rank of ``v``'s head tuples is known: ``("k", k)`` when the head starts with
        the delta atom's leading variables and that atom reads tuples released at rank k (so
        every head tuple has rank k), else ``("fn", built-in, inputs)``; None without rank."""
        if rank is None:
            return None
        n = len(self.program.builtins[rank.fn].inputs)
        if rank.k is not None and v.delta_pred in rank.preds and v.keeps_key(n):
            return ("k", rank.k)
        return ("fn", rank.fn, n)

    def _tail_start(self, v: Variant) -> int:
        """Where ``v``'s tail starts: after its last scan of a relation not known locally."""
        i = len(v.ops)
        while i > 0:
            op = v.ops[i - 1]
            if isinstance(op, Scan) and op.pred not in self._local:
                break
            i -= 1
        return i

    def _bindings(self, v: Variant, full: Mapping[str, DataFrame],
                  delta: Mapping[str, DataFrame | None], old: Mapping[str, DataFrame],
                  upto: int) -> _Bindings:
        b = _Bindings(self._unit)
        ops = list(v.ops[:upto])
        i = 0
        while i < len(ops):
            op = ops[i]
            if isinstance(op, Scan):
                src = {DELTA: delta, OLD: old}.get(op.version, full)[op.pred]
                assert src is not None
                self._scan(b, op, src)
            elif isinstance(op, Call):
                j = i
                while j < len(ops) and isinstance(ops[j], Call):
                    j += 1
                self._call(b, ops[i:j], rule_label(v.rule))  # type: ignore[arg-type]
                i = j
                continue
            else:
                self._filter(b, op)
            i += 1
        return b

    def _fused(self, pred: str, tails: list[tuple[_Bindings, tuple, tuple, tuple | None, str]],
               rank: _Rank | None) -> DataFrame:
        """One ``mapInPandas`` finishing every tail: the bindings of all the variants in one
        frame, each variable in a *slot* (a column per type and position; unused slots hold a
        typed zero, never NULL, so pandas keeps integer columns integral)."""
        zero = {LONG: "0L", DOUBLE: "0.0D", STRING: "''", BOOLEAN: "false"}
        width: dict[str, int] = {}
        placed = []
        for b, *_ in tails:
            seen: dict[str, int] = {}
            slots = {}
            for var, col in b.cols.items():
                ty = b.types[var]
                slots[var] = (col, f"_{ty[0].upper()}{seen.get(ty, 0)}")
                seen[ty] = seen.get(ty, 0) + 1
                width[ty] = max(width.get(ty, 0), seen[ty])
            placed.append(slots)
        all_slots = [(f"_{ty[0].upper()}{j}", ty) for ty in sorted(width)
                     for j in range(width[ty])]
        tag = "_g"
        parts, specs = [], []
        builtins: dict[str, Any] = {}
        local: dict[str, list[tuple]] = {}
        for g, ((b, ops, head, rk, label), slots) in enumerate(zip(tails, placed, strict=True)):
            by_slot = {slot: col for col, slot in slots.values()}
            parts.append(_sel(b.df, f"{g} AS {tag}", *[
                f"{_ident(by_slot[s])} AS {s}" if s in by_slot else f"{zero[ty]} AS {s}"
                for s, ty in all_slots]))
            specs.append((tuple(slots[v][1] for v in slots), tuple(slots), tuple(ops),
                          tuple(head), rk, label))
            for op in ops:
                if isinstance(op, Call):
                    builtins[op.name] = self.program.builtins[op.name]
                elif isinstance(op, Scan):
                    local[op.pred] = self._local[op.pred]
            if rk is not None and rk[0] == "fn":
                builtins[rk[1]] = self.program.builtins[rk[1]]
        names = list(self.columns[pred])
        types = list(self.program.schemas[pred])
        fields = list(self._schema[pred].fields)
        if rank is not None:
            names.append(rank.col)
            types.append(STRING)
            fields.append(T.StructField(rank.col, SPARK_TYPES[STRING]))
        fn = functools.partial(_tail_batches, self._ctx_bc, self._token, builtins, local,
                               tuple(specs), tag, tuple(names), tuple(types))
        return _union(parts).coalesce(1).mapInPandas(fn, T.StructType(fields))

    def _scan(self, b: _Bindings, op: Scan, rel: DataFrame) -> None:
        names = [_ident(n) for n in self.columns[op.pred]]
        types = self.program.schemas[op.pred]
        consts: list[tuple[int, Any]] = []
        repeats: list[tuple[int, int]] = []
        first: dict[str, int] = {}
        for i, t in enumerate(op.args):
            if isinstance(t, Wildcard):
                continue
            if isinstance(t, Const):
                consts.append((i, t.value))
            elif t.name in first:
                repeats.append((i, first[t.name]))
            else:
                first[t.name] = i
        keys = [n for n in first if n in b.cols]
        local = self._local.get(op.pred)
        if local is not None and not b.unit:
            rows = [r for r in local if all(r[i] == v for i, v in consts)
                    and all(r[i] == r[j] for i, j in repeats)]
            self._scan_local(b, op, rows, first, keys)
            return
        conds = [f"{names[i]} = {_sql_lit(v)}" for i, v in consts]
        conds += [f"{names[i]} = {names[j]}" for i, j in repeats]
        r = rel.filter(" AND ".join(conds)) if conds else rel
        sel = [f"{names[first[n]]} AS {_ident(b.cols[n])}" for n in keys]
        on = [b.cols[n] for n in keys] or None
        if op.negated:
            r = _sel(r, *sel)
            b.df, b.unit = _join(b.df, r, on, "left_anti"), False
            return
        unit = b.unit
        sel += [f"{names[first[n]]} AS {_ident(b.bind(n, types[first[n]]))}"
                for n in first if n not in keys]
        r = _sel(r, *sel)
        if unit and sel:
            b.df = r.coalesce(1)  # one partition: see "Partitions" in the module docstring
        elif keys:
            b.df = _join(b.df, r, on, "inner")
        else:
            b.df = _join(b.df, r, [], "inner")

    def _scan_local(self, b: _Bindings, op: Scan, rows: list[tuple], first: dict[str, int],
                    keys: list[str]) -> None:
        """Join with a small relation known on the driver (facts, inputs), its tuples already
        filtered by the atom's constants and repeated variables: the tuples become a literal
        array that ``inline`` expands next to each binding (a broadcast without a job)."""
        types = self.program.schemas[op.pred]

        def lit(r: tuple, i: int) -> str:
            return f"CAST({_sql_lit(r[i])} AS {SQL_TYPES[types[i]]})"

        key_of = {n: (b.cols[n], f"_k{k}") for k, n in enumerate(keys)}
        if op.negated:  # keep the bindings no tuple matches
            if not rows:
                return
            hits = [" AND ".join(f"{_ident(key_of[n][0])} = {lit(r, first[n])}" for n in keys)
                    or "true" for r in rows]
            b.df, b.unit = b.df.filter(f"NOT ({' OR '.join(f'({h})' for h in hits)})"), False
            return
        if not rows:
            b.df = b.df.filter("false")
            return
        fields = [(key_of[n][1], first[n]) for n in keys]
        fields += [(b.bind(n, types[first[n]]), first[n]) for n in first if n not in keys]
        if not fields:
            fields = [("_k", 0)]  # no variable: one row per tuple, as the python engine
        structs = ", ".join("named_struct(" + ", ".join(f"'{f}', {lit(r, i)}" for f, i in fields)
                            + ")" for r in rows)
        df = _sel(b.df, "*", f"inline(array({structs}))")
        if keys:
            df = df.filter(" AND ".join(f"{_ident(c)} = {_ident(k)}" for c, k in key_of.values()))
        drop = [k for _, k in key_of.values()] + (["_k"] if fields[0][0] == "_k" else [])
        b.df, b.unit = (df.drop(*drop) if drop else df), False

    def _call(self, b: _Bindings, ops: list[Call], label: str) -> None:
        steps: list[CallStep] = []
        fields = list(b.df.schema.fields)
        for op in ops:
            builtin = self.program.builtins[op.name]
            inputs = tuple((True, b.cols[t.name]) if isinstance(t, Var) else (False, t.value)
                           for t in op.inputs)
            matched, named = match_terms(op.outputs, b.cols)
            checks = [(j, kind, b.cols[v] if kind == BOUND else v) for j, kind, v in matched]
            binds = []
            for j, name in named:
                ty = builtin.outputs[j]
                col = b.bind(name, ty)
                binds.append((j, col, ty))
                fields.append(T.StructField(col, SPARK_TYPES[ty]))
            steps.append((builtin.fn, inputs, tuple(binds), tuple(checks)))
        fn = functools.partial(_map_batches, self._ctx_bc, self._token, tuple(steps), label)
        b.df, b.unit = b.df.mapInPandas(fn, T.StructType(fields)), False

    def _filter(self, b: _Bindings, op: Filter) -> None:
        left_free = isinstance(op.left, Var) and op.left.name not in b.cols
        right_free = isinstance(op.right, Var) and op.right.name not in b.cols
        if op.op == "=" and (left_free or right_free):
            free, src = (op.left, op.right) if left_free else (op.right, op.left)
            ty = b.type_of(src)
            col = _ident(b.bind(free.name, ty))
            b.df = _sel(b.df, "*", f"CAST({b.term(src)} AS {SQL_TYPES[ty]}) AS {col}")
            return
        cond = f"{b.term(op.left)} {op.op} {b.term(op.right)}"
        b.df, b.unit = b.df.filter(cond), False

    def _project(self, b: _Bindings, v: Variant) -> DataFrame:
        """The head tuples, cast to the relation's column types; an aggregate head gives its
        inputs (the aggregated variable in place): they are aggregated when released, over
        the union of all the relation's rules (:meth:`_release`)."""
        names = self.columns[v.head_pred]
        types = self.program.schemas[v.head_pred]
        return _sel(b.df, *[
            f"CAST({b.term(a.var if isinstance(a, Aggregate) else a)} AS {SQL_TYPES[ty]}) "
            f"AS {_ident(n)}"
            for a, n, ty in zip(v.head, names, types, strict=True)
        ])

    # -- fixpoint ------------------------------------------------------------------------------
    def evaluate(self, inputs: Mapping[str, Any]) -> tuple[dict[str, SparkRelation], RunStats]:
        t0 = time.perf_counter()
        self.start(inputs)
        try:
            for stratum in self.program.strata:
                self.run_stratum(stratum)
        finally:
            self.unbroadcast()
        self.stats.held = dict(self.size)
        self.stats.seconds = time.perf_counter() - t0
        return self.relations(), self.stats

    def relations(self) -> dict[str, SparkRelation]:
        return {p: SparkRelation(df, self.size[p]) for p, df in self.full.items()}

    def broadcast(self) -> None:
        """Send the query contexts to the executors (once per evaluation or update).
        PlanSpaces hold mappingproxy objects, which plain pickle (what broadcast uses)
        rejects; cloudpickle handles them, so the broadcast value is cloudpickled bytes."""
        self._token = uuid.uuid4().hex
        self._ctx_bc = self.spark.sparkContext.broadcast(cloudpickle.dumps(dict(self.ctx)))

    def unbroadcast(self) -> None:
        if self._ctx_bc is not None:
            self._ctx_bc.unpersist()

    def start(self, inputs: Mapping[str, Any]) -> None:
        """Fresh relations holding the facts and the inputs, fresh statistics, the contexts
        broadcast (:meth:`unbroadcast` when done)."""
        prog = self.program
        self.stats = RunStats()
        self.broadcast()
        idb = {p for st in prog.strata for p in st.preds}
        self._local = {}
        self.full = {}
        self.size = {}
        self.counts = {}
        self._old = {}
        self._unknown = set()
        self._later = []
        for p in prog.schemas:
            rows = list(prog.facts.get(p, ()))
            if p in prog.inputs:
                rows += list(inputs.get(p, ()))
            rows = list(dict.fromkeys(rows))
            self.full[p] = self._frame(p, rows)
            self.size[p] = len(rows)
            if p not in idb and len(rows) <= LOCAL_MAX:
                self._local[p] = rows
            if p in prog.features.refcount:  # inputs count once, as in the python engine
                self.counts[p] = _sel(self._frame(p, rows if p in prog.inputs else []),
                                      "*", f"1L AS {self._cnt[p]}")

    def run_stratum(self, stratum: Stratum) -> None:
        """Run ``stratum`` to its fixpoint. One derived when read (``.ondemand``) is run
        here at once, like any other — the declaration changes cost, never the answer —
        but counted apart (:attr:`on_demand`), so that the statistics of an evaluation stay
        the python engine's, which leaves such strata stale (:mod:`.ondemand`)."""
        if stratum.ondemand:
            with apart(self):
                self._run_stratum(stratum)
        else:
            self._run_stratum(stratum)

    def _run_stratum(self, stratum: Stratum) -> None:
        if stratum.schedule is not None:
            self._run_scheduled(stratum)
        else:
            self._run_seminaive(stratum)

    def _derive(self, variants: list[Variant], full: Mapping[str, DataFrame],
                delta: Mapping[str, DataFrame | None], old: Mapping[str, DataFrame],
                rank: Mapping[str, _Rank] | None = None) -> dict[str, DataFrame]:
        """Run ``variants`` (those whose delta relation has tuples), one fused group per head
        relation; returns the candidates of every head that got any."""
        groups: dict[str, list[Variant]] = {}
        for v in variants:
            if v.delta_atom is None or delta.get(v.delta_pred) is not None:  # type: ignore[arg-type]
                groups.setdefault(v.head_pred, []).append(v)
        out = {}
        for head, vs in groups.items():
            df = self.run_group(vs, full, delta, old, rank[head] if rank else None)
            if df is not None:
                out[head] = df
        return out

    def _run_seminaive(self, stratum: Stratum) -> None:
        used_twice = set(self.counts) | set(self.program.features.aggsel)
        pending = self._derive(stratum.base, self.full, {}, {})
        while True:
            self._old = {}
            delta: dict[str, DataFrame | None] = {}
            for p in stratum.preds:
                frame = pending.get(p)
                if frame is not None and p in used_twice:  # read twice: compute it once
                    frame = frame.localCheckpoint(eager=False)
                delta[p] = self._release(p, frame)
            count = self._settle(delta, {})
            self.stats.iterations += 1
            if not stratum.recursive or not any(count.values()):
                return
            live = {p: d if count.get(p) else None for p, d in delta.items()}
            pending = self._derive(stratum.deltas, self.full, live, {**self.full, **self._old})

    def _run_scheduled(self, stratum: Stratum) -> None:
        """Release the stratum's tuples one rank at a time, exactly as
        :meth:`PythonEngine._run_scheduled`: pending candidates are one checkpointed frame per
        relation with a rank column; the driver knows only each relation's lowest pending
        (signed) rank, computed in the one job per pass of steps (:meth:`RankSteps.walk`: a
        rank's fixed steps, or one step) that also counts the deltas."""
        sched, steps = stratum.schedule, stratum.steps
        assert sched is not None and steps is not None
        sign = 1 if sched.direction == ASCENDING else -1
        pending: dict[str, DataFrame | None] = {p: None for p in stratum.preds}
        low: dict[str, int | None] = {p: None for p in stratum.preds}
        """Relation → its lowest pending signed rank (None: nothing pending)."""
        col = {p: _fresh("_rank", self.columns[p]) for p in stratum.preds}

        def ranks(k: int | None) -> dict[str, _Rank]:
            return {p: _Rank(sched.rank, col[p], k, stratum.preds) for p in stratum.preds}

        def add(new: dict[str, DataFrame], changed: set[str]) -> dict[str, str]:
            """New pending frames for the ``changed`` relations (``new`` candidates added);
            returns the expression of each one's lowest signed rank, for :meth:`_settle`."""
            out = {}
            for p in changed:
                parts = [f for f in (pending[p], new.get(p)) if f is not None]
                if not parts:
                    pending[p] = None
                    continue
                pending[p] = _union(parts).coalesce(1).localCheckpoint(eager=False)
                out[p] = f"{sign} * CAST({_ident(col[p])} AS BIGINT)"
            return out

        new = self._derive(stratum.base, self.full, {}, {}, ranks(None))
        exprs = add(new, set(new))
        low.update(self._settle({}, {p: (pending[p], e) for p, e in exprs.items()}))
        while any(x is not None for x in low.values()):
            current = min(x for x in low.values() if x is not None)
            k = sign * current
            done: set[str] = set()
            while True:
                # One pass of steps (RankSteps.walk), then ONE job: relations that got
                # candidates during the pass may have some at this rank; the job counts each
                # step's tuples at the rank (a step with none is not an iteration). Pending
                # frames are checkpointed after every step, so that the job's plan reads each
                # one as a leaf instead of repeating its lineage wherever it is used.
                delta: dict[str, DataFrame | None] = {}
                fresh: dict[str, DataFrame] = {}
                taken: list[list[DataFrame]] = []
                exprs = {}

                def maybe(p: str) -> bool:
                    return low[p] == current or p in fresh  # noqa: B023

                for step, _ in steps.walk(maybe, done):
                    self._old = {}
                    now: dict[str, DataFrame | None] = {}
                    taken.append([])
                    for p in step:
                        frame = pending[p]
                        assert frame is not None
                        r = _ident(col[p])
                        rows = frame.filter(f"{r} = '{k}'").drop(col[p])
                        pending[p] = frame.filter(f"{r} != '{k}'")
                        taken[-1].append(rows)
                        now[p] = self._release(p, rows)
                    delta.update(now)
                    new = self._derive(stratum.deltas, self.full, now,
                                       {**self.full, **self._old}, ranks(k))
                    exprs.update(add(new, set(step) | set(new)))
                    fresh.update(new)
                if not taken:
                    break
                changed = set(delta) | set(fresh)
                lows = self._settle(delta, {p: (pending[p], e) for p, e in exprs.items()},
                                    taken)
                for p in changed:
                    low[p] = lows.get(p)
                    if low[p] is None:
                        pending[p] = None
                for p in fresh:
                    x = low[p]
                    if x is not None and (x < current or (x == current and p in done)):
                        raise ReoptError(
                            f".schedule {sched.direction} {sched.rank}: {p} derived a tuple "
                            f"of rank {sign * x} while rank {k} is being released")
            left = [p for p in stratum.preds if low[p] == current]
            if left:
                raise ReoptError(f".schedule: {', '.join(left)} depend on each other within "
                                 f"rank {k}; the rank must separate them")
        self._suppress_uncosted(stratum)

    def _suppress_uncosted(self, stratum: Stratum) -> None:
        """:meth:`PythonEngine._suppress_uncosted`: the sources left without a tuple of a
        relation pruned by a ``.bound`` are suppressed once the stratum is released."""
        f = self.program.features
        for pred in stratum.preds:
            source = f.suppress.get(pred)
            if source is None or pred not in f.bound:
                continue
            lead = self.columns[pred][:len(self.program.schemas[source])]
            src = self._renamed(source, lead)
            have = _sel(self.full[pred], *map(_ident, lead))
            dead = _join(src, have, lead, "left_anti")
            self._delete(source, _sel(dead, *[f"{_ident(c)} AS {_ident(n)}" for c, n in
                                              zip(lead, self.columns[source], strict=True)]))

    def _skip(self, v: Variant) -> bool:
        """Whether ``v`` reads (non-negated) a relation known to be empty: it derives nothing,
        so it is not planned at all."""
        for op in v.ops:
            if isinstance(op, Scan) and not op.negated and op.version != DELTA:
                if self.size[op.pred] == 0 and op.pred not in self._unknown:
                    return True
        return False

    def _settle(self, delta: Mapping[str, DataFrame | None],
                lows: Mapping[str, tuple[DataFrame | None, str]],
                steps: Sequence[Sequence[DataFrame]] = ()) -> dict[str, int]:
        """The one Spark job of a step (or of a pass of steps): counts every delta (filling
        ``derived`` and the sizes) and computes the lowest pending rank of every relation in
        ``lows``; it also materializes the checkpoints made since the last job
        (:attr:`_later`). Each of ``steps`` (per relation, the pending tuples a step took at
        its rank) that took any counts as an iteration, as in the python engine; the
        evaluation's :class:`~reopt.evaluator.budget.Budget` is checked on the counts. Returns
        the counts and the ranks by relation (a rank is None when nothing is pending)."""
        step_of = [i for i, frames in enumerate(steps) for _ in frames]
        items: list[tuple[DataFrame, str | None]] = [(df, None) for f in steps for df in f]
        names: list[tuple[str, str]] = []
        for p, d in delta.items():
            if d is not None:
                items.append((d, None))
                names.append(("n", p))
        for p, (df, expr) in lows.items():
            if df is not None:
                items.append((df, expr))
                names.append(("low", p))
        for df in self._later:
            items.append((df, None))
            names.append(("", ""))
        self._later = []
        values = self._measure(items)
        taken, rest = values[:len(step_of)], values[len(step_of):]
        self.stats.iterations += len({i for i, n in zip(step_of, taken, strict=True) if n})
        got = dict(zip(names, rest, strict=True))
        out: dict[str, int] = {}
        for p in delta:
            n = int(got.get(("n", p)) or 0)
            self.size[p] += n
            self.stats.derived[p] = self.stats.derived.get(p, 0) + n
            self._unknown.discard(p)
            out[p] = n
        self.program.budget.step(self.stats.iterations, {p: out[p] for p in delta},
                                 self.size.__getitem__, self.program.rules)
        for p in lows:
            out[p] = got.get(("low", p))  # type: ignore[assignment]
        return out

    def _measure(self, items: list[tuple[DataFrame, str | None]]) -> list[Any]:
        """One Spark job: per item, its count (expression None) or the minimum of the
        expression over its rows (None for no rows). Only these numbers reach the driver:
        the result is one row of a global aggregate."""
        if not items:
            return []
        parts = [_sel(df, f"'{i}' AS _i", f"CAST({e or 0} AS BIGINT) AS _x")
                 for i, (df, e) in enumerate(items)]
        aggs = [F.expr(f"count_if(_i = '{i}')" if e is None
                       else f"min(CASE WHEN _i = '{i}' THEN _x END)")
                for i, (_, e) in enumerate(items)]
        try:
            row = _union(parts).coalesce(1).agg(*aggs).collect()[0]
        except Exception as e:
            told = worker_reopt_error(e)  # a built-in's failure, raised in a task
            if told is None:
                raise
            raise ReoptError(told) from None
        return list(row)

    # -- inserting: aggregates, selection, bounds, suppression ---------------------------------
    def _release(self, pred: str, rows: DataFrame | None) -> DataFrame | None:
        """Insert candidate tuples of ``pred`` as :meth:`PythonEngine._release` does; returns
        the new tuples (a lazy frame, counted by the step's :meth:`_settle`), None when there
        are no candidates."""
        prog = self.program
        if rows is None:
            return None
        if pred in self.counts:
            self._count_up(pred, rows)
        agg = prog.aggregates.get(pred)
        if agg is not None:
            rows = self._aggregate(pred, rows, *agg)
        source = prog.features.suppress.get(pred)
        if source is not None:
            rows = self._sourced(pred, source, rows)
        sel = prog.features.aggsel.get(pred)
        if sel is not None:
            kept = self._select(sel, rows)
            if source is not None:
                self._suppress(pred, source, rows, kept)
            rows = kept
        self._old[pred] = self.full[pred]
        merged = self._merge(pred, [rows], self.full[pred]).localCheckpoint(eager=False)
        tag = self._tag[pred]
        self.full[pred] = merged.drop(tag)
        self._unknown.add(pred)
        return merged.filter(tag).drop(tag)

    def _count_up(self, pred: str, rows: DataFrame) -> DataFrame:
        """Add one count per derivation in ``rows`` (duplicates included); returns the tuples
        whose count rose from zero (a lazy frame)."""
        c, lo, hi = self._bump(pred, rows, 1)
        self._later.append(c)
        self.counts[pred] = c.drop(lo, hi)
        return _sel(c.filter(f"{lo} = 1"), *map(_ident, self.columns[pred]))

    def _aggregate(self, pred: str, rows: DataFrame, pos: int, func: str) -> DataFrame:
        """Group by every column but ``pos`` and keep the min/max of ``pos``."""
        names = self.columns[pred]
        x = _ident(names[pos])
        grouped = _group_agg(rows.coalesce(1), names[:pos] + names[pos + 1:],
                             f"{func}({x}) AS {x}")
        return _sel(grouped, *map(_ident, names))

    def _renamed(self, pred: str, names: list[str]) -> DataFrame:
        """``pred``'s leading columns under ``names`` (the rest dropped)."""
        return _sel(self.full[pred], *[f"{_ident(c)} AS {_ident(n)}" for c, n in
                                       zip(self.columns[pred], names, strict=False)])

    def _sourced(self, pred: str, source: str, rows: DataFrame) -> DataFrame:
        """The candidates whose source tuple (their leading columns) still exists."""
        lead = self.columns[pred][:len(self.program.schemas[source])]
        src = self._renamed(source, lead)
        return _join(rows, src, lead, "left_semi")

    def _select(self, sel: AggSel, rows: DataFrame) -> DataFrame:
        """Aggregate selection (:meth:`PythonEngine._select`): per group, the tuples with the
        best value, if it beats the group's current aggregate and does not exceed its bound."""
        names = self.columns[sel.target]
        key = [names[c] for c in sel.key]
        v = _ident(names[sel.value])
        best, cur, bnd = (_fresh(n, names) for n in ("_best", "_cur", "_bound"))
        over = ", ".join(_ident(c) for c in key)
        lt = "<" if sel.func == "min" else ">"
        df = (_sel(rows.coalesce(1),
                   "*", f"{sel.func}({v}) OVER (PARTITION BY {over}) AS {_ident(best)}")
              .filter(f"{v} = {_ident(best)}").drop(best))
        agg_names = self.columns[sel.agg]
        if self.size[sel.agg] or sel.agg in self._unknown:
            current = _sel(
                self.full[sel.agg],
                *[f"{_ident(c)} AS {_ident(n)}" for c, n in zip(agg_names, key, strict=False)],
                f"{_ident(agg_names[-1])} AS {_ident(cur)}")
            df = (_lookup(df, current, key, cur)
                  .filter(f"{_ident(cur)} IS NULL OR {v} {lt} {_ident(cur)}").drop(cur))
        bound = self.program.features.bound.get(sel.target)
        if bound is not None and (self.size[bound] or bound in self._unknown):
            b_names = self.columns[bound]
            lead = key[:len(b_names) - 1]  # the bound's key: a prefix of the group's
            bounds = _sel(self.full[bound],
                          *[f"{_ident(c)} AS {_ident(n)}"
                            for c, n in zip(b_names[:-1], lead, strict=True)],
                          f"{_ident(b_names[-1])} AS {_ident(bnd)}")
            limit = _group_agg(bounds, lead, f"min({_ident(bnd)}) AS {_ident(bnd)}")
            df = (_lookup(df, limit, lead, bnd)
                  .filter(f"{_ident(bnd)} IS NULL OR NOT ({_ident(bnd)} {lt} {v})").drop(bnd))
        return df

    def _suppress(self, pred: str, source: str, rows: DataFrame, kept: DataFrame) -> None:
        """Tuple source suppression (:meth:`PythonEngine._suppress`): delete the source of
        every rejected tuple that has no other tuple in ``pred``."""
        lead = self.columns[pred][:len(self.program.schemas[source])]
        cols = [_ident(c) for c in lead]
        dead = _join(_join(_sel(rows, *cols), _sel(kept, *cols), lead, "left_anti"),
                     _sel(self.full[pred], *cols), lead, "left_anti")
        dead = _sel(dead, *[f"{c} AS {_ident(n)}" for c, n in
                            zip(cols, self.columns[source], strict=True)])
        self._delete(source, dead)

    # -- deleting: cascades through the rules ----------------------------------------------------
    def _delete(self, pred: str, rows: DataFrame) -> None:
        """Delete tuples and what was derived from them, as :meth:`PythonEngine._delete`: a head
        tuple that embeds a deleted tuple goes with it (a semi-join on the embedded columns), a
        counted head loses one count per derivation (the trigger variants re-derive them), an
        aggregate group goes when no inputs are left; other heads stay.

        The cascade runs by *generation*, like semi-naive rounds: a round deletes, relation by
        relation (in stratum order, each seeing the deletions before it), all the tuples the
        last round asked to delete from it, as one frame; what those deletions cause is the
        next round's work. One Spark job per round counts the tuples deleted (sizes,
        ``deleted``) and the next round's work per relation (relations without any are not
        touched). Every relation a round changes is ONE checkpoint (the relation with a
        "deleted" tag, :meth:`_split`), so plans never nest across rounds. The final
        relations are the python engine's: what a cascade deletes does not depend on the order
        of its pieces (each derivation loses its count once, when its first tuple goes)."""
        work: dict[str, list[DataFrame]] = {pred: [rows]}
        n = self._measure([(rows, None)] + self._take_later())[0]
        if not n:
            return
        while work:
            gone: list[tuple[str, DataFrame]] = []
            nxt: dict[str, list[DataFrame]] = {}
            for p in self._order:
                if p in work:
                    rs = self._remove(p, _union(work[p]), nxt)
                    gone.append((p, rs))
            heads = list(nxt)
            got = self._measure([(rs, None) for _, rs in gone]
                                + [(_union(nxt[h]), None) for h in heads] + self._take_later())
            for (p, _), n in zip(gone, got, strict=False):
                self.size[p] -= int(n)
                self.stats.deleted[p] = self.stats.deleted.get(p, 0) + int(n)
            counted = got[len(gone):len(gone) + len(heads)]
            work = {h: nxt[h] for h, n in zip(heads, counted, strict=True) if n}

    def _take_later(self) -> list[tuple[DataFrame, None]]:
        """The checkpoints made since the last job, as :meth:`_measure` items."""
        later, self._later = self._later, []
        return [(df, None) for df in later]

    def _remove(self, p: str, cand: DataFrame, nxt: dict[str, list[DataFrame]]) -> DataFrame:
        """Delete the tuples of ``cand`` that ``p`` holds; returns them, and adds to ``nxt`` what
        their deletion asks to delete next."""
        prog, cols = self.program, self.columns[p]
        tagged = self._split(p, cand)
        rs, rest = tagged.filter(self._tag[p]), tagged.filter(f"NOT {self._tag[p]}")
        rs, rest = rs.drop(self._tag[p]), rest.drop(self._tag[p])
        derived: dict[str, list[DataFrame]] = {}
        run: dict[str, list[Variant]] = {}
        for v in prog.triggers.get(p, ()):
            h = v.head_pred
            if self.size[h] == 0 and h not in self._unknown:
                continue  # nothing to delete there
            if v.embeds is not None and h not in self.counts and h not in prog.aggregates:
                keys = [self.columns[h][i] for i in v.embeds]
                hit = _sel(rs, *[f"{_ident(c)} AS {_ident(k)}"
                                 for c, k in zip(cols, keys, strict=True)])
                derived.setdefault(h, []).append(_join(self.full[h], hit, keys, "left_semi"))
            elif h in self.counts or h in prog.aggregates:
                run.setdefault(h, []).append(v)
        for h, vs in run.items():  # trigger variants: OLD is the relation without the tuples
            df = self.run_group(vs, self.full, {p: rs}, {**self.full, p: rest})
            if df is not None:
                derived.setdefault(h, []).append(df)
        self.full[p] = rest
        if p in self._old:  # released earlier in this step: OLD loses the tuples too
            self._old[p] = _join(self._old[p], rs, cols, "left_anti") \
                .localCheckpoint(eager=False)
            self._later.append(self._old[p])
        for head, frames in derived.items():
            hs = _union(frames)
            if head in self.counts:
                hs = self._uncount(head, hs)
            elif head in prog.aggregates:
                hs = self._regroup(head, hs)
            nxt.setdefault(head, []).append(hs)
        return rs

    def _split(self, p: str, cand: DataFrame) -> DataFrame:
        """``p`` with its tag column true for the tuples in ``cand``, checkpointed: FULL tagged
        0 ∪ the candidates tagged 1, grouped on all columns in one partition; a group is a
        tuple of ``p`` when its lowest tag is 0 and is deleted when its highest is 1."""
        cols, tag = self.columns[p], self._tag[p]
        lo, hi = _fresh("_lo", cols), _fresh("_hi", cols)
        u = _sel(self.full[p], "*", f"0 AS {tag}").union(
            _sel(cand, *[_ident(c) for c in cols], f"1 AS {tag}"))
        grouped = (_group_agg(u.coalesce(1), cols, f"min({tag}) AS {lo}", f"max({tag}) AS {hi}")
                   .filter(f"{lo} = 0"))
        return _sel(grouped, *[_ident(c) for c in cols], f"{hi} = 1 AS {tag}") \
            .localCheckpoint(eager=False)

    def _uncount(self, pred: str, hs: DataFrame) -> DataFrame:
        """Take one count per derivation in ``hs``; returns the tuples whose count reached 0
        (their counts are dropped, as the python engine does)."""
        c, lo, hi = self._bump(pred, hs, -1)
        n = _ident(self._cnt[pred])
        self.counts[pred] = c.filter(f"{n} > 0").drop(lo, hi)
        return _sel(c.filter(f"{hi} = 1 AND {n} <= 0"), *map(_ident, self.columns[pred]))

    def _bump(self, pred: str, rows: DataFrame, step: int) -> tuple[DataFrame, str, str]:
        """The reference counts of ``pred`` plus ``step`` per derivation in ``rows``: the
        counts tagged 0 ∪ one ``step`` per derivation tagged 1, summed per tuple in one
        partition, checkpointed; with the lowest and highest tag of each tuple (the names
        returned: lowest 1 means no count before, highest 1 a derivation in ``rows``)."""
        cols, n = self.columns[pred], _ident(self._cnt[pred])
        tag, lo, hi = (_fresh(x, [*cols, self._cnt[pred]]) for x in ("_tag", "_lo", "_hi"))
        tagged = (_sel(self.counts[pred], "*", f"0 AS {tag}")
                  .union(_sel(rows, *[_ident(x) for x in cols], f"{step}L AS {n}",
                              f"1 AS {tag}")))
        c = (_group_agg(tagged.coalesce(1), cols, f"sum({n}) AS {n}", f"min({tag}) AS {lo}",
                        f"max({tag}) AS {hi}")
             .localCheckpoint(eager=False))
        return c, lo, hi

    def _regroup(self, pred: str, hs: DataFrame) -> DataFrame:
        """The tuples of aggregate groups that lost inputs and have none left (see
        :meth:`PythonEngine._regroup`; the python engine also checks that no group's value
        changed, which pruning never does)."""
        pos, _ = self.program.aggregates[pred]
        names = self.columns[pred]
        key = names[:pos] + names[pos + 1:]
        groups = _sel(hs, *[_ident(c) for c in key])
        out = _join(self.full[pred], groups, key, "left_semi")
        for inp in self._agg_inputs[pred]:
            t = self.columns[inp.target]
            have = _sel(
                self.full[inp.target],
                *[f"{_ident(t[c])} AS {_ident(n)}" for c, n in zip(inp.key, key, strict=True)])
            out = _join(out, have, key, "left_anti")
        return out

    def _merge(self, pred: str, frames: list[DataFrame], full: DataFrame) -> DataFrame:
        """FULL ∪ the distinct candidates of ``frames``, with a boolean column that is true for
        the candidates not in FULL: candidates tagged true, FULL tagged false, grouped on all
        columns in ONE partition (no exchange), the tag being the group's ``min``."""
        cols, tag = self.columns[pred], self._tag[pred]
        cand = _sel(_union(frames), "*", f"true AS {tag}")
        tagged = cand.union(_sel(full, "*", f"false AS {tag}")).coalesce(1)
        return _group_agg(tagged, cols, f"min({tag}) AS {tag}")


def _group_agg(df: DataFrame, cols: list[str], *aggs: str) -> DataFrame:
    """``df.groupBy(*cols).agg(...)`` with the ``aggs`` as SQL expressions, and a group per
    distinct value of ``cols`` even when ``cols`` is empty: Spark's ``groupBy()`` without
    columns is a global aggregate, ONE row even over no input (``min`` of nothing: NULL),
    which for a relation without columns would be a tuple out of nothing. Grouping on a
    literal instead keeps it a grouped aggregate: no rows in, no group out."""
    exprs = [F.expr(a) for a in aggs]
    if cols:
        return df.groupBy(*cols).agg(*exprs)
    key = _fresh("_g", list(df.columns))
    return df.groupBy(F.lit(0).alias(key)).agg(*exprs).drop(key)


def _join(left: DataFrame, right: DataFrame, on: list[str] | None, how: str) -> DataFrame:
    """``left`` joined with ``right`` on the columns ``on`` (both have them), ``how`` one of
    ``inner``, ``left_semi``, ``left_anti`` (see :func:`_window_join`)."""
    return _window_join(left, right, on or [], how)


def _lookup(left: DataFrame, right: DataFrame, on: list[str], value: str) -> DataFrame:
    """``left`` with the column ``value`` of ``right`` for the same ``on`` columns (NULL when
    ``right`` has none; ``right`` has at most one value per key), as a window like
    :func:`_window_join`."""
    lf = {f.name: f.dataType.simpleString() for f in left.schema.fields}
    vt = next(f.dataType.simpleString() for f in right.schema.fields if f.name == value)
    side = _fresh("_side", [*lf, value])
    mine = _sel(left, *[_ident(c) for c in lf], f"CAST(NULL AS {vt}) AS {_ident(value)}",
                f"false AS {side}")
    theirs = _sel(right, *[_ident(c) if c in on else f"CAST(NULL AS {t}) AS {_ident(c)}"
                           for c, t in lf.items()], _ident(value), f"true AS {side}")
    u = mine.union(theirs)
    over = f"OVER (PARTITION BY {', '.join(_ident(c) for c in on)})"
    return (_sel(u.coalesce(1).filter(f"NOT {side} OR {_ident(value)} IS NOT NULL"),
                 *[_ident(c) for c in lf], side,
                 f"max({_ident(value)}) {over} AS {_ident(value)}")
            .filter(f"NOT {side}").drop(side))


def _window_join(left: DataFrame, right: DataFrame, on: list[str], how: str) -> DataFrame:
    """A join written with single-input operators only: both sides in one ``union``, one
    window per key (partition), then the left rows with what their partition holds of the
    right side (for ``inner``, the list of right payloads, expanded with ``inline``)."""
    lf = {f.name: f.dataType.simpleString() for f in left.schema.fields}
    rf = {f.name: f.dataType.simpleString() for f in right.schema.fields}
    lcols = list(lf)
    payload = [c for c in rf if c not in on] if how == "inner" else []
    taken = [*lcols, *rf]
    side, hit, pay = (_fresh(n, taken) for n in ("_side", "_hit", "_pay"))
    null = "CAST(NULL AS {})".format
    lsel = [_ident(c) for c in lcols] + [f"{null(rf[c])} AS {_ident(c)}" for c in payload]
    rsel = [_ident(c) if c in on else f"{null(t)} AS {_ident(c)}" for c, t in lf.items()]
    rsel += [_ident(c) for c in payload]
    u = _sel(left, *lsel, f"false AS {side}").union(
        _sel(right, *rsel, f"true AS {side}")).coalesce(1)
    over = f"OVER (PARTITION BY {', '.join(_ident(c) for c in on)})" if on else "OVER ()"
    if how != "inner":
        w = _sel(u, "*", f"max({side}) {over} AS {hit}")
        cond = hit if how == "left_semi" else f"NOT {hit}"
        return _sel(w.filter(f"NOT {side} AND {cond}"), *map(_ident, lcols))
    fields = ", ".join(_ident(c) for c in payload) if payload else f"1 AS {pay}"
    w = _sel(u, *[_ident(c) for c in lcols], side,
             f"collect_list(CASE WHEN {side} THEN struct({fields}) END) {over} AS {pay}")
    out = _sel(w.filter(f"NOT {side}"), *[_ident(c) for c in lcols], f"inline({pay})")
    return out if payload else out.drop(pay)


def _union(frames: list[DataFrame]) -> DataFrame:
    return functools.reduce(DataFrame.union, frames)


_SEP = "\u0000"
"""Separates the expressions of one :func:`_sel` (no SQL text of the engine contains it)."""

_SPLITTERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""py4j gateway → a ``java.util.regex.Pattern`` splitting at :data:`_SEP` in that JVM."""


def _sel(df: DataFrame, *exprs: str) -> DataFrame:
    """``df.selectExpr(*exprs)``, with the expressions crossing to the JVM as ONE string that
    the JVM splits into the ``String[]`` the projection takes. PySpark hands a list over
    element by element, a py4j round trip each (about a millisecond on a busy 2-core driver),
    and an evaluation builds thousands of projections (profiling a Q5 update: 1,005 list
    conversions, 4.5 of its 21 s). Without a JVM handle (Spark Connect) or when an expression
    contains the separator, PySpark's own ``selectExpr``."""
    jdf = getattr(df, "_jdf", None)
    if jdf is None or not exprs or any(_SEP in e for e in exprs):
        return df.selectExpr(*exprs)
    session = df.sparkSession
    gateway = session.sparkContext._gateway
    split = _SPLITTERS.get(gateway)
    if split is None:
        split = _SPLITTERS[gateway] = gateway.jvm.java.util.regex.Pattern.compile(_SEP)
    return type(df)(jdf.selectExpr(split.split(_SEP.join(exprs))), session)


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _sql_lit(v: Any) -> str:
    """A Python constant as a Spark SQL literal of the matching type."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return f"{v}L" if abs(v) < 2**63 else str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "CAST('NaN' AS DOUBLE)"
        if math.isinf(v):
            return f"CAST('{'-' if v < 0 else ''}Infinity' AS DOUBLE)"
        return f"{v!r}D"
    return "'" + str(v).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fresh(name: str, taken: list[str]) -> str:
    """``name``, prefixed with underscores until no column in ``taken`` has it."""
    lower = {t.lower() for t in taken}
    while name.lower() in lower:
        name = "_" + name
    return name


def _unique_names(names: list[str]) -> list[str]:
    """Column names that are unique case-insensitively (Spark's default resolution)."""
    seen: set[str] = set()
    out = []
    for i, n in enumerate(names):
        if n.lower() in seen:
            n = f"c{i}"
            while n.lower() in seen:
                n = "_" + n
        seen.add(n.lower())
        out.append(n)
    return out


__all__ = ["SparkEngine", "SparkRelation"]
