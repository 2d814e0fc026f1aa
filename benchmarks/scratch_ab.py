"""The declarative optimizer from scratch, here against another checkout, on named queries.

Unlike ``against_commit.py`` (a fresh optimizer per round, so every round also sizes the
plan space for the metrics), each process here optimizes one :class:`~reopt.api.Optimizer`
per query again and again, as ``benchmarks/engine.py`` does: the warm from-scratch time the
engine benchmark reports. Each round runs one process per interpreter, in alternating order;
a process times ``--runs`` optimizations per query after one warm-up and keeps the least
(CPU time: the machine is shared, the engine single-threaded); the table gives the median
over rounds and whether both checkouts found the same optimal cost.

Run: ``python benchmarks/scratch_ab.py --old-python /work/lead/.venv/bin/python
--query /tmp/wll/large-clique-17 --query tpch:q5:io ...`` — a query is ``tpch:NAME[:MODEL]``
or a workload path without its ``.sql`` (``benchmarks/workload.py`` writes them; ``cout``
unless ``PATH:MODEL``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

TIMER = r"""
import gc, json, sys, time
from reopt.api import Optimizer
runs, specs = json.loads(sys.argv[1])
out = {}
for name, sql, catalog, model in specs:
    o = Optimizer(sql if catalog is None else open(sql).read(), catalog, cost_model=model,
                  engine="python", pruning="all")
    o.optimize()
    times = []
    for _ in range(runs):
        gc.collect()
        t = time.process_time()
        cost = o.optimize().cost
        times.append(time.process_time() - t)
    out[name] = [min(times), cost]
print(json.dumps(out))
"""


def spec(query: str) -> list:
    """``[name, sql or tpch name, catalog or None, model]`` of a ``--query`` argument."""
    if query.startswith("tpch:"):
        _, name, *model = query.split(":")
        return [query, f"tpch:{name}", None, model[0] if model else "io"]
    path, _, model = query.partition(":")
    path = os.path.abspath(path)  # the processes run elsewhere (below)
    return [query, f"{path}.sql", f"{path}.catalog.json", model or "cout"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old-python", required=True)
    ap.add_argument("--new-python", default=sys.executable)
    ap.add_argument("--query", action="append", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    specs = [spec(q) for q in args.query]
    got: dict[str, dict[str, list]] = {"old": {}, "new": {}}
    for rnd in range(args.rounds):
        sides = [("old", args.old_python), ("new", args.new_python)]
        for side, python in sides if rnd % 2 == 0 else sides[::-1]:
            # run from /tmp: from a checkout's root, ``import reopt`` would find its folder
            out = subprocess.run([python, "-c", TIMER, json.dumps([args.runs, specs])],
                                 capture_output=True, text=True, check=True, cwd="/tmp")
            for name, row in json.loads(out.stdout).items():
                got[side].setdefault(name, []).append(row)
    print("| query | old ms (CPU) | new ms (CPU) | old / new | same cost |")
    print("|---|---|---|---|---|")
    for name, *_ in specs:
        old, new = (statistics.median(t for t, _ in got[s][name]) for s in ("old", "new"))
        same = {c for _, c in got["old"][name]} == {c for _, c in got["new"][name]}
        print(f"| {name} | {old * 1000:.1f} | {new * 1000:.1f} | {old / new:.2f}× | "
              f"{'yes' if same else 'no'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
