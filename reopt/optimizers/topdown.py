"""Top-down (Volcano/Cascades style) optimizer with branch-and-bound.

Goal-driven: optimizing an (expression, required property) group explores its alternatives,
optimizing each child group with an upper bound — what remains of the parent's budget after
the local cost and the siblings already costed. The memo records, per group, either the
winner (exact: everything pruned was at least as expensive) or the largest bound under which
no plan was found, so a later request with a looser bound re-opens the group and a tighter
one is answered at once.
"""

from __future__ import annotations

import math

from reopt.costmodel.space import Alt, PlanSpace, plan_cost
from reopt.optimizers.base import Result
from reopt.plan import build_plan

Group = tuple[int, str]
Entry = tuple[float, Alt | None]
"""A memo entry: ``(cost, alt)`` for the winner, ``(limit, None)`` for no plan under limit."""


def memo_answer(entry: Entry | None, limit: float) -> tuple[bool, float | None]:
    """What a memo entry says to a request for a plan cheaper than ``limit``: ``(True, cost)``,
    ``(True, None)`` (no such plan) or ``(False, None)`` — the group must be (re)opened: it
    was never explored, or it only knows there is no plan under a tighter limit."""
    if entry is None:
        return False, None
    cost, alt = entry
    if alt is not None:
        return True, cost if cost < limit else None
    return cost >= limit, None


class TopDown:
    def __init__(self, space: PlanSpace):
        self.space = space
        # group -> (cost, alt); alt None means "no plan cheaper than cost exists"
        self.memo: dict[Group, Entry] = {}
        self.costed: set[Alt] = set()

    def optimize(self) -> Result:
        root = self.space.root
        found = self._optimize(root, math.inf)
        if found is None:  # pragma: no cover - every root has a plan
            raise RuntimeError("no plan found")
        plan = build_plan(self.space, lambda g: self.memo[g][1])
        return Result(
            plan.cost, plan, {"or_nodes": len(self.memo), "and_nodes": len(self.costed)}
        )

    def _optimize(self, group: Group, limit: float) -> float | None:
        done, cost = memo_answer(self.memo.get(group), limit)
        if done:
            return cost
        space = self.space
        bound, best = limit, None
        for alt in space.alternatives(*group):
            self.costed.add(alt)
            local = space.local_cost(alt)
            if local >= bound:
                continue
            child_costs: list[float] = []
            spent = local
            for child in alt.children:
                c = self._optimize(child, bound - spent)
                if c is None:
                    break
                child_costs.append(c)
                spent = spent + c
            else:
                total = plan_cost(local, *child_costs)
                if total < bound:
                    bound, best = total, alt
        if best is None:
            self.memo[group] = (limit, None)
            return None
        self.memo[group] = (bound, best)
        return bound


def topdown(space: PlanSpace) -> Result:
    return TopDown(space).optimize()
