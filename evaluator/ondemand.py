"""Strata derived when read (``.ondemand``, :mod:`.features`) on the ``python`` engine.

An evaluation or an update of the python engine (and of its maintained twin) leaves the
on-demand strata stale: their relations stay in the engine's mapping of relations as
:class:`Stale` objects, which derive themselves — from empty, with the stale on-demand
strata before them — the first time anything reads them (their tuples, their length, an
index) and then *become* the relation derived, in place. Every reader of a relation — an
evaluation's ``relations``, ``rows``, ``query_rows``, ``frames``, the graph, a fleet's
relations, a test reading an engine's ``full`` or ``live`` — goes through that one accessor,
so none can see a stale relation, and none has to know which relations are on demand.

Exactness: a stale relation is derived from the relations and the statistics of the state
that left it stale (:class:`Pending` keeps both: an update changes the relations in place,
and then marks them stale again with its own statistics). No other stratum reads an
on-demand one and the compiler puts them last (:meth:`_Compiler.strata`), so deriving them
whenever they are read gives what a from-scratch evaluation in the program's order gives.

What changes for the statistics: an evaluation's or update's :class:`RunStats` (iterations,
``derived``, ``held``) and :class:`~reopt.evaluator.maintenance.UpdateStats` no longer count
the on-demand strata; their work when read is counted in :class:`OnDemandStats` (the
engine's ``on_demand``).
"""

from __future__ import annotations

import time
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reopt.costmodel.errors import ReoptError
from reopt.evaluator.compiler import CompiledProgram
from reopt.evaluator.python_engine import Relation, RunStats

if TYPE_CHECKING:
    from reopt.evaluator.python_engine import PythonEngine


@dataclass
class OnDemandStats:
    """What deriving on-demand strata when read cost, over an engine's life."""

    strata: int = 0
    """On-demand strata derived because something read them."""
    iterations: int = 0
    derived: dict[str, int] = field(default_factory=dict)
    """New tuples per relation."""
    seconds: float = 0.0


class Pending:
    """The stale on-demand strata of one state of an engine's relations: the mapping of
    relations itself (the one the engine and its evaluation hold), the statistics it was
    derived under (the plan spaces, copied: an update replaces them) and the program."""

    def __init__(self, program: CompiledProgram, relations: MutableMapping[str, Relation],
                 ctx: dict[int, Any], strata: list[int], stats: OnDemandStats):
        self.program = program
        self.relations = relations
        self.ctx = ctx
        self.strata = strata
        """Indexes of the strata still stale, ascending."""
        self.stats = stats

    def derive(self, rel: Stale) -> None:
        """Derive the stale strata up to ``rel``'s, in order, each from empty, on an engine
        of their own over these relations and statistics (the engine that left them may
        have gone on to other statistics); each stale relation then becomes the relation
        derived. If that fails, they stay stale, and the reader gets the error."""
        from reopt.evaluator.python_engine import PythonEngine

        prog, rels = self.program, self.relations
        if rels.get(rel.pred) is not rel:
            raise ReoptError(f"relation {rel.pred}: a stale on-demand relation that its "
                             "evaluation no longer holds")
        at = next(i for i in self.strata if rel.pred in prog.strata[i].preds)
        todo = [i for i in self.strata if i <= at]
        t0 = time.perf_counter()
        engine = PythonEngine(prog, self.ctx)
        engine.full, engine.stats, engine.counts, engine.frames = rels, RunStats(), {}, {}
        stale: dict[str, Stale] = {}
        try:
            for i in todo:
                for p in prog.strata[i].preds:
                    stale[p] = rels[p]  # type: ignore[assignment]
                    rels[p] = Relation()
                engine.run_stratum(prog.strata[i])
        except BaseException:
            rels.update(stale)
            raise
        for p, old in stale.items():
            old.become(rels[p])
            rels[p] = old
        self.strata = [i for i in self.strata if i > at]
        st = self.stats
        st.strata += len(todo)
        st.iterations += engine.stats.iterations
        for p, n in engine.stats.derived.items():
            st.derived[p] = st.derived.get(p, 0) + n
        st.seconds += time.perf_counter() - t0


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


def defer(engine: PythonEngine) -> None:
    """Leave ``engine``'s on-demand strata stale as of its relations and statistics now:
    each of their relations, in place, becomes :class:`Stale`."""
    prog = engine.program
    lazy = [i for i, s in enumerate(prog.strata) if s.ondemand]
    if not lazy:
        return
    pending = Pending(prog, engine.full, dict(engine.ctx), lazy, engine.on_demand)
    for i in lazy:
        for p in prog.strata[i].preds:
            Stale.mark(engine.full[p], pending, p)


__all__ = ["OnDemandStats", "Pending", "Stale", "defer"]
