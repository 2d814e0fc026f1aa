"""How one split of a query runs under reopt's plan and under Spark's own: cores, tasks, plans.

Run: ``.venv/bin/python benchmarks/coretrace.py --data DIR [--query pclerk] [--splits 8]
[--split 1] [--cost-model dist] [--repeat 3] [--plans]``. The split relation is cut as
``reopt run`` cuts it; reopt's plan is the one ``hindsight`` runs on the split (the first
plan updated with that split's observations), Spark's is the ``spark`` strategy's (the tables
as ``ANALYZE``d Parquet tables of a scratch database, Spark's settings). Each is run
``--repeat`` times, alternating, after one untimed run each. Per run: wall seconds, the driver
JVM's CPU seconds, this Python process's CPU seconds, and ``cores`` = JVM CPU / wall (how many
cores the run kept busy on average); per stage of the last run: its tasks. ``--plans`` prints
both executed physical plans. What BENCHMARKS.md ("Why reopt's plans ran slower than
Spark's") reads.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from reopt.adaptive import SPARK_SETTINGS, Loop, plan_shape, spark_settings
from reopt.answer import keep, release
from reopt.api import Optimizer, load_catalog
from reopt.cli import _data_scale_factor
from reopt.execute import execute
from reopt.spark import get_spark, jvm_cpu_seconds


def _stages(spark: Any, group: str) -> list[tuple[int, str, int]]:
    """(stage id, name, tasks) of every stage the job group ran."""
    tracker = spark.sparkContext.statusTracker()
    out = []
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info else []:
            s = tracker.getStageInfo(stage)
            if s is not None:
                out.append((stage, s.name.split(" at ")[0], s.numTasks))
    return sorted(out)


def _timed(spark: Any, label: str, run: Any) -> tuple[float, float, float, str]:
    """Run ``run()`` (returns the kept frame and the executed plan) in a job group."""
    group = f"coretrace-{label}-{uuid.uuid4().hex[:6]}"
    spark.sparkContext.setJobGroup(group, label)
    t0, cpu0, py0 = time.perf_counter(), jvm_cpu_seconds(spark), time.process_time()
    frame, plan = run()
    wall = time.perf_counter() - t0
    cpu, py = jvm_cpu_seconds(spark) - cpu0, time.process_time() - py0
    release(frame)
    stages = _stages(spark, group)
    spark.sparkContext.setJobGroup("", "")
    tasks = ", ".join(f"{n}:{t}" for _, n, t in stages)
    return wall, cpu, py, f"{len(stages)} stages [{tasks}]", plan


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--query", default="pclerk")
    ap.add_argument("--splits", type=int, default=8)
    ap.add_argument("--split", type=int, default=1)
    ap.add_argument("--cost-model", default="dist")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--plans", action="store_true")
    args = ap.parse_args(argv)
    catalog = load_catalog(None, _data_scale_factor(args.data))
    spark = get_spark()

    def make() -> Optimizer:
        return Optimizer(f"tpch:{args.query}", catalog, cost_model=args.cost_model,
                         optimizer="topdown-inc")

    loop = Loop(make, args.data, args.splits, spark)
    s, i = loop.splits, args.split
    session, _ = loop._first_plan(None)
    split = loop.split_input(i)
    inputs = {**loop._tables, s.table: split}  # as the loop runs it: the tables read once
    seen = execute(session.plan, loop.split_query, args.data, spark, inputs=inputs, keep=True)
    release(seen.frame)
    plan = session.optimizer.update(seen.deltas()).plan
    print(f"{args.query}, split {i} of {args.splits} ({s.table}: {s.rows[i]} rows); reopt's "
          f"plan: {plan_shape(plan)}")

    def reopt_run() -> tuple[Any, str]:
        run = execute(plan, loop.split_query, args.data, spark, inputs=inputs, keep=True)
        return run.frame, run.spark_plan

    db = f"coretrace_{uuid.uuid4().hex[:8]}"
    scratch = tempfile.mkdtemp(prefix="coretrace-")
    current = spark.catalog.currentDatabase()
    spark.sql(f"CREATE DATABASE {db} LOCATION '{Path(scratch).as_uri()}'")
    tables = inputs
    for t, df in tables.items():
        df.write.format("parquet").saveAsTable(f"{db}.{t}")
        spark.sql(f"ANALYZE TABLE {db}.{t} COMPUTE STATISTICS FOR ALL COLUMNS")

    def spark_run() -> tuple[Any, str]:
        spark.catalog.setCurrentDatabase(db)
        try:
            with spark_settings(spark, SPARK_SETTINGS):
                answer = spark.sql(loop.split_query.sql)
                frame = keep(answer)
                return frame, answer._jdf.queryExecution().executedPlan().toString()
        finally:
            spark.catalog.setCurrentDatabase(current)

    try:
        results: dict[str, list[tuple[float, float, float]]] = {"reopt": [], "spark": []}
        last: dict[str, tuple[str, str]] = {}
        for rep in range(args.repeat + 1):
            for label, run in (("reopt", reopt_run), ("spark", spark_run)):
                wall, cpu, py, stages, executed = _timed(spark, label, run)
                if rep:  # the first run of each is a warm-up
                    results[label].append((wall, cpu, py))
                last[label] = (stages, executed)
                print(f"  {label} run {rep}{' (warm-up)' if not rep else ''}: wall {wall:.2f} s,"
                      f" JVM CPU {cpu:.2f} s, cores {cpu / wall:.2f}, Python CPU {py:.2f} s; "
                      f"{stages}", flush=True)
        for label, rs in results.items():
            if rs:
                wall = statistics.median(r[0] for r in rs)
                cpu = statistics.median(r[1] for r in rs)
                print(f"{label}: median wall {wall:.2f} s, JVM CPU {cpu:.2f} s, "
                      f"cores {cpu / wall:.2f}")
        if args.plans:
            for label, (_, executed) in last.items():
                print(f"\n== {label}'s executed plan ==\n{executed}")
    finally:
        spark.catalog.setCurrentDatabase(current)
        spark.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
