"""Stale OR nodes after a delta (``PlanSpace.stale_nodes``): exactly the nodes for which a
``statistics`` built-in answers differently — summary or some alternative's local cost —
not every node whose inputs the delta moved; and maintenance that re-derives only those
still equals a from-scratch evaluation.

The oracles are independent of the code under test: fresh plan spaces built under each
statistics (no derived space, no reader index, no memo carried over), compared node by node
through the scalar ``summary`` and ``local_cost`` of every alternative; and, for the
sessions, the plain python engine evaluating the rules from scratch (``run_sequence``).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from randq import SHAPES, make_query, random_deltas
from test_incremental import run_sequence

from reopt.costmodel.cardinality import NO_ADJUSTMENTS
from reopt.costmodel.deltas import apply_deltas, parse_deltas
from reopt.costmodel.models import MODELS, CoutModel, cost_model
from reopt.costmodel.space import AltColumns, PlanSpace


def neutral_batch(q, rng: random.Random) -> list[str]:
    """Deltas that move an input and often leave its estimates as they were: a factor far
    below one on a set, which clamps its estimate (and its supersets') at one row — the
    second time surely (a batch applies the factor twice)."""
    members = ",".join(rng.sample(q.aliases, rng.randint(1, q.n)))
    return [f"card {{{members}}} *0.000001"] * rng.randint(1, 2)


def steps_of(q, rng: random.Random, model: str, k: int) -> list[list[str]]:
    """``k`` batches, each a random delta or a neutral batch."""
    out = []
    for _ in range(k):
        if rng.random() < 0.5:
            out.append(neutral_batch(q, rng))
        else:
            out.append(random_deltas(q, rng, 1, cost_model(model).operators))
    return out


def answers(space: PlanSpace, node: tuple[int, str]) -> tuple[float, list[float]]:
    """A node's summary and its alternatives' local costs, one scalar call each."""
    return space.summary(node[0]), [space.local_cost(a) for a in space.alternatives(*node)]


@pytest.mark.parametrize("model", ["cout", "io"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 5), seed=st.integers(0, 2**31),
       k=st.integers(1, 4))
def test_stale_nodes_are_those_whose_answers_differ(model, shape, n, seed, k):
    # also: a derived space's answers are a fresh one's, though it takes the local costs of
    # alternatives whose expression did not move from the space it was derived from (every
    # one costed there first)
    q, cat = make_query(shape, n, seed)
    m = cost_model(model)
    rng = random.Random(seed)
    space = PlanSpace(q, cat, m)
    adj = space.adjustments
    for batch in steps_of(q, rng, model, k):
        new_adj = apply_deltas([d for t in batch for d in parse_deltas(t)], q, cat, adj,
                               m.operators)
        nodes = list(space.or_nodes())
        for node in nodes:
            answers(space, node)
        derived = space.with_adjustments(new_adj)
        fresh_old, fresh_new = PlanSpace(q, cat, m, adj), PlanSpace(q, cat, m, new_adj)
        differ = {n for n in nodes if answers(fresh_old, n) != answers(fresh_new, n)}
        assert derived.stale_nodes(space, nodes) == differ, batch
        assert all(answers(derived, n) == answers(fresh_new, n) for n in nodes), batch
        space, adj = derived, new_adj


def test_a_clamped_estimate_moved_makes_nothing_stale():
    """Hand-made: every relation holds one row, so every join's estimate is clamped at one
    row (and each selectivity is at most 1); halving a pair's correction moves the input of
    every superset of the pair, but not one number: no node is stale."""
    q, cat = make_query("chain", 4, 7)
    m = cost_model("cout")
    ones = [d for a in q.aliases for d in parse_deltas(f"card {a} =1")]
    space = PlanSpace(q, cat, m, apply_deltas(ones, q, cat, NO_ADJUSTMENTS, m.operators))
    pair = ",".join(q.aliases[:2])
    adj = apply_deltas(parse_deltas(f"card {{{pair}}} *0.5"), q, cat, space.adjustments,
                       m.operators)
    new = space.with_adjustments(adj)
    nodes = list(new.or_nodes())
    assert new.estimator.moved_since(space.estimator)  # the input did move
    assert new.stale_nodes(space, nodes) == set()


@pytest.mark.parametrize(("mode", "model"), [("all", "cout"), ("aggsel+bound", "io"),
                                             ("aggsel", "cout")])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 5), seed=st.integers(0, 2**31),
       k=st.integers(1, 6))
def test_sessions_with_neutral_deltas_equal_from_scratch(mode, model, shape, n, seed, k):
    """Sequences mixing neutral batches (inputs moved, answers the same: nothing re-derived
    for them) with real deltas: after every step every relation equals a from-scratch
    evaluation."""
    q, cat = make_query(shape, n, seed)
    run_sequence(mode, q, cat, model, steps_of(q, random.Random(seed), model, k))


@pytest.mark.parametrize("name", sorted(MODELS))
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 5), seed=st.integers(0, 2**31))
def test_children_within_is_true_of_the_model(name, shape, n, seed):
    """A model declaring ``children_within`` (``stale_nodes`` then finds the candidates from
    the nodes' own expressions) builds no alternative reading a child outside its OR node's
    expression: every child of every reachable node is a subset of it."""
    model = MODELS[name]
    if not model.children_within:
        return
    q, cat = make_query(shape, n, seed)
    space = PlanSpace(q, cat, model)
    for expr, prop in space.or_nodes():
        for child, _ in space.children(expr, prop):
            assert child & ~expr == 0, (name, expr, prop, child)


@pytest.mark.parametrize("name", sorted(MODELS))
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 5), seed=st.integers(0, 2**31),
       k=st.integers(1, 3))
def test_costs_follow_rows_is_true_of_the_model(name, shape, n, seed, k):
    """A model declaring ``costs_follow_rows`` (``answers_differ`` then compares a node's
    summaries only, unless a factor of one of its operators moved) gives every node, under
    two statistics built afresh, the same local costs wherever the node's summary is the
    same and no factor moved: checked alternative by alternative through the scalar
    ``local_cost``, for deltas that move estimates only."""
    model = MODELS[name]
    if not model.costs_follow_rows:
        return
    q, cat = make_query(shape, n, seed)
    rng = random.Random(seed)
    adj = NO_ADJUSTMENTS
    for _ in range(k):
        batch = neutral_batch(q, rng) if rng.random() < 0.3 else [
            d for d in random_deltas(q, rng, 2, model.operators, observe=True)
            if not d.startswith("cost ")]
        new_adj = apply_deltas([d for t in batch for d in parse_deltas(t)], q, cat, adj,
                               model.operators)
        was, now = PlanSpace(q, cat, model, adj), PlanSpace(q, cat, model, new_adj)
        assert not set(was.adjustments.op_factors) ^ set(now.adjustments.op_factors)
        for node in now.or_nodes():
            if now.summary(node[0]) == was.summary(node[0]):
                assert answers(now, node) == answers(was, node), (name, node, batch)
        adj = new_adj


def test_a_child_outside_its_node_is_followed():
    """A model that does not declare ``children_within`` has its nodes' children checked one
    by one: a node whose own expression did not move but a child's did (a made-up child
    outside it, hand-wired into the node's columns) is still a candidate, and stale when its
    local costs differ."""
    q, cat = make_query("chain", 3, 5)
    model = CoutModel()
    model.children_within = False  # (an instance attribute: the registered model is untouched)
    model.costs_follow_rows = False  # (its made-up costs read a child's rows, not the node's)
    space = PlanSpace(q, cat, model)
    a, b, c = 1, 2, 4
    node = (a | b, "any")  # joins of {a,b}; wire a made-up alternative reading {c} in
    cols = space.columns(*node)
    space._cols[node] = AltColumns(cols.index + [9], cols.log_op + ["join"],
                                   cols.phy_op + ["join"], cols.left + [a], cols.left_prop
                                   + ["any"], cols.right + [c], cols.right_prop + ["any"])
    model.local_costs = lambda sp, e, p, cl: [sp.summary(r) for r in cl.right]  # type: ignore
    adj = apply_deltas(parse_deltas(f"card {q.aliases[2]} *3"), q, cat, space.adjustments,
                       model.operators)
    new = space.with_adjustments(adj)
    assert space._outside(node) == (c,)
    assert node in new.stale_nodes(space, [node, (c, "any")])
