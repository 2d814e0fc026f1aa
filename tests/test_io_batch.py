"""The ``io`` model's batch forms equal its node-by-node forms.

``IOModel.joins_batch`` (every row's joins at once, from per-split bitsets of crossing
classes) must give exactly the rows :meth:`IOModel.joins` gives node by node — the same
alternatives, in the same order, every column — and ``IOModel.local_cost_columns`` (the join
costs over arrays) the bits :meth:`IOModel.local_cost` gives, on every alternative. The
oracle is the scalar code the procedural optimizers run (itself checked against hand-computed
costs in ``test_costmodel.py``); random queries of every shape, with shared join columns
(several predicates of one class), random indexes, disconnected graphs (cross products), and
both enumerations of the join graph.
"""

from __future__ import annotations

import random

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from randq import make_query, queries

from reopt.costmodel import ccp
from reopt.costmodel.cardinality import Adjustments
from reopt.costmodel.models import IOModel, cost_model
from reopt.costmodel.space import PlanSpace, fold_bits

METHODS = (*IOModel.join_methods, "join", "nosuchmethod")


def _space(qc, compiled: bool) -> PlanSpace:
    q, cat = qc
    space = PlanSpace(q, cat, cost_model("io"))
    space.graph.compiled = compiled and ccp.AVAILABLE
    return space


def _rows(space: PlanSpace, seed: int) -> list[tuple[int, str, str]]:
    """Every OR node with every method (and two the model has not), shuffled: a batch asks
    for its rows in any order."""
    rows = [(e, p, m) for e, p in space.groups() for m in METHODS]
    random.Random(seed).shuffle(rows)
    return rows


def node_by_node(space: PlanSpace, rows: list[tuple[int, str, str]]) -> list[list]:
    """The columns ``joins_batch`` answers, made from :meth:`IOModel.joins` row by row."""
    out: list[list] = [[], [], [], [], [], []]
    for k, (e, p, m) in enumerate(rows):
        cols = space.model.joins(space, e, p, m, space.split_lefts(e)) \
            if m in space.model.join_methods else None
        if cols is None or not cols.count:
            continue
        out[0] += [k] * cols.count
        for j, column in enumerate((cols.index, cols.left, cols.left_prop, cols.right,
                                    cols.right_prop), start=1):
            out[j] += column
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 8), compiled=st.booleans(), seed=st.integers(0, 99))
def test_joins_batch_equals_joins_node_by_node(qc, compiled, seed):
    space = _space(qc, compiled)
    rows = _rows(space, seed)
    got = space.model.joins_batch(
        space, np.asarray([r[0] for r in rows], dtype=np.int64),
        np.asarray([r[1] for r in rows], dtype=object),
        np.asarray([r[2] for r in rows], dtype=object))
    assert got is not None  # (the io model answers every query of up to 63 predicates)
    assert got[0].dtype == np.int64 and got[1].dtype == np.int64 and got[4].dtype == np.int64
    assert [np.asarray(c).tolist() for c in got] == node_by_node(space, rows)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 8), compiled=st.booleans())
def test_cost_columns_equal_local_cost_on_every_alternative(qc, compiled):
    """Bit for bit, every operator (joins vectorized, the others one by one), in one batch
    mixing all OR nodes."""
    space = _space(qc, compiled)
    alts = [a for node in space.groups() for a in space.alternatives(*node)]
    model = space.model
    ops = np.asarray([model.operators.index(a.phy_op) for a in alts], dtype=np.int64)
    cols = [np.asarray([getattr(a, f) for a in alts], dtype=np.int64)
            for f in ("expr", "index", "left", "right")]
    got = model.local_cost_columns(space, cols[0], ops, *cols[1:])
    assert got.dtype == np.float64
    assert got.tolist() == [model.local_cost(space, a) for a in alts]


def test_cost_columns_with_factors_equal_local_cost():
    """Through the plan space, with operator factors (``cost OP *F``), a hash join's build
    side past memory (the spill term) among them."""
    q, cat = make_query("clique", 5, 11)
    space = PlanSpace(q, cat, cost_model("io"),
                      Adjustments(op_factors={"hashjoin": 1.7, "indexnl": 0.3}))
    alts = [a for node in space.groups() for a in space.alternatives(*node)]
    assert any(a.phy_op == "hashjoin" and space.summary(a.right) > 1e6 for a in alts)
    got = space.local_cost_column(
        np.asarray([a.expr for a in alts]), np.asarray([a.phy_op for a in alts], dtype=object),
        *(np.asarray([getattr(a, f) for a in alts]) for f in ("index", "left", "right")))
    assert got.tolist() == [space.local_cost(a) for a in alts]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 8))
def test_crossing_masks_name_the_crossing_predicates(qc):
    space = _space(qc, False)
    unions, bounds, lefts = space.graph.flat_lefts()
    rights = np.repeat(unions, np.diff(bounds)) ^ lefts
    got = space.crossing_masks(lefts, rights).tolist()
    index = {p: k for k, p in enumerate(space.predicates)}
    assert got == [sum(1 << index[p] for p in space.crossing(left, right))
                   for left, right in zip(lefts.tolist(), rights.tolist(), strict=True)]
    assert [(u, lefts[a:b].tolist()) for u, a, b in zip(
        unions.tolist(), bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)] \
        == sorted(space.graph.lefts().items())


def test_fold_bits_against_a_plain_loop():
    rng = np.random.default_rng(5)
    images = [int(x) for x in rng.integers(0, 2**62, 19)]
    masks = rng.integers(0, 2**19, 500)
    for combine, plain in ((np.bitwise_or, int.__or__), (np.bitwise_xor, int.__xor__)):
        want = []
        for m in masks.tolist():
            acc = 0
            for k, image in enumerate(images):
                if m >> k & 1:
                    acc = plain(acc, image)
            want.append(acc)
        assert fold_bits(masks, images, combine).tolist() == want


def _join_columns_equal_joins(qc, compiled: bool) -> int:
    """Every node's :meth:`PlanSpace.join_columns` against :meth:`IOModel.joins` on a fresh
    space (nothing memoized); the number of nodes answered by one batch call."""
    space = _space(qc, compiled)
    oracle = _space(qc, compiled)
    big = 0
    for e, p in space.groups():
        lefts = oracle.graph.lefts().get(e, [])
        big += len(lefts) >= space.model.batch_splits_from
        for m in space.model.join_methods:
            assert space.join_columns(e, p, m) == oracle.model.joins(oracle, e, p, m, lefts)
    return big


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(5, 8, shapes=("clique", "star", "random")), compiled=st.booleans())
def test_join_columns_of_a_node_of_many_splits_equal_joins(qc, compiled):
    """The tuple-at-a-time ``Fn_split`` (:meth:`PlanSpace.join_columns`) answers a node of at
    least ``batch_splits_from`` splits from one batch call, any other node by node."""
    _join_columns_equal_joins(qc, compiled)


def test_a_clique_of_seven_has_nodes_answered_by_one_batch_call():
    assert _join_columns_equal_joins(make_query("clique", 7, 4), ccp.AVAILABLE) > 0


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 7), seed=st.integers(0, 99))
def test_enforcers_batch_equals_enforcer_alternatives(qc, seed):
    space = _space(qc, False)
    rows = [(e, p, m) for e, p in space.groups() for m in ("sort", "hashagg", "nosuch")]
    random.Random(seed).shuffle(rows)
    got = space.model.enforcers_batch(
        space, np.asarray([r[0] for r in rows], dtype=np.int64),
        np.asarray([r[1] for r in rows], dtype=object),
        np.asarray([r[2] for r in rows], dtype=object))
    want: list[list] = [[], [], [], []]
    for k, (e, p, m) in enumerate(rows):
        for a in space.model.enforcer_alternatives(space, e, p):
            if a.phy_op == m:
                for column, value in zip(want, (k, a.index, a.left, a.left_prop), strict=True):
                    column.append(value)
    assert [np.asarray(c).tolist() for c in got] == want
    assert want[0] or all(p == "any" for _, p in space.groups())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 8), compiled=st.booleans())
def test_size_by_levels_equals_a_walk_node_by_node(qc, compiled):
    """:meth:`PlanSpace.size` asks each level's joins in one batch: the same OR and AND node
    counts as a depth-first walk asking node by node, and every node's memoized columns the
    ones :meth:`IOModel.joins` gives it."""
    batched, plain = _space(qc, compiled), _space(qc, compiled)
    walked = list(plain.or_nodes())
    assert batched.size() == {"or_nodes": len(walked),
                              "and_nodes": sum(plain.columns(*n).count for n in walked)}
    for e, p in walked:
        if e != batched.top and not batched.is_leaf(e):
            lefts = batched.split_lefts(e)
            assert batched._joins[(e, p)] == {m: batched.model.joins(batched, e, p, m, lefts)
                                              for m in batched.model.join_methods}
