"""What a procedural optimizer returns, and how it runs."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import wraps
from typing import ParamSpec, TypeVar

from reopt.plan import PlanNode


@dataclass
class Result:
    """The best plan of one query, its cost, and how much of the space the search touched.

    ``explored``: OR nodes (memo groups / DP table entries) and AND nodes (alternatives whose
    local cost was computed) the search visited — the procedural counterpart of the
    declarative optimizer's held state, used to compare pruning.
    """

    cost: float
    plan: PlanNode
    explored: dict[str, int] = field(default_factory=dict)


@contextmanager
def paused_gc(collect_young: bool = False) -> Iterator[None]:
    """Pause CPython's cyclic garbage collector for the duration of a search.

    A search allocates hundreds of thousands of small, acyclic objects (alternatives, memo
    entries) that live as long as the memo; every 700 allocations the collector would scan
    the young ones and, every so often, the whole growing heap again — about a third of a
    large query's search time, to free nothing (reference counting frees what dies).
    Re-enabled on exit, also after an exception; nested pauses are harmless. With
    ``collect_young``, one collection of the young generation on exit (what the pause
    allocated), for work whose state has cycles (a fleet task's sessions)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
        if collect_young:
            gc.collect(0)


P = ParamSpec("P")
R = TypeVar("R")


def without_gc(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn`` under :func:`paused_gc`."""
    @wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with paused_gc():
            return fn(*args, **kwargs)
    return run
