"""Calibrate the ``dist`` cost model to Spark: fit the constants of
:class:`reopt.costmodel.dist.DistConstants` to the measured times of many plans run on the same
data splits, against the model's own counts of work, taken from the rows each run observed.

Run: ``.venv/bin/python benchmarks/dist_calibrate.py --data DIR [--queries q5,pnations,q3]
[--splits 8] [--ranges 2,5] [--plans 6] [--reps 3] [--save FILE.jsonl]`` (Spark, ``local[*]``
unless ``$REOPT_SPARK_MASTER``; about a minute per query and range at SF 1), or
``--load FILE.jsonl[,…]`` to refit saved measurements without Spark.

Per query, the split relation (``lineitem``) is cut in ``--splits`` ranges of ``l_shipdate``
(:class:`reopt.adaptive.Loop`, as ``reopt run --split-by range`` does), and on each range of
``--ranges`` several distinct plans run (:func:`candidate_plans`): ``static``'s (the catalog's
statistics, the split relation scaled to one split), the optimum once every set some earlier
plan observed is pinned at its observed rows (repeated until no new plan: ``hindsight``'s),
the optima under ``cost shuffle *F`` and ``cost broadcast *F`` deltas (they only make the
optimizer pick varied plans — ones it might choose — and do not enter the counts), and the
optima with a few observed sets perturbed by up to 100× either way (seeded). Each plan runs once
as a warm-up, then ``--reps`` times interleaved (the order reversed every other round), with
:func:`reopt.execute.execute`; a record keeps every repetition's wall and JVM CPU seconds.

**The work counts come from the run itself**: every join's inputs and output are the rows
Spark observed (``Execution.nodes``), a right input's bytes per row
:meth:`~reopt.costmodel.space.PlanSpace.row_bytes`. Columns fitted (totals over the plan's
joins), the terms of the model's formulas:

* ``shuffled`` — rows entering a ``shuffle`` join (both inputs); ``built`` — rows of a
  ``broadcast`` join's right input; ``probed`` — rows of its left input; ``out`` — rows the
  joins produce; ``oversize`` — broadcast rows beyond the ones that fit in
  ``broadcast_bytes`` (Spark's 10 MB). No plan here has a nested-loop join (``pair``) and the
  scans are the same in every plan of a range, so ``scan_row`` and ``pair`` are not fitted
  (kept from the ``default`` profile).

Two fits, as ``benchmarks/rate_calibrate.py`` does:

* **least squares** of the time (min over the repetitions), non-negative, weighted by
  1/time (relative errors), with one free fixed cost per query and range (reading the
  tables, the final aggregate: the same for every plan there).
* **plan choice**: what a profile is for is ranking plans. Per query and range, the *regret*
  of a profile is the time of the plan it prices cheapest (under the observed rows) over the
  least time of any plan run there; the ratios of ``built``, ``probed``, ``out`` and
  ``oversize`` to ``shuffled`` are chosen on a grid for the least geometric-mean regret (ties:
  the highest mean Spearman correlation of price with time, then the point nearest the
  ``default`` profile, in log ratios).

Prints both fits' constants beside the ``default`` profile's, each profile's regret per query
and range, and the Spearman rank correlation of its priced cost with the time, per query and
range and on average; then the plan-choice fit as a ``DistConstants`` line (what
:data:`reopt.costmodel.dist.LOCAL` holds). ``--time cpu`` fits the JVM CPU seconds instead of
the wall seconds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
from harness import geometric_mean
from rate_calibrate import nnls

from reopt.adaptive import Loop, plan_shape
from reopt.answer import release
from reopt.api import Optimizer, load_catalog
from reopt.cli import _data_scale_factor
from reopt.costmodel.dist import DEFAULT, PROFILES, DistConstants, join_cost
from reopt.execute import Execution, execute, observed_rows
from reopt.plan import PlanNode

COLUMNS = ("shuffled", "built", "probed", "out", "oversize")
PRICINGS = (["cost shuffle *0.1"], ["cost shuffle *10"], ["cost broadcast *10"],
            ["cost shuffle *0.01"])
"""``cost`` deltas that make the optimizer pick varied plans (module doc)."""
GRID = (0.0, 0.03, 0.1, 0.2, 0.3, 1.0, 3.0)
"""Ratios to ``shuffle_row`` tried for ``build_row``, ``probe_row`` and ``out_row``."""
OVERSIZE_GRID = (0.0, 1.0, 3.0, 10.0, 30.0, 100.0)
"""Ratios to ``shuffle_row`` tried for ``oversize_row``."""


def join_records(plan: PlanNode, run: Execution, opt: Optimizer) -> list[dict[str, Any]]:
    """Every join of ``plan`` as the run saw it: operator, observed rows of its inputs and
    output, whether it has an equi-join predicate, the bytes of one right row. A join Spark
    never ran in full (its output or an input not observed) is left out: no work to price."""
    space = opt.space()
    seen = {n.relations: n.observed for n in run.nodes}
    out = []
    for node in plan.walk():
        if node.alt.log_op != "join" or any(
                seen[tuple(n.relations)] is None for n in (node, *node.children)):
            continue
        left, right = node.children
        lmask, rmask = (opt.query.mask(c.relations) for c in (left, right))
        out.append({"op": node.op, "left": seen[tuple(left.relations)],
                    "right": seen[tuple(right.relations)], "out": seen[tuple(node.relations)],
                    "equi": bool(space.crossing(lmask, rmask)),
                    "right_bytes": space.row_bytes(rmask)})
    return out


def work(joins: list[dict], c: DistConstants = DEFAULT) -> list[float]:
    """A plan's row of the fit: its joins' work by :data:`COLUMNS` (``oversize`` against
    ``c.broadcast_bytes``)."""
    w = dict.fromkeys(COLUMNS, 0.0)
    for j in joins:
        w["out"] += j["out"]
        if j["op"] == "shuffle":
            w["shuffled"] += j["left"] + j["right"]
        else:
            w["built"] += j["right"]
            w["probed"] += j["left"]
            w["oversize"] += max(0.0, j["right"] - c.broadcast_bytes / j["right_bytes"])
    return [w[k] for k in COLUMNS]


def price(c: DistConstants, joins: list[dict]) -> float:
    """The joins' cost under ``c`` at the rows the run observed (the model's formulas)."""
    return sum(join_cost(c, j["op"], j["left"], j["right"], j["out"], j["equi"],
                         j["right_bytes"]) for j in joins)


class Calibration:
    """The plans of one query on one range, run and measured (module doc)."""

    def __init__(self, loop: Loop, make: Any, i: int, nplans: int, seed: int) -> None:
        self.loop, self.make, self.i, self.nplans = loop, make, i, nplans
        self.inputs = {loop.splits.table: loop.split_input(i)}
        self.rng = random.Random(seed)
        self.plans: dict[str, PlanNode] = {}
        self.runs: dict[str, Execution] = {}
        self.opts: dict[str, Optimizer] = {}
        self.observed: dict[tuple[str, ...], int] = {}
        self.bases: dict[str, int] = {}

    def execute(self, plan: PlanNode) -> Execution:
        """One run of ``plan`` on the range (the answer kept in Spark, then released)."""
        run = execute(plan, self.loop.split_query, self.loop.data_dir, self.loop.spark,
                      inputs=self.inputs, keep=True)
        release(run.frame)
        return run

    def add(self, opt: Optimizer, plan: PlanNode) -> bool:
        """Run a new plan once (its warm-up) and keep what it observed; False if known."""
        shape = plan_shape(plan)
        if shape in self.plans or len(self.plans) >= self.nplans:
            return False
        self.plans[shape], self.opts[shape] = plan, opt
        run = self.runs[shape] = self.execute(plan)
        bases, sets = observed_rows(run.nodes)
        self.bases.update(bases)
        self.observed.update(sets)
        return True

    def truth(self, perturb: int = 0) -> list[str]:
        """Everything observed so far as deltas, ``perturb`` sets of 2+ relations scaled by
        10^U(-2, 2)."""
        sets = dict(self.observed)
        multi = sorted(s for s in sets if len(s) > 1)
        for s in self.rng.sample(multi, min(perturb, len(multi))):
            sets[s] = max(0, round(sets[s] * 10 ** self.rng.uniform(-2, 2)))
        return ([f"card {a} ={max(1, n)}" for a, n in self.bases.items()] +
                [f"card {{{','.join(r)}}} := {n}"
                 for r, n in sorted(sets.items(), key=lambda kv: len(kv[0]))])

    def optimum(self, deltas: list[str]) -> tuple[Optimizer, PlanNode]:
        """A fresh optimizer's plan after ``deltas``."""
        opt = self.make()
        opt.optimize()
        return opt, opt.update(deltas).plan

    def candidate_plans(self) -> None:
        """``static``'s plan, then ``hindsight``'s (re-planned on everything observed until no
        new plan), then :data:`PRICINGS`' optima and perturbed ones (module doc)."""
        s = self.loop.splits
        self.add(*self.optimum([f"card {s.alias} *{1 / s.k!r}"]))
        for _ in range(4):
            if not self.add(*self.optimum(self.truth())):
                break
        for pricing in PRICINGS:
            self.add(*self.optimum(self.truth() + pricing))
        for _ in range(30):
            if len(self.plans) >= self.nplans:
                break
            self.add(*self.optimum(self.truth(perturb=3)))

    def measure(self, reps: int, query: str) -> list[dict[str, Any]]:
        """Time every plan ``reps`` times, interleaved; one record per plan."""
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in self.plans}
        for r in range(reps):
            for k in (list(self.plans) if r % 2 == 0 else list(self.plans)[::-1]):
                run = self.execute(self.plans[k])
                times[k].append((run.seconds, run.cpu_seconds))
        return [{"query": query, "split": self.i, "plan_no": n, "plan": k,
                 "static": n == 0, "rows": self.loop.splits.rows[self.i],
                 "joins": join_records(self.plans[k], self.runs[k], self.opts[k]),
                 "wall": [round(t[0], 4) for t in times[k]],
                 "cpu": [round(t[1], 4) for t in times[k]]}
                for n, k in enumerate(self.plans)]


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run every query's candidate plans on its ranges (module doc), writing each record to
    ``--save`` as soon as it is measured."""
    from reopt.spark import get_spark

    spark = get_spark()
    catalog = load_catalog(None, _data_scale_factor(args.data))
    records = []
    save = open(args.save, "a") if args.save else None  # noqa: SIM115 (closed below)
    try:
        for q in args.queries.split(","):
            def make(q: str = q) -> Optimizer:
                return Optimizer(f"tpch:{q}", catalog, cost_model="dist",
                                 optimizer="topdown-inc")

            loop = Loop(make, args.data, args.splits, spark, by="range", column="l_shipdate")
            for i in map(int, args.ranges.split(",")):
                cal = Calibration(loop, make, i, args.plans, args.seed + i)
                cal.candidate_plans()
                for rec in cal.measure(args.reps, q):
                    records.append(rec)
                    if save:
                        save.write(json.dumps(rec) + "\n")
                        save.flush()
                print(f"  {q} range {i}: {len(cal.plans)} plans", file=sys.stderr, flush=True)
            loop.close()
    finally:
        if save:
            save.close()
    return records


# -- the fits -----------------------------------------------------------------------------------
def seconds(rec: dict, kind: str) -> float:
    """A record's time: the least of its repetitions (the one least disturbed by the load)."""
    return min(rec[kind])


def groups(records: list[dict]) -> dict[tuple, list[dict]]:
    """The records by query and range: the plans compared with each other."""
    by: dict[tuple, list[dict]] = {}
    for r in records:
        by.setdefault((r["query"], r["split"]), []).append(r)
    return by


def least_squares(records: list[dict], kind: str) -> tuple[DistConstants, float]:
    """The least-squares fit (module doc): the constants (seconds per row) and the median
    |prediction / time - 1| of the fit."""
    keys = sorted(groups(records))
    a = np.array([work(r["joins"]) + [float((r["query"], r["split"]) == k) for k in keys]
                  for r in records])
    b = np.array([seconds(r, kind) for r in records])
    x = nnls(a / b[:, None], np.ones(len(b)))
    error = float(np.median(np.abs(a @ x / b - 1)))
    shuffled, built, probed, out, over = x[:len(COLUMNS)].tolist()
    return DistConstants("least squares", 0.0, shuffled, built, probed, out, 0.0, over,
                         DEFAULT.broadcast_bytes), error


def regret(records: list[dict], c: DistConstants, kind: str) -> dict[tuple, float]:
    """Per query and range: the time of the plan ``c`` prices cheapest over the least time
    of any plan run there (1: the profile's pick is the fastest plan)."""
    return {g: seconds(min(runs, key=lambda r: price(c, r["joins"])), kind)
            / min(seconds(r, kind) for r in runs)
            for g, runs in groups(records).items()}


def ranks(xs: list[float]) -> np.ndarray:
    """Ranks of ``xs`` (0 first), ties given their mean rank."""
    xs_ = np.asarray(xs, dtype=float)
    order = np.argsort(np.argsort(xs_, kind="stable"))
    out = np.empty(len(xs_))
    for v in np.unique(xs_):
        at = xs_ == v
        out[at] = order[at].mean()
    return out


def spearman(records: list[dict], c: DistConstants, kind: str) -> dict[tuple, float]:
    """Per query and range: the rank correlation of ``c``'s price with the time."""
    out = {}
    for g, runs in groups(records).items():
        x, y = ranks([price(c, r["joins"]) for r in runs]), ranks([seconds(r, kind)
                                                                  for r in runs])
        ok = len(runs) > 2 and x.std() > 0 and y.std() > 0
        out[g] = float(np.corrcoef(x, y)[0, 1]) if ok else math.nan
    return out


def choose(records: list[dict], kind: str) -> DistConstants:
    """The plan-choice fit (module doc): the grid ratios of least geometric-mean regret;
    among equals (the regret only sees each range's pick), those of the highest mean
    Spearman correlation of price with time (the whole ranking), then the one nearest the
    ``default`` profile."""
    d = DEFAULT
    best: tuple[float, float, float, DistConstants] | None = None
    for built, probed, out in itertools.product(GRID, GRID, GRID):
        for over in OVERSIZE_GRID:
            c = DistConstants("local", d.scan_row, 1.0, built, probed, out, d.pair, over,
                              d.broadcast_bytes)
            score = round(geometric_mean(regret(records, c, kind).values()), 9)
            rho = -float(np.nanmean(list(spearman(records, c, kind).values())))
            near = sum(abs(math.log((x + 1e-3) / (y + 1e-3))) for x, y in
                       ((built, d.build_row), (probed, d.probe_row), (out, d.out_row),
                        (over, d.oversize_row)))
            if best is None or (score, rho, near) < best[:3]:
                best = (score, rho, near, c)
    assert best is not None
    return best[3]


def report(records: list[dict], kind: str) -> None:
    """Print both fits and each profile's regret and rank correlation (module doc)."""
    squares, error = least_squares(records, kind)
    chosen = choose(records, kind)
    profiles = {**PROFILES, "least squares": squares, "plan-choice fit": chosen}
    print(f"{len(records)} plans on {len(groups(records))} query ranges; time: min {kind} "
          "seconds of the repetitions\n")
    print("| constant | " + " | ".join(profiles) + " |")
    print("|---|" + "---|" * len(profiles))
    for name in ("shuffle_row", "build_row", "probe_row", "out_row", "oversize_row"):
        cells = [f"{getattr(p, name) / (p.shuffle_row or 1):.3g}" for p in profiles.values()]
        print(f"| {name} / shuffle_row | " + " | ".join(cells) + " |")
    print(f"\nleast squares: shuffle_row = {squares.shuffle_row:.3g} s per row, median "
          f"|prediction / time - 1| = {error:.2f}\n")
    regrets = {n: regret(records, p, kind) for n, p in profiles.items()}
    rhos = {n: spearman(records, p, kind) for n, p in profiles.items()}
    print("Time of the plan each profile prices cheapest over the fastest plan run "
          "(regret), and Spearman of price vs time, per query and range:")
    print("| query | range | plans | " + " | ".join(profiles) + " |")
    print("|---|---|---|" + "---|" * len(profiles))
    for g, runs in sorted(groups(records).items()):
        cells = [f"{regrets[n][g]:.2f} ({rhos[n][g]:+.2f})" for n in profiles]
        print(f"| {g[0]} | {g[1]} | {len(runs)} | " + " | ".join(cells) + " |")
    cells = [f"**{geometric_mean(regrets[n].values()):.2f}** "
             f"({np.nanmean(list(rhos[n].values())):+.2f})" for n in profiles]
    print("| geometric mean (mean ρ) | | | " + " | ".join(cells) + " |")
    c = chosen
    print(f"\nDistConstants('local', scan_row={c.scan_row:g}, shuffle_row={c.shuffle_row:g}, "
          f"build_row={c.build_row:g}, probe_row={c.probe_row:g}, out_row={c.out_row:g}, "
          f"pair={c.pair:g}, oversize_row={c.oversize_row:g}, "
          f"broadcast_bytes={c.broadcast_bytes:g})")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="the data folder (reopt data tpch --skew … --drift)")
    ap.add_argument("--queries", default="q5,pnations,q3")
    ap.add_argument("--splits", type=int, default=8)
    ap.add_argument("--ranges", default="2,5", help="the ranges measured, comma-separated")
    ap.add_argument("--plans", type=int, default=6, help="distinct plans per range (at most)")
    ap.add_argument("--reps", type=int, default=3, help="timed repetitions per plan")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time", choices=("wall", "cpu"), default="wall",
                    help="fit the wall seconds (default) or the JVM CPU seconds")
    ap.add_argument("--save", help="append the records to this JSON-lines file")
    ap.add_argument("--load", help="fit the records of earlier --save files "
                    "(comma-separated) instead of running")
    args = ap.parse_args(argv)
    if args.load:
        records = [json.loads(line) for f in args.load.split(",")
                   for line in Path(f).read_text().splitlines() if line.strip()]
    elif args.data:
        records = measure(args)
    else:
        ap.error("give --data DIR to measure or --load FILES to refit")
    report(records, args.time)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
