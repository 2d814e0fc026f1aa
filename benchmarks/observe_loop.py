"""The plan–observe loop (issue 20): what each meaning of an observed cardinality does to it.

Run: ``.venv/bin/python benchmarks/observe_loop.py [--seed S] [--count N] [--min-relations A]
[--max-relations B] [--edge-spread E] [--set-spread S] [--json]`` prints a markdown table
(BENCHMARKS.md, "The plan–observe loop"); the defaults are the first table's run.

For each query of the shared workload (:func:`workload.generate`), under ``cout``:

1. **A true catalog.** The estimator assumes independent predicates; the "true" cardinality
   of a connected set ``S`` of relations is its estimate under the query's catalog times a
   correlation factor per join edge inside ``S`` and a noise factor of ``S`` itself, clamped
   to ``[1, cross product]`` like every estimate (:class:`Truth`)::

       true(S) = est(S) × Π_{edges e ⊆ S} c_e × n_S,   log10 c_e ~ U(-E, E),
                                                       log10 n_S ~ U(-S, S)

   with ``E`` = ``--edge-spread`` (default 1: a join up to 10× off either way) and ``S`` =
   ``--set-spread`` (default 0.5).

   Each factor is drawn from its own ``random.Random`` seeded by the query's name, the seed
   and the edge (or the set's mask): the same for every meaning and every run. Base relations
   are estimated exactly (the loop observes joins only), so ``c_e`` is the error of the
   independence assumption on a join and ``n_S`` what no per-edge model explains.
2. **The loop.** Optimize (``bottomup-inc``); "execute" the plan: observe the true
   cardinality of every join in it and push them, children first, as ONE batch of deltas;
   re-optimize incrementally; until a plan has no join the loop has not observed yet. A
   round is one re-optimization. Every meaning gets the same observations:

   * ``correction`` — today's ``card {…} =N``: a factor on the set and its supersets, solved
     so that the set's estimate is N given everything in force (a later correction of a
     subset moves it again);
   * ``keep`` — ``card {…} := N``, pinned; unobserved sets untouched
     (``observed_supersets="keep"``);
   * ``propagate`` — ``card {…} := N``, pinned; an unobserved set is corrected by the
     observed/estimated ratios of its largest pairwise-disjoint observed subsets.
3. **Measures**: rounds; the true cost (C_out under ``true``) of the first and the final
   plan against the true optimum (``bottomup`` with every connected set observed at its true
   cardinality, so estimates are the truth); how many queries end worse than they started;
   how many end above some plan the loop executed on the way (never, for pinned meanings:
   the final plan's joins are all observed, so its estimated cost is its true cost, and it
   is optimal under estimates in which every executed plan's cost is also true).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from harness import parser, script
from workload import MAX_RELATIONS, MIN_RELATIONS, WorkloadQuery, generate

from reopt.api import Optimizer
from reopt.cliargs import number_from_to, positive_int
from reopt.costmodel.cardinality import Adjustments, Estimator
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.models import cost_model
from reopt.costmodel.query import Query
from reopt.costmodel.space import PlanSpace
from reopt.optimizers.bottomup import bottomup
from reopt.plan import PlanNode

MEANINGS: dict[str, tuple[str, str]] = {
    "correction": ("=", "keep"),
    "keep": (":=", "keep"),
    "propagate": (":=", "propagate"),
}
"""Meaning → (the delta operator pushed, the optimizer's ``observed_supersets``)."""
EDGE_SPREAD = 1.0
"""``log10`` of a join edge's correlation factor is uniform in ``[-EDGE_SPREAD, EDGE_SPREAD]``."""
SET_SPREAD = 0.5
"""``log10`` of a set's own noise factor is uniform in ``[-SET_SPREAD, SET_SPREAD]``."""
MAX_ROUNDS = 1000
"""A safety net only: each round observes a set never observed before, so the loop ends after
at most as many rounds as the query has connected sets; hitting this is a bug."""


class Truth:
    """The true cardinalities of one query's connected relation sets (module doc, step 1)."""

    def __init__(self, query: Query, catalog: Catalog, seed: int,
                 edge_spread: float | None = None, set_spread: float | None = None):
        self.query = query
        self.edge_spread = EDGE_SPREAD if edge_spread is None else edge_spread
        self.set_spread = SET_SPREAD if set_spread is None else set_spread
        self.estimator = Estimator(query, catalog)
        self.seed = seed
        self._edges = [
            (query.bit(p.left.alias) | query.bit(p.right.alias),
             self._factor(f"edge:{p.key}", self.edge_spread))
            for p in query.joins
        ]
        self._card: dict[int, float] = {}

    def _factor(self, what: str, spread: float) -> float:
        rng = random.Random(f"{self.query.name}:{self.seed}:{what}")
        return 10 ** rng.uniform(-spread, spread)

    def card(self, mask: int) -> float:
        hit = self._card.get(mask)
        if hit is None:
            hit = self.estimator.card(mask)
            if mask & (mask - 1):  # a join (a base relation is estimated exactly)
                for both, f in self._edges:
                    if both & mask == both:
                        hit *= f
                hit *= self._factor(f"set:{mask}", self.set_spread)
                hit = min(max(hit, 1.0), self.estimator.ceiling(mask))
            self._card[mask] = hit
        return hit


def joins(plan: PlanNode) -> list[int]:
    """The relation sets of the plan's joins, children before parents."""
    return [n.alt.expr for n in reversed(list(plan.walk())) if n.alt.log_op == "join"]


def true_cost(plan: PlanNode, truth: Truth) -> float:
    """The plan's C_out under the true cardinalities: the rows of every join it builds."""
    return math.fsum(truth.card(m) for m in joins(plan))


def true_optimum(query: Query, catalog: Catalog, truth: Truth) -> float:
    """The best plan's true cost: ``bottomup`` with every connected set observed at its true
    cardinality, so every estimate of the search is the truth."""
    space = PlanSpace(query, catalog, cost_model("cout"))
    observed = {e: truth.card(e) for e in space.expressions()}
    return bottomup(space.with_adjustments(Adjustments(observations=observed))).cost


@dataclass
class Loop:
    """One run of the loop: the true cost of each plan it produced (the first, one per
    round; the last is the final plan) and the rounds (re-optimizations)."""

    meaning: str
    costs: list[float] = field(default_factory=list)

    @property
    def rounds(self) -> int:
        return len(self.costs) - 1

    @property
    def worse_than_first(self) -> bool:
        return self.costs[-1] > self.costs[0] * (1 + 1e-9)

    @property
    def above_an_executed_plan(self) -> bool:
        return self.costs[-1] > min(self.costs) * (1 + 1e-9)


def run_loop(query: Query, catalog: Catalog, truth: Truth, meaning: str,
             optimizer: str = "bottomup-inc") -> Loop:
    """The plan–observe loop of the module doc (step 2) under one meaning."""
    op, policy = MEANINGS[meaning]
    opt = Optimizer(query, catalog, cost_model="cout", optimizer=optimizer,
                    observed_supersets=policy)
    plan = opt.optimize().plan
    loop = Loop(meaning, [true_cost(plan, truth)])
    observed: set[int] = set()
    while True:
        sets = joins(plan)
        if observed.issuperset(sets):
            return loop
        if loop.rounds >= MAX_ROUNDS:
            raise RuntimeError(f"{query.name}: the {meaning} loop did not end")
        observed.update(sets)
        plan = opt.update([_delta(query, m, op, truth.card(m)) for m in sets]).plan
        loop.costs.append(true_cost(plan, truth))


def _delta(query: Query, mask: int, op: str, rows: float) -> dict[str, Any]:
    """An observation as a delta's JSON object (the value exactly, no text round trip)."""
    members = ",".join(r.alias for i, r in enumerate(query.relations) if mask >> i & 1)
    return {"kind": "card", "target": f"{{{members}}}", "op": op, "value": rows}


@dataclass
class QueryResult:
    name: str
    relations: int
    optimum: float
    loops: dict[str, Loop]


def measure(wq: WorkloadQuery, seed: int, meanings: Sequence[str] | None = None,
            edge_spread: float | None = None, set_spread: float | None = None) -> QueryResult:
    """One query's loops under ``meanings`` (default: every meaning of :data:`MEANINGS`)."""
    query, catalog = wq.load()
    truth = Truth(query, catalog, seed, edge_spread, set_spread)
    loops = {m: run_loop(query, catalog, truth, m) for m in meanings or MEANINGS}
    return QueryResult(wq.name, wq.relations, true_optimum(query, catalog, truth), loops)


def _ratio_text(x: float) -> str:
    return f"{x:,.0f}x" if x >= 100 else f"{x:.2f}x" if x < 10 else f"{x:.1f}x"


def table(results: Sequence[QueryResult]) -> list[str]:
    """The markdown table: one row per meaning."""
    lines = [
        "| meaning | rounds: median (mean, max) | first plan / optimum: median | final / optimum: "
        "median (p90, worst) | final / optimum: geometric mean | final at the optimum | final "
        "worse than first | final above an executed plan |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for meaning in MEANINGS:
        loops = [(r.loops[meaning], r.optimum) for r in results if meaning in r.loops]
        if not loops:
            continue
        rounds = [lp.rounds for lp, _ in loops]
        first = [lp.costs[0] / opt for lp, opt in loops]
        final = sorted(lp.costs[-1] / opt for lp, opt in loops)
        p90 = final[min(len(final) - 1, math.ceil(0.9 * len(final)) - 1)]
        lines.append(
            f"| {meaning} | {statistics.median(rounds):g} ({statistics.fmean(rounds):.1f}, "
            f"{max(rounds)}) | {_ratio_text(statistics.median(first))} | "
            f"{_ratio_text(statistics.median(final))} ({_ratio_text(p90)}, "
            f"{_ratio_text(final[-1])}) | {statistics.geometric_mean(final):.3f}x | "
            f"{sum(x <= 1 + 1e-9 for x in final)} | "
            f"{sum(lp.worse_than_first for lp, _ in loops)} | "
            f"{sum(lp.above_an_executed_plan for lp, _ in loops)} |")
    return lines


spread = number_from_to(0, 10, "decades")
"""``type=`` of a spread: a finite number of decades, 0 to 10."""


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    ap = parser(__doc__, prog="observe_loop.py")
    ap.add_argument("--seed", type=int, default=0, help="workload and truth seed (default 0)")
    ap.add_argument("--count", type=positive_int, default=100,
                    help="queries (default 100)")
    ap.add_argument("--min-relations", type=positive_int, default=MIN_RELATIONS)
    ap.add_argument("--max-relations", type=positive_int, default=12)
    ap.add_argument("--edge-spread", type=spread, default=EDGE_SPREAD,
                    help=f"log10 range of a join edge's correlation (default {EDGE_SPREAD:g})")
    ap.add_argument("--set-spread", type=spread, default=SET_SPREAD,
                    help=f"log10 range of a set's own noise (default {SET_SPREAD:g})")
    ap.add_argument("--json", action="store_true", help="per-query results as JSON lines")
    args = ap.parse_args(argv)
    if not MIN_RELATIONS <= args.min_relations <= args.max_relations <= MAX_RELATIONS:
        ap.error(f"relation counts must satisfy {MIN_RELATIONS} <= --min-relations <= "
                 f"--max-relations <= {MAX_RELATIONS}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    wqs = generate(args.seed, args.count, min_relations=args.min_relations,
                   max_relations=args.max_relations)
    results = []
    for wq in wqs:
        r = measure(wq, args.seed, edge_spread=args.edge_spread, set_spread=args.set_spread)
        results.append(r)
        if args.json:
            print(json.dumps({"name": r.name, "relations": r.relations, "optimum": r.optimum,
                              "loops": {m: asdict(lp) for m, lp in r.loops.items()}}))
    print(f"{len(results)} queries (workload seed {args.seed}, {args.min_relations}-"
          f"{args.max_relations} relations, edge spread {args.edge_spread:g}, set spread "
          f"{args.set_spread:g}), cout, bottomup-inc:\n")
    print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
