"""The greedy plan above the search-space budget (``--over-budget greedy``): how fast, how good.

Two tables, printed as markdown (BENCHMARKS.md, "Greedy plans above the budget"):

* **Quality**, on the large-query workload (:mod:`workload`, seed 0: the fixed large set and
  20 generated queries, all within the default budget): the greedy plan's cost over the exact
  optimum (``bottomup``), under ``io`` (queries of at most :data:`IO_PAIRS` pairs) and
  ``cout``, and the two planning times. The greedy
  cost is never below the optimum (asserted here too); how far above is the price of the
  heuristic.
* **Over the budget**: stars, cliques and chains of 30-60 relations through the API with
  ``over_budget="greedy"`` (the default ``max_pairs``; chains are forced over it with
  ``max_pairs=100``), timed end to end: the budget check, the greedy search, the plan tree.

Run: ``.venv/bin/python benchmarks/greedy.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import median_ms  # noqa: E402
from workload import generate, large_queries  # noqa: E402

from reopt.api import Optimizer  # noqa: E402
from reopt.costmodel.catalog import Catalog  # noqa: E402
from reopt.costmodel.models import cost_model  # noqa: E402
from reopt.costmodel.space import PlanSpace  # noqa: E402
from reopt.optimizers.bottomup import bottomup  # noqa: E402
from reopt.optimizers.greedy import greedy  # noqa: E402

IO_PAIRS = 12_000
"""Queries with more csg-cmp pairs are compared under ``cout`` only."""


def _planner(search, query, catalog, model: str):
    """``search`` on a fresh plan space of the query (its enumeration timed with it)."""
    return lambda: search(PlanSpace(query, catalog, cost_model(model)))


def quality(repeat: int) -> list[str]:
    rows = ["| query | relations | model | greedy / optimum cost | greedy ms | bottomup ms |",
            "|---|---|---|---|---|---|"]
    ratios: dict[str, list[float]] = {"io": [], "cout": []}
    for wq in [*large_queries(), *generate(0, 20)]:
        query, catalog = wq.load()
        # the exact io search of the largest queries takes minutes: cout only there
        for model in ("io", "cout") if wq.pairs <= IO_PAIRS else ("cout",):
            g_ms, g = median_ms(_planner(greedy, query, catalog, model), repeat)
            b_ms, b = median_ms(_planner(bottomup, query, catalog, model), 1)
            assert g.cost >= b.cost, (wq.name, model)
            ratio = g.cost / b.cost
            ratios[model].append(ratio)
            rows.append(f"| {wq.name} | {query.n} | {model} | {ratio:.3f} | {g_ms:.1f} | "
                        f"{b_ms:.1f} |")
            print(rows[-1], file=sys.stderr, flush=True)  # progress
    rows.append("")
    for model, rs in ratios.items():
        rs.sort()
        rows.append(f"- {model}: greedy / optimum median {statistics.median(rs):.3f}, "
                    f"max {rs[-1]:.3f}; optimal in {sum(r == 1.0 for r in rs)} of {len(rs)}")
    return rows


def _big(shape: str, n: int, seed: int = 1) -> tuple[str, Catalog]:
    """SQL and catalog of a ``shape`` join graph on ``n`` tables (foreign-key joins, log-
    uniform rows, a GROUP BY on top)."""
    rng = random.Random(seed)
    if shape == "star":
        edges = [(0, i) for i in range(1, n)]
    elif shape == "chain":
        edges = [(i, i + 1) for i in range(n - 1)]
    else:  # clique
        edges = [(i, j) for i in range(n) for j in range(i + 1, n)]
    tables, preds = {}, []
    for i in range(n):
        rows = int(10 ** rng.uniform(1, 7))
        tables[f"t{i}"] = {"rows": rows, "columns": {"id": {"distinct": rows},
                                                     "v": {"distinct": 100}}}
    for a, b in edges:
        col = f"t{b}_id"
        tables[f"t{a}"]["columns"][col] = {
            "distinct": max(1, min(tables[f"t{a}"]["rows"], tables[f"t{b}"]["rows"]) // 2)}
        preds.append(f"t{a}.{col} = t{b}.id")
    sql = (f"SELECT t0.v, COUNT(*) FROM {', '.join(f't{i}' for i in range(n))} "
           f"WHERE {' AND '.join(preds)} GROUP BY t0.v")
    return sql, Catalog.from_dict({"tables": tables})


def over_budget(repeat: int) -> list[str]:
    rows = ["| query | relations | max_pairs | optimizer | plan ms (median) | exact |",
            "|---|---|---|---|---|---|"]
    for shape, n, max_pairs in [("star", 30, 1_000_000), ("star", 60, 1_000_000),
                                ("clique", 30, 1_000_000), ("chain", 30, 100),
                                ("chain", 60, 100)]:
        sql, catalog = _big(shape, n)
        for optimizer in ("topdown", "declarative"):
            def run(sql=sql, catalog=catalog, optimizer=optimizer, max_pairs=max_pairs):
                return Optimizer(sql, catalog, optimizer=optimizer, engine="python",
                                 max_pairs=max_pairs, over_budget="greedy").optimize()
            ms, step = median_ms(run, repeat)
            rows.append(f"| {shape}-{n} | {n} | {max_pairs:,} | {optimizer} | {ms:.1f} | "
                        f"{step.exact} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    print("\n".join(quality(args.repeat)))
    print()
    print("\n".join(over_budget(args.repeat)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
