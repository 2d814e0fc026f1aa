"""The change trigger (:mod:`reopt.streamchange`, ``reopt stream --replan-on-change``): its test
of a moved statistic by hand; on generated streams, that a 10× jump makes the plan change
within two batches where the schedule alone takes longer, that a stationary stream causes no
re-planning beyond the schedule, and that results across a switch the trigger caused equal a
brute-force evaluation of the windowed join."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_stream import QUERY, per_batch, stream_tuples

from reopt.api import Optimizer
from reopt.cli import main
from reopt.execute import answer_digest
from reopt.stream import plan_line
from reopt.streamchange import Evidence, interval_evidence, moved
from reopt.streamcli import Replanner
from reopt.streamgen import generate_stream
from reopt.streamrun import Strategy, observations, run_strategy

JUMP = "20:persons=4,auctions=40,bids=8,keys=10;20:persons=4,auctions=40,bids=80,keys=10"
"""nexmark's ``drift`` preset's first jump (bids 8 -> 80/s at 20 s), as
``benchmarks/responsiveness.py`` runs it in process: the best plan changes at the jump."""
STEADY = "40:persons=4,auctions=40,bids=80,keys=10"


def test_moved_needs_both_the_factor_and_the_standard_errors():
    """By hand (half a count added to each side): 8 arrivals in 4 s against 20 in 2 s is a
    ratio of (20.5/2)/(8.5/4) = 4.82, log 1.573, standard error sqrt(1/8.5 + 1/20.5) =
    0.408: 3.85 errors, moved at 3.5, not at 4. 2 against 5 in 2 s: ratio 2.2 but log 0.788
    against an error of 0.763 (1.03 errors). 1000 in 4 s against 600 in 2 s: 23 errors but
    a ratio of 1.2, under a factor of 2. A stream that went silent (0 in 2 s against 40 in
    4 s): ratio 40.5/4 / (0.5/2) = 40.5, log 3.70, error 1.42: 2.6 errors, not moved at
    3.5, moved at 2.5."""
    assert moved(Evidence(8, 4), Evidence(20, 2), factor=2)
    assert moved(Evidence(20, 2), Evidence(8, 4), factor=2)  # either way
    assert not moved(Evidence(8, 4), Evidence(20, 2), factor=2, sigmas=4)
    assert not moved(Evidence(8, 4), Evidence(20, 2), factor=5)
    assert not moved(Evidence(2, 2), Evidence(5, 2), factor=2)
    assert not moved(Evidence(1000, 4), Evidence(600, 2), factor=2)
    assert moved(Evidence(1000, 4), Evidence(600, 2), factor=1.1)
    assert not moved(Evidence(40, 4), Evidence(0, 2), factor=2)
    assert moved(Evidence(40, 4), Evidence(0, 2), factor=2, sigmas=2.5)


def test_an_interval_sums_rates_and_keeps_the_last_selectivity():
    first = {"rate s": Evidence(3, 2), "sel x.a=y.a": Evidence(5, 100)}
    second = {"rate s": Evidence(7, 2), "rate t": Evidence(1, 2), "sel x.a=y.a": Evidence(9, 90)}
    assert interval_evidence([first, second]) == {
        "rate s": Evidence(10, 4), "rate t": Evidence(1, 2), "sel x.a=y.a": Evidence(9, 90)}


def replanned(root: Path, on_change: float | None, every: int = 8
              ) -> tuple[list[str], Replanner]:
    """Each 1-s batch's plan under ``Replanner`` (``auto``) fed the executor's own
    observations of the stream (a dry pass: no joins run)."""
    opt = Optimizer(str(root / "query.sql"), str(root / "catalog.json"), cost_model="rate",
                    optimizer="topdown-inc", rate_profile="local")
    replanner = Replanner(opt, every, "auto", 1, on_change=on_change)
    plans, chosen = [], replanner(None)
    for batch in observations(opt, root, 1):
        plans.append(plan_line(chosen[0] if isinstance(chosen, tuple) else chosen))
        chosen = replanner(batch)
    return plans, replanner


def first_change(plans: list[str], since: int) -> int | None:
    return next((i for i in range(max(since, 1), len(plans)) if plans[i] != plans[i - 1]),
                None)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_jump_switches_within_two_batches_where_the_schedule_takes_four(tmp_path, seed):
    """Re-planning every 8 s (after batches 7, 15, 23, ...), the bids jump at batch 20: on
    the schedule alone the plan changes at batch 24; the trigger re-plans after batch 20,
    so the plan changes at 21 or 22, and before the jump it never fired."""
    root = tmp_path / "nx"
    generate_stream("nexmark", root, seed=seed, phases=JUMP)
    plans, r = replanned(root, 2.0)
    switch = first_change(plans, 20)
    assert switch is not None and switch <= 22, (switch, r.log)
    assert r.triggered and r.triggered[0] in (20, 21), r.triggered
    assert any("(change)" in line for line in r.log)
    plans, r = replanned(root, None)
    assert first_change(plans, 20) == 24 and r.triggered == []


@pytest.mark.parametrize("workload, phases", [
    ("nexmark", STEADY), ("segtolls", "40:positions=250,segstats=10,accidents=5,keys=40")])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_stationary_stream_replans_only_on_the_schedule(tmp_path, workload, phases, seed):
    """40 one-second batches of one phase, re-planning every 4: exactly the re-planning
    after the first batch and the 10 scheduled ones, none triggered, and the same plans as
    with the trigger off."""
    root = tmp_path / workload
    generate_stream(workload, root, seed=seed, phases=phases)
    plans, r = replanned(root, 2.0, every=4)
    assert r.triggered == [] and len(r.log) == 11, r.log
    assert [line.split(':')[0] for line in r.log] == [
        f"after batch {i}" for i in (0, 3, 7, 11, 15, 19, 23, 27, 31, 35, 39)]
    assert plans == replanned(root, None, every=4)[0]


def brute_force(root: Path, batch_seconds: int) -> pd.DataFrame:
    """:data:`QUERY` over all the stream's tuples by plain merges: every combination meeting
    the join and filter conditions whose tuples are all alive at its newest one's time
    (windows 3, 2 and 1 s), with the batch that newest time falls in."""
    data = stream_tuples(root)
    p = data["persons"].rename(columns={"id": "person", "ts": "p_ts"})
    a = data["auctions"].rename(columns={"id": "auction", "ts": "a_ts"})
    b = data["bids"].rename(columns={"ts": "b_ts"})
    j = p.merge(a, left_on="person", right_on="seller").merge(
        b[b["price"] > 100], on="auction")
    newest = np.maximum(np.maximum(j["p_ts"], j["a_ts"]), j["b_ts"])
    alive = (newest - j["p_ts"] < 3) & (newest - j["a_ts"] < 2) & (newest - j["b_ts"] < 1)
    out = j[alive][["person", "state", "auction", "category", "bidder", "price"]].copy()
    out.insert(0, "batch", np.floor(newest[alive] / batch_seconds).astype(int))
    return out


def test_results_across_a_switch_the_trigger_made_equal_brute_force(tmp_path):
    """Persons 15× faster at 6 s, re-planning every 4 one-second batches (after 3, 7, 11)
    with the trigger: it fires after batch 6 and the plan changes at batch 7, moving state,
    where the schedule alone would wait for batch 8; every batch's results equal the brute
    force's, as a multiset."""
    root = tmp_path / "nx"
    generate_stream("nexmark", root, seed=0, phases="6:keys=6;6:persons=60,keys=6")
    expected, sizes = per_batch(brute_force(root, 1))
    assert sum(sizes.values()) > 1000  # the stream does join
    record = Strategy("adaptive")
    opt = Optimizer(QUERY, str(root / "catalog.json"), cost_model="rate",
                    optimizer="topdown-inc", rate_profile="local")
    batches = list(run_strategy("adaptive", opt, root, 1, 4, None, strategy=record,
                                migration="moving", on_change=2.0))
    assert record.triggered == [6], record.log
    assert [b.index for b in batches if b.migration] == [7]
    assert batches[7].migration == "moving" and batches[7].plan != batches[6].plan
    for b in batches:
        assert len(b.rows) == sizes.get(b.index, 0), b.index
        assert answer_digest(b.rows) == expected.get(b.index, answer_digest([])), b.index


def test_evidence_is_the_counts_behind_the_deltas(tmp_path):
    """Every delta a batch reports is its evidence's count over its exposure (rates:
    arrivals over the batch's seconds; selectivities: matching pairs over all pairs)."""
    root = tmp_path / "nx"
    generate_stream("nexmark", root, seconds=4, seed=3)
    opt = Optimizer(QUERY, str(root / "catalog.json"), cost_model="rate")
    for b in observations(opt, root, 2):
        assert {f"rate {t}" for t in b.arrivals} <= set(b.evidence)
        for delta in b.deltas:
            key, value = delta.rsplit(" =", 1)
            e = b.evidence[key]
            assert math.isclose(float(value), e.count / e.exposure, rel_tol=1e-5), delta
        assert all(b.evidence[f"rate {t}"] == Evidence(n, 2) for t, n in b.arrivals.items())


def test_replan_on_change_option(tmp_path, capsys):
    """``--replan-on-change``: a factor above 1 or ``off``; anything else a one-line error."""
    root = tmp_path / "nx"
    generate_stream("nexmark", root, seconds=3)
    for bad in ("1", "0.5", "x", "inf"):
        assert main(["stream", QUERY, "--data", str(root), "--replan-on-change", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert "--replan-on-change" in err and "\n" not in err.splitlines()[-1]
    assert main(["stream", QUERY, "--data", str(root), "--plan-every", "1",
                 "--replan-on-change", "off", "--json"]) == 0
    assert '"replan_on_change": null' in capsys.readouterr().out


def test_the_first_batch_replans_a_catalog_that_misstates_the_stream(tmp_path):
    """The catalog is another stream's (persons at 4/s where 60/s arrive): its plan is not
    the best for the stream. Re-planning every 4 one-second batches (trigger off), the
    optimizer is updated after the first batch, so the plan changes at batch 1 (moving
    state), not at batch 4 as on the schedule alone; every batch's results equal the brute
    force's, as a multiset."""
    root, other = tmp_path / "nx", tmp_path / "other"
    generate_stream("nexmark", root, seed=0, phases="8:persons=60,keys=6")
    generate_stream("nexmark", other, seed=0, phases="8:keys=6")
    shutil.copy(other / "catalog.json", root / "catalog.json")
    expected, sizes = per_batch(brute_force(root, 1))
    assert sum(sizes.values()) > 1000  # the stream does join
    record = Strategy("adaptive")
    opt = Optimizer(QUERY, str(root / "catalog.json"), cost_model="rate",
                    optimizer="topdown-inc", rate_profile="local")
    catalog_plan = plan_line(opt.optimize().plan)
    batches = list(run_strategy("adaptive", opt, root, 1, 4, None, strategy=record,
                                migration="moving", on_change=None))
    assert batches[0].plan == catalog_plan != batches[1].plan, record.log
    assert [b.index for b in batches if b.migration] == [1]
    assert record.log[0].startswith("after batch 0: ") and record.log[0].endswith("(changed)")
    # (no re-planning after the last batch: nothing runs after it)
    assert [line.split(":")[0] for line in record.log] == ["after batch 0", "after batch 3"]
    for b in batches:
        assert len(b.rows) == sizes.get(b.index, 0), b.index
        assert answer_digest(b.rows) == expected.get(b.index, answer_digest([])), b.index
