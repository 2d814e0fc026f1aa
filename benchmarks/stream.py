"""The continuous-query executor (``reopt stream``): micro-batch latency and throughput.

Run: ``.venv/bin/python benchmarks/stream.py [--workload nexmark|linearroad] [--seconds S]
[--seed N] [--batch-seconds B]`` (generates the workload into a temporary folder). The first
micro-batch after the Spark session starts is a warm-up, run and not counted; then the whole
stream runs once under the rate model's plan from the catalog. Prints per batch the arrivals,
the window state, the results and the wall time, then the median and maximum batch time and
the throughput (arrived tuples per second of wall time) and the stream-time speed (stream
seconds per wall second; above 1 the executor keeps up with the stream in real time).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from reopt.api import Optimizer
from reopt.spark import get_spark
from reopt.stream import ContinuousQuery
from reopt.streamgen import WORKLOADS, generate_stream


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="nexmark", choices=sorted(WORKLOADS))
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-seconds", type=int, default=1)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / args.workload
        generate_stream(args.workload, root, args.seconds, args.seed)
        opt = Optimizer(str(root / "query.sql"), str(root / "catalog.json"), cost_model="rate",
                        optimizer="topdown")
        plan = opt.optimize().plan
        spark = get_spark()
        ContinuousQuery(opt.query, opt.catalog, root, spark, args.batch_seconds).step(plan)
        cq = ContinuousQuery(opt.query, opt.catalog, root, spark, args.batch_seconds)
        batches = list(cq.run(plan))
    for b in batches:
        print(f"batch {b.index:3} [{b.start:g}, {b.end:g}) {sum(b.arrivals.values()):6} in, "
              f"state {sum(b.state.values()):6}, {len(b.rows):7} results, {b.seconds:.2f} s")
    times = [b.seconds for b in batches]
    arrived = sum(sum(b.arrivals.values()) for b in batches)
    results = sum(len(b.rows) for b in batches)
    print(f"{args.workload}, {args.seconds} s of stream, plan {batches[0].plan}: "
          f"{len(batches)} batches of {args.batch_seconds} s, median {statistics.median(times):.2f}"
          f" s, max {max(times):.2f} s; {arrived} tuples in, {results} results; "
          f"{arrived / sum(times):.0f} tuples/s, {args.seconds / sum(times):.2f} stream s per s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
