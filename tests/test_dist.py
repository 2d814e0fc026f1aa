"""The ``dist`` cost model (broadcast and shuffle joins, as Spark runs them).

Oracles: the model's formulas worked by hand on small catalogs, exhaustive search for the
optimizers (each plan tree costed on its own), and from-scratch optimization for incremental
re-optimization after deltas. That Spark runs the operators a ``dist`` plan names is checked
in ``tests/test_execute.py``.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from randq import queries, random_deltas
from test_optimizers import agree

from reopt.api import Optimizer
from reopt.costmodel import dist as D
from reopt.costmodel.cardinality import Adjustments
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.deltas import apply_deltas, parse_deltas
from reopt.costmodel.models import cost_model
from reopt.costmodel.space import PlanSpace
from reopt.optimizers.incremental import BottomUpInc, TopDownInc
from reopt.optimizers.topdown import topdown


def catalog(big: float, small: float) -> Catalog:
    """``f`` (``big`` rows) and ``d`` (``small`` rows) joined on ``k`` (1,000 keys in both)."""
    return Catalog.from_dict({"tables": {
        "f": {"rows": big, "columns": {"k": {"distinct": 1000}}},
        "d": {"rows": small, "columns": {"k": {"distinct": 1000}}}}})


SQL = "SELECT * FROM f, d WHERE f.k = d.k"


@pytest.mark.parametrize("optimizer", ["topdown", "bottomup", "exhaustive", "declarative"])
def test_small_side_is_broadcast(optimizer):
    # f: 1e6 rows, d: 1e4 rows; the join has 1e6 * 1e4 / 1000 = 1e7 rows
    o = Optimizer(SQL, catalog(1e6, 1e4), cost_model="dist", optimizer=optimizer,
                  engine="python")
    step = o.optimize()
    f, d, out = 1e6, 1e4, 1e7
    scans = D.SCAN_ROW * (f + d)
    bcast_d = D.BUILD_ROW * d + D.PROBE_ROW * f + D.OUT_ROW * out   # d on the right
    bcast_f = D.BUILD_ROW * f + D.PROBE_ROW * d + D.OUT_ROW * out   # f on the right
    shuffle = D.SHUFFLE_ROW * (f + d) + D.OUT_ROW * out
    assert bcast_d < min(bcast_f, shuffle)
    assert step.plan.op == "broadcast"
    assert step.plan.children[1].relations == ("d",)
    assert math.isclose(step.cost, scans + bcast_d, rel_tol=1e-12)


def test_two_large_sides_are_shuffled():
    # both sides above BROADCAST_ROWS: a broadcast pays OVERSIZE_ROW for every row above it
    n = 4 * D.BROADCAST_ROWS
    step = Optimizer(SQL, catalog(n, n), cost_model="dist", optimizer="topdown").optimize()
    out = n * n / 1000
    shuffle = D.SHUFFLE_ROW * 2 * n + D.OUT_ROW * out
    bcast = (D.BUILD_ROW * n + D.PROBE_ROW * n + D.OUT_ROW * out
             + D.OVERSIZE_ROW * (n - D.BROADCAST_ROWS))
    assert shuffle < bcast
    assert step.plan.op == "shuffle"
    assert math.isclose(step.cost, 2 * D.SCAN_ROW * n + shuffle, rel_tol=1e-12)


def test_cross_product_is_a_broadcast_nested_loop():
    cat = Catalog.from_dict({"tables": {"a": {"rows": 300, "columns": {"x": {}}},
                                        "b": {"rows": 20, "columns": {"y": {}}}}})
    step = Optimizer("SELECT * FROM a, b", cat, cost_model="dist",
                     optimizer="topdown").optimize()
    # no equi-join predicate: no shuffle alternative; broadcasting b compares 300 * 20 pairs
    want = D.SCAN_ROW * 320 + D.BUILD_ROW * 20 + D.PAIR * 6000 + D.OUT_ROW * 6000
    assert step.plan.op == "broadcast" and step.plan.children[1].relations == ("b",)
    assert math.isclose(step.cost, want, rel_tol=1e-12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 6), seed=st.integers(0, 2**31), steps=st.integers(0, 4))
def test_optimizers_agree_with_exhaustive(qc, seed, steps):
    q, cat = qc
    m = cost_model("dist")
    adj = Adjustments()
    for text in random_deltas(q, random.Random(seed), steps, m.operators):
        adj = apply_deltas(parse_deltas(text), q, cat, adj, m.operators)
    agree(PlanSpace(q, cat, m, adj))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 5), seed=st.integers(0, 2**31))
def test_incremental_equals_from_scratch(qc, seed):
    q, cat = qc
    m = cost_model("dist")
    rng = random.Random(seed)
    incs = [TopDownInc(PlanSpace(q, cat, m)), BottomUpInc(PlanSpace(q, cat, m))]
    for inc in incs:
        inc.optimize()
    adj = Adjustments()
    for text in random_deltas(q, rng, 4, m.operators):
        adj = apply_deltas(parse_deltas(text), q, cat, adj, m.operators)
        want = topdown(PlanSpace(q, cat, m, adj)).cost
        for inc in incs:
            got = inc.update(PlanSpace(q, cat, m, adj)).cost
            assert math.isclose(got, want, rel_tol=1e-9), (type(inc).__name__, text)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 5))
def test_declarative_equals_topdown(qc):
    q, cat = qc
    want = topdown(PlanSpace(q, cat, cost_model("dist"))).cost
    got = Optimizer(q, cat, cost_model="dist", optimizer="declarative",
                    engine="python").optimize().cost
    assert math.isclose(got, want, rel_tol=1e-9)
