"""Where a small query's time goes: the declarative optimizer's warm ``optimize()`` on TPC-H
(``io``, ``all``, python engine) split into phases next to ``topdown`` from scratch, and a
warm ``update()`` of Q5's Figure 6 sweep split the same way — issue 18's two small-query goals
(``benchmarks/engine.py``: median declarative / ``topdown`` ≤ 1.3× on TPC-H; Q5's sweep ≥ 10×
faster updated than from scratch).

Run: ``.venv/bin/python benchmarks/small_phases.py [--repeat N] [--queries Q,…] [--out F]``.

Phases are timed by wrapping the engine's and the driver's methods for the duration of a pass
(``perf_counter``, mean ms per call of the whole; a phase's time includes its sub-phases', and
the wrappers add about 1 µs a call), in a pass of their own after the untimed one that gives
the medians (CPU, as ``engine.py`` measures: the declarative optimizer warm on one
``Optimizer``, ``topdown`` a fresh one per run, interleaved). The seed bound's net cost is the
median of a run whose greedy plan's cost (``Fn_seedbound``) is read from a memo of its value,
the same number, against the real one, interleaved: what an evaluation pays for the seed beyond
the local costs the costing reads again.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

from engine import FIG6_SETS, Subject, _declarative, _procedural
from harness import emit, inverse, machine, markdown_table, median, parser, script, today

import reopt.api as api
import reopt.optimizers.greedy as greedy
from reopt.costmodel.space import PlanSpace
from reopt.evaluator import maintenance
from reopt.evaluator.driver import Evaluation
from reopt.evaluator.python_engine import PythonEngine
from reopt.incremental.session import Session

QUERIES = ("tpch:q3", "tpch:q10", "tpch:q5", "tpch:q5s", "tpch:q8join", "tpch:q8joins")
MODEL = "io"

SCRATCH_PHASES: tuple[tuple[str, Any, str], ...] = (
    ("plan space and budget check", api.Optimizer, "space"),
    ("plan space and budget check", PlanSpace, "check_size"),
    ("evaluation (engine)", maintenance.MaintainedEngine, "evaluate"),
    ("evaluation: stratum", PythonEngine, "run_stratum"),
    ("evaluation: live layer (revival, later strata)", maintenance.MaintainedEngine, "_live"),
    ("previous state freed", api.Optimizer, "_leave_session"),
    ("plan read", Evaluation, "best_plan"),
    ("metrics", api, "_declarative_metrics"),
)
"""(label, owner, attribute) of each timed phase of a from-scratch optimization (``a: b``: b
is within a); a stratum is labelled by its relations."""

UPDATE_PHASES: tuple[tuple[str, Any, str], ...] = (
    ("delta parsed and checked", api.Optimizer, "check"),
    ("session update", Session, "update"),
    ("session update: maintenance (engine)", maintenance.MaintainedEngine, "update"),
    ("maintenance: stale groups found", maintenance.MaintainedEngine, "_stale"),
    ("maintenance: seed bound again", maintenance.MaintainedEngine, "_reseed"),
    ("maintenance: stale groups re-derived", maintenance.MaintainedEngine, "_rederive_stale"),
    ("maintenance: live layer updated", maintenance.MaintainedEngine, "_live_update"),
    ("session update: what the update touched", maintenance.MaintainedEngine,
     "changed_since"),
    ("session update: held state followed", Evaluation, "follow_held"),
    ("plan read", Evaluation, "best_plan"),
    ("metrics", api, "_declarative_metrics"),
)


class Timers:
    """Seconds per phase label, summed over the calls of the wrapped functions."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def wrapping(self, phases: Sequence[tuple[str, Any, str]]) -> Iterator[Timers]:
        """Wrap each phase's function for the duration (put back after, also on error)."""
        saved = [(owner, name, owner.__dict__[name]) for _, owner, name in phases]
        try:
            for label, owner, name in phases:
                setattr(owner, name, self._timed(label, owner.__dict__[name]))
            yield self
        finally:
            for owner, name, fn in saved:
                setattr(owner, name, fn)

    def _timed(self, label: str, fn: Callable) -> Callable:
        seconds = self.seconds
        by_stratum = fn is PythonEngine.run_stratum

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                key = f"{label} {', '.join(sorted(args[1].preds))}" if by_stratum else label
                seconds[key] = seconds.get(key, 0.0) + time.perf_counter() - t0
        return timed


def timed_cpu(fn: Callable[[], Any], collect: bool = True) -> tuple[float, Any]:
    """CPU ms of ``fn()`` and its result; ``collect``: after a full collection, as
    ``engine.py``'s samples are (which also leaves the CPU caches cold: the collector walks
    the whole heap)."""
    if collect:
        gc.collect()
    t0 = time.process_time()
    out = fn()
    return (time.process_time() - t0) * 1e3, out


def cpu_ms(fn: Callable[[], Any]) -> float:
    return timed_cpu(fn)[0]


def scratch(name: str, repeat: int) -> dict[str, Any]:
    """One TPC-H query: declarative warm and ``topdown`` fresh (CPU medians), the seed's net
    cost, and the declarative optimization's phases."""
    s = Subject.tpch(name)
    dec = _declarative(s, MODEL)
    dec.optimize()
    seed = greedy.greedy_cost(dec.space())
    runs: dict[str, list[float]] = {"declarative": [], "topdown": [], "memo seed": []}
    real = greedy.greedy_cost
    for _ in range(repeat):
        runs["topdown"].append(cpu_ms(lambda: _procedural(s, MODEL, "topdown").optimize()))
        runs["declarative"].append(cpu_ms(dec.optimize))
        greedy.greedy_cost = lambda space: seed
        try:
            runs["memo seed"].append(cpu_ms(dec.optimize))
        finally:
            greedy.greedy_cost = real
    timers = Timers()
    with timers.wrapping((("whole call", api.Optimizer, "optimize"), *SCRATCH_PHASES)):
        for _ in range(repeat):
            dec.optimize()
    return {"query": name, **{k: median(v) for k, v in runs.items()},
            "phases": {k: v * 1e3 / repeat for k, v in timers.seconds.items()}}


def q5_updates(repeat: int) -> dict[str, Any]:
    """Q5's Figure 6 sweep (each set × factor, then its inverse) on warm optimizers, as
    ``engine.py``'s ``q5_sweep``: whole ``update()`` calls (CPU median of the forward ones,
    and the engine's own seconds) and from scratch, each sample after a full collection as
    there and without one; then the phases of every update."""
    deltas = [f"card {{{FIG6_SETS[k]}}} *{f:g}" for k in FIG6_SETS
              for f in (0.125, 0.5, 2.0, 8.0)]
    q5 = Subject.tpch("tpch:q5")
    warm = []
    for d in deltas:
        o = _declarative(q5, MODEL)
        o.optimize()
        o.update(d)
        o.update(inverse(d))
        warm.append((o, d))
    out: dict[str, Any] = {}
    for collect in (True, False):
        whole, engine, full = [], [], []
        for _ in range(repeat):
            for o, d in warm:
                spent, step = timed_cpu(partial(o.update, d), collect)
                whole.append(spent)
                engine.append(step.metrics["seconds"] * 1e3)
                o.update(inverse(d))
            first = warm[0][0]
            full.append(timed_cpu(first.optimize, collect)[0])
            first.update(warm[0][1])  # (its session updates again, as the others')
            first.update(inverse(warm[0][1]))
        out[collect] = {"update": median(whole), "engine": median(engine),
                        "scratch": median(full)}
    timers = Timers()
    calls = 0
    with timers.wrapping((("whole call", api.Optimizer, "update"), *UPDATE_PHASES)):
        for _ in range(repeat):
            for o, d in warm:
                o.update(d)
                o.update(inverse(d))
                calls += 2
    return {"runs": out, "phases": {k: v * 1e3 / calls for k, v in timers.seconds.items()}}


def phase_rows(order: Sequence[str], data: Sequence[dict[str, float]]) -> list[list[str]]:
    """One row per phase label, in ``order`` and then strata as they came; a column each."""
    labels = list(dict.fromkeys([*order, *(k for d in data for k in d)]))
    return [[label, *(f"{d[label]:.3f}" if label in d else "–" for d in data)]
            for label in labels if not label.endswith(": stratum")]


def report(rows: list[dict[str, Any]], q5: dict[str, Any], repeat: int) -> str:
    out = [f"Date: {today()}; {machine()}; `{MODEL}`, `all`, python engine; {repeat} rounds.",
           "", "From scratch (CPU ms, medians; declarative warm, `topdown` fresh per run):", ""]
    out += markdown_table(
        ["query", "declarative", "topdown", "declarative / topdown", "seed's net cost"],
        [[r["query"], f"{r['declarative']:.2f}", f"{r['topdown']:.2f}",
          f"{r['declarative'] / r['topdown']:.2f}×",
          f"{r['declarative'] - r['memo seed']:.2f}"] for r in rows])
    order = ["whole call", *(label for label, _, _ in SCRATCH_PHASES)]
    out += ["", "Phases of a warm declarative `optimize()` (wall ms per call, timers on):", ""]
    out += markdown_table(["phase", *(r["query"] for r in rows)],
                          phase_rows(order, [r["phases"] for r in rows]))
    out += ["", "Q5's Figure 6 sweep, warm (CPU ms, medians; the update a whole call):", ""]
    out += markdown_table(
        ["each sample", "update", "update, engine's own (wall)", "from scratch",
         "from scratch / update"],
        [[label, f"{r['update']:.2f}", f"{r['engine']:.2f}", f"{r['scratch']:.2f}",
          f"{r['scratch'] / r['update']:.2f}×"]
         for label, r in (("after a full collection (engine.py)", q5["runs"][True]),
                          ("without one", q5["runs"][False]))])
    out += ["", "Phases of a warm `update()` (wall ms per call, forward and inverse, "
            "timers on, no collection):", ""]
    order = ["whole call", *(label for label, _, _ in UPDATE_PHASES)]
    out += markdown_table(["phase", "tpch:q5"], phase_rows(order, [q5["phases"]]))
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "benchmarks/small_phases.py")
    ap.add_argument("--repeat", type=int, default=21, help="rounds (default 21)")
    ap.add_argument("--queries", default=",".join(QUERIES),
                    help="comma-separated TPC-H queries (default: engine.py's six)")
    ap.add_argument("--out", default=None, help="also write the report to this file")
    args = ap.parse_args(argv)
    rows = [scratch(q, args.repeat) for q in args.queries.split(",")]
    emit(report(rows, q5_updates(max(1, args.repeat // 4)), args.repeat), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(script(main))
