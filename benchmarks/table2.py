"""The paper's Table 2 and Figure 7 setting (Section 6.3) on Spark: a query over skewed data
cut into splits, re-optimized incrementally after each split from what the split's execution
observed, against executing its first plan on every split; and the re-optimization's own cost
per split against ``topdown`` from scratch on the same statistics.

Run: ``.venv/bin/python benchmarks/table2.py --data DIR [--query q5] [--splits 10]
[--cost-model dist] [--strategies static,adaptive,hindsight,spark] [--json FILE]``
(DIR as ``reopt data tpch --skew 0.5 --correlate`` writes it; the built-in catalog at the
scale factor DIR records). The adaptive loop is :class:`reopt.adaptive.Loop` with the
declarative optimizer (python engine, ``all`` pruning) as the incremental re-optimizer, as in
the paper. Every strategy reads the same split files (written once, untimed); a warm-up run
of ``static`` is not counted.

Table 2 (per split): execution wall time and the driver JVM's CPU time of each strategy;
``adaptive`` adds its re-optimization time (the update after the previous split). The JVM CPU
time is the more stable measure on a shared machine: under ``local[*]`` it is the whole
query's work.

Figure 7 (per split): the adaptive session's update batches replayed, each on three fresh
optimizers fed the same batches: the declarative optimizer's incremental update, ``topdown``
re-optimizing from scratch, and ``topdown-inc``'s update (CPU time of this process, median of
``--repeat`` replays), and the declarative update's share of the plan space it touched
(``update_ratio``: OR and AND nodes).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

from harness import geometric_mean

from reopt.adaptive import Loop
from reopt.api import Optimizer, load_catalog
from reopt.cli import _data_scale_factor
from reopt.spark import get_spark


def replay(make, first: list[str], updates: list[list[str]], repeat: int) -> list[dict]:
    """Per update batch: CPU ms of declarative update, topdown from scratch, topdown-inc
    update (medians over ``repeat`` replays) and the declarative update's update_ratio."""
    per: list[dict] = [{"decl": [], "topdown": [], "topdown-inc": []} for _ in updates]
    for _ in range(repeat):
        opts = {name: make(name) for name in ("decl", "topdown", "topdown-inc")}
        for o in opts.values():
            o.optimize()
            o.update(first)
        for k, batch in enumerate(updates):
            for name, o in opts.items():
                t = time.process_time()
                step = o.update(batch)
                per[k][name].append(1000 * (time.process_time() - t))
                if name == "decl":
                    per[k]["ratio"] = step.metrics.get("update_ratio", {})
                    per[k]["cost"] = step.cost
                elif not math.isclose(step.cost, per[k]["cost"], rel_tol=1e-9):
                    raise AssertionError(f"{name} disagrees with declarative after update {k}")
    return [{"decl_ms": statistics.median(p["decl"]),
             "topdown_ms": statistics.median(p["topdown"]),
             "topdown_inc_ms": statistics.median(p["topdown-inc"]),
             "update_ratio": p["ratio"]} for p in per]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--query", default="q5")
    ap.add_argument("--splits", type=int, default=10)
    ap.add_argument("--cost-model", default="dist")
    ap.add_argument("--split-by", default="hash", choices=("hash", "range"))
    ap.add_argument("--split-column")
    ap.add_argument("--strategies", default="static,adaptive,hindsight,spark")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    catalog = load_catalog(None, _data_scale_factor(args.data))
    spark = get_spark()

    def make(optimizer: str = "declarative") -> Optimizer:
        if optimizer == "decl":
            optimizer = "declarative"
        return Optimizer(f"tpch:{args.query}", catalog, cost_model=args.cost_model,
                         optimizer=optimizer, engine="python")

    loop = Loop(make, args.data, args.splits, spark, by=args.split_by,
                column=args.split_column)
    s = loop.splits
    print(f"{args.query} on {args.data}: {s.k} {s.by} splits of {s.alias} by {s.column} "
          f"({min(s.rows):,}-{max(s.rows):,} rows each), cost model {args.cost_model}, "
          f"declarative optimizer (python engine)", flush=True)
    reference = loop.run("static").answer_digest  # warm-up: JVM, file cache, split files
    runs = {}
    for name in args.strategies.split(","):
        t = time.perf_counter()
        runs[name] = loop.run(name)
        print(f"  {name}: {time.perf_counter() - t:.0f} s, same answer: "
              f"{runs[name].answer_digest == reference}", flush=True)
    names = list(runs)
    print("\nTable 2: seconds per split, execution wall (JVM CPU); adaptive: + re-optimization.\n")
    print("| split | rows | " + " | ".join(names) + " | adaptive plan changed |")
    print("|---|---|" + "---|" * len(names) + "---|")
    for i in range(s.k):
        cells = []
        for n in names:
            x = runs[n].splits[i]
            extra = f" + {x.reopt_seconds:.3f}" if n == "adaptive" else ""
            cells.append(f"{x.execution_seconds:.2f} ({x.execution_cpu_seconds:.1f}){extra}")
        changed = runs["adaptive"].splits[i].plan_changed if "adaptive" in runs else ""
        print(f"| {i} | {s.rows[i]:,} | " + " | ".join(cells) + f" | {changed} |")
    totals = {n: (sum(x.execution_seconds + x.reopt_seconds for x in r.splits),
                  sum(x.execution_cpu_seconds for x in r.splits)) for n, r in runs.items()}
    print("| total | | " + " | ".join(f"{w:.2f} ({c:.1f})" for w, c in totals.values())
          + " | |")
    print()
    if "adaptive" in runs:
        a_wall, a_cpu = totals["adaptive"]
        for n in names:
            if n != "adaptive":
                w, c = totals[n]
                print(f"* adaptive / {n}: wall {a_wall / w:.2f}×, JVM CPU {a_cpu / c:.2f}×")
        worst = max((x.reopt_seconds / x.execution_seconds
                     for x in runs["adaptive"].splits if x.execution_seconds > 0), default=0)
        print(f"* re-optimization / execution, worst split: {100 * worst:.2f}%")

    fig7: list[dict] = []
    if "adaptive" in runs and runs["adaptive"].sessions:
        session = runs["adaptive"].sessions[0]
        first = [f"card {s.alias} *{1 / s.k!r}"] if s.k > 1 else []
        fig7 = replay(make, first, [d for _, d in session.updates], args.repeat)
        print("\nFigure 7: re-optimization after each split, CPU ms (median of "
              f"{args.repeat}); decl = the declarative optimizer's incremental update\n")
        print("| after split | deltas | decl (ms) | topdown from scratch (ms) | decl / topdown |"
              " topdown-inc (ms) | updated OR / AND nodes |")
        print("|---|---|---|---|---|---|---|")
        for (i, batch), f in zip(session.updates, fig7, strict=True):
            r = f["update_ratio"]
            print(f"| {i} | {len(batch)} | {f['decl_ms']:.2f} | {f['topdown_ms']:.2f} | "
                  f"{f['decl_ms'] / f['topdown_ms']:.2f} | {f['topdown_inc_ms']:.2f} | "
                  f"{r.get('or', float('nan')):.0%} / {r.get('and', float('nan')):.0%} |")
        print(f"\ngeometric mean decl / topdown: "
              f"{geometric_mean([f['decl_ms'] / f['topdown_ms'] for f in fig7]):.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"query": args.query, "data": args.data, "splits": s.to_json(),
                       "runs": {n: r.to_json() for n, r in runs.items()}, "figure7": fig7},
                      fh, indent=1, default=str)
    loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
