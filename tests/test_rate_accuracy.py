"""The rate model's predicted output rate and state against what the stream executor emits,
on a tiny deterministic stream whose steady-state result count per second is worked out by
hand (issue 21: "predicted output rates within ±25% of the rates measured"; here exact).

Two streams joined on ``k`` over sliding windows, arrivals evenly spaced:

* ``ls`` (alias ``l``): 2 tuples/s at ``S + 0.25`` and ``S + 0.75``, window 3 s;
* ``rs`` (alias ``r``): 4 tuples/s at ``S + 0.125, 0.375, 0.625, 0.875``, window 2 s;
* keys alternate ``0, 1, 0, 1, …`` in each stream's arrival order (2 distinct values).

By hand, once both windows are full (from second 3): a new ``l`` tuple at ``t`` meets the
``r`` tuples of ``(t − 2, t]``, 8 of them (one every 0.25 s; no ``r`` time falls on the
boundary), 4 of its key; a new ``r`` tuple meets the ``l`` tuples of ``(t − 3, t]``, 6 of them,
3 of its key. Results per second: ``2·4 + 4·3 = 20``. Equation 2 as the model writes it:
``f·r_l·r_r·(W_l + W_r) = ½·2·4·(3 + 2) = 20``. The windows hold ``2·3 = 6`` and ``4·2 = 8``
tuples at every batch's end.

Also ``benchmarks/responsiveness.py``'s reading of a run (flaps, the switch's delay, p99 around
the migration and in the steady state) on hand-made batches.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd

from reopt.api import Optimizer
from reopt.eddy import Eddy
from reopt.stream import MicroBatch

SECONDS = 8
SQL = "SELECT l.k, r.k AS rk FROM ls [RANGE 3 SECONDS] l, rs [RANGE 2 SECONDS] r WHERE l.k = r.k"


def _write(root: Path, table: str, offsets: list[float]) -> None:
    """One Parquet file per second; keys alternate in arrival order across the stream."""
    (root / table).mkdir(parents=True)
    n = 0
    for second in range(SECONDS):
        ts = [second + o for o in offsets]
        keys = [(n + i) % 2 for i in range(len(ts))]
        n += len(ts)
        pd.DataFrame({"k": keys, "ts": ts}).to_parquet(root / table / f"{second:06d}.parquet",
                                                        index=False)


def _stream(tmp_path: Path) -> Path:
    root = tmp_path / "two"
    _write(root, "ls", [0.25, 0.75])
    _write(root, "rs", [0.125, 0.375, 0.625, 0.875])
    catalog = {"tables": {
        "ls": {"rate": 2, "window": 3, "columns": {"k": {"distinct": 2}, "ts": {}}},
        "rs": {"rate": 4, "window": 2, "columns": {"k": {"distinct": 2}, "ts": {}}}}}
    (root / "catalog.json").write_text(json.dumps(catalog))
    return root


def test_predicted_rate_and_state_equal_the_hand_count_and_the_executor(tmp_path):
    root = _stream(tmp_path)
    opt = Optimizer(SQL, str(root / "catalog.json"), cost_model="rate", optimizer="topdown")
    step = opt.optimize()
    predicted = step.metrics["stream"]
    assert abs(predicted["rate"] - 20.0) < 1e-9  # ½·2·4·(3 + 2), by hand
    assert abs(predicted["state_windows"] - (6 + 8)) < 1e-9
    eddy = Eddy(opt.query, opt.catalog, root, 1, opt.adjustments)
    per_batch = [len(b.rows) for b in eddy.run()]
    # the windows fill during the first 3 s; from then on every second emits 20 results
    assert per_batch[3:] == [20] * (SECONDS - 3)
    # during the fill-up fewer: the model's rate is the steady state only
    assert sum(per_batch[:3]) < 3 * 20
    windows = {a: len(eddy._window_contents(a, float(SECONDS))) for a in opt.query.aliases}
    assert windows == {"l": 6, "r": 8}


def _responsiveness():
    """``benchmarks/responsiveness.py`` as a module (benchmarks are scripts, not a package)."""
    bench = Path(__file__).resolve().parent.parent / "benchmarks"
    spec = importlib.util.spec_from_file_location("responsiveness_under_test",
                                                  bench / "responsiveness.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_responsiveness_reads_switch_delay_and_p99_off_the_batches():
    plans = ["A", "A", "B", "A", "A", "A", "C", "C", "C", "C"]
    seconds = [1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 3.0, 1.5, 1.0, 1.2]
    batches = [MicroBatch(i, float(i), i + 1.0, p, {}, {}, [], [], s,
                          migration="moving" if i in (2, 3, 6) else None,
                          migration_seconds=0.4 if i == 6 else 0.0)
               for i, (p, s) in enumerate(zip(plans, seconds, strict=True))]
    r = _responsiveness().analyse(batches, jump=4)
    # by hand: plan changes at 2 and 3 (before the jump: flaps), the first at or after 4 is 6
    assert r["flaps"] == [2, 3] and r["switch"] == 6 and r["delay"] == 2
    assert r["migration_seconds"] == 0.4 and r["median"] == (1.2 + 1.5) / 2
    # around = batches 6, 7 (3.0, 1.5); steady = the jump's phase without 4 (after the change
    # at 3), 6 and 7: batches 5, 8, 9 (2.0, 1.0, 1.2); p99 by linear interpolation
    assert abs(r["p99_around"] - (1.5 + 0.99 * 1.5)) < 1e-12
    assert abs(r["p99_steady"] - (1.2 + 0.98 * 0.8)) < 1e-12
