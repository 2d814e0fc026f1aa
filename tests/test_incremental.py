"""Incremental re-optimization (issue 5): after any sequence of deltas, the maintained
relations equal a from-scratch evaluation under the final statistics — every relation, not
only the best cost — in every pruning mode; the best cost equals the reference optimizers'.

The oracle is the plain python engine evaluating the rules from scratch (independent of the
maintenance code: no complete layer, no replay, no revival) and ``topdown``.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from randq import SHAPES, make_query, random_deltas, tie_deltas
from rulefiles import USER_RULES, edited_rules

from reopt.api import Optimizer, optimize_batch
from reopt.costmodel.deltas import apply_deltas, parse_deltas
from reopt.costmodel.errors import DeltaError, ReoptError
from reopt.costmodel.models import cost_model
from reopt.costmodel.space import PlanSpace
from reopt.evaluator.driver import PRUNING_MODES, load_program
from reopt.evaluator.maintenance import (
    _revival_reads_aggregates,
    _support_tests,
    layers,
    maintenance_plan,
)
from reopt.evaluator.python_engine import PythonEngine, Relation
from reopt.incremental.session import Session
from reopt.optimizers.bottomup import bottomup
from reopt.optimizers.topdown import topdown

PROGRAMS = {mode: load_program(pruning=mode) for mode in PRUNING_MODES}
PRUNED = [m for m in PRUNING_MODES if m != "none"]


def from_scratch(program, spaces: list[PlanSpace]) -> dict[str, set[tuple]]:
    ctx = dict(enumerate(spaces))
    rels, _ = PythonEngine(program, ctx).evaluate(
        {"Expr": [(q, *s.root) for q, s in ctx.items()]})
    return {p: r.rows for p, r in rels.items()}


def assert_same(session: Session, expected: dict[str, set[tuple]]) -> None:
    got = session.evaluation.relations
    for pred, rows in expected.items():
        assert got[pred].rows == rows, pred


def run_sequence(mode: str, q, cat, model: str, steps: list[list[str]]) -> None:
    """Optimize, then apply each batch of deltas incrementally; after every step compare
    with a from-scratch evaluation and with topdown."""
    m = cost_model(model)
    program = PROGRAMS[mode]
    space = PlanSpace(q, cat, m)
    session = Session(program, [space], "python")
    assert session.incremental
    session.optimize()
    assert_same(session, from_scratch(program, [PlanSpace(q, cat, m)]))
    adj = space.adjustments
    for batch in steps:
        adj = apply_deltas([d for t in batch for d in parse_deltas(t)], q, cat, adj,
                           m.operators)
        res = session.update({0: adj})
        fresh = PlanSpace(q, cat, m, adj)
        assert_same(session, from_scratch(program, [fresh]))
        # bottomup sums exactly as the rules do; topdown's branch-and-bound subtracts costs
        # from bounds and may miss a plan cheaper by an ulp
        best = res.evaluation.best_cost(0)
        assert best == bottomup(PlanSpace(q, cat, m, adj)).cost
        assert math.isclose(best, topdown(PlanSpace(q, cat, m, adj)).cost, rel_tol=1e-12)


SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("mode", PRUNED)
@pytest.mark.parametrize("model", ["io", "cout"])
@SETTINGS
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 5), seed=st.integers(0, 2**31),
       k=st.integers(1, 20), batch=st.integers(1, 3))
def test_random_delta_sequences(mode, model, shape, n, seed, k, batch):
    q, cat = make_query(shape, n, seed)
    rng = random.Random(seed)
    deltas = random_deltas(q, rng, k, cost_model(model).operators)
    steps = [deltas[i:i + batch] for i in range(0, len(deltas), batch)]
    run_sequence(mode, q, cat, model, steps)


@settings(max_examples=25, deadline=None)
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 4), seed=st.integers(0, 2**31),
       k=st.integers(1, 8))
def test_without_pruning(shape, n, seed, k):
    """``none``: PlanCost holds every plan-tree cost; maintained all the same (small
    queries, the space is exponential)."""
    q, cat = make_query(shape, n, seed)
    deltas = random_deltas(q, random.Random(seed), k, cost_model("cout").operators)
    run_sequence("none", q, cat, "cout", [[d] for d in deltas])


@pytest.mark.parametrize("model", ["io", "cout"])
@settings(max_examples=25, deadline=None)
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 5), seed=st.integers(0, 2**31),
       k=st.integers(1, 10))
def test_derived_spaces_estimate_as_fresh_ones(model, shape, n, seed, k):
    """A space derived from the previous one by with_adjustments (what an update does)
    reuses the estimates no delta moved; every summary and local cost equals, to the bit, a
    space built from scratch under the same statistics, after each delta — and a derived space
    does not keep its predecessors alive."""
    import gc
    import weakref

    q, cat = make_query(shape, n, seed)
    m = cost_model(model)
    space = PlanSpace(q, cat, m)
    nodes = list(space.or_nodes())
    for node in nodes:  # fill the caches a derived space reuses
        space.summary(node[0])
        for a in space.alternatives(*node):
            space.local_cost(a)
    adj = space.adjustments
    before = []
    for d in random_deltas(q, random.Random(seed), k, m.operators):
        adj = apply_deltas(parse_deltas(d), q, cat, adj, m.operators)
        before.append(weakref.ref(space))
        space = space.with_adjustments(adj)
        fresh = PlanSpace(q, cat, m, adj)
        for node in nodes:
            assert space.summary(node[0]) == fresh.summary(node[0]), (d, node)
            for a in space.alternatives(*node):
                assert space.local_cost(a) == fresh.local_cost(a), (d, a)
    del fresh
    gc.collect()  # once, not per delta: a full collection of the suite's heap is slow
    assert [ref() for ref in before] == [None] * len(before)


FIGURE6 = [f"card {{{s}}} *{f}" for s in (
    "nation,region", "customer,nation,region", "orders,customer,nation,region",
    "lineitem,orders,customer,nation,region",
    "supplier,lineitem,orders,customer,nation,region")
    for f in (0.125, 0.25, 0.5, 2, 4, 8)]


@pytest.mark.parametrize("mode", PRUNED)
def test_tpch_q5_figure6_sweep(mode):
    """The paper's Figure 6 deltas on Q5 (io): each join-set correction A–E × 1/8…8,
    applied and then undone by the inverse factor."""
    opt = Optimizer("tpch:q5", cost_model="io", engine="python", pruning=mode)
    steps = []
    for d in FIGURE6:
        text, f = d.rsplit("*", 1)
        steps += [[d], [f"{text}*{1 / float(f)}"]]
    run_sequence(mode, opt.query, opt.catalog, "io", steps)


def test_api_update_is_incremental_and_exact():
    opt = Optimizer("tpch:q5", cost_model="io", engine="python", pruning="all")
    opt.optimize()
    for d in ("card {nation,region} *0.125", "cost hashjoin *4", "card orders *8"):
        step = opt.update(d)
        ref = Optimizer("tpch:q5", cost_model="io", optimizer="topdown")
        ref.adjustments = opt.adjustments
        assert step.cost == ref.optimize().cost
        m = step.metrics
        assert m["incremental"] is True
        assert 0 < m["updated"]["or_nodes"] <= m["search_space"]["or_nodes"]
        assert m["update_ratio"]["or"] == m["updated"]["or_nodes"] / 100
        # (a stale OR node without plans none of whose alternatives has all its inputs'
        # plans is named but not re-derived: nothing could derive it)
        assert m["rederived"]["stale"] > 0 and m["rederived"]["or_nodes"] > 0
    # Q5 groups (hashagg/sortagg): no plan uses topsort, so scaling it touches nothing
    step = opt.update("cost topsort *2")
    assert step.metrics["updated"] == {"or_nodes": 0, "and_nodes": 0}
    assert step.metrics["rederived"]["or_nodes"] == 0


def _rows(opt: Optimizer) -> dict[str, set[tuple]]:
    return {p: set(map(tuple, df.itertuples(index=False))) for p, df in opt.relations().items()}


# the relations whose tuples start with a plan alternative (the SearchSpace tuple)
ALTERNATIVES = ("SearchSpace", "PlanCost", "BestPlan")


@pytest.mark.parametrize("mode", PRUNING_MODES)
def test_updated_counts_the_nodes_whose_tuples_changed(mode):
    """``metrics.updated`` counts the OR nodes (leading ``q, expr, prop``) and AND nodes
    (SearchSpace tuples, which PlanCost and BestPlan start with) some of whose tuples were
    inserted, deleted or changed. Counted here from the relations before and after (but for
    those derived when read, which an update leaves stale): exactly where the state is the
    relations (no pruning deletes from them), at least that where deleting modes also keep a
    complete layer the relations do not show (reference counting; suppression, whose
    rejected alternatives the complete layer keeps)."""
    q = "tpch:q3" if mode == "none" else "tpch:q5"
    opt = Optimizer(q, cost_model="io", engine="python", pruning=mode)
    opt.optimize()
    width = len(opt.relations()["SearchSpace"].columns)
    for d in ("cost hashjoin *4", "card orders *0.5", "card {orders,customer} *3"):
        before = _rows(opt)
        up = opt.update(d).metrics["updated"]
        after = _rows(opt)
        diff = {p: before[p] ^ after[p] for p in before}
        lazy = opt._program.ondemand
        ors = {t[:3] for p, ts in diff.items() if p not in ("Expr", "Goal") and p not in lazy
               for t in ts if len(t) >= 3}  # (SeedBound(q, bound) names no OR node)
        ands = {t[:width] for p in ALTERNATIVES for t in diff[p]}
        assert ors and ands
        if mode in ("none", "evita", "aggsel"):
            assert up == {"or_nodes": len(ors), "and_nodes": len(ands)}, d
        else:
            assert up["or_nodes"] >= len(ors) and up["and_nodes"] >= len(ands), d


@pytest.mark.parametrize("mode", PRUNING_MODES)
def test_a_delta_making_two_plans_cost_exactly_the_same(mode):
    """Exact cost ties (``tie_deltas``): made by one cost delta, then undone."""
    q, cat = make_query("chain", 2, 0)
    tie, untie = tie_deltas(PlanSpace(q, cat, cost_model("io")))
    run_sequence(mode, q, cat, "io", [[tie], [untie]])


def test_a_session_update_leaving_some_queries_unchanged():
    """A session of several queries, updated with new statistics for one and the same for
    another: the changed query is maintained, the unchanged one keeps its state, and both
    equal a from-scratch evaluation."""
    (q1, c1), (q2, c2) = make_query("cycle", 4, 3), make_query("star", 4, 5)
    m = cost_model("io")
    program = PROGRAMS["all"]
    s1, s2 = PlanSpace(q1, c1, m), PlanSpace(q2, c2, m)
    session = Session(program, [s1, s2], "python")
    session.optimize()
    adj2 = apply_deltas(parse_deltas("card r0 *8"), q2, c2, s2.adjustments, m.operators)
    res = session.update({0: s1.adjustments, 1: adj2})
    assert_same(session, from_scratch(program, [PlanSpace(q1, c1, m), PlanSpace(q2, c2, m, adj2)]))
    assert res.evaluation.best_cost(1) == bottomup(PlanSpace(q2, c2, m, adj2)).cost
    assert res.updated[0] == {"or_nodes": 0, "and_nodes": 0} and res.updated[1]["or_nodes"] > 0


def test_update_needs_an_optimized_state():
    """A declarative update() maintains the last optimize(): before one there is nothing to
    maintain, and re-optimizing silently would return a step without update metrics."""
    opt = Optimizer("tpch:q3", cost_model="io", engine="python")
    with pytest.raises(ReoptError, match=r"update\(\): optimize\(\) first"):
        opt.update("card orders *2")
    assert opt.adjustments == Optimizer("tpch:q3").adjustments
    opt.optimize()
    assert "update_ratio" in opt.update("card orders *2").metrics


def test_rejected_delta_leaves_state_unchanged():
    opt = Optimizer("tpch:q5", cost_model="io", engine="python", pruning="all")
    opt.optimize()
    opt.update("card orders *2")
    session = opt._session
    before = {p: set(r.rows) for p, r in session.evaluation.relations.items()}
    complete = {p: set(r.rows) for p, r in session.engine.complete.items()}
    adj = opt.adjustments
    with pytest.raises(DeltaError):
        opt.update(["card orders *4", "card nosuchtable *2"])
    with pytest.raises(DeltaError):
        opt.update("sel a.b=c.d *0")
    assert opt.adjustments is adj
    assert {p: r.rows for p, r in session.evaluation.relations.items()} == before
    assert {p: r.rows for p, r in session.engine.complete.items()} == complete
    step = opt.update("card orders *4")
    ref = Optimizer("tpch:q5", cost_model="io", optimizer="topdown")
    ref.adjustments = opt.adjustments
    assert step.cost == ref.optimize().cost


def test_batch_update_touches_one_query():
    """A session of two queries: updating one leaves the other's tuples exactly as they
    were, and both equal a from-scratch evaluation of the batch."""
    program = PROGRAMS["all"]
    (q1, c1), (q2, c2) = make_query("cycle", 4, 3), make_query("star", 4, 5)
    m = cost_model("io")
    s1, s2 = PlanSpace(q1, c1, m), PlanSpace(q2, c2, m)
    session = Session(program, [s1, s2], "python")
    session.optimize()
    other = {p: {t for t in r.rows if t[0] == 1}
             for p, r in session.evaluation.relations.items() if p != "Expr"}
    adj = apply_deltas(parse_deltas("card r0 *8"), q1, c1, s1.adjustments, m.operators)
    res = session.update({0: adj})
    assert res.updated[1] == {"or_nodes": 0, "and_nodes": 0}
    for p, rows in other.items():
        assert {t for t in session.evaluation.relations[p].rows if t[0] == 1} == rows
    assert_same(session, from_scratch(program, [PlanSpace(q1, c1, m, adj), s2]))


def test_a_step_that_changes_no_statistics_costs_no_engine_work(monkeypatch):
    """In a multi-query run a delta may apply to one query only: the other query's step has
    the statistics it had, so the engine is not run (on Spark that step took seconds of
    jobs) and the step reports nothing touched, no iteration, the same held state."""
    from reopt.api import optimize_batch, update_batch

    q3, q10 = (Optimizer(q, cost_model="io", engine="python") for q in ("tpch:q3", "tpch:q10"))
    first = optimize_batch([q3, q10])
    calls: list[str] = []
    for o in (q3, q10):
        real = o._session.engine.update
        monkeypatch.setattr(o._session.engine, "update",
                            lambda spaces, o=o, real=real: calls.append(o.query.name)
                            or real(spaces))
    steps = update_batch([q3, q10], [q3.adjustments, q10.check("card nation *2")])
    assert calls == ["tpch:q10"]
    m = steps[0].metrics
    assert m["updated"] == {"or_nodes": 0, "and_nodes": 0} and m["iterations"] == 0
    assert m["rederived"] == {"stale": 0, "or_nodes": 0, "changed": 0}
    assert m["held"] == first[0].metrics["held"] and steps[0].cost == first[0].cost
    assert steps[1].metrics["updated"]["or_nodes"] > 0
    assert_same(q3._session, from_scratch(PROGRAMS["all"], [q3.space()]))


def test_maintenance_plan_rejects_programs_it_cannot_maintain(tmp_path):
    """Costing released parents first cannot be maintained children first: the program is
    rejected with a reason, and a session over it re-evaluates from scratch instead."""
    rules = edited_rules(tmp_path, ".schedule ascending Fn_rank PlanCost BestCost.",
                         ".schedule descending Fn_rank PlanCost BestCost.")
    program = load_program(rules, pruning="all")
    with pytest.raises(ReoptError, match="ascending"):
        maintenance_plan(program)
    q, cat = make_query("chain", 3, 1)
    session = Session(program, [PlanSpace(q, cat, cost_model("cout"))], "python")
    assert not session.incremental and "ascending" in session.reason


def test_maintenance_plan_reads_the_program():
    plan = maintenance_plan(PROGRAMS["all"])
    assert plan.target == "PlanCost" and plan.key == 3
    assert plan.aggregates == {"BestCost": 11}  # PlanCost(q, …, md, cost): cost is column 11
    assert {s for s, _, _ in plan.sources} == {"SearchSpace"}
    assert len(plan.sources) == 3 and len(plan.parents) == 3  # R6-R8; R7 + R8 twice
    # the parents' SearchSpace tuples reading a changed child: by its left child (R7's and
    # R8's first PlanCost atom, the same join up to variable names: once) and by its right
    joined = sorted(tuple(i for i, t in enumerate(v.ops[1].args) if t in v.ops[0].args[:3])
                    for _, v in plan.reach)
    assert joined == [(0, 6, 7), (0, 8, 9)]


def test_distinct_variants_tells_renamed_ones_from_others():
    """Alpha-equivalent variants (hand-renamed copies) are kept once; one reading another
    column, or a constant instead of a variable, is kept too."""
    from reopt.evaluator.ast import Const, Var
    from reopt.evaluator.compiler import Scan
    from reopt.evaluator.maintenance import distinct_variants

    v = maintenance_plan(PROGRAMS["all"]).reach[0][1]

    def renamed(t):
        return Var(t.name + "_2") if isinstance(t, Var) else t

    copy = replace(v, ops=tuple(replace(op, args=tuple(map(renamed, op.args)))
                                for op in v.ops), head=tuple(map(renamed, v.head)))
    first = v.ops[0]
    other = replace(v, ops=(replace(first, args=(Const(0), *first.args[1:])), *v.ops[1:]))
    swapped = replace(v, ops=(first, Scan(v.ops[1].pred, v.ops[1].version,
                                          tuple(reversed(v.ops[1].args)))))
    got = distinct_variants([("S", v), ("S", copy), ("S", other), ("S", swapped),
                             ("T", v)])
    assert [(s, w) for s, w in got] == [("S", v), ("S", other), ("S", swapped), ("T", v)]


def test_delta_reads_are_the_columns_a_variant_depends_on():
    """The parents' lookups (R7's and R8's PlanCost atoms cut after SearchSpace) read a
    changed PlanCost tuple's group key only — q, expr, prop; lMd and lCost are bound but used
    by nothing the cut keeps (read off rules/optimizer.dl by hand) — so one tuple per changed
    group stands for its selected tuples that went and came. A constant, a repeated variable
    and a variable used later are read; a wildcard and an unused variable are not; a variant
    not starting with its delta's scan has none."""
    from reopt.evaluator.ast import Const, Var
    from reopt.evaluator.compiler import Filter, Scan
    from reopt.evaluator.maintenance import delta_reads

    plan = maintenance_plan(PROGRAMS["all"])
    assert [delta_reads(v) for _, v in plan.reach] == [(0, 1, 2), (0, 1, 2)]
    v = plan.reach[0][1]
    first = v.ops[0]
    args = list(first.args)
    args[3], args[4], args[5] = Const(7), Var("q"), Var("zz")  # constant, repeat, unused
    later = Filter("<", Var("lCost"), Const(1.0))  # lCost (column 11) used after the scan
    w = replace(v, ops=(replace(first, args=tuple(args)), *v.ops[1:], later))
    assert delta_reads(w) == (0, 1, 2, 3, 4, 11)
    assert delta_reads(replace(v, ops=v.ops[1:])) is None
    assert isinstance(v.ops[1], Scan)


def test_source_tests_are_what_a_source_tuple_must_pass():
    """The tests dropping a stale group's SearchSpace tuples before R6-R8 run (read off
    rules/optimizer.dl by hand): R6 needs lExpr = 0 (column 6); R7 lExpr != 0, rExpr = 0
    (column 8) and its left child (q, lExpr, lProp: columns 0, 6, 7) held in PlanCost; R8
    rExpr != 0 and both children held (the right one: 0, 8, 9). A comparison with a
    variable the source does not bind, a negated scan and a scan keyed by such a variable
    give no test; a variant not starting with its delta's scan has none."""
    import operator

    from reopt.evaluator.ast import Const, Var
    from reopt.evaluator.compiler import Filter
    from reopt.evaluator.maintenance import source_tests

    plan = maintenance_plan(PROGRAMS["all"])
    tests = {v.rule.pos.line: source_tests(v, plan.target, plan.key)
             for _, _, v in plan.sources}
    eq, ne, zero = operator.eq, operator.ne, ("const", 0)
    r6, r7, r8 = (tests[k] for k in sorted(tests))  # (in the file's order)
    assert r6 == (("cmp", eq, (("col", 6), zero)),)
    assert r7 == (("cmp", ne, (("col", 6), zero)), ("cmp", eq, (("col", 8), zero)),
                  ("held", (0, 6, 7), None))
    assert r8 == (("cmp", ne, (("col", 8), zero)), ("held", (0, 6, 7), None),
                  ("held", (0, 8, 9), None))
    v = max((v for _, _, v in plan.sources), key=lambda v: v.rule.pos.line)
    left = v.ops[2]  # R8: its SearchSpace scan, rExpr != 0, then the left child's scan
    assert left.pred == plan.target and v.ops[0].pred == "SearchSpace"
    other = replace(left, args=(Var("nope"), *left.args[1:]))
    negated = replace(left, negated=True)
    free = Filter("<", Var("lCost"), Const(1.0))  # lCost is PlanCost's, not the source's
    w = replace(v, ops=(v.ops[0], other, negated, free, *v.ops[1:]))
    assert [t for t in source_tests(w, plan.target, plan.key) if t[0] == "held"] == [
        ("held", (0, 6, 7), None), ("held", (0, 8, 9), None)]  # from the original scans
    assert source_tests(replace(v, ops=v.ops[1:]), plan.target, plan.key) == ()


@pytest.mark.parametrize("mode", PRUNING_MODES)
def test_user_relations_are_maintained_like_the_rest(tmp_path, mode):
    """A session holds a user's relations exactly as a from-scratch evaluation does, before
    and after updates — also where the live layer is rebuilt by revival (``all``,
    ``aggsel+refcount``)."""
    program = load_program(edited_rules(tmp_path, extra=USER_RULES), pruning=mode)
    where = {p: i for i, s in enumerate(program.strata) for p in s.preds}
    maintained = maintenance_plan(program).stratum
    assert where["Asked"] < maintained and where["Alts"] < maintained < where["Priced"]
    assert where["Inputs"] == where["Goal"]
    q, cat = make_query("star", 3 if mode == "none" else 4, 7)
    m = cost_model("io")
    session = Session(program, [PlanSpace(q, cat, m)], "python")
    assert session.incremental, session.reason
    session.optimize()
    expected = from_scratch(program, [PlanSpace(q, cat, m)])
    assert all(expected[p] for p in ("Asked", "Alts", "Inputs", "Priced"))
    assert_same(session, expected)
    adj = session.ctx[0].adjustments
    for text in random_deltas(q, random.Random(3), 4, m.operators):
        adj = apply_deltas(list(parse_deltas(text)), q, cat, adj, m.operators)
        session.update({0: adj})
        assert_same(session, from_scratch(program, [PlanSpace(q, cat, m, adj)]))


def test_an_aggregate_before_the_maintained_stratum_is_evaluated_not_maintained(tmp_path):
    """Revival does not rebuild an aggregate of the enumeration (its groups would follow
    pruning): the session says why it re-evaluates instead, and its relations are exact."""
    rules = edited_rules(tmp_path, extra="AaMinGoal(q, min<e>) :- Goal(q, e, _).\n")
    program = load_program(rules, pruning="all")
    with pytest.raises(ReoptError, match="AaMinGoal aggregates before the maintained"):
        maintenance_plan(program)
    q, cat = make_query("chain", 3, 2)
    m = cost_model("io")
    session = Session(program, [PlanSpace(q, cat, m)], "python")
    assert not session.incremental and "AaMinGoal" in session.reason
    session.optimize()
    assert_same(session, from_scratch(program, [PlanSpace(q, cat, m)]))


def test_suppression_needs_every_costed_tuple_to_name_its_source(tmp_path):
    """A PlanCost rule not reading the SearchSpace tuple in front of its head: suppression
    could neither delete nor revive what it derives, so the rules are rejected where they are
    pruned (evita does not suppress and takes them)."""
    rules = edited_rules(tmp_path, extra=(
        'PlanCost(q, e, p, 99, "scan", "magic", 0, "", 0, "", 1.0, 5.0) :- '
        'Goal(q, e, p), Fn_isleaf(q, e, true), p = "any".\n'))
    with pytest.raises(ReoptError, match=r"extra.dl:1:1: every rule of PlanCost must read a "
                                         r"SearchSpace tuple whose columns are the first 10"):
        load_program(rules, pruning="aggsel")
    load_program(rules, pruning="evita")


def test_a_member_that_re_optimized_alone_leaves_its_old_batch():
    """After optimize_batch([a, b]) and a.optimize() alone, b's updates must not hand a the
    old batch's evaluation."""
    from reopt.api import optimize_batch

    program = load_program(pruning="all")
    a, b = (Optimizer(q, cost_model="io", engine="python", program=program)
            for q in ("tpch:q3", "tpch:q10"))
    optimize_batch([a, b])
    a.optimize()
    b.update("card nation *2")
    assert {r[0] for r in a._evaluation.rows("BestCost")} == {0}
    assert len(a.relations()["BestCost"]) == len(from_scratch(program, [a.space()])["BestCost"])


def test_revival_reads_no_aggregate_of_the_shipped_program():
    """Revival recomputes the aggregate groups it touches once, at its end, only where no
    rule it runs and no embedded source it checks reads an aggregate of the layer: not in
    the shipped program; a layer whose relation embeds an aggregate is told apart."""
    for mode in ("all", "aggsel+refcount"):
        program = PROGRAMS[mode]
        shape = layers(program, maintenance_plan(program))
        assert not _revival_reads_aggregates(program, shape)
        embedding = replace(shape, embedded={**shape.embedded,
                                             "PlanCost": [[("BestCost", (0, 1, 2, 3))]]})
        assert _revival_reads_aggregates(program, embedding)


def test_revival_tests_only_the_sources_that_rules_differing_in_facts_share():
    """A relation whose rules differ only in the facts they embed (SearchSpace: Goal and one
    method fact each) is tested against the sources they share; not when they differ in a
    derived relation, nor when some rule of it embeds nothing (its tuples may come from
    that rule alone, whose facts revival cannot vouch for)."""
    goal, space = ("Goal", (0, 1, 2)), ("SearchSpace", tuple(range(10)))
    for mode in ("all", "aggsel+refcount"):
        program = PROGRAMS[mode]
        shape = layers(program, maintenance_plan(program))
        assert len(shape.embedded["SearchSpace"]) == 4
        assert _support_tests(program, shape, "SearchSpace") == [(goal,)]
        assert _support_tests(program, shape, "PlanCost") == [(space,)]
        lists = [list(atoms) for atoms in shape.embedded["SearchSpace"]]
        derived = [lists[0], lists[1], lists[2], [goal, ("BestCost", (0, 1, 2, 3))]]
        assert _support_tests(program, replace(shape, embedded={
            **shape.embedded, "SearchSpace": derived}), "SearchSpace") == [
            tuple(atoms) for atoms in derived]
        three = replace(shape, embedded={**shape.embedded, "SearchSpace": lists[:3]})
        assert _support_tests(program, three, "SearchSpace") == [
            tuple(atoms) for atoms in lists[:3]]


@pytest.mark.parametrize("mode", ["all", "aggsel+refcount"])
def test_revival_regrouping_at_its_end_equals_regrouping_every_wave(mode):
    """The live layer and the reference counts are the same whether a revival recomputes
    an aggregate's groups at every wave that touches them or once at its end, from
    scratch and after deltas that revive plans."""
    m = cost_model("cout")
    q, cat = make_query("clique", 6, 5)
    sessions = []
    for at_end in (True, False):
        session = Session(PROGRAMS[mode], [PlanSpace(q, cat, m)], "python")
        assert session.engine._regroup_after
        session.engine._regroup_after = at_end
        session.optimize()
        sessions.append(session)
    adj = [s.ctx[0].adjustments for s in sessions]
    for text in random_deltas(q, random.Random(11), 6, m.operators):
        states = []
        for i, session in enumerate(sessions):
            e = session.engine
            states.append(({p: r.rows for p, r in e.live.items()}, e.counts))
            adj[i] = apply_deltas(list(parse_deltas(text)), q, cat, adj[i], m.operators)
            session.update({0: adj[i]})
        assert states[0] == states[1]
        assert states[0][0]["BestCost"]


def _fresh_session(program, spaces: list[PlanSpace]) -> Session:
    fresh = Session(program, spaces, "python")
    fresh.optimize()
    return fresh


@pytest.mark.parametrize("mode", PRUNING_MODES)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 5), seed=st.integers(0, 2**31),
       k=st.integers(2, 10))
def test_an_update_that_rebuilds_equals_from_scratch(mode, shape, n, seed, k):
    """An update that reaches more than its share of the space evaluates afresh (a share of
    0 forces it before anything is re-derived, a small one midway, an infinite one forbids
    it; the steps alternate, so every rebuild is followed by an incremental update from the
    rebuilt state): after every step, both
    layers, the reference counts and the held metrics equal a fresh session's, and the
    relations the plain engine's from scratch."""
    if mode == "none" and n > 4:
        n = 4  # (the space is exponential without pruning)
    m = cost_model("cout")
    q, cat = make_query(shape, n, seed)
    program = PROGRAMS[mode]
    space = PlanSpace(q, cat, m)
    session = Session(program, [space], "python")
    session.optimize()
    session.evaluation.held(0)  # (cached: the update's metrics follow the changes)
    adj = space.adjustments
    for i, d in enumerate(random_deltas(q, random.Random(seed), k, m.operators)):
        session.engine.rebuild_share = (0.0, 0.2, math.inf)[i % 3]
        adj = apply_deltas(parse_deltas(d), q, cat, adj, m.operators)
        res = session.update({0: adj})
        fresh_space = PlanSpace(q, cat, m, adj)
        assert_same(session, from_scratch(program, [fresh_space]))
        fresh = _fresh_session(program, [fresh_space])
        if res.stats.rebuilt:
            assert session.engine.rebuild_share < math.inf
        for layer in ("complete", "live"):
            mine, theirs = getattr(session.engine, layer), getattr(fresh.engine, layer)
            assert {p: r.rows for p, r in mine.items()} == \
                {p: r.rows for p, r in theirs.items()}, layer
        assert session.engine.counts == fresh.engine.counts
        assert res.evaluation.held(0) == fresh.evaluation.held(0)


@pytest.mark.parametrize("mode", PRUNING_MODES)
def test_an_update_that_rebuilds_counts_what_changed(mode):
    """A rebuilt update's ``metrics.updated`` counts what changed since before the update
    (the relations it replaced midway are read as they were then), as an incremental one
    does: the same counts either way."""
    counts = {}
    for share in (math.inf, 0.0, 0.3):  # (0.3: all's second delta on Q8Join rebuilds midway)
        q = "tpch:q3" if mode == "none" else "tpch:q8join"  # (none: every plan tree's cost)
        opt = Optimizer(q, cost_model="io", engine="python", pruning=mode)
        opt.optimize()
        opt._session.engine.rebuild_share = share
        counts[share] = [opt.update(d).metrics["updated"]
                         for d in ("cost hashjoin *4", "card orders *0.5",
                                   "card {orders,customer} *3", "card lineitem *2")]
        if share in (0.0, math.inf):  # (every update rebuilds; none does)
            assert opt._session.engine.rebuilds == (4 if share == 0.0 else 0)
        assert counts[share] == counts[math.inf]


def test_a_relation_replaced_midway_tells_what_it_held_when_its_journal_started():
    """What a relation held when its journal started (a snapshot), after inserts and deletes
    since — some undone — is the snapshot's tuples: how an update that rebuilds midway tells
    what changed."""
    rel = Relation([(1,), (2,), (3,)])
    rel.journal = {}
    rel.add([(4,), (5,)])
    rel.remove([(1,), (4,)])
    rel.add([(1,)])
    rel.remove([(2,)])
    assert rel.rows_then() == {(1,), (2,), (3,)}
    assert rel.journal is None
    assert Relation([(7,)]).rows_then() == {(7,)}


def test_a_dropped_declarative_optimizer_is_freed_without_the_cyclic_collector():
    """An optimizer holds its session, and the session its optimizers (to hand them its
    evaluations): held strongly both ways they were a reference cycle, and every optimizer a
    program dropped, and its session and engine with it, waited for a full collection (a
    fleet task of 300 queries left about 870,000 cyclic objects a round). Reference counting
    alone frees them now, after an optimization, an update, and once it left a batch's
    session for its own. (Nothing else of theirs is cyclic either: the next test.)"""
    import gc
    import weakref

    q, cat = make_query("chain", 5, 1)
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        opt = Optimizer(q, cat, cost_model="cout", engine="python")
        opt.optimize()
        opt.update([f"card {q.aliases[0]} *2"])
        other = Optimizer(q, cat, cost_model="cout", engine="python")
        optimize_batch([opt, other])  # (one session for both)
        opt.optimize()  # (a session of its own again: it leaves the batch's)
        refs = [weakref.ref(opt), weakref.ref(opt._session), weakref.ref(other)]
        del opt, other
        assert [r() for r in refs] == [None, None, None]
    finally:
        if was:
            gc.enable()


def _optimized_and_updated(read: bool) -> None:
    """Optimize a chain of 8 (a program compiled, its variants' code generated), update it
    twice, reading the relations (the on-demand ones derived) after each step or never, and
    drop it all."""
    q, cat = make_query("chain", 8, 3)
    opt = Optimizer(q, cat, cost_model="cout", engine="python", pruning="all")
    opt.optimize()
    for delta in (f"card {q.aliases[0]} *2", f"card {q.aliases[3]} *0.5"):
        if read:
            opt.relations()
        opt.update(delta)
    if read:
        opt.relations()


@pytest.mark.parametrize("read", [False, True])
def test_a_dropped_optimizer_leaves_no_cyclic_garbage(read):
    """Everything a dropped optimizer held — its session, engine, program (compiled per
    optimizer: its dependency graph, its variants' generated code) and relations, the stale
    on-demand ones among them, read or not — is freed by reference counting: with the
    cyclic collector off, a collection afterwards finds nothing. (Cycles there were: a
    stale relation's ``Pending`` holding the mapping holding the relation, a recursive
    closure per variant generated, networkx's views cached on the graphs they view.) A
    first run is made beforehand: modules imported and caches filled once per process are
    no optimizer's garbage."""
    import gc

    _optimized_and_updated(read)
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        _optimized_and_updated(read)
        assert gc.collect() == 0, sorted({type(o).__name__ for o in gc.garbage})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()


@pytest.mark.parametrize("mode", PRUNED)
@pytest.mark.parametrize("model", ["io", "cout"])
@SETTINGS
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 6), seed=st.integers(0, 2**31),
       k=st.integers(1, 12))
def test_plans_read_after_updates_equal_fresh_plans(mode, model, shape, n, seed, k):
    """The plan tree read after a sequence of deltas (which takes the last plan read's
    subtrees over expressions no delta moved since: ``PlanCache.build_chosen``) is a fresh
    evaluation's under the same statistics, node for node — operators, tie-breaks, rows and
    costs to the bit — whether the plan was read after every step or only after some (the
    last plan read then several updates old), and after cost-factor deltas (nothing taken)."""
    q, cat = make_query(shape, n, seed)
    m, program = cost_model(model), PROGRAMS[mode]
    rng = random.Random(seed)
    session = Session(program, [PlanSpace(q, cat, m)], "python")
    session.optimize().best_plan(0)
    adj = session.ctx[0].adjustments
    for i, d in enumerate(random_deltas(q, rng, k, m.operators)):
        adj = apply_deltas(parse_deltas(d), q, cat, adj, m.operators)
        ev = session.update({0: adj}).evaluation
        if rng.random() < 0.6 or i == k - 1:
            fresh = Session(program, [PlanSpace(q, cat, m, adj)], "python").optimize()
            assert ev.best_plan(0).to_json() == fresh.best_plan(0).to_json(), d
