"""Intermediate join state of the continuous-query executor, and the tracks that plan
migration runs (Zhu's moving state and parallel track, seed 001 §12), as plain pandas
bookkeeping: what a state holds, when its rows expire, which plan emits which result.

A *state* belongs to a join of the plan tree that is not the root: the join results over its
relation set ``H`` that may still take part in a future result. After the batch ending at
``end`` it holds every combination of tuples with event times before ``end`` that meets
``H``'s filters, join conditions and window conditions (for ``t`` the newest of them,
``t - ts_i < w_i``) and whose tuples are all unexpired: ``ts_i > end - w_i`` for every
``i`` in ``H``. A combination expires when its OLDEST component (the first to leave its
window) expires, since any future result holding it has its newest tuple at or after
``end``. The root keeps no state: nothing joins its results.

A *track* is one plan running with its own states. Normally there is one. A parallel-track
migration at stream time ``T`` starts a new track whose leaves read only tuples with
``ts >= T`` and whose states start empty; the older tracks go on with all tuples. The rule
deciding who emits a result: with ``m`` the OLDEST event time among its tuples, the result
belongs to the track with the latest start ``since <= m`` (the oldest track's start is
``-inf``). So a new track emits exactly the all-new combinations, and an older track drops,
at its root, the combinations whose tuples all arrived after the next track's start (Zhu's
duplicate elimination at the old box's root: "new never joins new"). A track with
successors is dropped after the first batch whose end is at least the next track's start
plus the longest window: every tuple older than that start has then expired, so it owns no
future result, and the track after it, whose states are then complete, becomes the oldest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import pandas as pd

from reopt.plan import PlanNode

EXPIRY_SLACK = 1e-6
"""Rows are expired a little late, never early: the join conditions decide membership."""
RelSet = frozenset[int]
"""A state's relation set: the query's FROM-item indexes its combinations hold."""


def join_nodes(plan: PlanNode, aliases: list[str]) -> list[tuple[RelSet, PlanNode]]:
    """The plan's joins that keep a state (every join but the root), with their relation
    sets, children before parents."""
    out: list[tuple[RelSet, PlanNode]] = []

    def walk(node: PlanNode, root: bool) -> None:
        for c in node.children:
            walk(c, root and node.alt.log_op != "join")
        if node.alt.log_op == "join" and not root:
            out.append((frozenset(aliases.index(a) for a in node.relations), node))

    walk(plan, True)
    return out


def expire(frame: pd.DataFrame, times: dict[str, float], end: float) -> pd.DataFrame:
    """The rows of ``frame`` still alive after the batch ending at ``end``: every time
    column ``c`` (one per relation the rows hold) with its window ``w`` has ``c > end - w``
    (an alive combination needs all its tuples alive: it dies with its oldest)."""
    keep = pd.Series(True, index=frame.index)
    for column, window in times.items():
        keep &= frame[column] > end - window - EXPIRY_SLACK
    return frame[keep].reset_index(drop=True)


@dataclass
class Track:
    """One plan running with its own intermediate states (module doc)."""

    plan: PlanNode
    since: float
    """Tuples with ``ts >= since`` feed it; ``-inf`` for the oldest track (all tuples)."""
    states: dict[RelSet, pd.DataFrame | None] = field(default_factory=dict)
    """Each stateful join's rows; None while empty (no rows have been collected yet, so
    there is no frame with its columns)."""

    def sizes(self) -> dict[RelSet, int]:
        return {k: 0 if v is None else len(v) for k, v in self.states.items()}


def owner(tracks_since: list[float], oldest: float) -> int:
    """Index of the track that emits a result whose oldest tuple has event time ``oldest``
    (``tracks_since`` ascending, the first ``-inf``): the latest start not after it."""
    k = 0
    for i, since in enumerate(tracks_since):
        if since <= oldest:
            k = i
    return k


def retire(tracks: list[Track], end: float, longest_window: float) -> list[Track]:
    """``tracks`` after the batch ending at ``end``: the oldest ones dropped while the next
    track's start plus ``longest_window`` is at most ``end`` (no tuple older than that start
    is alive); the new oldest reads all tuples from then on."""
    tracks = list(tracks)
    while len(tracks) > 1 and end >= tracks[1].since + longest_window - EXPIRY_SLACK:
        tracks.pop(0)
    if tracks and tracks[0].since != -math.inf:
        tracks[0] = Track(tracks[0].plan, -math.inf, tracks[0].states)
    return tracks


def state_label(rels: Iterable[int], aliases: list[str]) -> str:
    """A state's name in reports: its aliases joined by ``+`` (``a+p``)."""
    return "+".join(sorted(aliases[i] for i in rels))
