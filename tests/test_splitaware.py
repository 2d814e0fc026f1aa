"""Split-aware estimates: a query's own range filter on the split column, estimated for each
range split (:mod:`reopt.costmodel.ranges`, :mod:`reopt.splitaware`).

The oracle of a split's share is a count over generated rows (pandas) or the split's rows in
the data (pyarrow); the oracle of the loop's answer is Spark SQL's answer to the query."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pyarrow.parquet as pq
import pytest

from reopt.api import Optimizer, load_catalog
from reopt.costmodel.cardinality import Estimator
from reopt.costmodel.query import Between, ColumnRef, Compare
from reopt.costmodel.ranges import Interval, axis, interval_of, split_shares
from reopt.execute import NodeRun
from reopt.splitaware import SplitAware

CATALOG = load_catalog(None, 0.01)
SHIPDATE = ColumnRef("lineitem", "l_shipdate")
CUTS = [dt.date(1993, 5, 17), dt.date(1994, 12, 20), dt.date(1995, 1, 1), dt.date(1995, 9, 3),
        dt.date(1996, 7, 1), dt.date(1997, 6, 30)]
"""Split bounds that miss q7join's 1995–1996, touch its ends, and straddle them."""
BOUNDS = list(zip([None, *CUTS], [*CUTS, None], strict=True))


def estimator(query: str) -> Estimator:
    o = Optimizer(f"tpch:{query}", CATALOG, optimizer="topdown-inc")
    return Estimator(o.query, o.catalog)


def uniform_days(per_day: int = 3) -> pd.Series:
    """Ship dates spread evenly over the catalog's [min, max] of ``l_shipdate``: the data
    its linear estimate describes."""
    stats = CATALOG.table("lineitem").columns["l_shipdate"]
    days = pd.date_range(stats.min, stats.max, freq="D").repeat(per_day)
    return pd.Series(days.date)


def in_split(days: pd.Series, lo: dt.date | None, hi: dt.date | None) -> pd.Series:
    keep = pd.Series(True, index=days.index)
    if lo is not None:
        keep &= days >= lo
    if hi is not None:
        keep &= days < hi
    return keep


@pytest.mark.parametrize("query, low, high", [("q7join", dt.date(1995, 1, 1),
                                               dt.date(1996, 12, 31)),
                                              ("q3", dt.date(1995, 3, 16), None)])
def test_shares_match_a_count_of_each_split(query, low, high):
    """Each split's share times its rows is the count of its rows the query's ship-date
    filter keeps, within a day's rows at each end; exactly 0 where none are kept, exactly 1
    where all are."""
    days = uniform_days()
    shares = split_shares(estimator(query), "lineitem", "l_shipdate", BOUNDS)
    assert shares is not None and not shares.filtered_otherwise
    wanted = in_split(days, low, None if high is None else high + dt.timedelta(days=1))
    for (lo, hi), share in zip(BOUNDS, shares.shares, strict=True):
        split = in_split(days, lo, hi)
        kept = int((split & wanted).sum())
        assert abs(share * split.sum() - kept) <= 2 * 3 + 1, (lo, hi)
        if kept == 0:
            assert share == 0.0
        if kept == split.sum():
            assert share == 1.0


def test_bounds_open_and_closed():
    """A split ``[d, …)`` and a filter ending at ``d``: empty for ``< d``, one day for
    ``<= d``; ``BETWEEN`` is closed at both ends."""
    d = dt.date(1995, 1, 1)
    split = Interval(axis(d), axis(dt.date(1995, 2, 1)), False, True)
    assert (interval_of(Compare(SHIPDATE, "<", "1995-01-01"), SHIPDATE) & split).empty
    at = interval_of(Compare(SHIPDATE, "<=", "1995-01-01"), SHIPDATE) & split
    assert at.point
    before = Interval(None, axis(d), False, True)
    assert (interval_of(Between(SHIPDATE, "1995-01-01", "1995-03-01"), SHIPDATE)
            & before).empty
    assert interval_of(Compare(SHIPDATE, "<>", "1995-01-01"), SHIPDATE) is None
    assert interval_of(Compare(ColumnRef("lineitem", "l_commitdate"), "<", "1995-01-01"),
                       SHIPDATE) is None


def test_no_filter_on_the_split_column_leaves_the_loop_as_it_was():
    """q5 has no lineitem filter, pnations' is on another column: nothing split-aware."""
    for q in ("q5", "pnations"):
        assert split_shares(estimator(q), "lineitem", "l_shipdate", BOUNDS) is None


def q7join_nodes(scan: int, joined: int) -> list[NodeRun]:
    return [NodeRun("hashjoin", "join", ("supplier", "lineitem"), 1.0, joined),
            NodeRun("tablescan", "scan", ("supplier",), 1.0, 100),
            NodeRun("tablescan", "scan", ("lineitem",), 1.0, scan, scanned=1000)]


def test_an_empty_scan_is_not_carried_to_a_split_that_is_not_empty():
    """After a split outside the filter (nothing observed), the next split is planned from
    its own range: its scan at rows × share, no set of it pinned at 0; after a split inside,
    a split outside is planned empty, every observed set of lineitem at 0."""
    rows = [1000] * len(BOUNDS)
    aware = SplitAware.of(estimator("q7join").query, estimator("q7join"), "lineitem",
                          "l_shipdate", rows, BOUNDS)
    assert aware is not None
    shares = aware.shares.shares
    assert shares[:3] == (0.0, 0.0, 0.0)  # up to 1994-12-31
    assert 0.4 < shares[5] < 0.6  # 1996-07-01 .. 1997-06-29: half inside
    assert aware.first() == ["card {lineitem} := 0"]
    after_empty = aware.after(1, 3, q7join_nodes(0, 0))
    assert after_empty == ["card supplier =100", "card lineitem =1000",
                           f"card {{lineitem}} := {round(1000 * shares[3])}"]
    assert shares[3] == 1.0  # 1995-01-01 .. 1995-09-02: inside
    inside = aware.after(3, 6, q7join_nodes(1000, 400))
    assert shares[6] == 0.0  # from 1997-06-30: after the filter
    assert inside[-2:] == ["card {lineitem} := 0", "card {supplier,lineitem} := 0"]
    later = aware.after(6, 5, q7join_nodes(0, 0))  # back inside: carried from split 3
    assert later[-2:] == [f"card {{lineitem}} := {round(1000 * shares[5])}",
                          f"card {{supplier,lineitem}} := {round(400 * shares[5])}"]


@pytest.mark.spark
def test_adaptive_plans_each_range_for_its_own_rows(spark, tpch_dir):
    """q7join over 4 ranges of ship dates: every split's filtered lineitem scan is estimated
    from its own range, close to its true count (pyarrow), and at 1 row (0 observed, clamped)
    where the range misses 1995–1996; the answer is Spark SQL's."""
    from reopt.adaptive import Loop
    from reopt.answer import spark_sql_digest

    loop = Loop(lambda: Optimizer("tpch:q7join", CATALOG, optimizer="topdown-inc"), tpch_dir,
                4, spark, by="range", column="l_shipdate")
    try:
        run = loop.run("adaptive")
        assert run.answer_digest == spark_sql_digest(loop.query, tpch_dir, spark)[1]
    finally:
        loop.close()
    ship = pd.Series(pq.read_table(tpch_dir / "lineitem.parquet", columns=["l_shipdate"])
                     ["l_shipdate"].to_pylist())
    wanted = in_split(ship, dt.date(1995, 1, 1), dt.date(1997, 1, 1))
    empty = 0
    for (lo, hi), split in zip(loop.splits.bounds, run.splits, strict=True):
        true = int((wanted & in_split(ship, lo, hi)).sum())
        scan = next(n for n in split.nodes if n.relations == ("lineitem",))
        assert scan.observed == true
        if true == 0:
            empty += 1
            assert scan.estimated == 1.0
        else:
            assert 0.8 * true <= scan.estimated <= 1.25 * true, (lo, hi)
    assert empty >= 1

