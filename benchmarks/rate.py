"""The rate cost model (issue 21, model part): re-planning after stream deltas, and how far the
plan of least load is from the best plan under the seed's per-operator Equation 2.

Two tables, printed as markdown (BENCHMARKS.md, "The rate cost model"):

* **Updates**: stream queries (chain, star of :data:`SIZES` streams, cliques of all but the
  largest size; random rates and
  windows, fixed seed) under each objective; the median time of an optimization from
  scratch (``bottomup``, ``topdown``) against an incremental update after one ``rate`` or
  ``window`` delta (``bottomup-inc``, ``topdown-inc``, the declarative optimizer on the
  python engine), over :data:`STEPS` random deltas; each update, like ``Optimizer.update``,
  is given a plan space of its own (timed with it). Every update's cost is checked against
  from-scratch ``bottomup`` here too.
* **Equation 2 per operator**: on overloaded 4-stream cliques (every join 300× dearer), the
  chosen plan's output rate when each join is throttled by its own Equation 2 denominator
  (:func:`reopt.costmodel.rate.eq2_rate`), over the best such rate among all plan trees.

Run: ``.venv/bin/python benchmarks/rate.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time

from harness import median_ms

from reopt.api import Optimizer
from reopt.costmodel import rate as R
from reopt.costmodel.cardinality import Adjustments
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.deltas import apply_deltas, parse_deltas
from reopt.costmodel.models import cost_model
from reopt.costmodel.query import Query
from reopt.costmodel.space import PlanSpace
from reopt.costmodel.sql import parse_query
from reopt.optimizers.bottomup import bottomup
from reopt.optimizers.exhaustive import all_plans
from reopt.optimizers.incremental import BottomUpInc, TopDownInc
from reopt.optimizers.topdown import topdown

SIZES = (6, 8, 10)
STEPS = 10
OBJECTIVES = ("rate", "time-to:1e6")


def stream_query(shape: str, n: int, seed: int) -> tuple[Query, Catalog]:
    """``n`` streams ``s0…`` joined in ``shape``, random rates, windows and key counts."""
    rng = random.Random(seed)
    if shape == "chain":
        edges = [(i, i + 1) for i in range(n - 1)]
    elif shape == "star":
        edges = [(0, i) for i in range(1, n)]
    else:
        edges = [(i, j) for i in range(n) for j in range(i + 1, n)]
    tables: dict = {f"s{i}": {"rate": rng.choice([1, 10, 100, 1000]),
                              "window": rng.choice([5, 30, 60, 300]), "columns": {}}
                    for i in range(n)}
    where = []
    for a, b in edges:
        for x, y in ((a, b), (b, a)):
            tables[f"s{x}"]["columns"][f"k{y}"] = {"distinct": rng.choice([10, 100, 1000])}
        where.append(f"s{a}.k{b} = s{b}.k{a}")
    cat = Catalog.from_dict({"tables": tables})
    sql = f"SELECT * FROM {', '.join(tables)} WHERE {' AND '.join(where)}"
    return parse_query(sql, cat, f"{shape}{n}"), cat


def random_delta(q: Query, rng: random.Random) -> str:
    r = rng.choice(q.relations)
    if rng.random() < 0.6:
        return f"rate {r.table} *{rng.choice([0.25, 0.5, 2, 4])}"
    return f"window {r.alias} ={rng.choice(['10s', '1m', '5m'])}"


def _scratch(search, q: Query, cat: Catalog, m, adj: Adjustments):
    """``search`` from scratch: a fresh plan space (its enumeration timed with it)."""
    return lambda: search(PlanSpace(q, cat, m, adj))


def updates(repeat: int) -> list[str]:
    rows = ["| query | objective | bottomup ms | topdown ms | bottomup-inc ms | topdown-inc ms "
            "| declarative (python) ms | plan changed |", "|---|---|---|---|---|---|---|---|"]
    for shape in ("chain", "star", "clique"):
        for n in SIZES if shape != "clique" else SIZES[:-1]:
            q, cat = stream_query(shape, n, seed=n)
            for objective in OBJECTIVES:
                m = cost_model("rate", objective)
                rng = random.Random(7)
                space = PlanSpace(q, cat, m)
                bu, td = BottomUpInc(space), TopDownInc(space)
                bu.optimize(), td.optimize()
                decl = Optimizer(q, cat, cost_model="rate", objective=objective, engine="python")
                decl.optimize()
                times: dict[str, list[float]] = {k: [] for k in ("bu", "td", "bui", "tdi", "d")}
                changed, adj = 0, Adjustments()
                previous = bottomup(space).plan
                for _ in range(STEPS):
                    text = random_delta(q, rng)
                    adj = apply_deltas(parse_deltas(text), q, cat, adj, m.operators)
                    ms, fresh = median_ms(_scratch(bottomup, q, cat, m, adj), repeat)
                    times["bu"].append(ms)
                    times["td"].append(median_ms(_scratch(topdown, q, cat, m, adj), repeat)[0])
                    for key, inc in (("bui", bu), ("tdi", td)):
                        t0 = time.perf_counter()  # its own plan space, as Optimizer.update
                        got = inc.update(PlanSpace(q, cat, m, adj))
                        times[key].append((time.perf_counter() - t0) * 1000)
                        assert math.isclose(got.cost, fresh.cost, rel_tol=1e-9), (q.name, text)
                    t0 = time.perf_counter()
                    step = decl.update(text)
                    times["d"].append((time.perf_counter() - t0) * 1000)
                    assert math.isclose(step.cost, fresh.cost, rel_tol=1e-9), (q.name, text)
                    changed += fresh.plan.explain() != previous.explain()
                    previous = fresh.plan
                med = {k: statistics.median(v) for k, v in times.items()}
                rows.append(f"| {q.name} | {objective} | {med['bu']:.2f} | {med['td']:.2f} | "
                            f"{med['bui']:.2f} | {med['tdi']:.2f} | {med['d']:.2f} | "
                            f"{changed}/{STEPS} |")
    return rows


def eq2_gaps(seeds: int = 40) -> list[str]:
    ratios = []
    for seed in range(seeds):
        q, cat = stream_query("clique", 4, seed)
        m = cost_model("rate")
        adj = apply_deltas(parse_deltas("cost shj *300; cost nlj *300"), q, cat, Adjustments(),
                           m.operators)
        space = PlanSpace(q, cat, m, adj)
        chosen = R.eq2_rate(space, bottomup(space).plan)
        best = max((R.eq2_rate(space, p) for p in all_plans(space)), default=0.0)
        ratios.append(chosen / best)
    ratios.sort()
    below = sum(r < 1 - 1e-12 for r in ratios)
    return ["| cliques | chosen below the best | min ratio | 10th pct | median |",
            "|---|---|---|---|---|",
            f"| {seeds} | {below} | {ratios[0]:.3f} | {ratios[len(ratios) // 10]:.3f} | "
            f"{statistics.median(ratios):.3f} |"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="timings per from-scratch run")
    args = ap.parse_args()
    print("\n".join(updates(args.repeat)))
    print()
    print("\n".join(eq2_gaps()))


if __name__ == "__main__":
    main()
