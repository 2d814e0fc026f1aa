"""Where the ``python`` engine's initial optimization spends its time, next to ``topdown``.

Run: ``.venv/bin/python benchmarks/profile_python.py [--repeat N] [--queries Q,…]
[--profile QUERY]``. For each query under ``io``, in one process: ``topdown`` and the
declarative optimizer on the ``python`` engine with ``--pruning all``, one warm-up run each,
then ``--repeat`` rounds of one run each; times are medians, the ratio is taken between the
medians of the same run (issue 4's goal: within 1.5× of ``topdown``).

Then, per query, a second pass splits the declarative median: the built-in functions (the
costmodel: plan enumeration and costing, the work ``topdown`` does too — timed through wrapped
copies of the built-ins, so the pass runs a little slower), the engine (the rest) and the
garbage collector's pauses within it. ``--profile QUERY`` prints cProfile's top functions of the
declarative optimizer on QUERY instead.
"""

from __future__ import annotations

import cProfile
import dataclasses
import gc
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from harness import MODEL, machine, parser, round_robin, script, today

from reopt.api import Optimizer
from reopt.cliargs import positive_int
from reopt.evaluator.driver import load_program

QUERIES = ("tpch:q5", "tpch:q5s", "tpch:q10", "tpch:q8join", "tpch:q8joins")


def declarative(query: str, program: Any = None) -> Optimizer:
    return Optimizer(query, cost_model=MODEL, engine="python", pruning="all", program=program)


def seconds(opt: Optimizer) -> Callable[[], float]:
    return lambda: opt.optimize().metrics["seconds"]


def timed_builtins(spent: dict[str, float]) -> Any:
    """The ``all`` program with every built-in wrapped to add its wall time to ``spent``."""
    program = load_program(None, "all")

    def wrap(name: str, fn: Callable) -> Callable:
        def timed(ctx: Any, *args: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(ctx, *args)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0
        return timed

    # (a program of its own: replace() gives it its own structures, not the loaded rules')
    return dataclasses.replace(program, builtins={
        n: dataclasses.replace(b, fn=wrap(n, b.fn), one=b.one and wrap(n, b.one))
        for n, b in program.builtins.items()})


def split(query: str, repeat: int) -> dict[str, float]:
    """Median milliseconds of one declarative run: total, built-ins, engine, GC pauses."""
    spent: dict[str, float] = {}
    opt = declarative(query, timed_builtins(spent))
    opt.optimize()
    pauses: list[float] = []
    started: list[float] = []

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        else:
            pauses.append(time.perf_counter() - started.pop())

    rows = []
    gc.callbacks.append(on_gc)
    try:
        for _ in range(repeat):
            spent.clear()
            pauses.clear()
            total = opt.optimize().metrics["seconds"]
            rows.append((total, sum(spent.values()), sum(pauses)))
    finally:
        gc.callbacks.remove(on_gc)
    total, builtins, collector = (statistics.median(c) * 1000 for c in zip(*rows, strict=True))
    return {"total": total, "builtins": builtins, "engine": total - builtins, "gc": collector}


def profile(query: str, runs: int = 5) -> None:
    opt = declarative(query)
    opt.optimize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(runs):
        opt.optimize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(30)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "benchmarks/profile_python.py")
    ap.add_argument("--repeat", type=positive_int, default=9, metavar="N",
                    help="timed rounds per optimizer and query, after one warm-up run each "
                    "(default %(default)s)")
    ap.add_argument("--queries", default=",".join(QUERIES), metavar="Q,…",
                    help="comma-separated queries, built-in names or .sql files (default "
                    "%(default)s)")
    ap.add_argument("--profile", default=None, metavar="QUERY",
                    help="instead of the table: cProfile's top 30 functions of 5 declarative "
                    "runs on QUERY")
    args = ap.parse_args(argv)
    if args.profile:
        declarative(args.profile)  # an unknown query fails here, in one line
        profile(args.profile)
        return 0
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    if not queries:
        ap.error(f"--queries '{args.queries}' names no query")
    for q in queries:  # every name checked before minutes of measuring the ones before it
        declarative(q)
    print(f"Date: {today()}; {machine()}; cost model `{MODEL}`, TPC-H SF1 statistics, "
          f"{args.repeat} rounds.\n")
    print("| query | topdown ms | python:all ms | × topdown | built-ins ms | engine ms "
          "| of which GC ms |")
    print("|---|---|---|---|---|---|---|")
    ratios = []
    for query in queries:
        td = Optimizer(query, cost_model=MODEL, optimizer="topdown")
        de = declarative(query)
        if td.optimize().cost != de.optimize().cost:
            raise SystemExit(f"{query}: the optimizers disagree on the best cost")
        times = round_robin({"topdown": seconds(td), "python": seconds(de)}, args.repeat)
        t, d = (statistics.median(times[k]) * 1000 for k in ("topdown", "python"))
        ratios.append(d / t)
        s = split(query, args.repeat)
        print(f"| {query} | {t:.2f} | {d:.2f} | {d / t:.2f} | {s['builtins']:.2f} "
              f"| {s['engine']:.2f} | {s['gc']:.2f} |", flush=True)
    print(f"\nMedian ratio: {statistics.median(ratios):.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
