"""The adaptive loop split by split: which plan each strategy runs, and what adaptive observes.

Run: ``.venv/bin/python benchmarks/looptrace.py --data DIR --query q9join [--splits 8]
[--split-by hash|range] [--split-column COL] [--cost-model dist] [--dist-profile local]
[--strategies adaptive,hindsight]`` (DIR as ``reopt data tpch`` writes it; ``--query`` a
built-in name or a ``.sql`` file, so a candidate query can be screened before it is added;
the built-in catalog at its scale factor). After a warm-up ``static`` run (not printed), per
strategy and split: execution wall and JVM CPU seconds, whether the plan changed, the plan,
and every scan's and join's estimated and observed rows; then the batches of deltas the
``adaptive`` session was fed after each split. What ``BENCHMARKS.md`` ("With the broadcast
limit in bytes") reads to explain why adaptive does not reach hindsight. With ``--warm``
every timed run of a split is preceded by an untimed run of the same plan on the same split
(for every strategy what hindsight's observation run gives hindsight when its plan does not
change): the strategies then differ only in their plans.
"""

from __future__ import annotations

import argparse
import sys

from reopt import adaptive
from reopt.adaptive import Loop
from reopt.api import Optimizer, load_catalog
from reopt.cli import _data_scale_factor
from reopt.spark import get_spark


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--query", default="q9join")
    ap.add_argument("--splits", type=int, default=8)
    ap.add_argument("--split-by", default="hash", choices=("hash", "range"))
    ap.add_argument("--split-column", help="with --split-by range, e.g. l_shipdate")
    ap.add_argument("--cost-model", default="dist")
    ap.add_argument("--dist-profile", help="the dist model's constants (default or local)")
    ap.add_argument("--strategies", default="adaptive,hindsight")
    ap.add_argument("--warm", action="store_true")
    args = ap.parse_args(argv)
    if args.warm:
        cold = adaptive.execute

        def warm(*a: object, **k: object) -> object:
            cold(*a, **k)  # untimed: compiles the plan's code, reads the split
            return cold(*a, **k)

        adaptive.execute = warm
    catalog = load_catalog(None, _data_scale_factor(args.data))

    def make() -> Optimizer:
        query = args.query if args.query.endswith(".sql") else f"tpch:{args.query}"
        return Optimizer(query, catalog, cost_model=args.cost_model,
                         optimizer="topdown-inc", dist_profile=args.dist_profile)

    loop = Loop(make, args.data, args.splits, get_spark(), by=args.split_by,
                column=args.split_column)
    try:
        loop.run("static")  # warm-up, not printed
        for strategy in args.strategies.split(","):
            run = loop.run(strategy)
            print(f"== {strategy}: execution {sum(s.execution_seconds for s in run.splits):.2f} s"
                  f", JVM CPU {sum(s.execution_cpu_seconds for s in run.splits):.1f} s")
            for s in run.splits:
                print(f"  split {s.index} ({s.split_rows} rows): {s.execution_seconds:.2f} s "
                      f"({s.execution_cpu_seconds:.1f} s CPU) "
                      f"{'CHANGED ' if s.plan_changed else ''}{s.plan}")
                for n in s.nodes:
                    if n.logical in ("scan", "join"):
                        print(f"      {n.op:9s} {','.join(n.relations):45s} "
                              f"estimated {n.estimated:12.0f} observed "
                              f"{'not run' if n.observed is None else n.observed:>10}")
            for session in run.sessions:
                for i, deltas in session.updates:
                    print(f"  pushed after split {i}: {'; '.join(deltas)}")
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
