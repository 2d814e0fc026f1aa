"""The engine benchmark: where the declarative optimizer stands against issue 18's goals.

Issue 18 rewrites the declarative optimizer's evaluator (a columnar, set-at-a-time engine);
its Done-means are measured goals. This script measures all of them in one run, side by side
in one process, so the rewrite has a yardstick:

1. **From scratch** — the declarative optimizer (``python`` engine, ``all`` pruning) against
   ``topdown`` and ``bottomup`` on the large-query workload (``benchmarks/workload.py``,
   seed 0) under ``cout`` and ``io``, and on TPC-H under ``io``. Goals: every query of at
   most 250,000 csg-cmp pairs in ≤ 0.1 s (``cout``) / ≤ 0.5 s (``io``); median ≤ 1.0×
   ``topdown`` on queries of ≥ 10 relations, ≤ 1.3× on TPC-H.
2. **Bounds** — the PlanCost tuples each pruning mode derives (``none``, ``aggsel``,
   ``aggsel+bound``, ``all``). Goal: ``all`` strictly below ``aggsel`` on most large queries.
3. **One delta** — each query's delta sequence (≥ 12 relations): the declarative update
   against the same engine from scratch (goal ≥ 20×, median) and against ``topdown-inc`` on
   the same delta (goal: no slower, median); TPC-H Q5's Figure 6 sweep (warm and as one
   ``reopt optimize tpch:q5 --delta …`` call reports it: ≥ 10×; ≥ 12× ``topdown`` at E).
4. **The adaptive loop** — optimize; observe the true cardinality of every join of the plan
   (the seeded correlated truth of ``benchmarks/observe_loop.py``); push them as one batch
   of ``card {…} =N`` deltas; re-optimize; until no join of the plan is unobserved. Per
   round on ≥ 12-relation queries: no slower than ``topdown-inc`` on the same batch (median),
   ≥ 10× faster than from scratch, every round's plan as cheap as a from-scratch one.
5. **Peak memory** (RSS) of a fresh process optimizing the largest queries: ≤ 2 GiB.
6. **The floor** — a plain Polars pass over the largest query's csg-cmp pairs (one lookup
   of the best costs per side and one group-by min per rank, C_out) and the time to
   enumerate those pairs with :class:`~reopt.costmodel.joingraph.JoinGraph`.

Times: wall seconds and CPU seconds of this process (``time.process_time``); the machine is
shared, so the verdicts read CPU time, and ratios are taken between medians of one run.
The declarative optimizer is slow on large queries today, so every measurement has a
budget: a mode or query whose run exceeded it is skipped on larger queries, with a note.
Every measured plan is checked exact: its cost equals ``topdown``'s from scratch under the
same statistics (``exact`` columns).

Run: ``python benchmarks/engine.py [--quick] [--repeat N] [--out FILE] [--json FILE]``
(markdown on standard output, or into FILE); ``make bench`` runs it as its ``engine``
section (``benchmarks/run.py --only engine`` alone).
"""

from __future__ import annotations

import gc
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import harness
from harness import FIG6_SETS, markdown_table, median, out_file, parser, same_cost, script
from workload import WorkloadQuery, generate, large_queries

from reopt.api import Optimizer
from reopt.cliargs import positive_int
from reopt.costmodel.query import Query

ROOT = Path(__file__).resolve().parent.parent
SEED = 0
COUNT = 20
"""Generated workload queries besides the fixed large set (as ``enumeration.py``)."""
MAX_RELATIONS = 14
TPCH = ("tpch:q3", "tpch:q10", "tpch:q5", "tpch:q5s", "tpch:q8join", "tpch:q8joins")
MODES = ("none", "aggsel", "aggsel+bound", "all")
"""The pruning modes whose derived PlanCost tuples the bounds table compares."""

GOAL_PAIRS = 250_000
GOAL_SECONDS = {"cout": 0.1, "io": 0.5}
GOAL_VS_TOPDOWN = 1.0
"""Median declarative / topdown from scratch on queries of ≥ GOAL_BIG relations."""
GOAL_VS_TOPDOWN_TPCH = 1.3
GOAL_BIG = 10
GOAL_UPDATE_RELATIONS = 12
GOAL_UPDATE_SPEEDUP = 20.0
GOAL_Q5_SPEEDUP = 10.0
GOAL_Q5_E_VS_TOPDOWN = 12.0
GOAL_LOOP_SPEEDUP = 10.0
GOAL_RSS_MIB = 2048.0

ROUND_LIMIT = 1.0
"""CPU seconds: a run slower than this is measured once, not ``repeat`` times."""
SCRATCH_BUDGET = 60.0
"""CPU seconds of one declarative from-scratch run; above it, larger queries are skipped
(per cost model and mode)."""
NONE_TREES = 20_000
"""``none`` derives one PlanCost tuple per distinct plan-tree cost (exponential): run only
where the plan space has at most this many plan trees."""
NONE_PAIRS = 2_000
"""Above this many csg-cmp pairs ``none`` is not even considered (counting the plan trees
of a large space takes seconds, and they number far more than NONE_TREES)."""
IO_PAIRS = 25_000
"""Workload queries above this many pairs are not run under ``io`` (the declarative
optimizer takes about 9 s CPU at 35,000 pairs, minutes on the 14–17-relation cliques)."""
IO_MODES = ("none", "all")
"""Modes run on the workload under ``io`` (TPC-H: every mode of MODES)."""
Q5_REPEAT = 7
"""Rounds of each Q5 set × factor (milliseconds each; --quick: 1)."""
STEPS = 4
"""Delta steps per query (of the workload's 8; --quick: 2)."""
UPDATE_BUDGET = 20.0
"""CPU seconds of declarative updates per query; the remaining delta steps are skipped."""
LOOP_ROUNDS = 6
"""At most this many rounds of the adaptive loop per query (the rest: a note)."""
LOOP_BUDGET = 20.0
"""CPU seconds of declarative rounds per query; the loop stops there (a note)."""
RSS_QUERIES = 2


# -- measuring ------------------------------------------------------------------------------

@dataclass
class Times:
    """Wall and CPU seconds of repeated runs of one thing."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def add(self, fn: Callable[[], Any]) -> Any:
        gc.collect()
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        self.cpu.append(time.process_time() - c)
        self.wall.append(time.perf_counter() - w)
        return out

    @property
    def cpu_med(self) -> float:
        return median(self.cpu)

    @property
    def wall_med(self) -> float:
        return median(self.wall)

    def to_json(self) -> dict[str, list[float]]:
        return {"wall": self.wall, "cpu": self.cpu}


def ms(x: float) -> str:
    return f"{x * 1000:,.1f}"


def ratio(x: float) -> str:
    if math.isnan(x):
        return "n/a"
    return f"{x:,.0f}×" if x >= 100 else f"{x:.2f}×"


TableOut = tuple[str, list[str], list[list[Any]], list[tuple[str, bool | None]]]
"""A table: caption (its goals and verdicts), header, rows, and the goals as (what, met:
True, False, or None when nothing was measured)."""


def verdict(ok: bool | None) -> str:
    return "n/a (nothing measured)" if ok is None else "**met**" if ok else "**not met**"


@dataclass
class Config:
    quick: bool = False
    repeat: int = 3
    log: Callable[[str], None] = print


@dataclass
class Subject:
    """One query of the benchmark: its parsed query and catalog, its delta steps."""

    name: str
    query: Query
    catalog: Any
    relations: int
    pairs: int
    deltas: list[str]
    wq: WorkloadQuery | None = None

    @classmethod
    def of(cls, wq: WorkloadQuery) -> Subject:
        q, cat = wq.load()
        return cls(wq.name, q, cat, wq.relations, wq.pairs, list(wq.deltas), wq)

    @classmethod
    def tpch(cls, name: str) -> Subject:
        o = Optimizer(name, optimizer="topdown")
        return cls(name, o.query, o.catalog, o.query.n, o.space().graph.pair_count, [])


def workload(cfg: Config) -> list[Subject]:
    """The large-query workload, smallest plan space first (skips cascade upwards)."""
    if cfg.quick:
        wqs = generate(SEED, 4, max_relations=7)
    else:
        wqs = large_queries(SEED) + generate(SEED, COUNT, max_relations=MAX_RELATIONS)
    return sorted((Subject.of(w) for w in wqs), key=lambda s: (s.pairs, s.name))


def _declarative(s: Subject, model: str, mode: str = "all") -> Optimizer:
    return Optimizer(s.query, s.catalog, cost_model=model, engine="python", pruning=mode)


def _procedural(s: Subject, model: str, name: str) -> Optimizer:
    return Optimizer(s.query, s.catalog, cost_model=model, optimizer=name)


def _topdown_cost(s: Subject, model: str, adjustments: Any = None) -> float:
    """The oracle: a fresh ``topdown`` under ``adjustments`` (default: the base statistics)."""
    o = _procedural(s, model, "topdown")
    if adjustments is not None:
        o.adjustments = adjustments
    return o.optimize().cost


def _on_tuples(fn: Callable[[], Any]) -> Any:
    """``fn`` with the python engine on tuples only (``REOPT_COLUMNAR=never``): the engine
    before the set-at-a-time strata, side by side with it."""
    saved = os.environ.get("REOPT_COLUMNAR")
    os.environ["REOPT_COLUMNAR"] = "never"
    try:
        return fn()
    finally:
        if saved is None:
            del os.environ["REOPT_COLUMNAR"]
        else:
            os.environ["REOPT_COLUMNAR"] = saved


# -- 1 and 2: from scratch, per pruning mode ------------------------------------------------

def scratch(cfg: Config, subjects: Sequence[Subject], model: str,
            modes: Sequence[str] = MODES, max_pairs: int | None = None) -> list[dict[str, Any]]:
    """Declarative (each of ``modes``, within budgets), topdown and bottomup from scratch,
    interleaved round by round; ``all`` gets ``repeat`` rounds, the other modes one. Queries
    of more than ``max_pairs`` pairs are left out."""
    rows: list[dict[str, Any]] = []
    slow: dict[str, str] = {}  # mode -> why larger queries are skipped
    for s in subjects:
        if max_pairs is not None and s.pairs > max_pairs:
            continue
        t = time.perf_counter()
        row: dict[str, Any] = {"query": s.name, "relations": s.relations, "pairs": s.pairs,
                               "model": model, "modes": {}, "skipped": {}}
        trees = None
        opts: dict[str, Optimizer] = {}
        for mode in modes:
            if mode in slow:
                row["skipped"][mode] = slow[mode]
                continue
            if mode == "none" and s.pairs > NONE_PAIRS:
                row["skipped"][mode] = f"> {NONE_PAIRS:,} pairs"
                continue
            if mode == "none":
                trees = _procedural(s, model, "topdown").space().count_trees(limit=1e12)
                if trees > NONE_TREES:
                    row["skipped"][mode] = (f"{trees:,.0f} plan trees" if trees < 1e12
                                            else "over 10^12 plan trees")
                    continue
            opts[mode] = _declarative(s, model, mode)
        runs: dict[str, Callable[[], Any]] = {
            "topdown": lambda s=s: _procedural(s, model, "topdown").optimize(),
            "bottomup": lambda s=s: _procedural(s, model, "bottomup").optimize(),
            **{f"declarative:{m}": o.optimize for m, o in opts.items()},
        }
        if "all" in opts:  # built outside the timing, as the declarative runs' optimizers
            runs["tuples"] = partial(_on_tuples, _declarative(s, model).optimize)
        times = {k: Times() for k in runs}
        costs: dict[str, float] = {}
        derived: dict[str, int] = {}
        for rnd in range(cfg.repeat):
            for k, fn in runs.items():
                if rnd and (k.startswith("declarative:") and k != "declarative:all"
                            or times[k].cpu[-1] > ROUND_LIMIT
                            or k == "tuples" and rnd >= 2):
                    continue
                step = times[k].add(fn)
                costs[k] = step.cost
                if k.startswith("declarative:"):
                    derived[k.split(":", 1)[1]] = step.metrics["derived"].get("PlanCost", 0)
        for k, tm in times.items():
            if k.startswith("declarative:"):
                mode = k.split(":", 1)[1]
                row["modes"][mode] = {**tm.to_json(), "cost": costs[k],
                                      "plancost": derived[mode]}
                if tm.cpu[0] > SCRATCH_BUDGET:
                    slow[mode] = (f"{s.name} took {tm.cpu[0]:.0f} s CPU under {mode} "
                                  f"(budget {SCRATCH_BUDGET:g} s)")
            else:
                row[k] = {**tm.to_json(), "cost": costs[k]}
        row["exact"] = all(same_cost(c, costs["topdown"]) for c in costs.values())
        row["trees"] = trees
        rows.append(row)
        cfg.log(f"  engine scratch {model} {s.name} ({s.pairs:,} pairs): "
                f"{time.perf_counter() - t:.1f} s")
    return rows


def _cpu(r: dict[str, Any], mode: str = "all") -> float | None:
    m = r["modes"].get(mode)
    return median(m["cpu"]) if m else None


def _large_with_base(cfg: Config, subjects: Sequence[Subject],
                     scratch_rows: list[dict[str, Any]], rows: list[dict[str, Any]]
                     ) -> Iterator[tuple[Subject, float]]:
    """The subjects of the update goals (>= GOAL_UPDATE_RELATIONS relations, every one in a
    quick run) with their from-scratch CPU time; those whose from-scratch run was skipped go
    to ``rows`` as skipped."""
    ref = {r["query"]: r for r in scratch_rows}
    for s in subjects:
        if not cfg.quick and s.relations < GOAL_UPDATE_RELATIONS:
            continue
        base = _cpu(ref[s.name]) if s.name in ref else None
        if base is None:
            rows.append({"query": s.name, "relations": s.relations, "pairs": s.pairs,
                         "skipped": "its from-scratch run was skipped"})
            continue
        yield s, base


def scratch_table(rows: list[dict[str, Any]], tpch: bool) -> TableOut:
    """Goal 1: the declarative optimizer (``all``) from scratch against topdown/bottomup."""
    header = ["query", "model", "relations", "csg-cmp pairs", "declarative all ms (CPU)",
              "declarative all ms (wall)", "on tuples only ms (CPU)", "topdown ms (CPU)",
              "bottomup ms (CPU)", "declarative / topdown (CPU)", "within time goal", "exact"]
    out, budget_ok, big, small = [], [], [], []
    for r in rows:
        a = _cpu(r)
        td = median(r["topdown"]["cpu"])
        if a is None:
            out.append([r["query"], r["model"], r["relations"], f"{r['pairs']:,}",
                        "not run: " + r["skipped"].get("all", "?"), "–", "–", ms(td),
                        ms(median(r["bottomup"]["cpu"])), "–", "no", "–"])
            if r["pairs"] <= GOAL_PAIRS:
                budget_ok.append(False)
            continue
        x = a / td
        goal = GOAL_SECONDS[r["model"]]
        within = a <= goal
        if r["pairs"] <= GOAL_PAIRS:
            budget_ok.append(within)
        if tpch:
            small.append(x)
        elif r["relations"] >= GOAL_BIG:
            big.append(x)
        tuples = r.get("tuples")
        out.append([r["query"], r["model"], r["relations"], f"{r['pairs']:,}", ms(a),
                    ms(median(r["modes"]["all"]["wall"])),
                    ms(median(tuples["cpu"])) if tuples else "–", ms(td),
                    ms(median(r["bottomup"]["cpu"])), ratio(x),
                    ("yes" if within else "no") + f" (≤ {goal:g} s)",
                    "yes" if r["exact"] else "NO"])
    if tpch:
        med = median(small) if small else math.nan
        ok = (med <= GOAL_VS_TOPDOWN_TPCH) if small else None
        caption = (f"Goal: median declarative (`all`) / `topdown` ≤ {GOAL_VS_TOPDOWN_TPCH:g}× "
                   f"on TPC-H (`io`) — this run: median {ratio(med)}: {verdict(ok)}")
        goals = [(f"TPC-H from scratch, median ≤ {GOAL_VS_TOPDOWN_TPCH:g}× `topdown` "
                  f"({ratio(med)})", ok)]
    else:
        med = median(big) if big else math.nan
        ok1 = all(budget_ok) if budget_ok else None
        ok2 = (med <= GOAL_VS_TOPDOWN) if big else None
        n_ok = sum(budget_ok)
        caption = (f"Goal: every query of ≤ {GOAL_PAIRS:,} csg-cmp pairs in ≤ "
                   f"{GOAL_SECONDS['cout']:g} s (`cout`) / ≤ {GOAL_SECONDS['io']:g} s (`io`) — "
                   f"this run: {n_ok} of {len(budget_ok)}: {verdict(ok1)}; median declarative / "
                   f"`topdown` ≤ {GOAL_VS_TOPDOWN:g}× on queries of ≥ {GOAL_BIG} relations — "
                   f"this run: {ratio(med)} over {len(big)} query × model runs: {verdict(ok2)}")
        goals = [(f"from scratch, every query of ≤ {GOAL_PAIRS:,} pairs in ≤ 0.1 s (`cout`) / "
                  f"0.5 s (`io`) ({n_ok} of {len(budget_ok)})", ok1),
                 (f"from scratch, median ≤ {GOAL_VS_TOPDOWN:g}× `topdown` on ≥ {GOAL_BIG} "
                  f"relations ({ratio(med)})", ok2)]
    return caption, header, out, goals


def bounds_table(rows: list[dict[str, Any]]) -> TableOut:
    """Goal 4: derived PlanCost tuples per pruning mode."""
    header = ["query", "model", "relations", "csg-cmp pairs",
              *(f"{m} PlanCost" for m in MODES), *(f"{m} ms (CPU)" for m in MODES[:-1]),
              "all < aggsel"]
    out, large = [], []
    for r in rows:
        cells, ms_cells = [], []
        for m in MODES:
            got = r["modes"].get(m)
            if got is None:
                why = r["skipped"].get(m, "not measured under this model")
                cells.append(f"not run ({why})" if m == "none" else "not run")
                if m != "all":
                    ms_cells.append("not run")
            else:
                cells.append(f"{got['plancost']:,}")
                if m != "all":
                    ms_cells.append(ms(median(got["cpu"])))
        a, g = r["modes"].get("all"), r["modes"].get("aggsel")
        below = None if a is None or g is None else a["plancost"] < g["plancost"]
        if below is not None and r["relations"] >= GOAL_UPDATE_RELATIONS:
            large.append(below)
        out.append([r["query"], r["model"], r["relations"], f"{r['pairs']:,}", *cells,
                    *ms_cells, "–" if below is None else "yes" if below else "no"])
    ok = (sum(large) > len(large) / 2) if large else None
    caption = (f"Goal: `all` derives strictly fewer PlanCost tuples than `aggsel` on most large "
               f"queries (≥ {GOAL_UPDATE_RELATIONS} relations) — this run: {sum(large)} of "
               f"{len(large)}: {verdict(ok)}")
    return caption, header, out, [
        (f"`all` below `aggsel` in PlanCost tuples on most large queries ({sum(large)} of "
         f"{len(large)})", ok)]


# -- 3: one delta ---------------------------------------------------------------------------

def updates(cfg: Config, subjects: Sequence[Subject], scratch_rows: list[dict[str, Any]],
            model: str = "cout") -> list[dict[str, Any]]:
    """Each query's delta sequence: declarative update vs topdown-inc update (same deltas),
    each result checked against a fresh topdown under the same statistics."""
    rows: list[dict[str, Any]] = []
    for s, base in _large_with_base(cfg, subjects, scratch_rows, rows):
        t = time.perf_counter()
        dec, inc = _declarative(s, model), _procedural(s, model, "topdown-inc")
        dec.optimize()
        inc.optimize()
        dt, it = Times(), Times()
        exact, done = True, 0
        for step in s.deltas[:2 if cfg.quick else STEPS]:
            if sum(dt.cpu) > UPDATE_BUDGET:
                break
            a = dt.add(partial(dec.update, step))
            b = it.add(partial(inc.update, step))
            truth = _topdown_cost(s, model, dec.adjustments)
            exact &= same_cost(a.cost, truth) and same_cost(b.cost, truth)
            done += 1
        rows.append({"query": s.name, "relations": s.relations, "pairs": s.pairs,
                     "scratch_cpu": base, "declarative": dt.to_json(),
                     "topdown-inc": it.to_json(), "steps": done,
                     "of": len(s.deltas[:2 if cfg.quick else STEPS]),
                     "exact": exact})
        cfg.log(f"  engine updates {s.name}: {time.perf_counter() - t:.1f} s")
    return rows


def updates_table(rows: list[dict[str, Any]]) -> TableOut:
    header = ["query", "relations", "csg-cmp pairs", "steps", "declarative update ms (CPU)",
              "declarative from scratch ms (CPU)", "from scratch / update",
              "topdown-inc update ms (CPU)", "update / topdown-inc", "exact"]
    out, speed, vs = [], [], []
    for r in rows:
        if "skipped" in r:
            out.append([r["query"], r["relations"], f"{r['pairs']:,}",
                        f"not run ({r['skipped']})", *["–"] * 6])
            speed.append(0.0)
            continue
        u, ti = median(r["declarative"]["cpu"]), median(r["topdown-inc"]["cpu"])
        sp = r["scratch_cpu"] / u
        speed.append(sp)
        vs.append(u / ti)
        out.append([r["query"], r["relations"], f"{r['pairs']:,}", f"{r['steps']}/{r['of']}",
                    ms(u), ms(r["scratch_cpu"]), ratio(sp), ms(ti), ratio(u / ti),
                    "yes" if r["exact"] else "NO"])
    s_med = median(speed) if speed else math.nan
    v_med = median(vs) if vs else math.nan
    ok1 = s_med >= GOAL_UPDATE_SPEEDUP if speed else None
    ok2 = v_med <= 1.0 if vs else None
    caption = (f"Goal: one delta, median update ≥ {GOAL_UPDATE_SPEEDUP:g}× faster than from "
               f"scratch (same engine) on ≥ {GOAL_UPDATE_RELATIONS}-relation queries — this "
               f"run: median {ratio(s_med)}: {verdict(ok1)}; and no slower than `topdown-inc` "
               f"on the same delta (median) — this run: {ratio(v_med)}: {verdict(ok2)}")
    return caption, header, out, [
        (f"one delta, median update ≥ {GOAL_UPDATE_SPEEDUP:g}× faster than from scratch "
         f"({ratio(s_med)})", ok1),
        (f"one delta, median update no slower than `topdown-inc` ({ratio(v_med)})", ok2)]


def q5_sweep(cfg: Config) -> dict[str, Any]:
    """Figure 6's sweep of Q5 (``io``): each set × factor, interleaved round by round, a warm
    declarative optimizer's update() (then, untimed, the inverse delta) vs a fresh declarative
    and a fresh topdown optimizing under the changed statistics, CPU seconds of each whole
    call; and the same deltas as one ``reopt optimize`` call (each followed by its inverse)
    as the CLI reports them (its ``seconds``: the evaluation's wall time)."""
    from harness import inverse

    sets = ("A", "E") if cfg.quick else tuple(FIG6_SETS)
    factors = (8.0,) if cfg.quick else (0.125, 0.5, 2.0, 8.0)
    q5 = Subject.tpch("tpch:q5")
    warm = []
    for k in sets:
        for f in factors:
            d = f"card {{{FIG6_SETS[k]}}} *{f:g}"
            dec = _declarative(q5, "io")
            dec.optimize()
            changed = dec.check([d])
            fresh, td = _declarative(q5, "io"), _procedural(q5, "io", "topdown")
            fresh.adjustments = td.adjustments = changed
            inc_t, full_t, td_t = Times(), Times(), Times()
            inc_e, full_e = [], []  # the engine's own seconds (Step.metrics, wall)
            for _ in range(1 if cfg.quick else Q5_REPEAT):
                got = inc_t.add(partial(dec.update, d))
                inc_e.append(got.metrics["seconds"])
                dec.update(inverse(d))
                full_e.append(full_t.add(fresh.optimize).metrics["seconds"])
                want = td_t.add(td.optimize).cost
            warm.append({"set": k, "factor": f, "delta": d, "inc": inc_t.cpu_med,
                         "full": full_t.cpu_med, "topdown": td_t.cpu_med,
                         "inc_engine": median(inc_e), "full_engine": median(full_e),
                         "exact": same_cost(got.cost, want)})
    args = [sys.executable, "-m", "reopt.cli", "optimize", "tpch:q5", "--cost-model", "io",
            "--optimizer", "declarative", "--engine", "python", "--json"]
    for w in warm:
        args += ["--delta", w["delta"], "--delta", inverse(w["delta"])]
    done = subprocess.run(args, capture_output=True, text=True, check=True, cwd=ROOT)
    doc = json.loads(done.stdout)["queries"][0]
    forward = [s["metrics"]["seconds"] for s in doc["steps"][::2]]
    exact = all(same_cost(s["cost"], _q5_topdown(w["delta"]))
                for s, w in zip(doc["steps"][::2], warm, strict=True))
    cli = {"initial": doc["initial"]["metrics"]["seconds"], "steps": forward, "exact": exact,
           "command": "reopt optimize tpch:q5 --cost-model io --optimizer declarative "
                      "--engine python --json " + " ".join(
                          f"--delta '{w['delta']}' --delta '{inverse(w['delta'])}'"
                          for w in warm[:1]) + " …"}
    cfg.log("  engine q5 sweep done")
    return {"warm": warm, "cli": cli}


def _q5_topdown(delta: str) -> float:
    """The oracle of a CLI step: a fresh ``topdown`` on Q5 (``io``) after ``delta`` alone (the
    CLI applied the inverse of every earlier delta, so its statistics are the same)."""
    o = Optimizer("tpch:q5", cost_model="io", optimizer="topdown")
    o.adjustments = o.check([delta])
    return o.optimize().cost


def q5_table(data: dict[str, Any]) -> TableOut:
    header = ["set", "factor", "update ms (CPU)", "declarative from scratch ms (CPU)",
              "from scratch / update", "topdown ms (CPU)", "topdown / update",
              "engine's own: update ms (wall)", "engine's own: from scratch / update", "exact"]
    out, sp, at_e, eng = [], [], [], []
    for w in data["warm"]:
        x, y = w["full"] / w["inc"], w["topdown"] / w["inc"]
        e = w["full_engine"] / w["inc_engine"]
        sp.append(x)
        eng.append(e)
        if w["set"] == "E":
            at_e.append(y)
        out.append([w["set"], f"{w['factor']:g}", ms(w["inc"]), ms(w["full"]), ratio(x),
                    ms(w["topdown"]), ratio(y), ms(w["inc_engine"]), ratio(e),
                    "yes" if w["exact"] else "NO"])
    cli = data["cli"]
    cli_x = cli["initial"] / median(cli["steps"])
    out.append(["all, one CLI call (wall ms it reports)", "–", ms(median(cli["steps"])),
                ms(cli["initial"]), ratio(cli_x), "–", "–", "–", "–",
                "yes" if cli["exact"] else "NO"])
    ok1 = median(sp) >= GOAL_Q5_SPEEDUP
    ok2 = cli_x >= GOAL_Q5_SPEEDUP
    ok3 = (median(at_e) >= GOAL_Q5_E_VS_TOPDOWN) if at_e else None
    caption = (f"Goal: TPC-H Q5's Figure 6 sweep (`io`, `all`) ≥ {GOAL_Q5_SPEEDUP:g}× faster "
               f"than from scratch warm — this run: median {ratio(median(sp))} in CPU time of "
               f"each whole call: {verdict(ok1)} (by the engine's own wall seconds, which leave "
               f"out parsing and checking the delta: median {ratio(median(eng))}); "
               f"as one `reopt optimize` call reports it (initial {ms(cli['initial'])} ms / "
               f"median step {ms(median(cli['steps']))} ms) — {ratio(cli_x)}: {verdict(ok2)}; "
               f"≥ {GOAL_Q5_E_VS_TOPDOWN:g}× faster than `topdown` from scratch at E — this run: "
               f"median {ratio(median(at_e)) if at_e else 'n/a'}: {verdict(ok3)}")
    return caption, header, out, [
        (f"Q5 sweep warm, median ≥ {GOAL_Q5_SPEEDUP:g}× from scratch ({ratio(median(sp))})",
         ok1),
        (f"Q5 sweep in one CLI call, ≥ {GOAL_Q5_SPEEDUP:g}× ({ratio(cli_x)})", ok2),
        (f"Q5 at E, ≥ {GOAL_Q5_E_VS_TOPDOWN:g}× `topdown` from scratch "
         f"({ratio(median(at_e)) if at_e else 'n/a'})", ok3)]


# -- 4: the adaptive loop -------------------------------------------------------------------

def adaptive(cfg: Config, subjects: Sequence[Subject], scratch_rows: list[dict[str, Any]],
             model: str = "cout") -> list[dict[str, Any]]:
    """The re-optimization loop of adaptive execution on each ≥ 12-relation query."""
    from observe_loop import Truth, joins
    from observe_loop import _delta as observation

    rows: list[dict[str, Any]] = []
    for s, base in _large_with_base(cfg, subjects, scratch_rows, rows):
        t = time.perf_counter()
        truth = Truth(s.query, s.catalog, SEED)
        dec, inc = _declarative(s, model), _procedural(s, model, "topdown-inc")
        plan = dec.optimize().plan
        inc.optimize()
        observed: set[int] = set()
        dt, it = Times(), Times()
        exact, rounds, ended = True, 0, False
        while rounds < LOOP_ROUNDS and sum(dt.cpu) <= LOOP_BUDGET:
            sets = joins(plan)
            if observed.issuperset(sets):
                ended = True
                break
            observed.update(sets)
            batch = [observation(s.query, m, "=", truth.card(m)) for m in sets]
            a = dt.add(partial(dec.update, batch))
            b = it.add(partial(inc.update, batch))
            oracle = _topdown_cost(s, model, dec.adjustments)
            exact &= same_cost(a.cost, oracle) and same_cost(b.cost, oracle)
            plan = a.plan
            rounds += 1
        rows.append({"query": s.name, "relations": s.relations, "pairs": s.pairs,
                     "scratch_cpu": base, "rounds": rounds, "ended": ended,
                     "declarative": dt.to_json(), "topdown-inc": it.to_json(), "exact": exact})
        cfg.log(f"  engine loop {s.name}: {rounds} rounds, {time.perf_counter() - t:.1f} s")
    return rows


def loop_table(rows: list[dict[str, Any]]) -> TableOut:
    header = ["query", "relations", "csg-cmp pairs", "rounds", "declarative round ms (CPU)",
              "from scratch / round", "topdown-inc round ms (CPU)", "round / topdown-inc",
              "every round exact"]
    out, speed, vs = [], [], []
    for r in rows:
        if "skipped" in r:
            out.append([r["query"], r["relations"], f"{r['pairs']:,}",
                        f"not run ({r['skipped']})", *["–"] * 5])
            continue
        if not r["rounds"]:
            out.append([r["query"], r["relations"], f"{r['pairs']:,}", "0", *["–"] * 4,
                        "yes" if r["exact"] else "NO"])
            continue
        dc, ic = r["declarative"]["cpu"], r["topdown-inc"]["cpu"]
        speed += [r["scratch_cpu"] / x for x in dc]
        vs += [x / y for x, y in zip(dc, ic, strict=True)]
        rounds = f"{r['rounds']}" + ("" if r["ended"] else " (stopped: round or time limit)")
        out.append([r["query"], r["relations"], f"{r['pairs']:,}", rounds, ms(median(dc)),
                    ratio(r["scratch_cpu"] / median(dc)), ms(median(ic)),
                    ratio(median(dc) / median(ic)), "yes" if r["exact"] else "NO"])
    ok1 = median(speed) >= GOAL_LOOP_SPEEDUP if speed else None
    ok2 = median(vs) <= 1.0 if vs else None
    ok3 = all(r.get("exact", True) for r in rows) if rows else None
    caption = (f"Goal: per round of the adaptive loop on ≥ {GOAL_UPDATE_RELATIONS}-relation "
               f"queries, ≥ {GOAL_LOOP_SPEEDUP:g}× faster than from scratch — this run: median "
               f"over rounds {ratio(median(speed)) if speed else 'n/a'}: {verdict(ok1)}; no "
               f"slower than `topdown-inc` on the same batch (median) — "
               f"{ratio(median(vs)) if vs else 'n/a'}: {verdict(ok2)}; every round's plan as "
               f"cheap as a from-scratch optimization's: {verdict(ok3)}")
    return caption, header, out, [
        (f"adaptive loop, median round ≥ {GOAL_LOOP_SPEEDUP:g}× faster than from scratch "
         f"({ratio(median(speed)) if speed else 'n/a'})", ok1),
        (f"adaptive loop, median round no slower than `topdown-inc` "
         f"({ratio(median(vs)) if vs else 'n/a'})", ok2),
        ("adaptive loop, every round's plan as cheap as from scratch", ok3)]


# -- 5: peak memory -------------------------------------------------------------------------

def peak_rss(s: Subject, model: str = "cout") -> tuple[float, float]:
    """Peak RSS (MiB) of a fresh process while the declarative optimizer (python, ``all``)
    optimizes ``s`` read from files, and its RSS before (interpreter, imports, query)."""
    assert s.wq is not None
    return harness.peak_rss(s.wq, [
        "from reopt.api import Optimizer",
        "Optimizer(q, c, cost_model=sys.argv[3], engine='python', pruning='all').optimize()",
    ], model)


def rss_table(data: dict[str, Any]) -> TableOut:
    header = ["query", "csg-cmp pairs", "peak RSS MiB", "RSS before optimizing MiB"]
    out = [[k, f"{v['pairs']:,}", f"{v['peak']:.0f}", f"{v['before']:.0f}"]
           for k, v in data.items()]
    ok = all(v["peak"] <= GOAL_RSS_MIB for v in data.values()) if data else None
    top = max((v["peak"] for v in data.values()), default=math.nan)
    caption = (f"Goal: peak memory (RSS) of the largest queries ≤ 2 GiB (declarative, python, "
               f"`all`, `cout`, a fresh process each) — this run: at most {top:.0f} MiB: "
               f"{verdict(ok)}")
    return caption, header, out, [(f"peak RSS ≤ 2 GiB ({top:.0f} MiB)", ok)]


# -- 6: the floor ---------------------------------------------------------------------------

def floor(cfg: Config, s: Subject) -> dict[str, Any]:
    """The plain Polars C_out pass over ``s``'s csg-cmp pairs, the enumeration of those pairs
    by JoinGraph, and the pure-Python DPccp (its own enumeration included) — each checked to
    reach the same optimum."""
    import numpy as np
    from dpccp import dpccp_cout

    from reopt.costmodel.joingraph import JoinGraph
    from reopt.costmodel.models import cost_model
    from reopt.costmodel.space import PlanSpace

    space = PlanSpace(s.query, s.catalog, cost_model("cout"))
    q, est = space.query, space.estimator
    g = space.graph
    enum = Times()
    for _ in range(cfg.repeat):
        fresh = JoinGraph(g.n, list(g.neighbors))
        enum.add(fresh.halves)
    halves = g.halves()
    unions = np.fromiter((u for u, ls in halves.items() for _ in ls), dtype=np.int64)
    lefts = np.fromiter((x for ls in halves.values() for x in ls), dtype=np.int64)
    exprs = np.asarray(g.expressions(), dtype=np.int64)
    cards = est.cards(exprs)
    edges = [(q.index(p.left.alias), q.index(p.right.alias), est.join_selectivity(p))
             for p in q.joins]
    py = Times()
    for _ in range(cfg.repeat):
        want, _pairs = py.add(lambda: dpccp_cout(
            q.n, edges, [est.leaf_card(a) for a in q.aliases],
            [est.base_rows(a) for a in q.aliases]))
    out: dict[str, Any] = {"query": s.name, "relations": s.relations, "pairs": len(unions),
                           "enumerate": enum.to_json(), "dpccp": py.to_json(),
                           "optimum": want}
    try:
        import polars as pl
    except ImportError:
        out["polars"] = None
        return out
    rank = np.fromiter((int(u).bit_count() for u in unions), dtype=np.int8, count=len(unions))
    pairs = pl.DataFrame({"u": unions, "l": lefts, "r": unions ^ lefts, "rank": rank})
    by_rank = [(k, p.drop("rank")) for (k,), p in
               sorted(pairs.partition_by("rank", as_dict=True).items())]
    card = pl.DataFrame({"u": exprs, "card": cards})
    leaves = pl.DataFrame({"s": [1 << i for i in range(q.n)], "best": [0.0] * q.n},
                          schema={"s": pl.Int64, "best": pl.Float64})

    def polars_pass() -> float:
        best = leaves
        for _k, p in by_rank:
            got = (p.join(best.rename({"s": "l", "best": "bl"}), on="l")
                    .join(best.rename({"s": "r", "best": "br"}), on="r")
                    .group_by("u").agg((pl.col("bl") + pl.col("br")).min().alias("b"))
                    .join(card, on="u")
                    .select(pl.col("u").alias("s"), (pl.col("b") + pl.col("card")).alias("best")))
            best = pl.concat([best, got])
        return best.filter(pl.col("s") == q.all_mask)["best"][0]

    pol = Times()
    for _ in range(cfg.repeat):
        got = pol.add(polars_pass)
    out["polars"] = pol.to_json()
    out["polars_optimum"] = got
    out["exact"] = math.isclose(got, want, rel_tol=1e-9)
    out["polars_version"] = pl.__version__
    cfg.log("  engine floor done")
    return out


def floor_table(d: dict[str, Any]) -> TableOut:
    header = ["what", "ms (CPU)", "ms (wall)", "C_out optimum"]
    rows = [["enumerate the csg-cmp pairs (`JoinGraph.halves()`, fresh graph)",
             ms(median(d["enumerate"]["cpu"])), ms(median(d["enumerate"]["wall"])), "–"],
            ["pure-Python DPccp, C_out only (`benchmarks/dpccp.py`, its enumeration included)",
             ms(median(d["dpccp"]["cpu"])), ms(median(d["dpccp"]["wall"])),
             f"{d['optimum']:.6g}"]]
    if d["polars"] is None:
        rows.append(["plain Polars pass", "not run (polars not installed: pip install "
                     "'reopt[bench]')", "–", "–"])
    else:
        rows.append([f"plain Polars pass (polars {d['polars_version']}): per rank, look up "
                     "both sides' best costs, group-by min, add the union's rows",
                     ms(median(d["polars"]["cpu"])), ms(median(d["polars"]["wall"])),
                     f"{d['polars_optimum']:.6g}" + ("" if d["exact"] else " (DIFFERS)")])
    caption = (f"The floor on the largest query, {d['query']} ({d['relations']} relations, "
               f"{d['pairs']:,} csg-cmp pairs; the issue's 17-relation query: 16 ms in Polars, "
               "0.2 s to enumerate in pure Python)")
    return caption, header, rows, []


# -- the run --------------------------------------------------------------------------------

def run(cfg: Config) -> dict[str, Any]:
    """Every measurement; returns the raw numbers (:func:`render` makes the tables). A
    ``--quick`` run collects only what it allocates (:func:`harness.frozen_heap`)."""
    with harness.frozen_heap(cfg.quick):
        return _run(cfg)


def _run(cfg: Config) -> dict[str, Any]:
    t0, c0 = time.perf_counter(), time.process_time()
    subjects = workload(cfg)
    tpch = [Subject.tpch(n) for n in (("tpch:q5",) if cfg.quick else TPCH)]
    data: dict[str, Any] = {"quick": cfg.quick, "repeat": cfg.repeat}
    data["scratch_cout"] = scratch(cfg, subjects, "cout")
    data["scratch_io"] = scratch(cfg, subjects, "io", IO_MODES, None if cfg.quick else IO_PAIRS)
    data["scratch_tpch"] = scratch(cfg, tpch, "io")
    data["updates"] = updates(cfg, subjects, data["scratch_cout"])
    data["q5"] = q5_sweep(cfg)
    data["loop"] = adaptive(cfg, subjects, data["scratch_cout"])
    ran = {r["query"] for r in data["scratch_cout"] if "all" in r["modes"]}
    big = sorted((s for s in subjects if s.name in ran), key=lambda s: -s.pairs)
    data["rss"] = {}
    for s in big[:RSS_QUERIES]:
        peak, before = peak_rss(s)
        data["rss"][s.name] = {"pairs": s.pairs, "peak": peak, "before": before}
    data["floor"] = floor(cfg, max(subjects, key=lambda s: s.pairs))
    data["seconds"] = time.perf_counter() - t0
    data["cpu_seconds"] = time.process_time() - c0
    return data


def tables(data: dict[str, Any]) -> list[tuple[str, list[str], list, str]]:
    """(caption, header, rows, goals) of every table, in goal order; ``goals`` are (what,
    met: True / False / None for nothing measured)."""
    return [
        scratch_table(data["scratch_cout"] + data["scratch_io"], tpch=False),
        scratch_table(data["scratch_tpch"], tpch=True),
        bounds_table(data["scratch_cout"] + data["scratch_io"] + data["scratch_tpch"]),
        updates_table(data["updates"]),
        q5_table(data["q5"]),
        loop_table(data["loop"]),
        rss_table(data["rss"]),
        floor_table(data["floor"]),
    ]


WHAT = (
    "Where the declarative optimizer (in-process `python` engine) stands against issue 18's "
    "measured goals, every goal in one run (`benchmarks/engine.py`, its docstring says what each "
    "table measures). The workload is `benchmarks/workload.py`'s (seed 0: the fixed large set "
    f"of 14–18 relations and {COUNT} generated queries of 4–{MAX_RELATIONS} relations) and "
    "TPC-H. Times are CPU seconds of this process (medians; the machine is shared, wall times "
    "are given where they matter); ratios are between medians of the same run. Budgets: a run "
    f"slower than {ROUND_LIMIT:g} s CPU is measured once; under `io` the workload's queries of "
    f"more than {IO_PAIRS:,} pairs are left out and only `none` and `all` run (TPC-H: every "
    f"mode); a declarative mode whose run took more "
    f"than {SCRATCH_BUDGET:g} s is skipped on larger queries; `none` runs only where the plan "
    f"space has ≤ {NONE_TREES:,} plan trees; each query's declarative updates stop after "
    f"{UPDATE_BUDGET:g} s; the adaptive loop stops after {LOOP_ROUNDS} rounds. `exact`: every "
    "measured plan's cost equals a fresh `topdown`'s under the same statistics. One delta and "
    "the adaptive loop compare against the declarative optimizer's from-scratch time under "
    "the query's base statistics (re-running it per step would take the whole budget).")


def reading(data: dict[str, Any]) -> list[str]:
    """One line per goal: met or not, by the tables' own verdicts, and the floor."""
    out = []
    met = [(g, ok) for *_, goals in tables(data) for g, ok in goals]
    yes = [g for g, ok in met if ok]
    no = [g for g, ok in met if ok is False]
    out.append(f"Met in this run ({len(yes)} of {len(met)}): " + "; ".join(yes) + ".")
    out.append(f"Not met ({len(no)}): " + "; ".join(no) + ".")
    skipped = [g for g, ok in met if ok is None]
    if skipped:
        out.append("Nothing measured: " + "; ".join(skipped) + ".")
    f = data["floor"]
    row = next((r for r in data["scratch_cout"] if r["query"] == f["query"]), None)
    dec = _cpu(row) if row else None
    if f["polars"] is not None:
        pol = median(f["polars"]["cpu"])
        out.append(
            f"The floor on {f['query']} ({f['pairs']:,} pairs, `cout`): the plain Polars pass "
            f"takes {ms(pol)} ms CPU and enumerating the pairs with `JoinGraph` "
            f"{ms(median(f['enumerate']['cpu']))} ms"
            + (f"; the declarative optimizer (`all`) takes {ms(dec)} ms, "
               f"{ratio(dec / pol)} the Polars pass" if dec else "") + ".")
    return out


def render(data: dict[str, Any], command: str) -> str:
    cpu = data.get("cpu_seconds")
    out = [f"Command: `{command}` · rounds: {data['repeat']} · run time "
           f"{data['seconds'] / 60:.1f} min" + (f" ({cpu / 60:.1f} min CPU in this process)"
                                                if cpu is not None else ""), ""]
    if data["quick"]:
        out += ["**A `--quick` run: small queries, one round — not timings to read anything "
                "from.**", ""]
    for caption, header, rows, _ in tables(data):
        out += [caption + ":", "", *markdown_table(header, rows), ""]
    out += ["Reading:", "", *(f"* {r}" for r in reading(data)), ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, prog="engine.py")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 4 small generated queries and Q5, one round (seconds)")
    ap.add_argument("--repeat", type=positive_int, default=None, metavar="N",
                    help="rounds of each fast measurement (default 3; --quick: 1)")
    ap.add_argument("--out", type=out_file, default=None, metavar="FILE",
                    help="write the markdown here (default: standard output)")
    ap.add_argument("--json", type=out_file, default=None, metavar="FILE",
                    help="write the raw numbers here")
    a = ap.parse_args(argv)
    cfg = Config(quick=a.quick, repeat=a.repeat or (1 if a.quick else 3),
                 log=lambda s: print(s, file=sys.stderr, flush=True))
    data = run(cfg)
    args = argv if argv is not None else sys.argv[1:]
    text = render(data, " ".join(["python benchmarks/engine.py", *args]))
    if a.json:
        Path(a.json).write_text(json.dumps(data, indent=1, default=str))
    if a.out:
        Path(a.out).write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
