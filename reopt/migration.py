"""Migration-aware re-planning (``reopt stream --migration auto``): switch to the optimizer's
new plan only when what it saves over the next re-planning interval exceeds what moving to it
costs, and move by the cheaper strategy.

Everything is in the rate model's unit, CPU seconds of work (``reopt.costmodel.rate``: a
plan's cost is its load ``U``, work per second of stream), with the statistics after the
update that proposed the switch:

* **gain** = ``(U_old - U_new)·I``: the old plan's load minus the new plan's, over the
  interval ``I`` (stream seconds until the next re-planning).
* **moving state** (seed 001, §12.3.1, Equation 12.1 with the rate model's per-tuple costs,
  the optimizer's profile's):
  a state whose relation set the old tree also keeps is reused for free (matching and moving
  are pointer work); every other stateful join ``E = L ⋈ R`` of the new tree is recomputed
  once from its children's states, sized as the model's alive results ``n_X =
  card(X)`` (a window's tuples, or a join's results alive at a time): ``shj`` costs
  ``(n_L + n_R)·(move + hash + probe) + n_E·out``, ``nlj`` ``(n_L + n_R)·move +
  n_L·n_R·comp + n_E·out``.
* **parallel track** (§12.3.2): the old plan keeps running beside the new one until its
  tuples have expired, ``D`` stream seconds (the executor drops it after the first batch
  ending at least the longest window after the switch: ``D = ⌈W_max / B⌉·B``), so it costs
  ``U_old·D`` more than switching at once (an upper bound: the new plan's states start empty
  and cost less than ``U_new`` while they fill, not counted).

The switch happens iff the gain exceeds the cheaper migration's cost (ties: moving state)
and is at least :data:`MIN_GAIN` of the old plan's work over the interval (``U_old·I``);
otherwise the old plan runs on and the next re-planning decides again. The second condition
is hysteresis: re-planning reads one interval's observations, whose noise makes plans of
near-equal load trade places, and a switch between trees keeping the same states costs
nothing to migrate — without it ``auto`` flapped 3–8 times over 30 re-plannings of a
stationary stream, and the plans the model rates within a few percent (an ``nlj`` or an
``shj`` root) differed up to 4× on the in-process executor (BENCHMARKS.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reopt.costmodel.rate import constants_of, streams
from reopt.streamstate import join_nodes

if TYPE_CHECKING:
    from reopt.costmodel.space import PlanSpace
    from reopt.plan import PlanNode

MIN_GAIN = 0.1
"""``auto`` switches only for a gain of at least this share of the old plan's work over the
interval (module doc)."""
MIGRATIONS = ("moving", "parallel", "auto")
"""``reopt stream --migration``: always move state, always run a parallel track, or decide
per switch (module doc)."""


@dataclass(frozen=True)
class Decision:
    """One ``auto`` decision, all in CPU seconds of work (module doc)."""

    switch: bool
    strategy: str
    """The cheaper migration (the one used if ``switch``)."""
    gain: float
    moving_cost: float
    parallel_cost: float
    old_load: float
    new_load: float

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def line(self) -> str:
        verdict = f"switch by {self.strategy}" if self.switch else "keep the old plan"
        return (f"auto: gain {self.gain:.3g} CPU s (load {self.old_load:.3g} -> "
                f"{self.new_load:.3g}), moving {self.moving_cost:.3g}, parallel "
                f"{self.parallel_cost:.3g}: {verdict}")


def plan_load(space: PlanSpace, plan: PlanNode) -> float:
    """``U`` of any plan of the space under its current statistics: the sum of its
    operators' local costs (the rate objective)."""
    return sum(space.local_cost(n.alt) for n in plan.walk())


def moving_cost(space: PlanSpace, old: PlanNode, new: PlanNode) -> float:
    """Work to build ``new``'s states from ``old``'s (module doc)."""
    aliases = list(space.query.aliases)
    kept = {rels for rels, _ in join_nodes(old, aliases)}
    c = constants_of(space)
    total = 0.0
    for rels, node in join_nodes(new, aliases):
        if rels in kept:
            continue
        n_l, n_r = space.summary(node.alt.left), space.summary(node.alt.right)
        n_e = space.summary(node.alt.expr)
        if node.op == "nlj":
            total += (n_l + n_r) * c.move + n_l * n_r * c.comp + n_e * c.out
        else:
            total += (n_l + n_r) * (c.move + c.hash + c.probe) + n_e * c.out
    return total


def parallel_seconds(space: PlanSpace, batch_seconds: int) -> float:
    """``D``: stream seconds the old plan runs beside the new one (module doc)."""
    s = streams(space)
    longest = float(s.window[s.stream].max())
    return math.ceil(longest / batch_seconds - 1e-9) * batch_seconds


def decide(space: PlanSpace, old: PlanNode, new: PlanNode, interval: float,
           batch_seconds: int, min_gain: float = MIN_GAIN) -> Decision:
    """Whether to switch from ``old`` to ``new`` for the next ``interval`` stream seconds,
    and how (module doc)."""
    u_old, u_new = plan_load(space, old), plan_load(space, new)
    moving = moving_cost(space, old, new)
    parallel = u_old * parallel_seconds(space, batch_seconds)
    strategy = "moving" if moving <= parallel else "parallel"
    gain = (u_old - u_new) * interval
    switch = gain > min(moving, parallel) and gain >= min_gain * u_old * interval
    return Decision(switch, strategy, gain, moving, parallel, u_old, u_new)
