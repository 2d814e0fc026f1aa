"""topdown-inc and bottomup-inc: after any sequence of deltas, the plan from-scratch would give.

Oracles are the from-scratch reference optimizers on the same statistics. ``bottomup-inc`` does
the same floating-point sums as ``bottomup`` (a plan's cost is its local cost plus its
children's best costs, and the minimum of equal sets of sums is the same number), so its cost
must be bit-identical. ``topdown-inc`` is compared with ``math.isclose`` (rel 1e-9): branch and
bound passes children the limit ``bound - spent``, a rounded difference, so a plan whose cost is
within an ulp of the bound can be pruned and two searches that meet the alternatives with
different bounds can return different plans whose float costs differ in the last bit —
from-scratch ``topdown`` and ``bottomup`` already disagree that way on random queries.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from randq import make_query, queries, random_deltas
from test_optimizers import check_plan_shape

from reopt.api import Optimizer
from reopt.cli import main
from reopt.costmodel.cardinality import Adjustments
from reopt.costmodel.deltas import apply_deltas, parse_deltas
from reopt.costmodel.models import cost_model
from reopt.costmodel.query import ColumnRef, Compare
from reopt.costmodel.space import PlanSpace
from reopt.optimizers.bottomup import bottomup
from reopt.optimizers.incremental import BottomUpInc, Incremental, TopDownInc
from reopt.optimizers.topdown import topdown
from reopt.plan import plan_of_winners

CLASSES = {"topdown-inc": TopDownInc, "bottomup-inc": BottomUpInc}


def with_table_deltas(texts: list[str], rng: random.Random) -> list[str]:
    """randq names relations by alias (``r3`` of table ``t3``); half the time say the table."""
    out = []
    for t in texts:
        if t.startswith("card r") and rng.random() < 0.5:
            t = "card t" + t[len("card r"):]
        out.append(t)
    return out


def check_result(space: PlanSpace, r, inc: Incremental) -> None:
    assert r.plan.cost == r.cost  # the memo's exact records are its plan's sums, bit for bit
    check_plan_shape(space, r.plan)
    full = space.size()
    assert r.explored["or_nodes"] <= full["or_nodes"]
    assert r.explored["and_nodes"] <= full["and_nodes"]


@pytest.mark.parametrize("model", ["cout", "io"])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 6), seed=st.integers(0, 2**31), steps=st.integers(1, 20))
def test_incremental_equals_from_scratch_after_every_delta(model, qc, seed, steps):
    q, cat = qc
    m = cost_model(model)
    rng = random.Random(seed)
    space = PlanSpace(q, cat, m)
    bu, td = BottomUpInc(space), TopDownInc(space)
    bu.optimize(), td.optimize()
    adj = Adjustments()
    for text in with_table_deltas(random_deltas(q, rng, steps, m.operators), rng):
        adj = apply_deltas(parse_deltas(text), q, cat, adj, m.operators)
        space = PlanSpace(q, cat, m, adj)
        r = bu.update(space)
        assert r.cost == bottomup(space).cost, text
        check_result(space, r, bu)
        r = td.update(space)
        assert math.isclose(r.cost, topdown(space).cost, rel_tol=1e-9), text
        check_result(space, r, td)


@pytest.mark.parametrize("name", sorted(CLASSES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 6), model=st.sampled_from(["cout", "io"]), data=st.data())
def test_a_delta_that_changes_nothing_touches_nothing(name, qc, model, data):
    q, cat = qc
    m = cost_model(model)
    inc = CLASSES[name](PlanSpace(q, cat, m))
    before = inc.optimize().cost
    targets = [f"card {a}" for a in q.aliases] + [f"cost {op}" for op in m.operators]
    targets += [f"sel {p.key}" for p in q.joins]
    text = data.draw(st.sampled_from(targets)) + " *1"
    adj = apply_deltas(parse_deltas(text), q, cat, Adjustments(), m.operators)
    r = inc.update(PlanSpace(q, cat, m, adj))
    assert r.explored == {"or_nodes": 0, "and_nodes": 0}
    assert r.cost == before


@pytest.mark.parametrize("name", sorted(CLASSES))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 6), model=st.sampled_from(["cout", "io"]), data=st.data())
def test_dearer_losers_propagate_nothing(name, qc, model, data):
    """Lazy propagation: making an operator that wins nowhere dearer re-settles only the OR
    nodes that have an alternative using it — no winner changes, so no parent hears."""
    q, cat = qc
    m = cost_model(model)
    space = PlanSpace(q, cat, m)
    inc = CLASSES[name](space)
    first = inc.optimize()
    winners = {n.alt.phy_op for n in first.plan.walk()}
    memo = dict(inc._entries())  # before the update
    won = {space.columns(*g).phy_op[e[1]] for g, e in memo.items() if e[1] is not None}
    using = {op: {g for g in memo if op in space.columns(*g).phy_op} for op in m.operators}
    losers = [op for op in m.operators if op not in won and using[op]]
    assert winners <= won
    if not losers:
        return
    op = data.draw(st.sampled_from(losers))
    factor = data.draw(st.sampled_from([2, 4, 8]))
    adj = apply_deltas(parse_deltas(f"cost {op} *{factor}"), q, cat, Adjustments(), m.operators)
    r = inc.update(PlanSpace(q, cat, m, adj))
    assert r.cost == first.cost
    assert inc.touched_or == using[op]


@pytest.mark.parametrize("name", sorted(CLASSES))
@pytest.mark.parametrize("model", ["cout", "io"])
def test_one_leaf_change_touches_less_than_the_space_on_q5(name, model):
    opt = Optimizer("tpch:q5", cost_model=model, optimizer=name)
    first = opt.optimize()
    full = first.metrics["search_space"]
    step = opt.update(["card orders *2"])
    touched = step.metrics["explored"]
    assert 0 < touched["or_nodes"] < full["or_nodes"]
    assert 0 < touched["and_nodes"] < full["and_nodes"]
    ref = Optimizer("tpch:q5", cost_model=model, optimizer="bottomup")
    assert math.isclose(step.cost, ref.update(["card orders *2"]).cost, rel_tol=1e-9)


def test_api_keeps_the_memo_between_updates():
    opt = Optimizer("tpch:q5", optimizer="bottomup-inc")
    opt.optimize()
    memo = opt._incremental
    assert isinstance(memo, BottomUpInc)
    step = opt.update(["cost hashjoin *1"])
    assert opt._incremental is memo
    assert step.metrics["explored"] == {"or_nodes": 0, "and_nodes": 0}
    batch = ["card orders *2", "sel orders.o_custkey=customer.c_custkey *0.5"]
    step = opt.update("; ".join(batch))
    assert step.cost == Optimizer("tpch:q5", optimizer="bottomup").update(batch).cost
    assert step.deltas == batch


def test_update_needs_the_same_query():
    a = Optimizer("tpch:q5", optimizer="topdown")
    b = Optimizer("tpch:q3", a.catalog, optimizer="topdown")
    inc = TopDownInc(a.space())
    inc.optimize()
    with pytest.raises(ValueError, match="same query"):
        inc.update(b.space())


def test_cli_delta_steps_update_the_memo(capsys):
    code = main(["optimize", "tpch:q3", "tpch:q5", "--optimizer", "topdown-inc,bottomup-inc",
                 "--delta", "card supplier *4", "--delta", "card orders *2", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    docs = json.loads(out)["queries"]
    assert [(d["query"], d["optimizer"]) for d in docs] == [
        ("tpch:q3", "topdown-inc"), ("tpch:q3", "bottomup-inc"),
        ("tpch:q5", "topdown-inc"), ("tpch:q5", "bottomup-inc"),
    ]
    for d in docs:
        first, steps = d["initial"], d["steps"]
        full = first["metrics"]["search_space"]
        if d["query"] == "tpch:q3":  # no supplier in q3: the first step is a no-op there
            assert steps[0]["metrics"]["explored"] == {"or_nodes": 0, "and_nodes": 0}
            assert steps[0]["cost"] == first["cost"]
        for s in steps:
            assert s["metrics"]["explored"]["or_nodes"] < full["or_nodes"]
            assert s["cost"] == s["plan"]["cost"]
        ref = Optimizer(d["query"], optimizer="bottomup")
        if d["query"] == "tpch:q5":
            ref.update(["card supplier *4"])
        assert math.isclose(steps[1]["cost"], ref.update(["card orders *2"]).cost,
                            rel_tol=1e-9)


@pytest.mark.parametrize("name", sorted(CLASSES))
@pytest.mark.parametrize("target", ["r0", "t0"])
def test_scan_cost_follows_rows_before_filters_when_the_estimate_is_at_its_floor(name, target):
    """A filter of selectivity 0 keeps a relation's estimate at its floor, 1 row, whatever its
    rows, but a table scan still reads every row: the change must be seen through the base
    rows."""
    q, cat = make_query("chain", 3, 5, final=False)
    q = dataclasses.replace(q, filters=(Compare(ColumnRef("r0", "f"), "<", 0),))
    m = cost_model("io")
    inc = CLASSES[name](PlanSpace(q, cat, m))
    before = inc.optimize().cost
    adj = apply_deltas(parse_deltas(f"card {target} *8"), q, cat, Adjustments(), m.operators)
    space = PlanSpace(q, cat, m, adj)
    assert space.summary(1) == 1.0 == PlanSpace(q, cat, m).summary(1)
    after = inc.update(space).cost
    assert after != before
    assert after == bottomup(space).cost


@pytest.mark.parametrize("model", ["cout", "io"])
@settings(max_examples=40, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(qc=queries(2, 6), seed=st.integers(0, 2**31), steps=st.integers(1, 6))
def test_bottomup_inc_loop_and_numpy_settle_alike(model, qc, seed, steps, monkeypatch):
    """bottomup-inc settles small tables by a loop, large ones with numpy: forced each way on
    the same queries and deltas, their winners and best costs are the same, bit for bit."""
    from reopt.optimizers import dptable

    q, cat = qc
    m = cost_model(model)
    rng = random.Random(seed)
    texts = random_deltas(q, rng, steps, m.operators, observe=rng.random() < 0.5)
    runs = []
    for limit in (10**9, -1):  # every table a "small" one, then none
        monkeypatch.setattr(dptable, "SCALAR_ALTERNATIVES", limit)
        inc = BottomUpInc(PlanSpace(q, cat, m))
        inc.optimize()
        seen = [(inc.table.best.tolist(), inc.table.winner.tolist())]
        adj = Adjustments()
        for text in texts:
            adj = apply_deltas(parse_deltas(text), q, cat, adj, m.operators)
            r = inc.update(PlanSpace(q, cat, m, adj))
            seen.append((inc.table.best.tolist(), inc.table.winner.tolist(),
                         sorted(inc.touched_or), r.cost))
        runs.append(seen)
    assert runs[0] == runs[1]


@pytest.mark.parametrize("model", ["cout", "io"])
@settings(max_examples=60, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(qc=queries(2, 6), seed=st.integers(0, 2**31), steps=st.integers(1, 8))
def test_topdown_inc_bulk_resettling_equals_from_scratch(model, qc, seed, steps, monkeypatch):
    """topdown-inc re-settles reached winners of large spaces in bulk (vectorized, over the
    DP table's columns); forced on for small queries, every update still finds the cost a
    from-scratch topdown finds, and the search-only topdown-inc's. The memos may differ (a
    bulk-settled node re-opens no pruned child), and so may plans whose costs differ by
    float rounding only, where branch-and-bound's budgets round one way or the other."""
    from reopt.optimizers import dptable

    q, cat = qc
    m = cost_model(model)
    rng = random.Random(seed)
    texts = random_deltas(q, rng, steps, m.operators, observe=rng.random() < 0.5)
    runs = []
    for limit in (10**9, -1):  # search only, then bulk wherever it applies
        monkeypatch.setattr(dptable, "SCALAR_ALTERNATIVES", limit)
        inc = TopDownInc(PlanSpace(q, cat, m))
        inc.optimize()
        assert (inc.bulk is not None) == (limit < 0)
        adj, seen = Adjustments(), []
        for text in texts:
            adj = apply_deltas(parse_deltas(text), q, cat, adj, m.operators)
            space = PlanSpace(q, cat, m, adj)
            r = inc.update(space)
            plain = topdown(space)
            assert math.isclose(r.cost, plain.cost, rel_tol=1e-9), text
            check_result(space, r, inc)
            seen.append(r.cost)
        runs.append(seen)
    assert all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(*runs, strict=True))


@pytest.mark.parametrize("model", ["cout", "io"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 6), seed=st.integers(0, 2**31), steps=st.integers(1, 12))
def test_update_plans_equal_plans_built_afresh(model, qc, seed, steps):
    """An update builds its plan reusing the last plan's subtrees that no change reaches
    (PlanCache), in a space derived by with_adjustments (estimates and moved sets carried
    over): node for node (rows, local costs, costs) it is the plan built afresh from the same
    winners in a fresh space of the same statistics — for bottomup-inc, bottomup's plan from
    scratch."""
    q, cat = qc
    m = cost_model(model)
    rng = random.Random(seed)
    space = PlanSpace(q, cat, m)
    bu, td = BottomUpInc(space), TopDownInc(space)
    bu.optimize(), td.optimize()
    updates_build_fresh_plans(bu, td, space, Adjustments(), q, cat, m,
                              with_table_deltas(random_deltas(q, rng, steps, m.operators), rng))


def updates_build_fresh_plans(bu, td, space, adj, q, cat, m, texts) -> None:
    """Each delta text in turn: both optimizers updated, their plans read at once equal to a
    plan built afresh in a fresh space of the same statistics."""
    for text in texts:
        adj = apply_deltas(parse_deltas(text), q, cat, adj, m.operators)
        space = space.with_adjustments(adj)
        fresh = PlanSpace(q, cat, m, adj)
        assert bu.update(space).plan.to_json() == bottomup(fresh).plan.to_json(), text
        got = td.update(space).plan.to_json()
        assert got == plan_of_winners(fresh, lambda g: td.memo[g][1]).to_json(), text


@pytest.mark.parametrize("model", ["cout", "io"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 6), seed=st.integers(0, 2**31), steps=st.integers(1, 8),
       data=st.data())
def test_plans_read_late_equal_plans_built_afresh_at_their_step(model, qc, seed, steps, data):
    """A result's plan is made when first read: read after later updates (in any order, some
    never), each is still its own step's plan — for bottomup-inc bottomup's from scratch, for
    topdown-inc the one built afresh from the memo's winners as that step left them — and
    the plans read in order afterwards still reuse only what they may (PlanCache)."""
    q, cat = qc
    m = cost_model(model)
    rng = random.Random(seed)
    space = PlanSpace(q, cat, m)
    bu, td = BottomUpInc(space), TopDownInc(space)
    results = [(bu.optimize(), td.optimize(), dict(td.memo), PlanSpace(q, cat, m))]
    adj = Adjustments()
    for text in with_table_deltas(random_deltas(q, rng, steps, m.operators), rng):
        adj = apply_deltas(parse_deltas(text), q, cat, adj, m.operators)
        space = space.with_adjustments(adj)
        results.append((bu.update(space), td.update(space), dict(td.memo),
                        PlanSpace(q, cat, m, adj)))
    order = data.draw(st.permutations(range(len(results))))
    for k in order[:data.draw(st.integers(0, len(order)))]:
        rb, rt, memo, fresh = results[k]
        assert rb.plan.to_json() == bottomup(fresh).plan.to_json(), k
        assert rb.plan.cost == rb.cost
        assert rt.plan.to_json() == plan_of_winners(fresh, lambda g, m=memo: m[g][1]).to_json()
    # and on: the next updates' plans, read at once, from a cache of any of those plans
    updates_build_fresh_plans(bu, td, space, adj, q, cat, m,
                              with_table_deltas(random_deltas(q, rng, 3, m.operators), rng))
