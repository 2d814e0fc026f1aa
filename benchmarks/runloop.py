"""The adaptive loop (``reopt run``): every strategy over the same splits, side by side.

Run: ``.venv/bin/python benchmarks/runloop.py --data DIR [--queries q3,q5] [--splits K]
[--split-by hash|range] [--split-column COL] [--delta D]... [--cost-model io|cout]``
(DIR as ``reopt data tpch`` writes it; the built-in catalog at the scale factor it records;
``--delta`` changes it before the first plan, e.g. ``"card orders *1000"`` for a wrong
statistic the observations must correct). Per query, a warm-up run of the ``static``
strategy is not counted (the JVM and the file cache), then each strategy runs once: its
total execution time over the splits, its total re-optimization time, how often the plan
changed, and whether its answer digests as the others'. Session start-up and the ``spark``
strategy's writing and ``ANALYZE`` of its tables are excluded.
"""

from __future__ import annotations

import argparse
import sys

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
    args = ap.parse_args(argv)
    catalog = load_catalog(None, _data_scale_factor(args.data))
    spark = get_spark()
    print(f"data {args.data}, {args.splits} {args.split_by} splits"
          f"{' of ' + args.split_column if args.split_column else ''}, "
          f"deltas {args.delta or 'none'}")
    print("| query | strategy | exec (s) | reopt (s) | plan changes | result rows | same answer |")
    print("|---|---|---|---|---|---|---|")
    for q in args.queries.split(","):
        def make(q: str = q) -> Optimizer:
            return Optimizer(f"tpch:{q}", catalog, cost_model=args.cost_model,
                             optimizer="topdown-inc")

        loop = Loop(make, args.data, args.splits, spark, args.delta, by=args.split_by,
                    column=args.split_column)
        reference = loop.run("static").answer_digest  # warm-up, not counted
        for strategy in STRATEGIES:
            run = loop.run(strategy)
            doc = run.to_json()
            same = run.answer_digest == reference
            print(f"| {q} | {strategy} | {doc['execution_seconds']:.2f} | "
                  f"{doc['reopt_seconds']:.3f} | {doc['plan_changes']} | {len(run.rows)} | "
                  f"{'yes' if same else 'NO'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
