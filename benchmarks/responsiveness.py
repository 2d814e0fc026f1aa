"""Responsiveness of re-planning while a stream runs (issue 21: "after a 10× jump in one
stream's rate, the plan switches within 2 micro-batches; a moving-state migration costs at
most one micro-batch of time; p99 micro-batch latency during a migration at most 2× the
steady state").

Each workload's stream has two phases of 20 s, one stream's rate 10× higher in the second
(:data:`PHASES`, per executor: chosen offline with the optimizer, priced with the executor's
profile, so that the rate model's best plan keeps a different join state after the jump — on
Spark the default phases' jumps change only the root's operator on nexmark, a swap with
nothing to migrate, or tip a near-tie on linearroad). The executor (``--executor``: in
process, the default, or on Spark; intermediate state, one-second micro-batches) runs it
re-planned after every batch (``Replanner`` with ``--plan-every`` = the batch length; or every
``--plan-every K`` batches, then also on a change, ``--replan-on-change``,
:mod:`reopt.streamchange`) for each ``--migrations`` strategy, after three warm-up batches.
Printed per run:

* **jump**: the first batch of the faster phase; **switch**: the first batch at or after it
  running a different plan tree (re-planning reads a batch's observations after it ran, so
  the jump's own batch runs the old plan: the best possible is 1); **delay** = switch − jump
  (goal ≤ 2). Plan changes before the jump (re-planning on one second's noisy observations)
  are counted as flaps.
* **migration**: the switch batch's migration (``moving``/``reuse``) and its own wall time
  against the median batch time of the faster phase (goal ≤ 1 batch).
* **p99**: the 99th percentile (linear interpolation; with this few batches about the
  maximum) of the batch times *around the migration* — the switch batch and the next — against
  the *steady state*: the faster phase's other batches with no plan change in them or in the
  batch before (goal ≤ 2×).

Run: ``.venv/bin/python benchmarks/responsiveness.py [--executor local|spark] [--workloads
nexmark,segtolls] [--migrations moving,auto] [--seed 0] [--plan-every K] [--replan-on-change
F|off]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

from reopt.api import Optimizer
from reopt.cliargs import positive_int
from reopt.spark import get_spark
from reopt.stream import MicroBatch
from reopt.streamchange import FACTOR
from reopt.streamcli import Replanner, change_factor
from reopt.streamgen import WORKLOADS, generate_stream, parse_phases
from reopt.streamlocal import EXECUTORS, make_query


def _first_jump(workload: str) -> str:
    """The first two phases of ``workload``'s ``drift`` preset, 20 s each."""
    return ";".join(WORKLOADS[workload].presets["drift"].format(s=20).split(";")[:2])


PHASES = {"spark": {"nexmark": "20:auctions=40,bids=8;20:auctions=40,bids=80",
                    "linearroad": "20:accidents=5;20:accidents=50"},
          "local": {w: _first_jump(w) for w in ("nexmark", "segtolls")}}
"""Per executor (whose rate profile plans) and workload, a base phase and the same with one
stream 10× faster: on Spark bids and accidents (chosen under the ``spark`` profile), in
process the first jump of the ``drift`` presets (``reopt/streamgen.py``: bids and
segstats, chosen under the ``local`` profile)."""


def p99(times: list[float]) -> float:
    return float(np.percentile(times, 99)) if times else float("nan")


def analyse(batches: list[MicroBatch], jump: int) -> dict:
    """The numbers of the module doc for one run (batch indices from 0)."""
    changed = [b.index for b in batches[1:] if b.plan != batches[b.index - 1].plan]
    flaps = [i for i in changed if i < jump]
    switch = next((i for i in changed if i >= jump), None)
    after = batches[jump:]
    median = statistics.median(b.seconds for b in after)
    out: dict = {"jump": jump, "flaps": flaps, "switch": switch, "changes": changed,
                 "median": median}
    if switch is None:
        return out
    moved = batches[switch]
    around = [b.seconds for b in batches[switch:switch + 2]]
    busy = {i + d for i in changed for d in (0, 1)}
    steady = [b.seconds for b in after if b.index not in busy]
    out.update(delay=switch - jump, from_plan=batches[switch - 1].plan, to_plan=moved.plan,
               migration=moved.migration, migration_seconds=moved.migration_seconds,
               switch_seconds=moved.seconds, p99_around=p99(around), p99_steady=p99(steady),
               steady_batches=len(steady),
               migrations=[(b.index, b.migration, b.migration_seconds) for b in batches
                           if b.migration in ("moving", "parallel")])
    return out


def run(name: str, phases: str, migrations: list[str], seed: int,
        executor: str = "local", every: int = 1, on_change: float | None = FACTOR
        ) -> list[tuple[str, dict]]:
    """Each migration strategy's run over ``name``'s two-phase stream."""
    jump = parse_phases(phases, WORKLOADS[name])[0].seconds
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / name
        generate_stream(name, root, seed=seed, phases=phases)

        def optimizer() -> Optimizer:
            return Optimizer(str(root / "query.sql"), str(root / "catalog.json"),
                             cost_model="rate", optimizer="topdown-inc",
                             rate_profile=executor)

        opt = optimizer()
        spark = get_spark() if executor == "spark" else None
        warm = make_query(executor, opt.query, opt.catalog, root, spark, 1)
        for _ in range(3):  # the first batches after Spark starts are slow
            warm.step(opt.optimize().plan)
        out = []
        for how in migrations:
            o = optimizer()
            cq = make_query(executor, o.query, o.catalog, root, spark, 1,
                            state="intermediate")
            batches = list(cq.run(Replanner(o, every, how, 1, on_change=on_change)))
            out.append((how, analyse(batches, jump)))
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--executor", default="local", choices=EXECUTORS,
                    help="in process (local, default) or on Spark; plans with its profile")
    ap.add_argument("--workloads", default=None,
                    help="comma-separated, from the executor's PHASES (default both)")
    ap.add_argument("--migrations", default="moving,auto",
                    help="comma-separated --migration strategies (default moving,auto)")
    ap.add_argument("--seed", type=int, default=0, help="the generator's seed")
    ap.add_argument("--plan-every", type=positive_int, default=1, metavar="K",
                    help="re-plan every K one-second batches (default 1)")
    ap.add_argument("--replan-on-change", type=change_factor, default=FACTOR, metavar="F|off",
                    help=f"the change trigger between scheduled re-plannings (default "
                    f"{FACTOR:g}; no effect with --plan-every 1)")
    args = ap.parse_args(argv)
    phases = PHASES[args.executor]
    names = [n.strip() for n in (args.workloads or ",".join(phases)).split(",") if n.strip()]
    hows = [m.strip() for m in args.migrations.split(",") if m.strip()]
    if not names or any(n not in phases for n in names):
        ap.error(f"--workloads: choose from {', '.join(phases)}")
    if not hows or any(m not in ("moving", "parallel", "auto") for m in hows):
        ap.error("--migrations: choose from moving, parallel, auto")
    print("| workload (phases) | migration | flaps before jump | jump batch | first switch "
          "(delay ≤ 2?) | plans | migration s / median batch s (≤ 1 batch?) | p99 around / "
          "p99 steady (≤ 2×?) | all plan changes |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        for how, r in run(name, phases[name], hows, args.seed, args.executor,
                          args.plan_every, args.replan_on_change):
            head = (f"| {name} (`{phases[name]}`) | {how} | {len(r['flaps'])} | {r['jump']} | ")
            if r["switch"] is None:
                print(f"{head}none | | | | {r['changes']} |")
                continue
            ratio = r["p99_around"] / r["p99_steady"]
            print(f"{head}{r['switch']} ({r['delay']}: {'yes' if r['delay'] <= 2 else 'NO'}) | "
                  f"`{r['from_plan']}` → `{r['to_plan']}` | {r['migration']} "
                  f"{r['migration_seconds']:.2f} / {r['median']:.2f} "
                  f"({'yes' if r['migration_seconds'] <= r['median'] else 'NO'}) | "
                  f"{r['p99_around']:.2f} / {r['p99_steady']:.2f} = {ratio:.2f} "
                  f"({'yes' if ratio <= 2 else 'NO'}; {r['steady_batches']} steady) | "
                  f"{r['changes']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
