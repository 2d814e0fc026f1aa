"""Where a continuous-query micro-batch's time goes, per executor (issue 21's speed piece).

Run: ``.venv/bin/python benchmarks/stream_profile.py [--workload nexmark] [--seconds 12]
[--seed 0] [--executors spark,local] [--batch-seconds 1] [--phases P]`` (generates the
workload's default phases, or ``--phases``, into a temporary folder; the rate model's plan
from the catalog, never changed; intermediate state; the first batch is a warm-up and not
counted).

Per batch: wall time, the driver process's CPU time (``time.process_time``: Python, pandas,
Py4J — not the JVM's executors), the Spark jobs it started (counted with a job group per
batch through ``SparkContext.statusTracker``), and the wall time inside each of the batch's
parts: reading the files, building DataFrames from pandas (``createDataFrame``: window
buffers, arrivals and kept states), collecting a stateful join's new results to the driver
(``_rows``), the joins (on Spark only building the DataFrame plans: the work runs in the
collects), the final answer (constant conditions, SELECT list, collect), sliding the windows
and the observations (``rate``/``sel`` deltas). The rest (``other``) is the delta
bookkeeping, state expiry and migration. Prints one table of means.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from reopt.api import Optimizer
from reopt.spark import get_spark
from reopt.streamgen import generate_stream
from reopt.streamlocal import make_query

PARTS = {"_read": "read", "_frame": "createDataFrame", "_state_frame": "createDataFrame",
         "_rows": "collect states", "_join": "joins", "_answer": "answer",
         "_slide": "slide", "observe": "observe"}


def profile(executor: str, root: Path, spark, batch_seconds: int) -> dict[str, float]:
    opt = Optimizer(str(root / "query.sql"), str(root / "catalog.json"), cost_model="rate",
                    optimizer="topdown")
    cq = make_query(executor, opt.query, opt.catalog, root, spark, batch_seconds,
                    opt.adjustments)
    spent: dict[str, float] = defaultdict(float)
    depth = [0]
    for method, part in PARTS.items():
        inner = getattr(cq, method)

        def timed(*a, _inner=inner, _part=part, **k):
            depth[0] += 1
            t0 = time.perf_counter()
            try:
                return _inner(*a, **k)
            finally:
                depth[0] -= 1
                if depth[0] == 0:  # count nested calls once, in the outermost part
                    spent[_part] += time.perf_counter() - t0
        setattr(cq, method, timed)
    plan = opt.optimize().plan
    rows: list[dict[str, float]] = []
    tracker = spark.sparkContext.statusTracker() if spark is not None else None
    while cq.batch * cq.batch_seconds < cq.seconds:
        spent.clear()
        group = f"profile-{executor}-{cq.batch}"
        if spark is not None:
            spark.sparkContext.setJobGroup(group, group)
        wall, cpu = time.perf_counter(), time.process_time()
        b = cq.step(plan)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        jobs = len(tracker.getJobIdsForGroup(group)) if tracker is not None else 0
        row = {"wall": wall, "cpu": cpu, "jobs": jobs, "results": len(b.rows),
               "tuples": sum(b.arrivals.values()), **spent}
        row["other"] = wall - sum(spent.values())
        rows.append(row)
    if spark is not None:
        spark.sparkContext.setJobGroup("", "")
    measured = rows[1:]  # the first batch warms up
    keys = ["wall", "cpu", "jobs", "tuples", "results", *dict.fromkeys(PARTS.values()), "other"]
    return {k: statistics.mean(r.get(k, 0.0) for r in measured) for k in keys}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="nexmark")
    ap.add_argument("--seconds", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-seconds", type=int, default=1)
    ap.add_argument("--executors", default="spark,local")
    ap.add_argument("--phases", default=None, help="generator phases or preset (default: its own)")
    args = ap.parse_args(argv)
    executors = args.executors.split(",")
    spark = get_spark() if "spark" in executors else None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / args.workload
        generate_stream(args.workload, root, args.seconds, args.seed, args.phases)
        out = {e: profile(e, root, spark if e == "spark" else None, args.batch_seconds)
               for e in executors}
    keys = list(next(iter(out.values())))
    print(f"{args.workload}, {args.seconds} s, phases {args.phases or 'default'}, seed "
          f"{args.seed}, batches of "
          f"{args.batch_seconds} s; means per batch over batches 1-{args.seconds - 1}")
    print("| executor | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for e, m in out.items():
        print(f"| {e} | " + " | ".join(f"{m[k]:.3f}" if k not in ("jobs", "tuples", "results")
                                       else f"{m[k]:.1f}" for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
