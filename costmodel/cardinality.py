"""Cardinality estimation: filter selectivities, join selectivities, corrections.

The rules, also in the README (tests depend on them):

* A relation's cardinality after its filters is ``rows × Π filter selectivities``.
* ``col = literal``: ``1/distinct``; ``col <> literal``: ``1 − 1/distinct``.
* ranges (``< <= > >= BETWEEN``): from the column's histogram when there is one, else linear
  interpolation on ``[min, max]``; else :data:`DEFAULT_RANGE`
  (``BETWEEN``: :data:`DEFAULT_BETWEEN`).
* ``IN (k values)``: ``min(1, k/distinct)``; ``LIKE``: :data:`DEFAULT_LIKE`; ``IS NULL``:
  :data:`DEFAULT_IS_NULL`; anything else (:class:`Opaque`):
  :data:`DEFAULT_OPAQUE`.
* ``OR``: ``s1 + s2 − s1·s2``; ``NOT``: ``1 − s``; nested ``AND``: product.
* A column with no ``distinct`` statistic uses :data:`DEFAULT_EQ` for equality and, in a join,
  the table's row count as its distinct count (the key assumption).
* An equi-join ``a.x = b.y`` has selectivity ``1/max(distinct(a.x), distinct(b.y))``.
* ``card(S) = Π card(r ∈ S) × Π sel(p with both sides in S) × Π correction(T) for T ⊆ S``.
* A literal compared with a column whose statistics are dates must be an ISO date; anything
  else is a :class:`~reopt.costmodel.errors.QueryError`, not a default selectivity.
* Every estimate is clamped (:meth:`Estimator.card`, :meth:`Estimator.leaf_card`,
  :meth:`Estimator.groups`): at least 1 row, as PostgreSQL clamps its row estimates — a plan
  for a 1e-58-row join is no cheaper than for a 1-row one, and products of tiny selectivities
  would otherwise underflow to 0 — and at most the product of the relations' rows before
  filters (the cross product) and :data:`~reopt.costmodel.numeric.MAX_ROWS`, so estimates and
  costs stay finite whatever corrections are in force. The product is computed with a separate
  binary exponent (:func:`scaled_product`): bit for bit the plain product while that stays in
  the float range, and never an overflow, underflow or NaN where it does not. A ``card {…} =N``
  correction is solved against the unclamped product (:meth:`Estimator.raw_card`), so the
  set's estimate is N exactly.
* Observations (``card {…} := N``, :attr:`Adjustments.observations`) are facts, not factors:
  an observed set's estimate is N clamped to ``[1, cross product]``, whatever corrections or
  other observations are in force. Its unobserved supersets follow
  :attr:`Adjustments.observed_supersets`: ``"keep"`` leaves them as they are; ``"propagate"``
  multiplies each by ``N_T / raw(T)`` for observed subsets ``T`` picked largest first and
  pairwise disjoint (:meth:`Estimator.pinned_subsets`), ``raw`` the unclamped estimate with
  corrections. Either way an estimate depends only on inputs inside its own set, so the
  sets a change reaches are still the supersets of what changed (:meth:`Estimator.moved_masks`).

Deltas (:mod:`reopt.costmodel.deltas`) change the inputs through :class:`Adjustments`, an
immutable value: applying a delta builds a new one, so a rejected delta cannot leave a
half-applied state behind.
"""

from __future__ import annotations

import copyreg
import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from reopt.costmodel.catalog import (
    Catalog,
    ColumnStats,
    TableStats,
    as_number,
    iso_date,
    share,
)
from reopt.costmodel.errors import QueryError
from reopt.costmodel.numeric import MAX_ROWS, short_text
from reopt.costmodel.query import (
    And,
    Between,
    ColumnRef,
    Compare,
    InList,
    IsNull,
    JoinPredicate,
    Like,
    Not,
    Opaque,
    Or,
    Predicate,
    Query,
)

DEFAULT_EQ = 0.1
"""Equality selectivity when the column has no distinct count."""
DEFAULT_RANGE = 1 / 3
"""One-sided range selectivity without histogram or numeric min/max."""
DEFAULT_BETWEEN = 1 / 9
"""``BETWEEN`` selectivity without histogram or numeric min/max (two one-sided ranges)."""
DEFAULT_LIKE = 0.05
DEFAULT_IS_NULL = 0.01
DEFAULT_OPAQUE = 0.25

OBSERVED_SUPERSETS = ("keep", "propagate")
"""How unobserved supersets of observed sets are estimated (:attr:`Adjustments.observed_supersets`;
README, "Cardinality estimation")."""
DEFAULT_OBSERVED_SUPERSETS = "propagate"

_EMPTY: Mapping = MappingProxyType({})
# Read-only mappings keep Adjustments immutable; teach pickle to ship them (Spark broadcasts
# the plan spaces, statistics included, to its Python workers).
def _read_only(d: dict) -> Mapping:
    return MappingProxyType(d)


copyreg.pickle(MappingProxyType, lambda m: (_read_only, (dict(m),)))


@dataclass(frozen=True)
class Adjustments:
    """Everything deltas have changed, relative to the catalog. Immutable.

    ``table_rows``: table → row count (before filters) replacing the catalog's.
    ``alias_factors``: alias → factor on its table's rows (``card ALIAS …`` deltas).
    ``selectivities``: join predicate key → selectivity replacing the estimate.
    ``corrections``: relation bitmask → factor on every superset's estimate.
    ``op_factors``: physical operator → factor on its local cost.
    ``observations``: relation bitmask → observed rows (``card {…} := N``): the set's
    estimate, pinned; a later observation of the same set replaces it.
    ``stream_rates``: stream table → arrival rate (tuples/s) replacing the catalog's
    (``rate`` deltas).
    ``windows``: alias of a stream → window in seconds replacing the query's or catalog's
    (``window`` deltas).
    ``observed_supersets``: how an unobserved set uses its observed subsets, one of
    :data:`OBSERVED_SUPERSETS` (an option of the optimizer, not a delta).
    """

    table_rows: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    alias_factors: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    selectivities: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    corrections: Mapping[int, float] = field(default_factory=lambda: _EMPTY)
    op_factors: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    observations: Mapping[int, float] = field(default_factory=lambda: _EMPTY)
    stream_rates: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    windows: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    observed_supersets: str = DEFAULT_OBSERVED_SUPERSETS

    def __post_init__(self) -> None:
        if self.observed_supersets not in OBSERVED_SUPERSETS:
            raise ValueError(f"observed_supersets must be one of {', '.join(OBSERVED_SUPERSETS)}, "
                             f"not {self.observed_supersets!r}")

    def replace(self, **changes: Mapping) -> Adjustments:
        fields: dict[str, Any] = {
            "table_rows": self.table_rows,
            "alias_factors": self.alias_factors,
            "selectivities": self.selectivities,
            "corrections": self.corrections,
            "op_factors": self.op_factors,
            "observations": self.observations,
            "stream_rates": self.stream_rates,
            "windows": self.windows,
        }
        fields.update({k: MappingProxyType(dict(v)) for k, v in changes.items()})
        return Adjustments(**fields, observed_supersets=self.observed_supersets)

    def with_policy(self, observed_supersets: str) -> Adjustments:
        """The same adjustments with another superset policy (every mapping shared)."""
        return dataclasses.replace(self, observed_supersets=observed_supersets)


NO_ADJUSTMENTS = Adjustments()
"""No delta: the catalog's statistics as they are (immutable, so one instance serves every
estimator and plan space built without adjustments)."""

TABLED_SETS = 1 << 20
"""Relation sets (bitsets) below this are looked up in a table indexed by set, 8 MB at
most (:meth:`Estimator._tabled`): every query of up to 20 relations."""


def changed_factors(a: Mapping[Any, float], b: Mapping[Any, float]) -> set:
    """The keys whose factor differs between ``a`` and ``b`` (a missing factor is 1.0)."""
    if a is b:
        return set()
    return {k for k in {*a, *b} if a.get(k, 1.0) != b.get(k, 1.0)}


def changed_observations(a: Adjustments, b: Adjustments) -> set[int]:
    """The relation sets whose observation differs between ``a`` and ``b`` (made, dropped or
    changed), or every observed set when the superset policy differs."""
    was, now = a.observations, b.observations
    if a.observed_supersets != b.observed_supersets:
        return {*was, *now}
    if was is now:
        return set()
    return {k for k in {*was, *now} if was.get(k) != now.get(k)}


_NO_STATS = ColumnStats()
"""The statistics of a column the catalog says nothing about (immutable: one for all)."""


def _clamp01(s: float) -> float:
    return 0.0 if s < 0 else 1.0 if s > 1 else s


Scaled = tuple[float, int]
"""A positive number as ``(m, e)``, meaning ``m · 2**e`` with ``0.5 <= m < 1`` (or ``m == 0``):
the range of a float's exponent is not enough for products of many estimates."""


def scaled_product(factors: Iterable[float]) -> Scaled:
    """``Π factors`` (each finite, >= 0) as a :data:`Scaled` number. Renormalizing by powers of
    two is exact, so the mantissa is the plain float product's bit for bit as long as that stays
    normal; beyond, it neither overflows nor underflows."""
    m, e = 1.0, 0
    frexp = math.frexp
    for f in factors:
        fm, fe = frexp(f)
        m, me = frexp(m * fm)
        e += fe + me
    return m, e


def scaled_float(x: Scaled) -> float:
    """A :data:`Scaled` number as a float: ``inf`` above the float range, 0 below it."""
    m, e = x
    if m == 0 or e < -1100:
        return 0.0
    if e > 1024:
        return math.inf
    return math.ldexp(m, e)


_TINY = 1e-290
_HUGE = 1e290
"""Partial products between these are normal floats with room to spare
(:meth:`Estimator._plain_card`)."""


def clamp_rows(x: Scaled, ceiling: float) -> float:
    """An estimate within ``[1, ceiling]`` (``ceiling >= 1``)."""
    return min(max(scaled_float(x), 1.0), ceiling)


def _ceiling(rows: Iterable[float]) -> float:
    """The most rows a join of relations with ``rows`` (before filters) can have: their cross
    product, at least 1 and at most :data:`MAX_ROWS`."""
    return clamp_rows(scaled_product(rows), MAX_ROWS)


def not_a_date(value: object, ref: ColumnRef, table: str,
               stats: ColumnStats | None) -> str | None:
    """Why ``value`` cannot be compared with column ``ref`` (of ``table``), or None.

    A column whose statistics are dates takes only ISO dates (``NULL`` aside): ``'yesterday'``,
    ``'1995-13-45'`` or a number has no place on its day axis, and the estimate would silently
    fall back to a default selectivity.
    """
    if stats is None or stats.kind != "date" or value is None or iso_date(value) is not None:
        return None  # (the statistics' kind first: cached, and most columns are not dates)
    written = f"'{short_text(value, 40)}'" if isinstance(value, str) else short_text(str(value))
    column = f"'{ref}'" + (f" ({table}.{ref.column})" if ref.alias != table else "")
    return f"{written} is not a valid ISO date (YYYY-MM-DD), but column {column} holds dates"


def fraction_below(stats: ColumnStats, value: object) -> float | None:
    """Fraction of a column's rows (``stats``) with ``column < value``; None when nothing
    numeric is known."""
    x = as_number(value)
    if x is None:
        return None
    if stats.histogram is not None:
        return stats.histogram.fraction_below(x)
    lo, hi = stats.numeric_range
    if lo is None or hi is None:
        return None
    if hi <= lo:
        return 0.0 if x <= lo else 1.0
    return _clamp01(share(x, lo, hi))


def _largest_first(kv: tuple[int, float]) -> tuple[int, int]:
    """Sort key of observations: larger relation sets first, ties by mask."""
    return -kv[0].bit_count(), kv[0]


class Estimator:
    """Cardinalities of relation sets of one query under given statistics (memoized)."""

    def __init__(self, query: Query, catalog: Catalog, adjustments: Adjustments | None = None,
                 previous: Estimator | None = None):
        """``previous``: the same query's estimator under earlier adjustments; estimates it
        has computed are reused for the relation sets no change reaches (:meth:`moved_masks`),
        so re-optimization after a delta recomputes only what the delta can move."""
        self.query = query
        self.catalog = catalog
        self.adj = adjustments or NO_ADJUSTMENTS
        self._card: dict[int, float] = {}
        self._sorted: tuple[int, np.ndarray, np.ndarray] | None = None
        """The memo as sorted arrays, and its size then (:meth:`_known`)."""
        self._by_set: tuple[int, np.ndarray | None] | None = None
        """The memo as a table indexed by set, NaN where a set is not in it, and its size
        then (:meth:`_table`)."""
        derived = previous is not None and previous.query is query and previous.catalog is catalog
        self._tables: dict[str, TableStats] = previous._tables if derived else {}
        """Alias → its table's statistics, looked up once (:meth:`table_stats`)."""
        self._check_dates = not derived
        """Check the filters' literals against date columns (:meth:`_check_literals`): they
        depend on the query and the catalog only, so an estimator derived from one under
        earlier statistics does not check them again."""
        if derived:
            assert previous is not None
            self._filter_sel, self._join_est = previous._filter_sel, previous._join_est
            self._base = [self.base_rows(r.alias) for r in query.relations]
        else:
            self._base, self._filter_sel, self._join_est = self._catalog_selectivities()
        self._leaf = [min(max(rows * sel, 1.0), max(rows, 1.0))  # clamped (module doc)
                      for rows, sel in zip(self._base, self._filter_sel, strict=True)]
        """Each relation's rows after its filters (:meth:`leaf_card` unless observed)."""
        given = self.adj.selectivities
        self._preds = [
            (both, given.get(p.key, est))
            for both, p, est in zip(query.join_masks, query.joins, self._join_est, strict=True)
        ] if given else list(zip(query.join_masks, self._join_est, strict=True))
        observed = self.adj.observations
        self._observed = sorted(observed.items(), key=_largest_first) if observed else []
        """The observations, largest sets first (ties by mask): the order in which
        :meth:`pinned_subsets` picks them."""
        self._propagate = self.adj.observed_supersets == "propagate"
        self._earlier: dict[int, float] = {}
        """``previous``'s estimates (the same value here unless a moved set is in the mask:
        the same factors multiplied in the same order — corrections keep their insertion
        order, and deltas only add them)."""
        self._moved: list[int] = []
        self._moved_from: Adjustments | None = None
        """The adjustments of the estimator ``_moved`` was computed against, same query and
        catalog (:meth:`moved_since`)."""
        if derived:
            assert previous is not None
            self._earlier, self._moved = previous._card, self.moved_masks(previous)
            self._moved_from = previous.adj
        self._card.update(self._known_leaves())

    def _known_leaves(self) -> dict[int, float]:
        """The single relations whose estimate is known without computing it: a relation's
        rows after its filters (``_leaf``) is :meth:`card` of its bit, bit for bit, unless an
        observation or a correction is on it — :meth:`_plain_card` multiplies ``1.0`` by it,
        no join predicate lies inside one relation, and it is within ``[1, rows before
        filters]`` already. Entered in the memo up front: a plan asks for every leaf's
        estimate, and under ``cout`` nothing else does."""
        corrected = [t for t in self.adj.corrections if t & (t - 1) == 0]
        if self._observed or 0 in corrected:
            return {}
        skip = sum(corrected)
        return {1 << i: rows for i, rows in enumerate(self._leaf) if not skip >> i & 1}

    def _catalog_selectivities(self) -> tuple[list[float], list[float], list[float]]:
        """Each relation's rows before filters and filter selectivity, and each join
        predicate's estimated selectivity (before ``sel`` deltas), in query order. The
        selectivities depend on the query and the catalog only, so an estimator derived from
        one under earlier adjustments shares them (and the date checks of the literals, made
        here, are not repeated). A relation's rows are read before its filters: an unknown
        table is reported before a bad literal of its filters."""
        rows, filters = [], []
        tables, table, filters_of = self._tables, self.catalog.table, self.query.filters_of
        selectivity = self.predicate_selectivity
        row_factors, table_rows = self.adj.alias_factors, self.adj.table_rows
        for r in self.query.relations:  # base_rows and filter_selectivity, inlined
            alias = r.alias
            stats = tables.get(alias)
            if stats is None:
                stats = tables[alias] = table(r.table)  # (table_stats)
            if stats.rate is not None:  # a stream (TableStats.is_stream)
                rows.append(self.base_rows(alias))
            else:
                n = table_rows.get(r.table, stats.rows) if table_rows else stats.rows
                rows.append(min(n * row_factors.get(alias, 1.0) if row_factors else n * 1.0,
                                MAX_ROWS))
            s = 1.0
            for p in filters_of(alias):
                s *= selectivity(p)
            filters.append(s)
        return rows, filters, [self.estimated_join_selectivity(p) for p in self.query.joins]

    # -- base relations ----------------------------------------------------------------------
    def table_stats(self, alias: str) -> TableStats:
        """The catalog's statistics of a relation's table (memoized per alias: estimation
        asks for them several times per relation)."""
        hit = self._tables.get(alias)
        if hit is None:
            hit = self._tables[alias] = self.catalog.table(self.query.table_of(alias))
        return hit

    def column(self, ref: ColumnRef) -> ColumnStats:
        return self.table_stats(ref.alias).columns.get(ref.column) or _NO_STATS

    def base_rows(self, alias: str) -> float:
        """Row count of a relation before its filters (catalog, then ``card`` deltas); a
        stream's is what its window holds, arrival rate × window (``rate``/``window``
        deltas). Inputs are checked against :data:`MAX_ROWS` where they enter; the ``min``
        keeps an :class:`Adjustments` built by hand from making a cost infinite."""
        table = self.query.table_of(alias)
        stats = self.table_stats(alias)
        if stats.is_stream:
            return min(self.arrival_rate(alias) * self.window(alias), MAX_ROWS)
        rows = self.adj.table_rows.get(table, stats.rows)
        return min(rows * self.adj.alias_factors.get(alias, 1.0), MAX_ROWS)

    def is_stream(self, alias: str) -> bool:
        return self.table_stats(alias).is_stream

    def arrival_rate(self, alias: str) -> float:
        """A stream's arrival rate before its filters, tuples/s (``rate`` deltas, then the
        catalog); 0 for a stored table (it arrives all at once, before the stream starts)."""
        stats = self.table_stats(alias)
        if not stats.is_stream:
            return 0.0
        return self.adj.stream_rates.get(self.query.table_of(alias), stats.rate)

    def window(self, alias: str) -> float:
        """A stream's window in seconds (``window`` deltas, then the query's window clause,
        then the catalog); infinite for a stored table (its tuples never expire)."""
        stats = self.table_stats(alias)
        if not stats.is_stream:
            return math.inf
        w = self.adj.windows.get(alias) or self.query.window_of.get(alias) or stats.window
        if w is None:  # (SQL refuses it when parsed; a Query built in Python may lack one)
            raise QueryError(f"query {self.query.name}: stream '{self.query.table_of(alias)}' "
                             f"(alias '{alias}') has no window, neither in the query nor in "
                             "the catalog")
        return w

    def filter_selectivity(self, alias: str) -> float:
        s = 1.0
        for p in self.query.filters_of(alias):
            s *= self.predicate_selectivity(p)
        return s

    def leaf_card(self, alias: str) -> float:
        """A relation's rows after its filters; an observed one's observation (clamped)."""
        i = self.query.index(alias)
        return self.card(1 << i) if self._observed else self._leaf[i]

    # -- filter predicates -------------------------------------------------------------------
    def predicate_selectivity(self, p: Predicate) -> float:
        if isinstance(p, Compare):
            stats = self.column(p.column)  # (once per predicate: the check and the estimate)
            self._check_literals(p.column, (p.value,), stats)
            return self._compare(p, stats)
        if isinstance(p, Between):
            stats = self.column(p.column)
            self._check_literals(p.column, (p.low, p.high), stats)
            lo, hi = fraction_below(stats, p.low), fraction_below(stats, p.high)
            if lo is None or hi is None:
                return DEFAULT_BETWEEN
            return _clamp01(hi - lo)
        if isinstance(p, InList):
            stats = self.column(p.column)
            self._check_literals(p.column, p.values, stats)
            d = stats.distinct
            k = len(set(p.values))
            return _clamp01(k / d if d else k * DEFAULT_EQ)
        if isinstance(p, Like):
            return DEFAULT_LIKE
        if isinstance(p, IsNull):
            return DEFAULT_IS_NULL
        if isinstance(p, Or):
            s = 0.0
            for item in p.items:
                si = self.predicate_selectivity(item)
                s = s + si - s * si
            return _clamp01(s)
        if isinstance(p, Not):
            return _clamp01(1.0 - self.predicate_selectivity(p.item))
        if isinstance(p, And):
            s = 1.0
            for item in p.items:
                s *= self.predicate_selectivity(item)
            return s
        if isinstance(p, Opaque):
            return DEFAULT_OPAQUE
        raise TypeError(f"unknown predicate {p!r}")

    def _check_literals(self, ref: ColumnRef, values: tuple[object, ...],
                        stats: ColumnStats) -> None:
        """Literals compared with a date column (``stats``, the column's statistics) must be
        ISO dates (:func:`not_a_date`). The SQL front-end rejects them first, with their
        position; this covers queries built otherwise, or estimated under another catalog."""
        if not self._check_dates or stats.kind != "date":
            return  # (the statistics' kind first: cached, and most columns are not dates)
        table = self.query.table_of(ref.alias)
        for v in values:
            why = not_a_date(v, ref, table, stats)
            if why is not None:
                raise QueryError(f"query {self.query.name}: {why}")

    @staticmethod
    def _compare(p: Compare, stats: ColumnStats) -> float:
        if p.op in ("=", "<>"):
            d = stats.distinct
            eq = 1.0 / d if d else DEFAULT_EQ
            return _clamp01(eq if p.op == "=" else 1.0 - eq)
        below = fraction_below(stats, p.value)
        if below is None:
            return DEFAULT_RANGE
        return below if p.op in ("<", "<=") else _clamp01(1.0 - below)

    # -- joins -------------------------------------------------------------------------------
    def column_distinct(self, ref: ColumnRef) -> float:
        d = self.column(ref).distinct
        if d:
            return d
        return max(1.0, self.table_stats(ref.alias).rows)

    def estimated_join_selectivity(self, p: JoinPredicate) -> float:
        """The estimate before any ``sel`` delta: ``1/max(distinct(a.x), distinct(b.y))``."""
        return 1.0 / max(self.column_distinct(p.left), self.column_distinct(p.right))

    def join_selectivity(self, p: JoinPredicate) -> float:
        return self.adj.selectivities.get(p.key, self.estimated_join_selectivity(p))

    # -- sets of relations -------------------------------------------------------------------
    def card(self, mask: int) -> float:
        """Estimated rows of the join of the relations in ``mask``: :meth:`raw_card` clamped to
        ``[1, cross product of their rows before filters]`` (module doc; memoized)."""
        hit = self._card.get(mask)
        if hit is not None:
            return hit
        hit = self._earlier.get(mask)
        if hit is not None:
            for m in self._moved:
                if m & mask == m:
                    break
            else:
                self._card[mask] = hit
                return hit
        c = self._observed_card(mask) if self._observed else None
        if c is None:
            c = self._plain_card(mask)
        if c is None:  # a product left the float range on the way: the exact path
            c = clamp_rows(self.raw_card(mask), self.ceiling(mask))
        self._card[mask] = c
        return c

    def _plain_card(self, mask: int) -> float | None:
        """:meth:`card` by plain float products, or None when a product might have left the
        normal float range on the way (then :func:`scaled_product` is exact, this is not).

        The fast path of the optimizers' hottest call: the same factors multiplied in the
        same order as :meth:`raw_card`, so while every partial product stays normal the
        result is its mantissa bit for bit. Leaf cards are at least 1 and selectivities at
        most 1, so the leaves' product only grows (overflow shows as ``inf``) and the
        predicates' only shrinks (an underflow shows below ``_TINY``); corrections, few and
        of any size, are checked one by one. The ceiling (the rows before filters) is a
        product of numbers at most ``MAX_ROWS``: ``inf`` or a subnormal clamp the same way
        as the exact product."""
        c, base = self._leaf_products(mask)
        return self._plain_rest(mask, c, base)

    def _plain_rest(self, mask: int, c: float, base: float) -> float | None:
        """:meth:`_plain_card` given the products of ``mask``'s leaf cards (``c``) and rows
        before filters (``base``): the predicates, the corrections, the clamp."""
        if c == math.inf:
            return None
        for both, sel in self._preds:
            if both & mask == both:
                c *= sel
        if not c > _TINY:
            return None
        for t, f in self.adj.corrections.items():
            if t & mask == t:
                c *= f
                if not _TINY < c < _HUGE:
                    return None
        return min(max(c, 1.0), min(max(base, 1.0), MAX_ROWS))

    def estimate_all(self, masks: Iterable[int]) -> None:
        """:meth:`card` of every set in ``masks`` not estimated yet, into the memo: what a
        search from scratch is about to ask for one by one (a plan space's csgs), without a
        call chain per set and with the leaves' products shared. Sets are taken in ascending
        order, so a set's prefix — the set without its highest relation, smaller — comes
        first: the leaves' product of the set is the prefix's times the highest relation's,
        the very multiplications of :meth:`_plain_card`'s ascending loop, so the same bits.
        Where observations decide estimates, or a product leaves the normal range, each set
        takes :meth:`card`."""
        known = self._card
        todo = sorted(m for m in masks if m not in known)
        if self._observed:
            for mask in todo:
                self.card(mask)
            return
        leaf, rows, rest = self._leaf, self._base, self._plain_rest
        products = {1 << i: pair for i, pair in enumerate(zip(leaf, rows, strict=True))}
        for mask in todo:
            top = mask.bit_length() - 1
            below = mask ^ (1 << top)
            hit = products.get(below) if below else (1.0, 1.0)
            if hit is None:  # a prefix that is no csg: its products by the loop
                hit = self._leaf_products(below)
            c, base = hit[0] * leaf[top], hit[1] * rows[top]
            products[mask] = (c, base)
            card = rest(mask, c, base)
            if card is None:
                self.card(mask)  # (the exact path; it enters the memo)
            else:
                known[mask] = card

    def _leaf_products(self, mask: int) -> tuple[float, float]:
        """The products of ``mask``'s leaf cards and of its rows before filters, from
        ``1.0``, the leaves in ascending order (:meth:`_plain_card`)."""
        c = base = 1.0
        m, leaf, rows = mask, self._leaf, self._base
        while m:
            low = m & -m
            i = low.bit_length() - 1
            c *= leaf[i]
            base *= rows[i]
            m ^= low
        return c, base

    def cards(self, masks: np.ndarray) -> np.ndarray:
        """:meth:`card` of many relation sets at once (``int64`` bitsets): the batch form the
        columnar callers use, memoized as :meth:`card` is. The sets estimated before are
        looked up in a sorted copy of the memo (:meth:`_known`); the others are estimated
        once each (:meth:`_estimated`) and entered. A costing rank by rank asks for the same
        few thousand sets in hundreds of batches of repeated masks (a set per plan): one
        estimate per set instead of one per row, and no loop over every predicate per batch
        (on large-clique-17, 44 of its 480 ms)."""
        masks = np.asarray(masks, dtype=np.int64)
        got = self._tabled(masks)
        if got is not None:
            return got
        keys, values = self._known()
        pos = np.searchsorted(keys, masks).clip(0, max(len(keys) - 1, 0))
        if len(keys) and bool((keys[pos] == masks).all()):
            return values[pos]
        new = np.unique(masks if not len(keys) else masks[keys[pos] != masks])
        got = self._estimated(new)
        self._card.update(zip(new.tolist(), got.tolist(), strict=True))
        keys, values = self._known_with(keys, values, new, got)
        return values[np.searchsorted(keys, masks)]

    def _tabled(self, masks: np.ndarray) -> np.ndarray | None:
        """:meth:`cards` of ``masks`` read off :meth:`_table`, one gather; None where a set
        is outside it or not estimated yet (then searched and estimated). Costing asks for
        the sets of a rank's new plans, tens of thousands a batch on large-clique-17, in a
        memo of its 131,071 csgs: a binary search each, not a read."""
        if not len(masks):
            return None
        table = self._table()
        if table is None or int(masks.min()) < 0 or int(masks.max()) >= len(table):
            return None
        got = table[masks]
        return None if np.isnan(got).any() else got

    def _table(self) -> np.ndarray | None:
        """The memo as a table indexed by set (NaN: not estimated), made again only when
        :meth:`card` has entered sets since; None where a set is above :data:`TABLED_SETS`
        (or negative)."""
        made = self._by_set
        if made is None or made[0] != len(self._card):
            keys, values = self._known()
            table = None
            if len(keys) and keys[0] >= 0 and keys[-1] < TABLED_SETS:
                table = np.full(int(keys[-1]) + 1, np.nan)
                table[keys] = values
            made = self._by_set = (len(self._card), table)
        return made[1]

    def _known(self) -> tuple[np.ndarray, np.ndarray]:
        """The memo as arrays sorted by set, made again only when :meth:`card` has entered
        sets since (the memo only grows, and an entry never changes)."""
        known = self._sorted
        if known is None or known[0] != len(self._card):
            keys = np.fromiter(self._card, np.int64, len(self._card))
            values = np.fromiter(self._card.values(), np.float64, len(self._card))
            order = np.argsort(keys)
            known = self._sorted = (len(self._card), keys[order], values[order])
        return known[1], known[2]

    def _known_with(self, keys: np.ndarray, values: np.ndarray, new: np.ndarray,
                    got: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_known` after entering the sets ``new`` (none known) with estimates ``got``
        into the memo: merged into the sorted arrays, not made again from the memo."""
        at = np.searchsorted(keys, new)
        keys, values = np.insert(keys, at, new), np.insert(values, at, got)
        self._sorted = (len(self._card), keys, values)
        return keys, values

    def _estimated(self, masks: np.ndarray) -> np.ndarray:
        """:meth:`card` of ``masks`` without the memo: the same factors multiplied in the same
        order as :meth:`_plain_card`, elementwise in float64, so each result is the same bits;
        a set whose product might leave the normal float range on the way, or whose estimate
        an observation decides, takes :meth:`card`."""
        return self._estimated_with(None, masks)[0]

    def _steps(self) -> list[tuple]:
        """The factors :meth:`_estimated` multiplies, in its order, each as ``(kind, key,
        values)``: per relation its rows after filters and before, the check for an
        infinite product, per join predicate its selectivity, the check for a product
        leaving the normal range, per correction its factor (memoized: the adjustments never
        change)."""
        got = self.__dict__.get("_steps_memo")
        if got is None:
            got = [("leaf", i, (leaf, rows))
                   for i, (leaf, rows) in enumerate(zip(self._leaf, self._base, strict=True))]
            got.append(("inf", 0, ()))
            got += [("pred", both, (sel,)) for both, sel in self._preds]
            got.append(("tiny", 0, ()))
            got += [("corr", t, (f,)) for t, f in self.adj.corrections.items()]
            self._steps_memo = got
        return got

    def _estimated_with(self, twin: Estimator | None, masks: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`_estimated` of ``masks`` here and, given a ``twin`` (the same query under
        other adjustments), there: each step's rows are selected once for both, and while
        both multiply the same factors they share one product; from the first factor that
        differs each multiplies its own. Every array sees exactly the operations its own
        estimator's pass would, in the same order: the same bits. Steps that do not line
        up (a correction one of them lacks) are run by each alone, after the shared ones."""
        k = len(masks)
        mine = self._steps()
        theirs = twin._steps() if twin is not None else []
        states = [[np.ones(k), np.ones(k), np.zeros(k, dtype=bool)]]
        n = len(mine)
        if twin is not None:
            n = next((j for j, (a, b) in enumerate(zip(mine, theirs, strict=False))
                      if a[:2] != b[:2]), min(len(mine), len(theirs)))
        with np.errstate(all="ignore"):
            for j in range(n):
                step = mine[j]
                rows = _step_rows(masks, step)
                if len(states) == 1 and twin is not None and theirs[j][2] != step[2]:
                    c, base, slow = states[0]
                    states.append([c.copy(), base.copy(), slow.copy()])
                _apply_step(states[0], step, rows)
                if len(states) == 2:
                    _apply_step(states[1], theirs[j], rows)
            if twin is not None and len(states) == 1:
                c, base, slow = states[0]
                states.append([c.copy(), base.copy(), slow.copy()])
            for state, steps in zip(states, (mine, theirs), strict=False):
                for step in steps[n:]:
                    _apply_step(state, step, _step_rows(masks, step))
        outs = [est._finished(masks, *state) for est, state in
                zip((self, twin), states, strict=False) if est is not None]
        return outs[0], (outs[1] if len(outs) > 1 else None)

    def _finished(self, masks: np.ndarray, c: np.ndarray, base: np.ndarray,
                  slow: np.ndarray) -> np.ndarray:
        """:meth:`_estimated`'s estimates from its products: clamped, and the sets it cannot
        answer on arrays (``slow``, or decided by an observation) taken from :meth:`card`."""
        out = np.minimum(np.maximum(c, 1.0), np.minimum(np.maximum(base, 1.0), MAX_ROWS))
        for t, _ in self._observed:  # observations decide these (:meth:`_observed_card`)
            slow |= (masks & t) == t if self._propagate else masks == t
        for j in np.flatnonzero(slow).tolist():
            out[j] = self.card(int(masks[j]))
        return out

    def prefetch(self, masks: list[int]) -> None:
        """Estimate, in one vectorized call (:meth:`_estimated`, the same bits), the sets among
        ``masks`` not estimated yet, ahead of their :meth:`card` calls: an optimizer about to
        ask for thousands of them one by one (a plan space's csgs) pays numpy's fixed cost
        once instead of a Python loop over relations and predicates per set."""
        known = self._card
        todo = [m for m in masks if m not in known]
        if todo:
            got = self._estimated(np.asarray(todo, dtype=np.int64)).tolist()
            known.update(zip(todo, got, strict=True))

    def differing(self, old: Estimator, masks: list[int], bulk: bool) -> set[int]:
        """Those of the relation sets ``masks`` (distinct) whose estimate here differs bit for
        bit from ``old``'s (a NaN never equals itself). ``bulk``: the sets not estimated here
        yet — on an update nearly all, as it asks about the sets its deltas reach — are
        estimated under both statistics in one vectorized pass (:meth:`_estimated_with`: the
        factors both share multiplied once) and compared as arrays, per set, not per
        caller's node; ``old``'s estimates of them are the same bits its memo holds or would
        (so they are compared, not entered there: ``old`` is done with)."""
        if not bulk:
            return {m for m in masks if self.card(m) != old.card(m)}
        mine = self._card
        known = [m for m in masks if m in mine]
        out = {m for m in known if mine[m] != old.card(m)}
        if len(known) < len(masks):
            todo = [m for m in masks if m not in mine]
            sets = np.asarray(todo, dtype=np.int64)
            now, was = self._estimated_with(old, sets)
            mine.update(zip(todo, now.tolist(), strict=True))
            out.update(sets[now != was].tolist())
        return out

    def raw_card(self, mask: int, *, without_correction: int | None = None) -> Scaled:
        """``Π card(r) × Π sel(p) × Π correction(T)`` over ``mask``, unclamped, as a
        :data:`Scaled` number. ``without_correction`` leaves out the correction on exactly
        that set (used to solve ``card {…} =N`` for its factor)."""
        factors = [leaf for i, leaf in enumerate(self._leaf) if mask >> i & 1]
        factors += [sel for both, sel in self._preds if both & mask == both]
        factors += [f for t, f in self.adj.corrections.items()
                    if t & mask == t and t != without_correction]
        return scaled_product(factors)

    def _observed_card(self, mask: int) -> float | None:
        """The estimate of ``mask`` when observations decide it (the set is observed, or under
        ``"propagate"`` has observed subsets), else None (the ordinary estimate)."""
        n = self.adj.observations.get(mask)
        if n is not None:
            return self.pinned(mask, n)
        if not self._propagate:
            return None
        picked = self.pinned_subsets(mask)
        if not picked:
            return None
        return clamp_rows(self.unpinned_card(mask, picked=picked), self.ceiling(mask))

    def pinned(self, mask: int, rows: float) -> float:
        """An observation of ``rows`` rows of ``mask`` as its estimate: clamped to
        ``[1, cross product]`` like every estimate (an empty result is 1 row; a catalog whose
        row counts are below what was observed cannot take the set above its ceiling)."""
        return min(max(rows, 1.0), self.ceiling(mask))

    def pinned_subsets(self, mask: int) -> list[int]:
        """The observed proper subsets of ``mask`` whose observations correct its estimate
        under ``"propagate"``: largest first (ties by mask), each disjoint from those picked
        before it, so no relation's error is corrected twice."""
        picked, used = [], 0
        for t, _ in self._observed:
            if t & mask == t and t != mask and not t & used:
                picked.append(t)
                used |= t
        return picked

    def unpinned_card(self, mask: int, *, without_correction: int | None = None,
                      picked: list[int] | None = None) -> Scaled:
        """``mask``'s estimate before clamping, as if ``mask`` itself were not observed:
        :meth:`raw_card` times, under ``"propagate"``, ``N_T / raw(T)`` for each of
        :meth:`pinned_subsets` (``picked``, if already known). A correction on a subset of
        ``T`` is in both ``raw(mask)`` and ``raw(T)`` and cancels: an observation is never
        moved by corrections of its subsets, nor are the supersets it corrects."""
        m, e = self.raw_card(mask, without_correction=without_correction)
        if picked is None:
            picked = self.pinned_subsets(mask) if self._propagate else []
        for t in picked:
            tm, te = self.raw_card(t)
            if tm == 0:  # (no factor is 0: leaves >= 1, selectivities and corrections > 0)
                continue
            m, shift = math.frexp(m * (self.pinned(t, self.adj.observations[t]) / tm))
            e += shift - te
        return m, e

    def ceiling(self, mask: int) -> float:
        """The largest estimate of ``mask``: the cross product of its relations' rows before
        filters, within ``[1, MAX_ROWS]``."""
        return _ceiling(rows for i, rows in enumerate(self._base) if mask >> i & 1)

    def moved_since(self, old: Estimator) -> list[int]:
        """:meth:`moved_masks` of ``old``, computed once when this estimator was derived from
        ``old`` (an update asks for it several times: estimates, stale nodes, their costs)."""
        if (old.adj is self._moved_from and old.query is self.query
                and old.catalog is self.catalog):
            return self._moved  # it depends on nothing else, and adjustments are immutable
        return self.moved_masks(old)

    def moved_masks(self, old: Estimator) -> list[int]:
        """What differs from ``old`` (the same query under earlier adjustments), as relation
        sets: the estimate of an expression may differ only if it contains one of them — a
        relation whose rows changed, both sides of a join whose selectivity changed, a set
        whose correction changed. Compares the adjusted inputs, not estimates (a delta that
        leaves every value as it was moves nothing)."""
        q, adj, was = self.query, self.adj, old.adj
        out = []
        # Adjustments.replace keeps the mappings a delta did not touch: skip those
        if (adj.table_rows is not was.table_rows or adj.alias_factors is not was.alias_factors
                or adj.stream_rates is not was.stream_rates or adj.windows is not was.windows):
            # (a window also enters the rate model's costs beyond the rows it holds; a stored
            # table's is infinite and its arrival rate 0 under any adjustments; ``_base`` is
            # each estimator's base_rows, read when it was made)
            out += [1 << i for i, (r, was, now) in enumerate(
                        zip(q.relations, old._base, self._base, strict=True))
                    if was != now or self.is_stream(r.alias) and (
                        old.window(r.alias) != self.window(r.alias)
                        or old.arrival_rate(r.alias) != self.arrival_rate(r.alias))]
        if adj.selectivities is not was.selectivities:  # (the only input of _preds' values)
            out += [both for (both, sel), (_, before) in zip(self._preds, old._preds, strict=True)
                    if sel != before]
        out += changed_factors(was.corrections, adj.corrections)
        out += changed_observations(was, adj)
        return out

    def groups(self) -> float:
        """Rows out of the final group-by: ``min(card, Π distinct(group columns))``."""
        rows = self.card(self.query.all_mask)
        if not self.query.group_by:
            return 1.0 if self.query.aggregates else rows
        g = scaled_float(scaled_product(self.column(ref).distinct or rows
                                        for ref in self.query.group_by))
        return max(1.0, min(rows, g))


def _step_rows(masks: np.ndarray, step: tuple) -> np.ndarray | None:
    """The sets a step of :meth:`Estimator._steps` applies to (None: all, a check)."""
    kind, key, _ = step
    if kind == "leaf":
        return (masks & (1 << key)) != 0
    if kind in ("pred", "corr"):
        return (masks & key) == key
    return None


def _apply_step(state: list[np.ndarray], step: tuple, rows: np.ndarray | None) -> None:
    """One step of :meth:`Estimator._estimated` on ``state`` (product, product before
    filters, sets to take the exact path for), in place: the operations of the plain loop."""
    c, base, slow = state
    kind, _, values = step
    if kind == "leaf":
        np.multiply(c, values[0], out=c, where=rows)
        np.multiply(base, values[1], out=base, where=rows)
    elif kind == "pred":
        np.multiply(c, values[0], out=c, where=rows)
    elif kind == "corr":
        np.multiply(c, values[0], out=c, where=rows)
        slow |= rows & ~((c > _TINY) & (c < _HUGE))
    elif kind == "inf":
        slow |= c == math.inf
    else:
        slow |= ~(c > _TINY)
