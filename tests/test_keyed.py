"""Reading a few keys of a stale on-demand relation (``evaluator/keyed.py``): the plan tree
reads the selected plans of its own OR nodes, derived for those alone, and BestPlan stays
stale — so an update does not follow it.

The oracle is the plain python engine evaluating the shipped rules without their
``.ondemand`` declarations (every stratum derived in place, in order) under the same
statistics; keys are compared for every OR node of the query, not only the plan's.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from randq import SHAPES, applied, make_query, random_deltas
from rulefiles import eager_program, eager_rules, edited_rules

from reopt.api import Optimizer
from reopt.costmodel.models import cost_model
from reopt.costmodel.space import PlanSpace
from reopt.evaluator.driver import evaluate, load_program
from reopt.evaluator.keyed import key_sources, reader
from reopt.evaluator.ondemand import Stale
from reopt.evaluator.python_engine import PythonEngine
from reopt.incremental.session import Session

MODES = ("none", "aggsel", "aggsel+bound", "all")
SHIPPED = {m: load_program(pruning=m) for m in MODES}
EAGER = {m: eager_program(m) for m in MODES}


def from_scratch(program, space: PlanSpace) -> dict[str, set[tuple]]:
    rels, _ = PythonEngine(program, {0: space}).evaluate({"Expr": [(0, *space.root)]})
    return {p: r.rows for p, r in rels.items()}


def by_key(rows: set[tuple], width: int) -> dict[tuple, set[tuple]]:
    out: dict[tuple, set[tuple]] = {}
    for r in rows:
        out.setdefault(r[:width], set()).add(r)
    return out


def assert_keys_read(rels, pred: str, want: dict[str, set[tuple]], width: int) -> None:
    """Every OR node's key (and one no tuple has) read from ``rels[pred]`` gives the
    oracle's tuples of that key, and the relation is still stale afterwards."""
    rel = rels[pred]
    assert type(rel) is Stale
    read = reader(rel, pred, width)
    expected = by_key(want[pred], width)
    keys = {r[:width] for r in want["SearchSpace"]} | set(expected) | {(0, 0, "")}
    for key in keys:
        assert set(read(key)) == expected.get(key, set()), key
    assert type(rel) is Stale


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), n=st.integers(3, 6), seed=st.integers(0, 2**31),
       model=st.sampled_from(["io", "cout"]), mode=st.sampled_from(MODES),
       k=st.integers(2, 5), save=st.integers(-1, 4))
def test_the_plan_read_by_key_equals_from_scratch_and_leaves_it_stale(shape, n, seed, model,
                                                                     mode, k, save):
    """Random delta sequences: after the optimization and after each update, BestPlan is
    stale; read by key, each OR node's selected plans are a from-scratch evaluation's; the
    plan tree equals the one built from a from-scratch BestPlan; and reading the plan leaves
    BestPlan stale, so no update follows it."""
    # (no pruning at all on 5-6 relations can mean millions of plans under `io`: minutes and
    # gigabytes a draw, as the engine benchmark's `none` budget says)
    assume(mode != "none" or n <= 4)
    m = cost_model(model)
    q, cat = make_query(shape, n, seed)
    deltas = random_deltas(q, random.Random(seed), k, m.operators)
    start = Session(SHIPPED[mode], [PlanSpace(q, cat, m)], "python")
    start.optimize()
    want = from_scratch(EAGER[mode], start.ctx[0])
    assert_keys_read(start.evaluation.relations, "BestPlan", want, 3)
    for _, session, adj, _ in applied(start, q, cat, m, deltas, save):
        session.update({0: adj})
        space = PlanSpace(q, cat, m, adj)
        eager = evaluate([space], "python", program=EAGER[mode])
        assert session.evaluation.best_plan(0) == eager.best_plan(0)
        want = {p: r.rows for p, r in eager.relations.items()}
        assert_keys_read(session.evaluation.relations, "BestPlan", want, 3)
    assert session.engine.on_demand.followed == 0


EXTRA = """
Pair(q, e, p, i, c) :- PlanCost(q, e, p, i, _, _, _, _, _, _, _, c), BestCost(q, e, p, c).
Pair(q, e, p, 0, c) :- BestCost(q, e, p, c), c > 100.
"""


def test_a_relation_of_two_rules_read_by_key(tmp_path):
    """A user's on-demand relation of two rules (the key bound by another atom in each) read
    by key equals the oracle's; strata that cannot be derived one key at a time are read
    whole."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    program = load_program(edited_rules(tmp_path / "a", extra=EXTRA + ".ondemand Pair.\n"),
                           pruning="all")
    oracle = load_program(eager_rules(tmp_path / "b", extra=EXTRA), pruning="all")
    o = Optimizer("tpch:q5", cost_model="io", engine="python", pruning="all", program=program)
    o.optimize()
    for delta in ("card orders *4", "card customer *0.25", "cost hashjoin *2"):
        o.update(delta)
        want = from_scratch(oracle, o.space())
        assert_keys_read(o._evaluation.relations, "Pair", want, 3)
        assert_keys_read(o._evaluation.relations, "BestPlan", want, 3)
    assert key_sources(program, "Pair", 3) is not None
    for pred in ("Bound", "MaxBound", "BestCost", "SearchSpace"):  # recursive, aggregates,
        assert key_sources(program, pred, 3) is None  # scheduled, pruned, not on demand
    rels = o._evaluation.relations
    assert type(rels["Bound"]) is Stale
    assert set(reader(rels["Bound"], "Bound", 3)((0, 0, ""))) == set()
    assert type(rels["Bound"]) is not Stale  # (read whole)


@pytest.mark.parametrize("mode", ["aggsel", "all"])
def test_the_plan_of_an_optimizer_is_read_without_deriving_bestplan(mode):
    """Optimizer.optimize() and update() read the plan by key: BestPlan stays stale and no
    update follows it; the plan is a from-scratch evaluation's."""
    o = Optimizer("tpch:q5", cost_model="io", engine="python", pruning=mode)
    o.optimize()
    engine = o._session.engine
    for delta in ("card orders *4", "card customer *0.25"):
        step = o.update(delta)
        assert type(engine.live["BestPlan"]) is Stale
        eager = evaluate([o.space()], "python", program=EAGER[mode])
        assert step.plan == eager.best_plan(0)
    assert engine.on_demand.followed == 0 and engine.on_demand.strata == 0
