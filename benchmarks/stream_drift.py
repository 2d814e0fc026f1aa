"""Do a workload's phases drift in a way the plans differ on? The rate model's answer, and
the search that chose the ``--phases drift|steady`` presets.

Run: ``.venv/bin/python benchmarks/stream_drift.py [--workloads nexmark,segtolls]
[--phases default,drift,steady] [--seconds 30] [--profile local|spark]`` (no Spark,
seconds), or ``… --search`` (the presets' search, below; a minute).

For every phase, a fresh rate-model optimizer over the workload's catalog given the phase's
generator parameters as deltas (``benchmarks/rate_accuracy.py``'s ``param_deltas``: each
stream's rate, ``sel = 1/keys`` per equi-join), priced with ``--profile`` (default
``local``, the in-process executor's constants, :data:`reopt.costmodel.rate.PROFILES`): the
phase's best plan and its load ``U`` (CPU seconds of work per second of stream,
:func:`reopt.migration.plan_load`), and the load of *static*'s plan — the first phase's best,
never changed — under the phase's statistics. ``ratio`` is static's load over the best; the
last line weighs the phases by their length: what a re-planner that knows each phase could
save over static at most, by the model.

``--search``: for each workload, every candidate of three equal phases where one stream's
rate jumps 10× twice (base rates each the workload's ×0.2, ×1 or ×5, the key domain 10, the
workload's or 4× it, any stream jumping), ranked by the weighted ratio above among those
whose best plan changes between phases at least ``--changes`` times (default 1); prints the
best candidates. The presets are the top ones (``reopt/streamgen.py``), with a cap on the
fastest stream so a 60-s run stays seconds of CPU.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path

from rate_accuracy import param_deltas

from reopt.api import Optimizer
from reopt.costmodel.rate import PROFILES
from reopt.migration import plan_load
from reopt.stream import plan_line
from reopt.streamgen import WORKLOADS, Phase, generate_stream, parse_phases

MAX_RATE = 2000.0
"""The search's cap on a stream's rate in any phase (tuples/s; module doc)."""


def loads(root: Path, workload: str, phases: list[Phase], profile: str) -> list[dict]:
    """Per phase, the best plan, its load and static's (module doc), over the catalog and
    query in ``root``."""
    w = WORKLOADS[workload]
    static = None
    out = []
    for k, phase in enumerate(phases):
        opt = Optimizer(str(root / "query.sql"), str(root / "catalog.json"),
                        cost_model="rate", optimizer="topdown", rate_profile=profile)
        best = opt.update(param_deltas(opt, w, phase)).plan
        static = static or best
        space = opt.space()
        out.append({"phase": k + 1, "seconds": phase.seconds, "changes": phase.changes,
                    "best": plan_line(best), "best_load": plan_load(space, best),
                    "static": plan_line(static), "static_load": plan_load(space, static)})
    return out


def phase_loads(workload: str, phases: str | None, seconds: int,
                profile: str = "local") -> list[dict]:
    """:func:`loads` of ``phases`` (a text, a preset name or None: the defaults)."""
    w = WORKLOADS[workload]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / workload
        manifest = generate_stream(workload, root, seconds, 0, phases)
        return loads(root, workload, parse_phases(manifest["phases"], w), profile)


def overall(rows: list[dict], fixed: float = 0.0) -> float:
    """Static's load over the best, weighted by the phases' lengths, each plus ``fixed``
    (CPU seconds per second of stream the executor spends whatever the plan)."""
    return sum((r["static_load"] + fixed) * r["seconds"] for r in rows) / sum(
        (r["best_load"] + fixed) * r["seconds"] for r in rows)


def candidates(workload: str) -> list[str]:
    """The search's phase texts (module doc), ``{s}`` for a phase's seconds."""
    w = WORKLOADS[workload]
    out = []
    streams = list(w.rates)
    for scales in itertools.product((0.2, 1.0, 5.0), repeat=len(streams)):
        base = {s: w.rates[s] * f for s, f in zip(streams, scales, strict=True)}
        for keys in sorted({10, w.keys, 4 * w.keys}):
            for jumping in streams:
                if base[jumping] * 100 > MAX_RATE:
                    continue
                parts = []
                for k in range(3):
                    rates = {**base, jumping: base[jumping] * 10 ** k}
                    parts.append("{s}:" + ",".join(f"{s}={rates[s]:g}" for s in streams)
                                 + f",keys={keys}")
                out.append(";".join(parts))
    return out


def search(workload: str, profile: str, top: int, min_changes: int = 1,
           fixed: float = 0.0) -> list[tuple[float, str, list[dict]]]:
    """The ``top`` candidates by :func:`overall` whose best plan changes at least
    ``min_changes`` times between phases."""
    w = WORKLOADS[workload]
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / workload
        generate_stream(workload, root, 3, 0, None)  # the catalog and the query
        for text in candidates(workload):
            rows = loads(root, workload, parse_phases(text.format(s=10), w), profile)
            changes = sum(a["best"] != b["best"] for a, b in zip(rows, rows[1:], strict=False))
            if changes >= min_changes:
                found.append((overall(rows, fixed), text, rows))
    found.sort(key=lambda f: -f[0])
    return found[:top]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="nexmark,segtolls")
    ap.add_argument("--phases", default="default,drift,steady",
                    help="comma-separated: default, a preset name, or phases text (one only)")
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--profile", default="local", choices=sorted(PROFILES),
                    help="the rate model's per-tuple costs (default local)")
    ap.add_argument("--search", action="store_true", help="search drifting phases instead")
    ap.add_argument("--top", type=int, default=5, help="--search: candidates shown")
    ap.add_argument("--fixed", type=float, default=0.0,
                    help="--search: plan-independent CPU s per stream second added to every "
                    "load (the executor's per-batch cost over the batch length; default 0)")
    ap.add_argument("--changes", type=int, default=1,
                    help="--search: least number of best-plan changes between phases")
    args = ap.parse_args(argv)
    if args.search:
        for workload in args.workloads.split(","):
            for score, text, rows in search(workload, args.profile, args.top, args.changes,
                                             args.fixed):
                print(f"{workload} {score:.2f} {text}")
                for r in rows:
                    print(f"    phase {r['phase']}: best `{r['best']}` U {r['best_load']:.3g}, "
                          f"static U {r['static_load']:.3g}")
        return 0
    names = [args.phases] if ":" in args.phases else args.phases.split(",")
    print("| workload | phases | phase | changes | best plan | best U | static's U | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for workload in args.workloads.split(","):
        for name in names:
            rows = phase_loads(workload, None if name == "default" else name, args.seconds,
                               args.profile)
            for r in rows:
                print(f"| {workload} | {name} | {r['phase']} | {r['changes'] or 'base'} | "
                      f"`{r['best']}` | {r['best_load']:.3g} | {r['static_load']:.3g} | "
                      f"{r['static_load'] / r['best_load']:.2f} |")
            print(f"| {workload} | {name} | all | static `{rows[0]['static']}` | | | | "
                  f"**{overall(rows):.2f}** |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
