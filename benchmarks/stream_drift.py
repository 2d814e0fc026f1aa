"""Do a workload's phases drift in a way the plans differ on? The rate model's answer.

Run: ``.venv/bin/python benchmarks/stream_drift.py [--workloads nexmark,segtolls]
[--phases default,drift,steady] [--seconds 30]`` (no Spark, seconds).

For every phase, a fresh rate-model optimizer over the workload's catalog given the phase's
generator parameters as deltas (``benchmarks/rate_accuracy.py``'s ``param_deltas``: each
stream's rate, ``sel = 1/keys`` per equi-join): the phase's best plan and its load ``U``
(CPU seconds of work per second of stream, :func:`reopt.migration.plan_load`), and the load
of *static*'s plan — the first phase's best, never changed — under the phase's statistics.
``ratio`` is static's load over the best; the last line weighs the phases by their length:
what a re-planner that knows each phase could save over static at most, by the model.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from rate_accuracy import param_deltas

from reopt.api import Optimizer
from reopt.migration import plan_load
from reopt.stream import plan_line
from reopt.streamgen import WORKLOADS, generate_stream, parse_phases


def phase_loads(workload: str, phases: str | None, seconds: int) -> list[dict]:
    """Per phase of ``phases`` (a text, a preset name or None: the defaults), the best plan,
    its load and static's (module doc)."""
    w = WORKLOADS[workload]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / workload
        manifest = generate_stream(workload, root, seconds, 0, phases)
        static = None
        out = []
        for k, phase in enumerate(parse_phases(manifest["phases"], w)):
            opt = Optimizer(str(root / "query.sql"), str(root / "catalog.json"),
                            cost_model="rate", optimizer="topdown")
            best = opt.update(param_deltas(opt, w, phase)).plan
            static = static or best
            space = opt.space()
            out.append({"phase": k + 1, "seconds": phase.seconds, "changes": phase.changes,
                        "best": plan_line(best), "best_load": plan_load(space, best),
                        "static": plan_line(static), "static_load": plan_load(space, static)})
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="nexmark,segtolls")
    ap.add_argument("--phases", default="default,drift,steady",
                    help="comma-separated: default, a preset name, or phases text (one only)")
    ap.add_argument("--seconds", type=int, default=30)
    args = ap.parse_args(argv)
    names = [args.phases] if ":" in args.phases else args.phases.split(",")
    print("| workload | phases | phase | changes | best plan | best U | static's U | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for workload in args.workloads.split(","):
        for name in names:
            rows = phase_loads(workload, None if name == "default" else name, args.seconds)
            for r in rows:
                print(f"| {workload} | {name} | {r['phase']} | {r['changes'] or 'base'} | "
                      f"`{r['best']}` | {r['best_load']:.3g} | {r['static_load']:.3g} | "
                      f"{r['static_load'] / r['best_load']:.2f} |")
            total = sum(r["static_load"] * r["seconds"] for r in rows) / sum(
                r["best_load"] * r["seconds"] for r in rows)
            print(f"| {workload} | {name} | all | static `{rows[0]['static']}` | | | | "
                  f"**{total:.2f}** |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
