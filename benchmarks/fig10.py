"""Figure 10 of the paper, reproduced on the continuous-query executor: re-optimization every
1, 5 and 10 s of stream against the good single plan, on the SegTollS-shaped 5-way join.

Run: ``.venv/bin/python benchmarks/fig10.py [--workload segtolls] [--seconds S] [--seed N]
[--phases P] [--every 1,5,10] [--migrations auto,moving] [--report-every R] [--no-hindsight]
[--executor local|spark] [--json FILE]`` (generates the workload with ``reopt data stream``'s
generator into a temporary folder; one-second micro-batches, intermediate state; the joins in
process by default, :mod:`reopt.streamlocal`, or on Spark; the rate model priced with the
executor's profile, :data:`reopt.costmodel.rate.PROFILES`).

Runs on the same files, interleaved batch by batch (which run goes first alternating, as
``benchmarks/stream.py`` does: Spark warms up over a run and the shared machine's load
drifts), after one warm-up batch (Spark's first jobs are slow): ``static`` (the good single
plan: the best plan for the first interval's true statistics — its first ``min(--every)``
seconds — never changed), ``hindsight`` (every batch under the best plan for its own true
statistics, no migration cost counted beyond the executor's), and ``adaptive`` re-planning
every K seconds (K from ``--every``) from what it observed, with each ``--migrations``
strategy (``auto``: switch only when the rate model's gain over the next interval exceeds
the migration cost).

Prints two markdown tables. Per run: tuples in per wall second, results per wall second,
median and p99 batch latency (a batch's wall time, migration included), the optimizer's time
(initial planning and every re-planning: the ``Replanner`` call, i.e. the incremental
update plus ``auto``'s decision), its mean per re-planning, plan switches, migration time,
and the largest window and join state. Per report interval (``--report-every`` seconds of
stream, default 5): each run's throughput, latency and optimizer time in that interval.
Every run's results are digested; the run says whether all are equal.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from reopt.api import Optimizer
from reopt.execute import answer_digest
from reopt.spark import get_spark
from reopt.stream import MicroBatch
from reopt.streamcli import Replanner
from reopt.streamgen import WORKLOADS, generate_stream
from reopt.streamlocal import EXECUTORS, make_query
from reopt.streamrun import Strategy, run_strategy


@dataclass
class Run:
    """One strategy's batches, with the optimizer time spent before each batch."""

    name: str
    batches: list[MicroBatch] = field(default_factory=list)
    replan: list[float] = field(default_factory=list)
    """Optimizer seconds before each batch (index-aligned with ``batches``); initial
    planning counts before batch 0."""
    replannings: int = 0


def p99(values: list[float]) -> float:
    """The nearest-rank 99th percentile (with few batches: the largest)."""
    ordered = sorted(values)
    return ordered[max(0, -(-99 * len(ordered) // 100) - 1)]


def _optimizer(root: Path, executor: str = "local") -> Optimizer:
    """The rate model's optimizer, priced with the executor's profile."""
    return Optimizer(str(root / "query.sql"), str(root / "catalog.json"), cost_model="rate",
                     optimizer="topdown-inc", rate_profile=executor)


def run_adaptive(root: Path, spark, every: int, migration: str, run: Run,
                 executor: str = "local") -> Iterator[MicroBatch]:
    """Re-planning every ``every`` one-second batches, the Replanner timed call by call;
    yields each batch after recording it (and the optimizer time before it) in ``run``."""
    opt = _optimizer(root, executor)
    t0 = time.perf_counter()
    replanner = Replanner(opt, every, migration, 1)
    initial = time.perf_counter() - t0
    cq = make_query(executor, opt.query, opt.catalog, root, spark, 1, opt.adjustments,
                    state="intermediate", migration="moving")
    last: MicroBatch | None = None
    while cq.batch < cq.seconds:
        t1 = time.perf_counter()
        choice = replanner(last)
        spent = time.perf_counter() - t1 + initial
        initial = 0.0
        plan, how = choice if isinstance(choice, tuple) else (choice, None)
        run.replannings += last is not None and (last.index + 1) % every == 0
        last = cq.step(plan, how)
        run.batches.append(last)
        run.replan.append(spent)
        yield last


def run_fixed(root: Path, spark, name: str, first: int, run: Run,
              executor: str = "local") -> Iterator[MicroBatch]:
    """``static`` (from the first ``first`` batches' true statistics) or ``hindsight``; the
    optimizer's time (after the dry pass, all up front) is counted before batch 0."""
    opt = _optimizer(root, executor)
    record = Strategy(name)
    run.replannings = 1
    for b in run_strategy(name, opt, root, 1, first, spark, strategy=record,
                          executor=executor):
        run.batches.append(b)
        run.replan.append(0.0)
        yield b
    run.replan[0] = record.replan_seconds
    if name == "hindsight":
        run.replannings = len(run.batches)


def summary(run: Run) -> dict:
    bs = run.batches
    times = [b.seconds for b in bs]
    wall = sum(times)
    return {"run": run.name, "batches": len(bs),
            "tuples_per_s": sum(sum(b.arrivals.values()) for b in bs) / wall,
            "results_per_s": sum(len(b.rows) for b in bs) / wall,
            "median_s": statistics.median(times), "p99_s": p99(times), "wall_s": wall,
            "optimizer_s": sum(run.replan),
            "per_replanning_s": sum(run.replan) / max(run.replannings, 1),
            "switches": sum(a.plan != b.plan for a, b in zip(bs, bs[1:], strict=False)),
            "migration_s": sum(b.migration_seconds for b in bs),
            "max_window_state": max(sum(b.state.values()) for b in bs),
            "max_join_state": max(sum(b.join_state.values()) for b in bs),
            "results": sum(len(b.rows) for b in bs),
            "digest": answer_digest([r for b in bs for r in b.rows]),
            "plans": list(dict.fromkeys(b.plan for b in bs)), "times": times,
            "optimizer_per_batch": run.replan}


def intervals(run: Run, every: int) -> list[dict]:
    out = []
    for k in range(0, len(run.batches), every):
        bs = run.batches[k:k + every]
        times = [b.seconds for b in bs]
        wall = sum(times)
        out.append({"run": run.name, "from": bs[0].start, "to": bs[-1].end,
                    "tuples_per_s": sum(sum(b.arrivals.values()) for b in bs) / wall,
                    "results_per_s": sum(len(b.rows) for b in bs) / wall,
                    "median_s": statistics.median(times), "max_s": max(times),
                    "optimizer_s": sum(run.replan[k:k + every]),
                    "switches": sum(b.migration is not None for b in bs),
                    "join_state": sum(bs[-1].join_state.values()), "plan": bs[-1].plan})
    return out


def print_tables(summaries: list[dict], per_interval: list[dict]) -> None:
    print("| run | tuples/s | results/s | median batch s | p99 batch s | wall s | optimizer s "
          "| per re-planning s | switches | migration s | max window state | max join state |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in summaries:
        print(f"| {s['run']} | {s['tuples_per_s']:.0f} | {s['results_per_s']:.1f} | "
              f"{s['median_s']:.2f} | {s['p99_s']:.2f} | {s['wall_s']:.1f} | "
              f"{s['optimizer_s']:.3f} | {s['per_replanning_s']:.4f} | {s['switches']} | "
              f"{s['migration_s']:.2f} | {s['max_window_state']:,} | "
              f"{s['max_join_state']:,} |")
    print()
    print("| run | stream s | tuples/s | results/s | median batch s | max batch s | optimizer s "
          "| switches | join state at end | plan at end |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in per_interval:
        print(f"| {r['run']} | {r['from']:g}–{r['to']:g} | {r['tuples_per_s']:.0f} | "
              f"{r['results_per_s']:.1f} | {r['median_s']:.2f} | {r['max_s']:.2f} | "
              f"{r['optimizer_s']:.3f} | {r['switches']} | {r['join_state']:,} | "
              f"`{r['plan']}` |")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="segtolls", choices=sorted(WORKLOADS),
                    help="generated workload (default segtolls, the SegTollS-shaped join)")
    ap.add_argument("--seconds", type=int, default=30, help="seconds of stream (default 30)")
    ap.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    ap.add_argument("--phases", default=None, help="generator phases (default: its own)")
    ap.add_argument("--every", default="1,5,10",
                    help="re-planning intervals in seconds, comma-separated (default 1,5,10)")
    ap.add_argument("--migrations", default="auto,moving",
                    help="adaptive runs' migration strategies (default auto,moving)")
    ap.add_argument("--report-every", type=int, default=5,
                    help="seconds of stream per row of the per-interval table (default 5)")
    ap.add_argument("--executor", default="local", choices=EXECUTORS,
                    help="run the joins in process (local, default) or on Spark")
    ap.add_argument("--no-hindsight", action="store_true", help="skip the hindsight run")
    ap.add_argument("--json", default=None, help="also write every number to this file")
    args = ap.parse_args(argv)
    try:
        every = [int(x) for x in args.every.split(",")]
        if not every or min(every) < 1:
            raise ValueError
    except ValueError:
        print(f"fig10: --every must be whole seconds >= 1, got {args.every!r}",
              file=sys.stderr)
        return 2
    migrations = args.migrations.split(",")
    bad = [m for m in migrations if m not in ("auto", "moving", "parallel")]
    if bad:
        print(f"fig10: unknown migration {bad[0]!r} (auto, moving, parallel)", file=sys.stderr)
        return 2
    spark = get_spark() if args.executor == "spark" else None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / args.workload
        generate_stream(args.workload, root, args.seconds, args.seed, args.phases)
        warm = _optimizer(root, args.executor)
        make_query(args.executor, warm.query, warm.catalog, root, spark, 1).step(
            warm.optimize().plan)
        runs = [Run("static")] + ([] if args.no_hindsight else [Run("hindsight")])
        streams = [run_fixed(root, spark, r.name, min(every), r, args.executor)
                   for r in runs]
        for k in every:
            for how in migrations:
                runs.append(Run(f"adaptive every {k} s, {how}"))
                streams.append(run_adaptive(root, spark, k, how, runs[-1], args.executor))
        # the runs interleaved batch by batch, which goes first alternating: Spark warms up
        # over a run and the shared machine's load drifts, so no run has the early batches
        for k in range(args.seconds):
            order = list(range(len(runs)))
            for i in (order if k % 2 == 0 else order[::-1]):
                next(streams[i])
            print(f"batch {k} done", file=sys.stderr)
        for rest in streams:  # each run past its last batch: static's totals are recorded
            assert next(rest, None) is None
    summaries = [summary(r) for r in runs]
    per_interval = [row for r in runs for row in intervals(r, args.report_every)]
    print(f"{args.workload}, {args.seconds} s of stream, seed {args.seed}, 1 s batches, "
          f"intermediate state, executor {args.executor}")
    print()
    print_tables(summaries, per_interval)
    same = len({s["digest"] for s in summaries}) == 1
    print()
    print(f"same result multiset for every run: {'yes' if same else 'NO'}")
    for s in summaries:
        if len(s["plans"]) > 1 or s["run"] == "static":
            print(f"  {s['run']} plans: {' | '.join(s['plans'])}")
    if args.json:
        Path(args.json).write_text(json.dumps({"summaries": summaries,
                                               "intervals": per_interval}, indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
