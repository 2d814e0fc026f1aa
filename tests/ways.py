"""The ways the python engine can run a program (:mod:`reopt.evaluator.columnar`): tests run
the same evaluation each way and expect the same relations."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from reopt.evaluator import columnar

WAYS = ("tuples", "frames", "handover")


@contextmanager
def way(name: str) -> Iterator[None]:
    """Run evaluations on tuples only, on frames for every stratum that deletes nothing, or
    on tuples until a recursive stratum's second iteration, then on frames."""
    env = {"tuples": "never", "frames": "always", "handover": "auto"}[name]
    saved = (os.environ.get("REOPT_COLUMNAR"), columnar.MIN_DELTA, columnar.MIN_TUPLES,
             columnar.MIN_SELECTED)
    os.environ["REOPT_COLUMNAR"] = env
    if name == "handover":
        # the costing stratum on tuples, maintenance on frames built from them
        columnar.MIN_DELTA, columnar.MIN_TUPLES, columnar.MIN_SELECTED = 1, 10**12, 0
    try:
        yield
    finally:
        if saved[0] is None:
            os.environ.pop("REOPT_COLUMNAR", None)
        else:
            os.environ["REOPT_COLUMNAR"] = saved[0]
        columnar.MIN_DELTA, columnar.MIN_TUPLES, columnar.MIN_SELECTED = saved[1:]
