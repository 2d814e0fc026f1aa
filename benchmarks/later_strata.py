"""The later strata of an update (BestPlan, LocalCost and the bounds of ``rules/bounds.dl``):
followed incrementally (``evaluator/later.py``) against re-derived from empty, side by side.

Run: ``.venv/bin/python benchmarks/later_strata.py [--workload DIR] [--large DIR]
[--repeat N] [--pruning MODE] [--out FILE]``, after ``benchmarks/workload.py -o DIR`` and
``benchmarks/workload.py --large -o DIR`` (defaults ``/tmp/wl``, ``/tmp/wll``). Queries:
clique-14-s0-4 and star-12-s0-1 of the workload, large-tree-18 of the large one (each with
its own deltas, one ``update()`` per line) under ``cout``, and TPC-H q5 under ``dist`` and
``cout`` with the single deltas of ``benchmarks/small_updates.py``. Python engine, pruning
``all`` (or ``--pruning``).

Everything runs in one process, A/B/A/B: per replay one fresh optimizer per subject,
optimized (untimed), then the same deltas, alternating subjects update by update. Subjects:
**from empty** (every later stratum evaluated again from empty, as before) and
**incremental**. Times are CPU ms of this process (``time.process_time``, garbage collector
off around each call), medians over all updates of all replays: the whole ``update()``
call, and within it the later strata. After every update both subjects' relations are
compared (they must be equal). For context: ``optimize()`` from scratch (median over
replays) and ``topdown-inc`` on the same deltas.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import emit, machine, out_file, parser, script, today

from reopt.api import Optimizer
from reopt.cliargs import positive_int
from reopt.evaluator.driver import PRUNING_MODES

SUBJECTS = ("from empty", "incremental")


def cases(workload: Path, large: Path) -> list[tuple[str, Callable[..., Optimizer], list[str]]]:
    """(label, optimizer factory taking keyword options, deltas) per query measured."""
    out: list[tuple[str, Callable[..., Optimizer], list[str]]] = []
    for d, name in ((workload, "clique-14-s0-4"), (workload, "star-12-s0-1"),
                    (large, "large-tree-18")):
        sql = (d / f"{name}.sql").read_text()
        cat = str(d / f"{name}.catalog.json")
        deltas = [s.strip() for s in (d / f"{name}.deltas.txt").read_text().splitlines()
                  if s.strip()]
        out.append((f"{name} (cout)",
                    lambda sql=sql, cat=cat, **kw: Optimizer(sql, catalog=cat,
                                                             cost_model="cout", **kw),
                    deltas))
    single = ["card orders *2", "card orders *0.5"]
    for model in ("dist", "cout"):
        q = Optimizer("tpch:q5", cost_model=model, optimizer="topdown").query
        p = q.joins[0]
        sel = f"sel {p.left}={p.right}"
        out.append((f"TPC-H q5 ({model})",
                    lambda model=model, **kw: Optimizer("tpch:q5", cost_model=model, **kw),
                    [*single, f"{sel} *0.5", f"{sel} *2"]))
    return out


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """CPU seconds of ``fn()`` with the garbage collector off, and its result."""
    gc.disable()
    try:
        t = time.process_time()
        out = fn()
        return time.process_time() - t, out
    finally:
        gc.enable()


def replay(make: Callable[..., Optimizer], deltas: list[str], repeat: int,
           pruning: str) -> dict[str, Any]:
    """Median CPU ms: per subject the update and its later strata; optimize() from scratch;
    topdown-inc's update."""
    update: dict[str, list[float]] = {s: [] for s in SUBJECTS}
    later: dict[str, list[float]] = {s: [] for s in SUBJECTS}
    scratch: list[float] = []
    inc: list[float] = []
    for _ in range(repeat):
        opts = {}
        for s in SUBJECTS:
            o = make(engine="python", pruning=pruning)
            seconds, _ = timed(o.optimize)
            if s == "incremental":
                scratch.append(seconds)
            engine = o._session.engine
            engine.later.everything_from_empty = s == "from empty"
            inner = engine.later.update

            def spy(*a: Any, _inner=inner, _s=s) -> Any:
                t = time.process_time()
                out = _inner(*a)
                later[_s].append(time.process_time() - t)
                return out

            engine.later.update = spy
            opts[s] = o
        td = make(optimizer="topdown-inc")
        td.optimize()
        for delta in deltas:
            for s, o in opts.items():
                seconds, _ = timed(lambda o=o, d=delta: o.update(d))
                update[s].append(seconds)
            a, b = (opts[s]._session.engine.full for s in SUBJECTS)
            bad = [p for p in a if a[p].rows != b[p].rows]
            if bad:
                raise AssertionError(f"after {delta!r}: {', '.join(bad)} differ")
            seconds, _ = timed(lambda t=td, d=delta: t.update(d))
            inc.append(seconds)
    med = {f"{k} {s}": 1000 * statistics.median(v)
           for k, d in (("update", update), ("later", later)) for s, v in d.items()}
    med["scratch"] = 1000 * statistics.median(scratch)
    med["topdown-inc"] = 1000 * statistics.median(inc)
    return med


HEADER = ["| query | updates | update ms: from empty | update ms: incremental | later strata ms: "
          "from empty | later strata ms: incremental | later strata saved | optimize() ms "
          "| scratch / update | topdown-inc ms |",
          "|---|---|---|---|---|---|---|---|---|---|"]


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "benchmarks/later_strata.py")
    ap.add_argument("--workload", type=Path, default=Path("/tmp/wl"), metavar="DIR",
                    help="benchmarks/workload.py's output (default %(default)s)")
    ap.add_argument("--large", type=Path, default=Path("/tmp/wll"), metavar="DIR",
                    help="benchmarks/workload.py --large's output (default %(default)s)")
    ap.add_argument("--repeat", type=positive_int, default=3, metavar="N",
                    help="replays (default %(default)s)")
    ap.add_argument("--pruning", choices=list(PRUNING_MODES), default="all",
                    help="pruning mode (default %(default)s)")
    ap.add_argument("--out", type=out_file, default=None, metavar="FILE",
                    help="also write the markdown report to FILE")
    args = ap.parse_args(argv)
    lines = [f"Command: `python benchmarks/later_strata.py {' '.join(argv or sys.argv[1:])}`",
             f"Date: {today()}; {machine()}; CPU ms, medians over all updates of "
             f"{args.repeat} replays; pruning `{args.pruning}`.", "", *HEADER]
    for label, make, deltas in cases(args.workload, args.large):
        m = replay(make, deltas, args.repeat, args.pruning)
        fe, inc = m["update from empty"], m["update incremental"]
        lfe, linc = m["later from empty"], m["later incremental"]
        lines.append(f"| {label} | {len(deltas)} | {fe:.2f} | {inc:.2f} | {lfe:.2f} "
                     f"| {linc:.2f} | {lfe - linc:.2f} ({(lfe - linc) / fe:.0%} of the "
                     f"update) | {m['scratch']:.1f} | {m['scratch'] / inc:.1f}× "
                     f"| {m['topdown-inc']:.2f} |")
        print(lines[-1], file=sys.stderr)
    emit("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(script(main))
