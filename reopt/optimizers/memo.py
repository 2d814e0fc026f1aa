"""A memo of plan costs that survives statistics changes (the paper's Section 5.4).

Both incremental optimizers (:mod:`reopt.optimizers.incremental`) keep, for every OR node they
have explored, the record of *every* alternative — memoized subplans, not just the winner — so
that when a delta makes the best alternative dearer the next-best is already there:

* ``exact[alt]``: the alternative's plan cost, its local cost plus its children's best costs
  (every child has a plan).
* ``lower[alt]``: a lower bound on that cost, for an alternative branch-and-bound pruned (its
  local cost, or what it had spent when a child found no plan under the limit it was given).

and per OR node an entry like the top-down memo's: ``(cost, alt)`` for the exact winner, or
``(limit, None)``: no plan cheaper than ``limit`` (``inf``: no plan at all).

:meth:`IncrementalMemo.update` takes the :class:`PlanSpace` of the new statistics. The
and-or graph does not depend on statistics, only local costs do, and a local cost depends only
on its operator's factor and the estimated rows of the alternative's expression and children
(README, "Cost models"; scans also on their table's rows before filters). So the alternatives a
delta can change are found by comparing those few numbers between the old and the new space
(:meth:`PlanSpace.changed_inputs`, shared with the declarative optimizer's maintenance).
They are re-costed, and their OR nodes re-settled in rank order (children before parents, the
order of :meth:`PlanSpace.rank`). Lazy propagation: a node's parents hear of it only when its
entry's cost changed; a new winner of the same cost changes no parent's choice. A parent's
lower bound stays valid when a child got dearer, so only its exact records are re-costed then.
Re-settling searches (branch-and-bound, children with the remaining budget) only the pruned
alternatives whose lower bound is now under the node's best cost: the bound moves down to them.

Invariant between calls: every record is valid for the current space (an exact record equals
its local cost plus its children's current winners' costs, bit for bit, so the plan built from
the winners costs exactly what the root's entry says).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable

from reopt.costmodel.space import Alt, PlanSpace, plan_cost
from reopt.optimizers.base import Result
from reopt.optimizers.topdown import Entry, Group, memo_answer
from reopt.plan import build_plan


class IncrementalMemo:
    """The shared memo and update propagation; subclasses choose how to optimize first."""

    def __init__(self, space: PlanSpace):
        self.space = space
        self._reset()

    def _reset(self) -> None:
        self.memo: dict[Group, Entry] = {}
        self.alts: dict[Group, list[Alt]] = {}
        self.exact: dict[Alt, float] = {}
        self.lower: dict[Alt, float] = {}
        self._parents: dict[Group, list[Alt]] = {}
        self._by_expr: dict[int, list[Alt]] = {}
        self._by_op: dict[str, list[Alt]] = {}
        self.touched_or: set[Group] = set()
        """OR nodes the last optimize()/update() settled (for tests and metrics)."""
        self.touched_and: set[Alt] = set()
        """AND nodes it (re-)costed."""

    # -- to be provided ----------------------------------------------------------------------
    def _initial(self) -> None:
        raise NotImplementedError

    # -- public ------------------------------------------------------------------------------
    def optimize(self) -> Result:
        """Optimize from scratch under ``self.space`` (forgets any previous memo)."""
        self._reset()
        self._initial()
        return self._result(len(self.memo), len(self.touched_and))

    def update(self, space: PlanSpace) -> Result:
        """Re-optimize for ``space`` (same query, catalog and cost model, new statistics),
        touching only what the change can affect. ``explored`` counts the OR nodes settled and
        AND nodes costed by this update alone."""
        old = self.space
        if not self.memo:
            self.space = space
            return self.optimize()
        if space.query != old.query or space.model is not old.model or (
            space.catalog is not old.catalog
        ):
            raise ValueError("update() needs a space of the same query, catalog and cost model")
        self.space = space
        self.touched_or, self.touched_and = set(), set()
        moved, ops = space.changed_inputs(old)
        exprs = [e for e in self._by_expr if moved(e)]
        stale: dict[Group, set[Alt]] = {}
        for alts in [self._by_expr[e] for e in exprs] + [self._by_op.get(o, []) for o in ops]:
            for alt in alts:
                stale.setdefault((alt.expr, alt.prop), set()).add(alt)
        heap = [(space.rank(*g), g) for g in stale]
        heapq.heapify(heap)
        while heap:
            _, g = heapq.heappop(heap)
            alts = stale.pop(g, None)
            if alts is None:
                continue  # already settled (pushed twice)
            before = self.memo[g]
            after = self._resettle(g, alts, before)
            if after[0] == before[0] and (after[1] is None) == (before[1] is None):
                continue  # lazy: no parent's choice can change
            fell = after[0] < before[0]
            for p in self._parents.get(g, ()):
                # a lower bound stays valid when the child got dearer
                if fell or p in self.exact:
                    pg = (p.expr, p.prop)
                    if pg not in stale:
                        heapq.heappush(heap, (space.rank(*pg), pg))
                    stale.setdefault(pg, set()).add(p)
        return self._result(len(self.touched_or), len(self.touched_and))

    # -- records -----------------------------------------------------------------------------
    def _register(self, g: Group) -> None:
        """Index a newly explored OR node's alternatives by what their costs depend on."""
        alts = self.space.alternatives(*g)
        self.alts[g] = alts
        for alt in alts:
            for e in {alt.expr, alt.left, alt.right} - {0}:
                self._by_expr.setdefault(e, []).append(alt)
            self._by_op.setdefault(alt.phy_op, []).append(alt)
            for child in alt.children:
                self._parents.setdefault(child, []).append(alt)

    def _record(self, alt: Alt, value: float, exact: bool) -> float:
        if exact:
            self.exact[alt] = value
            self.lower.pop(alt, None)
        else:
            self.lower[alt] = value
            self.exact.pop(alt, None)
        return value

    def _recost(self, alt: Alt) -> None:
        """Re-cost an alternative from its children's current entries, without searching."""
        self.touched_and.add(alt)
        local = self.space.local_cost(alt)
        spent, costs = local, []
        for child in alt.children:
            hit = self.memo.get(child)
            if hit is None:  # never explored: its cost is at least 0
                self._record(alt, spent, exact=False)
                return
            if hit[1] is None:
                self._record(alt, spent + hit[0], exact=False)
                return
            costs.append(hit[0])
            spent = spent + hit[0]
        self._record(alt, plan_cost(local, *costs), exact=True)

    # -- search ------------------------------------------------------------------------------
    def _solve(self, g: Group, limit: float) -> float | None:
        """The best cost of ``g`` if it is below ``limit`` (the top-down request)."""
        done, cost = memo_answer(self.memo.get(g), limit)
        if done:
            return cost
        if g not in self.alts:
            self._register(g)
        best, alt = self._settle(g, self.alts[g], limit, None)
        return best if alt is not None else None

    def _evaluate(self, alt: Alt, bound: float) -> None:
        """Cost an alternative under ``bound``, optimizing its children with what remains."""
        self.touched_and.add(alt)
        local = self.space.local_cost(alt)
        if local >= bound:
            self._record(alt, local, exact=False)
            return
        spent, costs = local, []
        for child in alt.children:
            c = self._solve(child, bound - spent)
            if c is None:  # the child's entry holds its cost or the limit it has no plan under
                self._record(alt, spent + self.memo[child][0], exact=False)
                return
            costs.append(c)
            spent = spent + c
        self._record(alt, plan_cost(local, *costs), exact=True)

    def _settle(self, g: Group, candidates: Iterable[Alt], bound: float, best: Alt | None
                ) -> Entry:
        """The node's entry from ``best`` (costing ``bound``, or no plan under ``bound`` when
        None) and the records of ``candidates``: exact ones compete at once, pruned ones whose
        lower bound is under the current bound are searched."""
        self.touched_or.add(g)
        limit = bound
        pending = []
        for alt in candidates:
            t = self.exact.get(alt)
            if t is None:
                pending.append(alt)
            elif t < bound:
                bound, best = t, alt
        for alt in pending:
            lb = self.lower.get(alt)
            if lb is not None and lb >= bound:
                continue
            self._evaluate(alt, bound)
            t = self.exact.get(alt)
            if t is not None and t < bound:
                bound, best = t, alt
        entry = (bound, best) if best is not None else (limit, None)
        self.memo[g] = entry
        return entry

    def _resettle(self, g: Group, stale: set[Alt], before: Entry) -> Entry:
        """Settle ``g`` again after its ``stale`` alternatives' inputs changed. The other
        records lost to the old entry and still do, so unless the old winner got dearer only
        the stale alternatives compete with it."""
        for alt in stale:
            self._recost(alt)
        cost, winner = before
        if winner is None:
            return self._settle(g, stale, cost, None)
        if winner not in stale:
            return self._settle(g, stale, cost, winner)
        t = self.exact.get(winner)
        if t is not None and t <= cost:
            return self._settle(g, stale, t, winner)
        return self._settle(g, self.alts[g], math.inf, None)

    def _result(self, ors: int, ands: int) -> Result:
        root = self.space.root
        if self.memo.get(root, (0, None))[1] is None:  # pragma: no cover - every root has a plan
            raise RuntimeError("no plan found")
        plan = build_plan(self.space, lambda g: self.memo[g][1])
        return Result(self.memo[root][0], plan, {"or_nodes": ors, "and_nodes": ands})
