"""The three reference optimizers agree, and the search space has the known size.

Oracles: exhaustive enumeration (each plan tree costed on its own) for small spaces, closed-form
csg-cmp-pair counts for the size of the join space, and an independent C_out computation.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from randq import SHAPES, make_query, queries, random_deltas, shape_edges

from reopt.api import Optimizer
from reopt.costmodel.cardinality import Adjustments
from reopt.costmodel.deltas import apply_deltas, parse_deltas
from reopt.costmodel.models import cost_model
from reopt.costmodel.query import ColumnRef, JoinPredicate, Query, Relation
from reopt.costmodel.space import PlanSpace
from reopt.optimizers.bottomup import bottomup
from reopt.optimizers.exhaustive import exhaustive
from reopt.optimizers.topdown import topdown

EXHAUSTIVE_LIMIT = 20_000


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def check_plan_shape(space: PlanSpace, plan) -> None:
    """A plan covers every relation once and each node's children are its sub-expressions."""
    assert sorted(plan.relations) == sorted(space.query.aliases)
    for node in plan.walk():
        alt = node.alt
        if alt.log_op == "join":
            left, right = node.children
            assert set(left.relations).isdisjoint(right.relations)
            assert set(left.relations) | set(right.relations) == set(node.relations)
        if alt.log_op == "scan":
            assert len(node.relations) == 1 and not node.children
        if alt.prop.startswith("sort:") and alt.log_op == "join":
            assert alt.phy_op == "sortmerge"


def agree(space: PlanSpace) -> float:
    td, bu = topdown(space), bottomup(space)
    assert close(td.cost, bu.cost), (td.cost, bu.cost)
    for r in (td, bu):
        check_plan_shape(space, r.plan)
        assert close(r.plan.cost, r.cost)
    if space.count_trees(limit=EXHAUSTIVE_LIMIT) <= EXHAUSTIVE_LIMIT:
        ex = exhaustive(space, max_trees=EXHAUSTIVE_LIMIT)
        assert close(ex.cost, td.cost), (ex.cost, td.cost)
        worst = exhaustive(space, "max", max_trees=EXHAUSTIVE_LIMIT)
        assert worst.cost >= ex.cost
    return td.cost


@pytest.mark.parametrize("model", ["cout", "io"])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 7))
def test_optimizers_agree_on_random_queries(model, qc):
    q, cat = qc
    agree(PlanSpace(q, cat, cost_model(model)))


@pytest.mark.parametrize("model", ["cout", "io"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 5), seed=st.integers(0, 2**31), steps=st.integers(1, 6))
def test_optimizers_agree_after_random_deltas(model, qc, seed, steps):
    q, cat = qc
    m = cost_model(model)
    rng = random.Random(seed)
    adj = Adjustments()
    for text in random_deltas(q, rng, steps, m.operators):
        adj = apply_deltas(parse_deltas(text), q, cat, adj, m.operators)
        agree(PlanSpace(q, cat, m, adj))


def test_exhaustive_oracle_is_independent_on_small_query():
    """Exhaustive really costs each tree: the number it visits equals the tree count."""
    q, cat = make_query("chain", 4, 1, final=False)
    space = PlanSpace(q, cat, cost_model("cout"))
    # chain of 4 under C_out (symmetric: one order per join): the unordered bushy trees over
    # a chain of 4 without cross products = Catalan(3) = 5
    assert space.count_trees() == 5
    assert exhaustive(space).explored["trees"] == 5


def test_exhaustive_explores_the_whole_space():
    """Costing every tree touches every OR and AND node: pruning ratio 0 (the CLI reported
    1.0, "all pruned", when exhaustive counted only trees)."""
    opt = Optimizer("tpch:q3", optimizer="exhaustive")
    m = opt.optimize().metrics
    full = m["search_space"]
    assert {k: m["explored"][k] for k in full} == full == opt.space().size()
    assert m["pruning_ratio"] == {"or": 0.0, "and": 0.0}


def independent_cout(q: Query, cat, plan) -> float:
    """C_out of a plan tree from first principles (no PlanSpace, no Estimator)."""

    def card(aliases) -> float:
        c = 1.0
        for a in aliases:
            c *= cat.tables[q.table_of(a)].rows
        cross = c
        for p in q.joins:
            if p.left.alias in aliases and p.right.alias in aliases:
                dl = cat.tables[q.table_of(p.left.alias)].columns[p.left.column].distinct
                dr = cat.tables[q.table_of(p.right.alias)].columns[p.right.column].distinct
                c /= max(dl, dr)
        return min(max(c, 1.0), cross)  # README: estimates within [1 row, cross product]

    def cost(node) -> float:
        if not node.children:
            return 0.0
        return card(node.relations) + sum(cost(c) for c in node.children)

    return cost(plan)


@settings(max_examples=60, deadline=None)
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 6), seed=st.integers(0, 2**31))
def test_cout_cost_matches_first_principles(shape, n, seed):
    q, cat = make_query(shape, n, seed, final=False)
    q = Query(q.name, q.relations, (), q.joins)  # no filters: card = rows × Π 1/max(d)
    r = topdown(PlanSpace(q, cat, cost_model("cout")))
    assert math.isclose(r.cost, independent_cout(q, cat, r.plan), rel_tol=1e-9)


# --- the size of the join space: csg-cmp-pair counts ------------------------------------------

CCP = {
    "chain": lambda n: (n**3 - n) // 6,
    "cycle": lambda n: (n**3 - 2 * n**2 + n) // 2,
    "star": lambda n: (n - 1) * 2 ** (n - 2),
    "clique": lambda n: (3**n - 2 ** (n + 1) + 1) // 2,
}


def plain_query(shape: str, n: int) -> tuple[Query, object]:
    from reopt.costmodel.catalog import Catalog

    tables = {f"t{i}": {"rows": 1000, "columns": {"a": {"distinct": 10}}} for i in range(n)}
    joins = tuple(
        JoinPredicate.of(ColumnRef(f"r{a}", "a"), ColumnRef(f"r{b}", "a"))
        for a, b in shape_edges(shape, n)
    )
    rels = tuple(Relation(f"r{i}", f"t{i}") for i in range(n))
    return Query(f"{shape}{n}", rels, (), joins), Catalog.from_dict({"tables": tables})


@pytest.mark.parametrize("shape", sorted(CCP))
@pytest.mark.parametrize("n", range(3, 11))
def test_join_alternatives_equal_csg_cmp_pairs(shape, n):
    q, cat = plain_query(shape, n)
    space = PlanSpace(q, cat, cost_model("cout"))
    joins = sum(
        1 for node in space.or_nodes() for alt in space.alternatives(*node) if alt.log_op == "join"
    )
    assert joins == CCP[shape](n)  # C_out is symmetric: one join alternative per pair
    size = space.size()
    assert size["and_nodes"] == CCP[shape](n) + n  # plus one scan per relation


def test_disconnected_query_uses_cross_products_only_between_components():
    q, cat = plain_query("chain", 4)
    # drop the middle edge: components {r0,r1} and {r2,r3}
    q = Query(q.name, q.relations, (), (q.joins[0], q.joins[2]))
    space = PlanSpace(q, cat, cost_model("io"))
    exprs = set(space.expressions())
    assert exprs == {0b1, 0b10, 0b100, 0b1000, 0b11, 0b1100, 0b1111}
    assert space.splits(0b1111) == [(0b11, 0b1100), (0b1100, 0b11)]
    r = topdown(space)
    root_join = r.plan
    assert root_join.alt.phy_op == "blocknl"  # the only io join without a predicate
    assert close(r.cost, bottomup(space).cost)


@pytest.mark.parametrize("model", ["cout", "io"])
def test_an_optimization_leaves_no_reference_cycles(model):
    """An optimization's space, memo and plan are freed by reference counting as soon as the
    caller drops them: no reference cycle (a recursive closure building the plan was one)
    keeps them for the cyclic collector, whose run a small query's optimization then pays."""
    import gc

    from reopt.optimizers.incremental import BottomUpInc, TopDownInc

    q, cat = make_query("star", 6, 3, final=model == "io")
    m = cost_model(model)
    runs = [lambda: topdown(PlanSpace(q, cat, m)), lambda: bottomup(PlanSpace(q, cat, m)),
            lambda: TopDownInc(PlanSpace(q, cat, m)).optimize(),
            lambda: BottomUpInc(PlanSpace(q, cat, m)).optimize()]
    was = gc.isenabled()
    gc.collect()
    gc.freeze()  # what exists now is not the runs' garbage: collections scan only theirs
    gc.disable()
    try:
        for run in runs:
            run()  # a result whose plan is never read (made when first read)
            assert gc.collect() == 0, run
            assert run().plan.cost > 0
            assert gc.collect() == 0, run
    finally:
        gc.unfreeze()
        if was:
            gc.enable()


def _in_generation(obj: object, generation: int) -> bool:
    import gc

    return any(o is obj for o in gc.get_objects(generation))


def test_a_promoting_pause_moves_its_survivors_to_the_oldest_generation():
    """What a promoting pause leaves alive is in the oldest generation at its end (no young
    collection will scan it), the collector enabled again; a nested pause promotes nothing
    (the outer one's end does)."""
    import gc

    from reopt.optimizers.base import paused_gc

    assert gc.isenabled() and gc.get_freeze_count() == 0
    thresholds = gc.get_threshold()
    gc.set_threshold(10**9)  # enabled, but no automatic collection moves the objects here
    try:
        with paused_gc(promote=True):
            with paused_gc(promote=True):
                inner = [[]]
            assert _in_generation(inner, 0)
            state = [[]]
            assert _in_generation(state, 0)
        assert gc.isenabled()
        assert _in_generation(state, 2) and _in_generation(inner, 2)
        with paused_gc():
            young = [[]]
        assert _in_generation(young, 0)
    finally:
        gc.set_threshold(*thresholds)


def test_a_promoting_pause_leaves_a_callers_frozen_objects_frozen():
    """``unfreeze`` would thaw everything frozen: with a caller's ``gc.freeze()`` in force the
    pause promotes nothing, and what the caller froze stays out of every generation. (The
    frozen count may drop meanwhile — frozen objects that die, say in another thread of the
    test process such as Spark's py4j threads — but never grow, as a promotion would, and
    never fall to none, as a thaw would.)"""
    import gc

    from reopt.optimizers.base import paused_gc

    frozen = [[]]
    gc.freeze()
    try:
        count = gc.get_freeze_count()
        with paused_gc(promote=True):
            young = [[]]
        assert 0 < gc.get_freeze_count() <= count
        assert not any(_in_generation(frozen, g) for g in range(3))
        assert _in_generation(young, 0)
    finally:
        gc.unfreeze()


def test_a_freezing_pause_collects_the_young_cycles_then_freezes_the_survivors():
    """A fleet worker's policy (``reopt.fleet._query_gc``): with ``collect_young`` and
    ``freeze``, the cyclic garbage the work made is freed first (it would otherwise stay
    frozen for good), then what survives is frozen — out of every generation, never scanned
    again — and the collector is enabled again."""
    import gc
    import weakref

    from reopt.optimizers.base import paused_gc

    class Node:
        pass

    assert gc.isenabled() and gc.get_freeze_count() == 0
    try:
        with paused_gc(collect_young=True, freeze=True):
            cycle = Node()
            cycle.me = cycle
            dead = weakref.ref(cycle)
            del cycle
            kept = [[]]
            assert dead() is not None  # nothing is collected during the pause
        assert gc.isenabled()
        assert dead() is None
        assert gc.get_freeze_count() > 0
        assert not any(_in_generation(kept, g) for g in range(3))
    finally:
        gc.unfreeze()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 7), model=st.sampled_from(["cout", "io", "dist"]),
       seed=st.integers(0, 2**31))
def test_a_space_costed_in_bulk_is_the_space_costed_node_by_node(qc, model, seed):
    """A space from scratch costs every node at once before its first node's local costs
    (PlanSpace.costed: the model's costed_nodes, cout's one pass over the splits, and the csgs'
    estimates in one pass): every node's columns and local costs are those a space asked node
    by node gives (a derived space, which never costs in bulk), bit for bit — on any graph
    (disconnected ones too), under card, sel, cost and observation deltas."""
    q, cat = qc
    m = cost_model(model)
    texts = random_deltas(q, random.Random(seed), 3, m.operators, observe=True)
    adj = apply_deltas(parse_deltas(texts), q, cat, Adjustments(), m.operators)
    bulk = PlanSpace(q, cat, m, adj)
    one_by_one = PlanSpace(q, cat, m).with_adjustments(adj)  # (derived: node by node)
    for group in bulk.groups():
        cols, costs = bulk.costed(*group)
        assert cols == one_by_one.columns(*group), group
        assert costs == one_by_one.local_costs(*group), group
