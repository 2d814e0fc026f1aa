"""The ``dist`` cost model (broadcast and shuffle joins, as Spark runs them).

Oracles: the model's formulas worked by hand on small catalogs, exhaustive search for the
optimizers (each plan tree costed on its own), and from-scratch optimization for incremental
re-optimization after deltas. That Spark runs the operators a ``dist`` plan names is checked
in ``tests/test_execute.py``.
"""

from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from randq import queries, random_deltas
from test_optimizers import agree

from reopt.api import Optimizer
from reopt.costmodel import dist as D
from reopt.costmodel import widths as W
from reopt.costmodel.cardinality import Adjustments
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.deltas import apply_deltas, parse_deltas
from reopt.costmodel.errors import ReoptError
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
    # both sides above BROADCAST_BYTES: a row carries k (8 bytes: no kind, the default) plus
    # ROW_BYTES = 16 bytes, so 10 MiB hold 10 * 2**20 / 16 = 655,360 rows; a broadcast pays
    # OVERSIZE_ROW for every row beyond them
    n, fit = 4e6, 655_360
    assert D.BROADCAST_BYTES == 10 * 2**20 and W.ROW_BYTES == 8
    step = Optimizer(SQL, catalog(n, n), cost_model="dist", optimizer="topdown").optimize()
    out = n * n / 1000
    shuffle = D.SHUFFLE_ROW * 2 * n + D.OUT_ROW * out
    bcast = (D.BUILD_ROW * n + D.PROBE_ROW * n + D.OUT_ROW * out
             + D.OVERSIZE_ROW * (n - fit))
    assert shuffle < bcast
    assert step.plan.op == "shuffle"
    assert math.isclose(step.cost, 2 * D.SCAN_ROW * n + shuffle, rel_tol=1e-12)


def wide_catalog() -> Catalog:
    """``f`` (1e6 rows, key ``k``) and ``d`` (1e5 rows, key ``k`` and a 200-byte ``c``)."""
    return Catalog.from_dict({"tables": {
        "f": {"rows": 1e6, "columns": {"k": {"distinct": 1e5}}},
        "d": {"rows": 1e5, "columns": {"k": {"distinct": 1e5}, "c": {"width": 200}}}}})


def test_row_bytes_count_the_columns_a_row_carries():
    cat = wide_catalog()
    f, d = 1, 2  # relation bits in FROM order
    carried = PlanSpace(Optimizer("SELECT f.k, d.c FROM f, d WHERE f.k = d.k", cat).query,
                        cat, cost_model("dist"))
    assert carried.row_bytes(d) == 8 + 8 + 200 and carried.row_bytes(f) == 8 + 8
    assert carried.row_bytes(f | d) == 8 + 8 + 8 + 200
    # c read only by a filter: Spark drops it after the filter, the row carries k alone
    filtered = PlanSpace(Optimizer("SELECT f.k FROM f, d WHERE f.k = d.k AND d.c > 0",
                                   cat).query, cat, cost_model("dist"))
    assert filtered.row_bytes(d) == 16
    star = PlanSpace(Optimizer("SELECT * FROM f, d WHERE f.k = d.k", cat).query, cat,
                     cost_model("dist"))
    assert star.row_bytes(d) == 216
    one_star = PlanSpace(Optimizer("SELECT d.* FROM f, d WHERE f.k = d.k", cat).query, cat,
                         cost_model("dist"))
    assert (one_star.row_bytes(d), one_star.row_bytes(f)) == (216, 16)


@pytest.mark.parametrize("optimizer", ["topdown", "bottomup", "exhaustive", "declarative"])
def test_wide_rows_are_shuffled_where_narrow_ones_are_broadcast(optimizer):
    # out = 1e6 * 1e5 / 1e5 = 1e6 rows. d's rows: narrow (k, 16 bytes) 1.6 MB, broadcast;
    # wide (k and c, 216 bytes) 21.6 MB: 10 MiB hold 10 * 2**20 / 216 = 48,545.2 rows
    cat, f, d, out = wide_catalog(), 1e6, 1e5, 1e6
    narrow = Optimizer("SELECT f.k FROM f, d WHERE f.k = d.k", cat, cost_model="dist",
                       optimizer=optimizer, engine="python").optimize()
    bcast_d = D.BUILD_ROW * d + D.PROBE_ROW * f + D.OUT_ROW * out
    assert narrow.plan.op == "broadcast" and narrow.plan.children[1].relations == ("d",)
    assert math.isclose(narrow.cost, D.SCAN_ROW * (f + d) + bcast_d, rel_tol=1e-12)
    wide = Optimizer("SELECT f.k, d.c FROM f, d WHERE f.k = d.k", cat, cost_model="dist",
                     optimizer=optimizer, engine="python").optimize()
    shuffle = D.SHUFFLE_ROW * (f + d) + D.OUT_ROW * out
    assert shuffle < bcast_d + D.OVERSIZE_ROW * (d - 10 * 2**20 / 216)
    assert wide.plan.op == "shuffle"
    assert math.isclose(wide.cost, D.SCAN_ROW * (f + d) + shuffle, rel_tol=1e-12)


def test_cross_product_is_a_broadcast_nested_loop():
    cat = Catalog.from_dict({"tables": {"a": {"rows": 300, "columns": {"x": {}}},
                                        "b": {"rows": 20, "columns": {"y": {}}}}})
    step = Optimizer("SELECT * FROM a, b", cat, cost_model="dist",
                     optimizer="topdown").optimize()
    # no equi-join predicate: no shuffle alternative; broadcasting b compares 300 * 20 pairs
    want = D.SCAN_ROW * 320 + D.BUILD_ROW * 20 + D.PAIR * 6000 + D.OUT_ROW * 6000
    assert step.plan.op == "broadcast" and step.plan.children[1].relations == ("b",)
    assert math.isclose(step.cost, want, rel_tol=1e-12)


PROFILE_NAMES = sorted(D.PROFILES)


@pytest.mark.parametrize("profile", PROFILE_NAMES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 6), seed=st.integers(0, 2**31), steps=st.integers(0, 4))
def test_optimizers_agree_with_exhaustive(profile, qc, seed, steps):
    q, cat = qc
    m = cost_model("dist", dist=profile)
    adj = Adjustments()
    for text in random_deltas(q, random.Random(seed), steps, m.operators):
        adj = apply_deltas(parse_deltas(text), q, cat, adj, m.operators)
    agree(PlanSpace(q, cat, m, adj))


@pytest.mark.parametrize("profile", PROFILE_NAMES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 5), seed=st.integers(0, 2**31))
def test_incremental_equals_from_scratch(profile, qc, seed):
    q, cat = qc
    m = cost_model("dist", dist=profile)
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


@pytest.mark.parametrize("profile", PROFILE_NAMES)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 5))
def test_declarative_equals_topdown(profile, qc):
    q, cat = qc
    want = topdown(PlanSpace(q, cat, cost_model("dist", dist=profile))).cost
    got = Optimizer(q, cat, cost_model="dist", optimizer="declarative", engine="python",
                    dist_profile=profile).optimize().cost
    assert math.isclose(got, want, rel_tol=1e-9)


def test_q8join_at_sf1_broadcasts_nothing_above_the_limit():
    # issue 20: under the former 1e6-row limit, q8join's plan on one of 8 splits of lineitem
    # broadcast 750,000 rows; part-partsupp-supplier-nation-region (800,000 rows) carries
    # 8 + (8 + 12 + 32.8) + (8 + 8 + 4) + (8 + 8 + 12 + 18) + (8 + 8 + 12 + 7.1) + (8 + 12 + 6.8)
    # = 188.7 bytes a row (join keys, p_name, ps_availqty, s_name, n_name, r_name), 151 MB
    from reopt.api import load_catalog

    o = Optimizer("tpch:q8join", load_catalog(None, 1.0), cost_model="dist",
                  optimizer="topdown-inc")
    o.optimize()
    step = o.update(["card lineitem *0.125"])
    space = PlanSpace(o.query, o.catalog, cost_model("dist"))
    side = o.query.mask(("part", "partsupp", "supplier", "nation", "region"))
    assert math.isclose(space.row_bytes(side), 188.7, rel_tol=1e-12)
    broadcasts = [n for n in step.plan.walk() if n.op == "broadcast"]
    assert broadcasts
    for n in broadcasts:
        right = n.children[1]
        assert right.rows * space.row_bytes(o.query.mask(right.relations)) <= D.BROADCAST_BYTES


# -- profiles -----------------------------------------------------------------------------------
def test_the_default_profile_is_the_module_constants():
    # what every hand-computed cost above reads: asked for by name or not, the same numbers
    want = (D.SCAN_ROW, D.SHUFFLE_ROW, D.BUILD_ROW, D.PROBE_ROW, D.OUT_ROW, D.PAIR,
            D.OVERSIZE_ROW, D.BROADCAST_BYTES)
    for m in (cost_model("dist"), cost_model("dist", dist="default")):
        c = m.constants
        assert (c.scan_row, c.shuffle_row, c.build_row, c.probe_row, c.out_row, c.pair,
                c.oversize_row, c.broadcast_bytes) == want
    a = Optimizer("tpch:q5", cost_model="dist", optimizer="topdown").optimize()
    b = Optimizer("tpch:q5", cost_model="dist", optimizer="topdown",
                  dist_profile="default").optimize()
    assert a.cost == b.cost and a.plan.op == b.plan.op


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_a_profile_prices_a_join_as_its_formula_says(profile):
    # f: 1e6 rows, d: 1e4 rows, out 1e7 rows (as test_small_side_is_broadcast): the three
    # alternatives of the join worked by hand under the profile's constants
    c = D.PROFILES[profile]
    f, d, out = 1e6, 1e4, 1e7
    alternatives = {
        ("broadcast", "d"): c.build_row * d + c.probe_row * f + c.out_row * out,
        ("broadcast", "f"): c.build_row * f + c.probe_row * d + c.out_row * out
        + c.oversize_row * max(0.0, f - c.broadcast_bytes / 16),  # k: 8 bytes + 8 a row
        ("shuffle", "f"): c.shuffle_row * (f + d) + c.out_row * out,
        ("shuffle", "d"): c.shuffle_row * (f + d) + c.out_row * out}
    step = Optimizer(SQL, catalog(f, d), cost_model="dist", optimizer="topdown",
                     dist_profile=profile).optimize()
    got = (step.plan.op, step.plan.children[1].relations[0])
    assert math.isclose(step.cost, c.scan_row * (f + d) + min(alternatives.values()),
                        rel_tol=1e-12)
    assert math.isclose(step.cost - c.scan_row * (f + d), alternatives[got], rel_tol=1e-12)


def test_the_local_profile_changes_costs_and_plans_only_through_its_constants():
    # local broadcasts a 4e6-row side that default shuffles (test_two_large_sides_are_shuffled)
    # exactly when its own formula says the broadcast is cheaper
    c, n, fit = D.PROFILES["local"], 4e6, 655_360
    out = n * n / 1000
    shuffle = c.shuffle_row * 2 * n + c.out_row * out
    bcast = (c.build_row * n + c.probe_row * n + c.out_row * out
             + c.oversize_row * max(0.0, n - c.broadcast_bytes / 16))
    assert c.broadcast_bytes / 16 == fit or c.broadcast_bytes != D.BROADCAST_BYTES
    step = Optimizer(SQL, catalog(n, n), cost_model="dist", optimizer="topdown",
                     dist_profile="local").optimize()
    assert step.plan.op == ("broadcast" if bcast < shuffle else "shuffle")
    assert math.isclose(step.cost, 2 * c.scan_row * n + min(bcast, shuffle), rel_tol=1e-12)


def test_profile_errors_are_one_line(tmp_path, capsys):
    from reopt.cli import main

    with pytest.raises(ReoptError, match="unknown dist profile 'gpu'"):
        cost_model("dist", dist="gpu")
    with pytest.raises(ReoptError, match="dist cost model only"):
        Optimizer("tpch:q3", cost_model="io", dist_profile="local")
    with pytest.raises(ReoptError, match="rate cost model only"):
        cost_model("dist", "rate", dist="local")
    assert main(["optimize", "tpch:q3", "--cost-model", "dist", "--dist-profile", "gpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--dist-profile" in err and "'gpu'" in err and "\n" not in err
    for command in (["optimize", "tpch:q3", "--optimizer", "topdown"],
                    ["run", "tpch:q3", "--data", str(tmp_path)],
                    ["execute", "tpch:q3", "--data", str(tmp_path)]):
        assert main([*command, "--dist-profile", "local"]) == 2
        err = capsys.readouterr().err.strip()
        assert "--dist-profile applies to --cost-model dist" in err and "\n" not in err


def test_cli_optimizes_under_the_profile(capsys):
    from reopt.cli import main

    for profile in PROFILE_NAMES:
        assert main(["optimize", "tpch:q5", "--cost-model", "dist", "--dist-profile", profile,
                     "--optimizer", "topdown", "--json"]) == 0
        got = json.loads(capsys.readouterr().out)
        want = Optimizer("tpch:q5", cost_model="dist", optimizer="topdown",
                         dist_profile=profile).optimize().cost
        assert math.isclose(got["queries"][0]["initial"]["cost"], want, rel_tol=1e-12), got
