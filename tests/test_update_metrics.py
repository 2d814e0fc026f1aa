"""The numbers a declarative update reports about its state, recounted from its relations.

``held`` (OR and AND nodes of SearchSpace) and ``state_bytes`` are computed on every
update; these tests recount them from :meth:`Optimizer.relations` — the frames a user reads —
by the README's definition (8 bytes per number, 1 per boolean, the UTF-8 length of a string;
the relations derived when read, ``.ondemand``, left out), value by value, so a faster way of
counting cannot drift from it."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from randq import SHAPES, make_query, random_deltas

from reopt.api import Optimizer
from reopt.costmodel.builtins import BOOLEAN, DOUBLE, LONG
from reopt.costmodel.deltas import apply_deltas, parse_deltas
from reopt.costmodel.models import cost_model
from reopt.costmodel.space import PlanSpace
from reopt.evaluator.driver import load_program
from reopt.incremental.session import Session


def recount(o: Optimizer) -> tuple[int, int, int]:
    """OR nodes, AND nodes and state bytes of query 0, value by value from the frames."""
    prog = o._program
    width = {LONG: 8, DOUBLE: 8, BOOLEAN: 1}
    state = 0
    for pred, frame in o.relations().items():
        types = prog.schemas[pred]
        if not types or types[0] != LONG or pred in prog.facts or pred in prog.ondemand:
            continue  # facts, relations without a query id, relations derived when read
        for row in frame.itertuples(index=False):
            if row[0] != 0:
                continue
            for v, t in zip(row, types, strict=True):
                state += width[t] if t in width else len(str(v).encode("utf-8"))
    ss = o.relations()["SearchSpace"]
    ss = ss[ss.iloc[:, 0] == 0]
    ors = len({(r[1], r[2]) for r in ss.itertuples(index=False)})
    return ors, len(ss), state


@pytest.mark.parametrize("model", ["io", "dist"])
def test_state_metrics_match_a_recount_after_updates(model):
    o = Optimizer("tpch:q5", cost_model=model, engine="python", pruning="all")
    calls = [o.optimize,
             lambda: o.update(["card orders *3", "card {customer,orders} := 40000"]),
             lambda: o.update("sel orders.o_custkey=customer.c_custkey *0.5")]
    for call in calls:
        m = call().metrics
        ors, ands, state = recount(o)  # the relations of the step just made
        assert (m["held"]["or_nodes"], m["held"]["and_nodes"], m["state_bytes"]) == \
            (ors, ands, state)
        assert state > 0 and ands > 0


def recount_session(session: Session, q: int) -> dict[str, int]:
    """``held`` of query ``q``, value by value from the session's relations (the README's
    definition, as :func:`recount`)."""
    prog, rels = session.program, session.evaluation.relations
    width = {LONG: 8, DOUBLE: 8, BOOLEAN: 1}
    state = 0
    for pred, types in prog.schemas.items():
        if not types or types[0] != LONG or pred in prog.facts or pred in prog.ondemand:
            continue
        for row in rels[pred].rows:
            if row[0] == q:
                state += sum(width[t] if t in width else len(str(v).encode("utf-8"))
                             for v, t in zip(row, types, strict=True))
    space = [r for r in rels["SearchSpace"].rows if r[0] == q]
    return {"or_nodes": len({r[1:3] for r in space}), "and_nodes": len(space),
            "state_bytes": state}


@pytest.mark.parametrize(("mode", "model"), [("all", "cout"), ("all", "io"),
                                             ("aggsel+bound", "io"), ("none", "cout")])
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes=st.tuples(st.sampled_from(SHAPES), st.sampled_from(SHAPES)),
       n=st.integers(2, 5), seed=st.integers(0, 2**31), k=st.integers(1, 4))
def test_held_followed_through_updates_matches_a_recount(mode, model, shapes, n, seed, k):
    """A session of two queries: after each update of one of them, ``held`` — followed from
    the update's changes, not recounted — equals a recount of both queries' relations."""
    m = cost_model(model)
    rng = random.Random(seed)
    made = [make_query(shape, n, seed + i) for i, shape in enumerate(shapes)]
    spaces = [PlanSpace(q, cat, m) for q, cat in made]
    session = Session(load_program(pruning=mode), spaces, "python")
    session.optimize()
    assert [session.evaluation.held(q) for q in (0, 1)] == \
        [recount_session(session, q) for q in (0, 1)]
    adj = [s.adjustments for s in spaces]
    for _ in range(k):
        q = rng.randrange(2)
        query, cat = made[q]
        texts = random_deltas(query, rng, rng.randint(1, 2), m.operators)
        adj[q] = apply_deltas([d for t in texts for d in parse_deltas(t)], query, cat, adj[q],
                              m.operators)
        session.update({q: adj[q]})
        for i in (0, 1):
            assert session.evaluation.held(i) == recount_session(session, i), (texts, i)
