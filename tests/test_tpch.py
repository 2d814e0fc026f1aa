"""The built-in TPC-H catalog and the paper's query workload (Appendix B, Table 5)."""

from __future__ import annotations

import json

import pytest
import sqlglot
from sqlglot import exp

from reopt.costmodel.catalog import Catalog, as_number
from reopt.costmodel.errors import CatalogError, QueryError
from reopt.costmodel.tpch import (
    JOIN_QUERIES,
    PRIMARY_KEY,
    QUERIES,
    REPEAT_QUERIES,
    builtin_query_names,
    builtin_sql,
    tpch_catalog,
)

BASE_ROWS = {
    "part": 200_000,
    "supplier": 10_000,
    "partsupp": 800_000,
    "customer": 150_000,
    "orders": 1_500_000,
    "nation": 25,
    "region": 5,
}

TABLES_PER_QUERY = {
    "q1": 1,
    "q3": 3,
    "q5": 6,
    "q5s": 6,
    "q6": 1,
    "q10": 4,
    "q8join": 8,
    "q8joins": 8,
}

ALL_COLUMNS = {
    "part": 9,
    "supplier": 7,
    "partsupp": 5,
    "customer": 8,
    "orders": 9,
    "lineitem": 16,
    "nation": 4,
    "region": 3,
}


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return tpch_catalog()


def test_row_counts_sf1(cat: Catalog) -> None:
    for table, rows in BASE_ROWS.items():
        assert cat.table(table).rows == rows
    assert cat.table("lineitem").rows == 6_001_215


def test_row_counts_sf10() -> None:
    cat10 = tpch_catalog(10)
    for table, rows in BASE_ROWS.items():
        expected = rows if table in ("nation", "region") else rows * 10
        assert cat10.table(table).rows == expected
    assert cat10.table("lineitem").rows == 60_000_000
    assert cat10.table("orders").columns["o_custkey"].distinct == 1_000_000
    assert cat10.table("lineitem").columns["l_partkey"].distinct == 2_000_000
    assert cat10.table("nation").columns["n_nationkey"].distinct == 25


def test_all_standard_columns(cat: Catalog) -> None:
    assert set(cat.tables) == set(ALL_COLUMNS)
    for table, n in ALL_COLUMNS.items():
        assert len(cat.table(table).columns) == n, table
        prefix = "ps_" if table == "partsupp" else table[0] + "_"
        assert all(c.startswith(prefix) for c in cat.table(table).columns)


def test_primary_keys(cat: Catalog) -> None:
    for table, pk in PRIMARY_KEY.items():
        t = cat.table(table)
        assert t.indexes == (pk,)
        assert t.sorted_on == pk
        if table not in ("partsupp", "lineitem"):  # composite keys: the leading column repeats
            assert t.columns[pk].distinct == t.rows, table
    assert cat.table("partsupp").columns["ps_partkey"].distinct == cat.table("part").rows
    assert cat.table("lineitem").columns["l_orderkey"].distinct == cat.table("orders").rows


def test_spec_statistics_sf1(cat: Catalog) -> None:
    def stats(table: str, column: str) -> tuple:
        c = cat.table(table).columns[column]
        return c.distinct, c.min, c.max

    assert stats("orders", "o_custkey")[0] == 99_996
    # the largest customer key not a multiple of 3 (clause 4.2.3): 150000 = 3·50000 never orders
    assert stats("orders", "o_custkey")[1:] == (1, 149_999)
    assert stats("orders", "o_orderkey") == (1_500_000, 1, 6_000_000)
    assert stats("orders", "o_orderdate") == (2406, "1992-01-01", "1998-08-02")
    assert stats("lineitem", "l_shipdate") == (2526, "1992-01-02", "1998-12-01")
    assert stats("lineitem", "l_discount") == (11, 0.0, 0.10)
    assert stats("lineitem", "l_quantity") == (50, 1, 50)
    assert stats("lineitem", "l_suppkey")[0] == 10_000
    assert stats("part", "p_retailprice") == (20_899, 901.00, 2098.99)
    assert stats("lineitem", "l_extendedprice")[1:] == (901.00, 104949.50)
    assert stats("partsupp", "ps_suppkey")[0] == 10_000
    assert stats("customer", "c_acctbal")[1:] == (-999.99, 9999.99)
    assert stats("supplier", "s_acctbal")[1:] == (-999.99, 9999.99)
    for table, column, distinct in [
        ("customer", "c_mktsegment", 5),
        ("customer", "c_nationkey", 25),
        ("supplier", "s_nationkey", 25),
        ("nation", "n_nationkey", 25),
        ("nation", "n_name", 25),
        ("nation", "n_regionkey", 5),
        ("region", "r_regionkey", 5),
        ("region", "r_name", 5),
        ("lineitem", "l_returnflag", 3),
        ("lineitem", "l_linestatus", 2),
        ("orders", "o_orderpriority", 5),
        ("orders", "o_shippriority", 1),
        ("part", "p_type", 150),
        ("part", "p_size", 50),
        ("part", "p_brand", 25),
        ("part", "p_container", 40),
    ]:
        assert stats(table, column)[0] == distinct, (table, column)


@pytest.mark.parametrize("sf", [0.001, 0.1, 1, 3, 10, 100])
def test_statistics_consistent(sf: float) -> None:
    c = tpch_catalog(sf)
    for name, t in c.tables.items():
        assert t.rows >= 1
        for cname, s in t.columns.items():
            if s.distinct is not None:
                assert 1 <= s.distinct <= t.rows, (name, cname)
            if s.min is not None or s.max is not None:
                lo, hi = as_number(s.min), as_number(s.max)
                assert lo is not None and hi is not None and lo <= hi, (name, cname)


def test_catalog_round_trips(cat: Catalog) -> None:
    data = cat.to_dict()
    assert Catalog.from_dict(data).to_dict() == data
    assert Catalog.from_dict(json.loads(json.dumps(data))).to_dict() == data
    assert Catalog.from_dict(data).tables == cat.tables


def _tables_and_columns(sql: str) -> tuple[list[str], set[str]]:
    tree = sqlglot.parse_one(sql)
    tables = [t.name.lower() for t in tree.find_all(exp.Table)]
    columns = {c.name.lower() for c in tree.find_all(exp.Column)}
    return tables, columns


@pytest.mark.parametrize("name", list(QUERIES))
def test_query_references_exist(cat: Catalog, name: str) -> None:
    tables, columns = _tables_and_columns(QUERIES[name])
    assert len(tables) == TABLES_PER_QUERY[name]
    assert len(set(tables)) == len(tables)  # no self-joins, no aliases needed
    for t in tables:
        assert t in cat.tables, t
    in_scope = {c for t in tables for c in cat.table(t).columns}
    assert columns, name
    assert columns <= in_scope, sorted(columns - in_scope)


def test_query_texts_are_plain() -> None:
    for name, sql in QUERIES.items():
        upper = sql.upper()
        assert "CAST" not in upper and "GROUPBY" not in upper and "INTERVAL" not in upper, name
        assert "’" not in sql and "≤" not in sql and "≥" not in sql, name
        assert not sql.rstrip().endswith(";"), name
    assert "'1994-01-01'" in QUERIES["q5s"] and "199401" not in QUERIES["q5s"]
    assert "GROUP BY" not in QUERIES["q5s"] and "GROUP BY" not in QUERIES["q8joins"]
    assert "GROUP BY" in QUERIES["q5"] and "GROUP BY" in QUERIES["q8join"]
    assert "count(*)" in QUERIES["q1"]


def test_builtin_names() -> None:
    assert builtin_query_names() == [
        "q1", "q3", "q5", "q5s", "q6", "q10", "q8join", "q8joins",
        "q2join", "q7join", "q8", "q9join", "chain6", "star6", "pclerk", "psegment", "pnations",
        "rcregion", "rcsupp", "rcpart", "rcoffers", "rcchain", "rcnations",
    ]
    for name in builtin_query_names():
        sql = QUERIES.get(name) or JOIN_QUERIES.get(name) or REPEAT_QUERIES[name]
        assert builtin_sql(name) == sql
        assert builtin_sql(f"tpch:{name}") == sql
        assert builtin_sql(f"TPCH:{name.upper()}") == sql


def test_builtin_unknown_name_lists_valid_names() -> None:
    for bad in ["q7", "tpch:q2", "", "tpcds:q5"]:
        with pytest.raises(QueryError) as info:
            builtin_sql(bad)
        msg = str(info.value)
        assert "\n" not in msg
        for name in builtin_query_names():
            assert name in msg


def test_bad_scale_factor() -> None:
    for sf in [0, -1, float("nan"), float("inf")]:
        with pytest.raises(CatalogError):
            tpch_catalog(sf)


def test_q3_predicates_are_the_papers() -> None:
    """Q3 as the paper writes it (Section 3, the running example; TPC-H clause 2.4.3 with
    segment MACHINERY): o_orderdate < '1995-03-15' and l_shipdate > '1995-03-15'."""
    from reopt.api import Optimizer
    from reopt.costmodel.query import ColumnRef, Compare

    assert set(Optimizer("tpch:q3").query.filters) == {
        Compare(ColumnRef("customer", "c_mktsegment"), "=", "MACHINERY"),
        Compare(ColumnRef("orders", "o_orderdate"), "<", "1995-03-15"),
        Compare(ColumnRef("lineitem", "l_shipdate"), ">", "1995-03-15"),
    }
