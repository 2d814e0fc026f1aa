"""The ``spark`` engine: the compiled delta plans as Spark DataFrame plans.

Every relation is a DataFrame with one typed column per attribute (``long`` → ``bigint``,
``double``, ``string``, ``boolean``, as :attr:`CompiledProgram.schemas` says) named as the rule
heads name them (:func:`reopt.evaluator.driver.column_names`). The engine interprets exactly the
ops the ``python`` engine interprets and gives the same relations, ``iterations`` and
``derived``.

How a rule becomes a DataFrame plan
-----------------------------------
A variant's ops are applied left to right to a *bindings frame* holding one column per variable
bound so far (internal names ``_v0, _v1, …``, so rule variables never clash with each other
under Spark's case-insensitive resolution). Before the first op it is a one-row frame without
variables. Expressions are handed to Spark as SQL text (``selectExpr``, ``filter``), which
costs one round trip to the JVM per operation instead of one per column object.

* ``Scan(pred, version, args)`` reads the FULL, DELTA or OLD frame of ``pred``. A constant
  argument becomes a ``filter`` on the relation, a variable repeated within the atom a
  column-equality ``filter``, a wildcard is simply not selected; the ``selectExpr`` renames the
  remaining columns to their variables' columns. Filtering and projecting *before* the join
  keeps the build side small. Then the relation is **joined** on the variables already bound:
  an equi-join in the USING form (a key stays one column) with the relation side
  **broadcast** (``hint("broadcast")``), so the bindings frame is never shuffled; a
  ``crossJoin`` when no variable is bound; the relation itself when the scan is the first op.
* A negated ``Scan`` is a broadcast ``left_anti`` join on its (all bound) variables: it keeps
  the bindings that have no matching tuple, exactly ``!pred(...)``.
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
  serves a lone call and a fused run alike). The query contexts (the
  :class:`~reopt.costmodel.space.PlanSpace` of every query) travel to the executors once per
  evaluation as a broadcast variable, unpickled once per Python worker. The input columns of
  a batch are taken as Python lists (``tolist``), so the functions see
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
relation's plan is a projection of one checkpoint). The only action per relation and
iteration is ``DELTA.count()``: it materializes the checkpoint, tests termination, fills
``RunStats.derived`` and decides which delta variants run next. Nothing is collected to the
driver during the fixpoint; :attr:`SparkRelation.rows` collects a final relation once, when
asked.

Partitions. The relations are small (bounded by the plan space: hundreds to thousands of
tuples per query), so Spark's fixed costs — a job, a stage, a task, a Python worker round
trip — dominate, not data volume. Every relation is therefore kept in ONE partition
(``coalesce(1)``): the merge aggregate then needs no exchange (a single partition already
satisfies any clustering) and joins broadcast the relation side, so an iteration of a relation
is one Spark job (its count) plus one small job per broadcast of a derived relation; no
shuffle joins, whose exchanges would each add a stage.

Differences from the python engine: ``RunStats.produced`` is not filled (counting the
candidate tuples with their duplicates would cost one more Spark job per relation and
iteration); Spark's grouping compares doubles with NaN equal to NaN (Python sets do not),
irrelevant for costs and cardinalities.
"""

from __future__ import annotations

import functools
import math
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pandas as pd
from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from reopt.evaluator.ast import Aggregate, Arith, Const, Var, Wildcard
from reopt.evaluator.compiler import (
    BOOLEAN,
    DELTA,
    DOUBLE,
    LONG,
    OLD,
    STRING,
    Call,
    CompiledProgram,
    Filter,
    Scan,
    Variant,
    _py_type,
)
from reopt.evaluator.driver import column_names
from reopt.evaluator.python_engine import RunStats

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


def _map_batches(ctx_bc, token: str, steps: tuple[CallStep, ...],
                 batches: Iterator[pd.DataFrame]):
    ctx = _CTX.get(token)
    if ctx is None:
        _CTX.clear()  # one evaluation at a time: drop the previous contexts
        ctx = _CTX[token] = cloudpickle.loads(ctx_bc.value)
    for batch in batches:
        yield _expand(ctx, steps, batch)


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
        self._unit = spark.range(0, 1, 1, 1).selectExpr("0 AS _unit")
        self._ctx_bc = None
        self._token = ""
        self._local: dict[str, list[tuple]] = {}
        self._empty: dict[str, DataFrame] = {}

    def _frame(self, pred: str, rows) -> DataFrame:
        """A relation given on the driver (facts, inputs, an empty delta) as an inline table
        (``VALUES``): a local relation in the plan, nothing to compute or checkpoint."""
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

    # -- one variant ---------------------------------------------------------------------------
    def run_variant(self, v: Variant, full: Mapping[str, DataFrame],
                    delta: Mapping[str, DataFrame], old: Mapping[str, DataFrame]) -> DataFrame:
        b = _Bindings(self._unit)
        ops = list(v.ops)
        i = 0
        while i < len(ops):
            op = ops[i]
            if isinstance(op, Scan):
                src = {DELTA: delta, OLD: old}.get(op.version, full)[op.pred]
                self._scan(b, op, src)
            elif isinstance(op, Call):
                j = i
                while j < len(ops) and isinstance(ops[j], Call):
                    j += 1
                self._call(b, ops[i:j])  # type: ignore[arg-type]
                i = j
                continue
            else:
                self._filter(b, op)
            i += 1
        return self._project(b, v)

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
            r = r.selectExpr(*sel) if sel else r.selectExpr()
            b.df, b.unit = b.df.join(r.hint("broadcast"), on=on, how="left_anti"), False
            return
        unit = b.unit
        sel += [f"{names[first[n]]} AS {_ident(b.bind(n, types[first[n]]))}"
                for n in first if n not in keys]
        r = r.selectExpr(*sel)
        if unit and sel:
            b.df = r.coalesce(1)  # one partition: see "Partitions" in the module docstring
        elif keys:
            b.df = b.df.join(r.hint("broadcast"), on=on, how="inner")
        else:
            b.df = b.df.crossJoin(r.hint("broadcast"))

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
        df = b.df.selectExpr("*", f"inline(array({structs}))")
        if keys:
            df = df.filter(" AND ".join(f"{_ident(c)} = {_ident(k)}" for c, k in key_of.values()))
        drop = [k for _, k in key_of.values()] + (["_k"] if fields[0][0] == "_k" else [])
        b.df, b.unit = (df.drop(*drop) if drop else df), False

    def _call(self, b: _Bindings, ops: list[Call]) -> None:
        steps: list[CallStep] = []
        fields = list(b.df.schema.fields)
        for op in ops:
            builtin = self.program.builtins[op.name]
            inputs = tuple((True, b.cols[t.name]) if isinstance(t, Var) else (False, t.value)
                           for t in op.inputs)
            binds, checks = [], []
            first: dict[str, int] = {}
            for j, t in enumerate(op.outputs):
                if isinstance(t, Wildcard):
                    continue
                if isinstance(t, Const):
                    checks.append((j, "k", t.value))
                elif t.name in first:  # bound by this very call: compare within the result
                    checks.append((j, "o", first[t.name]))
                elif t.name in b.cols:
                    checks.append((j, "c", b.cols[t.name]))
                else:
                    first[t.name] = j
                    ty = builtin.outputs[j]
                    col = b.bind(t.name, ty)
                    binds.append((j, col, ty))
                    fields.append(T.StructField(col, SPARK_TYPES[ty]))
            steps.append((builtin.fn, inputs, tuple(binds), tuple(checks)))
        fn = functools.partial(_map_batches, self._ctx_bc, self._token, tuple(steps))
        b.df, b.unit = b.df.mapInPandas(fn, T.StructType(fields)), False

    def _filter(self, b: _Bindings, op: Filter) -> None:
        left_free = isinstance(op.left, Var) and op.left.name not in b.cols
        right_free = isinstance(op.right, Var) and op.right.name not in b.cols
        if op.op == "=" and (left_free or right_free):
            free, src = (op.left, op.right) if left_free else (op.right, op.left)
            ty = b.type_of(src)
            col = _ident(b.bind(free.name, ty))
            b.df = b.df.selectExpr("*", f"CAST({b.term(src)} AS {SQL_TYPES[ty]}) AS {col}")
            return
        cond = f"{b.term(op.left)} {op.op} {b.term(op.right)}"
        b.df, b.unit = b.df.filter(cond), False

    def _project(self, b: _Bindings, v: Variant) -> DataFrame:
        names = self.columns[v.head_pred]
        types = self.program.schemas[v.head_pred]
        df = b.df.selectExpr(*[
            f"CAST({b.term(a.var if isinstance(a, Aggregate) else a)} AS {SQL_TYPES[ty]}) "
            f"AS {_ident(n)}"
            for a, n, ty in zip(v.head, names, types, strict=True)
        ])
        agg = v.aggregate
        if agg is None:
            return df
        pos, a = agg
        keys = names[:pos] + names[pos + 1:]
        x = _ident(names[pos])
        return df.groupBy(*keys).agg(F.expr(f"{a.func}({x}) AS {x}")).select(*names)

    # -- fixpoint ------------------------------------------------------------------------------
    def evaluate(self, inputs: Mapping[str, Any]) -> tuple[dict[str, SparkRelation], RunStats]:
        t0 = time.perf_counter()
        prog = self.program
        stats = RunStats()
        # PlanSpaces hold mappingproxy objects, which plain pickle (what broadcast uses)
        # rejects; cloudpickle handles them, so the broadcast value is cloudpickled bytes.
        self._token = uuid.uuid4().hex
        self._ctx_bc = self.spark.sparkContext.broadcast(cloudpickle.dumps(dict(self.ctx)))
        try:
            idb = {p for st in prog.strata for p in st.preds}
            self._local = {}
            full: dict[str, DataFrame] = {}
            size: dict[str, int] = {}
            for p in prog.schemas:
                rows = list(prog.facts.get(p, ()))
                if p in prog.inputs:
                    rows += list(inputs.get(p, ()))
                rows = list(dict.fromkeys(rows))
                full[p] = self._frame(p, rows)
                size[p] = len(rows)
                if p not in idb and len(rows) <= LOCAL_MAX:
                    self._local[p] = rows
            for stratum in prog.strata:
                pending = {p: [self.run_variant(v, full, {}, {}) for v in stratum.base
                               if v.head_pred == p] for p in stratum.preds}
                delta, old, count = self._absorb(pending, full, size, stats)
                stats.iterations += 1
                while stratum.recursive and any(count.values()):
                    pending = {p: [] for p in stratum.preds}
                    for v in stratum.deltas:
                        if count[v.rule.body[v.delta_atom].pred]:  # type: ignore[index]
                            pending[v.head_pred].append(self.run_variant(v, full, delta, old))
                    delta, old, count = self._absorb(pending, full, size, stats)
                    stats.iterations += 1
        finally:
            self._ctx_bc.unpersist()
        stats.seconds = time.perf_counter() - t0
        return {p: SparkRelation(df, size[p]) for p, df in full.items()}, stats

    def _absorb(self, pending: dict[str, list[DataFrame]], full: dict[str, DataFrame],
                size: dict[str, int], stats: RunStats):
        """New DELTA = distinct candidates not in FULL; OLD = FULL; FULL = FULL ∪ DELTA.
        One checkpoint per relation holds FULL ∪ DELTA with a column telling which tuples are
        new; DELTA and the next FULL are a filter and a projection of it. Counting the delta
        (the one Spark action per relation) materializes it."""
        delta, old, count = {}, {}, {}
        for p, frames in pending.items():
            old[p] = full[p]
            n = 0
            if frames:
                merged = self._merge(p, frames, full[p]).localCheckpoint(eager=False)
                tag = self._tag[p]
                d = merged.filter(tag).drop(tag)
                n = d.count()
            if n:
                delta[p] = d
                full[p] = merged.drop(tag)
            else:  # no delta variant reads it (they are skipped), but keep it a frame
                if p not in self._empty:
                    self._empty[p] = self._frame(p, [])
                delta[p] = self._empty[p]
            count[p] = n
            size[p] += n
            stats.derived[p] = stats.derived.get(p, 0) + n
        return delta, old, count

    def _merge(self, pred: str, frames: list[DataFrame], full: DataFrame) -> DataFrame:
        """FULL ∪ the distinct candidates of ``frames``, with a boolean column that is true for
        the candidates not in FULL: candidates tagged true, FULL tagged false, grouped on all
        columns in ONE partition (no exchange), the tag being the group's ``min``."""
        cols, tag = self.columns[pred], self._tag[pred]
        cand = functools.reduce(DataFrame.union, frames).selectExpr("*", f"true AS {tag}")
        tagged = cand.union(full.selectExpr("*", f"false AS {tag}")).coalesce(1)
        return tagged.groupBy(*cols).agg(F.expr(f"min({tag}) AS {tag}"))


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
