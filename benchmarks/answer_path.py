"""What keeping a split run's answer in Spark costs on small answers, against collecting it.

Run: ``.venv/bin/python benchmarks/answer_path.py --data DIR [--queries q3,q5] [--splits K]
[--repeat R]``. Per query, reopt's first plan (the built-in catalog at DIR's scale factor,
``topdown-inc``, ``dist``) runs on each of the K hash splits of the loop (the same split
files as ``reopt run``) in two ways, alternated R times (A B A B …, after one untimed warm-up
of each):

* ``driver``: the answer of every split collected (``toPandas``), combined in Python
  (:meth:`reopt.combine.Combiner.combine`), digested on the driver
  (:func:`reopt.execute.answer_digest`) — ``reopt run`` before answers stayed in Spark;
* ``spark``: every split's answer kept in Spark, combined and digested there
  (:func:`reopt.answer.settle`) — ``reopt run`` now.

Printed: the medians over the repeats of the summed execution wall time of the splits, of
the time of combining and digesting, and of their total; and the driver JVM's CPU seconds over both.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from reopt.adaptive import Loop
from reopt.answer import settle
from reopt.api import Optimizer, load_catalog
from reopt.cli import _data_scale_factor
from reopt.execute import answer_digest, execute
from reopt.spark import get_spark, jvm_cpu_seconds


def one(loop: Loop, plan, way: str) -> tuple[float, float, float, int]:
    """Execution seconds, combine seconds, JVM CPU seconds and result rows of one pass."""
    spark = loop.spark
    cpu0 = jvm_cpu_seconds(spark)
    runs = [execute(plan, loop.split_query, loop.data_dir, spark,
                    inputs={loop.splits.table: loop.split_input(i)}, keep=way == "spark")
            for i in range(loop.splits.k)]
    execution = sum(r.seconds for r in runs)
    t0 = time.perf_counter()
    if way == "spark":
        rows = settle(loop.combiner, [r.frame for r in runs], runs[0].columns).result_rows
    else:
        combined = loop.combiner.combine([r.rows for r in runs])
        answer_digest(combined)
        rows = len(combined)
    return execution, time.perf_counter() - t0, jvm_cpu_seconds(spark) - cpu0, rows


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--queries", default="q3,q5")
    ap.add_argument("--splits", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    catalog = load_catalog(None, _data_scale_factor(args.data))
    spark = get_spark()
    print(f"data {args.data}, {args.splits} hash splits, medians of {args.repeat}")
    print("| query | answer path | result rows | exec (s) | combine (s) | total (s) | "
          "JVM CPU (s) |")
    print("|---|---|---|---|---|---|---|")
    for q in args.queries.split(","):
        def make(q: str = q) -> Optimizer:
            return Optimizer(f"tpch:{q}", catalog, cost_model="dist", optimizer="topdown-inc")

        loop = Loop(make, args.data, args.splits, spark)
        plan = loop._first_plan(None)[0].plan
        ways = ("driver", "spark")
        for way in ways:  # warm-up
            one(loop, plan, way)
        got: dict[str, list[tuple[float, float, float, int]]] = {w: [] for w in ways}
        for _ in range(args.repeat):
            for way in ways:
                got[way].append(one(loop, plan, way))
        for way in ways:
            ex, co, cpu = (statistics.median(x[j] for x in got[way]) for j in range(3))
            total = statistics.median(x[0] + x[1] for x in got[way])
            print(f"| {q} | {way} | {got[way][0][3]} | {ex:.2f} | {co:.2f} | {total:.2f} | "
                  f"{cpu:.1f} |", flush=True)
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
