"""Shared measuring and command-line helpers of the benchmark scripts (``initial.py``,
``pruning.py``, ``incremental.py``, ``profile_python.py``, ``sparkrun.py`` and the ``make
bench`` driver ``run.py``).

Conventions: every optimizer of one comparison runs in the same process, interleaved round by
round (one run of each, ``repeat`` rounds), so drift of a shared, noisy machine hits them all
alike; times are wall seconds of the optimization work (``Step.metrics["seconds"]``), reported
as median (min–max); ratios are taken between medians measured in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from reopt.api import ENGINES, Optimizer
from reopt.cliargs import UsageParser, name_list
from reopt.costmodel.errors import ReoptError

MODEL = "io"
"""The paper's physical cost model; every figure is measured under it."""

FACTORS = (0.125, 0.25, 0.5, 2.0, 4.0, 8.0)
"""The paper's change factors 1/8 … 8."""

QUICK_FACTORS = (0.125, 8.0)

FIG6_SETS = {
    "A": "nation,region",
    "B": "customer,nation,region",
    "C": "orders,customer,nation,region",
    "D": "lineitem,orders,customer,nation,region",
    "E": "supplier,lineitem,orders,customer,nation,region",
}
"""Figure 6's join expressions of Q5: A = region⋈nation, B = customer⋈A, … E = supplier⋈D;
a change of a join's selectivity is a correction on that relation set."""

MODES = ("evita", "aggsel", "aggsel+refcount", "aggsel+bound", "all")
"""The pruning modes that prune (``none`` is the exponential baseline)."""


@contextlib.contextmanager
def frozen_heap(active: bool = True) -> Iterator[None]:
    """Freeze the heap that exists now (``gc.freeze``) for the duration, so that the
    ``gc.collect()`` a benchmark runs before each sample scans only what the run allocates.
    For ``--quick`` runs, whose times nobody reads: in a process that already holds a large
    heap (the test suite, ``make bench``'s earlier sections) a full collection costs about
    0.1 s, and a quick run takes a hundred or more of them. Full runs keep whole
    collections, so their samples start as they always did."""
    if not active:
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


OTHER_CHECKOUT = '''
if root:  # the other checkout in place of this one in the editable install's mapping
    import importlib, site
    for d in site.getsitepackages():
        for f in __import__("pathlib").Path(d).glob("__editable___reopt_*_finder.py"):
            finder = importlib.import_module(f.stem)
            for k, v in list(finder.MAPPING.items()):
                finder.MAPPING[k] = root + v[v.rindex("/"):]
'''
"""Runner-script lines (A/B benchmarks that run another checkout's reopt in a fresh process:
``update_ab.py``, ``fleet_loop.py``): with ``root`` set, imports of ``reopt`` resolve to that
checkout's files instead of this one's."""


def run_in_checkout(runner: str, args: list[Any], root: str | None, what: str) -> Any:
    """Run ``runner`` (a script that starts with :data:`OTHER_CHECKOUT`'s lines, reads
    ``[root, *args]`` as JSON from ``sys.argv[1]`` and the benchmarks folder from
    ``sys.argv[2]``, and prints one JSON document) in a fresh interpreter, against the
    checkout at ``root`` (None: this one); its JSON. A failure exits with the runner's last
    line of error, prefixed by ``what``."""
    out = subprocess.run([sys.executable, "-c", runner, json.dumps([root, *args]),
                          str(Path(__file__).resolve().parent)], capture_output=True,
                         text=True, cwd="/", check=False)
    if out.returncode:
        last = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"{what} ({root or 'this checkout'}): {last}")
    return json.loads(out.stdout)


# -- command lines --------------------------------------------------------------------------
# The benchmark scripts parse with reopt's UsageParser and run under script(), so bad input is
# one line ``reopt: …`` and exit 2, as on every other command line of reopt: a traceback, or
# an AssertionError minutes into a run, says nothing about which option was wrong.

def script(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run a benchmark script's ``main``; a :class:`ReoptError` (bad option, unknown query)
    becomes ``reopt: <message>`` on stderr and exit code 2."""
    try:
        return main(argv)
    except ReoptError as e:
        print(f"reopt: {e}", file=sys.stderr)
        return 2


def parser(doc: str | None, prog: str | None = None) -> UsageParser:
    """The argument parser of a benchmark script: its docstring as description, kept as
    written (it lists what the script measures), usage errors as one line."""
    return UsageParser(prog=prog, description=doc,
                       formatter_class=argparse.RawDescriptionHelpFormatter)


def positive_seconds(text: str) -> float:
    """``type=`` of a time limit: a finite number of seconds > 0."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got '{text}'") from None
    if not math.isfinite(x) or x <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got '{text}'")
    return x


engine_list = name_list("engine", ENGINES)
"""``type=`` of ``--engines``."""


def out_file(text: str) -> str:
    """``type=`` of ``--out FILE``: checked before the run (its directory exists, it is not a
    directory), since the report is written only once every measurement is done."""
    p = Path(text)
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a file")
    if not p.resolve().parent.is_dir():
        raise argparse.ArgumentTypeError(f"directory {p.parent} of {text} does not exist")
    return text


# -- formatting -----------------------------------------------------------------------------

def emit(text: str, out: str | None) -> None:
    """A per-topic script's report: to standard output, and to ``out`` when given."""
    print(text)
    if out:
        Path(out).write_text(text)


def machine() -> str:
    """One line naming the machine: architecture, cores, OS, Python."""
    return (f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}")


def today() -> str:
    return dt.date.today().isoformat()


def median(ts: Iterable[float]) -> float:
    return statistics.median(list(ts))


def geometric_mean(xs: Iterable[float]) -> float:
    """The geometric mean of the positive, finite ``xs`` (a ratio that could not be measured
    is left out); NaN when there is none."""
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return statistics.geometric_mean(xs) if xs else float("nan")


def median_ms(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """``fn()`` run ``repeat`` times: the median wall time in ms, and the last result."""
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), out


def ms(ts: Sequence[float]) -> str:
    """``median (min–max)`` of wall seconds, in milliseconds."""
    return f"{median(ts) * 1000:.1f} ({min(ts) * 1000:.1f}–{max(ts) * 1000:.1f})"


def factor_label(f: float) -> str:
    """``1/8`` … ``8``."""
    return f"1/{round(1 / f):d}" if f < 1 else f"{f:g}"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(str(c) for c in r) + " |" for r in rows)]


def same_cost(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


# -- measuring ------------------------------------------------------------------------------

def timed(opt: Optimizer, repeat: int) -> tuple[float, list[float], dict]:
    """``repeat`` from-scratch optimize() calls: (cost, wall seconds each, last metrics)."""
    times, step = [], None
    for _ in range(repeat):
        step = opt.optimize()
        times.append(step.metrics["seconds"])
    assert step is not None
    return step.cost, times, step.metrics


def round_robin(runs: dict[str, Callable[[], Any]], repeat: int) -> dict[str, list]:
    """Call every function once per round, ``repeat`` rounds; the results per name."""
    out: dict[str, list] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, fn in runs.items():
            out[name].append(fn())
    return out


def inverse(delta: str) -> str:
    """``card orders *8`` → ``card orders *0.125`` (returns to the base statistics)."""
    text, f = delta.rsplit("*", 1)
    return f"{text}*{1 / float(f)}"


def _scratch(query: str, adjustments: Any, last: dict, key: str,
             **kw: Any) -> Callable[[], float]:
    """A run: a fresh optimizer under ``adjustments`` optimizes; its step goes to
    ``last[key]``; returns its seconds."""
    def run() -> float:
        opt = Optimizer(query, cost_model=MODEL, **kw)
        opt.adjustments = adjustments
        step = last[key] = opt.optimize()
        return step.metrics["seconds"]
    return run


def _update_and_back(query: str, delta: str, last: dict,
                     **kw: Any) -> tuple[Callable[[], float], Any]:
    """A run: an optimizer that optimized under the base statistics applies ``delta`` (timed,
    its step goes to ``last["step"]``) and the inverse delta (untimed). Also returns the
    statistics after ``delta``, for the from-scratch baselines."""
    opt = Optimizer(query, cost_model=MODEL, **kw)
    opt.optimize()

    def run() -> float:
        step = last["step"] = opt.update(delta)
        opt.update(inverse(delta))
        return step.metrics["seconds"]
    return run, opt.check([delta])


def measure(query: str, delta: str, mode: str = "all", repeat: int = 5,
            scratch: bool = True) -> dict:
    """The declarative optimizer's incremental update vs from-scratch optimization, one delta.

    An optimizer that has optimized under the base statistics applies ``delta`` with
    ``update()`` (timed: the maintenance work) and then the inverse delta (untimed), each
    round; in the same rounds a fresh declarative optimizer (same engine and mode; skipped
    when ``scratch`` is false) and ``topdown`` optimize under the changed statistics.
    Returns seconds per round (``inc_s``, ``full_s``, ``topdown_s``), their medians (``inc``,
    ``full``, ``topdown``), the update ratios (``or``, ``and``: OR/AND nodes the update
    touched over the search space), the pruning ratios of the state after the update
    (``pruned_or``, ``pruned_and``) and whether the result equals ``topdown``'s cost.
    """
    last: dict[str, Any] = {}
    update, changed = _update_and_back(query, delta, last, engine="python", pruning=mode)
    runs = {"inc": update}
    if scratch:
        runs["full"] = _scratch(query, changed, last, "full", engine="python", pruning=mode)
    runs["topdown"] = _scratch(query, changed, last, "topdown", optimizer="topdown")
    ts = round_robin(runs, repeat)
    m = last["step"].metrics
    out = {f"{k}_s": v for k, v in ts.items()}
    out.update({k: median(v) for k, v in ts.items()})
    out.update({
        "or": m["update_ratio"]["or"], "and": m["update_ratio"]["and"],
        "pruned_or": m["pruning_ratio"]["or"], "pruned_and": m["pruning_ratio"]["and"],
        "incremental": m.get("incremental", False),
        "same_cost": same_cost(last["step"].cost, last["topdown"].cost),
    })
    return out


def measure_procedural(query: str, delta: str, optimizer: str, repeat: int = 5) -> dict:
    """``topdown-inc``/``bottomup-inc`` update() vs a fresh ``topdown``/``bottomup``
    optimize() under the same changed statistics, interleaved round by round (the paper's
    Figure 9). The update ratio is what the update touched (``explored``) over the search
    space."""
    last: dict[str, Any] = {}
    update, changed = _update_and_back(query, delta, last, optimizer=optimizer)
    fresh = _scratch(query, changed, last, "scratch", optimizer=optimizer.removesuffix("-inc"))
    ts = round_robin({"inc": update, "full": fresh}, repeat)
    m = last["step"].metrics
    full, ex = m["search_space"], m["explored"]
    return {
        "inc_s": ts["inc"], "full_s": ts["full"],
        "inc": median(ts["inc"]), "full": median(ts["full"]),
        "or": ex.get("or_nodes", 0) / full["or_nodes"],
        "and": ex.get("and_nodes", 0) / full["and_nodes"],
        "same_cost": same_cost(last["step"].cost, last["scratch"].cost),
    }


def plan_trees(query: str, model: str = MODEL) -> float:
    """Plan trees of ``query`` (what pruning ``none`` would cost one by one)."""
    return Optimizer(query, cost_model=model, optimizer="topdown").space().count_trees(
        limit=1e12)


def peak_rss(wq: Any, work: Sequence[str], *args: str) -> tuple[float, float]:
    """Peak resident memory (MiB) of a fresh process while it runs ``work`` (lines of Python
    that see the workload query ``wq`` as ``q`` and its catalog as ``c``, read from files, and
    ``sys.argv[3:]`` = ``args``), and its resident memory before (the interpreter, its imports,
    the query). Linux: the peak is reset before ``work`` runs."""
    import json
    import subprocess
    import tempfile

    from workload import write

    code = "\n".join([
        "import json, sys",
        "from reopt.api import load_catalog, load_query",
        "def status(key):",
        "    for line in open('/proc/self/status'):",
        "        if line.startswith(key + ':'):",
        "            return int(line.split()[1])",
        "c = load_catalog(sys.argv[2])",
        "q = load_query(sys.argv[1], c)",
        "before = status('VmRSS')",
        "open('/proc/self/clear_refs', 'w').write('5')  # peak RSS := current RSS (Linux)",
        *work,
        "print(json.dumps([status('VmHWM'), before]))",
    ])
    with tempfile.TemporaryDirectory() as tmp:
        write([wq], Path(tmp))
        done = subprocess.run(
            [sys.executable, "-c", code, str(Path(tmp) / f"{wq.name}.sql"),
             str(Path(tmp) / f"{wq.name}.catalog.json"), *args],
            capture_output=True, text=True, check=True)
    peak, before = json.loads(done.stdout)
    return peak / 1024, before / 1024
