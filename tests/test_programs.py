"""Rule programs loaded apart share one compilation (``driver.load_program``): the variants,
the code generated for them and the structures read off the program, but not their identity
(batches), a budget of their own, nor rules edited since."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from randq import SHAPES, make_query, random_deltas
from rulefiles import USER_RULES, edited_rules
from test_incremental import assert_same, from_scratch

from reopt.api import Optimizer, optimize_batch
from reopt.costmodel.builtins import BUILTINS
from reopt.costmodel.deltas import apply_deltas, parse_deltas
from reopt.costmodel.models import cost_model
from reopt.costmodel.space import PlanSpace
from reopt.evaluator.budget import Budget, BudgetError
from reopt.evaluator.compiler import compile_program
from reopt.evaluator.driver import INPUTS, PRUNING_MODES, load_program, rule_files
from reopt.evaluator.parser import parse_files
from reopt.incremental.session import Session


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 5), seed=st.integers(0, 2**31),
       k=st.integers(1, 8), model=st.sampled_from(["io", "cout"]))
def test_programs_loaded_apart_share_one_compilation_exactly(shape, n, seed, k, model):
    """Rules loaded apart give program objects of their own (batched apart by
    ``optimize_batch``) that share one compilation: the variants, the code generated for
    them and the structures read off the program (the maintenance plan and its cut
    variants). Two sessions of different queries, one on each, updated in turn, each hold
    after every step exactly what a from-scratch evaluation of a program compiled apart
    (nothing shared) holds."""
    mine, theirs = load_program(pruning="all"), load_program(pruning="all")
    assert mine is not theirs and mine.strata is theirs.strata
    assert mine.derived is theirs.derived
    apart = compile_program(parse_files(rule_files()), BUILTINS, INPUTS, PRUNING_MODES["all"])
    m = cost_model(model)
    rng = random.Random(seed)
    made = [make_query(shape, n, seed), make_query(SHAPES[seed % len(SHAPES)], 7 - n, seed + 1)]
    sessions, adjs = [], []
    for program, (q, cat) in zip((mine, theirs), made, strict=True):
        space = PlanSpace(q, cat, m)
        sessions.append(Session(program, [space], "python"))
        sessions[-1].optimize()
        adjs.append(space.adjustments)
    for step in range(k):
        i = step % 2
        q, cat = made[i]
        delta = random_deltas(q, rng, 1, m.operators)
        adjs[i] = apply_deltas(parse_deltas(delta[0]), q, cat, adjs[i], m.operators)
        sessions[i].update({0: adjs[i]})
        for (q, cat), session, adj in zip(made, sessions, adjs, strict=True):
            assert_same(session, from_scratch(apart, [PlanSpace(q, cat, m, adj)]))


def test_a_program_loaded_with_a_budget_reads_its_own_structures(tmp_path):
    """A budget of its own gives a program its own structures (the complete layer's program
    carries the budget); optimizers that load their rules apart are still optimized apart;
    rules edited since the last load are compiled again."""
    opt = Optimizer("tpch:q5", cost_model="cout", engine="python", pruning="all")
    opt.optimize()
    opt.update("card {nation,region} *0.125")  # (the structures read off the program made)
    small = load_program(pruning="all", budget=Budget(max_tuples=50))
    assert small.derived is not load_program(pruning="all").derived
    with pytest.raises(BudgetError, match="more than the budget of 50"):
        Optimizer("tpch:q5", cost_model="cout", engine="python", program=small).optimize()
    apart = optimize_batch([Optimizer(name, cost_model="cout", engine="python", pruning="all")
                            for name in ("tpch:q3", "tpch:q5")])  # (each loads its rules)
    assert [s.metrics["batch_queries"] for s in apart] == [1, 1]
    rules = edited_rules(tmp_path)
    before = load_program(rules, "all")
    (rules / "extra.dl").write_text(USER_RULES)
    after = load_program(rules, "all")
    assert "Asked" in after.schemas and "Asked" not in before.schemas
