"""Strata derived when read (``.ondemand``, :mod:`.features`) on the ``python`` engine.

An evaluation or an update of the python engine (and of its maintained twin) leaves the
on-demand strata stale: their relations stay in the engine's mapping of relations as
:class:`Stale` objects, which derive themselves — from empty, with the stale on-demand
strata before them — the first time anything reads them (their tuples, their length, an
index) and then *become* the relation derived, in place. Every reader of a relation — an
evaluation's ``relations``, ``rows``, ``query_rows``, ``frames``, the graph, a fleet's
relations, a test reading an engine's ``full`` or ``live`` — goes through that one accessor,
so none can see a stale relation, and none has to know which relations are on demand.

A stratum read since the step before is followed by the next update instead, as any later
stratum is (:mod:`.later`: counting, groups re-derived — cheaper than from empty when an
update changes little), and left stale with its tuples ready for the next read to take
(:attr:`Pending.ready`): a reader after every step (the bounds notebook) pays what it paid
when every update derived them; one that stops reading stops the following at the next
update.

Exactness: a stale relation is derived from the relations and the statistics of the state
that left it stale (:class:`Pending` keeps both: an update changes the relations in place,
and then marks them stale again with its own statistics). No other stratum reads an
on-demand one and the compiler puts them last (:meth:`_Compiler.strata`), so deriving them
whenever they are read gives what a from-scratch evaluation in the program's order gives.

What changes for the statistics: an evaluation's or update's :class:`RunStats` (iterations,
``derived``, ``held``) no longer count the on-demand strata, whether read or followed; their
work is counted in :class:`OnDemandStats` (the engine's ``on_demand``).
:attr:`~reopt.evaluator.maintenance.UpdateStats.from_empty` counts the strata an update
followed from empty, on-demand ones only when read since the step before.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Collection, Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reopt.costmodel.errors import ReoptError
from reopt.evaluator.ast import Atom
from reopt.evaluator.compiler import CompiledProgram
from reopt.evaluator.python_engine import Relation, Relations, RunStats

if TYPE_CHECKING:
    from reopt.evaluator.python_engine import PythonEngine


@dataclass
class OnDemandStats:
    """What on-demand strata cost over an engine's life: derived when read, or followed by
    an update because they were read since the step before."""

    strata: int = 0
    """On-demand strata derived from empty because something read them."""
    followed: int = 0
    """On-demand strata an update followed (read since the step before it)."""
    iterations: int = 0
    derived: dict[str, int] = field(default_factory=dict)
    """New tuples per relation."""
    seconds: float = 0.0

    def add(self, run: RunStats) -> None:
        """Count the iterations and tuples of ``run`` (one stratum's work) in."""
        self.iterations += run.iterations
        for p, n in run.derived.items():
            self.derived[p] = self.derived.get(p, 0) + n


@contextmanager
def apart(engine: Any) -> Iterator[None]:
    """Within: ``engine``'s statistics are a scratch :class:`RunStats` (a budget of its own),
    counted into its ``on_demand`` afterwards — the statistics of an evaluation or update
    stay those of the strata every step derives, whatever was read in between."""
    main, engine.stats = engine.stats, RunStats()
    try:
        yield
    finally:
        done, engine.stats = engine.stats, main
        engine.on_demand.add(done)


class Pending:
    """The stale on-demand strata of one state of an engine's relations: the mapping of
    relations itself (the one the engine and its evaluation hold), the statistics it was
    derived under (the plan spaces, copied: an update replaces them), the program, and the
    relations an update followed for a reader (:attr:`ready`).

    The mapping is held *weakly*: its stale relations hold this object, so a strong
    reference would make every dropped engine's relations a reference cycle, freed only by
    the cyclic collector (a fleet task drops hundreds of optimizers a round). Whoever reads
    relations holds the mapping — an engine, an evaluation (a step's, or
    :func:`~reopt.evaluator.driver.evaluate`'s without an engine) — so a stale relation stays
    derivable as long as anything that can read it by name does; one taken out of its
    mapping and read after the mapping is gone raises a :class:`ReoptError` saying so."""

    def __init__(self, program: CompiledProgram, relations: Relations,
                 ctx: dict[int, Any], strata: list[int], stats: OnDemandStats,
                 ready: dict[str, Relation] | None = None):
        self.program = program
        self._relations = _held_weakly(relations)
        self.ctx = ctx
        self.strata = strata
        """Indexes of the strata still stale, ascending."""
        self.stats = stats
        self.ready = ready or {}
        """Relation → its tuples as the update that made this state followed them (a stratum
        read since the step before): a read takes them, nothing is derived."""
        self.read: set[int] = set()
        """Strata read since this state was made (an update follows them)."""
        self.fresh: set[int] = set()
        """Of those, the ones derived from empty (not taken from :attr:`ready`)."""

    def mapping(self, pred: str) -> MutableMapping[str, Relation]:
        """The mapping of relations this state is of (held weakly: see the class doc), for a
        reader of stale relation ``pred``; a one-line :class:`ReoptError` once it is gone."""
        rels = self._relations()
        if rels is None:
            raise ReoptError(f"relation {pred}: a stale on-demand relation whose "
                             "evaluation is gone (read it through an evaluation kept)")
        return rels

    def derive(self, rel: Stale) -> None:
        """Derive the stale strata up to ``rel``'s, in order, each from empty, on an engine
        of their own over these relations and statistics (the engine that left them may
        have gone on to other statistics); each stale relation then becomes the relation
        derived. If that fails, they stay stale, and the reader gets the error."""
        from reopt.evaluator.python_engine import PythonEngine

        prog, rels = self.program, self.mapping(rel.pred)
        if rels.get(rel.pred) is not rel:
            raise ReoptError(f"relation {rel.pred}: a stale on-demand relation that its "
                             "evaluation no longer holds")
        at = next(i for i in self.strata if rel.pred in prog.strata[i].preds)
        todo = _needed(prog, at, self.strata)
        t0 = time.perf_counter()
        engine = PythonEngine(prog, self.ctx)
        engine.full, engine.stats, engine.counts, engine.frames = rels, RunStats(), {}, {}
        stale: dict[str, Stale] = {}
        fresh = []
        try:
            for i in todo:
                preds = prog.strata[i].preds
                for p in preds:
                    stale[p] = rels[p]  # type: ignore[assignment]
                    rels[p] = self.ready[p] if p in self.ready else Relation()
                if not all(p in self.ready for p in preds):
                    fresh.append(i)
                    engine.run_stratum(prog.strata[i])
        except BaseException:
            rels.update(stale)
            raise
        for p, old in stale.items():
            old.become(rels[p])
            rels[p] = old
            self.ready.pop(p, None)
        self.strata = [i for i in self.strata if i not in todo]
        self.read.update(todo)
        self.fresh.update(fresh)
        self.stats.strata += len(fresh)
        self.stats.add(engine.stats)
        self.stats.seconds += time.perf_counter() - t0

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with its mapping (the pickle keeps it one object with the engine's)."""
        state = dict(self.__dict__)
        state["_relations"] = self._relations()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        rels = state.pop("_relations", state.pop("relations", None))  # (earlier: strong)
        self.__dict__.update(state)
        self._relations = _held_weakly(rels) if rels is not None else _gone


def _held_weakly(relations: MutableMapping[str, Relation]
                 ) -> Callable[[], MutableMapping[str, Relation] | None]:
    """A weak reference to ``relations``; strong for a plain dict, which a state saved
    before the engines' mappings were :class:`Relations` holds (it stays cyclic, as then)."""
    if isinstance(relations, Relations):
        return weakref.ref(relations)
    return lambda: relations


def _gone() -> None:
    """The mapping of a :class:`Pending` pickled after its mapping was gone: none."""


def _needed(program: CompiledProgram, at: int, stale: list[int]) -> list[int]:
    """Of the ``stale`` strata, ``at`` and those its rules read, directly or through another
    (ascending): what deriving ``at``'s relations needs derived first — not every stale
    stratum before it (reading the bounds derives no plan tree's relation)."""
    of = {p: i for i in stale for p in program.strata[i].preds}
    todo, queue = {at}, [at]
    while queue:
        preds = program.strata[queue.pop()].preds
        for rule in program.rules:
            if rule.head.pred in preds:
                for a in rule.body:
                    i = of.get(a.pred) if isinstance(a, Atom) else None
                    if i is not None and i not in todo:
                        todo.add(i)
                        queue.append(i)
    return sorted(todo)


class Stale(Relation):
    """A relation of an on-demand stratum that the last evaluation or update left stale:
    any read derives it first (:meth:`Pending.derive`), after which the object is the
    relation derived — its class and contents — so whoever holds it holds the relation, as
    with any other. A class of its own (as ``_Unbuilt``), so ordinary relations have no
    ``__getattr__``. Pickled stale, with its pending strata: a saved session derives it
    when read after loading."""

    pending: Pending
    pred: str

    @staticmethod
    def mark(rel: Relation, pending: Pending, pred: str) -> None:
        """Make ``rel`` stale, in place (whoever holds it sees it stale), as of ``pending``."""
        version = rel.__dict__.get("version", 0)
        rel.__dict__.clear()
        rel.__class__ = Stale
        Relation.__init__(rel)
        del rel.rows  # read through __getattr__, which derives it
        rel.version = version + 1
        rel.pending, rel.pred = pending, pred

    def become(self, new: Relation) -> None:
        """Take ``new``'s class and contents (a relation just derived)."""
        version = self.version
        self.__dict__.clear()
        self.__class__ = type(new)
        self.__dict__.update(new.__dict__)
        self.version = max(new.version, version + 1)

    def _derive(self) -> None:
        self.pending.derive(self)

    def __getattr__(self, name: str) -> Any:
        if name != "rows":
            raise AttributeError(name)
        self._derive()
        return self.rows

    def __len__(self) -> int:
        self._derive()
        return len(self)

    def built(self) -> bool:
        return False

    def index(self, cols: tuple[int, ...]) -> dict[tuple, Any]:
        self._derive()
        return self.index(cols)

    def add(self, rows: Any) -> list[tuple]:
        self._derive()
        return self.add(rows)

    def remove(self, rows: list[tuple]) -> None:
        self._derive()
        self.remove(rows)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return _stale, (), {"pending": self.pending, "pred": self.pred,
                            "version": self.version}

    def __setstate__(self, state: dict[str, Any]) -> None:
        Relation.__init__(self)
        del self.rows
        self.__dict__.update(state)


def _stale() -> Stale:
    """An empty :class:`Stale` for unpickling (its state follows)."""
    return Relation.__new__(Stale)


def defer(engine: PythonEngine, kept: Collection[int] = ()) -> Pending | None:
    """Leave ``engine``'s on-demand strata stale as of its relations and statistics now:
    each of their relations, in place, becomes :class:`Stale`. Those of the strata ``kept``
    (followed by the update just made) keep their tuples for the next read to take. The
    pending strata, or None when the program has none."""
    prog = engine.program
    lazy = [i for i, s in enumerate(prog.strata) if s.ondemand]
    if not lazy:
        return None
    ready = {}
    for i in kept:
        for p in prog.strata[i].preds:
            rel = engine.full[p]
            ready[p] = keep = Relation.__new__(type(rel))
            keep.__dict__.update(rel.__dict__)
    pending = Pending(prog, engine.full, dict(engine.ctx), lazy, engine.on_demand, ready)
    for i in lazy:
        for p in prog.strata[i].preds:
            Stale.mark(engine.full[p], pending, p)
    return pending


__all__ = ["OnDemandStats", "Pending", "Stale", "apart", "defer"]
