"""Calibrate the rate model's per-tuple costs for an executor: fit the constants of
:class:`reopt.costmodel.rate.RateConstants` to measured CPU time against the model's own
counts of work (:class:`reopt.costmodel.rate.Work`).

Run: ``.venv/bin/python benchmarks/rate_calibrate.py [--workloads nexmark,segtolls]
[--phases calibration,default] [--seconds 36] [--seeds 0,1]`` (no Spark; the in-process executor,
``reopt stream --executor local``; a few minutes).

For each workload and phases (:data:`CALIBRATION_PHASES` and the default ones) the stream is
generated once; a dry pass gives every batch's true statistics
(:func:`reopt.streamrun.observations`). Several plans are run over the whole stream on the
executor, one after another: the optimizer's best plans under the ``spark`` profile with
``nlj`` priced ×1e-3, ×1, ×1e3 and ``shj`` ×1e3 (``cost OP *F`` deltas; that only makes the
optimizer pick varied plans — the ones it might choose — and does not enter the counts), and
a seeded sample of the query's other plan trees. Per run, the model's work is summed over
its batches: each batch's statistics as deltas to a fresh optimizer (default profile: the
counts do not depend on it), and the plan's operators' :meth:`RateModel.work` per second
times the batch's seconds. The columns fitted, each a total over the run's batches:

* ``move`` — tuples entering a join (``nlj`` and ``shj``);
* ``hash+probe`` — tuples entering an ``shj`` (``hash`` and ``probe`` are counted alike, so
  only their sum is identified; each gets half);
* ``comp`` — pairs an ``nlj`` compares; ``out`` — results the joins produce; ``select`` —
  arrivals filtered;
* ``batch`` — a fixed cost per micro-batch (reading files, sliding windows): plan-independent,
  not in the model, fitted so that it does not leak into the constants.

Two fits, every row a phase (a third) of one run:

* **least squares** of CPU seconds, non-negative, weighted by ``1/cpu`` (relative errors),
  in two stages. The plans run on one stream share its scans and batches, so stage one fits
  the join constants with one free fixed cost per stream phase (the differences between
  plans, which the plan-independent costs would drown otherwise); stage two fits ``select``
  and ``batch`` to those fixed costs.
* **plan choice**: what a profile is for is ranking plans, and the executor's per-call
  overheads are not in the model's formulas, so the constants that predict CPU best need
  not rank plans best. Per stream phase, the *regret* of a profile is the measured CPU of
  the plan it ranks cheapest over the least measured CPU of any plan run there; the ratios
  of ``move``, ``hash+probe`` and ``comp`` to ``out`` are chosen on a grid (0 and powers of
  ten, ``comp`` in half decades) for the least geometric-mean regret, then their common
  scale and ``select`` by the least squares above on the one column they price.

Prints the constants of both fits against the ``spark`` profile's, each profile's regret per
workload, and the plan-choice fit as a ``RateConstants`` line: what
:data:`reopt.costmodel.rate.LOCAL` holds (BENCHMARKS.md, "Calibrating the rate model").
``--runs`` also prints every row with the least-squares prediction over the measured CPU;
``--save``/``--load`` keep the measurements to refit without running.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from dataclasses import fields
from pathlib import Path

import numpy as np

from reopt.api import Optimizer
from reopt.costmodel.rate import PROFILES, RateConstants, Work
from reopt.optimizers.exhaustive import all_plans
from reopt.plan import PlanNode
from reopt.stream import plan_line
from reopt.streamgen import generate_stream
from reopt.streamlocal import make_query
from reopt.streamrun import interval_deltas, observations

CALIBRATION_PHASES = {
    "nexmark": "{s}:auctions=40,bids=8,keys=200;{s}:auctions=40,bids=80,keys=200;"
               "{s}:auctions=40,bids=800,keys=200",
    "segtolls": "{s}:accidents=5,keys=160;{s}:segstats=50,accidents=5,keys=160;"
                "{s}:segstats=500,accidents=5,keys=160"}
"""``--phases calibration``: one stream 10× faster twice (the ``drift`` presets before they
were re-searched under the calibrated profile): states from a few to thousands of tuples,
so that hashing and nested loops each win somewhere."""
COLUMNS = ("move", "hash+probe", "comp", "out", "select", "batch")
PRICINGS = (["cost nlj *0.001"], [], ["cost nlj *1000"], ["cost shj *1000"])
"""``cost`` deltas that make the optimizer pick varied plans (module doc)."""
MAX_PAIRS = 1e6
"""Nested-loops pairs per second a sampled plan may compare (:func:`candidate_plans`)."""


def features(work: Work, batches: int) -> list[float]:
    """A run's row of the fit: its work by :data:`COLUMNS`."""
    assert work.hash == work.probe  # the model counts both per tuple entering an shj
    return [work.move, work.hash, work.comp, work.out, work.select, float(batches)]


def plan_work(opt: Optimizer, plan: PlanNode) -> Work:
    """The model's work per second of ``plan`` under ``opt``'s current statistics."""
    space = opt.space()
    total = {f.name: 0.0 for f in fields(Work)}
    for node in plan.walk():
        w = space.model.work(space, node.alt)
        for name in total:
            total[name] += getattr(w, name)
    return Work(**total)


def counted(root: Path, deltas: list[str]) -> Optimizer:
    """A fresh optimizer (default profile) over the stream's catalog after ``deltas``."""
    opt = Optimizer(str(root / "query.sql"), str(root / "catalog.json"), cost_model="rate",
                    optimizer="topdown")
    opt.update(deltas)
    return opt


def candidate_plans(root: Path, batches: list[Optimizer], first_deltas: list[str],
                    sample: int, seed: int) -> list[PlanNode]:
    """The plans to run: the optimizer's best for the first batch's statistics under each
    of :data:`PRICINGS`, and ``sample`` more drawn (seeded) from every plan tree of the
    query whose nested loops compare at most :data:`MAX_PAIRS` pairs a second by the model
    in every batch (a plan past that would take minutes on the executor and teach nothing
    new)."""
    plans: dict[str, PlanNode] = {}
    first = batches[0]
    for pricing in PRICINGS:
        plan = counted(root, first_deltas + pricing).optimize().plan
        plans.setdefault(plan_line(plan), plan)
    bounded = [p for p in all_plans(first.space()) if plan_line(p) not in plans
               and all(plan_work(b, p).comp <= MAX_PAIRS for b in batches)]
    rng = np.random.default_rng(seed)
    for k in rng.permutation(len(bounded))[:sample]:
        plans[plan_line(bounded[k])] = bounded[k]
    return list(plans.values())


def measure(workload: str, phases: str | None, seconds: int, seed: int,
            sample: int) -> list[dict]:
    """One row per plan run over the workload's stream (module doc)."""
    rows = []
    name = phases or "default"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / workload
        if phases == "calibration":
            phases = CALIBRATION_PHASES[workload].format(s=seconds // 3)
        generate_stream(workload, root, seconds, seed, phases)
        opt = Optimizer(str(root / "query.sql"), str(root / "catalog.json"),
                        cost_model="rate", optimizer="topdown-inc")
        deltas = [interval_deltas([b]) for b in observations(opt, root, 1)]
        batches = [counted(root, d) for d in deltas]
        plans = candidate_plans(root, batches, deltas[0], sample, seed)
        # batch 0 of a first run warms pandas up
        make_query("local", opt.query, opt.catalog, root, None, 1).step(plans[0])
        third = len(batches) // 3
        for plan in plans:
            cq = make_query("local", opt.query, opt.catalog, root, None, 1)
            cpu = [cq.step(plan).cpu_seconds for _ in batches]
            work = [features(plan_work(b, plan), 1) for b in batches]
            for k in range(3):  # the phases: thirds of the stream (presets and defaults)
                part = slice(k * third, (k + 1) * third if k < 2 else len(batches))
                rows.append({"workload": workload, "phases": name,
                             "seed": seed, "phase": k + 1, "plan": plan_line(plan),
                             "cpu": sum(cpu[part]),
                             "work": np.sum(work[part], axis=0).tolist()})
    return rows


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares by elimination: solve on the active columns, drop those
    with a negative coefficient, repeat (few columns, so exact enough)."""
    active = list(range(a.shape[1]))
    while True:
        x, *_ = np.linalg.lstsq(a[:, active], b, rcond=None)
        if (x >= 0).all():
            out = np.zeros(a.shape[1])
            out[active] = x
            return out
        active = [c for c, v in zip(active, x, strict=True) if v >= 0]


def _groups(rows: list[dict]) -> list[tuple]:
    """Each row's stream phase: the plans run on it share its scans and batches."""
    return [(r["workload"], r["phases"], r.get("seed", 0), r["phase"]) for r in rows]


def fit(rows: list[dict], joins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least squares in two stages (module doc): the coefficients of the ``joins`` columns
    (per row), then ``select`` and ``batch``."""
    a = np.array([r["work"] for r in rows])
    b = np.array([r["cpu"] for r in rows])
    streams = _groups(rows)
    groups = sorted(set(streams))
    dummies = np.array([[s == g for g in groups] for s in streams], dtype=float)
    w = 1.0 / b
    x = nnls(np.hstack([joins, dummies]) * w[:, None], b * w)
    k = joins.shape[1]
    fixed = x[k:]  # each stream phase's own cost, the same for every plan run on it
    shared = np.array([a[[i for i, s in enumerate(streams) if s == g][0], 4:] for g in groups])
    keep = fixed > 0
    rest = nnls(shared[keep] / fixed[keep, None], np.ones(int(keep.sum())))
    return x[:k], rest


def price(constants: RateConstants, work: list[float]) -> float:
    """The join part of a row's work priced by ``constants``."""
    move, hp, comp, out = work[:4]
    return (move * constants.move + hp * (constants.hash + constants.probe)
            + comp * constants.comp + out * constants.out)


def regret(rows: list[dict], constants: RateConstants) -> dict[str, list[float]]:
    """Per workload and stream phase: the measured CPU of the plan ``constants`` rank
    cheapest over the least measured CPU of any plan run there (1: the model's pick is the
    best plan)."""
    by: dict[tuple, list[dict]] = {}
    for r, g in zip(rows, _groups(rows), strict=True):
        by.setdefault(g, []).append(r)
    out: dict[str, list[float]] = {}
    for g, runs in by.items():
        pick = min(runs, key=lambda r: price(constants, r["work"]))
        out.setdefault(g[0], []).append(pick["cpu"] / min(r["cpu"] for r in runs))
    return out


def score(rows: list[dict], constants: RateConstants) -> float:
    """Geometric mean over the workloads of each one's geometric-mean :func:`regret`."""
    per = regret(rows, constants).values()
    return float(np.exp(np.mean([np.mean(np.log(v)) for v in per])))


def choose(rows: list[dict]) -> RateConstants:
    """The plan-choice fit (module doc): the ratios of ``move``, ``hash+probe`` and ``comp``
    to ``out`` of least :func:`score` on a grid (0 and powers of ten; ``comp`` in half
    decades), then their common scale by :func:`fit` on the one column they price."""
    grid = [0.0] + [10.0 ** e for e in range(-4, 2)]
    best = None
    for move, hp in itertools.product(grid, grid):
        for comp in (10.0 ** (e / 2) for e in range(-8, 3)):
            c = RateConstants("trial", move, hp / 2, hp / 2, comp, 1.0, 0.0)
            trial = score(rows, c)
            if best is None or trial < best[0] - 1e-12:
                best = (trial, c)
    assert best is not None
    c = best[1]
    scale, rest = fit(rows, np.array([[price(c, r["work"])] for r in rows]))
    f = float(scale[0])
    return RateConstants("local", c.move * f, c.hash * f, c.probe * f, c.comp * f, f,
                         float(rest[0]))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="nexmark,segtolls")
    ap.add_argument("--phases", default="calibration,default",
                    help="calibration (CALIBRATION_PHASES), default, presets or phase texts, "
                    "comma-separated (default calibration,default)")
    ap.add_argument("--seconds", type=int, default=36)
    ap.add_argument("--seeds", default="0,1",
                    help="generator seeds, comma-separated (each a stream per workload)")
    ap.add_argument("--sample", type=int, default=8,
                    help="plans drawn at random per stream, beside the optimizer's (default 8)")
    ap.add_argument("--save", help="write the runs' rows to this JSON file")
    ap.add_argument("--load", help="fit the rows of earlier --save files (comma-separated) "
                    "instead of running")
    ap.add_argument("--runs", action="store_true", help="print every run's row too")
    args = ap.parse_args(argv)
    if args.load:
        rows = [r for f in args.load.split(",") for r in json.loads(Path(f).read_text())]
    else:
        rows = [r for w in args.workloads.split(",") for p in args.phases.split(",")
                for seed in map(int, args.seeds.split(","))
                for r in measure(w, None if p == "default" else p, args.seconds, seed,
                                 args.sample)]
    if args.save:
        Path(args.save).write_text(json.dumps(rows))
    a = np.array([r["work"] for r in rows])
    joins, rest = fit(rows, a[:, :4])
    move, hp, comp, out = joins.tolist()
    squares = RateConstants("least squares", move, hp / 2, hp / 2, comp, out, float(rest[0]))
    chosen = choose(rows)
    if args.runs:
        print("| workload | phases | seed | phase | plan | cpu s | least squares / cpu |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            pred = price(squares, r["work"]) + squares.select * r["work"][4] + rest[1]
            print(f"| {r['workload']} | {r['phases']} | {r.get('seed', 0)} | {r['phase']} | "
                  f"`{r['plan']}` | {r['cpu']:.3f} | {pred / r['cpu']:.2f} |")
        print()
    spark = PROFILES["spark"]
    print("| constant | spark profile | least squares | plan-choice fit |")
    print("|---|---|---|---|")
    for name in ("move", "hash", "probe", "comp", "out", "select"):
        print(f"| {name} | {getattr(spark, name):.3g} | {getattr(squares, name):.3g} | "
              f"{getattr(chosen, name):.3g} |")
    print(f"| per batch (not in the model) | | {rest[1]:.3g} s | |")
    print()
    print("Measured CPU of the plan each profile ranks cheapest over the cheapest plan run, "
          "per stream phase:")
    print("| workload | stream phases | spark | least squares | plan-choice fit |")
    print("|---|---|---|---|---|")
    regrets = [regret(rows, c) for c in (spark, squares, chosen)]
    for w in regrets[0]:
        cells = [f"median {np.median(r[w]):.2f}, max {max(r[w]):.2f}, "
                 f"≤ 1.1 in {sum(x <= 1.1 for x in r[w])}" for r in regrets]
        print(f"| {w} | {len(regrets[0][w])} | {' | '.join(cells)} |")
    print(f"\nRateConstants('local', move={chosen.move:.2g}, hash={chosen.hash:.2g}, "
          f"probe={chosen.probe:.2g}, comp={chosen.comp:.2g}, out={chosen.out:.2g}, "
          f"select={chosen.select:.2g})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
