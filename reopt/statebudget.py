"""A state budget for continuous queries (``reopt stream --max-state N``): run the cheapest
plan whose estimated state fits in N tuples, or, when none does, the plan with the least
state, with a warning.

A plan's state is the rate model's ``state_tuples`` (``metrics["stream"]``): its windows'
tuples plus the results its stateful joins keep (every join but the root). The budget is a
bound on a second sum beside the cost, and a subplan's cheapest plan need not be one that
fits, so the optimizers' dynamic programming cannot prune by it; the optimizer's plan is
kept when it fits, and otherwise every plan tree of the query is enumerated (as
``exhaustive`` does, refused above its tree limit) — the continuous queries here join a few
streams.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reopt.costmodel.errors import ReoptError
from reopt.costmodel.rate import plan_estimates
from reopt.optimizers.exhaustive import MAX_TREES, all_plans

if TYPE_CHECKING:
    from reopt.costmodel.space import PlanSpace
    from reopt.plan import PlanNode


def state_tuples(space: PlanSpace, plan: PlanNode) -> float:
    """The plan's estimated state: window tuples plus kept join results."""
    return plan_estimates(space, plan, plan.cost)["state_tuples"]


def within_budget(space: PlanSpace, plan: PlanNode, max_state: float
                  ) -> tuple[PlanNode, str | None]:
    """``plan`` if its state fits in ``max_state`` tuples, else the cheapest plan that fits,
    else the least-state plan (cheapest among equals) and a one-line warning."""
    if state_tuples(space, plan) <= max_state:
        return plan, None
    if space.count_trees(limit=MAX_TREES) > MAX_TREES:
        raise ReoptError(f"--max-state: query {space.query.name} has more than {MAX_TREES:,} "
                         "plan trees to search for one within the budget")
    sized = [(state_tuples(space, p), p.cost, k, p) for k, p in enumerate(all_plans(space))]
    fits = [s for s in sized if s[0] <= max_state]
    if fits:
        return min(fits, key=lambda s: (s[1], s[2]))[3], None
    least = min(sized, key=lambda s: (s[0], s[1], s[2]))
    return least[3], (f"every plan keeps more than --max-state {max_state:g} state tuples; "
                      f"running the least-state plan ({least[0]:.6g} tuples)")
