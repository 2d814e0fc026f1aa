"""Re-optimization sessions: the optimizer state that lives between deltas.

A :class:`Session` owns one evaluation of the rules for a batch of queries — the relations,
reference counts and the complete layer of :mod:`reopt.evaluator.maintenance` — and answers
:meth:`Session.update` (new statistics for some queries) by incremental maintenance instead of
a new evaluation. The answer is always the relations a from-scratch evaluation would give
(tested against one after every step).

Both engines maintain incrementally: the ``python`` engine with
:class:`~reopt.evaluator.maintenance.MaintainedEngine`, the ``spark`` engine with its twin
:class:`~reopt.evaluator.spark_maintenance.SparkMaintainedEngine`. A rule program whose shape
:func:`~reopt.evaluator.maintenance.maintenance_plan` rejects is re-evaluated from scratch on
update, and the session says so in :attr:`Session.incremental` (and why in ``reason``).
"""

from __future__ import annotations

import pickle
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from reopt.costmodel.cardinality import Adjustments
from reopt.costmodel.errors import ReoptError
from reopt.costmodel.space import PlanSpace
from reopt.evaluator.compiler import CompiledProgram
from reopt.evaluator.driver import Evaluation, evaluate
from reopt.evaluator.maintenance import MaintainedEngine, UpdateStats
from reopt.evaluator.python_engine import RunStats


class MaintainedEvaluation(Protocol):
    """What a session needs of an engine that maintains its relations between evaluations
    (:class:`~reopt.evaluator.maintenance.MaintainedEngine`, and on Spark
    :class:`~reopt.evaluator.spark_maintenance.SparkMaintainedEngine`)."""

    stats: Any

    def evaluate(self, inputs: Mapping[str, Any]) -> tuple[dict[str, Any], Any]: ...

    def update(self, spaces: Mapping[int, Any]) -> tuple[dict[str, Any], UpdateStats]: ...

    def snapshot(self) -> Any: ...

    def changed_since(self, before: Any) -> dict[int, dict[str, int]]: ...


@dataclass
class UpdateResult:
    """One update of a session: the evaluation after it and what it touched per query."""

    evaluation: Evaluation
    stats: UpdateStats | None
    """None when the session re-evaluated from scratch."""
    updated: dict[int, dict[str, int]] = field(default_factory=dict)
    """Query id → ``or_nodes``/``and_nodes`` whose state was inserted, deleted or changed."""
    seconds: float = 0.0


FORMAT = 1
"""Version of the saved state's layout (:func:`save_state`); :func:`load_state` refuses others:
a state pickled by another layout would load into objects that no longer fit the code."""


def save_state(obj: Any, path: str | Path, kind: str) -> None:
    """Write ``obj`` (a :class:`Session` or an API optimizer) to directory ``path`` as
    ``state.pkl``, with its format and kind, so a restarted driver resumes it. The rule
    program is saved as its source and compiled again on load."""
    out = Path(path)
    try:
        data = pickle.dumps({"format": FORMAT, "kind": kind, "state": obj},
                            protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        raise ReoptError(f"{out}: this {kind} cannot be saved: {e}") from None
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "state.pkl").write_bytes(data)
    except OSError as e:
        raise ReoptError(f"{out}: cannot save the state: {e.strerror}") from None


def load_state(path: str | Path, kind: str) -> Any:
    """What :func:`save_state` wrote to ``path``; a one-line error for a directory without
    one, another kind of state or another format."""
    f = Path(path) / "state.pkl"
    try:
        saved = pickle.loads(f.read_bytes())
    except OSError as e:
        raise ReoptError(f"{f}: cannot read a saved state: {e.strerror}") from None
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError) as e:
        raise ReoptError(f"{f}: not a saved reopt state ({e})") from None
    if not isinstance(saved, dict) or saved.get("format") != FORMAT:
        got = saved.get("format") if isinstance(saved, dict) else None
        raise ReoptError(f"{f}: saved state format {got!r}; this reopt reads format {FORMAT}")
    if saved.get("kind") != kind:
        raise ReoptError(f"{f}: holds a saved {saved.get('kind')}, not a {kind}")
    return saved["state"]


class Session:
    """The state of the declarative optimizer for a batch of queries between deltas."""

    def __init__(self, program: CompiledProgram, spaces: list[PlanSpace], engine: str):
        self.program = program
        self.engine_name = engine
        self.ctx: dict[int, PlanSpace] = dict(enumerate(spaces))
        self.engine: MaintainedEvaluation | None = None
        self.reason = ""
        try:
            if engine == "python":
                self.engine = MaintainedEngine(program, self.ctx)
            else:
                from reopt.evaluator.spark_maintenance import SparkMaintainedEngine

                self.engine = SparkMaintainedEngine(program, self.ctx)
        except ReoptError as e:
            self.reason = str(e)
        self.evaluation: Evaluation | None = None
        self._members: list[weakref.ref] = []
        """The API's optimizers sharing this session (one per query of the batch), held
        weakly (:attr:`members`)."""

    @property
    def incremental(self) -> bool:
        return self.engine is not None

    @property
    def members(self) -> list[Any]:
        """The live optimizers sharing this session. Each holds the session, so the session
        holds them weakly: a strong list made every optimizer and its session (and the
        engine the session holds) a reference cycle that only the cyclic collector freed
        (a fleet task of 300 queries left about 870,000 cyclic objects a round, h56)."""
        return [o for o in (r() for r in self._members) if o is not None]

    @members.setter
    def members(self, optimizers: Any) -> None:
        self._members = [weakref.ref(o) for o in optimizers]

    def leave(self, optimizer: Any) -> None:
        """Stop handing ``optimizer`` this session's evaluations (it moved to another)."""
        self._members = [r for r in self._members if r() is not optimizer]

    def __getstate__(self) -> dict[str, Any]:
        if self.engine_name != "python":
            raise ReoptError("only sessions of the python engine can be saved; on Spark, a "
                             "fleet saves its state (reopt.fleet.Fleet.save, reopt fleet --save)")
        state = dict(self.__dict__)
        state["_members"] = self.members  # (pickled as the optimizers: weakrefs do not pickle)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        members = state.pop("_members", None) or state.pop("members", None) or []
        self.__dict__.update(state)
        self.members = members

    def save(self, path: str | Path) -> None:
        """Save the session (relations, reference counts, plan spaces) to directory
        ``path``; :meth:`load` resumes it in another process."""
        save_state(self, path, "session")

    @staticmethod
    def load(path: str | Path) -> Session:
        """The session saved in ``path``: its next update equals the one the saved session
        would have made."""
        return load_state(path, "session")

    def optimize(self) -> Evaluation:
        """Evaluate from scratch (the initial optimization)."""
        inputs = {"Expr": [(q, *s.root) for q, s in self.ctx.items()]}
        if self.engine is None:
            self.evaluation = evaluate(list(self.ctx.values()), self.engine_name,
                                       program=self.program)
            return self.evaluation
        rels, stats = self.engine.evaluate(inputs)
        sizes = {p: len(set(rows)) for p, rows in inputs.items()}
        self.evaluation = Evaluation(self.program, self.ctx, rels, stats, sizes)
        return self.evaluation

    def update(self, adjustments: Mapping[int, Adjustments]) -> UpdateResult:
        """New statistics for the queries named (query id → adjustments); the others keep
        theirs. Returns the evaluation under the new statistics."""
        if self.evaluation is None:
            raise ReoptError("update(): optimize() the session first")
        t0 = time.perf_counter()
        if all(adj == self.ctx[q].adjustments for q, adj in adjustments.items()):
            return self._unchanged(t0)
        spaces = dict(self.ctx)
        for q, adj in adjustments.items():
            spaces[q] = self.ctx[q].with_adjustments(adj)
        if self.engine is None:
            self.ctx.clear()
            self.ctx.update(spaces)
            ev = self.optimize()
            return UpdateResult(ev, None, {}, time.perf_counter() - t0)
        before = self.engine.snapshot()
        rels, up = self.engine.update(spaces)
        updated = self.engine.changed_since(before)
        assert self.evaluation is not None
        held = self.evaluation.held_cache
        self.evaluation = Evaluation(self.program, self.ctx, rels, self.engine.stats,
                                     self.evaluation.input_sizes, plans=self.evaluation.plans)
        changes = getattr(self.engine, "live_changes", None)  # (the python engine's)
        if held and changes is not None:  # the metrics follow the changes, no recount
            self.evaluation.follow_held(held, changes)
        return UpdateResult(self.evaluation, up, updated, time.perf_counter() - t0)

    def _unchanged(self, t0: float) -> UpdateResult:
        """An update whose statistics equal the current ones (a delta that did not apply to
        these queries, in a multi-query run): the relations are already the answer, so no
        engine work — on Spark, no job — and nothing is reported touched. The evaluation's
        statistics say so (no iteration, nothing derived); its held state is carried over."""
        ev = self.evaluation
        assert ev is not None
        stats = RunStats(held=ev.sizes())
        self.evaluation = Evaluation(self.program, self.ctx, ev.relations, stats,
                                     ev.input_sizes, held_cache=ev.held_cache, plans=ev.plans)
        zero = {q: {"or_nodes": 0, "and_nodes": 0} for q in self.ctx}
        seconds = time.perf_counter() - t0
        up = UpdateStats(seconds=seconds) if self.engine is not None else None
        return UpdateResult(self.evaluation, up, zero, seconds)
