"""Every ``reopt stream --strategy`` on the same stream: adaptive, static, hindsight, the eddy
and Spark's own stream-stream join, on the drifting nexmark workload and the SegTollS-shaped
5-way query (``--workload segtolls``).

Run: ``.venv/bin/python benchmarks/stream_baselines.py [--workloads nexmark,segtolls]
[--seconds S] [--seed N] [--batch-seconds B] [--plan-every K] [--strategies ...]
[--executor local|spark] [--migration auto|moving|parallel] [--phases P]`` (generates each
workload with its default drifting phases, or ``--phases``, into a temporary folder;
adaptive, static and hindsight join in process by default, :mod:`reopt.streamlocal`). Before
the measured runs, one executor batch and one short Spark streaming query warm the JVM up.
The rate model plans with the executor's profile of per-tuple costs (``local`` or ``spark``).
Per strategy: total of its batches' wall times, their driver CPU time (``cpu``: the work of
the in-process strategies, less disturbed by a loaded machine; on Spark it misses the JVM's
work), its whole wall time (``wall``: with its set-up
— the dry pass of static and hindsight, the start of Spark's streaming query), median and
maximum batch time, plan switches, optimizer time, results, largest state (window-buffer
records summed over streams; for Spark, the rows in its join state) and, for the eddy, the
partial results its probes returned; then each strategy's batch times in order. Every
strategy's whole result multiset is digested; the run says whether all are equal.
The eddy runs where the executor does: in process with ``--executor local`` (the default),
and with ``--executor spark`` routing each part of a micro-batch in a Spark task (one job
per batch, :class:`reopt.eddy.SparkEddy`), so its times compare like for like with the
executor's either way; ``eddy-local`` is the in-process eddy whatever the executor (for
reference). ``eddy-fixed``, the eddy (on the executor) with every lottery replaced by FROM
order (no adaptation), is the eddy's own yardstick. A strategy named several times runs
several times, one row each, in the order given (to interleave A/B runs). With
``--warm-up-each``, every strategy named runs once more first, unreported: a strategy's first
run in a JVM pays its own warm-up (its plans' first stages and Spark's code generation for
them), which the shared warm-up above does not cover, so without it the strategy named first
in a command is measured cold.
Adaptive re-plans on a change too (``--replan-on-change``, :mod:`reopt.streamchange`);
``adaptive-scheduled`` is adaptive on the schedule alone (the trigger off), to compare the
two in one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from reopt.api import Optimizer
from reopt.eddy import make_eddy
from reopt.execute import answer_digest
from reopt.migration import MIGRATIONS
from reopt.spark import get_spark
from reopt.sparkstream import SparkStreamJoin
from reopt.streamchange import FACTOR
from reopt.streamcli import change_factor
from reopt.streamgen import generate_stream
from reopt.streamlocal import EXECUTORS, make_query
from reopt.streamrun import STRATEGIES, Strategy, run_strategy


def _warm_up(root: Path, spark, executor: str) -> None:
    opt = Optimizer(str(root / "query.sql"), str(root / "catalog.json"), cost_model="rate",
                    optimizer="topdown")
    make_query(executor, opt.query, opt.catalog, root, spark, 1).step(opt.optimize().plan)
    if spark is None:
        return
    join = SparkStreamJoin(opt.query, opt.catalog, root, spark, 1)
    join.start()
    join.step()
    join.stop()


def run_one(name: str, root: Path, spark, batch_seconds: int, plan_every: int,
            seed: int, executor: str = "local", migration: str = "auto",
            on_change: float | None = FACTOR) -> dict:
    opt = Optimizer(str(root / "query.sql"), str(root / "catalog.json"), cost_model="rate",
                    optimizer="topdown-inc", rate_profile=executor)
    record = Strategy(name)
    t0 = time.perf_counter()
    if name in ("eddy-fixed", "eddy-local"):
        eddy = make_eddy("local" if name == "eddy-local" else executor, opt.query, opt.catalog,
                         root, batch_seconds, seed=seed, spark=spark,
                         routing="fixed" if name == "eddy-fixed" else "lottery")
        batches = list(eddy.run())
    else:
        scheduled = name == "adaptive-scheduled"
        batches = list(run_strategy("adaptive" if scheduled else name, opt, root,
                                    batch_seconds, plan_every // batch_seconds, spark, seed,
                                    record, executor, migration,
                                    None if scheduled else on_change))
    wall = time.perf_counter() - t0
    times = [b.seconds for b in batches]
    switches = sum(a.plan != b.plan for a, b in zip(batches, batches[1:], strict=False))
    return {"strategy": name, "total": sum(times), "wall": wall,
            "cpu": sum(b.cpu_seconds for b in batches),
            "median": statistics.median(times), "max": max(times), "switches": switches,
            "optimizer": record.replan_seconds,
            "results": sum(len(b.rows) for b in batches),
            "digest": answer_digest([r for b in batches for r in b.rows]),
            "state": max(sum(b.state.values()) for b in batches),
            "join_state": max(sum(b.join_state.values()) for b in batches),
            "probed": sum(getattr(b, "probed", 0) for b in batches),
            "plans": [b.plan for b in batches], "times": times, "triggered": record.triggered,
            "log": record.log}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="nexmark,segtolls")
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-seconds", type=int, default=2)
    ap.add_argument("--plan-every", type=int, default=4)
    ap.add_argument("--strategies", default=",".join([*STRATEGIES, "eddy-fixed"]),
                    help="comma-separated, repeats allowed: also eddy-fixed, eddy-local, "
                    "adaptive-scheduled")
    ap.add_argument("--executor", default="local", choices=EXECUTORS,
                    help="where adaptive, static and hindsight join and the eddy routes: "
                    "local (default) or spark")
    ap.add_argument("--migration", default="auto", choices=MIGRATIONS,
                    help="adaptive's migration (default auto)")
    ap.add_argument("--replan-on-change", type=change_factor, default=FACTOR, metavar="F|off",
                    help=f"adaptive's change trigger (reopt stream's; default {FACTOR:g})")
    ap.add_argument("--warm-up-each", action="store_true",
                    help="run every strategy named once first, unreported (see the doc)")
    ap.add_argument("--phases", default=None,
                    help="generator phases for every workload (default: each one's own)")
    args = ap.parse_args(argv)
    strategies = args.strategies.split(",")
    spark = get_spark() if "spark" in strategies or args.executor == "spark" else None
    with tempfile.TemporaryDirectory() as tmp:
        for workload in args.workloads.split(","):
            root = Path(tmp) / workload
            generate_stream(workload, root, args.seconds, args.seed, args.phases)
            _warm_up(root, spark, args.executor)
            for s in dict.fromkeys(strategies) if args.warm_up_each else ():
                run_one(s, root, spark, args.batch_seconds, args.plan_every, args.seed,
                        args.executor, args.migration, args.replan_on_change)
            rows = [run_one(s, root, spark, args.batch_seconds, args.plan_every, args.seed,
                            args.executor, args.migration, args.replan_on_change)
                    for s in strategies]
            print(f"== {workload}: {args.seconds} s of stream, batches of "
                  f"{args.batch_seconds} s, re-plan every {args.plan_every} s, executor "
                  f"{args.executor}, adaptive migration {args.migration}, re-plan on change "
                  f"{args.replan_on_change or 'off'}, phases "
                  f"{args.phases or 'default'}"
                  f"{', every strategy warmed up once' if args.warm_up_each else ''}")
            print(f"{'strategy':18} {'total s':>8} {'cpu s':>7} {'wall s':>8} {'median':>7} "
                  f"{'max':>7} {'switch':>6} {'opt s':>6} {'results':>8} {'state':>7} "
                  f"{'join st':>7} {'probed':>8}")
            for r in rows:
                print(f"{r['strategy']:18} {r['total']:8.3f} {r['cpu']:7.3f} {r['wall']:8.2f} "
                      f"{r['median']:7.3f} {r['max']:7.3f} {r['switches']:6} "
                      f"{r['optimizer']:6.2f} {r['results']:8} {r['state']:7} "
                      f"{r['join_state']:7} {r['probed'] or '':>8}")
            for r in rows:
                print(f"  {r['strategy']} per batch (s): "
                      f"{' '.join(f'{t:.2f}' for t in r['times'])}")
            for r in rows:
                if r["triggered"]:
                    print(f"  {r['strategy']} re-planned on a change after batches "
                          f"{r['triggered']}")
            for r in rows:
                if r["switches"]:
                    print(f"  {r['strategy']} plans: {' | '.join(dict.fromkeys(r['plans']))}")
            same = len({r["digest"] for r in rows}) == 1
            print(f"  same result multiset for every strategy: {'yes' if same else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
