"""The live layer's revival from scratch set at a time (:mod:`reopt.evaluator.revival`)
against the tuple-at-a-time revival it replaces where the complete layer is on frames: the
same live relations, the same reference counts, and updates after it that end where a
from-scratch evaluation does."""

from __future__ import annotations

import os
import random
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from randq import SHAPES, make_query, random_deltas
from ways import way

from reopt.costmodel.deltas import apply_deltas, parse_deltas
from reopt.costmodel.models import cost_model
from reopt.costmodel.space import PlanSpace
from reopt.evaluator import frames, revival
from reopt.evaluator.driver import PRUNING_MODES, load_program
from reopt.evaluator.maintenance import MaintainedEngine
from reopt.incremental.session import Session

PROGRAMS = {mode: load_program(pruning=mode) for mode in PRUNING_MODES}


def _session(program, space: PlanSpace, bounded: bool) -> Session:
    session = Session(program, [space], "python")
    session.engine = MaintainedEngine(program, session.ctx, bounded=bounded)
    session.optimize()
    return session


def _live(engine: MaintainedEngine) -> tuple[dict[str, set[tuple]], dict[str, dict]]:
    return ({p: set(r.rows) for p, r in engine.live.items() if p in engine._layer},
            {g: dict(c) for g, c in engine.counts.items()})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 6), seed=st.integers(0, 2**31),
       model=st.sampled_from(["io", "cout"]), bounded=st.booleans(),
       mode=st.sampled_from(["all", "aggsel+refcount"]))
def test_set_revival_equals_the_tuple_revival(shape, n, seed, model, bounded, mode):
    """From scratch on frames, each way: every live relation and every count alike, and
    what the query holds (counted on the frames the set path keeps beside its tuples);
    then after each of three deltas both sessions hold the same relations
    as each other."""
    q, cat = make_query(shape, n, seed)
    m = cost_model(model)
    program = PROGRAMS[mode]
    used = []
    plan = revival.plan

    def watched(engine):
        got = plan(engine)
        used.append(got is not None)
        return got

    with way("frames"), mock.patch.object(revival, "plan", watched):
        sets = _session(program, PlanSpace(q, cat, m), bounded)
    assert used == [True]  # (the set path ran: a layer on frames, the optimizer's rules)
    with way("frames"), mock.patch.object(revival, "plan", lambda engine: None):
        tuples = _session(program, PlanSpace(q, cat, m), bounded)
    assert sets.engine.live["SearchSpace"].as_frame() is not None
    assert sets.evaluation.held(0) == tuples.evaluation.held(0)
    assert _live(sets.engine) == _live(tuples.engine)
    adj = sets.ctx[0].adjustments
    for d in random_deltas(q, random.Random(seed), 3, m.operators):
        adj = apply_deltas(parse_deltas(d), q, cat, adj, m.operators)
        with way("frames"):
            sets.update({0: adj})
            tuples.update({0: adj})
        assert _live(sets.engine) == _live(tuples.engine)


def test_a_batch_holds_per_query_what_the_tuple_revival_counts():
    """Two queries in one session, revived set at a time: per query, the OR nodes, AND
    nodes and bytes held, counted on the handed-over frames (each query's rows of them),
    equal those counted on the tuples of the tuple path."""
    spaces = [PlanSpace(*make_query(shape, 5, 3), cost_model("io"))
              for shape in ("clique", "chain")]
    held = []
    for plan in (revival.plan, lambda engine: None):
        with way("frames"), mock.patch.object(revival, "plan", plan):
            session = Session(PROGRAMS["all"], spaces, "python")
            session.optimize()
        held.append([session.evaluation.held(q) for q in (0, 1)])
    assert held[0] == held[1]
    assert held[0][0] != held[0][1]


def test_small_layers_revive_tuple_at_a_time():
    """Without the complete layer on frames (a small layer under ``auto``) there is nothing
    to revive on: :func:`revival.plan` says so, and the tuple path runs."""
    q, cat = make_query("chain", 4, 7)
    seen = []
    plan = revival.plan
    with mock.patch.dict(os.environ, {"REOPT_COLUMNAR": "auto"}), \
            mock.patch.object(revival, "plan", lambda e: seen.append(plan(e)) or seen[-1]):
        _session(PROGRAMS["all"], PlanSpace(q, cat, cost_model("cout")), True)
    assert seen == [None]


def test_distinct_rows_by_hash_and_by_exact_keys():
    """:func:`frames.distinct_rows` (a suppressed source's universe): each distinct row's
    first occurrence, and per row its distinct row — the same when every hash collides (the
    exact keys then)."""
    rng = np.random.default_rng(5)
    cols = [rng.integers(0, 3, 200), rng.integers(0, 2, 200).astype(np.float64)]
    rows = list(zip(*(c.tolist() for c in cols), strict=True))
    want_first = sorted({r: i for i, r in reversed(list(enumerate(rows)))}.values())
    real = frames.row_hash
    for colliding in (False, True):
        with mock.patch.object(frames, "row_hash",
                               (lambda c, n: np.zeros(n, np.uint64)) if colliding else real):
            first, inverse = frames.distinct_rows(cols, 200)
        assert sorted(first.tolist()) == want_first
        assert [rows[first[j]] for j in inverse] == rows


def test_key_table_rows_against_a_dict_of_tuples():
    """:class:`frames.KeyTable`: each probe's row among distinct rows (negative lows, a
    column of one value, probes outside every range), as a dict of the tuples answers;
    None above its span limit."""
    rng = np.random.default_rng(11)
    a, b = rng.integers(-40, 40, 600), rng.integers(5, 9, 600)
    c = np.full(600, 3)
    rows = list(dict.fromkeys(zip(a.tolist(), b.tolist(), c.tolist(), strict=True)))
    cols = [np.array(col) for col in zip(*rows, strict=True)]
    table = frames.KeyTable.of(cols, len(rows), 1 << 16)
    assert table is not None
    at = {r: i for i, r in enumerate(rows)}
    probes = [*rows[::3], (41, 6, 3), (-41, 6, 3), (0, 9, 3), (0, 4, 3), (0, 6, 2)]
    values = [np.array(col) for col in zip(*probes, strict=True)]
    assert table.rows(values, len(probes)).tolist() == [at.get(p, -1) for p in probes]
    assert frames.KeyTable.of(cols, len(rows), 100) is None


def test_a_kept_frame_is_read_only_while_the_relation_is_unchanged():
    """:meth:`Relation.as_frame`: the frame kept beside the tuples until the relation
    changes (then None: counting on it would miss the change)."""
    from reopt.evaluator.python_engine import Relation

    rows = [(1, "a"), (2, "b")]
    rel = Relation(rows)
    assert rel.as_frame() is None
    frame = frames.Frame.from_rows(rows, ["c0", "c1"], ["long", "string"])
    rel.keep_frame(frame)
    assert rel.as_frame() is frame
    rel.add([(2, "b")])  # (nothing new: unchanged)
    assert rel.as_frame() is frame
    rel.add([(3, "c")])
    assert rel.as_frame() is None
