"""A greedy plan for a query above the search-space budget (opt-in: ``over_budget="greedy"``).

Exact optimization takes time in proportion to the csg-cmp pairs, and a 30-relation star has
7.8 billion. Above the budget (``--max-pairs``) a query is refused, or — when asked — gets the
plan of **Greedy Operator Ordering** (GOO; Fegaras, *A New Heuristic for Optimizing Large
Queries*, DEXA 1998; DuckDB's join-order optimizer falls back to it above its limits):

1. *Join order.* Start with one sub-plan per relation; repeatedly join the two sub-plans,
   connected by a join predicate, whose result has the smallest estimated cardinality (the
   estimator every optimizer uses). Only when no two are connected (a disconnected join graph,
   whose sub-plans are then whole components) is the pair joined by a cross product, again the
   smallest. Ties go to the lowest pair of relation sets, so the tree is deterministic.
2. *Physical operators.* Bottom-up dynamic programming over the plan space **restricted to the
   greedy tree's splits**: each tree node is an expression of the space, its alternatives
   those :class:`~reopt.costmodel.space.PlanSpace` gives for that one split (both orders,
   every join method of the cost model), scans for leaves, sort enforcers, the final operator;
   each OR node keeps its cheapest plan per interesting property, as :mod:`.bottomup` does, so
   under ``io`` every child's property requirement is met by a costed plan.

The result is a valid plan of the query's space, so its cost is at least the exact optimum
(equal for two relations, where the join tree is forced). Nothing here enumerates the join
graph's csgs or pairs: the work is O(n²) estimates for n relations (:func:`greedy_tree`; a
disconnected graph's last rounds also estimate its cross products) plus the alternatives of
2n - 1 expressions.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from reopt.costmodel.joingraph import bits
from reopt.costmodel.space import ANY, Alt, PlanSpace
from reopt.optimizers.base import Result, without_gc
from reopt.plan import build_plan

Node = tuple[int, str]
Split = tuple[int, int] | None


class Settled:
    """A greedy DP's outcome under one space's statistics, kept on the space
    (:attr:`PlanSpace.greedy`) so that the same query under the next statistics settles again
    only what they can move (:class:`Greedy`'s ``before``). (A plain class: a NamedTuple's
    creation would add half to this module's import, which the first evaluation in a process
    pays.)"""

    __slots__ = ("splits", "best")

    def __init__(self, splits: dict[int, Split], best: dict[Node, tuple[float, Alt]]):
        self.splits = splits
        """Each expression of the greedy tree → its split (None for a leaf)."""
        self.best = best


def greedy_tree(space: PlanSpace) -> list[tuple[int, int]]:
    """GOO's joins in the order made: ``(left, right)`` relation sets, ``left < right``;
    the last one's union is every relation (empty for a one-relation query).

    Each round joins the pair of current sub-plans with the least key (cross product or
    not, estimated cardinality, the lower set, the higher). A pair's key does not change
    while both its sub-plans stay, so the connected pairs' keys live in a heap and a round
    estimates only the new sub-plan's connected pairs; a cross product is estimated only in
    a round without any connected pair (a disconnected graph's last joins). O(n²)
    estimates instead of O(n³) — the seed bound computes this tree on every evaluation —
    with the same joins in the same order."""
    card, neighbors = space.estimator.card, space.neighbors
    plans = [1 << i for i in range(space.query.n)]
    # (connectedness is symmetric: some relation of b is a neighbor of a, or not; each
    # relation's neighbors read once and its later neighbors picked off their bits: no pass
    # over all n² / 2 pairs of a sparse graph. A pair's key is built in place, lower set
    # first: a key function per pair cost a third of the tree.)
    heap = [(card(a | 1 << j), a, 1 << j)
            for a in plans for j in bits(neighbors(a) & ~(2 * a - 1))]  # (a < 1 << j)
    heapq.heapify(heap)
    alive = set(plans)
    joins: list[tuple[int, int]] = []
    pop, push = heapq.heappop, heapq.heappush
    while len(alive) > 1:
        while heap and not (heap[0][1] in alive and heap[0][2] in alive):
            pop(heap)  # a pair of a sub-plan joined since
        if heap:
            _, a, b = pop(heap)
        else:  # no two sub-plans connected: the least cross product
            ordered = sorted(alive)
            _, a, b = min((card(x | y), x, y) for i, x in enumerate(ordered)
                          for y in ordered[i + 1:])
        alive.discard(a)
        alive.discard(b)
        u = a | b
        near = neighbors(u)
        for p in alive:
            if near & p:
                push(heap, (card(u | p), u, p) if u < p else (card(u | p), p, u))
        alive.add(u)
        joins.append((a, b))
    return joins


class Greedy:
    """The restricted bottom-up DP over one greedy join tree.

    ``before``: the DP of the same query under earlier statistics and ``moved(expr)``, whether
    an expression's inputs moved since (:meth:`PlanSpace.changed_inputs`, a superset; no
    operator's cost factor may have changed). A node's best plan reads only the local costs of
    its expression's alternatives and its children's best plans, all within the expression, so
    an expression that did not move, settled over the same subtree, keeps its best plans bit
    for bit: only the moved part of the tree is settled again (on an update, about half)."""

    def __init__(self, space: PlanSpace,
                 before: tuple[Settled, Callable[[int], bool]] | None = None):
        self.space = space
        self.joins = greedy_tree(space)
        self.best: dict[Node, tuple[float, Alt]] = {}
        self.costed = 0
        self.before = before

    def settled(self) -> Settled:
        """What the next statistics' DP may carry over (``before``)."""
        splits: dict[int, Split] = {1 << i: None for i in range(self.space.query.n)}
        splits.update((a | b, (a, b)) for a, b in self.joins)
        return Settled(splits, self.best)

    def _carried(self, order: list[tuple[int, Split]]) -> set[int]:
        """The expressions of the tree (``order``: children first) whose best plans are
        taken from ``before``, entered in :attr:`best`: those that did not move, settled
        there over the same split, with both sides carried (so over the same subtree); none
        without ``before``. Taking them all before settling the others gives the same
        plans as taking them in turn: a node's settling reads only its children's, which
        come before it, and which expressions are taken depends on ``before`` alone. (One
        pass, not a method call per expression: the tree is settled on every update.)"""
        carried: set[int] = set()
        if self.before is None:
            return carried
        was, moved = self.before
        splits, was_best, best = was.splits, was.best, self.best
        props = self.space.interesting_props
        for expr, split in order:
            if splits.get(expr, 0) != split or moved(expr) or (
                    split is not None and not (split[0] in carried and split[1] in carried)):
                continue  # (0: no expression's split; a leaf's is None)
            for prop in props(expr):
                got = was_best.get((expr, prop))
                if got is not None:  # (a node settled without a plan stays without one)
                    best[(expr, prop)] = got
            carried.add(expr)
        return carried

    def alternatives(self, expr: int, prop: str, split: tuple[int, int] | None) -> list[Alt]:
        """The space's alternatives of OR node ``(expr, prop)`` that use only the greedy
        tree's split of ``expr`` (both orders) — what :meth:`PlanSpace.columns` would list
        for the node, minus the joins over other splits, without enumerating those."""
        space = self.space
        if expr == space.top:
            return space.final_alternatives(expr, prop)
        out = list(space.scan_alternatives(expr, prop)) if split is None else []
        out += space.enforcer_alternatives(expr, prop)
        if split is not None:
            a, b = split
            for method in space.model.join_methods:
                for left, right in ((a, b), (b, a)):
                    out += space.model.join_alternatives(space, expr, prop, left, right, method)
        return out

    def settle(self, expr: int, prop: str, split: tuple[int, int] | None) -> None:
        space, best = self.space, self.best
        winner: tuple[float, Alt] | None = None
        for alt in self.alternatives(expr, prop, split):
            self.costed += 1
            total = space.local_cost(alt)
            for child in alt.children:
                got = best.get(child)
                if got is None:
                    break
                total += got[0]
            else:
                if winner is None or total < winner[0]:
                    winner = (total, alt)
        if winner is not None:
            best[(expr, prop)] = winner

    @without_gc
    def optimize(self) -> Result:
        space = self._settle_tree()
        plan = build_plan(space, lambda node: self.best[node][1])
        return Result(plan.cost, plan, {"or_nodes": len(self.best), "and_nodes": self.costed})

    def cost(self) -> float:
        """The greedy plan's cost without building its tree: :meth:`settle` adds a plan's
        local cost and its children's costs in the order :func:`~reopt.plan.build_plan`
        does (``plan_cost``), so this is the same number as ``optimize().cost``, bit for
        bit."""
        return self.best[self._settle_tree().root][0]

    def _settle_tree(self) -> PlanSpace:
        """Settle every OR node of the greedy tree, children first; the space (raises when
        the root got no plan)."""
        space = self.space
        order: list[tuple[int, tuple[int, int] | None]] = [
            (1 << i, None) for i in range(space.query.n)]
        order += [(a | b, (a, b)) for a, b in self.joins]
        carried = self._carried(order)
        for expr, split in order:  # children before parents; 'any' before sort orders
            if expr not in carried:
                for prop in space.interesting_props(expr):
                    self.settle(expr, prop, split)
        if space.root[0] == space.top:
            self.settle(space.top, ANY, None)
        if space.root not in self.best:
            raise RuntimeError(f"query {space.query.name}: the greedy join tree has no plan")
        return space


def greedy(space: PlanSpace) -> Result:
    """The greedy plan of ``space``'s query (module doc)."""
    return Greedy(space).optimize()


@without_gc
def greedy_cost(space: PlanSpace) -> float:
    """The cost of :func:`greedy`'s plan, without its tree (the seed bound of every
    evaluation and update needs only the number). The DP is kept on the space
    (:attr:`PlanSpace.greedy`): the spaces of the same query under later statistics
    (:meth:`PlanSpace.with_adjustments`) settle again only what their deltas move — the same
    number, bit for bit."""
    if space.greedy is not None:  # (this space's own, computed before)
        return space.greedy.best[space.root][0]
    dp = Greedy(space, space.greedy_before())
    cost = dp.cost()
    space.greedy = dp.settled()
    return cost
