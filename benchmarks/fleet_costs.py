"""Where a fleet's update round goes, in process: what each query's task pays (issue 19).

Run: ``.venv/bin/python benchmarks/fleet_costs.py [--n 200] [--models io,cout]`` prints a
markdown table (BENCHMARKS.md, "`io` at N = 10,000, re-run after the memory bound").

For each cost model, the first ``--n`` queries of ``benchmarks/fleet.py``'s workload (seed 19,
4–12 relations), with the fleet tasks' garbage-collection policy, CPU time summed over the
queries: build and optimize from scratch, dump the state (:func:`reopt.fleet._dump`), load it
(:func:`reopt.fleet._load`), update the loaded optimizer with the query's delta step, dump
again; and the same delta applied to the optimizer that never left memory (a resident one).

A round from scratch on Spark pays per query the build, the optimization and a dump; an update
round a load, the update and a dump, or for a resident query the update and a dump. The
ratios derived from these sums say how much faster than from scratch an update round can be
with each query non-resident, each resident, and with no state stored at all (the engine's
update alone): the fleet's rounds cannot beat the last, whatever their storage.
"""

from __future__ import annotations

import time
from typing import Any

from harness import markdown_table, parser, script
from workload import generate

from reopt.cliargs import positive_int
from reopt.evaluator.driver import load_program
from reopt.fleet import FleetOptions, FleetQuery, _dump, _load, _optimizer
from reopt.optimizers.base import paused_gc

PHASES = ("scratch", "dump", "load", "update", "again", "resident")


def measure(n: int, model: str) -> dict[str, float]:
    """The phases' CPU seconds summed over the first ``n`` queries, and the stored bytes."""
    opts = FleetOptions(load_program(None, "all"), model, "all")
    took = dict.fromkeys(PHASES, 0.0)
    stored = 0

    def timed(phase: str, work: Any, *args: Any) -> Any:
        t0 = time.process_time()
        out = work(*args)
        took[phase] += time.process_time() - t0
        return out

    for w in generate(19, n, min_relations=4, max_relations=12):
        deltas = [d.strip() for d in w.deltas[0].split(";")]
        with paused_gc(collect_young=True):
            opt = timed("scratch", _optimizer, FleetQuery(w.name, w.sql, w.catalog), opts)
            timed("scratch", opt.optimize)
            blob = timed("dump", _dump, opt)
        stored += len(blob)
        with paused_gc(collect_young=True):
            loaded = timed("load", _load, blob)
            timed("update", loaded.update, deltas)
            timed("again", _dump, loaded)
        with paused_gc(collect_young=True):
            timed("resident", opt.update, deltas)
    return {**took, "stored": float(stored)}


HEADER = ("model", "N", "optimize from scratch s", "dump s", "load s", "update (loaded) s",
          "dump again s", "update (resident) s", "stored MB",
          "scratch / update round, none resident", "all resident", "no state stored")


def row(n: int, model: str, t: dict[str, float]) -> list[str]:
    """The table's row: the sums, and the speed-ups of an update round over a round from
    scratch they allow (module doc)."""
    scratch_round = t["scratch"] + t["dump"]
    cold = scratch_round / (t["load"] + t["update"] + t["again"])
    warm = scratch_round / (t["resident"] + t["again"])
    bare = t["scratch"] / t["resident"]
    return [model, f"{n:,}", *(f"{t[p]:.2f}" for p in PHASES), f"{t['stored'] / 1e6:.1f}",
            f"{cold:.2f}×", f"{warm:.2f}×", f"{bare:.2f}×"]


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, "benchmarks/fleet_costs.py")
    p.add_argument("--n", type=positive_int, default=200, help="queries (default 200)")
    p.add_argument("--models", default="io,cout")
    args = p.parse_args(argv)
    rows = [row(args.n, model, measure(args.n, model)) for model in args.models.split(",")]
    print("\n".join(markdown_table(HEADER, rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(script(main))
