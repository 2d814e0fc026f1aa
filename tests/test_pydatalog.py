"""The pyDatalog cross-check: the rules, translated mechanically from the AST to pyDatalog and
evaluated by pyDatalog, give the same BestCost for every (expression, property) as our python
engine -- exactly: same tuples, same types, floats equal bit for bit."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pyDatalog import pyEngine
from randq import SHAPES, make_query
from rulefiles import edited_rules

from reopt.api import Optimizer
from reopt.costmodel.models import cost_model
from reopt.costmodel.space import PlanSpace
from reopt.evaluator.driver import evaluate, load_program
from reopt.evaluator.pydatalog_check import (
    pydatalog_best_costs,
    pydatalog_relations,
    translate,
)

PROGRAM = load_program()
TREES = 20_000
RELATIONS = ("Goal", "SearchSpace", "PlanCost", "BestCost", "BestPlan")


def exact(rows: set[tuple]) -> set[tuple]:
    """Rows with every value tagged by its type, floats by their bits: equality is identity."""
    return {
        tuple((type(v).__name__, v.hex() if isinstance(v, float) else v) for v in row)
        for row in rows
    }


def check(spaces: list[PlanSpace], program=PROGRAM) -> set[tuple]:
    want = evaluate(spaces, program=program).rows("BestCost")
    got = pydatalog_best_costs(program, dict(enumerate(spaces)))
    assert exact(got) == exact(want)
    roots = {(q, *s.root) for q, s in enumerate(spaces)}
    assert roots <= {r[:3] for r in got}
    return got


def random_space(shape: str, n: int, seed: int, model: str) -> PlanSpace:
    q, cat = make_query(shape, n, seed)
    return PlanSpace(q, cat, cost_model(model))


@pytest.mark.parametrize("model", ["io", "cout"])
def test_tpch_q3_every_relation_is_identical(model):
    space = Optimizer("tpch:q3", cost_model=model).space()
    ev = evaluate([space], program=PROGRAM)
    got = pydatalog_relations(PROGRAM, {0: space}, RELATIONS)
    for pred in RELATIONS:
        assert exact(got[pred]) == exact(ev.rows(pred)), pred
    assert len(got["BestCost"]) == space.size()["or_nodes"]


@pytest.mark.parametrize("model", ["io", "cout"])
@pytest.mark.parametrize("shape", SHAPES)
def test_four_relations_every_shape(shape, model):
    check([random_space(shape, 4, 7, model)])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 4), seed=st.integers(0, 2**31),
       model=st.sampled_from(["io", "cout"]))
def test_random_queries(shape, n, seed, model):
    space = random_space(shape, n, seed, model)
    # pyDatalog's time grows with PlanCost, one row per distinct plan-tree cost (no pruning):
    # ~2-3 s at 20,000 trees, ~25 s at 200,000 (some 4-relation io cliques)
    assume(space.count_trees(limit=TREES) <= TREES)
    check([space])


def test_batch_of_queries_in_one_evaluation():
    spaces = [Optimizer("tpch:q3", cost_model="io").space(),
              random_space("cycle", 3, 11, "cout"), random_space("star", 3, 5, "io")]
    got = check(spaces)
    assert {r[0] for r in got} == {0, 1, 2}


# --- the translation is of the program, not of R1-R10 ----------------------------------------


def test_max_instead_of_min_in_r9(tmp_path):
    rules = edited_rules(tmp_path, "BestCost(q, expr, prop, min<cost>)",
                         "BestCost(q, expr, prop, max<cost>)")
    space = Optimizer("tpch:q3", cost_model="io").space()
    worst = check([space], load_program(rules))
    assert exact(worst) != exact(pydatalog_best_costs(PROGRAM, {0: space}))


EXTRA = """
Joined(q, expr, prop) :- Goal(q, expr, prop), !SearchSpace(q, expr, prop, _, "scan", _, _, _, _, _),
    1 < expr.
Cheap(q, expr, c) :- BestCost(q, expr, "any", c), c <= 100000.0, 0 = 0.
Never(q, expr) :- Goal(q, expr, _), 1 = 2.
Top(q, max<c>) :- BestCost(q, _, _, c).
Most(max<c>) :- BestCost(_, _, _, c).
Two(q, max<c>) :- BestCost(q, 1, _, c).
Two(q, max<c>) :- BestCost(q, 2, _, c).
"""


def test_negation_comparisons_constants_and_aggregates(tmp_path):
    program = load_program(edited_rules(tmp_path, extra=EXTRA))
    space = Optimizer("tpch:q3", cost_model="io").space()
    preds = ("Joined", "Cheap", "Never", "Top", "Most", "Two", "BestCost")
    got = pydatalog_relations(program, {0: space}, preds)
    ev = evaluate([space], program=program)
    for pred in preds:
        assert exact(got[pred]) == exact(ev.rows(pred)), pred
    # a head aggregate is over the union of the relation's rules: one group, the larger value
    assert got["Joined"] and got["Cheap"] and not got["Never"] and len(got["Two"]) == 1


def test_deleting_the_enforcer_rule(tmp_path):
    rules = edited_rules(tmp_path, "Enforce: SearchSpace(", "NoEnforce(")
    program = load_program(rules)
    space = Optimizer("tpch:q3", cost_model="io").space()
    check([space], program)
    got = pydatalog_relations(program, {0: space}, ("SearchSpace",))["SearchSpace"]
    assert got and not any(r[4] == "sort" for r in got)


def test_translation_text():
    text = translate(PROGRAM)
    assert ("Agg_in_BestCost(V_q, V_expr, V_prop, V_cost) <= "
            "PlanCost(V_q, V_expr, V_prop, W_1, W_2, W_3, W_4, W_5, W_6, W_7, W_8, V_cost)"
            ) in text
    fn = "Agg_BestCost[V__key0, V__key1, V__key2]"
    assert (f"({fn} == min_(V__value, order_by=V__value)) <= "
            "Agg_in_BestCost(V__key0, V__key1, V__key2, V__value)") in text
    assert f"BestCost(V__key0, V__key1, V__key2, V__value) <= ({fn} == V__value)" in text
    assert "(V__6 == ((V_bound - V_rCost) - V_localCost))" in text  # rules/bounds.dl, r1
    assert "Fn_isleaf(V_q, V_expr, False) & JoinMethod(V_phyOp)" in text
    assert "& Fn_sum(V_localCost, V_lCost, V_rCost, V_cost)" in text


# --- pyDatalog's global state ------------------------------------------------------------------


def test_repeatable_and_leaves_pydatalog_settings_alone():
    space = Optimizer("tpch:q3", cost_model="cout").space()
    precision, resolvers = pyEngine.Float_Precision, dict(pyEngine.Python_resolvers)
    first = pydatalog_best_costs(PROGRAM, {0: space})
    second = pydatalog_best_costs(PROGRAM, {0: space})
    assert exact(first) == exact(second)
    assert pyEngine.Float_Precision == precision
    assert pyEngine.Python_resolvers == resolvers


def test_pydatalog_default_float_rounding_would_change_costs(monkeypatch):
    """Why the check turns pyDatalog's float rounding off: with its default (8 significant
    digits) the stored costs are no longer the costs our engines compute."""
    monkeypatch.setattr(pyEngine, "Float_Precision", 8)
    space = Optimizer("tpch:q3", cost_model="io").space()
    costs = [r[3] for r in pydatalog_best_costs(PROGRAM, {0: space})]
    assert any(pyEngine.Term_of(c).id != c for c in costs)
