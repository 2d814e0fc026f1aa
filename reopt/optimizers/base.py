"""What a procedural optimizer returns."""

from __future__ import annotations

from dataclasses import dataclass, field

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
