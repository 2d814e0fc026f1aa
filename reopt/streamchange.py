"""The change trigger of ``reopt stream --replan-on-change``: re-plan at the next micro-batch,
outside the ``--plan-every`` schedule, when an observed statistic has moved by more than its
noise since the statistics the running plan was last (re)confirmed under.

Why: on the schedule alone, after a jump in a stream's rate the old plan runs until the next
re-planning point and then one batch more (up to one interval plus a batch); re-planning
after every batch instead reads one batch's noisy observations and flips between plans of
near-equal load (BENCHMARKS.md). The trigger re-plans early only on evidence.

Every observation the executor turns into a delta is a count over an exposure
(:class:`Evidence`): a stream's rate is its arrivals over the batch's seconds, a join
predicate's selectivity the matching pairs over all pairs of the windows' contents. Taking
counts as Poisson, the log of an estimate has standard error ``1/sqrt(count)``, so a
statistic has *moved* from ``before`` to ``now`` when both hold (:func:`moved`):

* the estimates differ by at least ``factor`` (either way), and
* the difference of their logs is at least :data:`SIGMAS` standard errors of that
  difference, ``sqrt(1/n_before + 1/n_now)`` (half a count added to each, so that a stream
  that delivered nothing still compares).

The first condition ignores changes too small to matter to plan choice however certain
(hundreds of arrivals make a 20% change significant); the second ignores large ratios of
small counts (2 arrivals against 5). The reference is what the optimizer was last updated
with: an interval's rates (counts and seconds summed over its batches) and the
selectivities at its end, as the scheduled re-planning reads them. A triggered
re-planning updates the optimizer with the moved statistics only (the others it already
has, estimated from a longer stretch), and they replace their reference entries. The
trigger arms at the first scheduled re-planning (the catalog's statistics come with no
counts). ``--migration auto`` still decides whether the proposed plan pays for its move.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

SIGMAS = 3.5
"""Standard errors a statistic's log must move by to count as moved (two-sided, about
0.05% of stationary comparisons under the Poisson model). On the ``drift`` and ``steady``
presets, seeds 0-3, 1- and 2-s batches (dry passes, BENCHMARKS.md): 3.0 re-planned 9 times
on noise in 32 runs of 30-60 batches, 3.5 three times, 4.0 never; each caught every 10×
jump at the jump's batch or the next, but 3.0 once two batches late."""
FACTOR = 2.0
"""The default ``--replan-on-change`` factor."""


@dataclass(frozen=True)
class Evidence:
    """An observed statistic as a count over an exposure: its estimate is their ratio."""

    count: float
    exposure: float

    def __add__(self, other: Evidence) -> Evidence:
        return Evidence(self.count + other.count, self.exposure + other.exposure)


def moved(before: Evidence, now: Evidence, factor: float, sigmas: float = SIGMAS) -> bool:
    """Whether ``now`` differs from ``before`` by at least ``factor`` and ``sigmas`` standard
    errors of the log ratio (module doc)."""
    n0, n1 = before.count + 0.5, now.count + 0.5
    change = abs(math.log(n1 / now.exposure) - math.log(n0 / before.exposure))
    return change >= math.log(factor) and change >= sigmas * math.sqrt(1 / n0 + 1 / n1)


def delta_key(delta: str) -> str:
    """The statistic a delta text sets: ``rate bids =8`` -> ``rate bids``."""
    return delta.rsplit(" =", 1)[0]


def interval_evidence(batches: Iterable[dict[str, Evidence]]) -> dict[str, Evidence]:
    """The evidence of an interval from its batches', in order: rates summed over the
    batches, selectivities the last batch's (as the re-planning's deltas are made)."""
    out: dict[str, Evidence] = {}
    for evidence in batches:
        for key, e in evidence.items():
            out[key] = out[key] + e if key.startswith("rate ") and key in out else e
    return out


class ChangeTrigger:
    """Which of a batch's statistics moved since the reference (module doc)."""

    def __init__(self, factor: float, sigmas: float = SIGMAS):
        self.factor = factor
        self.sigmas = sigmas
        self.reference: dict[str, Evidence] = {}

    def changed(self, deltas: list[str], evidence: dict[str, Evidence]) -> list[str]:
        """The deltas among ``deltas`` whose statistic moved from its reference."""
        return [d for d in deltas
                if (key := delta_key(d)) in self.reference and key in evidence
                and moved(self.reference[key], evidence[key], self.factor, self.sigmas)]

    def confirm(self, evidence: dict[str, Evidence]) -> None:
        """The optimizer now plans with ``evidence``."""
        self.reference.update(evidence)
