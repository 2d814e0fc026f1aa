"""Initial optimization time without pruning: declarative (python, spark) vs topdown and
bottomup.

Run: ``.venv/bin/python benchmarks/initial.py [--repeat N] [--engines python,spark]
[--out FILE]`` (``make bench-initial``). Every optimizer runs on the same query in the same
process, one after the other, ``--repeat`` times (Spark: half as many, at least one); the table
reports the median wall time (min–max) of each and the ratio of the declarative medians to
``topdown``'s median, measured in the same run. Spark's session start-up is excluded (it is
one-time set-up) and reported once.

This script measures the declarative optimizer with ``--pruning none``, the paper's
exponential baseline: it costs every plan tree, so only queries whose PlanCost relation stays
small are run: Q3 and Q10 under both models, Q5 and Q5S and Q8Join under ``cout``. The others
are listed with their plan-tree counts. Initial optimization with pruning, on every query
under ``io``, is Figure 5 of ``make bench`` (``benchmarks/run.py``) and ``pruning.py``.
"""

from __future__ import annotations

import statistics
import sys
import time

from harness import (
    emit,
    engine_list,
    machine,
    ms,
    out_file,
    parser,
    plan_trees,
    script,
    timed,
    today,
)

from reopt.api import Optimizer
from reopt.cliargs import positive_int

WORKLOAD = [
    ("tpch:q3", "io"), ("tpch:q3", "cout"), ("tpch:q10", "io"), ("tpch:q10", "cout"),
    ("tpch:q5", "cout"), ("tpch:q5s", "cout"), ("tpch:q8join", "cout"),
]
NOT_RUN = [("tpch:q5", "io"), ("tpch:q5s", "io"), ("tpch:q8join", "io")]


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "benchmarks/initial.py")
    ap.add_argument("--repeat", type=positive_int, default=5, metavar="N",
                    help="runs of each optimizer per query (default %(default)s; the Spark "
                    "engine gets half as many, at least one)")
    ap.add_argument("--engines", type=engine_list, default=engine_list("python,spark"),
                    metavar="ENGINES", help="comma-separated engines of the declarative "
                    "optimizer: python, spark (default python,spark)")
    ap.add_argument("--out", type=out_file, default=None, metavar="FILE",
                    help="also write the markdown report to FILE (default: standard output "
                    "only)")
    args = ap.parse_args(argv)
    engines = list(args.engines)
    setup = None
    if "spark" in engines:
        from reopt.spark import get_spark

        t0 = time.perf_counter()
        get_spark()
        setup = time.perf_counter() - t0
    header = ["query", "model", "topdown ms", "bottomup ms"]
    header += [f"declarative-{e} ms" for e in engines]
    header += [f"declarative-{e} / topdown" for e in engines]
    header += ["PlanCost tuples", "same cost"]
    rows = []
    for query, model in WORKLOAD:
        results = {}
        for name in ("topdown", "bottomup"):
            results[name] = timed(Optimizer(query, cost_model=model, optimizer=name),
                                  args.repeat)[:2]
        tuples = 0
        for e in engines:
            opt = Optimizer(query, cost_model=model, engine=e, pruning="none")
            results[e] = timed(opt, args.repeat if e == "python" else max(1, args.repeat // 2))[:2]
            tuples = opt.optimize().metrics["relations"]["PlanCost"]
        td = statistics.median(results["topdown"][1])
        same = len({round(c, 6) for c, _ in results.values()}) == 1
        rows.append(
            [query, model, ms(results["topdown"][1]), ms(results["bottomup"][1])]
            + [ms(results[e][1]) for e in engines]
            + [f"{statistics.median(results[e][1]) / td:.1f}×" for e in engines]
            + [str(tuples), "yes" if same else "NO"]
        )
        print(" | ".join(rows[-1]), file=sys.stderr)
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(r) + " |" for r in rows),
    ]
    skipped = []
    for query, model in NOT_RUN:
        trees = plan_trees(query, model)
        skipped.append(f"- {query} under `{model}`: {trees:,.0f} plan trees — not run "
                       "without pruning")
    meta = [
        f"Command: `.venv/bin/python benchmarks/initial.py --repeat {args.repeat} "
        f"--engines {','.join(engines)}`",
        f"Date: {today()}; machine: {machine()}",
        "Times: median (min–max) wall milliseconds of the optimization work of one query, "
        f"{args.repeat} runs (Spark: {max(1, args.repeat // 2)}).",
    ]
    if setup is not None:
        meta.append(f"Spark session start-up (one-time, excluded): {setup:.1f} s.")
    text = "\n".join(meta) + "\n\n" + "\n".join(lines) + "\n\n" + "\n".join(skipped) + "\n"
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
