"""The continuous-query executor (``reopt stream``): micro-batch latency and throughput, with
and without intermediate join state, and the cost of a plan migration.

Run: ``.venv/bin/python benchmarks/stream.py [--workload nexmark|linearroad] [--seconds S]
[--seed N] [--batch-seconds B] [--state windows|intermediate|both] [--migration]``
(generates the workload into a temporary folder). Three micro-batches of each state after
the Spark session starts are a warm-up, run and not counted; then the whole stream runs once
under the rate model's plan from the catalog, for each ``--state`` (default both: the runs
interleaved batch by batch, which goes first alternating, since a run right after another
is faster — Spark warms up — and the shared machine's load drifts). Prints per batch the
arrivals, the window state, the join state, the results and the wall time, then the median and
maximum batch time and the throughput (arrived tuples per second of wall time) and the
stream-time speed (stream seconds per wall second; above 1 the executor keeps up with the
stream in real time).

``--migration``: with intermediate state, the stream runs under a plan A until the second the
default phases' 10× phase ends (``2S/3``), then under a plan B keeping a different join state
(A and B: the cheapest trees under the catalog's statistics whose stateful joins differ), once
migrating by moving state and once by parallel track, and once under A throughout (the
baseline) and once under B throughout, the four runs interleaved batch by batch; prints, per
strategy, the migration's own time, the batch times from the switch until the old plan is
dropped, their excess over the baseline's same batches, and B's times for them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from reopt.api import Optimizer
from reopt.optimizers.exhaustive import all_plans
from reopt.plan import PlanNode
from reopt.spark import get_spark
from reopt.stream import ContinuousQuery, MicroBatch
from reopt.streamgen import WORKLOADS, generate_stream
from reopt.streamstate import join_nodes


def summary(name: str, batches: list[MicroBatch], seconds: int) -> None:
    times = [b.seconds for b in batches]
    arrived = sum(sum(b.arrivals.values()) for b in batches)
    results = sum(len(b.rows) for b in batches)
    print(f"{name}: plan {batches[0].plan}: {len(batches)} batches, median "
          f"{statistics.median(times):.2f} s, max {max(times):.2f} s, total {sum(times):.1f} s; "
          f"{arrived} tuples in, {results} results; {arrived / sum(times):.0f} tuples/s, "
          f"{seconds / sum(times):.2f} stream s per s")


def two_trees(opt: Optimizer) -> tuple[PlanNode, PlanNode]:
    """The cheapest plan, and the cheapest one keeping a different join state."""
    space = opt.space()
    aliases = list(opt.query.aliases)
    plans = sorted(all_plans(space), key=lambda p: p.cost)

    def sets(p: PlanNode) -> set:
        return {r for r, _ in join_nodes(p, aliases)}

    first = plans[0]
    return first, next(p for p in plans if sets(p) != sets(first))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="nexmark", choices=sorted(WORKLOADS))
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-seconds", type=int, default=1)
    ap.add_argument("--state", default="both", choices=("windows", "intermediate", "both"))
    ap.add_argument("--migration", action="store_true")
    args = ap.parse_args(argv)
    states = ("windows", "intermediate") if args.state == "both" else (args.state,)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / args.workload
        generate_stream(args.workload, root, args.seconds, args.seed)
        opt = Optimizer(str(root / "query.sql"), str(root / "catalog.json"), cost_model="rate",
                        optimizer="topdown")
        plan = opt.optimize().plan
        spark = get_spark()

        def query(state: str, migration: str = "moving") -> ContinuousQuery:
            return ContinuousQuery(opt.query, opt.catalog, root, spark, args.batch_seconds,
                                   state=state, migration=migration)

        for state in states:  # warm-up: the first batches after Spark starts are slow
            warm = query(state)
            for _ in range(3):
                warm.step(plan)
        # the states' runs interleaved batch by batch: Spark (and the machine's load) drift
        # over a run, and a run after another is faster, so neither goes first throughout
        runs = {state: query(state) for state in states}
        done: dict[str, list[MicroBatch]] = {state: [] for state in states}
        for k in range(-(-args.seconds // args.batch_seconds)):
            for state in (states if k % 2 == 0 else states[::-1]):
                done[state].append(runs[state].step(plan))
        for state, batches in done.items():
            for b in batches:
                print(f"batch {b.index:3} [{b.start:g}, {b.end:g}) {sum(b.arrivals.values()):6}"
                      f" in, state {sum(b.state.values()):6}, join state "
                      f"{sum(b.join_state.values()):6}, {len(b.rows):7} results, "
                      f"{b.seconds:.2f} s ({state})")
            summary(f"{args.workload}, {args.seconds} s, state {state}", batches, args.seconds)
        if args.migration:
            migrate(args, opt, query)
    return 0


def migrate(args: argparse.Namespace, opt: Optimizer,
            query: Callable[..., ContinuousQuery]) -> None:
    """The ``--migration`` runs (module doc)."""
    a, b = two_trees(opt)
    switch = 2 * args.seconds // 3 // args.batch_seconds

    def plan_for(last: MicroBatch | None) -> PlanNode:
        return a if last is None or last.index + 1 < switch else b

    queries = {"baseline": (query("intermediate"), lambda last: a),
               "new plan": (query("intermediate"), lambda last: b),
               "moving": (query("intermediate", "moving"), plan_for),
               "parallel": (query("intermediate", "parallel"), plan_for)}
    runs: dict[str, list[MicroBatch]] = {name: [] for name in queries}
    last: dict[str, MicroBatch | None] = dict.fromkeys(queries)
    for k in range(-(-args.seconds // args.batch_seconds)):  # interleaved, as main's runs
        names = list(queries) if k % 2 == 0 else list(queries)[::-1]
        for name in names:
            cq, choose = queries[name]
            last[name] = cq.step(choose(last[name]))
            runs[name].append(last[name])
    base = runs["baseline"]
    for how in ("moving", "parallel"):
        batches = runs[how]
        assert [len(x.rows) for x in batches] == [len(x.rows) for x in base], how
        after = [x for x in batches[switch:] if len(x.plans) > 1] or batches[switch:switch + 1]
        last = after[-1].index
        window = batches[switch:last + 1]
        extra = sum(x.seconds for x in window) - sum(x.seconds for x in base[switch:last + 1])
        print(f"{how}: switch {batches[switch - 1].plan} -> {batches[switch].plan} at "
              f"{batches[switch].start:g} s; join state before {batches[switch - 1].join_state}"
              f", after {batches[switch].join_state}; migration {batches[switch].migration} "
              f"{batches[switch].migration_seconds:.2f} s; batches {switch}..{last} "
              f"{', '.join(f'{x.seconds:.2f}' for x in window)} s (two plans in "
              f"{sum(len(x.plans) > 1 for x in window)}); {extra:+.2f} s over the baseline's "
              f"same batches ({', '.join(f'{x.seconds:.2f}' for x in base[switch:last + 1])});"
              f" B throughout ran them in "
              f"{', '.join(f'{x.seconds:.2f}' for x in runs['new plan'][switch:last + 1])} s")
    summary("baseline (A throughout)", base, args.seconds)
    summary("B throughout", runs["new plan"], args.seconds)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
