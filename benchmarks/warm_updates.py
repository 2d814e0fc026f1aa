"""Updates of the procedural incremental optimizers on warm caches, against from scratch on
warm caches: issue 17's update ratio with both sides timed the same way.

``benchmarks/enumeration.py`` (``run.py --only enum``) divides a *single* update, timed right
after ``gc.collect()``, by a *single* from-scratch call timed the same way: both on cold
caches. On small queries (from-scratch 0.1–2 ms) a cold call measures cache misses as much as
work. Here both sides are warm:

* **from scratch**: ``topdown``/``bottomup`` on a new plan space, back to back in a batch of
  at least 20 ms, the least of three batches (as ``enumeration.py`` times from scratch);
* **update**: the delta step applied to an optimizer holding the previous step's state, then
  undone, seven times; the median of the seven forward updates, with the collector paused
  (as reopt's searches pause it) and no ``gc.collect()`` before each. Each forward update gets
  a **new** plan space for the step's statistics (``with_adjustments``), as a stream of deltas
  does: an update never finds estimates a previous replay left in the space it is given.

Beside the ratios, each step's **reach**: the share of the query's csg-cmp pairs (ordered,
as the searches cost them) whose expression the step moves
(:meth:`~reopt.costmodel.space.PlanSpace.changed_inputs`). A moved expression's alternatives
all change cost (each has a child containing the changed relations), so an exact update
re-costs them unless a bound prunes them; ``ratio / reach`` is then the update's cost per
reached pair against the search's per pair: about 1 where the update re-costs pair by pair
as the search does, below where it does so in bulk (:class:`_Bulk`, above
:data:`~reopt.optimizers.dptable.SCALAR_ALTERNATIVES` alternatives) or prunes.

Run: ``.venv/bin/python benchmarks/warm_updates.py [--count N] [--skip NAME,...]`` (the
workload of ``enumeration.py``: the fixed large queries and ``--count`` generated ones, seed
0; large-clique-17 is skipped by default for time). Prints, per query, its pairs, the median
reach and the median ratio over its delta steps per optimizer (and that ratio over the
reach), then the medians over every step of every query. CPU time of this process.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import harness
from enumeration import BATCH_SECONDS, COUNT, MODEL, _timed, workload

from reopt.costmodel.cardinality import Adjustments
from reopt.costmodel.deltas import apply_deltas, parse_deltas
from reopt.costmodel.models import cost_model
from reopt.costmodel.space import PlanSpace
from reopt.optimizers.bottomup import bottomup
from reopt.optimizers.incremental import BottomUpInc, TopDownInc
from reopt.optimizers.topdown import topdown

REPLAYS = 7
OPTIMIZERS = (("topdown-inc", TopDownInc, topdown), ("bottomup-inc", BottomUpInc, bottomup))


def scratch_seconds(fn: Callable[[], Any]) -> float:
    """Warm from-scratch time per call: the least of three batches of ≥ BATCH_SECONDS
    (``enumeration._timed``: CPU per call, back to back, after one ``gc.collect()``)."""
    calls = max(1, int(BATCH_SECONDS / max(_timed(fn)[0], 1e-6)))
    return min(_timed(fn, calls)[0] for _ in range(3))


def update_seconds(inc: Any, space: PlanSpace, before: Adjustments, after: Adjustments
                   ) -> float:
    """Median of REPLAYS warm forward updates ``before`` → ``after``, each on a new plan space,
    each undone (untimed); ``inc`` ends holding ``after``."""
    times = []
    gc.disable()
    try:
        for _ in range(REPLAYS):
            forward, back = space.with_adjustments(after), space.with_adjustments(before)
            t = time.process_time()
            inc.update(forward)
            times.append(time.process_time() - t)
            inc.update(back)
        inc.update(space.with_adjustments(after))
    finally:
        gc.enable()
    return statistics.median(times)


def reach(q: Any, cat: Any, steps: list[str]) -> list[float]:
    """Per delta step, the share of the csg-cmp pairs (ordered) whose expression it moves."""
    m = cost_model(MODEL)
    space = PlanSpace(q, cat, m)
    graph = space.graph
    pairs = {e: graph.split_count(e) for e in graph.expressions()}
    total = sum(pairs.values())
    adj, before, out = Adjustments(), space, []
    for step in steps:
        adj = apply_deltas(parse_deltas(step), q, cat, adj, m.operators)
        after = space.with_adjustments(adj)
        moved, _ = after.changed_inputs(before)
        out.append(sum(n for e, n in pairs.items() if moved(e)) / total)
        before = after
    return out


def ratios(wq: Any) -> dict[str, list[float]]:
    """Per optimizer, warm update / warm from scratch for each delta step of ``wq``; under
    ``"reach"``, each step's reach (:func:`reach`)."""
    q, cat = wq.load()
    m = cost_model(MODEL)
    out: dict[str, list[float]] = {"reach": reach(q, cat, wq.deltas)}
    for name, cls, plain in OPTIMIZERS:
        inc = cls(PlanSpace(q, cat, m))
        inc.optimize()
        space, adj, rs = inc.space, Adjustments(), []
        for step in wq.deltas:
            before = adj
            adj = apply_deltas(parse_deltas(step), q, cat, adj, m.operators)
            tu = update_seconds(inc, space, before, adj)
            ts = scratch_seconds(lambda adj=adj, plain=plain: plain(PlanSpace(q, cat, m, adj)).cost)
            rs.append(tu / ts)
        out[name] = rs
    return out


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__)
    p.add_argument("--count", type=int, default=COUNT, help="generated queries (default 20)")
    p.add_argument("--skip", default="large-clique-17", help="query names to leave out")
    args = p.parse_args(argv)
    skip = {s for s in args.skip.split(",") if s}
    names = [name for name, _, _ in OPTIMIZERS]
    every: dict[str, list[float]] = {name: [] for name in ["reach", *names]}
    per_pair: dict[str, list[float]] = {name: [] for name in names}
    print("| query | pairs | reach (median) | "
          + " | ".join(f"{n} update × (median) | {n} × / reach" for n in names) + " |")
    print("|---|---|---|" + "---|---|" * len(names))
    for wq in workload(args.count):
        if wq.name in skip:
            continue
        got = ratios(wq)
        for n, rs in got.items():
            every[n].extend(rs)
        cells = []
        for n in names:
            over = [r / max(f, 1e-12) for r, f in zip(got[n], got["reach"], strict=True)]
            per_pair[n].extend(over)
            cells.append(f"{statistics.median(got[n]):.3f} | {statistics.median(over):.2f}")
        print(f"| {wq.name} | {wq.pairs:,} | "
              f"{statistics.median(got['reach']):.2f} | " + " | ".join(cells) + " |", flush=True)
    print(f"reach: median over every step of every query {statistics.median(every['reach']):.3f}")
    for n in names:
        print(f"{n}: median over every step of every query {statistics.median(every[n]):.3f}×, "
              f"over the reach {statistics.median(per_pair[n]):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(harness.script(main))
