"""Updates of small queries: the declarative optimizer's incremental update against
re-optimizing from scratch, where the update's fixed per-call costs matter most.

Run: ``.venv/bin/python benchmarks/small_updates.py [--repeat N] [--queries q3,q5]
[--models io,cout,dist] [--quick] [--out FILE]``. Everything runs in one process; times are
CPU seconds of this process (``time.process_time``) around ``Optimizer.update()`` — the whole
call as a user pays it (parsing, validation, maintenance, metrics, plan) — medians over
``--repeat`` replays. For TPC-H q3, q5, q10 and q8join under each cost model:

* **batch**: the deltas an execution of the current plan observes, pushed as one batch, as
  the adaptive loop does (issue 20, ``reopt.adaptive``): ``card A =N`` for every base relation
  and the observation ``card {…} := N`` for every join of the plan, each N its estimate
  perturbed by a seeded factor in ×0.3…×3; three rounds, each observing the new plan.
* **single**: one delta at a time: ``card orders *2`` (or the query's first relation), a
  ``sel`` of its first join predicate ×0.5, and their inverses.

Optimizers timed on the same deltas, each a fresh optimizer per replay that optimized first
(untimed): ``declarative`` (python engine) with pruning ``all`` and ``aggsel``, ``topdown``
(re-optimizes from scratch) and ``topdown-inc`` (keeps its memo). Every optimizer's cost is
checked against the declarative one's after every update.
"""

from __future__ import annotations

import math
import random
import statistics
import sys
import time

from harness import emit, machine, out_file, parser, script, today

from reopt.api import Optimizer
from reopt.cliargs import name_list, positive_int

QUERIES = ("q3", "q5", "q10", "q8join")
MODELS = ("io", "cout", "dist")
SUBJECTS = {
    "decl-all": {"optimizer": "declarative", "engine": "python", "pruning": "all"},
    "decl-aggsel": {"optimizer": "declarative", "engine": "python", "pruning": "aggsel"},
    "topdown": {"optimizer": "topdown"},
    "topdown-inc": {"optimizer": "topdown-inc"},
}
ROUNDS = 3


def observed_batch(opt: Optimizer, step, rng: random.Random) -> list[str]:
    """What executing ``step``'s plan would observe: every base relation's rows (``=N``) and
    every join's rows (``:= N``), each the estimate times a seeded factor in ×0.3…×3."""
    def perturbed(x: float) -> int:
        return max(1, round(x * math.exp(rng.uniform(math.log(0.3), math.log(3.0)))))

    rels = step.estimates["relations"] if step.estimates else None
    if rels is None:
        est = opt.space().estimator
        rels = {a: est.leaf_card(a) for a in opt.query.aliases}
    out = [f"card {a} ={perturbed(n)}" for a, n in sorted(rels.items())]
    for node in step.plan.walk():
        if node.alt.log_op == "join":
            out.append(f"card {{{','.join(sorted(node.relations))}}} := {perturbed(node.rows)}")
    return out


def workload(query: str, model: str, seed: int) -> dict[str, list[list[str]]]:
    """The delta batches of one query: ``batch`` rounds (replayed on a declarative optimizer
    to learn each round's plan) and ``single`` deltas."""
    rng = random.Random(f"{seed}:{query}:{model}")
    o = Optimizer(f"tpch:{query}", cost_model=model, optimizer="topdown")
    step = o.optimize()
    batches = []
    for _ in range(ROUNDS):
        batch = observed_batch(o, step, rng)
        batches.append(batch)
        step = o.update(batch)
    first = sorted(o.query.aliases)
    table = "orders" if "orders" in first else first[0]
    p = o.query.joins[0]
    sel = f"sel {p.left}={p.right}"
    singles = [[f"card {table} *2"], [f"card {table} *0.5"], [f"{sel} *0.5"], [f"{sel} *2"]]
    return {"batch": batches, "single": singles}


def replay(query: str, model: str, batches: list[list[str]], repeat: int
           ) -> tuple[dict[str, float], dict[str, float]]:
    """Median CPU ms per update of each subject over ``repeat`` replays of ``batches``, and
    the declarative (``all``) update's median update ratio (OR, AND)."""
    times: dict[str, list[float]] = {s: [] for s in SUBJECTS}
    ratios: dict[str, list[float]] = {"or": [], "and": []}
    for _ in range(repeat):
        opts = {s: Optimizer(f"tpch:{query}", cost_model=model, **kw)
                for s, kw in SUBJECTS.items()}
        for o in opts.values():
            o.optimize()
        for batch in batches:
            cost = None
            for s, o in opts.items():
                t = time.process_time()
                step = o.update(batch)
                times[s].append(time.process_time() - t)
                if cost is None:
                    cost = step.cost
                    r = step.metrics.get("update_ratio", {})
                    ratios["or"].append(r.get("or", 0.0))
                    ratios["and"].append(r.get("and", 0.0))
                elif not math.isclose(step.cost, cost, rel_tol=1e-9):
                    raise AssertionError(f"{query}/{model}: {s} costs {step.cost}, "
                                         f"the declarative optimizer {cost}, after {batch}")
    return ({s: 1000 * statistics.median(ts) for s, ts in times.items()},
            {k: statistics.median(v) for k, v in ratios.items()})


HEADER = ["| query | model | deltas | decl `all` ms | decl `aggsel` ms | topdown ms "
          "| topdown-inc ms | `all` / topdown | `all` / topdown-inc | update ratio OR / AND |",
          "|---|---|---|---|---|---|---|---|---|---|"]


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "benchmarks/small_updates.py")
    ap.add_argument("--repeat", type=positive_int, default=7, metavar="N",
                    help="replays (default %(default)s; --quick: 1)")
    ap.add_argument("--queries", type=name_list("query", QUERIES), default=list(QUERIES),
                    metavar="LIST", help=f"TPC-H queries (default {','.join(QUERIES)})")
    ap.add_argument("--models", type=name_list("cost model", MODELS), default=list(MODELS),
                    metavar="LIST", help=f"cost models (default {','.join(MODELS)})")
    ap.add_argument("--seed", type=int, default=7,
                    help="seed of the observed cardinalities' perturbation (default %(default)s)")
    ap.add_argument("--quick", action="store_true", help="smoke run: one replay")
    ap.add_argument("--out", type=out_file, default=None, metavar="FILE",
                    help="also write the markdown report to FILE (default: standard output "
                    "only)")
    args = ap.parse_args(argv)
    repeat = 1 if args.quick else args.repeat
    lines = [
        f"Command: `python benchmarks/small_updates.py {' '.join(argv or sys.argv[1:])}`",
        f"Date: {today()}; {machine()}; TPC-H SF1 statistics; CPU ms per update() call, "
        f"medians of {repeat} replays.", "", *HEADER]
    ratio_all: list[float] = []
    ratio_inc: list[float] = []
    for query in args.queries:
        for model in args.models:
            work = workload(query, model, args.seed)
            for kind, batches in work.items():
                ms, ur = replay(query, model, batches, repeat)
                a = ms["decl-all"]
                ratio_all.append(a / ms["topdown"])
                ratio_inc.append(a / ms["topdown-inc"])
                lines.append(
                    f"| {query} | {model} | {kind} ({len(batches)}×{len(batches[0])}) "
                    f"| {a:.2f} | {ms['decl-aggsel']:.2f} | {ms['topdown']:.2f} "
                    f"| {ms['topdown-inc']:.2f} | {a / ms['topdown']:.2f} "
                    f"| {a / ms['topdown-inc']:.2f} | {ur['or']:.2f} / {ur['and']:.2f} |")
                print(lines[-1], file=sys.stderr)
    lines += ["", f"Median over rows: declarative `all` / topdown "
              f"{statistics.median(ratio_all):.2f} (max {max(ratio_all):.2f}); "
              f"/ topdown-inc {statistics.median(ratio_inc):.2f} "
              f"(max {max(ratio_inc):.2f}).", ""]
    emit("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(script(main))
