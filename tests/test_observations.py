"""Observation deltas (issue 20): ``card {A,B} := N`` pins the set's estimate to N.

Expected estimates are computed by hand from the rules (README, "Cardinality estimation");
the property tests use a fresh from-scratch optimizer (or estimator) under the same statistics
as the oracle of every incremental one, over random mixes of corrections and observations.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from randq import make_query, queries, random_deltas
from test_incremental import PROGRAMS, assert_same, from_scratch

from reopt.api import Optimizer
from reopt.cli import main
from reopt.costmodel.cardinality import OBSERVED_SUPERSETS, Adjustments, Estimator
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.deltas import (
    DeltaNotApplicable,
    apply_deltas,
    parse_delta,
    parse_deltas,
)
from reopt.costmodel.errors import DeltaError, ReoptError
from reopt.costmodel.models import cost_model
from reopt.costmodel.query import ColumnRef, JoinPredicate, Query, Relation
from reopt.costmodel.space import PlanSpace
from reopt.incremental.session import Session
from reopt.optimizers.bottomup import bottomup

C = ColumnRef
CAT = Catalog.from_dict({"tables": {
    "a": {"rows": 1000, "columns": {"x": {"distinct": 50}}},
    "b": {"rows": 200, "columns": {"x": {"distinct": 200}, "y": {"distinct": 20}}},
    "c": {"rows": 40, "columns": {"y": {}}},
}})
# a–b: 1/max(50, 200) = 1/200; b–c: c.y has no distinct, so 1/max(20, 40) = 1/40.
# card a = 1000, b = 200, c = 40; {a,b} = 1000; {b,c} = 200; {a,b,c} = 1000; {a,c} = 40,000.
Q = Query("t", (Relation("a", "a"), Relation("b", "b"), Relation("c", "c")),
          joins=(JoinPredicate.of(C("a", "x"), C("b", "x")),
                 JoinPredicate.of(C("b", "y"), C("c", "y"))))
A, B, AB, BC, AC, ABC = 0b001, 0b010, 0b011, 0b110, 0b101, 0b111


def adjust(text: str, policy: str = "keep", adj: Adjustments | None = None) -> Adjustments:
    adj = adj or Adjustments(observed_supersets=policy)
    return apply_deltas(parse_deltas(text), Q, CAT, adj)


def cards(adj: Adjustments) -> dict[int, float]:
    est = Estimator(Q, CAT, adj)
    return {m: est.card(m) for m in (A, B, AB, BC, AC, ABC)}


# -- syntax ---------------------------------------------------------------------------------

def test_text_and_json_forms_mean_the_same():
    d = parse_delta("card {a,b} := 50")
    assert (d.kind, d.target, d.op, d.value, d.observation) == ("card", "{a,b}", ":=", 50, True)
    assert parse_delta("card {a,b}:=50").op == ":="
    as_json = parse_deltas('[{"kind": "card", "target": "{a,b}", "op": ":=", "value": 50}]')
    assert apply_deltas(as_json, Q, CAT, Adjustments(observed_supersets="keep")) == adjust(
        "card {a,b} := 50")
    assert adjust("card {a,b} := 50").observations == {AB: 50}
    # a single relation, with or without braces, by alias or by (unambiguous) table name
    assert adjust("card a := 7") == adjust("card {a} := 7") == adjust("card {A} := 7")
    assert adjust("card a := 7").observations == {A: 7}
    # corrections (=N, *F) are not observations
    assert not parse_delta("card {a,b} =50").observation
    assert adjust("card {a,b} =50").observations == {}


@pytest.mark.parametrize("text, message", [
    ("card {a,b} := -1", "at least 0"),
    ("card {a,b} := nan", "finite"),
    ("card {a,b} := 1_000", "not a number"),
    ("sel a.x=b.x := 0.5", "only cardinalities are observed"),
    ("cost hashjoin := 2", "cost deltas scale"),
    ("card {a,b := 5", "unterminated"),
    ("card {} := 5", "empty relation set"),
])
def test_malformed_observations_are_one_line_errors(text, message):
    with pytest.raises(DeltaError, match=message) as e:
        adjust(text)
    assert "\n" not in str(e.value)


def test_an_observation_of_what_the_query_lacks_is_not_applicable():
    for text in ("card {a,zz} := 5", "card zz := 5"):
        with pytest.raises(DeltaNotApplicable):
            adjust(text)


def test_an_observation_of_zero_rows_is_accepted_and_estimated_as_one():
    adj = adjust("card {a,b} := 0")
    assert adj.observations == {AB: 0} and cards(adj)[AB] == 1.0


def test_the_superset_policy_is_checked():
    with pytest.raises(ValueError, match="observed_supersets"):
        Adjustments(observed_supersets="largest")
    with pytest.raises(ReoptError, match="observed_supersets policy 'largest'"):
        Optimizer("tpch:q3", optimizer="topdown", observed_supersets="largest")
    # the default, chosen by benchmarks/observe_loop.py (BENCHMARKS.md)
    assert Optimizer("tpch:q3", optimizer="topdown").adjustments.observed_supersets == "propagate"


# -- estimator semantics (hand-computed) -------------------------------------------------------

def test_keep_pins_the_observed_set_and_leaves_every_other_estimate():
    before = cards(Adjustments())
    assert before == {A: 1000, B: 200, AB: 1000, BC: 200, AC: 40_000, ABC: 1000}
    adj = adjust("card {a,b} := 50")
    assert cards(adj) == {**before, AB: 50}
    # corrections on subsets (and the set itself) never move it; they still reach supersets
    adj = adjust("card {a} *0.5; card {a,b} *3; card b *2", adj=adj)
    got = cards(adj)
    assert got[AB] == 50
    assert math.isclose(got[ABC], 1000 * 0.5 * 3 * 2)  # b's rows double: {b,c} and ABC too
    assert math.isclose(got[A], 500)
    # observed again: replaced, never combined
    adj = adjust("card {a,b} := 70", adj=adj)
    assert cards(adj)[AB] == 70 and adj.observations == {AB: 70}
    # an observed leaf: its estimate (and the one reported as the relation's) is the observation
    adj = adjust("card a := 9", adj=adj)
    est = Estimator(Q, CAT, adj)
    assert est.card(A) == 9 and est.leaf_card("a") == 9 and est.card(AB) == 70


def test_observations_are_clamped_to_one_row_and_the_cross_product():
    adj = adjust("card {a,b} := 1e9; card c := 0.5")
    got = cards(adj)
    assert got[AB] == 1000 * 200  # the product of the rows before filters
    assert Estimator(Q, CAT, adj).card(0b100) == 1.0  # half a row observed: 1 row
    # a later change of the tables' rows clamps the observation anew; undone, it is back
    adj = adjust("card a =10", adj=adj)
    assert cards(adj)[AB] == 10 * 200
    adj = adjust("card a =1000", adj=adj)
    assert cards(adj)[AB] == 1000 * 200 and adj.observations[AB] == 1e9


def test_propagate_corrects_supersets_by_the_largest_disjoint_observed_subsets():
    adj = adjust("card {a,b} := 50", "propagate")
    got = cards(adj)
    assert got[AB] == 50 and math.isclose(got[ABC], 1000 * 50 / 1000)
    assert got[BC] == 200 and got[AC] == 40_000  # not supersets of {a,b}
    # {b,c} ties with {a,b} in size; the smaller mask ({a,b}) is taken first, {b,c} overlaps it
    adj = adjust("card {b,c} := 20", adj=adj)
    assert math.isclose(cards(adj)[ABC], 50)
    # a leaf observation: {a,c} (a cross product) takes it; ABC already took {a,b}
    adj = adjust("card a := 10", adj=adj)
    got = cards(adj)
    assert math.isclose(got[AC], 40_000 * 10 / 1000) and math.isclose(got[ABC], 50)
    # a correction on a subset of the picked {a,b} is in raw(ABC) and raw({a,b}): it cancels
    adj = adjust("card {a} *4", adj=adj)
    got = cards(adj)
    assert math.isclose(got[ABC], 50) and got[AB] == 50
    # disjoint subsets multiply: c observed too, {a,b} and {c} together correct ABC
    adj = adjust("card c := 4", "propagate", adjust("card {a,b} := 50", "propagate"))
    assert math.isclose(cards(adj)[ABC], 1000 * (50 / 1000) * (4 / 40))


def test_a_correction_to_n_is_solved_against_the_estimate_in_force():
    """``card {…} =N`` still makes the set's estimate N given everything in force, observed
    subsets under ``propagate`` included; on an observed set the observation wins."""
    adj = adjust("card {a,b} := 50; card {a,b,c} =300", "propagate")
    got = cards(adj)
    assert math.isclose(got[ABC], 300) and math.isclose(adj.corrections[ABC], 6)
    adj = adjust("card {a,b} := 50; card {a,b} =300", "keep")
    assert cards(adj)[AB] == 50 and math.isclose(cards(adj)[ABC], 300)


@pytest.mark.parametrize("policy", OBSERVED_SUPERSETS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 6), seed=st.integers(0, 2**31), k=st.integers(1, 15))
def test_moved_masks_name_every_set_whose_estimate_changed(policy, qc, seed, k):
    """Every estimate outside the supersets of :meth:`moved_masks` is unchanged (what every
    incremental optimizer relies on), and a derived estimator equals a fresh one, bit for bit;
    the observed sets' estimates are exactly their observations, clamped."""
    q, cat = qc
    ops = cost_model("io").operators
    masks = range(1, 1 << q.n)
    adj = Adjustments(observed_supersets=policy)
    est = Estimator(q, cat, adj)
    old = {m: est.card(m) for m in masks}
    for text in random_deltas(q, random.Random(seed), k, ops, observe=True):
        adj = apply_deltas(parse_deltas(text), q, cat, adj, ops)
        derived = Estimator(q, cat, adj, previous=est)
        fresh = Estimator(q, cat, adj)
        moved = derived.moved_masks(est)
        new = {m: fresh.card(m) for m in masks}
        for m in masks:
            assert derived.card(m) == new[m], (text, m)
            if not any(t & m == t for t in moved):
                assert new[m] == old[m], (text, m)
        for t, n in adj.observations.items():
            assert new[t] == min(max(n, 1.0), fresh.ceiling(t))
        est, old = derived, new


# -- every optimizer: incremental == from scratch ---------------------------------------------

PROCEDURAL = ("topdown", "bottomup", "topdown-inc", "bottomup-inc")


@pytest.mark.parametrize("policy", OBSERVED_SUPERSETS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 6), model=st.sampled_from(["cout", "io"]), seed=st.integers(0, 2**31),
       k=st.integers(1, 12), batch=st.integers(1, 3))
def test_every_procedural_optimizer_matches_a_fresh_one(policy, qc, model, seed, k, batch):
    """After each batch of a random mix of corrections and observations, every optimizer
    (through :meth:`Optimizer.update`) finds the cost a fresh from-scratch ``bottomup`` finds
    under the same statistics (``bottomup-inc`` and ``bottomup`` to the bit; ``topdown``'s
    bounds round, see tests/test_incremental_procedural.py)."""
    q, cat = qc
    opts = {name: Optimizer(q, cat, cost_model=model, optimizer=name, observed_supersets=policy)
            for name in PROCEDURAL}
    for o in opts.values():
        o.optimize()
    deltas = random_deltas(q, random.Random(seed), k, cost_model(model).operators, observe=True)
    for i in range(0, len(deltas), batch):
        steps = {name: o.update(deltas[i:i + batch]) for name, o in opts.items()}
        adj = opts["topdown"].adjustments
        assert adj.observed_supersets == policy
        oracle = bottomup(PlanSpace(q, cat, cost_model(model), adj)).cost
        for name, step in steps.items():
            assert opts[name].adjustments == adj
            if name.startswith("bottomup"):
                assert step.cost == oracle, (name, deltas[:i + batch])
            else:
                assert math.isclose(step.cost, oracle, rel_tol=1e-9), (name, deltas[:i + batch])


@pytest.mark.parametrize("policy", OBSERVED_SUPERSETS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 4), seed=st.integers(0, 2**31), k=st.integers(1, 8))
def test_exhaustive_agrees(policy, qc, seed, k):
    """The exhaustive optimizer (every plan tree) under observations: the same optimum."""
    q, cat = qc
    ex = Optimizer(q, cat, cost_model="cout", optimizer="exhaustive", observed_supersets=policy)
    ex.optimize()
    for text in random_deltas(q, random.Random(seed), k, cost_model("cout").operators,
                              observe=True):
        cost = ex.update(text).cost
        oracle = bottomup(PlanSpace(q, cat, cost_model("cout"), ex.adjustments)).cost
        assert math.isclose(cost, oracle, rel_tol=1e-9), text


@pytest.mark.parametrize("policy", OBSERVED_SUPERSETS)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(["chain", "star", "cycle", "clique", "random"]),
       n=st.integers(2, 5), seed=st.integers(0, 2**31), model=st.sampled_from(["cout", "io"]),
       k=st.integers(1, 10), batch=st.integers(1, 3))
def test_declarative_maintenance_matches_a_from_scratch_evaluation(policy, shape, n, seed,
                                                                  model, k, batch):
    """The declarative optimizer's maintained relations (python engine, pruning ``all``) equal
    a from-scratch evaluation under the same statistics, every relation, after each batch."""
    q, cat = make_query(shape, n, seed)
    m = cost_model(model)
    program = PROGRAMS["all"]
    adj = Adjustments(observed_supersets=policy)
    session = Session(program, [PlanSpace(q, cat, m, adj)], "python")
    session.optimize()
    deltas = random_deltas(q, random.Random(seed), k, m.operators, observe=True)
    for i in range(0, len(deltas), batch):
        adj = apply_deltas([d for t in deltas[i:i + batch] for d in parse_deltas(t)], q, cat,
                           adj, m.operators)
        res = session.update({0: adj})
        fresh = PlanSpace(q, cat, m, adj)
        assert_same(session, from_scratch(program, [fresh]))
        assert res.evaluation.best_cost(0) == bottomup(fresh).cost


def test_a_rejected_observation_leaves_the_optimizer_as_it_was():
    o = Optimizer("tpch:q5", cost_model="cout", optimizer="bottomup-inc")
    o.optimize()
    o.update("card {orders,lineitem} := 5")
    before = o.adjustments
    with pytest.raises(DeltaError):
        o.update("card {orders,lineitem} := 7; card {orders,nowhere} := 3")
    assert o.adjustments is before
    assert o.update("card {orders,lineitem} := 5").cost == o.optimize().cost


def test_the_cli_takes_observations_and_the_policy(capsys):
    import json

    args = ["optimize", "tpch:q3", "--cost-model", "cout", "--optimizer", "bottomup", "--json",
            "--delta", "card {orders,lineitem} := 3"]
    costs = {}
    for policy in OBSERVED_SUPERSETS:
        assert main([*args, "--observed-supersets", policy]) == 0
        out = json.loads(capsys.readouterr().out)["queries"][0]
        costs[policy] = out["steps"][0]["cost"]
    # Q3 is customer–orders–lineitem: keep leaves the 3-way join's estimate; propagate
    # scales it by 3/est({orders,lineitem}), so the plans' costs differ
    o = Optimizer("tpch:q3", cost_model="cout", optimizer="bottomup")
    for policy in OBSERVED_SUPERSETS:
        o.adjustments = o.check("card {orders,lineitem} := 3").with_policy(policy)
        assert o.optimize().cost == costs[policy]
    assert costs["keep"] != costs["propagate"]
    assert main([*args, "--observed-supersets", "largest"]) == 2
    assert "invalid choice: 'largest'" in capsys.readouterr().err


def test_a_table_under_several_aliases_must_be_observed_by_alias():
    q = Query("t", (Relation("a1", "a"), Relation("a2", "a"), Relation("b", "b")),
              joins=(JoinPredicate.of(C("a1", "x"), C("b", "x")),
                     JoinPredicate.of(C("a2", "x"), C("b", "x"))))
    with pytest.raises(DeltaError, match="ambiguous.*a1, a2"):
        apply_deltas(parse_deltas("card a := 5"), q, CAT, Adjustments())
    adj = apply_deltas(parse_deltas("card a2 := 5; card {a1,b} := 6"), q, CAT, Adjustments())
    assert adj.observations == {0b010: 5, 0b101: 6}


def test_changing_the_policy_moves_every_observed_set():
    """An estimator derived under the other policy re-estimates the observed sets' supersets
    and equals a fresh one (what an optimizer switching policies would rely on)."""
    keep = adjust("card {a,b} := 50; card c := 4")
    old = Estimator(Q, CAT, keep)
    before = {m: old.card(m) for m in range(1, 8)}
    derived = Estimator(Q, CAT, keep.with_policy("propagate"), previous=old)
    assert set(derived.moved_masks(old)) == {AB, 0b100}
    fresh = Estimator(Q, CAT, keep.with_policy("propagate"))
    assert all(derived.card(m) == fresh.card(m) for m in range(1, 8))
    assert derived.card(ABC) != before[ABC]
    assert math.isclose(derived.card(ABC), 1000 * (50 / 1000) * (4 / 40))
