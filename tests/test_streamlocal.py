"""The in-process continuous-query executor (:mod:`reopt.streamlocal`).

Its exactness on the nexmark query and the self-join property runs in the Spark executor's
own tests (``test_stream``, ``test_stream_migration``, parametrized by executor). Here: the
SegTollS-shaped 5-way join — every batch under a plan drawn from all 5-way trees (both
operators, so hash and nested-loops joins), switched by each migration — per batch against a
batch Spark SQL evaluation of the same tuples (``test_eddy``'s oracle), the ``nlj`` blocks
split small enough that a join runs in several; and what it refuses.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
from test_eddy import segtolls_per_batch
from test_stream import QUERY

from reopt.api import Optimizer
from reopt.cli import main
from reopt.costmodel.errors import ReoptError
from reopt.execute import answer_digest
from reopt.optimizers.exhaustive import all_plans
from reopt.stream import StreamError
from reopt.streamgen import generate_stream
from reopt.streamlocal import make_query

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


@pytest.mark.spark
def test_segtolls_under_drawn_plans_and_migrations_equals_batch_sql(spark, tmp_path,
                                                                    monkeypatch):
    root = tmp_path / "st"
    expected = segtolls_per_batch(spark, root)
    monkeypatch.setattr("reopt.streamlocal.BLOCK_PAIRS", 4000)  # nested loops in blocks
    opt = Optimizer(str(root / "query.sql"), str(root / "catalog.json"), cost_model="rate",
                    optimizer="topdown")
    plans = list(all_plans(opt.space()))
    assert {p.op for p in plans} >= {"shj", "nlj"}
    draw = random.Random(21)
    for migration in ("moving", "parallel"):
        cq = make_query("local", opt.query, opt.catalog, root, None, 1,
                        migration=migration)
        moved = []
        for b in cq.run(lambda last: draw.choice(plans)):
            assert answer_digest(b.rows) == expected.get(b.index, answer_digest([])), (
                migration, b.index, b.plans)
            moved.append(b.migration)
        assert migration in moved  # a state really migrated


def test_local_executor_refuses_what_it_cannot_evaluate(tmp_path):
    root = tmp_path / "nx"
    generate_stream("nexmark", root, seconds=3)
    catalog = str(root / "catalog.json")
    opt = Optimizer(QUERY + " AND abs(b.price) < 3", catalog, cost_model="rate",
                    optimizer="topdown")
    with pytest.raises(StreamError, match="local executor cannot evaluate 'ABS"):
        make_query("local", opt.query, opt.catalog, root, None)
    opt = Optimizer(QUERY, catalog, cost_model="rate", optimizer="topdown")
    with pytest.raises(StreamError, match="unknown executor 'gpu'"):
        make_query("gpu", opt.query, opt.catalog, root, None)


# -- the generator's presets ------------------------------------------------------------------
def test_presets_are_phases_and_unknown_names_are_one_line_errors(tmp_path):
    """``--phases drift``: thirds of ``--seconds`` with the preset's rates (the catalog the
    first phase's); ``steady`` the same rates throughout; an unknown name is refused."""
    m = generate_stream("nexmark", tmp_path / "d", seconds=6, phases="drift")
    assert [p["rates"]["bids"] for p in m["phase_list"]] == [8, 80, 800]
    assert all(p["seconds"] == 2 and p["keys"] == 10 for p in m["phase_list"])
    assert json.loads((tmp_path / "d" / "catalog.json").read_text())["tables"]["bids"][
        "rate"] == 8
    m = generate_stream("segtolls", tmp_path / "s", seconds=3, phases="steady")
    assert {p["rates"]["segstats"] for p in m["phase_list"]} == {10}
    with pytest.raises(ReoptError, match="linearroad has no such preset"):
        generate_stream("linearroad", tmp_path / "l", seconds=3, phases="drift")


@pytest.mark.parametrize("workload, least", [("nexmark", 1.5), ("segtolls", 3.0)])
def test_drift_preset_makes_the_first_plan_bad_and_steady_does_not(workload, least):
    """By the rate model with the in-process executor's profile (the presets' search used
    it): in ``drift`` the best plan changes after the first phase and the first phase's best
    plan has more load than the best in every later phase, at least ``least`` times it in the
    last (so plan choice can matter); under ``steady`` it stays the best."""
    from stream_drift import phase_loads

    rows = phase_loads(workload, "drift", 3, "local")
    assert rows[1]["best"] != rows[0]["best"], rows
    assert all(r["static_load"] > r["best_load"] for r in rows[1:]), rows
    assert rows[-1]["static_load"] >= least * rows[-1]["best_load"], rows
    rows = phase_loads(workload, "steady", 3)
    assert all(r["static"] == r["best"] for r in rows), rows


@pytest.mark.spark
def test_adaptive_strategy_switches_in_process_and_equals_batch_sql(spark, tmp_path):
    """``run_strategy("adaptive")`` on the local executor, re-planning after every batch
    (the Replanner's ``(plan, migration)`` reaches the executor): persons 10x faster halfway
    makes it switch, by each migration (``auto`` moves state), and every batch's results
    equal the batch Spark SQL oracle's."""
    from test_stream import ORACLE, per_batch, stream_tuples

    from reopt.streamrun import Strategy, run_strategy

    root = tmp_path / "nx"
    generate_stream("nexmark", root, seed=7, phases="3:keys=6;3:persons=60,keys=6")
    for s, df in stream_tuples(root).items():
        spark.createDataFrame(df).createOrReplaceTempView(s)
    try:
        expected, sizes = per_batch(spark.sql(ORACLE.format(B=1)).toPandas())
    finally:
        for s in ("persons", "auctions", "bids"):
            spark.catalog.dropTempView(s)
    for migration, how in (("moving", "moving"), ("parallel", "parallel"), ("auto", "moving")):
        record = Strategy("adaptive")
        opt = Optimizer(QUERY, str(root / "catalog.json"), cost_model="rate",
                        optimizer="topdown-inc")
        batches = list(run_strategy("adaptive", opt, root, 1, 1, None, strategy=record,
                                    executor="local", migration=migration))
        assert record.switches >= 1 and how in {b.migration for b in batches}, migration
        for b in batches:
            assert len(b.rows) == sizes.get(b.index, 0), (migration, b.index)
            assert answer_digest(b.rows) == expected.get(b.index), (migration, b.index)


def test_stream_cli_plans_with_the_executors_rate_profile(tmp_path, capsys):
    """``reopt stream`` prices the rate model with its executor's profile (``local`` by
    default), ``--rate-profile`` overrides it, and an unknown one is a one-line error."""
    root = tmp_path / "nx"
    generate_stream("nexmark", root, seconds=3)
    for extra, profile in (([], "local"), (["--rate-profile", "spark"], "spark")):
        assert main(["stream", QUERY, "--data", str(root), "--json", *extra]) == 0
        assert json.loads(capsys.readouterr().out)["rate_profile"] == profile
    assert main(["stream", QUERY, "--data", str(root), "--rate-profile", "gpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--rate-profile" in err and "'gpu'" in err and "\n" not in err
