"""What a procedural optimizer returns, and how it runs."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import ParamSpec, TypeVar

from reopt.plan import PlanNode


class Result:
    """The best plan of one query, its cost, and how much of the space the search touched.

    ``explored``: OR nodes (memo groups / DP table entries) and AND nodes (alternatives whose
    local cost was computed) the search visited — the procedural counterpart of the
    declarative optimizer's held state, used to compare pruning.

    ``plan`` is a plan tree, or a callable that makes it: then it is made on first access
    and kept (:meth:`later`). A plan tree of a small query costs about as much as its
    search, and a caller after the cost alone (a benchmark, a cost check) never reads it.
    """

    __slots__ = ("cost", "explored", "_plan", "_make")

    def __init__(self, cost: float, plan: PlanNode,
                 explored: dict[str, int] | None = None):
        self.cost = cost
        self.explored = {} if explored is None else explored
        self._plan: PlanNode | None = plan
        self._make: Callable[[], PlanNode] | None = None

    @classmethod
    def later(cls, cost: float, make: Callable[[], PlanNode],
              explored: dict[str, int]) -> Result:
        """A result whose plan ``make()`` builds when it is first read. ``make`` must give
        the same tree whenever it is called: it reads a finished search's memo, which
        nothing changes afterwards (it keeps that memo and its plan space alive until then)."""
        out = cls(cost, None, explored)  # type: ignore[arg-type]
        out._make = make
        return out

    @property
    def plan(self) -> PlanNode:
        if self._plan is None:
            assert self._make is not None
            self._plan, self._make = self._make(), None
        return self._plan

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Result):
            return NotImplemented
        return (self.cost, self.plan, self.explored) == (other.cost, other.plan, other.explored)

    __hash__ = None  # type: ignore[assignment]  # (as the dataclass it was: mutable, eq)

    def __repr__(self) -> str:
        return f"Result(cost={self.cost!r}, plan={self.plan!r}, explored={self.explored!r})"

    def __getstate__(self) -> tuple:
        return self.cost, self.plan, self.explored  # (the plan made: no memo pickled)

    def __setstate__(self, state: tuple) -> None:
        self.cost, self._plan, self.explored = state
        self._make = None


@contextmanager
def paused_gc(collect_young: bool = False, promote: bool = False,
              freeze: bool = False) -> Iterator[None]:
    """Pause CPython's cyclic garbage collector for the duration of a search.

    A search allocates hundreds of thousands of small, acyclic objects (alternatives, memo
    entries) that live as long as the memo; every 700 allocations the collector would scan
    the young ones and, every so often, the whole growing heap again — about a third of a
    large query's search time, to free nothing (reference counting frees what dies).
    Re-enabled on exit, also after an exception; nested pauses are harmless. On exit, in
    this order:

    * ``collect_young``: one collection of the young generation (what the pause allocated),
      for work that may leave cyclic garbage (a fleet task's query parse: sqlglot's trees; a
      dropped optimizer leaves none);
    * ``freeze``: everything the collector tracks is frozen (``gc.freeze()``), never scanned
      again; for a process that keeps what the work built for good (a fleet worker's
      resident optimizers, ``reopt.fleet``);
    * ``promote``: see :func:`_promote_survivors`."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collect_young:
            gc.collect(0)
        if freeze:
            gc.freeze()
        if was:
            if promote:
                _promote_survivors()
            gc.enable()


def _promote_survivors() -> None:
    """Move every object the collector tracks to its oldest generation, uncollected.

    For work whose survivors are long-lived state (a declarative session's relations and
    indexes): after a pause, the first young collection would scan all of them to free
    nothing (about a millisecond of a 12 ms chain-18 optimization, 5 of a 70 ms clique-14),
    and they would reach the oldest generation anyway. ``gc.freeze()`` then ``unfreeze()``
    puts them there directly. Garbage cycles made during the pause then wait for the next full
    collection, as any old object's do. Skipped when the process has frozen objects: ``unfreeze``
    would thaw a caller's ``gc.freeze()`` (a forking server's)."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


P = ParamSpec("P")
R = TypeVar("R")


def without_gc(fn: Callable[P, R], promote: bool = False) -> Callable[P, R]:
    """Run ``fn`` under :func:`paused_gc` (``promote``: see there)."""
    @wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with paused_gc(promote=promote):
            return fn(*args, **kwargs)
    return run


def building_state(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn``, whose survivors are long-lived state, under ``paused_gc(promote=True)``."""
    return without_gc(fn, promote=True)
