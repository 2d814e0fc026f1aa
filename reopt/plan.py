"""Plan trees: what every optimizer returns, printed as an indented tree or as JSON."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reopt.costmodel.space import ANY, Alt, PlanSpace, plan_cost


@dataclass
class PlanNode:
    alt: Alt
    relations: tuple[str, ...]
    rows: float
    local_cost: float
    cost: float
    children: list[PlanNode] = field(default_factory=list)

    @property
    def op(self) -> str:
        return self.alt.phy_op

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.alt.phy_op,
            "logical": self.alt.log_op,
            "relations": list(self.relations),
            "property": self.alt.prop,
            "rows": self.rows,
            "local_cost": self.local_cost,
            "cost": self.cost,
            "children": [c.to_json() for c in self.children],
        }

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(self.explain())}</pre>"

    def explain(self, indent: str = "") -> str:
        label = self.alt.phy_op
        if self.alt.log_op == "scan":
            label += f" {self.relations[0]}"
        elif self.alt.log_op == "join":
            label += f" {{{', '.join(self.relations)}}}"
        if self.alt.prop != ANY:
            label += f" [{self.alt.prop}]"
        lines = [f"{indent}{label}  rows={_num(self.rows)} cost={_num(self.cost)}"]
        for c in self.children:
            lines.append(c.explain(indent + "  "))
        return "\n".join(lines)


def _num(x: float) -> str:
    if not math.isfinite(x):  # never for a checked step; a tree printed for debugging may
        return str(x)
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x)}"
    return f"{x:.6g}" if abs(x) < 1e6 else f"{x:.4e}"


def build_plan(
    space: PlanSpace,
    choose: Callable[[tuple[int, str]], Alt] | Mapping[tuple[int, str], Alt],
    node: tuple[int, str] | None = None,
) -> PlanNode:
    """The plan tree rooted at ``node`` (default: the root) given the chosen alternative of
    every OR node; costs are recomputed with the shared cost functions."""
    pick = choose.__getitem__ if isinstance(choose, Mapping) else choose
    alt = pick(node or space.root)
    return _chosen_node(space, alt, [build_plan(space, pick, child) for child in alt.children])


def _chosen_node(space: PlanSpace, alt: Alt, children: list[PlanNode]) -> PlanNode:
    """The plan node of the chosen alternative ``alt`` over its ``children``' plans: its
    local cost computed again, the costs added as :func:`plan_cost` adds them."""
    local = space.local_cost(alt)
    return PlanNode(alt, space.relations(alt.expr), space.summary(alt.expr), local,
                    plan_cost(local, *(c.cost for c in children)), children)


def plan_of_winners(space: PlanSpace, winner: Callable[[tuple[int, str]], int],
                    node: tuple[int, str] | None = None) -> PlanNode:
    """:func:`build_plan` given the index of every OR node's winning alternative, as the
    procedural optimizers' memos hold it (:func:`_winner_node`)."""
    return _Winners(space, winner)(node or space.root)


class WinnersPlan:
    """A finished search's plan, made when called (what :meth:`Result.later
    <reopt.optimizers.base.Result.later>` takes): :func:`plan_of_winners` over a memo of
    ``(cost, index of the winning alternative)`` entries, as topdown's memo and bottomup's DP
    table hold them. A callable object, not a closure: picklable, and no reference cycle."""

    def __init__(self, space: PlanSpace, memo: Mapping[tuple[int, str], tuple[float, Any]]):
        self.space = space
        self.memo = memo

    def __call__(self) -> PlanNode:
        memo = self.memo
        return plan_of_winners(self.space, lambda g: memo[g][1])


class _Winners:
    """Makes the plan node of an OR node from its winner, its children recursively (a
    callable object, not a recursive closure: that is a reference cycle, which would keep
    the space and the memo alive until the cyclic collector runs)."""

    def __init__(self, space: PlanSpace, winner: Callable[[tuple[int, str]], int]):
        self.space = space
        self.winner = winner

    def __call__(self, node: tuple[int, str]) -> PlanNode:
        return _winner_node(self.space, node, self.winner(node), self)


def _winner_node(space: PlanSpace, node: tuple[int, str], i: int,
                 build: Callable[[tuple[int, str]], PlanNode]) -> PlanNode:
    """The plan node of OR node ``node`` whose winner is its alternative ``i``, its children
    made by ``build``: the alternative is built alone from the node's columns
    (:meth:`PlanSpace.alternative`), and its local cost read from the node's memoized local
    costs when the search computed them (the same bits as :meth:`PlanSpace.local_cost`,
    which answers otherwise); the costs added as :func:`plan_cost` adds them."""
    alt = space.alternative(node[0], node[1], i)
    local = space.chosen_local_cost(alt, i)
    if not alt.left:  # a scan: plan_cost(local) is local
        children, cost = [], local
    elif not alt.right:
        child = build((alt.left, alt.left_prop))
        children, cost = [child], plan_cost(local, child.cost)
    else:
        left = build((alt.left, alt.left_prop))
        right = build((alt.right, alt.right_prop))
        children, cost = [left, right], plan_cost(local, left.cost, right.cost)
    return PlanNode(alt, space.relations(alt.expr), space.summary(alt.expr), local, cost, children)


class PlanCache:
    """The nodes of the last plan an incremental optimizer built, by OR node, so that its next
    plan reuses every subtree a delta cannot have changed instead of building it again (the
    plan is a large part of a small query's update).

    A subtree is reused when its root OR node has the same winning alternative and its
    expression did not move since the last plan (:meth:`PlanSpace.changed_inputs`): every
    node below holds a subset of its relations, so none moved either; with no operator
    factor changed, their estimates, local costs and winners are the ones the last plan was
    built from (an incremental optimizer re-settles only moved nodes then). Results share
    such subtrees; plan trees are not modified after they are built."""

    def __init__(self) -> None:
        self.nodes: dict[tuple[int, str], tuple[int, PlanNode]] = {}
        self.space: PlanSpace | None = None
        """The space the cached plan was built on."""

    def build(self, space: PlanSpace, winner: Callable[[tuple[int, str]], int],
              unchanged: Callable[[int], bool] | None, since: PlanSpace | None = None
              ) -> PlanNode:
        """:func:`plan_of_winners`, reusing the last plan's subtrees whose expression is
        ``unchanged`` from ``since`` to ``space`` — only if the last plan was built on
        ``since`` (plans are made when first read, so the last one built may be older).
        ``unchanged`` None: nothing is reused, as after an operator's cost factor changed or
        without a last plan."""
        reuse = unchanged is not None and since is not None and self.space is since
        build = _Reusing(space, winner, self.nodes if reuse else {}, unchanged)
        root = build(space.root)
        self.nodes, self.space = build.new, space
        return root

    def build_chosen(self, space: PlanSpace, choose: Callable[[tuple[int, str]], Alt]
                     ) -> PlanNode:
        """:func:`build_plan` of the alternatives ``choose`` picks, taking the last plan
        built here's subtree at each node whose alternative is the one chosen now and whose
        expression did not move since (:meth:`_unmoved`), without choosing below it: the
        choice a declarative optimizer's plan read makes, the best plans of an OR node
        (BestPlan, the smallest), is exact, and the best plans of a node depend only on the
        estimates and local costs within its expression — which did not move, nor did the
        expressions below it, each a subset. What an update's plan read saves: on
        large-chain-18's one-delta steps, 20–34 of the plan's 35 nodes, each one's
        derivation of its best plans, estimate, local cost and node."""
        unchanged = self._unmoved(space)
        build = _ReusingChosen(space, choose, self.nodes if unchanged else {}, unchanged)
        root = build(space.root)
        self.nodes, self.space = build.new, space
        return root

    def _unmoved(self, space: PlanSpace) -> Callable[[int], bool] | None:
        """Whether an expression's estimates and local costs are the same in ``space`` as in
        the space the last plan was built on (:meth:`PlanSpace.changed_inputs`); None when
        nothing may be taken: no last plan, another query, catalog or model, an operator's
        cost factor changed, or a model whose alternatives may read children outside their
        expression (a node's cost could move while its expression did not)."""
        since = self.space
        if (since is None or since.query is not space.query or since.catalog is not space.catalog
                or since.model is not space.model or not space.model.children_within):
            return None
        moved, ops = space.changed_inputs(since)
        return None if ops else (lambda expr: not moved(expr))

    def __getstate__(self) -> dict[str, Any]:
        """Pickled empty: a cache (it would carry the last plan's space along)."""
        return {"nodes": {}, "space": None}


class _Reusing(_Winners):
    """:class:`_Winners` that takes a last plan's subtree where :class:`PlanCache` may, and
    records every node of the new plan (``new``)."""

    def __init__(self, space: PlanSpace, winner: Callable[[tuple[int, str]], Any],
                 old: dict[tuple[int, str], tuple[Any, PlanNode]],
                 unchanged: Callable[[int], bool] | None):
        super().__init__(space, winner)
        self.old = old
        self.unchanged = unchanged
        self.new: dict[tuple[int, str], tuple[Any, PlanNode]] = {}

    def __call__(self, node: tuple[int, str]) -> PlanNode:
        chosen = self.winner(node)
        out = self._taken(node, chosen)
        if out is None:
            out = self._made(node, chosen)
            self.new[node] = (chosen, out)
        return out

    def _made(self, node: tuple[int, str], i: Any) -> PlanNode:
        """The plan node of ``node`` with its winner ``i``, its children made by this."""
        return _winner_node(self.space, node, i, self)

    def _taken(self, node: tuple[int, str], chosen: Any) -> PlanNode | None:
        """The last plan's subtree at ``node``, every node of it recorded in ``new``, when
        :class:`PlanCache` may take it: ``node`` had the winner ``chosen`` then too and its
        expression is ``unchanged``; else None."""
        hit, old = self.old.get(node), self.old
        if hit is None or hit[0] != chosen or self.unchanged is None \
                or not self.unchanged(node[0]):
            return None
        todo = [hit[1]]  # (a stack, not walk()'s nested generators: a subtree may be most
        while todo:      # of the plan)
            below = todo.pop()
            key = (below.alt.expr, below.alt.prop)
            self.new[key] = old[key]
            todo += below.children
        return hit[1]


class _ReusingChosen(_Reusing):
    """:class:`_Reusing` whose ``winner`` gives an OR node's chosen alternative itself
    (:meth:`PlanCache.build_chosen`), not its index."""

    def _made(self, node: tuple[int, str], alt: Alt) -> PlanNode:
        return _chosen_node(self.space, alt, [self(child) for child in alt.children])
