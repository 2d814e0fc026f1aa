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
from collections.abc import Iterable

from reopt.costmodel.space import Alt, PlanSpace
from reopt.optimizers.base import Result, without_gc
from reopt.plan import WinnersPlan

Group = tuple[int, str]
Entry = tuple[float, Alt | None]
"""A memo entry: ``(cost, alt)`` for the winner, ``(limit, None)`` for no plan under limit."""


def memo_answer(entry: tuple[float, object] | None, limit: float) -> tuple[bool, float | None]:
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
        # group -> (cost, i): the winner, alternative i of the group;
        # (limit, None): no plan cheaper than limit exists
        self.memo: dict[Group, tuple[float, int | None]] = {}
        self._ands = 0
        """Alternatives of the groups searched since :meth:`optimize` began, each group
        counted once (its first search: the memo has no entry for it before)."""

    @without_gc
    def optimize(self) -> Result:
        space = self.space
        self._ands = 0
        found = self._optimize(space.root, math.inf)
        if found is None:  # pragma: no cover - every root has a plan
            raise RuntimeError("no plan found")
        # every alternative of an opened group is costed (or pruned on its local cost)
        return self._result(len(self.memo), self.memo)

    def _result(self, ors: int, searched: Iterable[Group]) -> Result:
        """The root's plan from the memo's winners; ``and_nodes`` counts the alternatives
        of the ``searched`` groups."""
        space, memo = self.space, self.memo
        return self._with_plan(memo[space.root][0],
                               {"or_nodes": ors, "and_nodes": self._and_nodes(searched)})

    def _with_plan(self, cost: float, explored: dict[str, int]) -> Result:
        """The result, its plan made from the memo's winners when first read: a search
        from scratch is over, nothing writes its memo again (a winner is final)."""
        return Result.later(cost, WinnersPlan(self.space, self.memo), explored)

    def _and_nodes(self, searched: Iterable[Group]) -> int:
        """The alternatives of the ``searched`` groups (counted by the search when they are
        the memo's: every group in it was searched)."""
        if searched is self.memo:
            return self._ands
        space = self.space
        return sum(space.columns(*g).count for g in searched)

    def _optimize(self, group: Group, limit: float) -> float | None:
        """The best cost of ``group`` if it is below ``limit``, else None."""
        entry = self.memo.get(group)
        if entry is None:  # never explored (memo_answer's first case, without the call)
            return self._search(group, limit)
        done, cost = memo_answer(entry, limit)
        if done:
            return cost
        # re-opened: an earlier request found no plan under a tighter limit. Search it
        # without a limit this time, so no group is searched more than twice; the winner
        # is exact, and the caller still gets None if it is above its limit
        cost = self._search(group, math.inf)
        return cost if cost is not None and cost < limit else None

    def _search(self, group: Group, limit: float) -> float | None:
        """Search the group's alternatives for a plan cheaper than ``limit``; memoize."""
        space = self.space
        memo_get = self.memo.get
        bound, best = limit, None
        costs = space._node_local.get(group)  # (costed's first case, without the call)
        if costs is None:
            cols, costs = space.costed(*group)
        else:
            cols = space._cols[group]
        if group not in self.memo:
            self._ands += len(costs)
        for i, (left, lprop, right, rprop, local) in enumerate(zip(
                cols.left, cols.left_prop, cols.right, cols.right_prop, costs, strict=True)):
            if local >= bound:
                continue
            if not left:  # a scan
                total = local
            else:
                # a child's memo entry answers without a call unless the child was never
                # explored (searched at once: _optimize's first case) or only knows it has
                # no plan under a tighter limit (memo_answer)
                budget = bound - local
                entry = memo_get((left, lprop))
                if entry is None:
                    lc = self._search((left, lprop), budget)
                elif entry[1] is None and entry[0] < budget:
                    lc = self._optimize((left, lprop), budget)
                else:
                    lc = entry[0] if entry[1] is not None and entry[0] < budget else None
                if lc is None:
                    continue
                if not right:  # a unary operator
                    total = local + lc  # plan_cost, inlined
                else:
                    budget = bound - (local + lc)
                    entry = memo_get((right, rprop))
                    if entry is None:
                        rc = self._search((right, rprop), budget)
                    elif entry[1] is None and entry[0] < budget:
                        rc = self._optimize((right, rprop), budget)
                    else:
                        rc = entry[0] if entry[1] is not None and entry[0] < budget else None
                    if rc is None:
                        continue
                    total = local + lc + rc  # plan_cost, inlined: same additions
            if total < bound:
                bound, best = total, i
        if best is None:
            self.memo[group] = (limit, None)
            return None
        self.memo[group] = (bound, best)
        return bound


def topdown(space: PlanSpace) -> Result:
    return TopDown(space).optimize()
