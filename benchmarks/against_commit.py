"""The declarative optimizer (python engine, all pruning) here against another checkout of reopt.

Each query is timed in a fresh process per interpreter, interleaved: one warm-up
optimization, then the median of ``--rounds`` (construction excluded), in CPU time of that
process (the engine is single-threaded; on a shared machine wall time varies with the load).
The other checkout needs its own interpreter, e.g. for commit ``C``::

    git worktree add /tmp/old C
    python3.11 -m venv /tmp/oldvenv
    echo "$PWD/.venv/lib/python3.11/site-packages" \
        > /tmp/oldvenv/lib/python3.11/site-packages/deps.pth
    /tmp/oldvenv/bin/pip install "setuptools>=68" wheel
    /tmp/oldvenv/bin/pip install --no-deps --no-build-isolation -e /tmp/old
    python benchmarks/workload.py -o /tmp/wl --count 8 --max-relations 12
    python benchmarks/workload.py -o /tmp/wll --large
    python benchmarks/against_commit.py --old-python /tmp/oldvenv/bin/python \\
        --workload /tmp/wl --workload /tmp/wll

Prints a markdown table: query, old ms, new ms, old/new, and whether both found the same
optimal cost (they need not, when the commits estimate differently).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

TIMER = r"""
import gc, json, sys, time
from reopt.api import Optimizer
name, q, cat, model, rounds = json.loads(sys.argv[1])
def make():
    return Optimizer(q, cat, cost_model=model, optimizer="declarative", engine="python")
make().optimize()
ts = []
for _ in range(rounds):
    o = make()
    gc.collect()
    t = time.process_time()  # CPU time: the machine is shared, the engine single-threaded
    cost = o.optimize().cost
    ts.append(time.process_time() - t)
ts.sort()
print(json.dumps([ts[len(ts) // 2], cost]))
"""
TPCH = ("tpch:q3", "tpch:q5", "tpch:q10", "tpch:q8join")
LARGEST = 50_000
"""Workload queries above this many csg-cmp pairs are left out (minutes per round before)."""


def specs(workloads: list[Path]) -> list[list]:
    out = [[f"{q} (io)", q, None, "io"] for q in TPCH]
    for w in workloads:
        for entry in json.loads((w / "index.json").read_text()):
            if entry["pairs"] <= LARGEST:
                name = entry["name"]
                out.append([f"{name} (cout, {entry['pairs']:,} pairs)", str(w / f"{name}.sql"),
                            str(w / f"{name}.catalog.json"), "cout"])
    return out


def time_one(python: str, spec: list, rounds: int) -> tuple[float, float]:
    done = subprocess.run([python, "-c", TIMER, json.dumps([*spec, rounds])],
                          capture_output=True, text=True, cwd="/tmp", check=True)
    t, cost = json.loads(done.stdout)
    return t, cost


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old-python", required=True)
    ap.add_argument("--new-python", default=sys.executable)
    ap.add_argument("--workload", type=Path, action="append", default=[])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    print("| query | before ms | now ms | before / now | same cost |")
    print("|---|---|---|---|---|")
    for spec in specs(a.workload):
        old = time_one(a.old_python, spec, a.rounds)
        new = time_one(a.new_python, spec, a.rounds)
        same = abs(old[1] - new[1]) <= 1e-9 * abs(new[1])
        print(f"| {spec[0]} | {old[0] * 1000:.1f} | {new[0] * 1000:.1f} | "
              f"{old[0] / new[0]:.2f} | {'yes' if same else 'no'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
