"""One-delta updates of the declarative optimizer here against another checkout of reopt, and
against ``topdown-inc`` on the same deltas.

Each subject runs in a fresh process per checkout, the checkouts interleaved (A, B, A, B, …
``--rounds`` times): the process optimizes (declarative: python engine, pruning ``all``; and
``topdown-inc``), then applies the subject's deltas one step at a time to both, in CPU time
(``time.process_time``, garbage collection off while timing) around ``Optimizer.update()`` —
the whole call as a user pays it. It also times a second from-scratch declarative
optimization (the first pays the process's warm-up) and checks after every step that both
optimizers found the same cost. Per subject: the median over steps of each step's median
over rounds; also the first step alone (a session's first update, which builds the hash
indexes of relations a from-scratch evaluation left on frames) and the median of the later
steps.

The other checkout uses this interpreter and its dependencies: its source tree is put in
place of this one's in the editable install's mapping, e.g.::

    git archive lead | tar -x -C /tmp/base
    python benchmarks/workload.py -o /tmp/wl
    python benchmarks/workload.py --large -o /tmp/wll
    python benchmarks/update_ab.py --old-root /tmp/base /tmp/wl/clique-14-s0-4 \\
        /tmp/wl/star-12-s0-1 /tmp/wll/large-tree-18 /tmp/wll/large-clique-14 tpch:q5

A subject is a workload query's path without extension (its ``.sql``, ``.catalog.json`` and
``.deltas.txt``, one step per line; ``cout``) or ``tpch:qN`` (``--tpch-model``; the single
deltas of ``benchmarks/small_updates.py``).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

from harness import OTHER_CHECKOUT, run_in_checkout

from reopt.cliargs import positive_int

RUNNER = r"""
import gc, json, sys, time
root, subject, model = json.loads(sys.argv[1])
""" + OTHER_CHECKOUT + r"""
from reopt.api import Optimizer
import reopt
assert not root or reopt.__file__.startswith(root), reopt.__file__
if subject.startswith("tpch:"):
    sys.path.insert(0, sys.argv[2])
    from small_updates import workload
    q, cat = subject, None
    steps = workload(subject.split(":")[1], model, 0)["single"]
else:
    q, cat = open(subject + ".sql").read(), subject + ".catalog.json"
    steps = [[line.strip()] for line in open(subject + ".deltas.txt") if line.strip()]
def make(**kw):
    return Optimizer(q, cat, cost_model=model, **kw)
decl = dict(optimizer="declarative", engine="python", pruning="all")
make(**decl).optimize()  # the process's warm-up
dec, inc = make(**decl), make(optimizer="topdown-inc")
gc.collect(); gc.disable()
t = time.process_time(); dec.optimize(); scratch = time.process_time() - t
gc.enable()
inc.optimize()
ups, incs = [], []
for step in steps:
    gc.collect(); gc.disable()
    t = time.process_time(); a = dec.update(step); ups.append(time.process_time() - t)
    t = time.process_time(); b = inc.update(step); incs.append(time.process_time() - t)
    gc.enable()
    assert abs(a.cost - b.cost) <= 1e-9 * max(1.0, abs(a.cost)), (step, a.cost, b.cost)
print(json.dumps({"scratch": scratch, "update": ups, "topdown_inc": incs}))
"""


def run(root: str | None, subject: str, model: str) -> dict:
    return run_in_checkout(RUNNER, [subject, model], root, f"update_ab: {subject}")


def per_step_median(runs: list[dict], key: str, steps: slice = slice(None)) -> float:
    """Median over ``steps`` of each step's median over rounds."""
    return statistics.median(statistics.median(r[key][i] for r in runs)
                             for i in range(len(runs[0][key]))[steps])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("subjects", nargs="+")
    ap.add_argument("--old-root", required=True, help="the other checkout's source tree")
    ap.add_argument("--rounds", type=positive_int, default=2)
    ap.add_argument("--tpch-model", default="cout")
    args = ap.parse_args(argv)
    print("| subject | from scratch ms | old update ms | new update ms | old / new "
          "| scratch / update | topdown-inc ms | update / topdown-inc | old first ms "
          "| new first ms | old later ms | new later ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in args.subjects:
        model = args.tpch_model if s.startswith("tpch:") else "cout"
        old: list[dict] = []
        new: list[dict] = []
        for _ in range(args.rounds):
            old.append(run(str(Path(args.old_root).resolve()), s, model))
            new.append(run(None, s, model))
        o, n = per_step_median(old, "update"), per_step_median(new, "update")
        ti = per_step_median(new, "topdown_inc")
        sc = statistics.median(r["scratch"] for r in new)
        name = s if s.startswith("tpch:") else Path(s).name
        first = [per_step_median(x, "update", slice(0, 1)) for x in (old, new)]
        later = [per_step_median(x, "update", slice(1, None)) if len(x[0]["update"]) > 1
                 else math.nan for x in (old, new)]
        print(f"| {name} ({model}, {len(new[0]['update'])} steps) | {sc * 1e3:.1f} "
              f"| {o * 1e3:.1f} | {n * 1e3:.1f} | {o / n:.2f}× | {sc / n:.1f}× "
              f"| {ti * 1e3:.1f} | {n / ti:.2f}× | {first[0] * 1e3:.1f} | {first[1] * 1e3:.1f} "
              f"| {later[0] * 1e3:.1f} | {later[1] * 1e3:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
