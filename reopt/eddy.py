"""An eddy over windowed streams (seed 002, Avnur and Hellerstein): no optimizer, no plan —
every batch of new tuples is routed through probes of the other streams' window state in an
order chosen by lottery scheduling. The baseline issue 21 compares re-optimization against.

Same input, micro-batches, semantics and results as :class:`reopt.stream.ContinuousQuery`
(whose reading, window buffers, expiry and observations it reuses by subclassing): a result is
a combination of one tuple per FROM item meeting the query's conditions, every tuple within
its window of the newest, emitted in the micro-batch holding the newest, exactly once.

*State* is one window buffer per stream — a SteM (state module) in the eddy's terms: the
tuples of that stream a probe can still meet. A FROM item over the stream probes it through
its renamed columns and filters (a self-join's two items share one buffer).

*Routing.* In a batch, the new tuples of FROM item ``k`` (after its filters) are split into
``partitions`` parts; each part starts as partial results holding ``k`` only and is routed
through a probe of every other item's state, one at a time, in an order drawn per part: at
each step a lottery among the items connected to what the part already holds by a join
condition (all remaining items if none is: a cross product only when the query forces one),
each with as many tickets as it has earned. A probe is a hash join of the part with the
item's state on the equi-join conditions between them (a cross join if none), then the other
conditions now covered and the window condition of the tuples held (the newest held minus
each held tuple's time below its window: necessary for the full combination, and equal to
its condition once all items are held). A part that becomes empty stops.

*Tickets* (seed 002 §4): a probe given ``n`` partial results that returns ``m`` earns
``n - m`` tickets (one credited per tuple given, one debited per tuple returned), so a probe
that eliminates tuples wins more lotteries; a lottery counts each item's tickets, at least 1.
History is forgotten per micro-batch as in the seed's window scheme: the lotteries of a batch
use the tickets banked at its start, and the batch's earnings (escrow) replace them at its
end. The lottery's random draws come from a seeded generator, so a run is reproducible.

*Approximation of per-tuple routing.* The seed's eddy routes every tuple on its own; here a
part of a micro-batch's new tuples of one item shares one order (drawn per part, not per
tuple) and ticket counts change between batches, not between tuples. With ``partitions``
equal to the number of new tuples the routing is per tuple within a batch.

*Exactly once.* A combination's tuples that are new in the batch may belong to several items;
it is produced only by the part of the LAST of those items in FROM order: item ``k``'s new
tuples probe the states of the items before ``k`` with their new tuples included, and those
after ``k`` without (only what the buffers held before the batch). Equal timestamps need no
rule of their own: the batch, not the time order inside it, decides what is new.

The eddy runs in process on the driver (pandas), not on Spark: its wall times are those of
in-memory hash joins, comparable with the in-process executor's (:mod:`reopt.streamlocal`),
not one for one with the Spark executor's, whose batches are dominated by Spark's per-job
overhead. :attr:`EddyBatch.probed` counts the partial results
every probe returned, a machine-independent measure of the work the routing caused.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reopt.costmodel.cardinality import Adjustments
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.query import Query
from reopt.execute import _name
from reopt.frameexpr import RENAMED, FrameSQL, mask
from reopt.plan import PlanNode
from reopt.stream import ContinuousQuery, MicroBatch, StreamError


@dataclass
class EddyBatch(MicroBatch):
    """A micro-batch the eddy ran: its routes (per source item, how many parts took each
    probe order) and the partial results its probes returned."""

    routes: dict[str, int] = field(default_factory=dict)
    """``"b:a>p"`` (item b's part probed a then p) -> parts routed that way; an order that
    ends early (the part became empty) is cut there."""
    probed: int = 0

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "routes": self.routes, "probed": self.probed}


class Eddy(ContinuousQuery):
    """The query over the stream files in ``data_dir``, routed by an eddy (see the module
    doc). :meth:`step` runs the next micro-batch, :meth:`run` all of them; no Spark.
    ``routing="fixed"`` replaces every lottery by the first eligible item in FROM order: the
    same executor without adaptation, to measure what the lottery's routing gains."""

    def __init__(self, query: Query, catalog: Catalog, data_dir: str | Path,
                 batch_seconds: int = 1, adjustments: Adjustments | None = None, *,
                 seed: int = 0, partitions: int = 4, routing: str = "lottery"):
        if routing not in ("lottery", "fixed"):
            raise StreamError(f"eddy routing must be 'lottery' or 'fixed', got {routing!r}")
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise StreamError(f"eddy partitions must be a whole number >= 1, got {partitions!r}")
        super().__init__(query, catalog, data_dir, None, batch_seconds, adjustments)
        self.partitions = partitions
        self.routing = routing
        self.rng = np.random.default_rng(seed)
        self.items = list(range(len(self.query.aliases)))
        sql = FrameSQL(self.prepared, self.query.name, "the eddy", StreamError)
        self.filters, self.conditions = sql.filters, sql.conditions
        self.constant, self.select = sql.constant, sql.select
        self.banked = {i: 1.0 for i in self.items}
        self.escrow = {i: 0.0 for i in self.items}

    # -- one micro-batch ---------------------------------------------------------------------
    def _item(self, i: int, frame: pd.DataFrame) -> pd.DataFrame:
        """Item ``i``'s view of a stream frame: its renamed columns, its filters applied."""
        out = pd.DataFrame({_name(i, c): frame[c].to_numpy()
                            for c in sorted(self.prepared.needed[i])})
        for f in self.filters.get(i, []):
            out = out[mask(f, out)]
        return out.reset_index(drop=True)

    def _eligible(self, held: frozenset[int]) -> list[int]:
        rest = [j for j in self.items if j not in held]
        linked = [j for j in rest if any(j in c.used and c.used - {j} and c.used <= held | {j}
                                         for c in self.conditions)]
        return linked or rest

    def _probe(self, part: pd.DataFrame, held: frozenset[int], j: int,
               state: pd.DataFrame) -> pd.DataFrame:
        now = held | {j}
        covered = [c for c in self.conditions if j in c.used and c.used <= now]
        keys = []
        for c in covered:
            if c.equi is not None:
                a, b = c.equi
                keys.append((a, b) if RENAMED.match(b).group(1) == str(j) else (b, a))
        if keys:
            left = part.dropna(subset=[k for k, _ in keys])
            right = state.dropna(subset=[k for _, k in keys])
            out = left.merge(right, left_on=[k for k, _ in keys],
                             right_on=[k for _, k in keys], how="inner")
        else:
            out = part.merge(state, how="cross")
        for c in covered:
            if c.equi is None:
                out = out[mask(c.evaluate, out)]
        times = [out[_name(i, self.time_of[i])].to_numpy() for i in sorted(now)]
        if len(out):
            newest = np.max(np.vstack(times), axis=0)
            ok = np.ones(len(out), dtype=bool)
            for i, t in zip(sorted(now), times, strict=True):
                ok &= newest - t < self.windows[self.query.aliases[i]]
            out = out[ok]
        return out.reset_index(drop=True)

    def _lottery(self, eligible: list[int]) -> int:
        if len(eligible) == 1 or self.routing == "fixed":
            return eligible[0]
        tickets = np.array([max(self.banked[j], 1.0) for j in eligible])
        return eligible[int(self.rng.choice(len(eligible), p=tickets / tickets.sum()))]

    def _route(self, k: int, part: pd.DataFrame, states: dict[int, pd.DataFrame],
               routes: Counter) -> tuple[pd.DataFrame, int]:
        held = frozenset({k})
        order, probed = [], 0
        while len(held) < len(self.items) and len(part):
            j = self._lottery(self._eligible(held))
            given = len(part)
            part = self._probe(part, held, j, states[j])
            self.escrow[j] += given - len(part)
            probed += len(part)
            held, order = held | {j}, [*order, j]
        names = self.query.aliases
        routes[f"{names[k]}:{'>'.join(names[j] for j in order)}"] += 1
        return part, probed

    def step(self, plan: PlanNode | None = None) -> EddyBatch:
        """Run the next micro-batch (``plan`` is ignored: the eddy routes without one). Past
        the stream's last second, a :class:`StreamError`."""
        start, end = self._next_batch()
        t0, c0 = time.perf_counter(), time.process_time()
        skipped: dict[str, int] = {}
        arrived = {t: self._read(t, start, end, skipped) for t in self.tables}
        old = {i: self._item(i, self.buffers[self.query.relations[i].table]) for i in self.items}
        new = {i: self._item(i, arrived[self.query.relations[i].table]) for i in self.items}
        both = {i: pd.concat([old[i], new[i]], ignore_index=True) for i in self.items}
        routes: Counter = Counter()
        found, probed = [], 0
        for k in self.items:
            states = {j: both[j] if j < k else old[j] for j in self.items if j != k}
            parts = [new[k].iloc[ix] for ix in np.array_split(np.arange(len(new[k])),
                                                             min(self.partitions,
                                                                 max(len(new[k]), 1)))]
            for part in parts:
                if len(part) == 0:
                    continue
                out, n = self._route(k, part.reset_index(drop=True), states, routes)
                probed += n
                if len(out):
                    found.append(out)
        combos = pd.concat(found, ignore_index=True) if found else None
        columns = [name for name, _ in self.select]
        rows: list[tuple] = []
        if combos is not None:
            for c in self.constant:
                combos = combos[mask(c, combos)]
            answer = pd.DataFrame({name: _column(f(combos), combos)
                                   for name, f in self.select})
            rows = list(answer.itertuples(index=False, name=None))
        self.banked, self.escrow = self.escrow, {i: 0.0 for i in self.items}
        self._slide(arrived, end)
        batch = EddyBatch(self.batch, float(start), float(end), "eddy",
                          {t: len(f) for t, f in arrived.items()},
                          {t: len(f) for t, f in self.buffers.items()}, columns, rows,
                          time.perf_counter() - t0, skipped=skipped,
                          routes=dict(sorted(routes.items())), probed=probed,
                          cpu_seconds=time.process_time() - c0)
        self.observe(batch)
        self.batch += 1
        return batch

    def run(self, plan_for: Any = None) -> Iterator[EddyBatch]:  # type: ignore[override]
        """Every remaining micro-batch in stream-time order (no plan: ``plan_for`` ignored)."""
        while self.batch * self.batch_seconds < self.seconds:
            yield self.step()


def _column(value: Any, frame: pd.DataFrame) -> np.ndarray:
    """A SELECT item's values for every row (a constant item repeated)."""
    if isinstance(value, pd.Series):
        return value.to_numpy()
    return np.full(len(frame), value)
