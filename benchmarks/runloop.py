"""The adaptive loop (``reopt run``): every strategy over the same splits, side by side.

Run: ``.venv/bin/python benchmarks/runloop.py --data DIR [--queries q3,q5] [--splits K]
[--split-by hash|range] [--split-column COL] [--per-subset KEY [--subsets M]] [--delta D]...
[--cost-model io|cout|dist] [--dist-profile default|local] [--strategies static,adaptive,...]
[--mirrored] [--no-warmup]``
(DIR as ``reopt data tpch`` writes it; the built-in catalog at the scale factor it records;
``--delta`` changes it before the first plan, e.g. ``"card orders *1000"`` for a wrong
statistic the observations must correct). Per query, a warm-up run of the ``static``
strategy is not counted (the JVM and the file cache; ``--no-warmup`` skips it, the first
strategy's answer then being the reference), then each strategy runs once: its
total execution time over the splits, its total re-optimization time, how often the plan
changed, the time of combining the splits' answers and digesting the result in Spark
(``combine``: not part of the execution time), and whether its answer digests as the
others'. Session start-up and the ``spark``
strategy's writing and ``ANALYZE`` of its tables are excluded. With ``--mirrored`` the
strategies run twice, in their order and then in reverse (A B C D D C B A), and each row is
the mean of a strategy's two runs (plan changes: both, ``first/second``): on this machine a
strategy run later is measured faster whatever its plan (the JVM keeps warming up after the
warm-up run), and the mirror cancels that drift as far as it is linear. With
``--per-subset KEY`` the splits are per-subset ones (``reopt run --per-subset``) and
``adaptive`` (one session per subset) is followed by ``adaptive-one``: the same splits with
one session for all of them. With ``--sizes-only`` (range splits of a column the query
filters), ``adaptive`` is followed by ``adaptive-sizes``: the same loop carrying the
observations scaled by the splits' sizes alone, as before split-aware estimates
(``Loop.run(split_aware=False)``), for an A/B in one run.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys

from harness import geometric_mean

from reopt.adaptive import STRATEGIES, Loop
from reopt.api import Optimizer, load_catalog
from reopt.cli import _data_scale_factor
from reopt.spark import get_spark


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--queries", default="q3,q5")
    ap.add_argument("--splits", type=int, default=4)
    ap.add_argument("--delta", action="append", default=[])
    ap.add_argument("--split-by", default="hash", choices=("hash", "range"))
    ap.add_argument("--split-column")
    ap.add_argument("--cost-model", default="io")
    ap.add_argument("--dist-profile", help="the dist model's constants "
                    "(reopt.costmodel.dist.PROFILES; default: the default profile)")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--per-subset", metavar="KEY")
    ap.add_argument("--subsets", type=int, default=2)
    ap.add_argument("--mirrored", action="store_true")
    ap.add_argument("--sizes-only", action="store_true",
                    help="also run adaptive without split-aware estimates (adaptive-sizes)")
    ap.add_argument("--no-warmup", action="store_true",
                    help="skip the uncounted static run (for answers that take long to run: "
                    "the first strategy is then measured on a colder JVM)")
    args = ap.parse_args(argv)
    by, column = args.split_by, args.split_column
    if args.per_subset:
        by, column = "subset", args.per_subset
    catalog = load_catalog(None, _data_scale_factor(args.data))
    spark = get_spark()
    subsets = f" ({args.subsets} subsets)" if args.per_subset else ""
    profile = f", dist profile {args.dist_profile}" if args.dist_profile else ""
    print(f"data {args.data}, {args.splits} {by} splits{subsets}"
          f"{' of ' + column if column else ''}, deltas {args.delta or 'none'}{profile}")
    print("| query | worst est/obs | strategy | exec (s) | exec JVM CPU (s) | reopt (s) | "
          "combine (s) | plan changes | result rows | same answer |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ratios: dict[str, list[tuple[str, float, float]]] = {}
    for q in args.queries.split(","):
        def make(q: str = q) -> Optimizer:
            return Optimizer(f"tpch:{q}", catalog, cost_model=args.cost_model,
                             optimizer="topdown-inc", dist_profile=args.dist_profile)

        loop = Loop(make, args.data, args.splits, spark, args.delta, by=by, column=column,
                    subsets=args.subsets)
        runs = [(name, name, True, True) for name in args.strategies.split(",")]
        if args.per_subset:
            runs.insert(2, ("adaptive-one", "adaptive", False, True))
        if args.sizes_only:
            runs.insert(runs.index(("adaptive", "adaptive", True, True)) + 1,
                        ("adaptive-sizes", "adaptive", True, False))
        done: dict[str, list[dict]] = {}
        warm = None if args.no_warmup else loop.run("static")  # warm-up, not counted
        reference = None if warm is None else warm.answer_digest
        for strategy, name, per_subset, aware in runs + (runs[::-1] if args.mirrored else []):
            run = loop.run(name, per_subset=per_subset, split_aware=aware)
            warm = warm or run
            reference = reference or run.answer_digest
            doc = run.to_json()
            doc["same"] = run.answer_digest == reference
            done.setdefault(strategy, []).append(doc)
            print(f"  ({strategy}: exec {doc['execution_seconds']:.1f} s, combine "
                  f"{doc['combine_seconds']:.1f} s, {doc['plan_changes']} plan changes, "
                  f"{doc['result_rows']} result rows, digest {run.answer_digest[:16]}…)",
                  file=sys.stderr, flush=True)
        off = max((max(max(n.estimated, 1) / max(n.observed, 1),
                       max(n.observed, 1) / max(n.estimated, 1))
                   for x in warm.splits for n in x.nodes
                   if n.logical in ("scan", "join") and n.observed is not None),
                  default=math.nan)  # nan when spark alone ran: it observes no plan nodes
        totals = {}
        for strategy, *_ in runs:
            docs = done[strategy]
            execution = statistics.mean(d["execution_seconds"] for d in docs)
            reopt = statistics.mean(d["reopt_seconds"] for d in docs)
            combining = statistics.mean(d["combine_seconds"] for d in docs)
            cpu = statistics.mean(d["execution_cpu_seconds"] or math.nan for d in docs)
            changes = "/".join(str(d["plan_changes"]) for d in docs)
            totals[strategy] = (execution + reopt, cpu)
            print(f"| {q} | {off:.3g}× | {strategy} | {execution:.2f} | {cpu:.1f} | "
                  f"{reopt:.3f} | {combining:.2f} | {changes} | {docs[0]['result_rows']} | "
                  f"{'yes' if all(d['same'] for d in docs) else 'NO'} |", flush=True)
        loop.close()
        if "adaptive" in totals:
            ratios[q] = [(b, totals["adaptive"][0] / totals[b][0],
                          totals["adaptive"][1] / totals[b][1])
                         for b in totals if b != "adaptive"]
    print("\nadaptive (re-optimization + execution) over each baseline, wall and JVM CPU:")
    for q, rs in ratios.items():
        print(f"  {q}: " + ", ".join(f"/{b} {w:.2f}× ({c:.2f}×)" for b, w, c in rs))
    for b in sorted({b for rs in ratios.values() for b, _, _ in rs}):
        ws = [w for rs in ratios.values() for x, w, _ in rs if x == b]
        cs = [c for rs in ratios.values() for x, _, c in rs if x == b]
        print(f"  geometric mean over the queries, /{b}: wall {geometric_mean(ws):.2f}×, "
              f"JVM CPU {geometric_mean(cs):.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
