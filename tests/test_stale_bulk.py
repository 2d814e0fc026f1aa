"""Stale OR nodes of queries large enough that their summaries are compared in bulk
(``Estimator.differing``: at least ``PREFETCH_FROM`` relation sets, estimated as arrays), and
the final operator's pseudo-expression among them.

The oracle is ``tests/test_stale.py``'s: fresh plan spaces built under each statistics,
compared node by node through the scalar ``summary`` and ``local_cost`` of every
alternative (no derived space, no memo carried over, no bulk estimate).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from randq import make_query
from test_stale import answers, steps_of

from reopt.costmodel.deltas import apply_deltas, parse_deltas
from reopt.costmodel.models import cost_model
from reopt.costmodel.space import PREFETCH_FROM, PlanSpace


@pytest.mark.parametrize("model", ["cout", "io"])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(["star", "clique"]), n=st.integers(7, 8),
       seed=st.integers(0, 2**31), k=st.integers(1, 3), final=st.booleans())
def test_stale_nodes_of_large_queries_are_those_whose_answers_differ(model, shape, n, seed, k,
                                                                     final):
    q, cat = make_query(shape, n, seed, final=final)
    m = cost_model(model)
    rng = random.Random(seed)
    space = PlanSpace(q, cat, m)
    adj = space.adjustments
    nodes = list(space.or_nodes())
    assert len({e & space.all for e, _ in nodes}) >= PREFETCH_FROM  # (the bulk comparison)
    for batch in steps_of(q, rng, model, k):
        new_adj = apply_deltas([d for t in batch for d in parse_deltas(t)], q, cat, adj,
                               m.operators)
        derived = space.with_adjustments(new_adj)
        fresh_old, fresh_new = PlanSpace(q, cat, m, adj), PlanSpace(q, cat, m, new_adj)
        differ = {n for n in nodes if answers(fresh_old, n) != answers(fresh_new, n)}
        assert derived.stale_nodes(space, nodes) == differ, batch
        assert derived.answers_differ(space, nodes) == differ, batch
        space, adj = derived, new_adj


def test_the_final_operators_summary_is_its_own():
    """The final operator's pseudo-expression (a bit outside the query's relations) is
    stale when the query's groups move, although no relation set's estimate does."""
    q, cat = make_query("clique", 7, 3, final=True)
    m = cost_model("io")  # (a model with a final operator)
    space = PlanSpace(q, cat, m)
    top = [n for n in space.or_nodes() if n[0] == space.top]
    assert top
    nodes = list(space.or_nodes())
    every = ",".join(q.aliases)
    for text in (f"card {{{every}}} *4", f"card {q.aliases[0]} *4"):
        adj = apply_deltas(parse_deltas(text), q, cat, space.adjustments, m.operators)
        new = space.with_adjustments(adj)
        fresh_old, fresh_new = PlanSpace(q, cat, m), PlanSpace(q, cat, m, adj)
        differ = {n for n in nodes if answers(fresh_old, n) != answers(fresh_new, n)}
        assert new.answers_differ(space, nodes) == differ
        assert (top[0] in differ) == (fresh_old.summary(space.top)
                                      != fresh_new.summary(space.top))
