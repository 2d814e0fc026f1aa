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
use the tickets banked at its start, and the batch's earnings (escrow, summed over its
parts) replace them at its end. Each part draws its lotteries from its own generator, seeded
by (seed, batch, item, part): a run is reproducible, and a part's route does not depend on
when or where it is routed — the order of the parts, the Spark task that routes it.

*Approximation of per-tuple routing.* The seed's eddy routes every tuple on its own; here a
part of a micro-batch's new tuples of one item shares one order (drawn per part, not per
tuple) and ticket counts change between batches, not between tuples. With ``partitions``
equal to the number of new tuples the routing is per tuple within a batch.

*Exactly once.* A combination's tuples that are new in the batch may belong to several items;
it is produced only by the part of the LAST of those items in FROM order: item ``k``'s new
tuples probe the states of the items before ``k`` with their new tuples included, and those
after ``k`` without (only what the buffers held before the batch). Equal timestamps need no
rule of their own: the batch, not the time order inside it, decides what is new.

*Where it runs.* A part's routing is :func:`route_part` (a :class:`Router`: the query's
conditions, windows and the routing rule, picklable, nothing of the executor), which both
eddies run. :class:`Eddy` routes the parts one after the other in process on the driver
(pandas; ``reopt stream --strategy eddy``, like the in-process executor
:mod:`reopt.streamlocal`). :class:`SparkEddy` (``--executor spark``) routes them on Spark,
one Spark job per micro-batch: the parts are the partitions of one RDD, one part per task;
the states (every item's window buffer and new tuples, as the item sees them) go to the
executors once per batch as a broadcast variable, the router with the task's closure; each
task returns its part's combinations, escrow and route, and the driver sums the escrow and
evaluates the constant conditions and the SELECT list as the in-process eddy does. Reading
the files, the window buffers and the observations stay on the driver, as on the Spark
executor. Both route every part alike (per-part lotteries), so their routes and results are
equal batch by batch. :attr:`EddyBatch.probed` counts the partial results every probe
returned, a machine-independent measure of the work the routing caused.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from reopt.costmodel.cardinality import Adjustments
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.query import Query
from reopt.execute import _name
from reopt.frameexpr import RENAMED, Condition, FrameSQL, mask
from reopt.plan import PlanNode
from reopt.stream import ContinuousQuery, MicroBatch, StreamError
from reopt.streamlocal import EXECUTORS, _column

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROUTINGS = ("lottery", "fixed")
"""``lottery``: seed 002's lottery scheduling; ``fixed``: the first eligible item in FROM
order (the same executor without adaptation)."""


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


@dataclass(frozen=True)
class Part:
    """One part of a micro-batch: item ``item``'s new tuples (after its filters), the
    ``index``-th of the parts they were split into, as partial results holding that item."""

    item: int
    index: int
    rows: pd.DataFrame


@dataclass(frozen=True)
class States:
    """Every item's state for one batch: its window buffer's tuples then the batch's new ones
    (``both``, one frame per item), the first ``old[i]`` rows being the buffer's. Item ``k``'s
    part probes the items before ``k`` with their new tuples and those after without (the
    exactly-once rule, module doc)."""

    both: dict[int, pd.DataFrame]
    old: dict[int, int]

    def for_item(self, k: int) -> dict[int, pd.DataFrame]:
        """The states item ``k``'s parts probe."""
        return {j: frame if j < k else frame.iloc[:self.old[j]]
                for j, frame in self.both.items() if j != k}


@dataclass
class Routed:
    """What routing one part produced: its complete combinations, the tickets each probed
    item earned (escrow), its probe order (``"b:a>p"``) and the partial results returned."""

    item: int
    index: int
    results: pd.DataFrame
    escrow: dict[int, float]
    route: str
    probed: int


@dataclass(frozen=True)
class Router:
    """How a part is routed: the query's join conditions, windows and time columns per FROM
    item, and the routing rule — everything a part's routing needs and nothing of the
    executor, so that it ships to a Spark task (pickled with the task's closure; the
    conditions are compiled functions) and both eddies route with this one code."""

    aliases: tuple[str, ...]
    conditions: tuple[Condition, ...]
    times: tuple[str, ...]
    """Each item's (renamed) event-time column."""
    windows: tuple[float, ...]
    routing: str = "lottery"

    def eligible(self, held: frozenset[int]) -> list[int]:
        """The items a part holding ``held`` may probe next: those a join condition connects
        to what it holds, or every remaining item when none is (a forced cross product)."""
        rest = [j for j in range(len(self.aliases)) if j not in held]
        linked = [j for j in rest if any(j in c.used and c.used - {j} and c.used <= held | {j}
                                         for c in self.conditions)]
        return linked or rest

    def probe(self, part: pd.DataFrame, held: frozenset[int], j: int,
              state: pd.DataFrame) -> pd.DataFrame:
        """``part`` joined with item ``j``'s ``state``: a hash join on the equi-join
        conditions between them (a cross join if none), then the other conditions now covered
        and the window condition of the tuples held."""
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
        times = [out[self.times[i]].to_numpy() for i in sorted(now)]
        if len(out):
            newest = np.max(np.vstack(times), axis=0)
            ok = np.ones(len(out), dtype=bool)
            for i, t in zip(sorted(now), times, strict=True):
                ok &= newest - t < self.windows[i]
            out = out[ok]
        return out.reset_index(drop=True)

    def lottery(self, eligible: list[int], tickets: dict[int, float],
                rng: np.random.Generator) -> int:
        """The next item to probe: drawn with as many tickets as each has banked (at least
        one), or the first in FROM order with ``routing="fixed"``."""
        if len(eligible) == 1 or self.routing == "fixed":
            return eligible[0]
        weights = np.array([max(tickets[j], 1.0) for j in eligible])
        return eligible[int(rng.choice(len(eligible), p=weights / weights.sum()))]

    def route(self, part: Part, states: dict[int, pd.DataFrame], tickets: dict[int, float],
              rng: np.random.Generator) -> Routed:
        """Route ``part`` through a probe of every other item's state, one at a time, in an
        order drawn by :meth:`lottery`, until it holds every item or is empty; a probe given
        ``n`` partial results that returns ``m`` earns its item ``n - m`` tickets."""
        rows, held = part.rows, frozenset({part.item})
        order, probed = [], 0
        escrow = dict.fromkeys(range(len(self.aliases)), 0.0)
        while len(held) < len(self.aliases) and len(rows):
            j = self.lottery(self.eligible(held), tickets, rng)
            given = len(rows)
            rows = self.probe(rows, held, j, states[j])
            escrow[j] += given - len(rows)
            probed += len(rows)
            held, order = held | {j}, [*order, j]
        route = f"{self.aliases[part.item]}:{'>'.join(self.aliases[j] for j in order)}"
        return Routed(part.item, part.index, rows, escrow, route, probed)


def part_rng(seed: int, batch: int, part: Part) -> np.random.Generator:
    """The lottery's generator for one part, seeded by (seed, batch, item, part): its draws
    depend on nothing else — not on the order parts are routed in, nor on which Spark task
    routes it — so the in-process and the Spark eddy route every part alike."""
    return np.random.default_rng([seed, batch, part.item, part.index])


def route_part(router: Router, part: Part, states: States, tickets: dict[int, float],
               seed: int, batch: int) -> Routed:
    """One part routed (the unit of work of both eddies: a Spark task runs exactly this)."""
    return router.route(part, states.for_item(part.item), tickets, part_rng(seed, batch, part))


class Eddy(ContinuousQuery):
    """The query over the stream files in ``data_dir``, routed by an eddy (see the module
    doc). :meth:`step` runs the next micro-batch, :meth:`run` all of them; in process, no
    Spark (:class:`SparkEddy` routes the parts on Spark). ``routing="fixed"`` replaces every
    lottery by the first eligible item in FROM order: the same executor without adaptation,
    to measure what the lottery's routing gains."""

    def __init__(self, query: Query, catalog: Catalog, data_dir: str | Path,
                 batch_seconds: int = 1, adjustments: Adjustments | None = None, *,
                 seed: int = 0, partitions: int = 4, routing: str = "lottery",
                 spark: SparkSession | None = None):
        if routing not in ROUTINGS:
            raise StreamError(f"eddy routing must be 'lottery' or 'fixed', got {routing!r}")
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise StreamError(f"eddy partitions must be a whole number >= 1, got {partitions!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise StreamError(f"eddy seed must be a whole number >= 0, got {seed!r}")
        super().__init__(query, catalog, data_dir, spark, batch_seconds, adjustments)
        self.partitions = partitions
        self.seed = seed
        self.items = list(range(len(self.query.aliases)))
        sql = FrameSQL(self.prepared, self.query.name, "the eddy", StreamError)
        self.filters = sql.filters
        self.constant, self.select = sql.constant, sql.select
        self.router = Router(tuple(self.query.aliases), tuple(sql.conditions),
                             tuple(_name(i, self.time_of[i]) for i in self.items),
                             tuple(self.windows[a] for a in self.query.aliases), routing)
        self.banked = {i: 1.0 for i in self.items}
        """Tickets per item the batch's lotteries draw with (the previous batch's escrow)."""

    # -- one micro-batch ---------------------------------------------------------------------
    def _item(self, i: int, frame: pd.DataFrame) -> pd.DataFrame:
        """Item ``i``'s view of a stream frame: its renamed columns, its filters applied."""
        out = pd.DataFrame({_name(i, c): frame[c].to_numpy()
                            for c in sorted(self.prepared.needed[i])})
        for f in self.filters.get(i, []):
            out = out[mask(f, out)]
        return out.reset_index(drop=True)

    def _parts(self, new: dict[int, pd.DataFrame]) -> list[Part]:
        """Every item's new tuples split into at most ``partitions`` non-empty parts, in
        (item, part) order."""
        parts = []
        for k in self.items:
            n = len(new[k])
            for index, ix in enumerate(np.array_split(np.arange(n),
                                                      min(self.partitions, max(n, 1)))):
                if len(ix):
                    parts.append(Part(k, index, new[k].iloc[ix].reset_index(drop=True)))
        return parts

    def _route_all(self, parts: list[Part], states: States) -> list[Routed]:
        """Every part routed, in ``parts``' order: here, one after the other on the driver."""
        return [route_part(self.router, p, states, self.banked, self.seed, self.batch)
                for p in parts]

    def step(self, plan: PlanNode | None = None) -> EddyBatch:
        """Run the next micro-batch (``plan`` is ignored: the eddy routes without one). Past
        the stream's last second, a :class:`StreamError`."""
        self._check_session()
        start, end = self._next_batch()
        t0, c0 = time.perf_counter(), time.process_time()
        skipped: dict[str, int] = {}
        arrived = {t: self._read(t, start, end, skipped) for t in self.tables}
        old = {i: self._item(i, self.buffers[self.query.relations[i].table]) for i in self.items}
        new = {i: self._item(i, arrived[self.query.relations[i].table]) for i in self.items}
        states = States({i: pd.concat([old[i], new[i]], ignore_index=True) for i in self.items},
                        {i: len(old[i]) for i in self.items})
        parts = self._parts(new)
        routed = self._route_all(parts, states) if parts else []
        escrow = dict.fromkeys(self.items, 0.0)
        routes: Counter = Counter()
        for r in routed:
            for j, earned in r.escrow.items():
                escrow[j] += earned
            routes[r.route] += 1
        columns, rows = self._results([r.results for r in routed if len(r.results)])
        self.banked = escrow
        self._slide(arrived, end)
        batch = EddyBatch(self.batch, float(start), float(end), "eddy",
                          {t: len(f) for t, f in arrived.items()},
                          {t: len(f) for t, f in self.buffers.items()}, columns, rows,
                          time.perf_counter() - t0, skipped=skipped,
                          routes=dict(sorted(routes.items())),
                          probed=sum(r.probed for r in routed),
                          cpu_seconds=time.process_time() - c0)
        self.observe(batch)
        self.batch += 1
        return batch

    def _check_session(self) -> None:
        """In process: no Spark session needed."""

    def _results(self, found: list[pd.DataFrame]) -> tuple[list[str], list[tuple]]:
        """The constant conditions and the SELECT list over the parts' combinations."""
        columns = [name for name, _ in self.select]
        if not found:
            return columns, []
        combos = pd.concat(found, ignore_index=True)
        for c in self.constant:
            combos = combos[mask(c, combos)]
        answer = pd.DataFrame({name: _column(f(combos), combos) for name, f in self.select})
        return columns, list(answer.itertuples(index=False, name=None))

    def run(self, plan_for: Any = None) -> Iterator[EddyBatch]:  # type: ignore[override]
        """Every remaining micro-batch in stream-time order (no plan: ``plan_for`` ignored)."""
        while self.batch * self.batch_seconds < self.seconds:
            yield self.step()


class SparkEddy(Eddy):
    """The eddy with its routing on Spark: per micro-batch ONE Spark job whose partitions are
    the batch's parts, one part per task; the states go to the executors once per batch as a
    broadcast variable, the router with the task's closure; each task runs
    :func:`route_part` (the in-process eddy's code) and returns its part's combinations,
    escrow and route, which the driver sums and finishes as the in-process eddy does. Same
    arguments as :class:`Eddy`; ``spark`` may be set (:attr:`spark`) after construction,
    before the first batch, so that bad input fails before Spark starts."""

    _check_session = ContinuousQuery._check_session

    def _route_all(self, parts: list[Part], states: States) -> list[Routed]:
        sc = self.spark.sparkContext
        shared = sc.broadcast(states)
        router, tickets, seed, batch = self.router, dict(self.banked), self.seed, self.batch
        try:
            return sc.parallelize(parts, len(parts)).map(
                lambda p: route_part(router, p, shared.value, tickets, seed, batch)).collect()
        finally:
            shared.unpersist()


def make_eddy(executor: str, query: Query, catalog: Catalog, data_dir: str | Path,
              batch_seconds: int = 1, adjustments: Adjustments | None = None,
              **options: Any) -> Eddy:
    """The eddy routing on ``executor``: ``local`` in process, ``spark`` on Spark (set
    :attr:`SparkEddy.spark` before the first batch, or pass ``spark=``)."""
    if executor == "local":
        return Eddy(query, catalog, data_dir, batch_seconds, adjustments, **options)
    if executor == "spark":
        return SparkEddy(query, catalog, data_dir, batch_seconds, adjustments, **options)
    raise StreamError(f"unknown executor '{executor}' (choose from {', '.join(EXECUTORS)})")

