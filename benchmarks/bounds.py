"""Bounds that prune: the PlanCost tuples each pruning mode costs and keeps on the large-query
workload, and the time it takes.

Run: ``.venv/bin/python benchmarks/bounds.py [--models cout,io] [--max-pairs N] [--count N]
[--out FILE]``. For each query of the workload (``benchmarks/workload.py``, seed 0: the fixed
large queries and ``--count`` generated ones of at most 14 relations, those of at most
``--max-pairs`` csg-cmp pairs), one evaluation of the rules per pruning mode (``none`` where
its plan trees are few, ``aggsel``, ``aggsel+bound``, ``all``) on the ``python`` engine
(``reopt.evaluator.driver.evaluate``: the rules' fixpoint with the mode's features), counting

* **costed**: PlanCost candidates the rules produced (``RunStats.produced``), what costing
  did; a plan whose input was rejected by its bound is never costed;
* **kept**: PlanCost tuples the release step kept (``RunStats.derived``) — aggregate selection
  keeps one per OR node and round; a bound rejects an OR node whose best plan exceeds it;
* **CPU ms** of the evaluation (``time.process_time``), the least of ``--repeat`` runs (the
  machine is shared: other work only ever adds time).

Each evaluation's best cost is checked equal to ``topdown``'s (``exact``). ``seed/opt`` is the
seed bound (the greedy plan's cost, ``Fn_seedbound``) over the optimum: how much room the
bound leaves.

``--sessions``: the same through the API's sessions instead (``Optimizer(...,
engine="python", pruning=mode)``, whose complete layer is kept for re-optimization), for
``aggsel``, ``aggsel+bound`` and ``all``: PlanCost tuples the initial ``optimize()`` kept
(``metrics["derived"]``) and its CPU ms, then the query's first workload delta as one
``update()``: the PlanCost candidates it re-derived and its CPU ms (each the least of
``--repeat`` fresh sessions), and how many of the session's evaluations and updates fell back
to an unbounded complete layer (``fb``, a seed below the optimum). The update's cost is
checked equal to a fresh ``topdown``'s under the same statistics (``exact``).
"""

from __future__ import annotations

import statistics
import sys
import time

from harness import emit, machine, markdown_table, out_file, parser, script, today
from workload import generate, large_queries

from reopt.api import Optimizer
from reopt.cliargs import name_list, positive_int
from reopt.costmodel.models import cost_model
from reopt.costmodel.space import PlanSpace
from reopt.evaluator.driver import evaluate, load_program
from reopt.optimizers.greedy import greedy
from reopt.optimizers.topdown import topdown

SEED = 0
MODES = ("none", "aggsel", "aggsel+bound", "all")
NONE_TREES = 200_000
"""``none`` holds one PlanCost tuple per distinct plan-tree cost: only small spaces."""


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "benchmarks/bounds.py")
    ap.add_argument("--models", type=name_list("cost model", ("cout", "io")),
                    default=("cout", "io"), metavar="MODELS",
                    help="comma-separated cost models (default cout,io)")
    ap.add_argument("--max-pairs", type=positive_int, default=40_000, metavar="N",
                    help="leave out queries of more csg-cmp pairs (default %(default)s: the "
                    "pruned modes cost on tuples, seconds per 10,000 pairs)")
    ap.add_argument("--count", type=positive_int, default=20, metavar="N",
                    help="generated queries besides the fixed large ones (default %(default)s)")
    ap.add_argument("--repeat", type=positive_int, default=3, metavar="N",
                    help="evaluations per mode and query, the least CPU time reported "
                    "(default %(default)s)")
    ap.add_argument("--out", type=out_file, default=None, metavar="FILE",
                    help="also write the markdown report to FILE")
    ap.add_argument("--sessions", action="store_true",
                    help="measure through the API's sessions: initial optimization and one "
                    "delta per mode (see above)")
    args = ap.parse_args(argv)
    wqs = sorted((w for w in large_queries(SEED) + generate(SEED, args.count, max_relations=14)
                  if w.pairs <= args.max_pairs), key=lambda w: (w.pairs, w.name))
    if args.sessions:
        return sessions(wqs, args, argv)
    programs = {m: load_program(pruning=m) for m in MODES}
    header = ["query", "rels", "pairs", "model", "seed/opt",
              *[f"{m} costed / kept" for m in MODES],
              *[f"{m} CPU ms" for m in MODES], "exact"]
    rows, ratios = [], {m: [] for m in ("aggsel+bound", "all")}
    below = {m: 0 for m in ratios}
    for wq in wqs:
        q, cat = wq.load()
        for model in args.models:
            space = PlanSpace(q, cat, cost_model(model))
            opt = topdown(space).cost
            seed = greedy(space).cost
            cells, times, exact = {}, {}, True
            for mode in MODES:
                if mode == "none" and space.count_trees(limit=1e9) > NONE_TREES:
                    cells[mode], times[mode] = "–", "–"
                    continue
                best = float("inf")
                for _ in range(args.repeat):
                    fresh = PlanSpace(q, cat, cost_model(model))  # nothing memoized
                    t = time.process_time()
                    ev = evaluate([fresh], "python", program=programs[mode])
                    best = min(best, time.process_time() - t)
                times[mode] = f"{best * 1e3:.0f}"
                exact &= ev.best_cost(0) == opt
                s = ev.stats
                cells[mode] = (s.produced.get("PlanCost", 0), s.derived.get("PlanCost", 0))
            base = cells["aggsel"]
            for m in ratios:
                ratios[m].append(cells[m][0] / base[0])
                below[m] += cells[m][1] < base[1]
            rows.append([wq.name, wq.relations, f"{wq.pairs:,}", model, f"{seed / opt:.3f}",
                         *[c if c == "–" else f"{c[0]:,} / {c[1]:,}"
                           for c in (cells[m] for m in MODES)],
                         *[times[m] for m in MODES], "yes" if exact else "NO"])
            print(" | ".join(map(str, rows[-1])), file=sys.stderr)
    n = len(rows)
    lines = [
        f"Command: `{' '.join(['python', 'benchmarks/bounds.py', *(argv or sys.argv[1:])])}`",
        f"Date: {today()}; {machine()}; workload seed {SEED}, python engine, one evaluation "
        f"per mode (CPU: the least of {args.repeat}).", "",
        *markdown_table(header, rows), "",
        f"Summary over {n} query × model runs: costed PlanCost candidates relative to "
        "`aggsel`, median (min–max): " + "; ".join(
            f"`{m}` {statistics.median(r):.2f} ({min(r):.2f}–{max(r):.2f}), kept fewer than "
            f"`aggsel` in {below[m]}/{n}" for m, r in ratios.items()) + ".",
    ]
    emit("\n".join(lines) + "\n", args.out)
    return 0 if all(r[-1] == "yes" for r in rows) else 1


SESSION_MODES = ("aggsel", "aggsel+bound", "all")


def session_run(q, cat, model: str, mode: str, delta: str) -> dict:
    """One fresh session: optimize, then one update with ``delta``; CPU seconds of each."""
    o = Optimizer(q, cat, cost_model=model, engine="python", pruning=mode)
    t = time.process_time()
    first = o.optimize()
    init = time.process_time() - t
    t = time.process_time()
    step = o.update(delta)
    upd = time.process_time() - t
    engine = o._session.engine if o._session is not None else None
    return {"init": init, "update": upd, "kept": first.metrics["derived"].get("PlanCost", 0),
            "rederived": step.metrics["derived"].get("PlanCost", 0), "cost": step.cost,
            "adjustments": o.adjustments, "fb": getattr(engine, "fallbacks", None)}


def sessions(wqs: list, args, argv: list[str] | None) -> int:
    """The ``--sessions`` table (module docstring)."""
    header = ["query", "rels", "pairs", "model",
              *[f"{m} kept" for m in SESSION_MODES],
              *[f"{m} init CPU ms" for m in SESSION_MODES],
              *[f"{m} update re-derived" for m in SESSION_MODES],
              *[f"{m} update CPU ms" for m in SESSION_MODES], "fb", "exact"]
    rows, below, ratio = [], 0, {m: [] for m in SESSION_MODES}
    for wq in wqs:
        q, cat = wq.load()
        for model in args.models:
            got = {}
            for mode in SESSION_MODES:
                runs = [session_run(q, cat, model, mode, wq.deltas[0])
                        for _ in range(args.repeat)]
                got[mode] = {**runs[0], "init": min(r["init"] for r in runs),
                             "update": min(r["update"] for r in runs)}
            oracle = Optimizer(q, cat, cost_model=model, optimizer="topdown")
            oracle.adjustments = got["all"]["adjustments"]
            opt = oracle.optimize().cost
            exact = all(g["cost"] == opt or abs(g["cost"] - opt) <= 1e-9 * abs(opt)
                        for g in got.values())
            below += got["all"]["kept"] < got["aggsel"]["kept"]
            for m in SESSION_MODES:
                ratio[m].append(got[m]["init"] / got["aggsel"]["init"])
            fb = [got[m]["fb"] for m in SESSION_MODES[1:]]
            rows.append([wq.name, wq.relations, f"{wq.pairs:,}", model,
                         *[f"{got[m]['kept']:,}" for m in SESSION_MODES],
                         *[f"{got[m]['init'] * 1e3:.0f}" for m in SESSION_MODES],
                         *[f"{got[m]['rederived']:,}" for m in SESSION_MODES],
                         *[f"{got[m]['update'] * 1e3:.0f}" for m in SESSION_MODES],
                         "–" if None in fb else sum(fb), "yes" if exact else "NO"])
            print(" | ".join(map(str, rows[-1])), file=sys.stderr)
    n = len(rows)
    lines = [
        f"Command: `{' '.join(['python', 'benchmarks/bounds.py', *(argv or sys.argv[1:])])}`",
        f"Date: {today()}; {machine()}; workload seed {SEED}, python engine, sessions "
        f"(CPU: the least of {args.repeat} fresh sessions).", "",
        *markdown_table(header, rows), "",
        f"Summary over {n} query × model runs: `all` kept fewer PlanCost tuples than `aggsel` "
        f"in {below}/{n}; initial CPU relative to `aggsel`, median: " + "; ".join(
            f"`{m}` {statistics.median(r):.2f}" for m, r in ratio.items() if m != "aggsel")
        + ".",
    ]
    emit("\n".join(lines) + "\n", args.out)
    return 0 if all(r[-1] == "yes" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(script(main))
