"""Exhaustive search: cost every plan tree on its own and keep the cheapest (or dearest).

The test oracle for small queries: it shares no memo and no pruning with the other
optimizers — each tree is costed from its leaves. It refuses a query whose number of plan
trees exceeds ``max_trees`` (default :data:`MAX_TREES`).
"""

from __future__ import annotations

from collections.abc import Iterator

from reopt.costmodel.errors import OptimizerError
from reopt.costmodel.space import Alt, PlanSpace, plan_cost
from reopt.optimizers.base import Result, without_gc
from reopt.plan import PlanNode, build_plan

MAX_TREES = 200_000
"""Largest number of plan trees exhaustive search agrees to enumerate."""

Tree = tuple[Alt, tuple["Tree", ...]]


def _trees(space: PlanSpace, group: tuple[int, str]) -> Iterator[tuple[float, Tree]]:
    for alt in space.alternatives(*group):
        local = space.local_cost(alt)
        kids = alt.children
        if not kids:
            yield plan_cost(local), (alt, ())
        elif len(kids) == 1:
            for c, t in _trees(space, kids[0]):
                yield plan_cost(local, c), (alt, (t,))
        else:
            for lc, lt in _trees(space, kids[0]):
                for rc, rt in _trees(space, kids[1]):
                    yield plan_cost(local, lc, rc), (alt, (lt, rt))


def tree_plan(space: PlanSpace, tree: Tree) -> PlanNode:
    """The plan of one enumerated tree."""
    chosen: dict[tuple[int, str], Alt] = {}
    stack = [tree]
    while stack:
        alt, kids = stack.pop()
        chosen[(alt.expr, alt.prop)] = alt
        stack += kids
    return build_plan(space, chosen)


def all_plans(space: PlanSpace) -> Iterator[PlanNode]:
    """Every plan tree of the space (join orders, shapes, operators), as plans: for
    objectives the optimizers do not minimize, checked by brute force."""
    for _, tree in _trees(space, space.root):
        yield tree_plan(space, tree)


@without_gc
def exhaustive(space: PlanSpace, objective: str = "min", max_trees: int = MAX_TREES) -> Result:
    count = space.count_trees(limit=max_trees)
    if count > max_trees:
        raise OptimizerError(
            f"exhaustive: query {space.query.name} has more than {max_trees:,} plan trees "
            f"under the {space.model.name} model; use topdown or bottomup"
        )
    better = (lambda a, b: a < b) if objective == "min" else (lambda a, b: a > b)
    best: tuple[float, Tree] | None = None
    n = 0
    for cost, tree in _trees(space, space.root):
        n += 1
        if best is None or better(cost, best[0]):
            best = (cost, tree)
    assert best is not None
    plan = tree_plan(space, best[1])
    # every tree is costed, so every OR and AND node of the space is explored (ratio 0)
    return Result(plan.cost, plan, {**space.size(), "trees": n})
