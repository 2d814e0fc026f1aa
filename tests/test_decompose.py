"""Decomposability (issue 19): the check that lets a fleet run one task per partition of
queries, and what it promises — a batch evaluated together equals its queries evaluated
alone (the plain python engine from scratch is the oracle) — plus saved states: a session or
optimizer saved and loaded continues exactly as the uninterrupted one."""

from __future__ import annotations

import pickle
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from randq import SHAPES, make_query, random_deltas
from rulefiles import edited_rules

from reopt.api import Optimizer
from reopt.costmodel.deltas import apply_deltas, parse_deltas
from reopt.costmodel.errors import ReoptError
from reopt.costmodel.models import cost_model
from reopt.costmodel.space import PlanSpace
from reopt.evaluator.decompose import decomposition
from reopt.evaluator.driver import PRUNING_MODES, load_program
from reopt.evaluator.python_engine import PythonEngine
from reopt.incremental.session import Session

SETTINGS = settings(max_examples=12, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("mode", PRUNING_MODES)
def test_the_shipped_rules_are_decomposable_by_query(mode):
    d = decomposition(load_program(pruning=mode))
    assert d.decomposable, d.reason
    assert {"Goal", "SearchSpace", "PlanCost", "BestCost", "Expr"} <= d.partitioned
    assert d.replicated == {"JoinMethod", "ScanMethod", "EnforcerMethod", "FinalMethod"}


@pytest.mark.parametrize("extra, why", [
    # a rule joining two queries' OR nodes
    ("Pair(q, e) :- Goal(q, e, _), Goal(r, e, _), r != q.", "Goal(r, e, _)"),
    # a head tied to one query id
    ("Fixed(1, e) :- Goal(q, e, _).", "first column"),
    # a built-in asked about another query's plan space
    ("Rows(q, m) :- Goal(q, e, _), Goal(r, e, _), Fn_scansummary(r, e, m).",
     "Goal(r, e, _)"),
    ("Rows(q, m) :- Goal(q, e, _), Fn_scansummary(e, e, m).", "built-in Fn_scansummary"),
    # a fact of a partitioned relation belongs to one query of a batch
    ('Goal(0, 1, "any").', "relation Goal"),
])
def test_rules_mixing_queries_are_not_decomposable(tmp_path, extra, why):
    d = decomposition(load_program(edited_rules(tmp_path, extra=extra), "all"))
    assert not d.decomposable
    assert why in d.reason
    if "relation" not in why:
        assert "extra.dl:1" in d.reason


def test_arithmetic_built_ins_need_no_query_id(tmp_path):
    rule = "Twice(q, e, c) :- BestCost(q, e, _, b), Fn_sum(b, b, 0.0, c)."
    assert decomposition(load_program(edited_rules(tmp_path, extra=rule), "all")).decomposable


def relations_of(rels, q: int, relabel: int = 0) -> dict[str, set[tuple]]:
    """Query ``q``'s tuples of a decomposable evaluation, its query id set to ``relabel``;
    the replicated fact relations as they are."""
    out = {}
    for p, r in rels.items():
        rows = r.rows
        if p.endswith("Method"):
            out[p] = set(rows)
        else:
            out[p] = {(relabel, *t[1:]) for t in rows if t[0] == q}
    return out


@pytest.mark.parametrize("mode", ["none", "all"])
@SETTINGS
@given(seeds=st.lists(st.integers(0, 2**31), min_size=2, max_size=4),
       shapes=st.lists(st.sampled_from(SHAPES), min_size=4, max_size=4))
def test_a_batch_evaluates_as_its_queries_alone(mode, seeds, shapes):
    """What decomposability promises, checked on the engine: the batch's relations, query by
    query, are those of evaluating each query alone."""
    program = load_program(pruning=mode)
    spaces = [PlanSpace(*make_query(shapes[i], 2 + s % 4, s), cost_model("cout"))
              for i, s in enumerate(seeds)]
    ctx = dict(enumerate(spaces))
    together, _ = PythonEngine(program, ctx).evaluate(
        {"Expr": [(q, *s.root) for q, s in ctx.items()]})
    for q, s in ctx.items():
        alone, _ = PythonEngine(program, {0: s}).evaluate({"Expr": [(0, *s.root)]})
        assert relations_of(together, q) == relations_of(alone, 0)


def rows(session: Session) -> dict[str, set[tuple]]:
    return {p: set(r.rows) for p, r in session.evaluation.relations.items()}


@pytest.mark.parametrize("mode", ["aggsel", "all"])
@SETTINGS
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 5), seed=st.integers(0, 2**31),
       cut=st.integers(0, 3))
def test_a_saved_session_continues_as_the_uninterrupted_one(tmp_path_factory, mode, shape, n,
                                                            seed, cut):
    """Save after ``cut`` of four delta steps, load (the program compiled again from its
    source), go on: every later step's relations equal the uninterrupted session's, and
    those equal a from-scratch evaluation's."""
    q, cat = make_query(shape, n, seed)
    m = cost_model("io")
    program = load_program(pruning=mode)
    steps = [[d] for d in random_deltas(q, random.Random(seed), 4, m.operators)]
    a = Session(program, [PlanSpace(q, cat, m)], "python")
    a.optimize()
    adj = a.ctx[0].adjustments
    b = None
    for i, batch in enumerate(steps):
        if i == cut:
            path = tmp_path_factory.mktemp("saved")
            a.save(path)
            b = Session.load(path)
            assert b.program is not program and b.program.source == program.source
        adj = apply_deltas([d for t in batch for d in parse_deltas(t)], q, cat, adj,
                           m.operators)
        a.update({0: adj})
        if b is not None:
            b.update({0: adj})
            assert rows(b) == rows(a)
    fresh = Session(program, [PlanSpace(q, cat, m, adj)], "python")
    fresh.optimize()
    assert rows(a) == rows(fresh)


def test_a_saved_optimizer_resumes(tmp_path):
    o = Optimizer("tpch:q5", engine="python", cost_model="cout")
    o.optimize()
    o.update("card orders *4")
    o.save(tmp_path / "o")
    back = Optimizer.load(tmp_path / "o")
    assert back.adjustments == o.adjustments
    s1, s2 = o.update("card lineitem *0.25"), back.update("card lineitem *0.25")
    fresh = Optimizer("tpch:q5", engine="python", cost_model="cout")
    fresh.adjustments = fresh.check(["card orders *4", "card lineitem *0.25"])
    assert s1.cost == s2.cost == fresh.optimize().cost
    assert s2.metrics["incremental"]


def test_saved_states_refuse_what_they_are_not(tmp_path):
    o = Optimizer("tpch:q3", engine="python", cost_model="cout")
    o.optimize()
    o.save(tmp_path / "o")
    with pytest.raises(ReoptError, match="holds a saved optimizer, not a session"):
        Session.load(tmp_path / "o")
    with pytest.raises(ReoptError, match="cannot read a saved state"):
        Optimizer.load(tmp_path / "missing")
    (tmp_path / "o" / "state.pkl").write_bytes(pickle.dumps({"format": 99}))
    with pytest.raises(ReoptError, match="format 99"):
        Optimizer.load(tmp_path / "o")
    (tmp_path / "o" / "state.pkl").write_bytes(b"not a pickle")
    with pytest.raises(ReoptError, match="not a saved reopt state"):
        Optimizer.load(tmp_path / "o")
    spark = Optimizer("tpch:q3", engine="spark", cost_model="cout")
    with pytest.raises(ReoptError, match="python engine"):
        spark.save(tmp_path / "s")
