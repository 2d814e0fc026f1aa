"""Bottom-up (System R style) dynamic programming over the connected sub-expressions.

Expressions are visited smallest first (the join graph's csgs, enumerated in proportion to the
csg-cmp pairs: :mod:`reopt.costmodel.joingraph`); for each, the best plan is kept per
interesting property (``any``, every sort order a parent merge join could ask for, index probes
for base tables), ``any`` first because a sort enforcer builds on it. Every alternative's
children are then already in the table.
"""

from __future__ import annotations

from reopt.costmodel.space import PlanSpace
from reopt.optimizers.base import Result, without_gc
from reopt.plan import WinnersPlan

Group = tuple[int, str]


class BottomUp:
    """The DP table and how one entry is computed."""

    def __init__(self, space: PlanSpace):
        self.space = space
        self.best: dict[Group, tuple[float, int]] = {}
        """OR node → (best cost, index of its winning alternative); nodes without a plan are
        absent."""
        self.costed = 0
        """Alternatives whose cost the search computed (or found a child without a plan)."""

    @without_gc
    def optimize(self) -> Result:
        for group in self.space.groups():
            self.settle(group)
        return self.result(len(self.best), self.costed)

    def settle(self, group: Group) -> None:
        """Compute the group's entry from its children's (all ranked lower, so settled)."""
        space, best_get = self.space, self.best.get
        costs = space._node_local.get(group)  # (costed's first case, without the call)
        if costs is None:
            cols, costs = space.costed(*group)
        else:
            cols = space._cols[group]
        self.costed += len(costs)
        winner: tuple[float, int] | None = None
        for i, (left, lprop, right, rprop, local) in enumerate(zip(
                cols.left, cols.left_prop, cols.right, cols.right_prop, costs, strict=True)):
            if not left:  # a scan
                total = local
            else:
                lw = best_get((left, lprop))
                if lw is None:
                    continue
                if not right:  # a unary operator
                    total = local + lw[0]  # plan_cost, inlined
                else:
                    rw = best_get((right, rprop))
                    if rw is None:
                        continue
                    total = local + lw[0] + rw[0]  # plan_cost, inlined: same additions
            if winner is None or total < winner[0]:
                winner = (total, i)
        if winner is not None:
            self.best[group] = winner

    def result(self, ors: int, ands: int) -> Result:
        """The result, its plan made from the table's winners when first read; its cost is
        the root's entry, the very additions the plan's node costs repeat
        (:func:`~reopt.costmodel.space.plan_cost`, children first), so the plan's cost is
        that one, bit for bit."""
        space, best = self.space, self.best
        if space.root not in best:  # pragma: no cover
            raise RuntimeError("no plan found")
        return Result.later(best[space.root][0], WinnersPlan(space, best),
                            {"or_nodes": ors, "and_nodes": ands})


def bottomup(space: PlanSpace) -> Result:
    return BottomUp(space).optimize()
