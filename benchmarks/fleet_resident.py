"""Update rounds of a fleet with and without resident optimizers, side by side (issue 19).

Run: ``.venv/bin/python benchmarks/fleet_resident.py [--n 1000] [--model cout] [--rounds 3]
[--master local[2]] [--json]``; on ``local-cluster[2,1,1024]`` set ``PYSPARK_PYTHON`` to this
interpreter. Two fleets of the same first ``--n`` queries of the shared workload (seed 19,
4–12 relations) on one warm Spark session: one keeps its optimizers resident in the Python
workers (:class:`reopt.fleet.Resident`, the default capacity), the other does not
(``resident=0``: every task unpickles every state, as before resident optimizers). Both
optimize, then take ``--rounds`` update rounds — round k: every query's k-th delta step —
alternating which fleet goes first. Per round and fleet: wall time, the tasks' CPU seconds
summed over the queries (the ``seconds`` of the rows: load, update, result and dump of each
query; not Spark's own work) and how many queries found their optimizer resident; the two
fleets' costs and plans are checked equal query by query.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from fleet import warm_session
from harness import markdown_table, parser, script
from workload import generate

from reopt.fleet import Fleet, FleetQuery


def measure(n: int, model: str, rounds: int, spark: Any) -> list[dict[str, Any]]:
    ws = generate(19, n, min_relations=4, max_relations=12)
    queries = [FleetQuery(w.name, w.sql, w.catalog) for w in ws]
    fleets = {"resident": Fleet(queries, cost_model=model, spark=spark),
              "loaded": Fleet(queries, cost_model=model, spark=spark, resident=0)}
    for f in fleets.values():
        f.optimize()
    out = []
    for k in range(rounds):
        deltas = [{"query": w.name, "delta": d.strip()} for w in ws
                  for d in w.deltas[k].split(";")]
        order = list(fleets) if k % 2 == 0 else list(reversed(fleets))
        got = {name: fleets[name].update(deltas) for name in order}
        a, b = (got[name].by_name() for name in fleets)
        assert all((a[q]["cost"], a[q]["plan"]) == (b[q]["cost"], b[q]["plan"]) for q in a)
        for name, rnd in got.items():
            cpu = sum(r["seconds"] or 0.0 for r in rnd.results)
            out.append({"round": k + 1, "fleet": name, "n": n, "seconds": rnd.seconds,
                        "task_cpu": cpu, "resident": rnd.resident, "jobs": rnd.jobs})
    return out


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, "benchmarks/fleet_resident.py")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--model", default="cout")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    rows = measure(args.n, args.model, args.rounds, warm_session(args.master))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print("\n".join(markdown_table(
        ["round", "fleet", "wall s (ms/q)", "tasks' CPU ms/q", "resident"],
        [[str(r["round"]), r["fleet"], f"{r['seconds']:.2f} ({1000 * r['seconds'] / r['n']:.1f})",
          f"{1000 * r['task_cpu'] / r['n']:.2f}", f"{r['resident'] / r['n']:.0%}"]
         for r in rows])))
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
