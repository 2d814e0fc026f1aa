"""The fleet's in-process loop (:func:`fleet._loop`) here against another checkout of reopt:
how an update of a small query compares with optimizing it from scratch (issue 19's floor).

Run: ``.venv/bin/python benchmarks/fleet_loop.py --old-root DIR [--n 100] [--models cout,io]
[--rounds 2] [--repeat 3]``. For each cost model, the first ``--n`` queries of the seed-19
workload (:func:`workload.generate`, 4–12 relations, every shape), as ``benchmarks/fleet.py``'s
in-process loop runs them: per query a fresh optimizer (python engine, ``all``) optimized
from scratch, then updated with the query's first delta step, with the fleet tasks'
garbage-collection policy. Each process (one per checkout and round, interleaved old, new,
old, new, …) replays the loop ``--repeat`` times and keeps, per query, the least CPU time
(``time.process_time``) of each phase; the table gives the sums over the queries (medians
over rounds) and update / scratch. The other checkout runs with this interpreter through the
editable install's mapping, as in ``benchmarks/update_ab.py``::

    git archive lead | tar -x -C /tmp/base
    python benchmarks/fleet_loop.py --old-root /tmp/base
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from harness import OTHER_CHECKOUT, run_in_checkout

from reopt.cliargs import positive_int

RUNNER = r"""
import json, sys, time
root, n, model, repeat = json.loads(sys.argv[1])
""" + OTHER_CHECKOUT + r"""
sys.path.insert(0, sys.argv[2])
from workload import generate
import reopt
assert not root or reopt.__file__.startswith(root), reopt.__file__
from reopt.evaluator.driver import load_program
from reopt.fleet import FleetOptions, FleetQuery, _optimizer
from reopt.optimizers.base import paused_gc
ws = generate(19, n, min_relations=4, max_relations=12)
qs = [FleetQuery(w.name, w.sql, w.catalog, tuple(d.strip() for d in w.deltas[0].split(";")))
      for w in ws]
opts = FleetOptions(load_program(None, "all"), model, "all")
scratch, update = [[] for _ in qs], [[] for _ in qs]
for _ in range(repeat):
    for i, fq in enumerate(qs):
        t0 = time.process_time()
        with paused_gc(collect_young=True):
            o = _optimizer(fq, opts)
            o.optimize()
        t1 = time.process_time()
        with paused_gc(collect_young=True):
            o.update(list(fq.deltas))
        update[i].append(time.process_time() - t1)
        scratch[i].append(t1 - t0)
print(json.dumps({"scratch": sum(map(min, scratch)), "update": sum(map(min, update))}))
"""


def run(root: str | None, n: int, model: str, repeat: int) -> dict:
    return run_in_checkout(RUNNER, [n, model, repeat], root, f"fleet_loop: {model}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks/fleet_loop.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old-root", required=True,
                   help="the other checkout's source tree (its reopt package's parent)")
    p.add_argument("--n", type=positive_int, default=100, help="queries (default 100)")
    p.add_argument("--models", default="cout,io")
    p.add_argument("--rounds", type=positive_int, default=2)
    p.add_argument("--repeat", type=positive_int, default=3)
    args = p.parse_args(argv)
    old_root = str(Path(args.old_root).resolve())
    print("| model | N | checkout | scratch s | update s | update / scratch |")
    print("|---|---|---|---|---|---|")
    for model in args.models.split(","):
        runs: dict[str, list[dict]] = {"old": [], "new": []}
        for _ in range(args.rounds):
            runs["old"].append(run(old_root, args.n, model, args.repeat))
            runs["new"].append(run(None, args.n, model, args.repeat))
        for side in ("old", "new"):
            s = statistics.median(r["scratch"] for r in runs[side])
            u = statistics.median(r["update"] for r in runs[side])
            print(f"| {model} | {args.n} | {side} | {s:.3f} | {u:.3f} | {u / s:.3f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
