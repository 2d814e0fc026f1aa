"""The built-in functions the rules call (``Fn_*`` atoms), registered by name.

Each comes in two forms with declared input and output types, so an engine can bind inputs,
expand outputs (a function may return zero, one or many rows) and build typed columns:

* tuple at a time, ``fn(ctx, *inputs) -> iterable of output tuples``;
* a batch, ``batch(ctx, *input_columns) -> (row, *output_columns)``: given one column per
  input (numpy arrays or sequences; relation sets as ``int64`` bitsets), every output row of
  every input row at once, ``row[k]`` naming the input row output ``k`` came from. This is
  the interface a set-at-a-time engine calls; columns are numpy arrays (``int64``,
  ``float64``, ``bool``; strings as ``object``).

``ctx`` maps a query id to its :class:`~reopt.costmodel.space.PlanSpace`; both forms are thin
adapters over it (the batch form over its per-node columns, :class:`AltColumns`), so the
declarative optimizer costs plans with exactly the code the procedural ones use, and the ``io``
and ``cout`` models plug in without touching the rules. Bitsets are ``int64``, which bounds a
query at :data:`~reopt.costmodel.joingraph.MAX_RELATIONS` relations (the plan space refuses
more, with one line).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter

import numpy as np

from reopt.costmodel.space import ANY, Alt, PlanSpace, plan_cost

LONG, DOUBLE, STRING, BOOLEAN = "long", "double", "string", "boolean"

Context = Mapping[int, PlanSpace]


@dataclass(frozen=True)
class Builtin:
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    fn: Callable[..., Iterable[tuple]]
    batch: Callable[..., tuple[np.ndarray, ...]] | None = None
    """The batch form: input columns → ``(row, *output columns)`` (module doc); by default
    the tuple form applied row by row."""
    doc: str = ""
    statistics: bool = False
    """Whether results depend on the statistics (summaries, costs): after a delta, only
    these can answer differently, and only for the OR nodes :func:`stale_keys` names."""
    reads_space: bool = True
    """Whether it answers from one query's plan space, the query id being its first input
    (all but arithmetic): a program is decomposable by query only if every such call gets
    its rule's query id (:mod:`reopt.evaluator.decompose`)."""
    one: Callable[..., object] | None = None
    """For a built-in with one output that answers every input row with exactly one row:
    ``one(ctx, *inputs)`` is that row's value (the tuple form is ``[(one(…),)]``), so a
    tuple-at-a-time engine binds it without a list and a tuple per call."""

    def __post_init__(self) -> None:
        if self.batch is None:
            object.__setattr__(self, "batch", _rowwise(self.fn, self.outputs))

    @property
    def native(self) -> bool:
        """Whether the batch form is its own, not the tuple form applied row by row."""
        return not getattr(self.batch, "rowwise", False)

    @property
    def arity(self) -> int:
        return len(self.inputs) + len(self.outputs)


def _isleaf(ctx: Context, q: int, e: int):
    return [(ctx[q].is_leaf(e),)]


def _split(ctx: Context, q: int, e: int, p: str, m: str):
    """An alternative's index, left, left_prop, right, right_prop, per join of method m."""
    c = ctx[q].join_columns(e, p, m)
    if not len(c.index):  # a method the model does not have: the rules ask for every one listed
        return ()
    return list(zip(c.index, c.left, c.left_prop, c.right, c.right_prop, strict=True))


def _phyop(ctx: Context, q: int, e: int, p: str, m: str):
    return [(a.index,) for a in ctx[q].scan_alternatives(e, p) if a.phy_op == m]


def _enforce(ctx: Context, q: int, e: int, p: str, m: str):
    return [(a.index, a.left, a.left_prop)
            for a in ctx[q].enforcer_alternatives(e, p) if a.phy_op == m]


def _final(ctx: Context, q: int, e: int, p: str, m: str):
    return [(a.index, a.log_op, a.left, a.left_prop)
            for a in ctx[q].final_alternatives(e, p) if a.phy_op == m]


def _summary1(ctx: Context, q: int, e: int) -> float:
    return ctx[q].summary(e)


def _nonscansummary1(ctx: Context, q: int, e: int, lmd: float, rmd: float) -> float:
    # The output estimate is a property of the expression, not of the children's plans.
    return ctx[q].summary(e)


def _scancost1(ctx: Context, q: int, e: int, p: str, i: int, m: str, md: float) -> float:
    return ctx[q].local_cost(Alt(e, p, i, "scan", m))


def _nonscancost1(ctx: Context, q: int, e: int, p: str, i: int, lo: str, m: str,
                  l: int, lp: str, r: int, rp: str, md: float) -> float:  # noqa: E741
    # tuple.__new__: the Alt Alt(...) builds, without the Python-level __new__ of a NamedTuple
    return ctx[q].local_cost(tuple.__new__(Alt, (e, p, i, lo, m, l, lp, r, rp)))


def _rank1(ctx: Context, q: int, e: int, p: str) -> int:
    return ctx[q].rank(e, p)


def _sum1(ctx: Context, local: float, lcost: float, rcost: float) -> float:
    return plan_cost(local, lcost, rcost)


def _rows(one: Callable[..., object]) -> Callable[..., list[tuple]]:
    """The tuple form of a built-in answering each input row with the one value ``one``
    gives."""
    def fn(ctx: Context, *args: object) -> list[tuple]:
        return [(one(ctx, *args),)]
    fn.__name__ = one.__name__.rstrip("1")
    return fn


_summary, _nonscansummary, _scancost, _nonscancost, _rank, _sum = map(
    _rows, (_summary1, _nonscansummary1, _scancost1, _nonscancost1, _rank1, _sum1))


SEED_SLACK = 1e-9
"""Relative amount a seed bound is rounded up by: the optimum and the greedy plan are costed by
the same additions, but a bound must never fall below the optimum by a rounding."""


def _seedbound(ctx: Context, q: int):
    """An upper bound on query ``q``'s optimal cost known before any costing: its greedy plan's
    cost (:mod:`reopt.optimizers.greedy`, a plan of the same space, O(n^3) estimates), rounded
    up. Every sub-plan of an optimal plan costs at most the optimum (costs are non-negative),
    so a plan of any OR node costing more than this is in no optimal plan (Proposition 7)."""
    from reopt.optimizers.greedy import greedy_cost  # the optimizers import this package

    try:
        cost = greedy_cost(ctx[q])
    except RuntimeError:  # no greedy plan (cannot happen on a model's full space): no bound
        return [(float("inf"),)]
    return [(cost * (1.0 + SEED_SLACK),)]


# -- batch forms ------------------------------------------------------------------------------
Column = Sequence | np.ndarray
_DTYPES = {LONG: np.int64, DOUBLE: np.float64, BOOLEAN: np.bool_, STRING: object}


def _columns(types: tuple[str, ...], values: list[list]) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(v, dtype=_DTYPES[t]) if t != STRING else _strings(v)
                 for t, v in zip(types, values, strict=True))


def _strings(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _each_row(q: Column) -> np.ndarray:
    return np.arange(len(q), dtype=np.int64)


def _queries(q: np.ndarray) -> list[tuple[int, np.ndarray | slice]]:
    """Each query of the rows ``q`` and its rows (ascending; ``slice(None)``, all of them,
    where the batch is of one query, as it is but in a batch evaluation: the columns are
    then read as they are, not gathered, and no sort finds the queries)."""
    if len(q) and bool((q == q[0]).all()):
        return [(int(q[0]), slice(None))]
    return [(qid, np.flatnonzero(q == qid)) for qid in np.unique(q).tolist()]


def _by_query(ctx: Context, q: Column, e: Column) -> tuple[np.ndarray, np.ndarray]:
    """Per-row constants of each row's query: its ``top`` (the final operator's
    pseudo-expression) as an ``int64`` column, and the rows' expressions as one."""
    q = np.asarray(q, dtype=np.int64)
    tops = np.zeros(len(q), dtype=np.int64)
    for qid in np.unique(q).tolist():
        tops[q == qid] = ctx[qid].top
    return tops, np.asarray(e, dtype=np.int64)


def _isleaf_batch(ctx: Context, q: Column, e: Column):
    tops, e = _by_query(ctx, q, e)
    return _each_row(q), (e != tops) & (e & (e - 1) == 0)


def _split_batch(ctx: Context, q: Column, e: Column, p: Column, m: Column):
    """Every split of every (expression, property, method) row: the node's join columns,
    memoized per OR node, concatenated with a row index back to the input."""
    rows: list[int] = []
    out: list[list] = [[], [], [], [], []]
    q = np.asarray(q, dtype=np.int64)
    ops = m if isinstance(m, np.ndarray) else _strings(list(m))
    ours = np.zeros(len(q), dtype=bool)
    done: list[tuple[np.ndarray, ...]] = []
    for qid in np.unique(q).tolist():  # a method not the model's has no alternative (as
        # join_columns): those rows, most under a model of one join method, are left out first
        mine = q == qid
        space = ctx[qid]
        at = np.flatnonzero(mine)
        whole = space.model.joins_batch(space, np.asarray(e)[at],
                                        np.asarray(p, dtype=object)[at], ops[at])
        if whole is not None:  # the model answers every row of the query at once
            done.append((at[whole[0]], *whole[1:]))
            continue
        ours |= mine & np.isin(ops, list(space.model.join_methods))
    at = np.flatnonzero(ours)
    for k, qid, expr, prop, method in zip(
            at.tolist(), q[at].tolist(), np.asarray(e)[at].tolist(),
            np.asarray(p, dtype=object)[at].tolist(), ops[at].tolist(), strict=True):
        cols = ctx[qid].join_columns(expr, prop, method)
        n = cols.count
        if n:
            rows += repeat(k, n)
            out[0] += cols.index
            out[1] += cols.left
            out[2] += cols.left_prop
            out[3] += cols.right
            out[4] += cols.right_prop
    outputs = BUILTINS["Fn_split"].outputs
    return _in_row_order((np.asarray(rows, dtype=np.int64), *_columns(outputs, out)), done,
                         outputs)


def _in_row_order(looped: tuple[np.ndarray, ...], done: list[tuple[np.ndarray, ...]],
                  outputs: tuple[str, ...]) -> tuple[np.ndarray, ...]:
    """A batch built-in's answer from the part answered row by row (``looped``) and the
    parts a model answered whole, query by query (``done``): their rows in input order (each
    part's rows ascend)."""
    parts = [part for part in (looped, *done) if len(part[0])]
    if len(parts) <= 1:  # (one query, as usual)
        return parts[0] if parts else looped
    row = np.concatenate([part[0] for part in parts])
    order = np.argsort(row, kind="stable")
    return (row[order], *(np.concatenate([np.asarray(part[j + 1], dtype=_DTYPES[t])
                                          for part in parts])[order]
                          for j, t in enumerate(outputs)))


def _rowwise(fn: Callable, outputs: tuple[str, ...]) -> Callable:
    """The batch form of a built-in with few rows per evaluation (scans, enforcers, the
    final operator): its tuple form applied row by row."""
    def batch(ctx: Context, *cols: Column):
        rows: list[int] = []
        out: list[list] = [[] for _ in outputs]
        inputs = [np.asarray(c).tolist() if isinstance(c, np.ndarray) else list(c)
                  for c in cols]
        for k, args in enumerate(zip(*inputs, strict=True)):
            for t in fn(ctx, *args):
                rows.append(k)
                for j, v in enumerate(t):
                    out[j].append(v)
        return (np.asarray(rows, dtype=np.int64), *_columns(outputs, out))
    batch.rowwise = True  # type: ignore[attr-defined]  # (Builtin.native reads it)
    return batch


def _final_batch(ctx: Context, q: Column, e: Column, p: Column, m: Column):
    """``Fn_final`` row by row over the rows whose expression is their query's final
    operator's pseudo-expression (``top``): every other row has no final alternative
    (:meth:`PlanSpace.final_alternatives`), so it is left out before the Python loop."""
    tops, exprs = _by_query(ctx, q, e)
    return _rows_at(_FINAL_ROWS, ctx, np.flatnonzero(exprs == tops), (q, e, p, m))


def _enforce_batch(ctx: Context, q: Column, e: Column, p: Column, m: Column):
    """``Fn_enforce`` over the rows of queries whose cost model has enforcers, query by
    query in one call where the model answers it (:meth:`CostModel.enforcers_batch`), else
    row by row: a model that keeps :meth:`CostModel.enforcer_alternatives` (none, as
    ``cout``) answers no row, so its rows — one per OR node — are left out first."""
    from reopt.costmodel.models import CostModel  # (the models import this module's package)

    q = np.asarray(q, dtype=np.int64)
    exprs = np.asarray(e, dtype=np.int64)
    props = np.asarray(p, dtype=object)
    ops = m if isinstance(m, np.ndarray) else _strings(list(m))
    enforcing = np.zeros(len(q), dtype=bool)
    done: list[tuple[np.ndarray, ...]] = []
    for qid in np.unique(q).tolist():
        model = ctx[qid].model
        if type(model).enforcer_alternatives is CostModel.enforcer_alternatives:
            continue
        at = np.flatnonzero(q == qid)
        whole = model.enforcers_batch(ctx[qid], exprs[at], props[at], ops[at])
        if whole is not None:
            done.append((at[whole[0]], *whole[1:]))
        else:
            enforcing[at] = True
    looped = _rows_at(_ENFORCE_ROWS, ctx, np.flatnonzero(enforcing), (q, e, p, m))
    return _in_row_order(looped, done, BUILTINS["Fn_enforce"].outputs)


def _rows_at(rowwise: Callable, ctx: Context, at: np.ndarray, cols: tuple[Column, ...]):
    """The batch built-in ``rowwise`` over the rows ``at`` of the input columns ``cols``,
    its output rows numbered as the inputs'."""
    row, *outs = rowwise(ctx, *(c[at] if isinstance(c, np.ndarray) else
                                [c[k] for k in at.tolist()] for c in cols))
    return (at[row], *outs)


_FINAL_ROWS = _rowwise(_final, (LONG, STRING, LONG, STRING))
_ENFORCE_ROWS = _rowwise(_enforce, (LONG, LONG, STRING))


def _summary_batch(ctx: Context, q: Column, e: Column, *_: Column):
    """Estimated rows, query by query, vectorized (:meth:`PlanSpace.summaries`)."""
    q = np.asarray(q, dtype=np.int64)
    e = np.asarray(e, dtype=np.int64)
    md = np.empty(len(q), dtype=np.float64)
    for qid, at in _queries(q):
        md[at] = ctx[qid].summaries(e[at])
    return _each_row(q), md


def _nonscancost_batch(ctx: Context, q: Column, e: Column, p: Column, i: Column,
                       lo: Column, m: Column, l: Column, lp: Column, r: Column,  # noqa: E741
                       rp: Column, md: Column):
    """Local costs of many alternatives, query by query (:meth:`PlanSpace.local_costs_of`)."""
    q = np.asarray(q, dtype=np.int64)
    out = np.empty(len(q), dtype=np.float64)
    fields: list[list] = []  # the columns as Python values, made only for a model without
    # a vectorized form (most of a call's time when made for every call)
    ops = m if isinstance(m, np.ndarray) and m.dtype == object else _strings(list(m))
    exprs = np.asarray(e, dtype=np.int64)
    index, lefts, rights = (np.asarray(c, dtype=np.int64) for c in (i, l, r))
    for qid, at in _queries(q):
        fast = ctx[qid].local_cost_column(exprs[at], ops[at], index[at], lefts[at], rights[at])
        if fast is not None:
            out[at] = fast
            continue
        fields = fields or [np.asarray(c).tolist() if isinstance(c, np.ndarray) else list(c)
                            for c in (e, p, i, lo, m, l, lp, r, rp)]
        pick = np.arange(len(q))[at].tolist()
        alts = list(map(tuple.__new__, repeat(Alt), zip(
            *([f[k] for k in pick] for f in fields), strict=True)))
        out[at] = ctx[qid].local_costs_of(alts)
    return _each_row(q), out


def _scancost_batch(ctx: Context, q: Column, e: Column, p: Column, i: Column, m: Column,
                    md: Column):
    n = len(q)
    return _nonscancost_batch(ctx, q, e, p, i, _strings(["scan"] * n), m,
                              np.zeros(n, np.int64), _strings([""] * n),
                              np.zeros(n, np.int64), _strings([""] * n), md)


def _rank_batch(ctx: Context, q: Column, e: Column, p: Column):
    """``2·|expr| + (prop != any)`` (:meth:`PlanSpace.rank`), vectorized."""
    e = np.asarray(e, dtype=np.int64)
    sorted_ = (p if isinstance(p, np.ndarray) else _strings(list(p))) != ANY
    return _each_row(q), 2 * np.bitwise_count(e).astype(np.int64) + sorted_.astype(np.int64)


def _sum_batch(ctx: Context, local: Column, lcost: Column, rcost: Column):
    """:func:`plan_cost`, vectorized: ``(local + left) + right`` in float64, the same IEEE
    additions in the same order, so the same bits."""
    local = np.asarray(local, dtype=np.float64)
    return _each_row(local), (local + np.asarray(lcost, dtype=np.float64)
                              ) + np.asarray(rcost, dtype=np.float64)


def stale_keys(old: Context, new: Context, keys: Iterable[tuple]) -> set[tuple]:
    """The OR nodes ``(q, expr, prop)`` among ``keys`` for which a built-in marked
    ``statistics`` may answer differently under ``new`` than under ``old`` (a query's
    :class:`PlanSpace` replaced after a delta). Incremental maintenance re-derives exactly
    these; everything else is reused."""
    return stale_of_queries(old, new, keys_by_query(keys))


Nodes = tuple[list[tuple[int, str]], np.ndarray]
"""One query's OR nodes ``(expr, prop)`` and their expressions as ``int64``."""


def keys_by_query(keys: Iterable[tuple]) -> dict[int, Nodes]:
    """OR nodes ``(q, expr, prop)`` as query → its ``(expr, prop)`` (each key once) and
    their expressions: the form :func:`stale_of_queries` reads, which a caller asking about
    the same keys on every update keeps instead of grouping them again."""
    if isinstance(keys, (set, frozenset)):  # (distinct: one query's need no grouping)
        queries = set(map(itemgetter(0), keys))
        if len(queries) == 1:  # (a session of one query, the usual)
            return {queries.pop(): ([k[1:] for k in keys],
                                    np.fromiter(map(itemgetter(1), keys), np.int64, len(keys)))}
    by_query: dict[int, dict[tuple[int, str], None]] = {}
    for k in keys:
        by_query.setdefault(k[0], {})[k[1:]] = None
    return {q: (nodes := list(grouped), np.fromiter((n[0] for n in nodes), np.int64,
                                                    len(nodes)))
            for q, grouped in by_query.items()}


def stale_of_queries(old: Context, new: Context, by_query: Mapping[int, Nodes]) -> set[tuple]:
    """:func:`stale_keys` of keys grouped by query (:func:`keys_by_query`)."""
    out: set[tuple] = set()
    for q, (nodes, exprs) in by_query.items():
        if old[q] is new[q]:
            continue
        out.update((q, *n) for n in new[q].stale_nodes(old[q], nodes, exprs))
    return out


BUILTINS: dict[str, Builtin] = {
    b.name: b
    for b in (
        Builtin("Fn_isleaf", (LONG, LONG), (BOOLEAN,), _isleaf, _isleaf_batch,
                "Fn_isleaf(q, expr, isLeaf): whether expr is a single base relation"),
        Builtin("Fn_split", (LONG, LONG, STRING, STRING), (LONG, LONG, STRING, LONG, STRING),
                _split, _split_batch,
                "Fn_split(q, expr, prop, method, index, lExpr, lProp, rExpr, rProp): "
                "the join alternatives of one physical method"),
        Builtin("Fn_phyop", (LONG, LONG, STRING, STRING), (LONG,), _phyop,
                _rowwise(_phyop, (LONG,)),
                "Fn_phyop(q, expr, prop, method, index): scans of a leaf delivering prop"),
        Builtin("Fn_enforce", (LONG, LONG, STRING, STRING), (LONG, LONG, STRING), _enforce,
                _enforce_batch,
                "Fn_enforce(q, expr, prop, method, index, lExpr, lProp): enforcers of prop"),
        Builtin("Fn_final", (LONG, LONG, STRING, STRING), (LONG, STRING, LONG, STRING), _final,
                _final_batch,
                "Fn_final(q, expr, prop, method, index, logOp, lExpr, lProp): final group-by/sort"),
        Builtin("Fn_scansummary", (LONG, LONG), (DOUBLE,), _summary, _summary_batch,
                "Fn_scansummary(q, expr, md): estimated rows of a base relation",
                statistics=True, one=_summary1),
        Builtin("Fn_nonscansummary", (LONG, LONG, DOUBLE, DOUBLE), (DOUBLE,), _nonscansummary,
                _summary_batch,
                "Fn_nonscansummary(q, expr, lMd, rMd, md): estimated rows of an operator",
                statistics=True, one=_nonscansummary1),
        Builtin("Fn_scancost", (LONG, LONG, STRING, LONG, STRING, DOUBLE), (DOUBLE,), _scancost,
                _scancost_batch,
                "Fn_scancost(q, expr, prop, index, method, md, cost): local cost of a scan",
                statistics=True, one=_scancost1),
        Builtin("Fn_nonscancost",
                (LONG, LONG, STRING, LONG, STRING, STRING, LONG, STRING, LONG, STRING, DOUBLE),
                (DOUBLE,), _nonscancost, _nonscancost_batch,
                "Fn_nonscancost(q, expr, prop, index, logOp, method, lExpr, lProp, rExpr, rProp, "
                "md, cost): local cost of a join, enforcer or final operator",
                statistics=True, one=_nonscancost1),
        Builtin("Fn_rank", (LONG, LONG, STRING), (LONG,), _rank, _rank_batch,
                "Fn_rank(q, expr, prop, rank): the OR node's bottom-up rank (children below "
                "parents), the order scheduled strata follow", one=_rank1),
        Builtin("Fn_sum", (DOUBLE, DOUBLE, DOUBLE), (DOUBLE,), _sum, _sum_batch,
                "Fn_sum(localCost, lCost, rCost, cost): a plan's cost", reads_space=False,
                one=_sum1),
        Builtin("Fn_seedbound", (LONG,), (DOUBLE,), _seedbound, None,
                "Fn_seedbound(q, bound): an upper bound on the query's optimal cost known "
                "before costing (its greedy plan's cost, rounded up)",
                statistics=True),
    )
}
