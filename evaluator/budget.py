"""Evaluation budgets: a rule program without a fixpoint stops with an error, not a hang.

A rule such as ``Counter(q, m) :- Counter(q, n), m = n + 1.`` derives a new tuple in every
iteration forever (and memory grows with it). Both engines call :meth:`Budget.step` after each
fixpoint iteration with the number of new tuples per relation; past ``max_iterations``
iterations, or once a relation holds more than ``max_tuples`` tuples, it raises
:class:`BudgetError` naming the relation that keeps growing and the rule that derives it.

The defaults are far above what the shipped rules need: about ten iterations per relation of
the query (one per released rank and step, and ranks are bounded by twice the relations:
54 for TPC-H Q5, 99 for a 12-relation chain, 157 for 16), so some 600 at the 62-relation
limit; with ``--pruning none`` PlanCost holds 4.8 million tuples for Q5 under ``io``. On
Spark every iteration is at least one job, so a lower ``max_iterations`` stops a runaway
program sooner there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from reopt.costmodel.errors import ReoptError
from reopt.evaluator.ast import Rule

MAX_TUPLES = 20_000_000
MAX_ITERATIONS = 10_000


class BudgetError(ReoptError):
    """An evaluation went over its budget of iterations or tuples."""


@dataclass(frozen=True)
class Budget:
    max_tuples: int = MAX_TUPLES
    """The most tuples one relation may hold (``--max-tuples``, ``max_tuples=``)."""
    max_iterations: int = MAX_ITERATIONS
    """The most fixpoint iterations of one evaluation or update, over all strata
    (``--max-iterations``, ``max_iterations=``)."""

    def __post_init__(self) -> None:
        for name in ("max_tuples", "max_iterations"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ReoptError(f"{name} must be a positive integer, not {v!r}")

    def step(self, iterations: int, new: Mapping[str, int], size: Callable[[str], int],
             rules: Sequence[Rule]) -> None:
        """After an iteration (``iterations`` so far in this evaluation): ``new`` tuples per
        relation that grew, ``size(pred)`` its tuples now."""
        for pred, n in new.items():
            if n and size(pred) > self.max_tuples:
                raise BudgetError(
                    f"{_where(pred, rules)}relation {pred} holds {size(pred):,} tuples, more "
                    f"than the budget of {self.max_tuples:,} (--max-tuples, max_tuples=): "
                    f"it keeps growing (new tuples in the last iteration: {n:,}); a rule deriving "
                    "new values forever (e.g. m = n + 1) has no fixpoint")
        if iterations > self.max_iterations:
            grown = sorted((p for p, n in new.items() if n), key=lambda p: -new[p])
            what = (f"relation {grown[0]} keeps growing (new tuples in the last iteration: "
                    f"{new[grown[0]]:,}, in all: {size(grown[0]):,})") if grown else "still running"
            raise BudgetError(
                f"{_where(grown[0], rules) if grown else ''}no fixpoint after "
                f"{self.max_iterations:,} iterations (--max-iterations, max_iterations=): "
                f"{what}; a rule deriving new values forever (e.g. m = n + 1) has no fixpoint")


def _where(pred: str, rules: Sequence[Rule]) -> str:
    """``file:line:col: `` of the first rule deriving ``pred`` from itself (else of the first
    rule deriving it), or nothing for a relation without rules."""
    own = [r for r in rules if r.head.pred == pred]
    rec = [r for r in own if any(getattr(lit, "pred", None) == pred for lit in r.body)]
    chosen = (rec or own or [None])[0]
    return f"{chosen.pos}: " if chosen is not None else ""
