"""The public Python API: load a query and statistics, optimize, push deltas.

>>> from reopt.api import Optimizer
>>> opt = Optimizer("tpch:q5", cost_model="io", optimizer="topdown")
>>> step = opt.optimize()
>>> print(step.plan.explain())
>>> step = opt.update(["card orders *2"])
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reopt.costmodel.cardinality import (
    DEFAULT_OBSERVED_SUPERSETS,
    OBSERVED_SUPERSETS,
    Adjustments,
)
from reopt.costmodel.catalog import Catalog, decode_utf8
from reopt.costmodel.deltas import Delta, apply_deltas, parse_deltas
from reopt.costmodel.errors import DeltaError, OptimizerError, ReoptError
from reopt.costmodel.models import cost_model as get_cost_model
from reopt.costmodel.query import Query
from reopt.costmodel.rate import check_streams, plan_estimates
from reopt.costmodel.space import PlanSpace
from reopt.optimizers.base import Result, building_state
from reopt.optimizers.bottomup import bottomup
from reopt.optimizers.exhaustive import exhaustive
from reopt.optimizers.incremental import BottomUpInc, Incremental, TopDownInc
from reopt.optimizers.topdown import topdown
from reopt.plan import PlanNode

PROCEDURAL: dict[str, Callable[[PlanSpace], Result]] = {
    "topdown": topdown,
    "bottomup": bottomup,
    "exhaustive": exhaustive,
}
DECLARATIVE = "declarative"
OVER_BUDGET = ("error", "greedy")
"""What happens to a query above ``max_pairs``: refused with an error (the default), or
planned by greedy operator ordering (:mod:`reopt.optimizers.greedy`), flagged not exact."""
MAX_PAIRS = 1_000_000
"""Default search-space budget: a query whose join graph has more csg-cmp pairs is refused
before any search (``max_pairs``, CLI ``--max-pairs``). A million pairs is a few seconds of
``topdown`` and minutes of the declarative optimizer; TPC-H Q8Join, the largest built-in, has 84."""
INCREMENTAL: dict[str, type[Incremental]] = {
    "topdown-inc": TopDownInc,
    "bottomup-inc": BottomUpInc,
}
"""Procedural optimizers whose memo survives deltas: see :func:`_incremental`."""
OPTIMIZERS = (DECLARATIVE, *PROCEDURAL, *INCREMENTAL)
ENGINES = ("spark", "python")
PRUNING_MODES = ("none", "evita", "aggsel", "aggsel+refcount", "aggsel+bound", "all")
"""Pruning inside the datalog evaluation (README, "Scheduling and pruning"); see
:data:`reopt.evaluator.driver.PRUNING_MODES` for the features each switches on."""


def load_catalog(path: str | Path | None = None, sf: float = 1.0) -> Catalog:
    """A catalog file, or the built-in TPC-H statistics at scale factor ``sf``."""
    if path is None:
        from reopt.costmodel.tpch import tpch_catalog

        return tpch_catalog(sf)
    return Catalog.load(path)


def load_query(spec: str | os.PathLike | Query, catalog: Catalog) -> Query:
    """A :class:`Query` from a built-in name (``tpch:q5``; bare ``q5`` when no file of that
    name exists), a ``.sql`` file (a path string or any ``os.PathLike``), or SQL text.

    Errors name where the text came from: ``bad.sql:5:3: …`` for a file, ``SQL text: line 1,
    column 22: …`` for text given inline (a file's query is named after its stem, inline
    text ``query``).
    """
    from reopt.costmodel.sql import parse_query
    from reopt.costmodel.tpch import builtin_query_names, builtin_sql

    if isinstance(spec, Query):
        return spec
    if isinstance(spec, os.PathLike):
        return _query_file(Path(spec), catalog)
    if not isinstance(spec, str):
        raise ReoptError(
            "query must be SQL text, a .sql file path, a built-in name (tpch:q5) or a Query, "
            f"got {type(spec).__name__}"
        )
    s = spec.strip()
    if s.lower().startswith("tpch:"):
        return parse_query(builtin_sql(s), catalog, name=s.lower())
    if s.lower().endswith(".sql") and "\n" not in s:
        return _query_file(Path(s), catalog)
    if len(s.split()) == 1 and s.lower() in builtin_query_names():
        # builtin_sql's error says "'tpch:' is optional": so it is, unless a file is meant
        if Path(s).exists():
            raise ReoptError(
                f"'{s}' is a file, but query files must end in .sql "
                f"(for the built-in query write tpch:{s.lower()})"
            )
        name = f"tpch:{s.lower()}"
        return parse_query(builtin_sql(name), catalog, name=name)
    if len(s.split()) <= 1:
        raise ReoptError(
            f"'{s}' is neither a built-in query (tpch:q5, …), a .sql file, nor SQL text"
        )
    return parse_query(s, catalog, source="SQL text")


def _query_file(p: Path, catalog: Catalog) -> Query:
    """The query in file ``p``, named after its stem; its errors name the file."""
    from reopt.costmodel.sql import parse_query

    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ReoptError(f"{p}: cannot read query: {e.strerror}") from None
    text = decode_utf8(raw, f"{p}: cannot read query", ReoptError)  # a BOM is dropped
    return parse_query(text, catalog, name=p.stem, source=p)


@dataclass
class Step:
    """One optimization: the initial one, or one after a batch of deltas."""

    cost: float
    plan: PlanNode
    metrics: dict[str, Any]
    deltas: list[str] = field(default_factory=list)
    estimates: dict[str, Any] | None = None
    exact: bool = True
    """False for a greedy plan (``over_budget="greedy"``): not necessarily the cheapest."""
    reason: str = ""
    """Why the plan is not exact (empty when it is)."""

    def explain(self) -> str:
        """The plan as an indented tree with estimated rows and cumulative cost per node."""
        return self.plan.explain()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "cost": self.cost, "exact": self.exact, "plan": self.plan.to_json(),
            "metrics": self.metrics
        }
        if not self.exact:
            out["reason"] = self.reason
        if self.deltas:
            out["deltas"] = self.deltas
        if self.estimates is not None:
            out["estimates"] = self.estimates
        return out


def estimates(space: PlanSpace) -> dict[str, Any]:
    est = space.estimator
    q = space.query
    return {
        "relations": {a: est.leaf_card(a) for a in q.aliases},
        "predicates": [
            {"left": str(p.left), "right": str(p.right), "selectivity": est.join_selectivity(p)}
            for p in q.joins
        ],
    }


def _choice(kind: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ReoptError(f"unknown {kind} '{value}' (choose from {', '.join(allowed)})")
    return value


class Optimizer:
    """One query under one cost model; keeps its statistics between :meth:`update` calls.

    ``optimizer`` is ``declarative`` (the datalog program of ``rules/`` — or of the directory
    ``rules`` — evaluated by ``engine``: ``spark`` or ``python``) or a procedural reference
    optimizer (``topdown``, ``bottomup``, ``exhaustive``; ``topdown-inc`` and ``bottomup-inc``
    keep their memo between optimize()/update() calls, see :func:`_incremental`).
    The declarative optimizer maintains its state incrementally on update() (both engines);
    ``topdown``, ``bottomup`` and ``exhaustive`` re-optimize from scratch with the new
    statistics.

    Budgets: ``max_pairs`` csg-cmp pairs for exact search — above it the query is refused,
    or with ``over_budget="greedy"`` planned greedily (:mod:`reopt.optimizers.greedy`; its
    steps have ``exact=False`` and a ``reason``); ``max_tuples`` / ``max_iterations`` for the
    declarative optimizer's rule evaluation (:mod:`reopt.evaluator.budget`; None keeps the
    program's, by default 20 million tuples per relation and 10,000 iterations).

    ``objective`` and ``rate_profile`` apply to ``cost_model="rate"`` only: what it minimizes
    (``rate`` or ``time-to:N``) and its per-tuple costs (``spark``, the default, or ``local``:
    :data:`reopt.costmodel.rate.PROFILES`). ``dist_profile`` applies to ``cost_model="dist"``
    only: its constants (``default``, or ``local``, fitted to Spark under a ``local[*]``
    master: :data:`reopt.costmodel.dist.PROFILES`).
    """

    def __init__(
        self,
        query: str | os.PathLike | Query,
        catalog: Catalog | str | Path | None = None,
        *,
        cost_model: str = "io",
        optimizer: str = DECLARATIVE,
        engine: str = "spark",
        pruning: str = "all",
        rules: str | Path | None = None,
        program: Any = None,
        max_pairs: int = MAX_PAIRS,
        observed_supersets: str = DEFAULT_OBSERVED_SUPERSETS,
        max_tuples: int | None = None,
        max_iterations: int | None = None,
        over_budget: str = "error",
        objective: str | None = None,
        rate_profile: str | None = None,
        dist_profile: str | None = None,
    ):
        self.optimizer = _choice("optimizer", optimizer, OPTIMIZERS)
        policy = _choice("observed_supersets policy", observed_supersets, OBSERVED_SUPERSETS)
        self.over_budget = _choice("over_budget choice", over_budget, OVER_BUDGET)
        self._greedy = ""
        """Why the last optimize() planned greedily (the query is above ``max_pairs``), or
        empty: then there is no session, memo or relations, and update() plans greedily
        again."""
        if isinstance(max_pairs, bool) or not isinstance(max_pairs, int) or max_pairs < 1:
            raise ReoptError(f"max_pairs must be a positive integer, not {max_pairs!r}")
        self.max_pairs = max_pairs
        self.engine = _choice("engine", engine, ENGINES)
        self.pruning = _choice("pruning mode", pruning, PRUNING_MODES)
        self.rules = rules
        self.catalog = catalog if isinstance(catalog, Catalog) else load_catalog(catalog)
        self.query = load_query(query, self.catalog)
        self.model = get_cost_model(cost_model, objective, rate_profile, dist_profile)
        if self.model.name == "rate":
            check_streams(self.query, self.catalog)
        self.adjustments = Adjustments(observed_supersets=policy)
        """The statistics deltas have changed; ``observed_supersets`` says how the estimates
        of unobserved sets use observations of their subsets (README, "Deltas")."""
        self._space_size: dict[str, int] | None = None
        self._incremental: Incremental | None = None
        self._program = None
        self._evaluation = None
        self._session = None
        """The declarative optimizer's state since the last optimize() (update() maintains
        it); shared by the optimizers of one batch."""
        self._qid = 0
        self._fleet: Any = None
        """On the ``spark`` engine with a decomposable program: the one-round-per-step fleet
        (:mod:`reopt.fleet`) holding this query's state on Spark, and its name there."""
        self._fleet_name = ""
        if self.optimizer == DECLARATIVE:
            from reopt.evaluator.driver import load_program

            self._program = program or load_program(rules, self.pruning)
            if max_tuples is not None or max_iterations is not None:
                self._program = _budgeted(self._program, max_tuples, max_iterations)

    def space(self) -> PlanSpace:
        return PlanSpace(self.query, self.catalog, self.model, self.adjustments)

    def _leave_session(self) -> None:
        """Leave the declarative session this optimizer shared (a batch's) and forget its
        evaluation: the session's later updates must not reach it, because it is about to
        hold another state (a new batch, a fleet, a greedy plan)."""
        if self._session is not None:
            self._session.leave(self)
        self._session = self._evaluation = None

    def _sized(self, space: PlanSpace) -> dict[str, int]:
        if self._space_size is None:
            self._space_size = space.size()
        return dict(self._space_size)

    def optimize(self) -> Step:
        """Optimize from scratch under the current statistics."""
        return optimize_batch([self])[0]

    def relations(self) -> dict[str, Any]:
        """The declarative optimizer's relations after the last step: pandas DataFrames
        (``python`` engine) or Spark DataFrames (``spark``), one column per attribute."""
        if self.optimizer != DECLARATIVE:
            raise ReoptError(f"relations(): the {self.optimizer} optimizer holds no relations "
                             "(only the declarative one evaluates rules)")
        if self._greedy:
            raise ReoptError(f"relations(): query {self.query.name} was planned greedily "
                             f"({self._greedy}); no rules were evaluated")
        if self._fleet is not None:
            return _spark_frames(self._program, self._fleet.optimizers())
        if self._evaluation is None:
            raise ReoptError("relations(): optimize() first")
        return self._evaluation.frames()

    def _fleet_twin(self) -> Optimizer:
        """This query's in-process optimizer as the fleet holds it on Spark (one job)."""
        return self._fleet.optimizer(self._fleet_name)

    def check(self, deltas: Iterable[str | dict | Delta]) -> Adjustments:
        """The statistics after ``deltas``, without adopting them (raises on a bad delta)."""
        parsed = _listify(deltas)
        return apply_deltas(
            parsed, self.query, self.catalog, self.adjustments, self.model.operators
        )

    def update(self, deltas: Iterable[str | dict | Delta] | str) -> Step:
        """Apply a batch of deltas (all or nothing) and return the new best plan.

        The declarative optimizer keeps its state since the last optimize() and maintains it
        incrementally (either engine; README, "Incremental re-optimization"); the result
        is the plan a from-scratch optimization would return. A delta that fails validation
        raises before anything changes; any other failure while re-optimizing (see
        :func:`update_steps`) is a one-line :class:`DeltaError` naming the query and the
        deltas, with the optimizer restored to exactly its state before the call."""
        if self.optimizer == DECLARATIVE and self._session is None and self._fleet is None \
                and not self._greedy:
            raise ReoptError("update(): optimize() first: the declarative optimizer maintains "
                             "the state of its last optimize()")
        items = _listify(deltas)
        texts = [str(d) for d in items]
        adjustments = _guarded(self, texts, lambda: self.check(items))
        step = update_steps([self], [adjustments], texts)[0]
        step.deltas = texts
        return step

    @building_state  # paused as the procedural searches run (README, "Optimizers")
    def _incremental_step(self, session: Any, adjustments: Adjustments) -> Step:
        q = self._qid
        res = session.update({q: adjustments})
        ev = self._evaluation = res.evaluation
        for o in session.members:
            o._evaluation = ev
        up = res.stats
        derived = up.derived if up is not None else ev.stats.derived
        seconds = up.seconds if up is not None else res.seconds
        metrics = _declarative_metrics(self, ev, q, seconds, derived)
        metrics["incremental"] = session.incremental
        if up is not None:
            full = metrics["search_space"]
            touched = res.updated.get(q, {"or_nodes": 0, "and_nodes": 0})
            metrics["updated"] = touched
            metrics["update_ratio"] = {
                "or": touched["or_nodes"] / full["or_nodes"] if full["or_nodes"] else 0.0,
                "and": touched["and_nodes"] / full["and_nodes"] if full["and_nodes"] else 0.0,
            }
            metrics["rederived"] = {"stale": up.stale, "or_nodes": up.rederived,
                                    "changed": up.changed}
        return Step(ev.best_cost(q), ev.best_plan(q), metrics)

    def save(self, path: str | Path) -> None:
        """Save this optimizer — query, catalog, statistics and, for the declarative one, the
        state of its last optimize()/update() — to directory ``path``; :meth:`load` resumes
        it in another process, where the next update() gives what this one's would."""
        from reopt.incremental.session import save_state

        if self.optimizer == DECLARATIVE and self.engine != "python":
            raise ReoptError("save(): only the python engine's state can be saved; on Spark, "
                             "a fleet saves its state (reopt.fleet.Fleet.save)")
        save_state(self, path, "optimizer")

    @staticmethod
    def load(path: str | Path) -> Optimizer:
        """The optimizer saved in directory ``path`` by :meth:`save`."""
        from reopt.incremental.session import load_state

        return load_state(path, "optimizer")

    def graph(self):
        """The search space as a :class:`reopt.graph.AndOrGraph`: every OR and AND node of the
        plan space under the current statistics, with the held state of the last optimize() or
        update() overlaid (``held``/``pruned``; a procedural optimizer keeps none: ``unknown``,
        its plan re-derived under the current statistics). Declarative optimizers need
        optimize() first."""
        from reopt.graph import build_graph

        if self._fleet is not None:  # the state read back from Spark; exported as DataFrames
            g = self._fleet_twin().graph()
            g.engine = "spark"
            return g
        if self._greedy:
            raise ReoptError(f"graph(): query {self.query.name} is above the search-space "
                             f"budget ({self._greedy}); its and-or graph is too large to build")
        return build_graph(self)


def _budgeted(program: Any, max_tuples: int | None, max_iterations: int | None) -> Any:
    """``program`` with the budget given (the other figure kept); a copy, as a program may
    be shared by other optimizers."""
    from dataclasses import replace

    from reopt.evaluator.budget import Budget

    b = program.budget
    budget = Budget(b.max_tuples if max_tuples is None else max_tuples,
                    b.max_iterations if max_iterations is None else max_iterations)
    return program if budget == b else replace(program, budget=budget)


def optimize_batch(opts: list[Optimizer]) -> list[Step]:
    """Optimize several sessions; declarative ones sharing an engine and a program are
    evaluated together in ONE evaluation (every relation carries the query id)."""
    steps: dict[int, Step] = {}
    groups: dict[tuple, list[int]] = {}
    # every budget first, so a refused query stops the batch before any search; the check
    # enumerates the join graph, which each space keeps for its optimizer (timed with it)
    spaces: list[PlanSpace] = []
    checked: list[float] = []
    over: dict[int, str] = {}
    for i, o in enumerate(opts):
        t0 = time.perf_counter()
        spaces.append(o.space())
        if o.over_budget == "greedy" and not spaces[-1].within_budget(o.max_pairs):
            over[i] = (f"its {o.query.n} relations have more than {o.max_pairs:,} csg-cmp "
                       f"pairs (--max-pairs {o.max_pairs}): greedy operator ordering, "
                       "not necessarily the cheapest plan")
        else:
            spaces[-1].check_size(o.max_pairs)
        checked.append(time.perf_counter() - t0)
    for i, o in enumerate(opts):
        o._greedy = over.get(i, "")
        if i in over:
            steps[i] = _greedy_step(o, spaces[i], checked[i])
            continue
        if o.optimizer == DECLARATIVE:
            groups.setdefault((o.engine, id(o._program)), []).append(i)
            continue
        t0 = time.perf_counter() - checked[i]
        space = spaces[i]
        run = PROCEDURAL.get(o.optimizer)
        result = run(space) if run else _incremental(o, space)
        seconds = time.perf_counter() - t0
        full = o._sized(space)
        explored = result.explored
        metrics = {"seconds": seconds, "search_space": full, "explored": explored,
                   "pruning_ratio": {
                       "or": _ratio(explored.get("or_nodes", 0), full["or_nodes"]),
                       "and": _ratio(explored.get("and_nodes", 0), full["and_nodes"]),
                   }}
        steps[i] = _finite(o, Step(result.cost, result.plan, metrics,
                                   estimates=estimates(space)))
    for (engine, _), members in groups.items():
        first = opts[members[0]]
        if engine == "spark" and _decomposable(first._program):
            batch = [opts[i] for i in members]
            for i, step in zip(members, _spark_steps(batch), strict=True):
                steps[i] = _finite(opts[i], step)
            continue
        batch_steps = _declarative_steps([opts[i] for i in members], [spaces[i] for i in members],
                                         engine, sum(checked[i] for i in members))
        steps.update(zip(members, batch_steps, strict=True))
    return [steps[i] for i in range(len(opts))]


@building_state  # paused as the procedural searches run (README, "Optimizers")
def _declarative_steps(opts: list[Optimizer], spaces: list[PlanSpace], engine: str,
                       checked: float) -> list[Step]:
    """One evaluation of the declarative optimizers ``opts`` (one engine, one program) as a
    batch: a new session, its queries' steps. ``checked`` is the time their budget checks
    took, counted in the reported seconds."""
    from reopt.incremental.session import Session

    t0 = time.perf_counter() - checked
    session = Session(opts[0]._program, spaces, engine)
    session.members = list(opts)
    ev = session.optimize()
    seconds = time.perf_counter() - t0
    steps = []
    for q, (o, space) in enumerate(zip(opts, spaces, strict=True)):
        o._leave_session()
        o._evaluation, o._session, o._qid = ev, session, q
        metrics = _declarative_metrics(o, ev, q, seconds, ev.stats.derived)
        metrics["batch_queries"] = len(opts)
        steps.append(_finite(o, Step(ev.best_cost(q), ev.best_plan(q), metrics,
                                     estimates=estimates(space))))
    return steps


def _decomposable(program: Any) -> bool:
    from reopt.evaluator.decompose import decomposition

    return decomposition(program).decomposable


def _spark_steps(opts: list[Optimizer]) -> list[Step]:
    """The ``spark`` engine on a decomposable program: the batch's queries become a fleet
    (:mod:`reopt.fleet`), one round of Spark jobs in which each task runs the in-process
    engine on its queries; the state stays on Spark, partitioned by query."""
    import copy
    import pickle

    from reopt.fleet import Fleet, FleetQuery, _dump

    queries = []
    for k, o in enumerate(opts):
        twin = copy.copy(o)
        twin.engine = "python"
        twin._session = twin._evaluation = twin._incremental = twin._fleet = None
        queries.append(FleetQuery(str(k), "", seed=_dump(twin)))
    first = opts[0]
    fleet = Fleet(queries, cost_model=first.model.name, pruning=first.pruning,
                  program=first._program)
    rnd = fleet.optimize()
    out = []
    for k, (o, r) in enumerate(zip(opts, rnd.results, strict=True)):
        done = pickle.loads(r["step"])
        if isinstance(done, BaseException):
            raise done
        o._leave_session()
        o._fleet, o._fleet_name, o._qid = fleet, str(k), 0
        # seconds: what the caller waited (the round); task_seconds: the engine in its task
        done.metrics.update(batch_queries=len(opts), spark_jobs=rnd.jobs, seconds=rnd.seconds,
                            task_seconds=done.metrics.get("seconds", 0.0))
        out.append(done)
    return out


def _spark_update(o: Optimizer, adjustments: Adjustments) -> Step:
    """One update of a fleet-held query: a round with its new statistics."""
    import pickle

    rnd = o._fleet.update({o._fleet_name: adjustments})
    got = rnd.by_name()[o._fleet_name]
    done = pickle.loads(got["step"])
    if isinstance(done, BaseException):
        raise done
    done.metrics.update(spark_jobs=rnd.jobs, seconds=rnd.seconds,
                        task_seconds=done.metrics.get("seconds", 0.0))
    return done


def _spark_frames(program: Any, twins: dict[str, Optimizer]) -> dict[str, Any]:
    """The relations of a batch held by a fleet as Spark DataFrames typed by the program's
    schemas: every query's tuples with its position in the batch as query id (its fleet
    name), as one evaluation of the batch gives them; fact relations once."""
    import pandas as pd
    from pyspark.sql import types as T

    from reopt.evaluator.decompose import decomposition
    from reopt.evaluator.spark_engine import SPARK_TYPES
    from reopt.spark import get_spark

    partitioned = decomposition(program).partitioned
    parts: dict[str, list[Any]] = {}
    for name, twin in sorted(twins.items(), key=lambda kv: int(kv[0])):
        for pred, frame in twin.relations().items():
            if pred in partitioned:
                frame = frame.assign(**{frame.columns[0]: int(name)})
            elif pred in parts:
                continue
            parts.setdefault(pred, []).append(frame)
    spark = get_spark()
    out = {}
    for pred, frames in parts.items():
        frame = pd.concat(frames, ignore_index=True)
        schema = T.StructType([T.StructField(c, SPARK_TYPES[t]) for c, t in
                               zip(frame.columns, program.schemas[pred], strict=True)])
        out[pred] = spark.createDataFrame(frame, schema) if len(frame) else \
            spark.createDataFrame([], schema)
    return out


def _greedy_step(o: Optimizer, space: PlanSpace, checked: float) -> Step:
    """The greedy plan of a query above its budget (:mod:`reopt.optimizers.greedy`), whatever
    its optimizer: flagged not exact, with why. A declarative optimizer's old session (or an
    incremental one's memo) is dropped: it holds another query state than this plan."""
    from reopt.optimizers.greedy import greedy

    t0 = time.perf_counter() - checked
    result = greedy(space)
    o._leave_session()
    o._incremental = o._fleet = None
    metrics = {"seconds": time.perf_counter() - t0, "explored": result.explored}
    return _finite(o, Step(result.cost, result.plan, metrics, estimates=estimates(space),
                           exact=False, reason=f"query {o.query.name}: {o._greedy}"))


def update_batch(opts: list[Optimizer], adjustments: list[Adjustments]) -> list[Step]:
    """Adopt already validated statistics, one per optimizer, and return each one's new best
    plan: a declarative optimizer holding a session maintains it incrementally (its query
    only; the batch's other queries are untouched), every other one re-optimizes."""
    steps: dict[int, Step] = {}
    rest: list[int] = []
    for i, (o, adj) in enumerate(zip(opts, adjustments, strict=True)):
        o.adjustments = adj
        if o._fleet is not None:
            steps[i] = _spark_update(o, adj)
        elif o._session is not None:
            steps[i] = o._incremental_step(o._session, adj)
        else:
            rest.append(i)
    for i, step in zip(rest, optimize_batch([opts[i] for i in rest]), strict=True):
        step.estimates = None
        steps[i] = step
    return [steps[i] for i in range(len(opts))]


def update_steps(opts: list[Optimizer], adjustments: list[Adjustments],
                 deltas: list[str]) -> list[Step]:
    """:func:`update_batch`, atomic per optimizer: what ``Optimizer.update()`` and each CLI
    delta step run. ``deltas`` are the batch's texts, for messages.

    Validation already refuses deltas that cannot be honoured (README, "Deltas"), so a failure
    here is a bug — but it must not leave an optimizer half-updated: any exception (and a
    cost that is not finite) restores the optimizer that failed (:class:`_Saved`) and
    becomes a one-line :class:`DeltaError` naming its query and the deltas. Spark's own
    errors pass through unchanged (after the restore) for the CLI to describe."""
    steps = []
    for o, adj in zip(opts, adjustments, strict=True):

        def step(o: Optimizer = o, adj: Adjustments = adj) -> Step:
            return _finite(o, update_batch([o], [adj])[0])

        steps.append(_guarded(o, deltas, step, on_failure=_Saved(o).restore))
    return steps


def _guarded(o: Optimizer, deltas: list[str], work: Callable[[], Any],
             on_failure: Callable[[], None] | None = None) -> Any:
    """``work()``; when it raises, ``on_failure()`` and then the error as one line: a
    :class:`DeltaError` as it is, anything else (Spark's errors aside) as a DeltaError naming
    the query and the deltas, the original chained. An interrupt (Ctrl-C) restores too, and
    stays an interrupt."""
    try:
        return work()
    except BaseException as e:
        if on_failure is not None:
            on_failure()
        if not isinstance(e, Exception) or isinstance(e, DeltaError) or _is_spark_error(e):
            raise
        what = str(e) if isinstance(e, ReoptError) else f"{type(e).__name__}: {e}"
        batch = "; ".join(deltas)
        raise DeltaError(
            f"query {o.query.name}: deltas '{batch}' could not be applied, nothing changed: "
            f"{' '.join(what.split()) or type(e).__name__}"
        ) from e


def _is_spark_error(e: BaseException) -> bool:
    """Whether ``e`` comes from Spark or Py4J (the CLI describes those itself)."""
    from reopt.spark import is_spark_error  # imports neither

    return is_spark_error(e)


def _finite(o: Optimizer, step: Step) -> Step:
    """``step``, if its cost is finite. Inputs are bounded so that it always is (README,
    "Cardinality estimation"); an infinite or NaN cost would be printed as invalid JSON."""
    if not math.isfinite(step.cost):
        raise OptimizerError(f"query {o.query.name}: the best plan's cost is {step.cost}, "
                             "not a finite number")
    if o.model.name == "rate":
        step.metrics["stream"] = plan_estimates(o.space(), step.plan, step.cost)
    return step


class _Saved:
    """An optimizer's state before an update, to put back if the update fails.

    Statistics and the declarative session are saved here; the incremental memo
    (``topdown-inc``/``bottomup-inc``) restores itself (``Incremental.update`` is atomic). A
    declarative session is not copied — its engine's state is large — but re-derived on
    failure: a fresh evaluation under the saved statistics of every query of its batch, which
    is exactly the relations incremental maintenance keeps (README, "Incremental
    re-optimization")."""

    def __init__(self, o: Optimizer):
        self.o = o
        self.adjustments = o.adjustments
        self.session = o._session
        self.ctx = dict(o._session.ctx) if o._session is not None else None

    def restore(self) -> None:
        o = self.o
        o.adjustments = self.adjustments
        if self.session is not None and self.ctx is not None:
            _rebuild(self.session, self.ctx)


def _rebuild(session: Any, ctx: dict[int, PlanSpace]) -> None:
    """Put a declarative session back to the statistics ``ctx`` (query id → plan space) by
    evaluating them afresh, and hand its members the new evaluation."""
    from reopt.incremental.session import Session

    fresh = Session(session.program, [ctx[q] for q in sorted(ctx)], session.engine_name)
    session.ctx, session.engine, session.reason = fresh.ctx, fresh.engine, fresh.reason
    ev = session.optimize()
    for m in session.members:
        m._evaluation = ev


def _declarative_metrics(o: Optimizer, ev: Any, q: int, seconds: float,
                         derived: dict[str, int]) -> dict[str, Any]:
    """The STEP metrics of a declarative optimizer's query ``q`` in evaluation ``ev``."""
    full = o._sized(ev.spaces[q])
    held = ev.held(q)
    state_bytes = held.pop("state_bytes")
    return {
        "seconds": seconds,
        "compile_seconds": o._program.compile_seconds,
        "search_space": full,
        "held": held,
        "pruning_ratio": {
            "or": _ratio(held["or_nodes"], full["or_nodes"]),
            "and": _ratio(held["and_nodes"], full["and_nodes"]),
        },
        "iterations": ev.stats.iterations,
        "relations": ev.sizes(),
        "derived": dict(derived),
        "state_bytes": state_bytes,
    }


def _incremental(o: Optimizer, space: PlanSpace) -> Result:
    """``topdown-inc``/``bottomup-inc`` keep their memo on the session: the first optimize()
    builds it, every later one (after update(), or a CLI delta step) re-costs only what the
    statistics changed since, with the same result as from scratch; ``explored`` then counts
    what that update touched."""
    if o._incremental is None:
        memo = INCREMENTAL[o.optimizer](space)
        result = memo.optimize()
        o._incremental = memo  # only once complete: a failed first optimize() leaves none
        return result
    return o._incremental.update(space)


def _ratio(held: int, full: int) -> float:
    """``1 - held/full``: the share of the search space pruned (0 when nothing is)."""
    return 1.0 - held / full if full else 0.0


def _listify(deltas: Any) -> list:
    """The batch update()/check() were given, as parsed deltas. Anything but a text, a dict,
    a Delta or a list of them, and an empty batch, is a one-line DeltaError from
    :func:`parse_deltas`, raised before the optimizer changes (bytes are not text: iterated,
    they would be integers)."""
    return parse_deltas(deltas)
