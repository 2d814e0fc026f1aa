"""The ``python`` engine: compiled delta plans over in-memory relations with hash indexes.

The fast path for single queries and for tests; it must give exactly the relations the
``spark`` engine gives, because both interpret the same :mod:`reopt.evaluator.compiler` ops.
Intermediate results are lists of tuples whose columns are the variables bound so far.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reopt.evaluator.ast import Aggregate, Const, Var, Wildcard
from reopt.evaluator.compiler import (
    DELTA,
    OLD,
    Call,
    CompiledProgram,
    Filter,
    Scan,
    Variant,
)

COMPARE = {
    "=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
}


class Relation:
    """A set of tuples with hash indexes on demand, kept up to date as tuples are added."""

    def __init__(self, rows: Iterable[tuple] = ()):
        self.rows: set[tuple] = set()
        self._indexes: dict[tuple[int, ...], dict[tuple, list[tuple]]] = {}
        self.add(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def index(self, cols: tuple[int, ...]) -> dict[tuple, list[tuple]]:
        idx = self._indexes.get(cols)
        if idx is None:
            idx = {}
            for r in self.rows:
                idx.setdefault(tuple(r[c] for c in cols), []).append(r)
            self._indexes[cols] = idx
        return idx

    def add(self, rows: Iterable[tuple]) -> list[tuple]:
        """Insert; returns the tuples that were new."""
        new = []
        for r in rows:
            if r not in self.rows:
                self.rows.add(r)
                new.append(r)
        if new:
            for cols, idx in self._indexes.items():
                for r in new:
                    idx.setdefault(tuple(r[c] for c in cols), []).append(r)
        return new


@dataclass
class RunStats:
    iterations: int = 0
    derived: dict[str, int] = field(default_factory=dict)
    """New tuples inserted per relation."""
    produced: dict[str, int] = field(default_factory=dict)
    """Tuples produced by rule bodies per relation, duplicates included."""
    seconds: float = 0.0


def _value(t, schema: dict[str, int], row: tuple):
    return t.value if isinstance(t, Const) else row[schema[t.name]]


class PythonEngine:
    name = "python"

    def __init__(self, compiled: CompiledProgram, ctx: Mapping[int, Any]):
        self.program = compiled
        self.ctx = ctx

    # -- one variant --------------------------------------------------------------------------
    def run_variant(
        self, v: Variant, full: Mapping[str, Relation], delta: Mapping[str, Relation]
    ) -> list[tuple]:
        schema: dict[str, int] = {}
        rows: list[tuple] = [()]
        for op in v.ops:
            if not rows:
                return []
            if isinstance(op, Scan):
                rows = self._scan(op, schema, rows, full, delta)
            elif isinstance(op, Call):
                rows = self._call(op, schema, rows)
            else:
                rows = self._filter(op, schema, rows)
        return self._project(v, schema, rows)

    def _scan(self, op: Scan, schema, rows, full, delta) -> list[tuple]:
        rel = delta[op.pred] if op.version == DELTA else full[op.pred]
        exclude = delta[op.pred].rows if op.version == OLD else None
        key_cols, key_src, new_cols, checks = [], [], [], []
        first: dict[str, int] = {}
        for col, t in enumerate(op.args):
            if isinstance(t, Wildcard):
                continue
            if isinstance(t, Const):
                key_cols.append(col)
                key_src.append((True, t.value))
            elif t.name in schema:
                key_cols.append(col)
                key_src.append((False, schema[t.name]))
            elif t.name in first:
                checks.append((first[t.name], col))
            else:
                first[t.name] = col
                new_cols.append(col)
        idx = rel.index(tuple(key_cols))
        out = []
        for row in rows:
            key = tuple(v if is_c else row[v] for is_c, v in key_src)
            matches = idx.get(key, ())
            if exclude:
                matches = [m for m in matches if m not in exclude]
            if checks:
                matches = [m for m in matches if all(m[a] == m[b] for a, b in checks)]
            if op.negated:
                if not matches:
                    out.append(row)
            else:
                for m in matches:
                    out.append(row + tuple(m[c] for c in new_cols))
        if not op.negated:
            for name in first:  # same order as new_cols
                schema[name] = len(schema)
        return out

    def _call(self, op: Call, schema, rows) -> list[tuple]:
        fn = self.program.builtins[op.name].fn
        binds, checks = [], []
        first: set[str] = set()
        for j, t in enumerate(op.outputs):
            if isinstance(t, Wildcard):
                continue
            if isinstance(t, Const):
                checks.append((j, True, t.value))
            elif t.name in schema:
                checks.append((j, False, schema[t.name]))
            elif t.name in first:
                checks.append((j, None, t.name))
            else:
                first.add(t.name)
                binds.append((j, t.name))
        out = []
        ctx = self.ctx
        for row in rows:
            args = [_value(t, schema, row) for t in op.inputs]
            for res in fn(ctx, *args):
                ok = True
                for j, is_c, v in checks:
                    if is_c is True:
                        ok = res[j] == v
                    elif is_c is False:
                        ok = res[j] == row[v]
                    else:
                        ok = res[j] == res[next(k for k, n in binds if n == v)]
                    if not ok:
                        break
                if ok:
                    out.append(row + tuple(res[j] for j, _ in binds))
        for _, name in binds:
            schema[name] = len(schema)
        return out

    def _filter(self, op: Filter, schema, rows) -> list[tuple]:
        left_free = isinstance(op.left, Var) and op.left.name not in schema
        right_free = isinstance(op.right, Var) and op.right.name not in schema
        if op.op == "=" and (left_free or right_free):
            free, src = (op.left, op.right) if left_free else (op.right, op.left)
            out = [row + (_value(src, schema, row),) for row in rows]
            schema[free.name] = len(schema)
            return out
        cmp = COMPARE[op.op]
        return [r for r in rows if cmp(_value(op.left, schema, r), _value(op.right, schema, r))]

    def _project(self, v: Variant, schema, rows) -> list[tuple]:
        head = v.head
        agg = v.aggregate
        if agg is None:
            return [tuple(_value(t, schema, r) for t in head) for r in rows]
        pos, a = agg
        pick = min if a.func == "min" else max
        groups: dict[tuple, Any] = {}
        for r in rows:
            key = tuple(_value(t, schema, r) for t in head if not isinstance(t, Aggregate))
            x = r[schema[a.var.name]]
            groups[key] = x if key not in groups else pick(groups[key], x)
        return [k[:pos] + (x,) + k[pos:] for k, x in groups.items()]

    # -- fixpoint -----------------------------------------------------------------------------
    def evaluate(
        self, inputs: Mapping[str, Iterable[tuple]]
    ) -> tuple[dict[str, Relation], RunStats]:
        t0 = time.perf_counter()
        prog = self.program
        stats = RunStats()
        full: dict[str, Relation] = {p: Relation() for p in prog.schemas}
        for p, rows in prog.facts.items():
            full[p].add(rows)
        for p in prog.inputs:
            full[p].add(inputs.get(p, ()))
        for stratum in prog.strata:
            pending = {p: [] for p in stratum.preds}
            for v in stratum.base:
                pending[v.head_pred].extend(self.run_variant(v, full, {}))
            delta = self._absorb(pending, full, stats)
            stats.iterations += 1
            while stratum.recursive and any(delta.values()):
                pending = {p: [] for p in stratum.preds}
                for v in stratum.deltas:
                    if delta[v.rule.body[v.delta_atom].pred]:  # type: ignore[index]
                        pending[v.head_pred].extend(self.run_variant(v, full, delta))
                delta = self._absorb(pending, full, stats)
                stats.iterations += 1
        stats.seconds = time.perf_counter() - t0
        return full, stats

    @staticmethod
    def _absorb(pending, full, stats: RunStats) -> dict[str, Relation]:
        delta = {}
        for p, rows in pending.items():
            stats.produced[p] = stats.produced.get(p, 0) + len(rows)
            new = full[p].add(rows)
            stats.derived[p] = stats.derived.get(p, 0) + len(new)
            delta[p] = Relation(new)
        return delta
