"""Split-aware estimates: a query's filters on one column, estimated inside a value range.

When the adaptive loop cuts a relation into ranges of a column (``reopt run --split-by
range``), every split's range on that column is known before it runs. A query's own filter
on the same column (``l_shipdate BETWEEN '1995-01-01' AND '1996-12-31'`` against a split of
1993's lines) then keeps nothing of some splits and everything of others, while its
selectivity from the catalog is the whole table's. :func:`split_shares` estimates, per split,
the fraction of the split's rows that pass the query's range filters on the column: zero
when the ranges do not overlap (the split is known empty for that scan), one when the split
lies inside the query's range, and the catalog's distribution (histogram, else linear on
``[min, max]``) restricted to the split's range in between.

Only conjunctive filters that are a range or an equality of the column with a literal
(``< <= > >= = BETWEEN``) are read as ranges; any other filter of the relation is assumed to
keep the same fraction of every split (its catalog selectivity).
"""

from __future__ import annotations

import datetime as _dt
import decimal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reopt.costmodel.cardinality import DEFAULT_EQ, Estimator, fraction_below
from reopt.costmodel.catalog import ColumnStats, as_number
from reopt.costmodel.query import Between, ColumnRef, Compare, Predicate


@dataclass(frozen=True)
class Interval:
    """Values between ``lo`` and ``hi`` on the estimator's numeric axis (dates as day
    numbers); None is unbounded; ``*_open`` excludes the bound itself."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def __and__(self, other: Interval) -> Interval:
        lo, lo_open = _tighter(self.lo, self.lo_open, other.lo, other.lo_open, max)
        hi, hi_open = _tighter(self.hi, self.hi_open, other.hi, other.hi_open, min)
        return Interval(lo, hi, lo_open, hi_open)

    @property
    def empty(self) -> bool:
        if self.lo is None or self.hi is None:
            return False
        return self.lo > self.hi or (self.lo == self.hi and (self.lo_open or self.hi_open))

    def on_days(self) -> Interval:
        """The same days as ``[lo, hi)``: a date column holds whole days, so ``<= d`` keeps
        what ``< d + 1`` keeps and ``> d`` what ``>= d + 1`` does (a day is the unit
        interval from its number on)."""
        lo = self.lo + 1 if self.lo is not None and self.lo_open else self.lo
        hi = self.hi + 1 if self.hi is not None and not self.hi_open else self.hi
        return Interval(lo, hi, False, True)

    @property
    def point(self) -> bool:
        return self.lo is not None and self.lo == self.hi and not self.empty


def _tighter(a: float | None, a_open: bool, b: float | None, b_open: bool,
             pick: Any) -> tuple[float | None, bool]:
    """The tighter of two bounds of the same side (``pick``: ``max`` for lower bounds,
    ``min`` for upper ones); at a tie, open if either is."""
    if a is None:
        return b, b_open
    if b is None or a != b:
        return (a, a_open) if b is None or pick(a, b) == a else (b, b_open)
    return a, a_open or b_open


def axis(v: Any) -> float | None:
    """A value (a literal of the query, a split's bound as Spark returns it) on the
    estimator's numeric axis (:func:`~reopt.costmodel.catalog.as_number`); None if it has
    no place there."""
    if isinstance(v, (_dt.date, _dt.datetime)):
        v = v.isoformat()
    elif isinstance(v, decimal.Decimal):
        v = float(v)
    return as_number(v)


_BOUNDS = {"<": (False, True), "<=": (False, False), ">": (True, True), ">=": (True, False)}
"""A comparison's side (``True``: a lower bound) and whether its bound is open."""


def interval_of(p: Predicate, ref: ColumnRef) -> Interval | None:
    """The values of ``ref`` a filter keeps, when it is a range or an equality of ``ref``
    with literals on the numeric axis; else None (not a range of this column)."""
    if isinstance(p, Between) and p.column == ref:
        lo, hi = axis(p.low), axis(p.high)
        return None if lo is None or hi is None else Interval(lo, hi)
    if not isinstance(p, Compare) or p.column != ref or p.op == "<>":
        return None
    x = axis(p.value)
    if x is None:
        return None
    if p.op == "=":
        return Interval(x, x)
    lower, is_open = _BOUNDS[p.op]
    return Interval(x, None, is_open) if lower else Interval(None, x, False, is_open)


def _below(stats: ColumnStats, x: float | None, default: float) -> float | None:
    return default if x is None else fraction_below(stats, x)


def share_within(stats: ColumnStats, wanted: Interval, within: Interval) -> float | None:
    """Estimated fraction of the rows whose value lies in ``within`` that also lie in
    ``wanted``, from the column's statistics: 0 when the two do not overlap, None when the
    statistics place no value."""
    both = wanted & within
    if both.empty:
        return 0.0
    a, b = _below(stats, within.lo, 0.0), _below(stats, within.hi, 1.0)
    c, d = _below(stats, both.lo, 0.0), _below(stats, both.hi, 1.0)
    if a is None or b is None or c is None or d is None:
        return None
    if b <= a:  # the statistics put no rows in the split's range: it cannot tell
        return 1.0
    if both.point:
        eq = 1.0 / stats.distinct if stats.distinct else DEFAULT_EQ
        return min(1.0, eq / (b - a))
    return min(1.0, max(0.0, (d - c) / (b - a)))


@dataclass(frozen=True)
class SplitShares:
    """Per split, the estimated fraction of its rows passing the query's range filters on
    the split column (``shares``), and the catalog selectivity of the relation's other
    filters (``others``; 1 when ``filtered_otherwise`` is false: it has none)."""

    shares: tuple[float, ...]
    others: float
    filtered_otherwise: bool


def split_shares(est: Estimator, alias: str, column: str,
                 bounds: Sequence[tuple[Any, Any]]) -> SplitShares | None:
    """:class:`SplitShares` of relation ``alias`` cut into splits ``[lo, hi)`` of
    ``column`` (``bounds``; None is unbounded); None when the query has no range filter on
    that column the statistics can place (every split then keeps the same fraction)."""
    ref = ColumnRef(alias, column)
    wanted, others = Interval(), 1.0
    ranged = otherwise = False
    for p in est.query.filters_of(alias):
        got = interval_of(p, ref)
        if got is None:
            others *= est.predicate_selectivity(p)
            otherwise = True
        else:
            wanted, ranged = wanted & got, True
    if not ranged:
        return None
    stats = est.column(ref)
    if stats.kind == "date":
        wanted = wanted.on_days()
    shares = []
    for lo, hi in bounds:
        within = Interval(axis(lo), axis(hi), False, True)
        if (lo is not None and within.lo is None) or (hi is not None and within.hi is None):
            return None
        s = share_within(stats, wanted, within)
        if s is None:
            return None
        shares.append(s)
    return SplitShares(tuple(shares), others, otherwise)
