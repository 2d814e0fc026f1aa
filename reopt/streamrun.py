"""The strategies of ``reopt stream --strategy``: one continuous query, one stream folder,
five ways to run it, each yielding :class:`reopt.stream.MicroBatch` results batch by batch.

* ``adaptive`` — the executor under the rate model's plan from the catalog, re-planned after
  the first batch and then every ``--plan-every`` seconds from what the run observed
  (:class:`reopt.streamcli.Replanner`).
* ``static`` — the executor under ONE plan, the best for the first interval's true statistics
  (its first ``--plan-every`` seconds, default one batch), never changed.
* ``hindsight`` — the executor, every batch under the plan that is best for that batch's own
  true statistics: an optimizer that knows each batch's rates and selectivities before it
  runs. The best a re-planner can do without migration costs.
* ``eddy`` — :mod:`reopt.eddy`, lottery-routed probes, no plan: in process
  (:class:`~reopt.eddy.Eddy`) or, with ``executor="spark"``, each part of a micro-batch
  routed by a Spark task (:class:`~reopt.eddy.SparkEddy`).
* ``spark`` — :class:`reopt.sparkstream.SparkStreamJoin`, Spark's own stream-stream join in
  FROM order.

*True statistics* come from a dry pass over the files before the run (:func:`observations`):
the executor's reader and window buffers, batch by batch, without any join — each batch's
``rate`` deltas (its arrivals per second) and ``sel`` deltas (pairs matching among the
windows' contents at its end), exactly what the executor would observe after running it.
An interval's deltas: the rates over its batches, the selectivities at its end (as
``Replanner.deltas``). Re-planning time is the optimizer's, measured per plan change
request and reported in :attr:`Strategy.log`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from reopt.api import Optimizer
from reopt.costmodel.errors import DeltaError, ReoptError
from reopt.plan import PlanNode
from reopt.stream import ContinuousQuery, MicroBatch, plan_line
from reopt.streamlocal import make_query

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

STRATEGIES = ("adaptive", "static", "hindsight", "eddy", "spark")


class _Observer(ContinuousQuery):
    """The executor's reader, buffers and observations, no joins: a dry pass."""

    def observe_all(self) -> list[MicroBatch]:
        out = []
        while self.batch * self.batch_seconds < self.seconds:
            start = self.batch * self.batch_seconds
            end = start + self.batch_seconds
            skipped: dict[str, int] = {}
            arrived = {t: self._read(t, start, end, skipped) for t in self.tables}
            self._slide(arrived, end)
            b = MicroBatch(self.batch, float(start), float(end), "", {t: len(f) for t, f
                                                                       in arrived.items()},
                           {t: len(f) for t, f in self.buffers.items()}, [], [], 0.0,
                           skipped=skipped)
            self.observe(b)
            out.append(b)
            self.batch += 1
        return out


def observations(opt: Optimizer, data_dir: str | Path, batch_seconds: int) -> list[MicroBatch]:
    """Per batch, what the executor would observe after it (arrivals, deltas), from a dry
    pass over the files (see the module doc)."""
    return _Observer(opt.query, opt.catalog, data_dir, None, batch_seconds,
                     opt.adjustments).observe_all()


def interval_deltas(batches: list[MicroBatch]) -> list[str]:
    """The rates over ``batches`` and the selectivities at the last one's end."""
    seconds = sum(b.end - b.start for b in batches)
    arrived: dict[str, int] = {}
    for b in batches:
        for t, n in b.arrivals.items():
            arrived[t] = arrived.get(t, 0) + n
    rates = [f"rate {t} ={n / seconds:.6g}" for t, n in arrived.items() if n > 0]
    return rates + [d for d in batches[-1].deltas if d.startswith("sel ")]


@dataclass
class Strategy:
    """A strategy's run: its batches as they come (:meth:`batches`) and, after, its log."""

    name: str
    log: list[str] = field(default_factory=list)
    """One line per re-planning (deltas, plan, whether it changed, optimizer seconds)."""
    replan_seconds: float = 0.0
    """The optimizer's time over the run (planning before the first batch included)."""
    switches: int = 0
    """Batches whose plan differs from the previous batch's."""
    triggered: list[int] = field(default_factory=list)
    """Adaptive: the batches after which the change trigger re-planned off the schedule."""


def _replan(opt: Optimizer, deltas: list[str], strategy: Strategy,
            label: str) -> PlanNode | None:
    """The optimizer's best plan after ``deltas``; None (logged) if it refused them, the
    optimizer then being as it was."""
    t0 = time.perf_counter()
    try:
        return opt.update(deltas).plan
    except DeltaError as e:
        strategy.log.append(f"{label}: re-planning refused: {e}")
        return None
    finally:
        strategy.replan_seconds += time.perf_counter() - t0


def check_strategy(name: str, opt: Optimizer, data_dir: str | Path,
                   batch_seconds: int, executor: str = "local", seed: int = 0) -> None:
    """Refuse what ``name`` cannot run on ``executor`` (one-line errors), without starting
    Spark: the eddy's and the local executor's SQL subset and the eddy's ``seed``, the FROM
    order Spark's join needs."""
    if name in ("adaptive", "static", "hindsight"):
        make_query(executor, opt.query, opt.catalog, data_dir, None, batch_seconds,
                   opt.adjustments)
    elif name == "eddy":
        from reopt.eddy import make_eddy

        make_eddy(executor, opt.query, opt.catalog, data_dir, batch_seconds, opt.adjustments,
                  seed=seed)
    elif name == "spark":
        from reopt.sparkstream import SparkStreamJoin

        SparkStreamJoin(opt.query, opt.catalog, data_dir, None, batch_seconds, opt.adjustments)


def run_strategy(name: str, opt: Optimizer, data_dir: str | Path, batch_seconds: int,
                 plan_every: int | None, spark: SparkSession | None, seed: int = 0,
                 strategy: Strategy | None = None, executor: str = "local",
                 migration: str = "moving", on_change: float | None = None
                 ) -> Iterator[MicroBatch]:
    """``name``'s batches over ``data_dir`` (see the module doc). ``plan_every`` is in
    batches. ``strategy`` (optional) collects the log, switches and optimizer time.
    ``executor`` runs adaptive, static and hindsight in process (``local``) or on Spark
    (:mod:`reopt.streamlocal`), and the eddy's routing likewise
    (:mod:`reopt.eddy`); ``migration`` is adaptive's (``moving``, ``parallel`` or
    ``auto``, :mod:`reopt.migration`) and ``on_change`` its change trigger's factor
    (:mod:`reopt.streamchange`; None: the schedule only); static never switches and
    hindsight moves state."""
    from reopt.streamcli import Replanner

    if name not in STRATEGIES:
        raise ReoptError(f"unknown strategy {name!r} (choose from {', '.join(STRATEGIES)})")
    record = strategy or Strategy(name)
    if name == "eddy":
        from reopt.eddy import make_eddy

        yield from make_eddy(executor, opt.query, opt.catalog, data_dir, batch_seconds,
                             opt.adjustments, seed=seed, spark=spark).run()
        return
    if name == "spark":
        from reopt.sparkstream import SparkStreamJoin

        yield from SparkStreamJoin(opt.query, opt.catalog, data_dir, spark, batch_seconds,
                                   opt.adjustments).run()
        return
    cq = make_query(executor, opt.query, opt.catalog, data_dir, spark, batch_seconds,
                    opt.adjustments, migration="moving" if migration == "auto" else migration)
    t0 = time.perf_counter()
    if name == "adaptive":
        replanner = Replanner(opt, plan_every, migration, batch_seconds,
                              on_change=on_change)
        record.triggered = replanner.triggered  # (the list the re-planner appends to)
        record.replan_seconds += time.perf_counter() - t0
        previous = None
        last: MicroBatch | None = None
        while cq.batch * cq.batch_seconds < cq.seconds:
            seen = len(replanner.log)
            t1 = time.perf_counter()
            chosen = replanner(last)
            record.replan_seconds += time.perf_counter() - t1
            record.log += replanner.log[seen:]
            plan, how = chosen if isinstance(chosen, tuple) else (chosen, None)
            last = cq.step(plan, how)
            record.switches += previous is not None and last.plan != previous
            previous = last.plan
            yield last
        return
    truth = observations(opt, data_dir, batch_seconds)
    plan = opt.optimize().plan
    record.replan_seconds += time.perf_counter() - t0
    if name == "static":
        first = truth[:plan_every or 1]
        plan = _replan(opt, interval_deltas(first), record,
                       f"static from batches 0-{len(first) - 1}") or plan
        record.log.append(f"static: plan {plan_line(plan)}")
    previous = None
    for b in truth:
        if name == "hindsight":
            plan = _replan(opt, interval_deltas([b]), record, f"batch {b.index}") or plan
            record.log.append(f"batch {b.index}: plan {plan_line(plan)}")
        done = cq.step(plan)
        record.switches += previous is not None and done.plan != previous
        previous = done.plan
        yield done
