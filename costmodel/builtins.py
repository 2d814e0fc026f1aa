"""The built-in functions the rules call (``Fn_*`` atoms), registered by name.

Each is a Python callable ``fn(ctx, *inputs) -> iterable of output tuples`` with declared input
and output types, so an engine can bind inputs, expand outputs (a function may return zero,
one or many rows) and build typed columns (Spark). ``ctx`` maps a query id to its
:class:`~reopt.costmodel.space.PlanSpace`; the functions are thin adapters over it, so the
declarative optimizer costs plans with exactly the code the procedural ones use, and the ``io``
and ``cout`` models plug in without touching the rules.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from reopt.costmodel.space import Alt, PlanSpace, plan_cost

LONG, DOUBLE, STRING, BOOLEAN = "long", "double", "string", "boolean"

Context = Mapping[int, PlanSpace]


@dataclass(frozen=True)
class Builtin:
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    fn: Callable[..., Iterable[tuple]]
    doc: str = ""
    statistics: bool = False
    """Whether results depend on the statistics (summaries, costs): after a delta, only
    these can answer differently, and only for the OR nodes :func:`stale_keys` names."""

    @property
    def arity(self) -> int:
        return len(self.inputs) + len(self.outputs)


def _isleaf(ctx: Context, q: int, e: int):
    return [(ctx[q].is_leaf(e),)]


_SPLIT = operator.itemgetter(2, 5, 6, 7, 8)
"""An :class:`Alt`'s index, left, left_prop, right, right_prop (what ``Fn_split`` answers)."""


def _split(ctx: Context, q: int, e: int, p: str, m: str):
    return list(map(_SPLIT, ctx[q].join_alternatives(e, p, m)))


def _phyop(ctx: Context, q: int, e: int, p: str, m: str):
    return [(a.index,) for a in ctx[q].scan_alternatives(e, p) if a.phy_op == m]


def _enforce(ctx: Context, q: int, e: int, p: str, m: str):
    return [(a.index, a.left, a.left_prop)
            for a in ctx[q].enforcer_alternatives(e, p) if a.phy_op == m]


def _final(ctx: Context, q: int, e: int, p: str, m: str):
    return [(a.index, a.log_op, a.left, a.left_prop)
            for a in ctx[q].final_alternatives(e, p) if a.phy_op == m]


def _summary(ctx: Context, q: int, e: int):
    return [(ctx[q].summary(e),)]


def _nonscansummary(ctx: Context, q: int, e: int, lmd: float, rmd: float):
    # The output estimate is a property of the expression, not of the children's plans.
    return [(ctx[q].summary(e),)]


def _scancost(ctx: Context, q: int, e: int, p: str, i: int, m: str, md: float):
    return [(ctx[q].local_cost(Alt(e, p, i, "scan", m)),)]


def _nonscancost(ctx: Context, q: int, e: int, p: str, i: int, lo: str, m: str,
                 l: int, lp: str, r: int, rp: str, md: float):  # noqa: E741
    # tuple.__new__: the Alt Alt(...) builds, without the Python-level __new__ of a NamedTuple
    return [(ctx[q].local_cost(tuple.__new__(Alt, (e, p, i, lo, m, l, lp, r, rp))),)]


def _rank(ctx: Context, q: int, e: int, p: str):
    return [(ctx[q].rank(e, p),)]


def _sum(ctx: Context, local: float, lcost: float, rcost: float):
    return [(plan_cost(local, lcost, rcost),)]


def stale_keys(old: Context, new: Context, keys: Iterable[tuple]) -> set[tuple]:
    """The OR nodes ``(q, expr, prop)`` among ``keys`` for which a built-in marked
    ``statistics`` may answer differently under ``new`` than under ``old`` (a query's
    :class:`PlanSpace` replaced after a delta). Incremental maintenance re-derives exactly
    these; everything else is reused."""
    by_query: dict[int, set[tuple[int, str]]] = {}
    for k in keys:
        by_query.setdefault(k[0], set()).add(k[1:])
    out: set[tuple] = set()
    for q, nodes in by_query.items():
        if old[q] is new[q]:
            continue
        out.update((q, *n) for n in new[q].stale_nodes(old[q], nodes))
    return out


BUILTINS: dict[str, Builtin] = {
    b.name: b
    for b in (
        Builtin("Fn_isleaf", (LONG, LONG), (BOOLEAN,), _isleaf,
                "Fn_isleaf(q, expr, isLeaf): whether expr is a single base relation"),
        Builtin("Fn_split", (LONG, LONG, STRING, STRING), (LONG, LONG, STRING, LONG, STRING),
                _split, "Fn_split(q, expr, prop, method, index, lExpr, lProp, rExpr, rProp): "
                "the join alternatives of one physical method"),
        Builtin("Fn_phyop", (LONG, LONG, STRING, STRING), (LONG,), _phyop,
                "Fn_phyop(q, expr, prop, method, index): scans of a leaf delivering prop"),
        Builtin("Fn_enforce", (LONG, LONG, STRING, STRING), (LONG, LONG, STRING), _enforce,
                "Fn_enforce(q, expr, prop, method, index, lExpr, lProp): enforcers of prop"),
        Builtin("Fn_final", (LONG, LONG, STRING, STRING), (LONG, STRING, LONG, STRING), _final,
                "Fn_final(q, expr, prop, method, index, logOp, lExpr, lProp): final group-by/sort"),
        Builtin("Fn_scansummary", (LONG, LONG), (DOUBLE,), _summary,
                "Fn_scansummary(q, expr, md): estimated rows of a base relation",
                statistics=True),
        Builtin("Fn_nonscansummary", (LONG, LONG, DOUBLE, DOUBLE), (DOUBLE,), _nonscansummary,
                "Fn_nonscansummary(q, expr, lMd, rMd, md): estimated rows of an operator",
                statistics=True),
        Builtin("Fn_scancost", (LONG, LONG, STRING, LONG, STRING, DOUBLE), (DOUBLE,), _scancost,
                "Fn_scancost(q, expr, prop, index, method, md, cost): local cost of a scan",
                statistics=True),
        Builtin("Fn_nonscancost",
                (LONG, LONG, STRING, LONG, STRING, STRING, LONG, STRING, LONG, STRING, DOUBLE),
                (DOUBLE,), _nonscancost,
                "Fn_nonscancost(q, expr, prop, index, logOp, method, lExpr, lProp, rExpr, rProp, "
                "md, cost): local cost of a join, enforcer or final operator",
                statistics=True),
        Builtin("Fn_rank", (LONG, LONG, STRING), (LONG,), _rank,
                "Fn_rank(q, expr, prop, rank): the OR node's bottom-up rank (children below "
                "parents), the order scheduled strata follow"),
        Builtin("Fn_sum", (DOUBLE, DOUBLE, DOUBLE), (DOUBLE,), _sum,
                "Fn_sum(localCost, lCost, rCost, cost): a plan's cost"),
    )
}
