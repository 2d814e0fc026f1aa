"""Running reopt's plans on Spark against Spark SQL's own plan for the same query text.

Run: ``.venv/bin/python benchmarks/execute.py --data DIR [--queries q3,q5] [--repeat N]
[--cost-model io|cout]`` (DIR as ``reopt data tpch`` writes it; the built-in catalog at the
scale factor it records). Per query: the wall time of :func:`reopt.execute.execute` on the
``topdown`` optimum (with its observation of every scan and join) and of Spark SQL answering
the query text (its own join order and operators; both with whole-stage code generation,
adaptive execution as the session has it: off in reopt's sessions),
each the median of ``--repeat`` runs in one Spark session (the first run of each is a
warm-up that is not counted), and whether both answers digest the same. Session start-up
is excluded.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from reopt.api import Optimizer, load_catalog
from reopt.cli import _data_scale_factor
from reopt.execute import answer_digest, execute, spark_sql_answer
from reopt.spark import get_spark


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--queries", default="q3,q5,q10")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cost-model", default="io")
    args = ap.parse_args(argv)
    catalog = load_catalog(None, _data_scale_factor(args.data))
    t0 = time.perf_counter()
    spark = get_spark()
    # both sides with whole-stage code generation (reopt's sessions turn it off for the
    # optimizer's tiny plans; execute() turns it on for its run)
    spark.conf.set("spark.sql.codegen.wholeStage", "true")
    print(f"Spark session start: {time.perf_counter() - t0:.1f} s; data {args.data}")
    print("| query | reopt plan (s) | Spark SQL (s) | result rows | same answer |")
    print("|---|---|---|---|---|")
    for q in args.queries.split(","):
        o = Optimizer(f"tpch:{q}", catalog, cost_model=args.cost_model, optimizer="topdown")
        plan = o.optimize().plan
        ours, theirs = [], []
        for i in range(args.repeat + 1):
            run = execute(plan, o.query, args.data, spark)
            t = time.perf_counter()
            answer = spark_sql_answer(o.query, args.data, spark)
            took = time.perf_counter() - t
            if i:  # the first round warms up the JVM and the file cache
                ours.append(run.seconds)
                theirs.append(took)
        same = run.digest == answer_digest(answer)
        print(f"| {q} | {statistics.median(ours):.2f} | {statistics.median(theirs):.2f} "
              f"| {len(run.rows)} | {'yes' if same else 'NO'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
