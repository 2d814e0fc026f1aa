"""Bounds that prune (rules/bounds.dl, ``Seed``): a seed bound known before costing rejects
plans while they are costed, and the optimum stays exact — on one evaluation, in a session
whose updates move the bound, and with rules whose space lacks the seed's plan."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from randq import SHAPES, make_query, random_deltas
from rulefiles import edited_rules
from ways import way

from reopt.api import Optimizer
from reopt.costmodel.cardinality import Adjustments
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.deltas import apply_deltas, parse_deltas
from reopt.costmodel.errors import ReoptError
from reopt.costmodel.models import cost_model
from reopt.costmodel.space import PlanSpace
from reopt.evaluator.driver import evaluate, load_program
from reopt.evaluator.maintenance import MaintainedEngine
from reopt.incremental.session import Session
from reopt.optimizers.bottomup import bottomup
from reopt.optimizers.topdown import topdown

# A chain A - B - C under cout (a scan costs 0, a join its output rows). A.x = B.x matches
# every pair (one distinct value each side): |AB| = 1000 * 1000 = 1,000,000. B.y = C.y keeps
# 1/max(1000, 10): |BC| = 1000 * 10 / 1000 = 10, and |ABC| = 1000 * 1000 * 10 / 1000 = 10,000.
# The plans are (AB)C and A(BC) (A and C share no predicate: no cross product): A(BC) costs
# 10 + 10,000 = 10,010, (AB)C 1,000,000 + 10,000. Any bound from a real plan is at most
# 1,010,000, and greedy (join the pair with the smallest result first: BC) finds 10,010 —
# below AB's only plan (1,000,000), so AB is never costed above its scans.
CHAIN = Catalog.from_dict({"tables": {
    "a": {"rows": 1000, "columns": {"x": {"distinct": 1}}},
    "b": {"rows": 1000, "columns": {"x": {"distinct": 1}, "y": {"distinct": 1000}}},
    "c": {"rows": 10, "columns": {"y": {"distinct": 10}}},
}})
SQL = "SELECT * FROM a, b, c WHERE a.x = b.x AND b.y = c.y"
AB = 0b011  # relation sets are bitmasks in FROM order


def chain_space() -> PlanSpace:
    return Optimizer(SQL, CHAIN, cost_model="cout", optimizer="topdown").space()


def test_the_chain_is_what_the_comment_says():
    space = chain_space()
    card = space.estimator.card
    assert (card(AB), card(0b110), card(0b111)) == (1_000_000, 10, 10_000)
    assert topdown(space).cost == 10_010


@pytest.mark.parametrize("mode", ["aggsel+bound", "all"])
def test_a_seed_bound_cuts_what_costs_more_than_a_known_plan(mode):
    space = chain_space()
    plain = evaluate([space], "python", program=load_program(pruning="aggsel"))
    bounded = evaluate([space], "python", program=load_program(pruning=mode))
    assert plain.best_cost(0) == bounded.best_cost(0) == 10_010
    [(q, seed)] = bounded.rows("SeedBound")
    assert q == 0 and seed == pytest.approx(10_010, rel=1e-6) and seed >= 10_010
    # Under cout each OR node is one expression and each split one join: 3 scans, AB's and
    # BC's join, ABC's two splits — 7 plans costed, one kept per OR node (6). With the bound,
    # AB's join (1,000,000 > 10,010) is costed and rejected, so AB keeps no plan (5 kept),
    # and (AB)C is never costed (6 costed).
    assert (0, AB, "any") in {r[:3] for r in plain.rows("BestCost")}
    assert (0, AB, "any") not in {r[:3] for r in bounded.rows("BestCost")}
    assert (plain.stats.produced["PlanCost"], plain.stats.derived["PlanCost"]) == (7, 6)
    assert (bounded.stats.produced["PlanCost"], bounded.stats.derived["PlanCost"]) == (6, 5)
    # and AB's plans are gone from SearchSpace (rejected, suppressed), as are (AB)C's
    # (never costed: suppressed once their rank was released)
    assert not {r for r in bounded.rows("SearchSpace") if r[1] == AB or r[6] == AB or r[8] == AB}


@pytest.mark.parametrize("bounded", [True, False])
def test_a_session_follows_the_bound_as_deltas_move_it(bounded):
    """An observation that AB is tiny brings it within the bound (and into the best plan);
    undoing it prunes AB again: after every step the session holds exactly the relations of a
    from-scratch evaluation, in both bounded modes, whether the complete layer is bounded
    (the sessions') or not (``bounded=False``: the bounds move the live layer only)."""
    for mode in ("aggsel+bound", "all"):
        program = load_program(pruning=mode)
        space = chain_space()
        q, cat, m = space.query, space.catalog, space.model
        session = Session(program, [space], "python")
        assert session.incremental, session.reason
        session.engine = MaintainedEngine(program, session.ctx, bounded=bounded)
        session.optimize()
        adj = Adjustments()
        for text in ("card {a,b} := 5", "card {a,b} *0.00001", "card {a,b} := 1000000"):
            adj = apply_deltas(list(parse_deltas(text)), q, cat, adj, m.operators)
            fresh = PlanSpace(q, cat, m, adj)
            res = session.update({0: adj})
            scratch = evaluate([fresh], "python", program=program)
            for pred in program.schemas:
                assert res.evaluation.rows(pred) == scratch.rows(pred), (mode, text, pred)
            assert res.evaluation.best_cost(0) == bottomup(fresh).cost
        # the first step made AB cheap: it was costed, and the last one pruned it again
        assert (0, AB, "any") not in {r[:3] for r in session.evaluation.rows("BestCost")}


def test_rules_without_the_seeds_operators_fall_back_to_no_bound(tmp_path):
    """Rules that delete the join methods greedy's plan uses: the seed is below their
    optimum, every root plan would be rejected, so the evaluation runs without bounds and
    is exact (a session likewise, before and after an update)."""
    rules = edited_rules(tmp_path, "JoinMethod(hashjoin).\nJoinMethod(sortmerge).\n", "")
    space = Optimizer("tpch:q5", cost_model="io", optimizer="topdown").space()
    unbounded = evaluate([space], "python", program=load_program(rules, pruning="aggsel"))
    assert unbounded.best_cost(0) > topdown(space).cost  # the seed (full space) is below
    for mode in ("aggsel+bound", "all"):
        program = load_program(rules, pruning=mode)
        ev = evaluate([space], "python", program=program)
        assert ev.best_cost(0) == unbounded.best_cost(0)
        assert not ev.program.features.bound
        session = Session(program, [space], "python")
        session.optimize()
        assert session.evaluation.best_cost(0) == unbounded.best_cost(0)
        assert session.engine.fallbacks == 1  # the bounded layer lacked the root's plans
        q, cat, m = space.query, space.catalog, space.model
        adj = apply_deltas(list(parse_deltas("card orders *2")), q, cat, Adjustments(),
                           m.operators)
        res = session.update({0: adj})
        assert res.stats.fallback and session.engine.fallbacks == 2  # the new seed too
        scratch = evaluate([PlanSpace(q, cat, m, adj)], "python", program=program)
        for pred in program.schemas:
            assert res.evaluation.rows(pred) == scratch.rows(pred), (mode, pred)


# -- sessions: the complete layer is bounded too -------------------------------------------------
def test_a_session_costs_what_one_bounded_evaluation_costs():
    """The chain above through a session: its complete layer is evaluated with the seed, so
    the session keeps the 5 plans and costs the 6 a bounded evaluation does (the comment of
    the test above), not aggsel's 7 / 6."""
    for mode, want in (("aggsel", (7, 6)), ("aggsel+bound", (6, 5)), ("all", (6, 5))):
        session = Session(load_program(pruning=mode), [chain_space()], "python")
        session.optimize()
        stats = session.engine.stats
        assert (stats.produced["PlanCost"], stats.derived["PlanCost"]) == want, mode
        assert session.engine.fallbacks == 0


def complete_oracle(space: PlanSpace) -> set[tuple]:
    """The BestCost a bounded complete layer must hold, from an unbounded evaluation
    (``aggsel``: every OR node's best cost) and the greedy seed, independently of the
    maintenance code: the OR nodes whose best plan is within the seed. With rules whose space
    lacks the seed's plan the root would be missing, and the layer stays unbounded."""
    best = evaluate([space], "python", program=load_program(pruning="aggsel")).rows("BestCost")
    [(_, seed)] = evaluate([space], "python", program=load_program(pruning="all")).rows(
        "SeedBound")
    return {r for r in best if not r[-1] > seed}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 5), seed=st.integers(0, 2**31),
       model=st.sampled_from(["io", "cout"]), mode=st.sampled_from(["aggsel+bound", "all"]),
       how=st.sampled_from(["tuples", "frames", "handover"]), k=st.integers(1, 8))
def test_a_bounded_complete_layer_follows_deltas_exactly(shape, n, seed, model, mode, how, k):
    """Random delta sequences move the seed up and down (greedy's plan changes cost) and the
    optima across it: after every step the complete layer's BestCost is exactly the OR nodes
    whose unbounded best is within the new seed, and the relations equal a from-scratch
    evaluation's; each way the engine can run (tuples, frames, handover)."""
    q, cat = make_query(shape, n, seed)
    m = cost_model(model)
    program = load_program(pruning=mode)
    with way(how):
        session = Session(program, [PlanSpace(q, cat, m)], "python")
        session.optimize()
        assert session.engine.complete["BestCost"].rows == complete_oracle(PlanSpace(q, cat, m))
        adj = Adjustments()
        for delta in random_deltas(q, random.Random(seed), k, m.operators):
            try:
                adj = apply_deltas(list(parse_deltas(delta)), q, cat, adj, m.operators)
            except ReoptError:
                continue
            session.update({0: adj})
            fresh = PlanSpace(q, cat, m, adj)
            with way("tuples"):
                assert session.engine.complete["BestCost"].rows == complete_oracle(fresh), delta
                scratch = evaluate([fresh], "python", program=program)
            for pred in program.schemas:
                assert session.evaluation.rows(pred) == scratch.rows(pred), (delta, pred)
    assert session.engine.fallbacks == 0
