"""A fleet on a real multi-process cluster (issue 19): ``local-cluster[2,1,1024]`` starts two
executor JVMs, each with its own Python workers, so nothing may depend on state in the
driver. One executor is killed (``kill -9``) while a stage of the update round has tasks
left (as the status tracker last heard); the round must still end exact. Then a new driver
process loads the saved fleet and runs the next round. Every result is compared with
in-process optimizers fed the same deltas from scratch (the oracle), in this process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fleet_cluster import MODEL, cluster_queries, cluster_rounds

from reopt.evaluator.driver import load_program
from reopt.fleet import FleetOptions, _optimizer

pytestmark = pytest.mark.spark

SCRIPT = Path(__file__).with_name("fleet_cluster.py")


def drive(mode: str, master: str, saved: Path, out: Path) -> dict:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, str(SCRIPT), mode, master, str(saved), str(out)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def expected(rounds_applied: int) -> dict[str, tuple[float, str]]:
    """Per query: the best cost and plan of a fresh in-process optimizer given the deltas of
    the first ``rounds_applied`` rounds."""
    opts = FleetOptions(load_program(None, "all"), MODEL, "all")
    out = {}
    for fq in cluster_queries():
        o = _optimizer(fq, opts)
        deltas = [d["delta"] for r in cluster_rounds()[:rounds_applied]
                  for d in r if d["query"] == fq.name]
        if deltas:
            o.adjustments = o.check(deltas)
        step = o.optimize()
        out[fq.name] = (step.cost, json.dumps(step.plan.to_json(), sort_keys=True))
    return out


def test_a_fleet_survives_a_lost_executor_and_a_driver_restart(tmp_path):
    saved = tmp_path / "saved"
    run = drive("run", "local-cluster[2,1,1024]", saved, tmp_path / "run.json")
    assert run["driver"] not in run["executors"] and len(run["executors"]) == 2
    fault = run["fault"]
    assert fault.get("unfinished", 0) >= 1 and fault["killed"] in fault["executors"]
    assert fault["killed"] not in fault["after"]  # it died, and the round went on
    resumed = drive("resume", "local[1]", saved, tmp_path / "resume.json")
    for k, report in ((0, run), (1, run), (2, resumed)):
        want = expected(k)
        got = report["rounds"][str(k)]
        assert set(got) == set(want)
        for name, (cost, plan) in want.items():
            assert got[name]["error"] is None
            assert (got[name]["cost"], got[name]["plan"]) == (cost, plan), (k, name)
