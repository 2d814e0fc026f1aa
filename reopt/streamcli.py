"""``reopt stream QUERY --data DIR``: run a continuous query over stream files.

The rate model (``--cost-model rate``) plans the query from the catalog; the executor
(:class:`reopt.stream.ContinuousQuery`; in process with ``--executor local``, the default,
:mod:`reopt.streamlocal`, or on Spark with ``--executor spark``) runs it micro-batch by micro-
batch and prints, per batch, the plan, the arrivals, the window state, the results emitted and
the observed ``rate``/``sel`` deltas. With ``--plan-every K``, the optimizer is updated after
the first micro-batch with what it observed (so the catalog's plan, chosen from no
observations, runs one batch, not K seconds), then every K seconds of stream time with what
the last K seconds observed (each stream's rate over them, each join predicate's selectivity
at their end), and the next batches run its new best plan.
Between those points, ``--replan-on-change F`` (default 2) re-plans after any batch whose
observed rate or selectivity moved by at least F times and by more than its noise since the
optimizer's last update (:mod:`reopt.streamchange`).
With ``--state windows`` the executor keeps only per-stream window state, so a plan change
moves no state; with ``--state intermediate`` (the default) every join keeps its results and a
plan change migrates them (``--migration moving|parallel``), or, with ``--migration auto``, the
plan changes only when the gain over the next interval exceeds the cheaper migration's cost
(:mod:`reopt.migration`). The rate model prices work with the executor's profile of
per-tuple costs (``--rate-profile``, :data:`reopt.costmodel.rate.PROFILES`). ``--max-state
N`` keeps the plan run within a state budget (:mod:`reopt.statebudget`).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

from reopt import streamcheckpoint as checkpoints
from reopt.api import Optimizer
from reopt.cliargs import UsageParser, positive_int
from reopt.costmodel.errors import DeltaError, ReoptError
from reopt.costmodel.numeric import dumps_strict
from reopt.costmodel.rate import PROFILES
from reopt.migration import MIGRATIONS, decide
from reopt.plan import PlanNode
from reopt.statebudget import within_budget
from reopt.stream import STATES, MicroBatch, plan_line
from reopt.streamchange import (
    FACTOR,
    SIGMAS,
    ChangeTrigger,
    Evidence,
    delta_key,
    interval_evidence,
)
from reopt.streamlocal import EXECUTORS, make_query
from reopt.streamrun import STRATEGIES, Strategy, check_strategy, run_strategy

OPTIMIZERS = ("topdown", "bottomup", "exhaustive", "topdown-inc", "bottomup-inc")


def _parser() -> argparse.ArgumentParser:
    p = UsageParser(prog="reopt stream", description="Run a continuous windowed join query "
                    "over stream files on Spark, micro-batch by micro-batch.")
    p.add_argument("query", metavar="QUERY", help="a .sql file (e.g. DIR/query.sql) or text")
    p.add_argument("--data", required=True, metavar="DIR",
                   help="stream folder as reopt data stream writes it (STREAM/SSSSSS.parquet)")
    p.add_argument("--catalog", metavar="FILE", help="stream catalog (default DIR/catalog.json)")
    p.add_argument("--batch-seconds", type=positive_int, default=1, metavar="B",
                   help="stream seconds per micro-batch (default 1)")
    p.add_argument("--plan-every", type=positive_int, metavar="K",
                   help="re-plan after the first micro-batch, then every K stream seconds, "
                   "from the observed deltas (a multiple of --batch-seconds; default: never, "
                   "the first plan runs throughout)")
    p.add_argument("--replan-on-change", type=change_factor, default=FACTOR, metavar="F|off",
                   help="with --plan-every, also re-plan after any batch in which an observed "
                   f"rate or selectivity moved by at least F times and {SIGMAS:g} standard errors "
                   f"since the optimizer's last update (default {FACTOR:g}; off: the "
                   "schedule only)")
    p.add_argument("--state", choices=STATES, default="intermediate", metavar="KIND",
                   help="intermediate: every join keeps its results (default); windows: "
                   "per-stream window buffers only, each batch recomputes the joins' old sides")
    p.add_argument("--migration", choices=MIGRATIONS, metavar="HOW",
                   help="how intermediate state follows a plan change: moving (build the new "
                   "tree's states from the old's), parallel (run both plans until the old "
                   "one's tuples expire) or auto (switch only when the gain over the next "
                   "interval exceeds the cheaper migration's cost); default moving")
    p.add_argument("--max-state", type=positive_int, metavar="N",
                   help="run the cheapest plan whose estimated state (window tuples and kept "
                   "join results) is at most N tuples; when none is, the least-state plan, "
                   "with a warning")
    p.add_argument("--objective", default="rate", help="rate or time-to:N (default rate)")
    p.add_argument("--rate-profile", choices=sorted(PROFILES), metavar="spark|local",
                   help="the rate model's per-tuple costs (default: the executor's, "
                   "--executor local plans with local, spark with spark)")
    p.add_argument("--optimizer", default="topdown-inc", choices=OPTIMIZERS,
                   help="the optimizer that plans and re-plans (default topdown-inc)")
    p.add_argument("--strategy", default="adaptive", choices=STRATEGIES,
                   help="adaptive (the optimizer's plan, re-planned every --plan-every), "
                   "static (the best plan for the first interval's true statistics), hindsight "
                   "(each batch under the best plan for its own), eddy (lottery-routed probes, "
                   "no plan), spark (Spark's own stream-stream join, FROM order); default "
                   "adaptive")
    p.add_argument("--executor", choices=EXECUTORS, default="local",
                   help="where adaptive, static and hindsight run the joins and the eddy "
                   "routes its parts: local (in process, pandas; default) or spark (on Spark: "
                   "DataFrames; the eddy one task per part); same results")
    p.add_argument("--seed", type=int, default=0, help="the eddy's lottery seed (default 0)")
    p.add_argument("--results", metavar="FILE",
                   help="write every result as a JSON line {batch, columns...}")
    p.add_argument("--master", metavar="URL",
                   help="Spark master (default $REOPT_SPARK_MASTER or local[*])")
    p.add_argument("--json", action="store_true", help="print the batches as JSON")
    p.add_argument("--checkpoint", metavar="DIR",
                   help="keep the run's state in DIR after every micro-batch and, when DIR "
                   "holds one, resume after its last batch (adaptive strategy only)")
    p.add_argument("--max-batches", type=positive_int, metavar="N",
                   help="run at most N micro-batches (with --checkpoint, the next call "
                   "resumes after them)")
    return p


def change_factor(text: str) -> float | None:
    """``type=`` of ``--replan-on-change``: a factor above 1, or ``off`` (None)."""
    if text.strip().lower() == "off":
        return None
    try:
        factor = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a factor above 1 or 'off', got '{text}'"
                                         ) from None
    if not factor > 1 or math.isinf(factor):
        raise argparse.ArgumentTypeError(f"the factor must be above 1 and finite, got {text}")
    return factor


class Replanner:
    """The plan for each micro-batch: the optimizer's best plan, updated after the stream's
    first batch (the catalog's plan runs one batch, not a whole interval: the paper's loop
    starts with no statistics and re-optimizes from what it observed), then every ``every``
    batches with what those batches observed and, with ``on_change`` (a factor), also after
    any batch whose observations moved by more than their noise since the optimizer's last
    update (:mod:`reopt.streamchange`; the schedule stays: every ``every``-th batch)."""

    def __init__(self, optimizer: Optimizer, every: int | None, migration: str = "moving",
                 batch_seconds: int = 1, max_state: int | None = None,
                 on_change: float | None = None):
        self.optimizer = optimizer
        self.every = every
        self.migration = migration
        self.batch_seconds = batch_seconds
        self.max_state = max_state
        self.trigger = None if on_change is None else ChangeTrigger(on_change)
        self.window: list[MicroBatch] = []
        self.log: list[str] = []
        """One line per re-planning: the deltas applied and the plan chosen, or the error."""
        self.plan: PlanNode = self.budgeted(optimizer.optimize().plan, "initial plan")
        self.decisions: list[dict] = []
        """``--migration auto``: each decision on a proposed plan change (batch, numbers)."""
        self.triggered: list[int] = []
        """Batches after which the change trigger re-planned (off the schedule)."""

    def budgeted(self, plan: PlanNode, when: str) -> PlanNode:
        """``plan``, or the plan ``--max-state`` runs instead (:mod:`reopt.statebudget`);
        a warning goes to the log."""
        if self.max_state is None:
            return plan
        chosen, warning = within_budget(self.optimizer.space(), plan, self.max_state)
        if warning is not None:
            self.log.append(f"{when}: warning: {warning}")
        return chosen

    def deltas(self) -> list[str]:
        """The rates over the window's batches and the selectivities at its end."""
        seconds = sum(b.end - b.start for b in self.window)
        arrived: dict[str, int] = {}
        for b in self.window:
            for t, n in b.arrivals.items():
                arrived[t] = arrived.get(t, 0) + n
        rates = [f"rate {t} ={n / seconds:.6g}" for t, n in arrived.items() if n > 0]
        return rates + [d for d in self.window[-1].deltas if d.startswith("sel ")]

    def __call__(self, last: MicroBatch | None) -> PlanNode | tuple[PlanNode, str]:
        if last is None or self.every is None:
            return self.plan
        self.window.append(dataclasses.replace(last, rows=[]))  # rates and sels only
        moved = [] if self.trigger is None else self.trigger.changed(last.deltas,
                                                                     last.evidence)
        # the first batch's observations replace the catalog's guesses at once, then the
        # schedule: every ``every``-th batch of the stream
        scheduled = last.index == 0 or (last.index + 1) % self.every == 0
        if not (scheduled or moved):
            return self.plan
        if moved:  # the optimizer's statistics are stale: the moved ones from this batch
            self.triggered.append(last.index)
        keys = {delta_key(d) for d in moved}
        deltas = [d for d in self.deltas() if delta_key(d) not in keys] if scheduled else []
        known = interval_evidence(b.evidence for b in self.window) if scheduled else {}
        known.update({k: last.evidence[k] for k in keys})
        self.window = []
        return self._replan(deltas + moved, last, known, bool(moved))

    def _replan(self, deltas: list[str], last: MicroBatch, evidence: dict[str, Evidence],
                changed: bool) -> PlanNode | tuple[PlanNode, str]:
        """Update the optimizer with ``deltas`` after ``last`` (and the trigger's reference
        with their ``evidence``); the plan to run next and, on a change, how to migrate
        (``--migration auto`` may keep the old plan). ``changed``: the trigger asked."""
        try:
            step = self.optimizer.update(deltas)
        except DeltaError as e:  # the optimizer is as it was; keep the plan
            self.log.append(f"after batch {last.index}: re-planning refused: {e}")
            return self.plan
        if self.trigger is not None:
            self.trigger.confirm(evidence)
        when = f"after batch {last.index}" + (" (change)" if changed else "")
        proposed = self.budgeted(step.plan, when)
        head = f"{when}: {'; '.join(deltas)} -> plan {plan_line(proposed)}"
        if plan_line(proposed) == plan_line(self.plan):
            self.plan = proposed
            self.log.append(f"{head} (same)")
            return self.plan
        how = self.migration
        if how == "auto":
            d = decide(self.optimizer.space(), self.plan, proposed,
                       self.every * self.batch_seconds, self.batch_seconds)
            self.decisions.append({"after_batch": last.index, **d.to_json()})
            self.log.append(f"{head} ({d.line()})")
            if not d.switch:
                return self.plan
            how = d.strategy
        else:
            self.log.append(f"{head} (changed)")
        self.plan = proposed
        return self.plan, how


def main(argv: list[str]) -> int:
    """``reopt stream``; errors are one line (``reopt: …``, exit 2) via :func:`reopt.cli.main`."""
    args = _parser().parse_args(argv)
    catalog = args.catalog or str(Path(args.data) / "catalog.json")
    if args.plan_every is not None and args.plan_every % args.batch_seconds:
        raise ReoptError(f"--plan-every {args.plan_every} is not a multiple of --batch-seconds "
                         f"{args.batch_seconds}")
    if args.checkpoint is not None and args.strategy != "adaptive":
        raise ReoptError(f"--checkpoint needs --strategy adaptive, not {args.strategy} (the "
                         "baselines run a stream whole)")
    opt = Optimizer(args.query, catalog, cost_model="rate", objective=args.objective,
                    optimizer=args.optimizer, rate_profile=args.rate_profile or args.executor)
    state = args.state
    if state == "windows" and args.migration is not None:
        raise ReoptError(f"--migration {args.migration} needs --state intermediate (window "
                         "buffers alone have no join state to migrate)")
    migration = args.migration or "moving"
    every = None if args.plan_every is None else args.plan_every // args.batch_seconds
    resumed, settings = None, {}
    if args.checkpoint is not None:  # (a checkpoint of another run is refused before Spark)
        settings = {"query": opt.query.sql, "data": str(Path(args.data).resolve()),
                    "catalog": str(Path(catalog).resolve()),
                    "batch_seconds": args.batch_seconds, "plan_every": args.plan_every,
                    "replan_on_change": args.replan_on_change, "state": state,
                    "migration": migration, "executor": args.executor,
                    "rate_profile": opt.model.constants.name, "optimizer": args.optimizer,
                    "objective": args.objective, "max_state": args.max_state,
                    "results": str(Path(args.results).resolve()) if args.results else None}
        resumed = checkpoints.load(args.checkpoint, settings)
    replanner = resumed.replanner if resumed is not None else \
        Replanner(opt, every, migration, args.batch_seconds, args.max_state,
                  args.replan_on_change)
    # the eddy and Spark's own join need only the executor's checks and windows here
    executor = args.executor if args.strategy in ("adaptive", "static", "hindsight") \
        else "spark"
    cq = make_query(executor, opt.query, opt.catalog, args.data, None,
                    args.batch_seconds, opt.adjustments, state=state,
                    migration="moving" if migration == "auto" else migration)
    if resumed is not None:
        cq.restore(resumed.executor)
        if args.results:
            checkpoints.cut_results(args.results, resumed.results_bytes)
        if not args.json:
            print(f"resumed from {args.checkpoint} after batch {resumed.last.index}")
    # bad input fails above, before Spark starts
    check_strategy(args.strategy, opt, args.data, args.batch_seconds, args.executor, args.seed)
    if args.strategy == "spark" or args.executor == "spark":
        from reopt.spark import get_spark

        cq.spark = get_spark(args.master)
    record = Strategy(args.strategy)
    if args.strategy == "adaptive":
        source = cq.run(replanner_with_log(replanner, args.json),
                        resumed.last if resumed is not None else None)
    else:
        source = run_strategy(args.strategy, opt, args.data, args.batch_seconds, every,
                              cq.spark, args.seed, record, args.executor, migration,
                              args.replan_on_change)
    if args.max_batches is not None:
        source = itertools.islice(source, args.max_batches)
    batches = []
    sink = (open(args.results, "a" if resumed is not None else "w", encoding="utf-8")  # noqa: SIM115
            if args.results else None)
    try:
        for b in source:
            batches.append(b)
            if sink is not None:
                for row in b.rows:
                    sink.write(json.dumps({"batch": b.index, **dict(zip(b.columns, row,
                                                                        strict=True))},
                                          default=str) + "\n")
            if args.checkpoint is not None:
                written = None
                if sink is not None:
                    sink.flush()
                    os.fsync(sink.fileno())
                    written = sink.tell()
                checkpoints.save(args.checkpoint, checkpoints.StreamCheckpoint(
                    settings, cq.snapshot(), replanner, b, written))
            if not args.json:
                print(f"batch {b.index} [{b.start:g}, {b.end:g}) s: {b.plan}, {len(b.rows)} "
                      f"results, {b.seconds:.2f} s; arrivals {b.arrivals}; state {b.state}"
                      + (f"; join state {b.join_state}" if b.join_state else "")
                      + (f"; migration {b.migration} {b.migration_seconds:.2f} s"
                         if b.migration else "")
                      + (f"; plans running {b.plans}" if len(b.plans) > 1 else "")
                      + (f"; skipped {b.skipped}" if b.skipped else ""))
                print(f"  observed: {'; '.join(b.deltas)}")
    finally:
        if sink is not None:
            sink.close()
    if args.json:
        doc = {"query": opt.query.name, "data": args.data, "windows": cq.windows,
               "strategy": args.strategy, "executor": args.executor,
               "rate_profile": opt.model.constants.name,
               "batch_seconds": args.batch_seconds, "plan_every": args.plan_every,
               "state": state, "migration": migration if state == "intermediate" else None,
               "batches": [b.to_json() for b in batches],
               "replanning": replanner.log if args.strategy == "adaptive" else record.log,
               "decisions": replanner.decisions,
               "replan_on_change": args.replan_on_change,
               "triggered_after": replanner.triggered,
               "resumed_after": resumed.last.index if resumed is not None else None}
        sys.stdout.write(dumps_strict(doc, indent=2) + "\n")
    else:
        total = sum(len(b.rows) for b in batches)
        moved = [b for b in batches if b.migration]
        print(f"{args.strategy}: {len(batches)} micro-batches, {total} results, "
              f"{sum(b.seconds for b in batches):.2f} s"
              + (f"; {len(moved)} migrations ("
                 + ", ".join(f"{b.migration} before batch {b.index}" for b in moved)
                 + f"), {sum(b.migration_seconds for b in moved):.2f} s" if moved else ""))
    return 0


def replanner_with_log(replanner: Replanner, quiet: bool
                       ) -> Callable[[MicroBatch | None], PlanNode | tuple[PlanNode, str]]:
    """``replanner``, printing each re-planning line as it happens (unless ``quiet``)."""
    printed = len(replanner.log)  # a resumed run's earlier lines were printed before

    def plan_for(last: MicroBatch | None) -> PlanNode | tuple[PlanNode, str]:
        nonlocal printed
        plan = replanner(last)
        if not quiet:
            for line in replanner.log[printed:]:
                print(f"  re-plan {line}")
        printed = len(replanner.log)
        return plan
    return plan_for
