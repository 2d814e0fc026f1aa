"""Bottom-up (System R style) dynamic programming over connected subsets (DPsub order).

Expressions are visited smallest first; for each, the best plan is kept per interesting
property (``any``, every sort order a parent merge join could ask for, index probes for base
tables), ``any`` first because a sort enforcer builds on it. Every alternative's children are
then already in the table.
"""

from __future__ import annotations

import math

from reopt.costmodel.space import ANY, Alt, PlanSpace, plan_cost
from reopt.optimizers.base import Result
from reopt.plan import build_plan


def bottomup(space: PlanSpace) -> Result:
    best: dict[tuple[int, str], tuple[float, Alt]] = {}
    costed = 0
    exprs = space.expressions()
    if space.root[0] == space.top:
        exprs.append(space.top)
    for expr in exprs:
        props = space.interesting_props(expr)
        assert props[0] == ANY
        for prop in props:
            winner: tuple[float, Alt] | None = None
            for alt in space.alternatives(expr, prop):
                costed += 1
                kids = [best.get(child) for child in alt.children]
                if any(k is None for k in kids):
                    continue
                total = plan_cost(space.local_cost(alt), *(k[0] for k in kids))
                if winner is None or total < winner[0]:
                    winner = (total, alt)
            if winner is not None:
                best[(expr, prop)] = winner
    if space.root not in best:  # pragma: no cover
        raise RuntimeError("no plan found")
    plan = build_plan(space, lambda g: best[g][1])
    assert math.isclose(plan.cost, best[space.root][0], rel_tol=1e-12)
    return Result(plan.cost, plan, {"or_nodes": len(best), "and_nodes": costed})
