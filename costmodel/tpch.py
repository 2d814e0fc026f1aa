"""The TPC-H catalog at any scale factor, and the paper's query workload (its Appendix B, Table 5).

Catalog
-------
:func:`tpch_catalog` describes the eight TPC-H tables with *all* their columns (a catalog's
columns are the schema a query may reference). Every number comes from the TPC-H specification
(v2/v3), clause 4.2 ("Database population"), unless marked otherwise:

* **Row counts** (clause 4.2.5): part ``200000*SF``, supplier ``10000*SF``, partsupp
  ``800000*SF`` (4 suppliers per part), customer ``150000*SF``, orders ``1500000*SF`` (10 per
  customer), nation 25 and region 5 at every scale factor. Lineitem has 1..7 lines per order
  (uniform, mean 4), so ``6000000*SF`` rows are expected; at SF 1 we use the exact count dbgen
  produces, 6001215, and ``6000000*SF`` at any other scale factor. Fractional scale factors are
  rounded to whole rows.
* **Keys** (clause 4.2.3): ``p_partkey``, ``s_suppkey``, ``c_custkey`` are dense ``1..rows``;
  ``n_nationkey`` is ``0..24``, ``r_regionkey`` and ``n_regionkey`` ``0..4``; ``c_nationkey`` and
  ``s_nationkey`` are uniform over the 25 nations. ``o_orderkey`` is *sparse*: only the first 8
  of every 32 keys are used (dbgen's ``mk_sparse``), so the keys are unique but span
  ``1..4*orders`` (6000000 at SF 1). ``o_custkey`` never names a customer whose key is a
  multiple of 3 (a third of the customers have no orders): ``C - C//3`` eligible keys for
  ``C = 150000*SF``; at SF 1 dbgen actually hits 99996 of the 100000, the value used there.
  ``l_orderkey`` takes every order key (distinct = orders rows); ``l_partkey`` is uniform over
  all parts and ``l_suppkey`` over all suppliers; ``ps_partkey`` covers every part (4 rows each)
  and ``ps_suppkey`` every supplier.
* **Value domains** (clause 4.2.3): ``p_mfgr`` 5 values, ``p_brand`` 25 (``Brand#MN``),
  ``p_type`` 150 (6x5x5 syllables), ``p_size`` 1..50, ``p_container`` 40 (5x8),
  ``p_retailprice = (90000 + (p_partkey/10 mod 20001) + 100*(p_partkey mod 1000))/100`` (its
  min/max/distinct are computed exactly from the formula: 901.00..2098.99, 20899 values at SF 1),
  ``ps_availqty`` 1..9999, ``ps_supplycost`` 1.00..1000.00, ``s_acctbal``/``c_acctbal``
  -999.99..9999.99, ``c_mktsegment`` 5, ``o_orderstatus`` 3 (F/O/P), ``o_orderpriority`` 5,
  ``o_clerk`` ``Clerk#`` 1..1000*SF, ``o_shippriority`` always 0, ``l_linenumber`` 1..7,
  ``l_quantity`` 1..50, ``l_discount`` 0.00..0.10 (11 values), ``l_tax`` 0.00..0.08 (9),
  ``l_returnflag`` 3 (R/A/N), ``l_linestatus`` 2 (O/F), ``l_shipinstruct`` 4, ``l_shipmode`` 7,
  ``n_name`` 25 and ``r_name`` 5. ``l_extendedprice = l_quantity * p_retailprice`` (so its range
  is 1x..50x the retail price range; its distinct count is bounded by 50x the retail prices).
* **Dates** (clause 4.2.3): ``o_orderdate`` is uniform in ``STARTDATE .. ENDDATE - 151 days`` =
  1992-01-01 .. 1998-08-02 (2406 days); ``l_shipdate = o_orderdate + 1..121`` days (1992-01-02 ..
  1998-12-01, 2526 days); ``l_commitdate = o_orderdate + 30..90`` (1992-01-31 .. 1998-10-31,
  2466 days); ``l_receiptdate = l_shipdate + 1..30`` (1992-01-03 .. 1998-12-31, 2555 days).
  Dates are ISO strings in the catalog.
* **Text** (names, addresses, phones, comments): ``*_name`` of part/supplier/customer,
  addresses and phone numbers are (practically) unique, so distinct = rows. Comments are random
  text from the spec's grammar and almost never repeat (dbgen at SF 1: 149968 distinct
  ``c_comment`` of 150000, 1482071 ``o_comment`` of 1500000); we use distinct = rows as an upper
  bound. ``n_comment``/``r_comment`` are fixed distinct texts.
* **o_totalprice** has no closed form (a sum over the order's lines); its range 857.71 ..
  555285.16 is what dbgen produces at SF 1 (it hardly depends on SF) and distinct = rows.

* **Widths** (bytes a value takes in a row, what the ``dist`` model's broadcast limit reads):
  text is 12 bytes plus its mean length (:data:`TEXT_LENGTH`: the mean UTF-8 length in
  ``tpchgen-cli``'s SF 1 data; where clause 4.2.3 gives a length range — comments, addresses,
  e.g. ``c_comment`` 29..116 characters — it is the range's midpoint to 0.1), 32-bit integers
  (:data:`INT32_COLUMNS`) 4; other numbers (64-bit keys, decimals) 8 and dates 4 are the
  catalog's defaults by kind.

Every distinct count is capped at the table's rows (tiny scale factors). No histograms: dbgen
draws uniformly, so estimation interpolates on min/max. Each table has an index on its leading
primary-key column (partsupp: ``ps_partkey``, lineitem: ``l_orderkey``) and is ``sorted_on`` it,
since dbgen emits rows in key order.

Queries
-------
:data:`QUERIES` is the paper's workload (Appendix B, Table 5: TPC-H Q1, Q3, Q5, Q6, Q10 and the
8-way Q8Join, plus the "S" variants without the final aggregation), transcribed verbatim except:
typographic quotes and ``≤``/``≥`` become ASCII, ``GROUPBY`` becomes ``GROUP BY``, Q5's stray
``CAST(`` is dropped, Q5S's ``'199401-01'`` is ``'1994-01-01'`` (as in Q5), the trailing ``;`` is
dropped, and Q6's constant arithmetic ``0.06 - 0.01``/``0.06 + 0.01`` is folded to ``0.05`` and
``0.07`` (the front-end compares a column with a literal).

:data:`JOIN_QUERIES` are nine more multi-join queries (5-8 relations) written for the adaptive
loop's workload (``reopt run``, issue 20), not the paper's: each has filters and a final
aggregate whose partials combine (``SUM``, ``COUNT``, ``MIN``, ``MAX`` by group keys), and each
has another join-graph shape: ``q2join`` (part-partsupp-supplier-nation-region, a chain from
part to region), ``q7join`` (supplier and customer each with their own ``nation`` alias, the two
nations in one region: a cycle of six), ``q8`` (TPC-H Q8's eight relations, two nation aliases
and region), ``q9join`` (TPC-H Q9's joins written as a cyclic graph: partsupp joins supplier,
part and lineitem, lineitem joins supplier and part too, so the graph has the cycles
lineitem-supplier-partsupp and lineitem-part-partsupp), ``chain6``
(region-nation-customer-orders-lineitem-part, a pure chain) and ``star6`` (lineitem as the hub
of orders, part and supplier; customer and nation one step out).

The last three ask about *partially shipped* orders (``o_orderstatus = 'P'``), a filter
whose textbook estimate is off by more than 10x on every TPC-H data set, skewed or not
(clause 4.2.3): a line's ``l_linestatus`` is ``'O'`` when it ships after CURRENTDATE
(1995-06-17), else ``'F'``, and an order is ``'F'`` when all its lines are, ``'O'`` when all
are, else ``'P'``; only orders whose lines straddle 1995-06-17 are ``'P'``, about 2.6% of them
(tpchgen-cli at SF 1: 38,543 of 1,500,000), where ``1/distinct`` gives 1/3 (13x too many).
At SF 1 under ``dist`` such a filtered orders input is estimated above the 10 MB broadcast
limit and is truly far below it, so the plan made from the catalog shuffles lineitem to join
it where a plan made from observations broadcasts it: a misestimate that changes what the
plan does, not only its estimated cost (``BENCHMARKS.md``, "Where adapting pays").
``pclerk`` (revenue of partial orders by clerk and priority; orders-lineitem-part, lineitem-
supplier-nation-region), ``psegment`` (by customer segment and nation; lineitem the hub of
orders, part and supplier, customer and its nation off orders) and ``pnations`` (by the
supplier's and the customer's nation, customers outside one region; Q8's graph without
part; on ``reopt data tpch --correlate`` data only its 20 same-nation groups are left).

Repeat customers
----------------
:data:`REPEAT_QUERIES` (``rcregion``, ``rcsupp``, ``rcpart``, ``rcoffers``, ``rcchain``,
``rcnations``; 5-8 relations) pair the late lines of one month's orders (``o1``: March 1995,
lines shipped from 1995-07-15, more than 106 days after the order) with every urgent open
1995 order (``o2``) of the same customer: ``orders`` twice, joined many-to-many through
``customer``. Three estimates go wrong, each for a reason real data has:

* ``o1``'s two bounds on ``o_orderdate`` are estimated independently (0.55 x 0.47 of the
  orders, about 384,000 at SF 1, against the 19,000 of one month);
* ``o2``'s status and date are correlated (an order is ``'O'`` only when all its lines ship
  after 1995-06-17), and its estimate multiplies them;
* on ``reopt data tpch --skew Z`` data a year's orders come mostly from a few hot customers,
  so ``o1 ⋈ customer ⋈ o2`` is far above ``|o1| |o2| / distinct(o_custkey)``: at SF 1 with
  ``--skew 1`` about 4 million pairs against 85,000 estimated (on uniform data it is below
  the estimate).

So the plan made from the catalog builds the pairs as a broadcast table, on every split of
lineitem, to probe with the few late lines; a plan made from observed rows joins the late
lines to ``o1`` first and never forms the pairs (``BENCHMARKS.md``, "A setting where the
catalog's plan is wrong").
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
from typing import Any

from reopt.costmodel.catalog import TEXT_OVERHEAD, Catalog
from reopt.costmodel.errors import CatalogError, QueryError
from reopt.costmodel.numeric import MAX_ROWS, compact, is_finite_number

__all__ = [
    "JOIN_QUERIES", "QUERIES", "REPEAT_QUERIES", "builtin_query_names", "builtin_sql",
    "tpch_catalog",
]

# --- catalog ----------------------------------------------------------------------------------

#: Table -> columns in the order of the TPC-H specification (clause 1.4).
SCHEMA: dict[str, tuple[str, ...]] = {
    "part": (
        "p_partkey", "p_name", "p_mfgr", "p_brand", "p_type", "p_size", "p_container",
        "p_retailprice", "p_comment",
    ),
    "supplier": (
        "s_suppkey", "s_name", "s_address", "s_nationkey", "s_phone", "s_acctbal", "s_comment",
    ),
    "partsupp": ("ps_partkey", "ps_suppkey", "ps_availqty", "ps_supplycost", "ps_comment"),
    "customer": (
        "c_custkey", "c_name", "c_address", "c_nationkey", "c_phone", "c_acctbal",
        "c_mktsegment", "c_comment",
    ),
    "orders": (
        "o_orderkey", "o_custkey", "o_orderstatus", "o_totalprice", "o_orderdate",
        "o_orderpriority", "o_clerk", "o_shippriority", "o_comment",
    ),
    "lineitem": (
        "l_orderkey", "l_partkey", "l_suppkey", "l_linenumber", "l_quantity", "l_extendedprice",
        "l_discount", "l_tax", "l_returnflag", "l_linestatus", "l_shipdate", "l_commitdate",
        "l_receiptdate", "l_shipinstruct", "l_shipmode", "l_comment",
    ),
    "nation": ("n_nationkey", "n_name", "n_regionkey", "n_comment"),
    "region": ("r_regionkey", "r_name", "r_comment"),
}

#: Text column -> its average length in bytes (module doc, "Widths").
TEXT_LENGTH: dict[str, float] = {
    "p_name": 32.8, "p_mfgr": 14.0, "p_brand": 8.0, "p_type": 20.6, "p_container": 7.6,
    "p_comment": 13.5, "s_name": 18.0, "s_address": 25.0, "s_phone": 15.0,
    "s_comment": 62.5, "ps_comment": 123.5, "c_name": 18.0, "c_address": 25.0,
    "c_phone": 15.0, "c_mktsegment": 9.0, "c_comment": 72.5, "o_orderstatus": 1.0,
    "o_orderpriority": 8.4, "o_clerk": 15.0, "o_comment": 48.5, "l_returnflag": 1.0,
    "l_linestatus": 1.0, "l_shipinstruct": 12.0, "l_shipmode": 4.3, "l_comment": 26.5,
    "n_name": 7.1, "n_comment": 74.3, "r_name": 6.8, "r_comment": 66.0,
}
#: Columns stored as 32-bit integers (module doc, "Widths").
INT32_COLUMNS = frozenset({"p_size", "ps_availqty", "o_shippriority", "l_linenumber"})

#: Table -> its leading primary-key column (indexed, and the order dbgen writes rows in).
PRIMARY_KEY: dict[str, str] = {
    "part": "p_partkey",
    "supplier": "s_suppkey",
    "partsupp": "ps_partkey",
    "customer": "c_custkey",
    "orders": "o_orderkey",
    "lineitem": "l_orderkey",
    "nation": "n_nationkey",
    "region": "r_regionkey",
}

_LINEITEM_ROWS_SF1 = 6001215  # exact dbgen output at SF 1 (expected value: 6000000)
_O_CUSTKEY_DISTINCT_SF1 = 99996  # exact dbgen output at SF 1 (eligible keys: 100000)


def _days(lo: str, hi: str) -> int:
    """Number of calendar days in the inclusive range ``lo .. hi``."""
    return (_dt.date.fromisoformat(hi) - _dt.date.fromisoformat(lo)).days + 1


def _scaled(base: int, sf: float) -> int:
    return max(1, round(base * sf))


def _sparse_orderkey(i: int) -> int:
    """dbgen's ``mk_sparse``: the key of the ``i``-th order (1-based); keeps 8 of every 32 keys."""
    return ((i >> 3) << 5) + (i & 7)


@functools.lru_cache(maxsize=16)
def _retailprice_stats(parts: int) -> tuple[float, float, int]:
    """Exact (min, max, distinct) of ``p_retailprice`` over ``p_partkey = 1..parts``.

    The price is ``(90000 + (pk // 10 mod 20001) + 100 * (pk mod 1000)) / 100``; the offset over
    90000 lies in ``0..119900`` and is periodic in ``pk`` with period lcm(200010, 1000), so only
    that many keys need to be looked at.
    """
    period = 20_001_000
    if parts >= period:  # every offset 0..119900 occurs once a whole period is covered
        return 900.00, 2099.00, 119_901
    import numpy as np  # a dependency of pandas; only needed here

    seen = np.zeros(119_901, dtype=bool)
    chunk = 1 << 20
    for start in range(1, parts + 1, chunk):
        pk = np.arange(start, min(parts + 1, start + chunk), dtype=np.int64)
        seen[(pk // 10) % 20001 + 100 * (pk % 1000)] = True
    offsets = np.flatnonzero(seen)
    return (90000 + int(offsets[0])) / 100, (90000 + int(offsets[-1])) / 100, len(offsets)


def _is_sf1(sf: float) -> bool:
    return math.isclose(sf, 1.0, rel_tol=0.0, abs_tol=1e-12)


def tpch_catalog(sf: float = 1.0) -> Catalog:
    """The TPC-H catalog at scale factor ``sf`` (see the module docstring for every number)."""
    if not is_finite_number(sf) or sf <= 0:
        raise CatalogError(f"tpch: scale factor must be a finite number > 0, got {sf!r}")
    sf = float(sf)
    if 6_000_000 * sf > MAX_ROWS:  # lineitem, the largest table; round() would overflow
        raise CatalogError(
            f"tpch: scale factor {compact(sf)} gives lineitem {compact(6e6 * sf)} rows, above "
            f"the limit of {compact(MAX_ROWS)} (estimates and costs must stay finite)"
        )
    P = _scaled(200_000, sf)
    S = _scaled(10_000, sf)
    PS = 4 * P
    C = _scaled(150_000, sf)
    ORD = _scaled(1_500_000, sf)
    LI = _LINEITEM_ROWS_SF1 if _is_sf1(sf) else _scaled(6_000_000, sf)
    rows = {
        "part": P, "supplier": S, "partsupp": PS, "customer": C, "orders": ORD, "lineitem": LI,
        "nation": 25, "region": 5,
    }

    def col(distinct: float | None = None, lo: Any = None, hi: Any = None) -> dict[str, Any]:
        d: dict[str, Any] = {}
        if distinct is not None:
            d["distinct"] = distinct
        if lo is not None:
            d["min"] = lo
        if hi is not None:
            d["max"] = hi
        return d

    def key(n: int, lo: int = 1) -> dict[str, Any]:
        return col(n, lo, lo + n - 1)

    def dates(lo: str, hi: str) -> dict[str, Any]:
        return col(_days(lo, hi), lo, hi)

    acctbal = col(1_099_999, -999.99, 9999.99)  # cents from -999.99 to 9999.99
    rp_min, rp_max, rp_distinct = _retailprice_stats(P)
    o_custkey = _O_CUSTKEY_DISTINCT_SF1 if _is_sf1(sf) else C - C // 3
    o_custkey_max = C if C % 3 else C - 1

    columns: dict[str, dict[str, dict[str, Any]]] = {
        "part": {
            "p_partkey": key(P),
            "p_name": col(P),
            "p_mfgr": col(5),
            "p_brand": col(25),
            "p_type": col(150),
            "p_size": col(50, 1, 50),
            "p_container": col(40),
            "p_retailprice": col(rp_distinct, rp_min, rp_max),
            "p_comment": col(P),
        },
        "supplier": {
            "s_suppkey": key(S),
            "s_name": col(S),
            "s_address": col(S),
            "s_nationkey": key(25, 0),
            "s_phone": col(S),
            "s_acctbal": dict(acctbal),
            "s_comment": col(S),
        },
        "partsupp": {
            "ps_partkey": key(P),
            "ps_suppkey": key(S),
            "ps_availqty": col(9999, 1, 9999),
            "ps_supplycost": col(99_901, 1.00, 1000.00),
            "ps_comment": col(PS),
        },
        "customer": {
            "c_custkey": key(C),
            "c_name": col(C),
            "c_address": col(C),
            "c_nationkey": key(25, 0),
            "c_phone": col(C),
            "c_acctbal": dict(acctbal),
            "c_mktsegment": col(5),
            "c_comment": col(C),
        },
        "orders": {
            "o_orderkey": col(ORD, 1, _sparse_orderkey(ORD)),
            "o_custkey": col(o_custkey, 1, o_custkey_max),
            "o_orderstatus": col(3),
            "o_totalprice": col(ORD, 857.71, 555285.16),
            "o_orderdate": dates("1992-01-01", "1998-08-02"),
            "o_orderpriority": col(5),
            "o_clerk": col(_scaled(1000, sf)),
            "o_shippriority": col(1, 0, 0),
            "o_comment": col(ORD),
        },
        "lineitem": {
            "l_orderkey": col(ORD, 1, _sparse_orderkey(ORD)),
            "l_partkey": key(P),
            "l_suppkey": key(S),
            "l_linenumber": col(7, 1, 7),
            "l_quantity": col(50, 1, 50),
            "l_extendedprice": col(50 * rp_distinct, rp_min, round(50 * rp_max, 2)),
            "l_discount": col(11, 0.0, 0.10),
            "l_tax": col(9, 0.0, 0.08),
            "l_returnflag": col(3),
            "l_linestatus": col(2),
            "l_shipdate": dates("1992-01-02", "1998-12-01"),
            "l_commitdate": dates("1992-01-31", "1998-10-31"),
            "l_receiptdate": dates("1992-01-03", "1998-12-31"),
            "l_shipinstruct": col(4),
            "l_shipmode": col(7),
            "l_comment": col(LI),
        },
        "nation": {
            "n_nationkey": key(25, 0),
            "n_name": col(25),
            "n_regionkey": key(5, 0),
            "n_comment": col(25),
        },
        "region": {
            "r_regionkey": key(5, 0),
            "r_name": col(5),
            "r_comment": col(5),
        },
    }

    tables: dict[str, Any] = {}
    for table, names in SCHEMA.items():
        cols = columns[table]
        assert tuple(cols) == names, table  # the schema above is the single source of truth
        for name, c in cols.items():
            if "distinct" in c:
                c["distinct"] = min(c["distinct"], rows[table])
            if name in TEXT_LENGTH:
                c["width"] = TEXT_OVERHEAD + TEXT_LENGTH[name]
            elif name in INT32_COLUMNS:
                c["width"] = 4.0
        tables[table] = {
            "rows": rows[table],
            "columns": cols,
            "indexes": [PRIMARY_KEY[table]],
            "sorted_on": PRIMARY_KEY[table],
        }
    return Catalog.from_dict({"tables": tables}, source=f"tpch(sf={sf:g})")


# --- queries ----------------------------------------------------------------------------------

QUERIES: dict[str, str] = {
    "q1": """\
SELECT l_returnflag, l_linestatus, sum(l_quantity) as sum_qty,
       sum(l_extendedprice) as sum_base_price,
       sum(l_extendedprice * (1 - l_discount)) as sum_disc_price,
       sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) as sum_charge,
       avg(l_quantity) as avg_qty, avg(l_extendedprice) as avg_price,
       avg(l_discount) as avg_disc, count(*) as count_order
FROM lineitem
WHERE l_shipdate <= '1998-09-01'
GROUP BY l_returnflag, l_linestatus""",
    "q3": """\
SELECT l_orderkey, sum(l_extendedprice * (1 - l_discount)) as revenue, o_orderdate,
       o_shippriority
FROM customer, orders, lineitem
WHERE c_mktsegment = 'MACHINERY' and c_custkey = o_custkey and l_orderkey = o_orderkey
  and o_orderdate < '1995-03-15' and l_shipdate > '1995-03-15'
GROUP BY l_orderkey, o_orderdate, o_shippriority""",
    "q5": """\
SELECT n_name, sum(l_extendedprice * (1 - l_discount)) as revenue
FROM customer, orders, lineitem, supplier, nation, region
WHERE c_custkey = o_custkey and l_orderkey = o_orderkey and l_suppkey = s_suppkey
  and c_nationkey = s_nationkey and s_nationkey = n_nationkey and n_regionkey = r_regionkey
  and r_name = 'AMERICA' and o_orderdate >= '1993-01-01' and o_orderdate < '1994-01-01'
GROUP BY n_name""",
    "q5s": """\
SELECT n_name, l_extendedprice * (1 - l_discount)
FROM customer, orders, lineitem, supplier, nation, region
WHERE c_custkey = o_custkey and l_orderkey = o_orderkey and l_suppkey = s_suppkey
  and c_nationkey = s_nationkey and s_nationkey = n_nationkey and n_regionkey = r_regionkey
  and r_name = 'AMERICA' and o_orderdate >= '1993-01-01' and o_orderdate < '1994-01-01'""",
    "q6": """\
SELECT sum(l_extendedprice * l_discount) as revenue
FROM lineitem
WHERE l_shipdate >= '1994-01-01' and l_shipdate < '1995-01-01'
  and l_discount >= 0.05 and l_discount <= 0.07 and l_quantity < 24.2""",
    "q10": """\
SELECT c_custkey, c_name, sum(l_extendedprice * (1 - l_discount)) as revenue, c_acctbal,
       n_name, c_address, c_phone, c_comment
FROM customer, orders, lineitem, nation
WHERE c_custkey = o_custkey and l_orderkey = o_orderkey and o_orderdate >= '1993-06-01'
  and o_orderdate < '1993-09-01' and l_returnflag = 'R' and c_nationkey = n_nationkey
GROUP BY c_custkey, c_name, c_acctbal, c_phone, n_name, c_address, c_comment""",
    "q8join": """\
SELECT c_name, p_name, ps_availqty, s_name, o_custkey, r_name, n_name,
       sum(l_extendedprice * (1 - l_discount))
FROM orders, lineitem, customer, part, partsupp, supplier, nation, region
WHERE o_orderkey = l_orderkey and c_custkey = o_custkey and p_partkey = l_partkey
  and ps_partkey = p_partkey and s_suppkey = ps_suppkey and r_regionkey = n_regionkey
  and s_nationkey = n_nationkey
GROUP BY c_name, p_name, ps_availqty, s_name, o_custkey, r_name, n_name""",
    "q8joins": """\
SELECT c_name, p_name, ps_availqty, s_name, o_custkey, r_name, n_name,
       l_extendedprice * (1 - l_discount)
FROM orders, lineitem, customer, part, partsupp, supplier, nation, region
WHERE o_orderkey = l_orderkey and c_custkey = o_custkey and p_partkey = l_partkey
  and ps_partkey = p_partkey and s_suppkey = ps_suppkey and r_regionkey = n_regionkey
  and s_nationkey = n_nationkey""",
}

JOIN_QUERIES: dict[str, str] = {
    "q2join": """\
SELECT n_name, min(ps_supplycost) as min_cost, count(*) as offers
FROM part, partsupp, supplier, nation, region
WHERE p_partkey = ps_partkey and s_suppkey = ps_suppkey and s_nationkey = n_nationkey
  and n_regionkey = r_regionkey and p_size = 15 and p_type like '%BRASS'
  and r_name = 'EUROPE'
GROUP BY n_name""",
    "q7join": """\
SELECT n1.n_name as supp_nation, n2.n_name as cust_nation,
       sum(l_extendedprice * (1 - l_discount)) as revenue
FROM supplier, lineitem, orders, customer, nation n1, nation n2
WHERE s_suppkey = l_suppkey and o_orderkey = l_orderkey and c_custkey = o_custkey
  and s_nationkey = n1.n_nationkey and c_nationkey = n2.n_nationkey
  and n1.n_regionkey = n2.n_regionkey and n1.n_regionkey = 3
  and l_shipdate >= '1995-01-01' and l_shipdate <= '1996-12-31'
GROUP BY n1.n_name, n2.n_name""",
    "q8": """\
SELECT n2.n_name as supp_nation, sum(l_extendedprice * (1 - l_discount)) as volume
FROM part, supplier, lineitem, orders, customer, nation n1, nation n2, region
WHERE p_partkey = l_partkey and s_suppkey = l_suppkey and l_orderkey = o_orderkey
  and o_custkey = c_custkey and c_nationkey = n1.n_nationkey
  and n1.n_regionkey = r_regionkey and r_name = 'AMERICA'
  and s_nationkey = n2.n_nationkey and o_orderdate >= '1995-01-01'
  and o_orderdate <= '1996-12-31' and p_type = 'ECONOMY ANODIZED STEEL'
GROUP BY n2.n_name""",
    "q9join": """\
SELECT n_name, sum(l_extendedprice * (1 - l_discount) - ps_supplycost * l_quantity) as profit
FROM part, supplier, lineitem, partsupp, orders, nation
WHERE s_suppkey = l_suppkey and ps_suppkey = s_suppkey and ps_partkey = p_partkey
  and p_partkey = l_partkey and ps_partkey = l_partkey and o_orderkey = l_orderkey
  and s_nationkey = n_nationkey
  and p_name like '%green%' and o_orderdate >= '1995-01-01'
GROUP BY n_name""",
    "chain6": """\
SELECT r_name, count(*) as lines, sum(l_quantity) as quantity
FROM region, nation, customer, orders, lineitem, part
WHERE r_regionkey = n_regionkey and n_nationkey = c_nationkey and c_custkey = o_custkey
  and o_orderkey = l_orderkey and l_partkey = p_partkey and o_orderpriority = '1-URGENT'
  and l_shipmode in ('AIR', 'MAIL') and c_acctbal > 0 and p_size <= 25
GROUP BY r_name""",
    "star6": """\
SELECT n_name, c_mktsegment, count(*) as lines, max(l_discount) as max_discount
FROM lineitem, orders, customer, part, supplier, nation
WHERE l_orderkey = o_orderkey and o_custkey = c_custkey and l_partkey = p_partkey
  and l_suppkey = s_suppkey and s_nationkey = n_nationkey and p_brand = 'Brand#23'
  and o_orderdate >= '1994-01-01' and o_orderdate < '1996-01-01'
GROUP BY n_name, c_mktsegment""",
    "pclerk": """\
SELECT o_clerk, o_orderpriority, count(*) as lines,
       sum(l_extendedprice * (1 - l_discount)) as revenue
FROM orders, lineitem, part, supplier, nation, region
WHERE o_orderkey = l_orderkey and l_partkey = p_partkey and l_suppkey = s_suppkey
  and s_nationkey = n_nationkey and n_regionkey = r_regionkey
  and o_orderstatus = 'P' and p_size <= 40 and r_name <> 'ASIA'
GROUP BY o_clerk, o_orderpriority""",
    "psegment": """\
SELECT c_mktsegment, n_name, count(*) as lines, sum(l_extendedprice * (1 - l_discount)) as revenue
FROM orders, lineitem, customer, nation, part, supplier
WHERE o_orderkey = l_orderkey and c_custkey = o_custkey and c_nationkey = n_nationkey
  and l_partkey = p_partkey and l_suppkey = s_suppkey and o_orderstatus = 'P'
  and p_size <= 30 and s_acctbal > 0
GROUP BY c_mktsegment, n_name""",
    "pnations": """\
SELECT n1.n_name as supp_nation, n2.n_name as cust_nation, count(*) as lines,
       sum(l_extendedprice * (1 - l_discount)) as revenue
FROM supplier, lineitem, orders, customer, nation n1, nation n2, region
WHERE s_suppkey = l_suppkey and o_orderkey = l_orderkey and c_custkey = o_custkey
  and s_nationkey = n1.n_nationkey and c_nationkey = n2.n_nationkey
  and n2.n_regionkey = r_regionkey and r_name <> 'AFRICA' and o_orderstatus = 'P'
  and l_shipmode <> 'AIR'
GROUP BY n1.n_name, n2.n_name""",
}

_REPEAT_CUSTOMERS = """\
l_orderkey = o1.o_orderkey and o1.o_custkey = c_custkey and o2.o_custkey = c_custkey
  and o1.o_orderdate >= '1995-03-01' and o1.o_orderdate < '1995-04-01'
  and l_shipdate >= '1995-07-15'
  and o2.o_orderdate >= '1995-01-01' and o2.o_orderdate < '1996-01-01'
  and o2.o_orderpriority = '1-URGENT' and o2.o_orderstatus = 'O'"""
"""The predicates :data:`REPEAT_QUERIES` share: late lines (shipped from 1995-07-15) of March
1995 orders (``o1``), each paired with every urgent open 1995 order (``o2``) of the same
customer."""

REPEAT_QUERIES: dict[str, str] = {
    "rcregion": f"""\
SELECT r_name, count(*) as pairs, sum(l_extendedprice * (1 - l_discount)) as revenue
FROM lineitem, orders o1, customer, orders o2, nation, region
WHERE {_REPEAT_CUSTOMERS}
  and c_nationkey = n_nationkey and n_regionkey = r_regionkey
GROUP BY r_name""",
    "rcsupp": f"""\
SELECT n_name, count(*) as pairs, sum(l_extendedprice * (1 - l_discount)) as revenue
FROM lineitem, orders o1, customer, orders o2, supplier, nation
WHERE {_REPEAT_CUSTOMERS}
  and l_suppkey = s_suppkey and s_nationkey = n_nationkey
GROUP BY n_name""",
    "rcpart": f"""\
SELECT p_container, n_name, count(*) as pairs, max(l_discount) as max_discount
FROM lineitem, orders o1, customer, orders o2, part, nation
WHERE {_REPEAT_CUSTOMERS}
  and l_partkey = p_partkey and c_nationkey = n_nationkey and p_size <= 25
GROUP BY p_container, n_name""",
    "rcoffers": f"""\
SELECT c_mktsegment, count(*) as offers, min(ps_supplycost) as min_cost
FROM lineitem, orders o1, customer, orders o2, partsupp
WHERE {_REPEAT_CUSTOMERS}
  and ps_partkey = l_partkey
GROUP BY c_mktsegment""",
    "rcchain": f"""\
SELECT r_name, count(*) as pairs, sum(l_quantity) as quantity
FROM lineitem, orders o1, customer, orders o2, supplier, nation, region
WHERE {_REPEAT_CUSTOMERS}
  and l_suppkey = s_suppkey and s_nationkey = n_nationkey and n_regionkey = r_regionkey
GROUP BY r_name""",
    "rcnations": f"""\
SELECT n1.n_name as supp_nation, r_name, count(*) as pairs,
       sum(l_extendedprice * (1 - l_discount)) as revenue
FROM lineitem, orders o1, customer, orders o2, supplier, nation n1, nation n2, region
WHERE {_REPEAT_CUSTOMERS}
  and l_suppkey = s_suppkey and s_nationkey = n1.n_nationkey
  and c_nationkey = n2.n_nationkey and n2.n_regionkey = r_regionkey
GROUP BY n1.n_name, r_name""",
}
"""Six queries (5-8 relations) on which the plan made from the catalog is wrong on skewed
data (module doc, "Repeat customers")."""

BUILTIN: dict[str, str] = {**QUERIES, **JOIN_QUERIES, **REPEAT_QUERIES}
"""Every built-in query: the paper's workload, then the loop's own join queries, then the
repeat-customer queries."""

_PREFIX = "tpch:"


def builtin_query_names() -> list[str]:
    """The built-in query names (``q1`` ...): the paper's, in its order, then
    :data:`JOIN_QUERIES` and :data:`REPEAT_QUERIES`; ``tpch:q1`` works as well."""
    return list(BUILTIN)


def builtin_sql(name: str) -> str:
    """The SQL text of built-in query ``name`` (``"q5"`` or ``"tpch:q5"``, any case)."""
    key = name.strip().lower() if isinstance(name, str) else ""
    if key.startswith(_PREFIX):
        key = key[len(_PREFIX):].strip()
    try:
        return BUILTIN[key]
    except KeyError:
        valid = ", ".join(_PREFIX + n for n in BUILTIN)
        raise QueryError(
            f"unknown built-in query {name!r}; valid names: {valid} ('tpch:' is optional)"
        ) from None
