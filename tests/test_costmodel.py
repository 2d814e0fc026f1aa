"""The ``io`` cost model's local costs follow the README's formulas ("Cost models").

Every optimizer and the rules call the same cost functions, so a wrong formula gives every
optimizer the same wrong cost and no comparison between them can catch it. These expected
values are computed by hand from the README's constants and formulas on a two-table query:

* ``a``: 1,000 rows, ``x`` with 50 distinct values in [0, 100], an index on ``x``; the filter
  ``a.x < 25`` keeps 0.25 of it (linear interpolation), so ``L = 250``;
* ``b``: 200 rows, ``x`` with 200 distinct values; ``R = 200``;
* ``a.x = b.x`` has selectivity ``1/max(50, 200)``, so ``T = 250 · 200 / 200 = 250``.

Constants: ``PAGE_ROWS = 100``, ``SEQ_PAGE = 1``, ``RANDOM_PAGE = 4``, ``CPU_TUPLE = 0.01``,
``CPU_OPERATOR = 0.0025``, ``INDEX_HEIGHT = 3``, ``BLOCK_PAGES = 100``.
"""

from __future__ import annotations

import math

import pytest

from reopt.costmodel.cardinality import Adjustments, Estimator
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.deltas import apply_deltas, parse_deltas
from reopt.costmodel.models import cost_model, sort_cost
from reopt.costmodel.query import ColumnRef, Compare, JoinPredicate, Query, Relation
from reopt.costmodel.space import ANY, PlanSpace

C = ColumnRef
L, R, T = 250.0, 200.0, 250.0


def catalog(sorted_on_x: bool) -> Catalog:
    a = {"rows": 1000, "columns": {"x": {"distinct": 50, "min": 0, "max": 100},
                                   "g": {"distinct": 10}},
         "indexes": ["x"]}
    if sorted_on_x:
        a["sorted_on"] = "x"
    return Catalog.from_dict({"tables": {"a": a, "b": {"rows": 200,
                                                        "columns": {"x": {"distinct": 200}}}}})


def space(sorted_on_x: bool = False, **final) -> PlanSpace:
    q = Query("j", (Relation("a", "a"), Relation("b", "b")),
              (Compare(C("a", "x"), "<", 25),), (JoinPredicate.of(C("a", "x"), C("b", "x")),),
              **final)
    return PlanSpace(q, catalog(sorted_on_x), cost_model("io"))


def cost_of(sp: PlanSpace, expr: int, op: str, left: int | None = None) -> float:
    """The local cost of the (first) alternative of ``expr`` delivering any order with
    physical operator ``op`` (and left input ``left``)."""
    alts = [a for a in sp.alternatives(expr, ANY)
            if a.phy_op == op and (left is None or a.left == left)]
    assert alts, f"no {op} alternative for expression {expr}"
    return sp.local_cost(alts[0])


def test_the_query_has_the_rows_the_hand_computation_assumes():
    sp = space()
    assert (sp.summary(0b01), sp.summary(0b10), sp.summary(0b11)) == pytest.approx((L, R, T))


def test_scans():
    sp = space()
    assert cost_of(sp, 0b01, "tablescan") == pytest.approx(1 * 1000 / 100 + 0.01 * 1000)
    # the index on a.x is not the table's order: every matching row is a random page
    assert cost_of(sp, 0b01, "indexscan") == pytest.approx(4 * (3 + 250) + 0.01 * 250)
    # a table sorted on the index column fetches the matching pages instead
    assert cost_of(space(sorted_on_x=True), 0b01, "indexscan") == pytest.approx(
        4 * (3 + 250 / 100) + 0.01 * 250)


def test_joins():
    sp = space()
    a, b = 0b01, 0b10
    # the right input builds the hash table
    assert cost_of(sp, 0b11, "hashjoin", left=a) == pytest.approx(
        2 * 0.01 * R + 0.0025 * L + 0.01 * T)
    assert cost_of(sp, 0b11, "hashjoin", left=b) == pytest.approx(
        2 * 0.01 * L + 0.0025 * R + 0.01 * T)
    assert cost_of(sp, 0b11, "blocknl", left=a) == pytest.approx(
        1 * (L / 100 + (L / 100 / 100 + 1) * R / 100) + 0.0025 * L * R + 0.01 * T)
    assert cost_of(sp, 0b11, "sortmerge", left=a) == pytest.approx(
        0.0025 * (L + R) + 0.01 * T)
    # the index nested-loop join probes a's index on x once per row of its left input, b
    assert cost_of(sp, 0b11, "indexnl", left=b) == pytest.approx(4 * 200 + 0.01 * T)
    assert not [x for x in sp.alternatives(0b11, ANY) if x.phy_op == "indexnl" and x.left == a]


def test_sort_spills_only_above_the_sort_memory():
    assert sort_cost(1000.0) == pytest.approx(2 * 0.0025 * 1000 * math.log2(1000))
    n = 200_000.0
    assert sort_cost(n) == pytest.approx(2 * 0.0025 * n * math.log2(n) + 2 * 1 * n / 100)


def test_final_operators_and_groups():
    sp = space(group_by=(C("a", "g"),))
    est = Estimator(sp.query, sp.catalog)
    # G = min(N, distinct(a.g)) = min(250, 10)
    assert est.groups() == 10
    top = sp.top
    assert cost_of(sp, top, "hashagg") == pytest.approx(2 * 0.01 * T + 0.01 * 10)
    assert cost_of(sp, top, "sortagg") == pytest.approx(sort_cost(T) + 0.0025 * T + 0.01 * 10)
    ordered = space(order_by=(C("a", "x"),))
    assert cost_of(ordered, ordered.top, "topsort") == pytest.approx(sort_cost(T))


def test_an_operator_factor_scales_that_operator_only():
    sp = space()
    adj = apply_deltas(parse_deltas("cost hashjoin *2; cost hashjoin *1.5; cost tablescan *0.5"),
                       sp.query, sp.catalog, Adjustments(), sp.model.operators)
    scaled = PlanSpace(sp.query, sp.catalog, sp.model, adj)
    assert cost_of(scaled, 0b11, "hashjoin", left=0b01) == pytest.approx(
        3 * (2 * 0.01 * R + 0.0025 * L + 0.01 * T))
    assert cost_of(scaled, 0b01, "tablescan") == pytest.approx(0.5 * 20)
    assert cost_of(scaled, 0b11, "sortmerge", left=0b01) == pytest.approx(
        0.0025 * (L + R) + 0.01 * T)
