"""A fleet driver run in its own process by tests/test_fleet_cluster.py.

``python tests/fleet_cluster.py run MASTER SAVED OUT.json``: optimize the fleet of
:func:`cluster_queries` on MASTER, apply round 1 while killing one executor JVM (``kill
-9``) as soon as the round's tasks run, save the fleet to SAVED, write the results.
``python tests/fleet_cluster.py resume MASTER SAVED OUT.json``: a new driver loads SAVED and
applies round 2. OUT.json has, per round, the results by query name, and what the run saw of
the cluster (driver and executor process ids, which executor was killed while how many tasks
ran, the executors after the round).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from workload import generate  # noqa: E402

from reopt.fleet import Fleet, FleetQuery  # noqa: E402

MODEL = "io"


def cluster_queries() -> list[FleetQuery]:
    return [FleetQuery(w.name, w.sql, w.catalog)
            for w in generate(23, 6, min_relations=6, max_relations=8)]


def cluster_rounds() -> list[list[dict[str, str]]]:
    ws = generate(23, 6, min_relations=6, max_relations=8)
    return [[{"query": w.name, "delta": d.strip()} for w in ws for d in w.deltas[k].split(";")]
            for k in (0, 1)]


def executors(app: str) -> list[int]:
    # -ww: the whole command line whatever COLUMNS says (the app id is at its end)
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True,
                         text=True).stdout
    return [int(line.split()[0]) for line in out.splitlines()
            if "CoarseGrainedExecutorBackend" in line and app in line]


def registered(app: str, n: int, timeout: float = 120.0) -> list[int]:
    """The executor JVMs of ``app`` once ``n`` of them run: ``local-cluster`` starts them
    after the session is made, so on a loaded machine none may be up yet (a first look
    found none, under load 9)."""
    deadline = time.time() + timeout
    while len(found := executors(app)) < n and time.time() < deadline:
        time.sleep(0.2)
    return found


def kill_one_when_running(sc, group: str, app: str, seen: dict) -> None:
    """Kill one executor JVM once a stage of the round is under way (as the status tracker
    last heard: its listener bus lags, and a round's tasks may now finish in a fraction of a
    second, so waiting to see a task active could miss the round altogether)."""
    tracker = sc.statusTracker()
    deadline = time.time() + 120
    while time.time() < deadline:
        for job in tracker.getJobIdsForGroup(group):
            info = tracker.getJobInfo(job)
            for sid in info.stageIds if info else ():
                st = tracker.getStageInfo(sid)
                if st is not None and st.numCompletedTasks < st.numTasks:
                    running = executors(app)
                    os.kill(running[0], signal.SIGKILL)
                    seen.update(killed=running[0], stage=sid, active_tasks=st.numActiveTasks,
                                unfinished=st.numTasks - st.numCompletedTasks,
                                executors=running)
                    return
        time.sleep(0.01)


def main(mode: str, master: str, saved: str, out: str) -> None:
    from reopt.spark import get_spark

    spark = get_spark(master)
    sc = spark.sparkContext
    app = sc.applicationId
    running = registered(app, 2) if mode == "run" else executors(app)  # local[1]: none
    report: dict = {"driver": os.getpid(), "executors": running, "rounds": {}}
    if mode == "run":
        fleet = Fleet(cluster_queries(), cost_model=MODEL, spark=spark, partitions=2)
        report["rounds"]["0"] = fleet.optimize().by_name()
        seen: dict = {}
        group = fleet.job_group()
        killer = threading.Thread(target=kill_one_when_running, args=(sc, group, app, seen))
        killer.start()
        rnd = fleet.update(cluster_rounds()[0])
        killer.join()
        seen["after"] = executors(app)
        report["fault"] = seen
        report["rounds"]["1"] = rnd.by_name()
        fleet.save(saved)
    else:
        fleet = Fleet.load(saved, spark=spark)
        report["rounds"]["2"] = fleet.update(cluster_rounds()[1]).by_name()
    for results in report["rounds"].values():
        for r in results.values():
            r.pop("step", None)  # the API's pickled step: bytes
    Path(out).write_text(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:5])
