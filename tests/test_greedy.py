"""The opt-in greedy plan above the search-space budget (issue 22): greedy operator ordering,
then the cheapest physical operators on that join tree (reopt/optimizers/greedy.py)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reopt.api import Optimizer, load_query
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.deltas import apply_deltas, parse_deltas
from reopt.costmodel.errors import ReoptError
from reopt.costmodel.models import cost_model
from reopt.costmodel.space import PlanSpace
from reopt.optimizers.bottomup import bottomup
from reopt.optimizers.greedy import greedy, greedy_cost, greedy_tree
from reopt.plan import PlanNode
from tests.clirun import run
from tests.randq import make_query, queries, random_deltas


def _check_valid(space: PlanSpace, plan: PlanNode) -> None:
    """A plan of the query: every relation scanned once, each join's children partition its
    relations, each unary operator's child has its relations, every cost is its local cost
    plus its children's."""
    leaves = [n.relations[0] for n in plan.walk() if n.alt.log_op == "scan"]
    assert sorted(leaves) == sorted(space.query.aliases)
    for n in plan.walk():
        assert n.cost == pytest.approx(n.local_cost + sum(c.cost for c in n.children),
                                       rel=1e-12)
        if n.alt.log_op == "scan":
            assert len(n.relations) == 1 and not n.children
        elif n.alt.log_op == "join":
            left, right = (set(c.relations) for c in n.children)
            assert left and right and not left & right
            assert left | right == set(n.relations)
        else:  # sort enforcer, final group-by / order-by
            assert [set(c.relations) for c in n.children] == [set(n.relations)]
    assert set(plan.relations) == set(space.query.aliases)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(q=queries(min_n=2, max_n=7), model=st.sampled_from(["io", "cout"]))
def test_greedy_plan_is_valid_and_never_beats_the_optimum(q, model):
    query, catalog = q
    space = PlanSpace(query, catalog, cost_model(model))
    got = greedy(space)
    _check_valid(space, got.plan)
    exact = bottomup(PlanSpace(query, catalog, cost_model(model))).cost
    assert got.cost >= exact
    if query.n == 2:  # one join tree (up to order), so greedy searches all of the space
        assert got.cost == exact


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(q=queries(min_n=2, max_n=7), model=st.sampled_from(["io", "cout", "dist"]))
def test_greedy_cost_is_the_greedy_plans_cost_bit_for_bit(q, model):
    # the seed bound reads greedy_cost (no tree); the oracle sums the built tree's costs
    # node by node in plan_cost's order, on a space of its own (no shared memo)
    query, catalog = q
    plan = greedy(PlanSpace(query, catalog, cost_model(model))).plan

    def summed(node: PlanNode) -> float:
        total = node.local_cost
        for child in node.children:
            total = total + summed(child)
        return total

    assert greedy_cost(PlanSpace(query, catalog, cost_model(model))) == summed(plan)


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(q=queries(min_n=2, max_n=7), model=st.sampled_from(["io", "cout", "dist"]),
       seed=st.integers(0, 2**31))
def test_greedy_cost_after_deltas_equals_a_fresh_spaces(q, model, seed):
    # an update's space carries the DP of the space it was derived from over what its deltas
    # did not move; the oracle: a fresh space under the same statistics, settled whole
    query, catalog = q
    m = cost_model(model)
    rng = random.Random(seed)
    space = PlanSpace(query, catalog, m)
    greedy_cost(space)
    for _ in range(4):
        batch = random_deltas(query, rng, rng.randint(1, 2), m.operators, observe=True)
        adj = apply_deltas([d for t in batch for d in parse_deltas(t)], query, catalog,
                           space.adjustments, m.operators)
        space = space.with_adjustments(adj)
        assert greedy_cost(space) == greedy_cost(PlanSpace(query, catalog, m, adj)), batch


def test_greedy_cost_after_a_delta_settles_only_what_moved():
    """a-b-c (the order by hand below: b⋈c, then a): ``card a *2`` moves a and abc, not b, c
    or bc, whose best plans are carried over; the cost equals a fresh space's."""
    catalog = Catalog.from_dict({"tables": {
        "a": {"rows": 1000, "columns": {"x": {"distinct": 1000}}},
        "b": {"rows": 100, "columns": {"x": {"distinct": 100}, "y": {"distinct": 10}}},
        "c": {"rows": 5, "columns": {"y": {"distinct": 5}}},
    }})
    query = load_query("SELECT a.x FROM a, b, c WHERE a.x = b.x AND b.y = c.y", catalog)
    m = cost_model("io")
    space = PlanSpace(query, catalog, m)
    greedy_cost(space)
    before = space.greedy.best
    adj = apply_deltas(parse_deltas("card a *2"), query, catalog, space.adjustments,
                       m.operators)
    new = space.with_adjustments(adj)
    assert greedy_cost(new) == greedy_cost(PlanSpace(query, catalog, m, adj))
    bit = query.bit
    kept = {node for node, got in new.greedy.best.items() if before.get(node) is got}
    assert {e for e, _ in kept} == {bit("b"), bit("c"), bit("b") | bit("c")}


def _check_greedy_order(space: PlanSpace) -> None:
    """Brute force over the current sub-plans at every join: the pair GOO joins is connected
    when any pair is, no pair of that kind has a smaller estimate, and among equal estimates
    it is the lowest pair of relation sets (the module's tie rule)."""
    card = space.estimator.card
    plans = {1 << i for i in range(space.query.n)}
    for a, b in greedy_tree(space):
        assert a in plans and b in plans and a != b
        pairs = [(x, y) for x in plans for y in plans if x < y]
        linked = [(x, y) for x, y in pairs if space.crossing(x, y)]
        assert bool(space.crossing(a, b)) == bool(linked)
        assert card(a | b) == min(card(x | y) for x, y in (linked or pairs))
        assert (a, b) == min((x, y) for x, y in (linked or pairs) if card(x | y) == card(a | b))
        plans = (plans - {a, b}) | {a | b}
    assert plans == {space.all}


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(q=queries(min_n=2, max_n=10))
def test_greedy_joins_connected_sub_plans_and_the_smallest_first(q):
    query, catalog = q
    _check_greedy_order(PlanSpace(query, catalog, cost_model("cout")))


def test_greedy_cross_products_of_several_components_smallest_first():
    """Four components (a-b, c, d, e): after a-b, only cross products are left, three
    sub-plans and more to choose from — the smallest estimate first (|c|·|d| = 6 before
    any product with ab's 100 rows or e's 50)."""
    catalog = Catalog.from_dict({"tables": {
        "a": {"rows": 1000, "columns": {"x": {"distinct": 1000}}},
        "b": {"rows": 100, "columns": {"x": {"distinct": 100}}},
        "c": {"rows": 2, "columns": {"y": {"distinct": 2}}},
        "d": {"rows": 3, "columns": {"z": {"distinct": 3}}},
        "e": {"rows": 50, "columns": {"w": {"distinct": 50}}},
    }})
    query = load_query("SELECT a.x FROM a, b, c, d, e WHERE a.x = b.x", catalog)
    space = PlanSpace(query, catalog, cost_model("cout"))
    _check_greedy_order(space)
    bit = query.bit
    assert greedy_tree(space)[:2] == [(bit("a"), bit("b")), (bit("c"), bit("d"))]


def test_greedy_order_by_hand():
    """a-b-c, |a| = 1000, |b| = 100, |c| = 5: card(ab) = 1000·100/1000 = 100 and card(bc) =
    100·5/max(10, 5) = 50, so b and c are joined first, then a; card(abc) = 1000·100·5 ·
    1/1000 · 1/10 = 50."""
    catalog = Catalog.from_dict({"tables": {
        "a": {"rows": 1000, "columns": {"x": {"distinct": 1000}}},
        "b": {"rows": 100, "columns": {"x": {"distinct": 100}, "y": {"distinct": 10}}},
        "c": {"rows": 5, "columns": {"y": {"distinct": 5}}},
    }})
    query = load_query("SELECT a.x FROM a, b, c WHERE a.x = b.x AND b.y = c.y", catalog)
    space = PlanSpace(query, catalog, cost_model("cout"))
    b, c = query.bit("b"), query.bit("c")
    assert greedy_tree(space) == [(b, c), (query.bit("a"), b | c)]
    assert greedy(space).cost == 50 + 50  # C_out: the two joins' rows


def test_over_budget_star_of_30_gets_a_greedy_plan_quickly():
    """7.8 billion pairs: refused by default, planned greedily on request (the enumeration
    stops at the budget without listing the hub's 2^29 neighbour sets)."""
    query, catalog = make_query("star", 30, 1, final=True)
    with pytest.raises(ReoptError, match="more than 1,000,000 csg-cmp pairs"):
        Optimizer(query, catalog, optimizer="topdown").optimize()
    for optimizer in ("declarative", "topdown", "bottomup-inc"):
        o = Optimizer(query, catalog, optimizer=optimizer, engine="python",
                      over_budget="greedy")
        step = o.optimize()
        assert not step.exact and "--max-pairs 1000000" in step.reason
        space = o.space()
        _check_valid(space, step.plan)
        again = o.update("card r0 *2")
        assert not again.exact and again.cost != step.cost
        assert again.cost == greedy(o.space()).cost
    with pytest.raises(ReoptError, match="planned greedily"):
        o = Optimizer(query, catalog, engine="python", over_budget="greedy")
        o.optimize()
        o.relations()


def test_over_budget_choice_is_checked():
    with pytest.raises(ReoptError, match="unknown over_budget choice 'maybe'"):
        Optimizer("tpch:q3", engine="python", over_budget="maybe")


def test_cli_greedy_is_flagged_in_json_and_text(capsys):
    """Q5 has 68 pairs: with --max-pairs 10 it is over budget."""
    code, out, err = run(capsys, "optimize", "tpch:q5", "--engine", "python", "--json")
    exact = json.loads(out)["queries"][0]["initial"]
    code, out, err = run(capsys, "optimize", "tpch:q5", "--engine", "python", "--json",
                         "--max-pairs", "10", "--over-budget", "greedy",
                         "--delta", "card orders *4")
    assert code == 0, err
    doc = json.loads(out)["queries"][0]
    got = doc["initial"]
    assert exact["exact"] is True and "reason" not in exact
    assert got["exact"] is False and "more than 10 csg-cmp pairs" in got["reason"]
    assert got["cost"] >= exact["cost"]
    assert doc["steps"][0]["exact"] is False
    code, out, err = run(capsys, "optimize", "tpch:q5", "--engine", "python",
                         "--max-pairs", "10", "--over-budget", "greedy")
    assert code == 0 and "NOT EXACT: query tpch:q5: its 6 relations have more than 10" in out
