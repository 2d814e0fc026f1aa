"""The ``python`` engine: compiled delta plans over in-memory relations with hash indexes.

The fast path for single queries and for tests; it must give exactly the relations the
``spark`` engine gives, because both interpret the same :mod:`reopt.evaluator.compiler` ops.
Intermediate results are lists of tuples whose columns are the variables bound so far.
"""

from __future__ import annotations

import heapq
import operator
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reopt.costmodel.errors import ReoptError
from reopt.evaluator.ast import Aggregate, Arith, Atom, Const, Var
from reopt.evaluator.compiler import (
    BOUND,
    CONST,
    DELTA,
    OLD,
    SAME,
    Call,
    CompiledProgram,
    Filter,
    Scan,
    Stratum,
    Variant,
    match_terms,
)
from reopt.evaluator.features import ASCENDING, AggSel, aggregate_inputs

COMPARE = {
    "=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
}


class Relation:
    """A set of tuples with hash indexes on demand, kept up to date as tuples are added."""

    def __init__(self, rows: Iterable[tuple] = ()):
        self.rows: set[tuple] = set()
        self._indexes: dict[tuple[int, ...], dict[tuple, dict[tuple, None]]] = {}
        """Key columns → key → the tuples with that key (a dict as an ordered set, so tuples
        are removed in constant time)."""
        self.add(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def copy(self) -> Relation:
        """The same tuples; indexes are rebuilt on demand."""
        out = Relation()
        out.rows = set(self.rows)
        return out

    def index(self, cols: tuple[int, ...]) -> dict[tuple, dict[tuple, None]]:
        idx = self._indexes.get(cols)
        if idx is None:
            idx = {}
            for r in self.rows:
                idx.setdefault(tuple(r[c] for c in cols), {})[r] = None
            self._indexes[cols] = idx
        return idx

    def remove(self, rows: list[tuple]) -> None:
        for r in rows:
            self.rows.discard(r)
        for cols, idx in self._indexes.items():
            for r in rows:
                key = tuple(r[c] for c in cols)
                bucket = idx.get(key)
                if bucket is not None and r in bucket:
                    del bucket[r]
                    if not bucket:
                        del idx[key]

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
                    idx.setdefault(tuple(r[c] for c in cols), {})[r] = None
        return new


@dataclass
class RunStats:
    iterations: int = 0
    derived: dict[str, int] = field(default_factory=dict)
    """New tuples inserted per relation."""
    produced: dict[str, int] = field(default_factory=dict)
    """Tuples produced by rule bodies per relation, duplicates included."""
    deleted: dict[str, int] = field(default_factory=dict)
    """Tuples pruned per relation (suppression, reference counting)."""
    held: dict[str, int] = field(default_factory=dict)
    """Tuples per relation at the fixpoint (set by the engine at the end)."""
    seconds: float = 0.0


def _getter(t, schema: Mapping[str, int]) -> Callable[[tuple], Any]:
    """A function reading term ``t`` from a row whose columns are ``schema``'s variables."""
    if isinstance(t, Const):
        value = t.value
        return lambda row: value
    if isinstance(t, Arith):
        left, right = _getter(t.left, schema), _getter(t.right, schema)
        if t.op == "+":
            return lambda row: left(row) + right(row)
        return lambda row: left(row) - right(row)
    return operator.itemgetter(schema[t.name])


def _tuple_getter(cols: list[int]) -> Callable[[tuple], tuple]:
    if not cols:
        return lambda row: ()
    if len(cols) == 1:
        c = cols[0]
        return lambda row: (row[c],)
    return operator.itemgetter(*cols)


Step = Callable[[list, Mapping[str, "Relation"], Mapping[str, "Relation"]], list]


class PythonEngine:
    name = "python"

    def __init__(self, compiled: CompiledProgram, ctx: Mapping[int, Any]):
        self.program = compiled
        self.ctx = ctx
        self._agg_inputs = aggregate_inputs(compiled.rules, compiled.aggregates)
        self._plans: dict[int, tuple[list[Step], Callable[[tuple], tuple]]] = {}

    # -- one variant --------------------------------------------------------------------------
    def run_variant(
        self, v: Variant, full: Mapping[str, Relation], delta: Mapping[str, Relation]
    ) -> list[tuple]:
        plan = self._plans.get(id(v))
        if plan is None:
            plan = self._plans[id(v)] = self._compile(v)
        steps, project = plan
        rows: list[tuple] = [()]
        for step in steps:
            rows = step(rows, full, delta)
            if not rows:
                return []
        return [project(r) for r in rows]

    def _compile(self, v: Variant) -> tuple[list[Step], Callable[[tuple], tuple]]:
        """The variant's ops as closures over fixed column positions (the variables bound
        after each op are known before any tuple flows)."""
        schema: dict[str, int] = {}
        steps: list[Step] = []
        for op in v.ops:
            if isinstance(op, Scan):
                steps.append(self._scan(op, schema))
            elif isinstance(op, Call):
                steps.append(self._call(op, schema))
            else:
                steps.append(self._filter(op, schema))
        # an aggregate head gives its inputs (the aggregated value in place), aggregated when
        # released, over the union of the relation's rules
        head = [t.var if isinstance(t, Aggregate) else t for t in v.head]
        if all(isinstance(t, Var) for t in head):
            return steps, _tuple_getter([schema[t.name] for t in head])  # type: ignore[union-attr]
        gets = [_getter(t, schema) for t in head]
        return steps, lambda row: tuple(g(row) for g in gets)

    @staticmethod
    def _scan(op: Scan, schema: dict[str, int]) -> Step:
        matched, binds = match_terms(op.args, schema)
        keyed = [(j, kind, v) for j, kind, v in matched if kind != SAME]
        checks = [(v, j) for j, kind, v in matched if kind == SAME]
        new_cols = [j for j, _ in binds]
        cols = tuple(j for j, _, _ in keyed)
        if all(kind == BOUND for _, kind, _ in keyed):
            key = _tuple_getter([schema[v] for _, _, v in keyed])
        else:
            srcs = [(kind == CONST, v if kind == CONST else schema[v]) for _, kind, v in keyed]
            key = lambda row: tuple([v if c else row[v] for c, v in srcs])  # noqa: E731
        if not op.negated:
            for _, name in binds:  # same order as new_cols
                schema[name] = len(schema)
        ext = _tuple_getter(new_cols)
        pred, negated = op.pred, op.negated
        is_delta, is_old = op.version == DELTA, op.version == OLD

        def scan(rows, full, delta):
            rel = delta[pred] if is_delta else full[pred]
            exclude = delta[pred].rows if is_old and pred in delta else None
            if not cols and not exclude and not checks and not negated:
                # no key: a cross product with the whole relation, no index needed
                return [row + ext(m) for row in rows for m in rel.rows]
            get = rel.index(cols).get
            out = []
            for row in rows:
                matches = get(key(row), ())
                if exclude:
                    matches = [m for m in matches if m not in exclude]
                if checks:
                    matches = [m for m in matches if all(m[a] == m[b] for a, b in checks)]
                if negated:
                    if not matches:
                        out.append(row)
                else:
                    out.extend([row + ext(m) for m in matches])
            return out

        return scan

    def _call(self, op: Call, schema: dict[str, int]) -> Step:
        fn = self.program.builtins[op.name].fn
        ctx = self.ctx
        args = [_getter(t, schema) for t in op.inputs]
        matched, binds = match_terms(op.outputs, schema)
        checks = [(j, kind, schema[v] if kind == BOUND else v) for j, kind, v in matched]
        for _, name in binds:
            schema[name] = len(schema)
        keep = [j for j, _ in binds]
        whole = keep == list(range(len(op.outputs)))
        pick = _tuple_getter(keep)

        def ok(row, res) -> bool:
            for j, kind, v in checks:
                other = v if kind == CONST else row[v] if kind == BOUND else res[v]
                if res[j] != other:
                    return False
            return True

        def call(rows, full, delta):
            out = []
            for row in rows:
                for res in fn(ctx, *[a(row) for a in args]):
                    if checks and not ok(row, res):
                        continue
                    out.append(row + (tuple(res) if whole else pick(res)))
            return out

        return call

    @staticmethod
    def _filter(op: Filter, schema: dict[str, int]) -> Step:
        left_free = isinstance(op.left, Var) and op.left.name not in schema
        right_free = isinstance(op.right, Var) and op.right.name not in schema
        if op.op == "=" and (left_free or right_free):
            free, src = (op.left, op.right) if left_free else (op.right, op.left)
            get = _getter(src, schema)
            schema[free.name] = len(schema)  # type: ignore[union-attr]
            return lambda rows, full, delta: [row + (get(row),) for row in rows]
        cmp = COMPARE[op.op]
        left, right = _getter(op.left, schema), _getter(op.right, schema)
        return lambda rows, full, delta: [r for r in rows if cmp(left(r), right(r))]

    # -- fixpoint -----------------------------------------------------------------------------
    def evaluate(
        self, inputs: Mapping[str, Iterable[tuple]]
    ) -> tuple[dict[str, Relation], RunStats]:
        t0 = time.perf_counter()
        self.start(inputs)
        for stratum in self.program.strata:
            self.run_stratum(stratum)
        self.stats.held = {p: len(r) for p, r in self.full.items()}
        self.stats.seconds = time.perf_counter() - t0
        return self.full, self.stats

    def start(self, inputs: Mapping[str, Iterable[tuple]]) -> None:
        """Fresh relations holding the facts and the inputs; fresh statistics."""
        prog = self.program
        self.stats = RunStats()
        self.full = {p: Relation() for p in prog.schemas}
        self.counts: dict[str, dict[tuple, int]] = {p: {} for p in prog.features.refcount}
        for p, rows in prog.facts.items():
            self.full[p].add(rows)
        for p in prog.inputs:
            self.full[p].add(inputs.get(p, ()))
            if p in self.counts:
                for r in self.full[p].rows:
                    self.counts[p][r] = 1

    def run_stratum(self, stratum: Stratum) -> None:
        if stratum.schedule is not None:
            self._run_scheduled(stratum)
        else:
            self._run_seminaive(stratum)

    def _live_base(self, stratum: Stratum) -> list[Variant]:
        """The base variants that can derive anything: one joining a relation of its own
        stratum that is still empty derives nothing (R7/R8 before any PlanCost exists), so
        it is not run — its derivations come from the delta variants."""
        own = set(stratum.preds)
        return [v for v in stratum.base
                if not any(isinstance(op, Scan) and not op.negated and op.pred in own
                           and not self.full[op.pred].rows for op in v.ops)]

    def _run_seminaive(self, stratum: Stratum) -> None:
        pending: dict[str, list[tuple]] = {p: [] for p in stratum.preds}
        for v in self._live_base(stratum):
            pending[v.head_pred].extend(self.run_variant(v, self.full, {}))
        while True:
            delta = {p: self._release(p, rows) for p, rows in pending.items()}
            self.stats.iterations += 1
            if not stratum.recursive or not any(delta.values()):
                return
            pending = {p: [] for p in stratum.preds}
            for v in stratum.deltas:
                if delta[v.rule.body[v.delta_atom].pred]:  # type: ignore[index]
                    pending[v.head_pred].extend(self.run_variant(v, self.full, delta))

    def _run_scheduled(self, stratum: Stratum) -> None:
        """Release the stratum's tuples one rank at a time (see :mod:`.features`)."""
        sched = stratum.schedule
        assert sched is not None
        rank_fn = self.program.builtins[sched.rank]
        n_in = len(rank_fn.inputs)
        sign = 1 if sched.direction == ASCENDING else -1
        aggs = [p for p in stratum.preds if p in self.program.aggregates]
        agg_inputs = {p: {lit.pred for v in stratum.base if v.head_pred == p
                          for lit in v.rule.body
                          if isinstance(lit, Atom) and lit.pred in stratum.preds}
                      for p in aggs}
        pending: dict[str, dict[int, list[tuple]]] = {p: {} for p in stratum.preds}
        ranks: list[int] = []  # heap of signed pending ranks
        done: set[str] = set()
        current: int | None = None

        def add(pred: str, rows: list[tuple]) -> None:
            for r in rows:
                k = rank_fn.fn(self.ctx, *r[:n_in])[0][0]
                if current is not None and (sign * k < sign * current or
                                            (k == current and pred in done)):
                    raise ReoptError(
                        f".schedule {sched.direction} {sched.rank}: {pred}{r} has rank {k} "
                        f"but rank {current} is being released")
                bucket = pending[pred].get(k)
                if bucket is None:
                    pending[pred][k] = bucket = []
                    heapq.heappush(ranks, sign * k)
                bucket.append(r)

        for v in self._live_base(stratum):
            add(v.head_pred, self.run_variant(v, self.full, {}))
        while ranks:
            current = sign * heapq.heappop(ranks)
            if not any(current in pending[p] for p in stratum.preds):
                continue  # a duplicate heap entry
            done = set()
            while True:
                plain = [p for p in stratum.preds
                         if p not in self.program.aggregates and current in pending[p]]
                if not plain:
                    ready = [p for p in aggs if current in pending[p] and not any(
                        current in pending[i] for i in agg_inputs[p] if i != p)]
                    if not ready:
                        break
                    plain = ready[:1]
                    done.add(plain[0])
                delta = {p: self._release(p, pending[p].pop(current)) for p in plain}
                self.stats.iterations += 1
                for v in stratum.deltas:
                    d = delta.get(v.rule.body[v.delta_atom].pred)  # type: ignore[index]
                    if d:
                        add(v.head_pred, self.run_variant(v, self.full, delta))
            left = [p for p in stratum.preds if current in pending[p]]
            if left:
                raise ReoptError(f".schedule: {', '.join(left)} depend on each other within "
                                 f"rank {current}; the rank must separate them")

    # -- inserting: aggregates, selection, bounds, suppression ---------------------------------
    def _release(self, pred: str, rows: list[tuple]) -> Relation:
        """Insert candidate tuples of ``pred``; returns the ones that were new."""
        prog, stats = self.program, self.stats
        stats.produced[pred] = stats.produced.get(pred, 0) + len(rows)
        if pred in self.counts:
            counts = self.counts[pred]
            for r in rows:
                counts[r] = counts.get(r, 0) + 1
        agg = prog.aggregates.get(pred)
        if agg is not None:
            rows = _aggregate(rows, *agg)
        source = prog.features.suppress.get(pred)
        if source is not None:
            src = self.full[source].rows
            width = len(prog.schemas[source])
            rows = [r for r in rows if r[:width] in src]  # sources deleted meanwhile
        sel = prog.features.aggsel.get(pred)
        if sel is not None:
            kept = self._select(sel, rows)
            if source is not None:
                self._suppress(pred, source, rows, kept)
            rows = kept
        new = self.full[pred].add(rows)
        stats.derived[pred] = stats.derived.get(pred, 0) + len(new)
        return Relation(new)

    def _select(self, sel: AggSel, rows: list[tuple]) -> list[tuple]:
        """Aggregate selection: per group, the tuples with the best value, if that value beats
        the group's current aggregate and (with ``.bound``) does not exceed its bound."""
        better = operator.lt if sel.func == "min" else operator.gt
        best: dict[tuple, Any] = {}
        key, val = sel.key, sel.value
        for r in rows:
            g = tuple(r[c] for c in key)
            if g not in best or better(r[val], best[g]):
                best[g] = r[val]
        current = self.full[sel.agg].index(tuple(range(len(key))))
        bound_pred = self.program.features.bound.get(sel.target)
        bounds = self.full[bound_pred].index(tuple(range(len(key)))) if bound_pred else {}
        kept = []
        for r in rows:
            g = tuple(r[c] for c in key)
            v = r[val]
            if v != best[g]:
                continue
            cur = current.get(g)
            if cur and not better(v, next(iter(cur))[-1]):
                continue
            b = bounds.get(g)
            if b and better(next(iter(b))[-1], v):
                continue
            kept.append(r)
        return kept

    def _suppress(self, pred: str, source: str, rows: list[tuple], kept: list[tuple]) -> None:
        """Tuple source suppression: delete the source of every rejected tuple that has no
        other tuple in ``pred``."""
        width = len(self.program.schemas[source])
        alive = {r[:width] for r in kept}
        have = self.full[pred].index(tuple(range(width)))
        dead = {r[:width] for r in rows} - alive
        dead = [s for s in dead if s not in have]
        if dead:
            self._delete(source, dead)

    # -- deleting: cascades through the rules ----------------------------------------------------
    def _delete(self, pred: str, rows: Iterable[tuple]) -> None:
        """Delete tuples and what was derived from them: a tuple that embeds a deleted source
        goes with it, a counted tuple (``.refcount``) loses one count per derivation and goes
        at zero, an aggregate group is recomputed from the inputs left. Any other derived
        tuple stays (it may have other derivations, and nothing counts them)."""
        prog, full = self.program, self.full
        work: deque[tuple[str, list[tuple]]] = deque([(pred, list(rows))])
        while work:
            p, rs = work.popleft()
            rel = full[p]
            rs = [r for r in set(rs) if r in rel.rows]
            if not rs:
                continue
            gone = {p: Relation(rs)}
            derived: dict[str, list[tuple]] = {}
            for v in prog.triggers.get(p, ()):
                h = v.head_pred
                if v.embeds is not None and h not in self.counts and h not in prog.aggregates:
                    idx = full[h].index(v.embeds)  # the head tuples containing a deleted one
                    derived.setdefault(h, []).extend(t for r in rs for t in idx.get(r, ()))
                elif h in self.counts or h in prog.aggregates:
                    derived.setdefault(h, []).extend(self.run_variant(v, full, gone))
            rel.remove(rs)
            self.stats.deleted[p] = self.stats.deleted.get(p, 0) + len(rs)
            for head, hs in derived.items():
                if head in self.counts:
                    counts, dead = self.counts[head], []
                    for h in hs:
                        counts[h] -= 1
                        if counts[h] == 0:
                            del counts[h]
                            dead.append(h)
                    work.append((head, dead))
                elif head in prog.aggregates:
                    work.append((head, self._regroup(head, hs)))
                else:
                    work.append((head, hs))

    def _regroup(self, pred: str, raw: list[tuple]) -> list[tuple]:
        """The tuples of aggregate groups whose inputs lost tuples and that are now empty.
        (Pruning removes whole groups or tuples that never carried the group's value; a group
        left with a different value would need re-derivation, which pruning never asks for.)"""
        pos, func = self.program.aggregates[pred]
        key_cols = tuple(i for i in range(len(self.program.schemas[pred])) if i != pos)
        idx = self.full[pred].index(key_cols)
        out = []
        for g in {tuple(r[c] for c in key_cols) for r in raw}:
            left = [r[pos] for r in self._group_inputs(pred, g)]
            for t in idx.get(g, ()):
                if not left:
                    out.append(t)
                elif (min if func == "min" else max)(left) != t[pos]:
                    raise ReoptError(f"internal: pruning changed the value of {pred}{t}")
        return out

    def _group_inputs(self, pred: str, group: tuple) -> list[tuple]:
        """The input tuples of one aggregate group (aggregates over a single relation)."""
        out = []
        for inp in self._agg_inputs[pred]:
            hits = self.full[inp.target].index(inp.key).get(group, ())
            out.extend((*group, r[inp.value]) for r in hits)
        return out


def _aggregate(rows: list[tuple], pos: int, func: str) -> list[tuple]:
    """Group by every column but ``pos`` and keep the min/max of ``pos``."""
    better = operator.lt if func == "min" else operator.gt
    groups: dict[tuple, Any] = {}
    for r in rows:
        key = r[:pos] + r[pos + 1:]
        x = r[pos]
        if key not in groups or better(x, groups[key]):
            groups[key] = x
    return [k[:pos] + (x,) + k[pos:] for k, x in groups.items()]
