"""Fleets on Spark against the in-process engine (issue 19).

Run: ``.venv/bin/python benchmarks/fleet.py [--sizes 1,10,100,1000] [--models cout,io]
[--seed S] [--master local[2]] [--json]`` prints a markdown table (BENCHMARKS.md, "Fleets").

For each cost model and fleet size N, the first N queries of the shared workload
(:func:`workload.generate`, 4–12 relations, every shape), side by side in one run:

* **in-process loop**: one :class:`reopt.api.Optimizer` (python engine, ``all``) per query,
  optimized from scratch, then updated with the query's first delta step (a statistic of
  every query changes); wall time of each phase, summed over the queries; with the fleet
  tasks' garbage-collection policy (:func:`reopt.optimizers.base.paused_gc` collecting the
  young generation after each query), so that both sides do the same engine work;
* **fleet, initial**: :meth:`reopt.fleet.Fleet.optimize` on a warm Spark session (one fleet
  was run before, so Python workers are up and the program compiled): wall time, Spark jobs;
* **fleet, update**: one :meth:`~reopt.fleet.Fleet.update` round with the same deltas, and
  how many of its queries found their optimizer resident in the task's Python worker
  (:class:`reopt.fleet.Resident`: kept from round 0 by the worker that ran it);
* **fleet, from scratch**: a second fleet given those deltas up front
  (:class:`~reopt.fleet.FleetQuery` ``deltas``): what re-optimizing the fleet from scratch
  on Spark costs, for the update's speed-up.

Per-query times are the phase's wall time over N. Then **one query on a warm session**:
``Optimizer("tpch:q5", engine="spark", cost_model="io")`` — a decomposable program on the
``spark`` engine runs as a one-query fleet — its ``optimize()`` and an ``update("card orders
*F")``, wall time, the median of ``--repeat`` runs, side by side with the python engine.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from harness import markdown_table, parser, script
from workload import generate

from reopt.api import Optimizer
from reopt.fleet import Fleet, FleetQuery
from reopt.optimizers.base import paused_gc


def _loop(queries: list[FleetQuery], model: str) -> tuple[float, float]:
    from reopt.evaluator.driver import load_program
    from reopt.fleet import FleetOptions, _optimizer

    opts = FleetOptions(load_program(None, "all"), model, "all")
    scratch = update = 0.0
    for fq in queries:  # with the fleet tasks' garbage-collection policy: the same engine work
        t0 = time.perf_counter()
        with paused_gc(collect_young=True):
            o: Optimizer = _optimizer(fq, opts)
            o.optimize()
        t1 = time.perf_counter()
        with paused_gc(collect_young=True):
            o.update(list(fq.deltas))
        update += time.perf_counter() - t1
        scratch += t1 - t0
    return scratch, update


def measure(n: int, model: str, seed: int, spark: Any) -> dict[str, Any]:
    ws = generate(seed, n, min_relations=4, max_relations=12)
    plain = [FleetQuery(w.name, w.sql, w.catalog) for w in ws]
    moved = [FleetQuery(w.name, w.sql, w.catalog, tuple(d.strip() for d in
                                                        w.deltas[0].split(";")))
             for w in ws]
    loop_scratch, loop_update = _loop(moved, model)
    fleet = Fleet(plain, cost_model=model, spark=spark)
    r0 = fleet.optimize()
    r1 = fleet.update([{"query": q.name, "delta": d} for q in moved for d in q.deltas])
    again = Fleet(moved, cost_model=model, spark=spark)
    r2 = again.optimize()
    assert not r0.errors and not r1.errors and not r2.errors, (r0.errors, r1.errors)
    # the update round and the fleet optimized from scratch agree query by query
    want = {r["name"]: r["cost"] for r in r2.results}
    assert all(r["cost"] == want[r["name"]] for r in r1.results)
    return {"n": n, "model": model, "loop_scratch": loop_scratch, "loop_update": loop_update,
            "initial": r0.seconds, "initial_jobs": r0.jobs, "update": r1.seconds,
            "update_jobs": r1.jobs, "scratch": r2.seconds, "scratch_jobs": r2.jobs,
            "partitions": fleet._partitions(), "resident": r1.resident}


def single(repeat: int) -> list[dict[str, Any]]:
    """TPC-H Q5 alone, on Spark and in process: optimize, then one update (each run fresh)."""
    import statistics

    out = []
    for engine in ("spark", "python"):
        opt_t, upd_t = [], []
        for k in range(repeat):
            o = Optimizer("tpch:q5", engine=engine, cost_model="io")
            t0 = time.perf_counter()
            o.optimize()
            t1 = time.perf_counter()
            o.update(f"card orders *{2 + k}")
            upd_t.append(time.perf_counter() - t1)
            opt_t.append(t1 - t0)
        out.append({"engine": engine, "optimize": statistics.median(opt_t),
                    "update": statistics.median(upd_t)})
    return out


def warm_session(master: str) -> Any:
    """The Spark session on ``master``, warmed by a one-query fleet's two rounds (Python
    workers up, the rule program compiled in them)."""
    from reopt.spark import get_spark

    spark = get_spark(master)
    warm = Fleet([FleetQuery("warm", "tpch:q5")], spark=spark)
    warm.optimize()
    warm.update({"warm": "card orders *2"})
    return spark


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, "benchmarks/fleet.py")
    p.add_argument("--sizes", default="1,10,100,1000")
    p.add_argument("--models", default="cout,io")
    p.add_argument("--seed", type=int, default=19)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    spark = warm_session(args.master)
    one = single(args.repeat)
    print(json.dumps(one), file=sys.stderr, flush=True)
    rows = []
    for model in args.models.split(","):
        for n in (int(x) for x in args.sizes.split(",")):
            r = measure(n, model, args.seed, spark)
            rows.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({"single": one, "fleets": rows}, indent=1))
        return 0
    print("\n".join(markdown_table(
        ["TPC-H Q5 (io), warm session", "optimize s", "update s"],
        [[r["engine"], f"{r['optimize']:.3f}", f"{r['update']:.3f}"] for r in one])))
    print()
    header = ["model", "N", "loop: scratch s (ms/q)", "loop: update s (ms/q)",
              "fleet: initial s (ms/q)", "fleet/loop", "fleet: update s (ms/q)",
              "resident", "fleet: scratch s", "scratch/update", "jobs/round"]
    table = []
    for r in rows:
        n = r["n"]
        table.append([
            r["model"], f"{n:,}",
            f"{r['loop_scratch']:.2f} ({1000 * r['loop_scratch'] / n:.1f})",
            f"{r['loop_update']:.2f} ({1000 * r['loop_update'] / n:.1f})",
            f"{r['initial']:.2f} ({1000 * r['initial'] / n:.1f})",
            f"{r['initial'] / r['loop_scratch']:.2f}×",
            f"{r['update']:.2f} ({1000 * r['update'] / n:.1f})",
            f"{r.get('resident', 0) / n:.0%}", f"{r['scratch']:.2f}",
            f"{r['scratch'] / r['update']:.1f}×",
            f"{r['initial_jobs']}/{r['update_jobs']}/{r['scratch_jobs']}"])
    print("\n".join(markdown_table(header, table)))
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
