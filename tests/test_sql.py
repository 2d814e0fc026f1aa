"""The SQL front-end: accepted shapes map to the Query model; everything else is a QueryError
that names the construct (or the bad name) and its position."""

from __future__ import annotations

from pathlib import Path

import pytest

from reopt.api import Optimizer, load_query
from reopt.cli import main
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.errors import CatalogError, QueryError, ReoptError
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
    Query,
    Relation,
)
from reopt.costmodel.sql import parse_query
from reopt.costmodel.tpch import builtin_query_names, tpch_catalog


def _table(rows: int, *columns: str) -> dict:
    return {"rows": rows, "columns": {c: {} for c in columns}}


# A small schema; ``name`` exists in both nation and region to exercise ambiguity.
CATALOG = Catalog.from_dict(
    {
        "tables": {
            "orders": _table(1500, "o_orderkey", "o_custkey", "o_orderdate", "o_totalprice"),
            "customer": _table(150, "c_custkey", "c_name", "c_nationkey"),
            "nation": _table(25, "n_nationkey", "name", "n_regionkey"),
            "region": _table(5, "r_regionkey", "name"),
        }
    }
)

# The standard TPC-H columns of the tables the TPC-H queries below use.
TPCH = Catalog.from_dict(
    {
        "tables": {
            "customer": _table(
                150000, "c_custkey", "c_name", "c_address", "c_nationkey", "c_phone",
                "c_acctbal", "c_mktsegment", "c_comment",
            ),
            "orders": _table(
                1500000, "o_orderkey", "o_custkey", "o_orderstatus", "o_totalprice",
                "o_orderdate", "o_orderpriority", "o_clerk", "o_shippriority", "o_comment",
            ),
            "lineitem": _table(
                6000000, "l_orderkey", "l_partkey", "l_suppkey", "l_linenumber", "l_quantity",
                "l_extendedprice", "l_discount", "l_tax", "l_returnflag", "l_linestatus",
                "l_shipdate", "l_commitdate", "l_receiptdate", "l_shipinstruct", "l_shipmode",
                "l_comment",
            ),
            "supplier": _table(
                10000, "s_suppkey", "s_name", "s_address", "s_nationkey", "s_phone",
                "s_acctbal", "s_comment",
            ),
            "nation": _table(25, "n_nationkey", "n_name", "n_regionkey", "n_comment"),
            "region": _table(5, "r_regionkey", "r_name", "r_comment"),
        }
    }
)


def q(sql: str) -> Query:
    return parse_query(sql, CATALOG, "q5")


def error(sql: str, catalog: Catalog = CATALOG) -> str:
    with pytest.raises(QueryError) as info:
        parse_query(sql, catalog, "q5")
    message = str(info.value)
    assert "\n" not in message
    return message


def filter_of(condition: str):
    """The single filter of ``SELECT * FROM orders o, customer c WHERE <condition>``."""
    query = q(f"SELECT * FROM orders o, customer c WHERE {condition}")
    assert query.joins == ()
    assert len(query.filters) == 1, query.filters
    return query.filters[0]


O_KEY = ColumnRef("o", "o_orderkey")
O_CUST = ColumnRef("o", "o_custkey")
O_DATE = ColumnRef("o", "o_orderdate")
O_PRICE = ColumnRef("o", "o_totalprice")
C_KEY = ColumnRef("c", "c_custkey")
C_NAME = ColumnRef("c", "c_name")


# --- FROM, aliases, joins -------------------------------------------------------------------


def test_alias_forms_and_comma_join() -> None:
    query = q("SELECT * FROM orders o, customer AS c, nation WHERE o.o_custkey = c.c_custkey")
    assert query.relations == (
        Relation("o", "orders"),
        Relation("c", "customer"),
        Relation("nation", "nation"),
    )
    assert query.joins == (JoinPredicate.of(O_CUST, C_KEY),)
    assert query.filters == ()
    assert query.name == "q5"
    assert not query.has_final


def test_query_keeps_original_text_and_name() -> None:
    sql = "select *\n  from orders   -- all of them\n"
    query = parse_query(sql, CATALOG, "mine")
    assert query.sql == sql
    assert query.name == "mine"
    assert query.relations == (Relation("orders", "orders"),)
    assert parse_query("SELECT * FROM orders", CATALOG).name == "query"


def test_names_are_case_insensitive() -> None:
    query = q('SELECT O.O_CUSTKEY FROM ORDERS AS O, Customer c WHERE "O"."O_CUSTKEY" = C.C_custkey')
    assert query.relations == (Relation("o", "orders"), Relation("c", "customer"))
    assert query.joins == (JoinPredicate.of(O_CUST, C_KEY),)


def test_explicit_join_on_conditions_are_conjuncts() -> None:
    query = q(
        "SELECT * FROM orders o INNER JOIN customer c ON o.o_custkey = c.c_custkey"
        " AND c.c_name = 'x' JOIN nation n ON n.n_nationkey = c.c_nationkey"
        " WHERE o.o_totalprice > 10"
    )
    assert query.aliases == ("o", "c", "n")
    assert query.joins == (
        JoinPredicate.of(O_CUST, C_KEY),
        JoinPredicate.of(ColumnRef("n", "n_nationkey"), ColumnRef("c", "c_nationkey")),
    )
    # ON conjuncts come first (text order), then WHERE.
    assert query.filters == (Compare(C_NAME, "=", "x"), Compare(O_PRICE, ">", 10))


def test_join_on_and_comma_mixed() -> None:
    query = q(
        "SELECT * FROM orders o JOIN customer c ON c.c_custkey = o.o_custkey, nation n"
        " WHERE n.n_nationkey = c.c_nationkey"
    )
    assert query.aliases == ("o", "c", "n")
    assert len(query.joins) == 2


def test_duplicate_join_predicates_are_kept_once() -> None:
    query = q(
        "SELECT * FROM orders o JOIN customer c ON o.o_custkey = c.c_custkey"
        " WHERE c.c_custkey = o.o_custkey AND o.o_custkey = c.c_custkey"
    )
    assert query.joins == (JoinPredicate.of(O_CUST, C_KEY),)


def test_self_join() -> None:
    query = q("SELECT * FROM orders a, orders b WHERE a.o_orderkey = b.o_custkey")
    assert query.relations == (Relation("a", "orders"), Relation("b", "orders"))
    a_key, b_cust = ColumnRef("a", "o_orderkey"), ColumnRef("b", "o_custkey")
    assert query.joins == (JoinPredicate.of(a_key, b_cust),)


def test_unqualified_columns_resolve_to_their_unique_relation() -> None:
    query = q(
        "SELECT c_name FROM orders o, customer c WHERE o_custkey = c_custkey AND c_name = 'a'"
    )
    assert query.joins == (JoinPredicate.of(O_CUST, C_KEY),)
    assert query.filters == (Compare(C_NAME, "=", "a"),)


def test_parenthesized_where_conjunction_is_split() -> None:
    query = q(
        "SELECT * FROM orders o, customer c WHERE (o.o_custkey = c.c_custkey AND c.c_name = 'a')"
    )
    assert query.joins == (JoinPredicate.of(O_CUST, C_KEY),)
    assert query.filters == (Compare(C_NAME, "=", "a"),)


def test_parenthesized_statement_is_accepted() -> None:
    assert q("(SELECT * FROM orders o)").relations == (Relation("o", "orders"),)


def test_trailing_semicolon_is_accepted() -> None:
    assert q("SELECT * FROM orders o;").aliases == ("o",)


# --- filter shapes --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("o.o_totalprice = 5", Compare(O_PRICE, "=", 5)),
        ("o.o_totalprice <> 5", Compare(O_PRICE, "<>", 5)),
        ("o.o_totalprice != 5", Compare(O_PRICE, "<>", 5)),
        ("o.o_totalprice < 5.5", Compare(O_PRICE, "<", 5.5)),
        ("o.o_totalprice <= -2", Compare(O_PRICE, "<=", -2)),
        ("o.o_totalprice > 1e3", Compare(O_PRICE, ">", 1000.0)),
        ("o.o_totalprice >= 0", Compare(O_PRICE, ">=", 0)),
        ("c.c_name = 'Bob'", Compare(C_NAME, "=", "Bob")),
        ("o.o_totalprice = NULL", Compare(O_PRICE, "=", None)),
        # literal on the left: the operator is flipped
        ("5 < o.o_totalprice", Compare(O_PRICE, ">", 5)),
        ("5 <= o.o_totalprice", Compare(O_PRICE, ">=", 5)),
        ("5 > o.o_totalprice", Compare(O_PRICE, "<", 5)),
        ("5 >= o.o_totalprice", Compare(O_PRICE, "<=", 5)),
        ("5 = o.o_totalprice", Compare(O_PRICE, "=", 5)),
        ("5 <> o.o_totalprice", Compare(O_PRICE, "<>", 5)),
        ("(o.o_totalprice) = (5)", Compare(O_PRICE, "=", 5)),
        ("o.o_totalprice BETWEEN 1 AND 10", Between(O_PRICE, 1, 10)),
        ("o.o_totalprice IN (1, 2.5, 3)", InList(O_PRICE, (1, 2.5, 3))),
        ("c.c_name IN ('a', 'b')", InList(C_NAME, ("a", "b"))),
        ("c.c_name LIKE 'PROMO%'", Like(C_NAME, "PROMO%")),
        ("c.c_name NOT LIKE '%x'", Not(Like(C_NAME, "%x"))),
        ("c.c_name IS NULL", IsNull(C_NAME)),
        ("c.c_name IS NOT NULL", Not(IsNull(C_NAME))),
        ("o.o_totalprice NOT IN (1, 2)", Not(InList(O_PRICE, (1, 2)))),
        ("o.o_totalprice NOT BETWEEN 1 AND 2", Not(Between(O_PRICE, 1, 2))),
        ("NOT o.o_totalprice = 1", Not(Compare(O_PRICE, "=", 1))),
        (
            "(o.o_totalprice = 1 OR o.o_custkey < 3 OR o.o_orderkey IS NULL)",
            Or((Compare(O_PRICE, "=", 1), Compare(O_CUST, "<", 3), IsNull(O_KEY))),
        ),
        (
            "(o.o_totalprice = 1 OR (o.o_custkey = 2 AND o.o_orderkey > 3))",
            Or((Compare(O_PRICE, "=", 1), And((Compare(O_CUST, "=", 2), Compare(O_KEY, ">", 3))))),
        ),
        (
            "NOT (c.c_name LIKE 'a%' OR c.c_name = 'b')",
            Not(Or((Like(C_NAME, "a%"), Compare(C_NAME, "=", "b")))),
        ),
    ],
)
def test_filter_shapes(condition: str, expected: object) -> None:
    assert filter_of(condition) == expected


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("o.o_totalprice >= 0.06 - 0.01", Compare(O_PRICE, ">=", 0.05)),
        ("o.o_totalprice <= 0.06 + 0.01", Compare(O_PRICE, "<=", 0.07)),
        ("o.o_totalprice < 2 * 3", Compare(O_PRICE, "<", 6)),
        ("o.o_totalprice < 7 / 2", Compare(O_PRICE, "<", 3.5)),
        ("o.o_totalprice > -(1 + 2)", Compare(O_PRICE, ">", -3)),
        ("0.06 - 0.01 <= o.o_totalprice", Compare(O_PRICE, ">=", 0.05)),
        ("o.o_totalprice BETWEEN 0.06 - 0.01 AND 0.06 + 0.01", Between(O_PRICE, 0.05, 0.07)),
        ("o.o_totalprice IN (1 + 1, 2 * 2)", InList(O_PRICE, (2, 4))),
        ("o.o_orderdate < DATE '1995-03-15'", Compare(O_DATE, "<", "1995-03-15")),
        ("o.o_orderdate >= CAST('1994-01-01' AS DATE)", Compare(O_DATE, ">=", "1994-01-01")),
        ("DATE '1994-01-01' > o.o_orderdate", Compare(O_DATE, "<", "1994-01-01")),
        ("o.o_orderdate < '1995-03-15'", Compare(O_DATE, "<", "1995-03-15")),
        (
            "o.o_orderdate < DATE '1993-10-01' + INTERVAL '3' MONTH",
            Compare(O_DATE, "<", "1994-01-01"),
        ),
        (
            "o.o_orderdate BETWEEN DATE '1995-01-01' AND DATE '1996-12-31'",
            Between(O_DATE, "1995-01-01", "1996-12-31"),
        ),
        ("c.c_name LIKE 'PRO' || '%'", Like(C_NAME, "PRO%")),
    ],
)
def test_literals_are_folded(condition: str, expected: Compare) -> None:
    got = filter_of(condition)
    assert got == expected
    value = got.value if isinstance(got, Compare) else None
    if isinstance(expected, Compare) and isinstance(expected.value, int):
        assert type(value) is int


@pytest.mark.parametrize(
    ("condition", "alias", "text"),
    [
        ("o.o_custkey = o.o_orderkey", "o", "o.o_custkey = o.o_orderkey"),
        ("upper(c.c_name) = 'X'", "c", "UPPER(c.c_name) = 'X'"),
        ("o.o_totalprice + 1 > 5", "o", "o.o_totalprice + 1 > 5"),
        ("o.o_totalprice = 1 / 0", "o", "o.o_totalprice = 1 / 0"),
        ("c.c_name ILIKE 'x%'", "c", "c.c_name ILIKE 'x%'"),
        ("o.o_totalprice IN (1, o.o_custkey)", "o", "o.o_totalprice IN (1, o.o_custkey)"),
        ("c.c_name LIKE c.c_name", "c", "c.c_name LIKE c.c_name"),
    ],
)
def test_other_single_relation_conditions_are_opaque(condition: str, alias: str, text: str) -> None:
    assert filter_of(condition) == Opaque(alias, text)


def test_opaque_leaf_inside_or() -> None:
    got = filter_of("(o.o_custkey = o.o_orderkey OR o.o_totalprice = 2)")
    assert got == Or((Opaque("o", "o.o_custkey = o.o_orderkey"), Compare(O_PRICE, "=", 2)))


def test_filters_keep_where_order() -> None:
    query = q(
        "SELECT * FROM orders o, customer c WHERE c.c_name = 'a' AND o.o_custkey = c.c_custkey"
        " AND o.o_totalprice > 3 AND c.c_custkey < 9"
    )
    assert query.filters == (
        Compare(C_NAME, "=", "a"),
        Compare(O_PRICE, ">", 3),
        Compare(C_KEY, "<", 9),
    )
    assert query.filters_of("c") == (Compare(C_NAME, "=", "a"), Compare(C_KEY, "<", 9))


# --- SELECT list, GROUP BY, aggregates, ORDER BY ----------------------------------------------


def test_select_list_forms() -> None:
    query = q(
        "SELECT *, o.*, o.o_totalprice * (1 - 0.5) AS p, upper(c_name) FROM orders o, customer c"
    )
    assert not query.has_final


def test_group_by_and_aggregates() -> None:
    query = q(
        "SELECT o.o_custkey, c_name, sum(o.o_totalprice) AS total FROM orders o, customer c"
        " WHERE o.o_custkey = c.c_custkey GROUP BY o.o_custkey, c_name"
    )
    assert query.group_by == (O_CUST, C_NAME)
    assert query.aggregates
    assert query.order_by == ()
    assert query.has_final


@pytest.mark.parametrize(
    "item",
    ["count(*)", "count(DISTINCT o_custkey)", "avg(o_totalprice)", "min(o_orderdate)",
     "max(o_totalprice) + 1", "sum(o_totalprice * 2) AS s"],
)
def test_aggregate_forms(item: str) -> None:
    query = q(f"SELECT {item} FROM orders")
    assert query.aggregates
    assert query.group_by == ()
    assert query.has_final


def test_group_by_select_alias_and_ordinal() -> None:
    query = q("SELECT o_custkey AS k, o_orderdate, count(*) FROM orders o GROUP BY k, 2")
    assert query.group_by == (O_CUST, O_DATE)


def test_group_by_prefers_an_input_column_over_a_select_alias() -> None:
    # as PostgreSQL: GROUP BY o_orderkey names the table's column, not the alias
    query = q("SELECT o_custkey AS o_orderkey, count(*) FROM orders o GROUP BY o_orderkey")
    assert query.group_by == (O_KEY,)


def test_group_by_expression_records_its_columns() -> None:
    query = q("SELECT count(*) FROM orders o GROUP BY o_custkey + o_orderkey, o_custkey")
    assert query.group_by == (O_CUST, O_KEY)


def test_order_by_columns() -> None:
    query = q("SELECT * FROM orders o ORDER BY o.o_orderdate DESC, o_custkey")
    assert query.order_by == (O_DATE, O_CUST)
    assert not query.aggregates
    assert query.has_final


def test_order_by_alias_ordinal_and_expression() -> None:
    query = q(
        "SELECT o_orderdate AS d, o_totalprice FROM orders o ORDER BY d, 2, o_custkey + 1"
    )
    assert query.order_by == (O_DATE, O_PRICE, O_CUST)


def test_order_by_aggregate_alias_records_nothing() -> None:
    # The sort key is the aggregate's output, not a base column; has_final holds via aggregates.
    query = q(
        "SELECT o_custkey, sum(o_totalprice) AS revenue FROM orders o GROUP BY o_custkey"
        " ORDER BY revenue DESC"
    )
    assert query.order_by == ()
    assert query.group_by == (O_CUST,)
    assert query.has_final


def test_order_by_aggregate_sets_aggregates() -> None:
    query = q("SELECT o_custkey FROM orders o GROUP BY o_custkey ORDER BY count(*) DESC, 1")
    assert query.aggregates
    assert query.order_by == (O_CUST,)


def test_order_by_constant_records_nothing() -> None:
    query = q("SELECT o_custkey FROM orders o ORDER BY 'x'")
    assert query.order_by == ()
    assert not query.has_final


def test_order_by_star_ordinal_is_accepted() -> None:
    assert q("SELECT * FROM orders o ORDER BY 1").order_by == ()


# --- rejections -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        # subqueries
        (
            "SELECT * FROM orders o WHERE o.o_custkey IN (SELECT c_custkey FROM customer)",
            "query q5: line 1, column 46: unsupported construct subquery",
        ),
        (
            "SELECT * FROM (SELECT * FROM orders) x",
            "query q5: line 1, column 16: unsupported construct subquery",
        ),
        (
            "SELECT * FROM orders o\nWHERE EXISTS (SELECT 1 FROM customer)",
            "query q5: line 2, column 15: unsupported construct subquery",
        ),
        (
            "SELECT (SELECT max(c_custkey) FROM customer) FROM orders",
            "query q5: line 1, column 9: unsupported construct subquery",
        ),
        # set operations
        (
            "SELECT o_custkey FROM orders UNION SELECT c_custkey FROM customer",
            "query q5: line 1, column 30: unsupported construct UNION",
        ),
        (
            "SELECT o_custkey FROM orders\nINTERSECT SELECT c_custkey FROM customer",
            "query q5: line 2, column 1: unsupported construct INTERSECT",
        ),
        (
            "SELECT o_custkey FROM orders EXCEPT SELECT c_custkey FROM customer",
            "query q5: line 1, column 30: unsupported construct EXCEPT",
        ),
        # join kinds
        (
            "SELECT * FROM orders o LEFT JOIN customer c ON o.o_custkey = c.c_custkey",
            "query q5: line 1, column 24: unsupported construct OUTER JOIN (LEFT JOIN)",
        ),
        (
            "SELECT *\nFROM orders o\n  RIGHT OUTER JOIN customer c ON o.o_custkey = c.c_custkey",
            "query q5: line 3, column 3: unsupported construct OUTER JOIN (RIGHT OUTER JOIN)",
        ),
        (
            "SELECT * FROM orders o FULL JOIN customer c ON o.o_custkey = c.c_custkey",
            "query q5: line 1, column 24: unsupported construct OUTER JOIN (FULL JOIN)",
        ),
        (
            "SELECT * FROM orders o OUTER JOIN customer c ON o.o_custkey = c.c_custkey",
            "query q5: line 1, column 24: unsupported construct OUTER JOIN",
        ),
        (
            "SELECT * FROM orders o CROSS JOIN customer c",
            "query q5: line 1, column 24: unsupported construct CROSS JOIN",
        ),
        (
            "SELECT * FROM nation n NATURAL JOIN region r",
            "query q5: line 1, column 24: unsupported construct NATURAL JOIN",
        ),
        (
            "SELECT * FROM nation n JOIN region r USING (name)",
            "query q5: line 1, column 38: unsupported construct USING",
        ),
        (
            "SELECT * FROM orders o JOIN customer c",
            "query q5: line 1, column 24: unsupported construct JOIN without ON",
        ),
        (
            "SELECT * FROM (orders o JOIN customer c ON o.o_custkey = c.c_custkey)",
            "query q5: line 1, column 15: unsupported construct parenthesized join",
        ),
        # predicates over two relations
        (
            "SELECT * FROM orders o, customer c WHERE o.o_custkey < c.c_custkey",
            "query q5: line 1, column 42: unsupported construct non-equi join predicate"
            " 'o.o_custkey < c.c_custkey'",
        ),
        (
            "SELECT * FROM orders o JOIN customer c ON o.o_custkey <> c.c_custkey",
            "query q5: line 1, column 43: unsupported construct non-equi join predicate"
            " 'o.o_custkey <> c.c_custkey'",
        ),
        (
            "SELECT * FROM orders o, customer c WHERE o.o_custkey = c.c_custkey + 1",
            "query q5: line 1, column 42: unsupported construct join predicate over expressions"
            " 'o.o_custkey = c.c_custkey + 1'",
        ),
        (
            "SELECT * FROM orders o, customer c\nWHERE (o.o_custkey = 1 OR c.c_custkey = 2)",
            "query q5: line 2, column 8: unsupported construct OR across relations",
        ),
        (
            "SELECT * FROM orders o, customer c WHERE NOT o.o_custkey = c.c_custkey",
            "query q5: line 1, column 46: unsupported construct NOT across relations",
        ),
        # clauses
        (
            "SELECT o_custkey, count(*) FROM orders GROUP BY o_custkey\nHAVING count(*) > 1",
            "query q5: line 2, column 1: unsupported construct HAVING",
        ),
        (
            "SELECT * FROM orders LIMIT 10",
            "query q5: line 1, column 22: unsupported construct LIMIT",
        ),
        (
            "SELECT * FROM orders ORDER BY o_custkey OFFSET 3",
            "query q5: line 1, column 41: unsupported construct OFFSET",
        ),
        (
            "SELECT * FROM orders FETCH FIRST 3 ROWS ONLY",
            "query q5: line 1, column 22: unsupported construct FETCH",
        ),
        (
            "WITH x AS (SELECT * FROM orders) SELECT * FROM x",
            "query q5: line 1, column 1: unsupported construct WITH",
        ),
        (
            "SELECT DISTINCT o_custkey FROM orders",
            "query q5: line 1, column 8: unsupported construct DISTINCT",
        ),
        (
            "SELECT o_custkey, rank() OVER (ORDER BY o_totalprice) FROM orders",
            "query q5: line 1, column 19: unsupported construct window function",
        ),
        (
            "SELECT sum(o_totalprice) OVER (PARTITION BY o_custkey) FROM orders",
            "query q5: line 1, column 8: unsupported construct window function",
        ),
        (
            "SELECT count(*) FROM orders GROUP BY ROLLUP (o_custkey)",
            "query q5: line 1, column 38: unsupported construct ROLLUP",
        ),
        (
            "SELECT * FROM generate_series(1, 10)",
            "query q5: line 1, column 15: unsupported construct table function",
        ),
        (
            "SELECT * FROM orders o, LATERAL (SELECT 1) x",
            "query q5: line 1, column 25: unsupported construct LATERAL",
        ),
        (
            "SELECT * FROM orders TABLESAMPLE (10 PERCENT)",
            "query q5: line 1, column 22: unsupported construct TABLESAMPLE"
            " 'orders TABLESAMPLE (10 PERCENT)'",
        ),
        (
            "SELECT * FROM public.orders",
            "query q5: line 1, column 15: unsupported construct schema-qualified table"
            " 'public.orders'",
        ),
        (
            "SELECT * FROM orders o(a, b)",
            "query q5: line 1, column 22: unsupported construct column alias list",
        ),
        # statements
        (
            "SELECT * FROM orders; SELECT * FROM customer",
            "query q5: line 1, column 23: unsupported construct multiple statements",
        ),
        (
            "INSERT INTO orders VALUES (1, 2, '1994-01-01', 3)",
            "query q5: line 1, column 1: unsupported construct INSERT statement",
        ),
        (
            "DELETE FROM orders",
            "query q5: line 1, column 1: unsupported construct DELETE statement",
        ),
        (
            "CREATE TABLE t (a INT)",
            "query q5: line 1, column 1: unsupported construct CREATE statement",
        ),
        (
            "SELECT 1",
            "query q5: line 1, column 1: unsupported construct SELECT without FROM",
        ),
        ("", "query q5: empty query"),
        (" ; ", "query q5: empty query"),
        # conditions the model cannot express
        (
            "SELECT * FROM orders WHERE 1 = 1",
            "query q5: line 1, column 28: unsupported construct constant condition '1 = 1'",
        ),
        (
            "SELECT * FROM orders WHERE sum(o_totalprice) > 1",
            "query q5: line 1, column 28: unsupported construct aggregate function in WHERE",
        ),
        (
            "SELECT * FROM orders o JOIN customer c ON count(*) > 1",
            "query q5: line 1, column 43: unsupported construct aggregate function in ON",
        ),
        (
            "SELECT count(*) FROM orders GROUP BY sum(o_custkey)",
            "query q5: line 1, column 38: unsupported construct aggregate function in GROUP BY",
        ),
        (
            "SELECT * FROM orders WHERE o_custkey IN ()",
            "query q5: line 1, column 28: unsupported construct empty IN list",
        ),
        (
            "SELECT o_custkey FROM orders ORDER BY 2",
            "query q5: line 1, column 39: ORDER BY position 2 is not in the select list",
        ),
        # names
        (
            "SELECT * FROM orders o, lineitem l",
            "query q5: line 1, column 25: unknown table 'lineitem'",
        ),
        (
            "SELECT * FROM orders o,\n  customer o",
            "query q5: line 2, column 12: duplicate alias 'o'",
        ),
        (
            "SELECT * FROM orders, orders",
            "query q5: line 1, column 23: duplicate alias 'orders'",
        ),
        (
            "SELECT *\nFROM orders o\nWHERE o.o_foo = 1",
            "query q5: line 3, column 7: unknown column 'o.o_foo'",
        ),
        (
            "SELECT o_foo FROM orders o",
            "query q5: line 1, column 8: unknown column 'o_foo'",
        ),
        (
            "SELECT x.o_custkey FROM orders o",
            "query q5: line 1, column 8: unknown column 'x.o_custkey' (no relation 'x' in FROM)",
        ),
        (
            "SELECT orders.o_custkey FROM orders o",
            "query q5: line 1, column 8: unknown column 'orders.o_custkey'"
            " (no relation 'orders' in FROM)",
        ),
        (
            "SELECT c.o_custkey FROM orders o, customer c",
            "query q5: line 1, column 8: unknown column 'c.o_custkey'",
        ),
        (
            "SELECT x.* FROM orders o",
            "query q5: line 1, column 8: unknown relation 'x' in 'x.*'",
        ),
        (
            "SELECT * FROM nation n, region r WHERE name = 'EUROPE'",
            "query q5: line 1, column 40: ambiguous column 'name' (in n, r)",
        ),
        (
            "SELECT * FROM orders o, customer c WHERE o.o_custkey = c.c_custkey GROUP BY o_bar",
            "query q5: line 1, column 77: unknown column 'o_bar'",
        ),
        (
            "SELECT * FROM orders o ORDER BY o.nope",
            "query q5: line 1, column 33: unknown column 'o.nope'",
        ),
        (
            "SELECT * FROM orders o JOIN customer c ON o.o_custkey = c.nope",
            "query q5: line 1, column 57: unknown column 'c.nope'",
        ),
        (
            "SELECT * FROM orders WHERE o_custkey IN (1, nope)",
            "query q5: line 1, column 45: unknown column 'nope'",
        ),
        (
            "SELECT a.b.c FROM orders",
            "query q5: line 1, column 8: unsupported construct qualified column name 'a.b.c'",
        ),
    ],
)
def test_rejections(sql: str, message: str) -> None:
    assert error(sql) == message


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        # sqlglot read every token: what is missing is missing after the last one
        ("SELECT * FROM orders WHERE", "line 1, column 22: expected a condition after 'WHERE'"),
        ("SELECT * FROM orders WHERE;", "line 1, column 22: expected a condition after 'WHERE'"),
        (
            "SELECT * FROM orders WHERE o_custkey =",
            "line 1, column 38: expected an expression after '='",
        ),
        ("SELECT * FROM orders WHERE (o_custkey = 1", "line 1, column 41: expected ')' after '1'"),
        (
            "SELECT * FROM orders WHERE o_custkey BETWEEN 1",
            "line 1, column 46: expected AND and an upper bound after '1'",
        ),
        (
            "SELECT * FROM orders o, customer c JOIN",
            "line 1, column 36: expected a table name after 'JOIN'",
        ),
        # a token stood where something else was expected: its first character, and the token
        (
            "SELECT FROM WHERE",
            "line 1, column 13: expected a table name after 'FROM', got 'WHERE'",
        ),
        (
            "SELECT *\nFROM orders\nWHERE o_custkey = = 1",
            "line 3, column 19: expected an expression after '=', got '='",
        ),
        (
            "SELECT * FROM orders WHERE o_custkey = 1 AND AND o_custkey = 2",
            "line 1, column 46: expected a condition after 'AND', got 'AND'",
        ),
        (
            "SELECT * FROM orders WHERE o_custkey IN (1 2)",
            "line 1, column 44: expected ')' after '1', got '2'",
        ),
        (
            "SELECT * FROM orders; SELECT * FROM WHERE",
            "line 1, column 37: expected a table name after 'FROM', got 'WHERE'",
        ),
        ("SELECT * FROM orders o WHERE o.o_custkey = 1)", "line 1, column 45: unexpected ')'"),
        ("SELECT * FROM orders t1 t2", "line 1, column 25: unexpected 't2'"),
        (
            "SELECT * FROM orders o an_alias_far_longer_than_thirty_characters",
            "line 1, column 24: unexpected 'an_alias_far_longer_than_thir…'",
        ),
        ("SELECT * FROM orders WHERE CASE", "line 1, column 28: expected END after CASE"),
    ],
)
def test_syntax_errors_name_the_token_in_words(sql: str, message: str) -> None:
    text = error(sql)
    assert text == f"query q5: {message.replace(': ', ': syntax error: ', 1)}"
    assert "<" not in text and "Token" not in text and "missing for" not in text


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "SELECT * FROM orders\nWHERE o_custkey = 'abc",
            "query q5: line 2, column 19: syntax error: unterminated string \"'abc\"",
        ),
        (
            "SELECT * FROM orders /* comment",
            "query q5: line 1, column 22: syntax error: unterminated comment '/* comment'",
        ),
        (
            'SELECT "o_custkey FROM orders',
            "query q5: line 1, column 8: syntax error: unterminated quoted name "
            "'\"o_custkey FROM orde'",
        ),
    ],
)
def test_untokenizable_sql(sql: str, message: str) -> None:
    assert error(sql) == message


def test_errors_name_the_file_or_the_label_given_as_source() -> None:
    path = Path("queries") / "bad1.sql"
    sql = "SELECT *\nFROM orders\n\n\n  WHERE\n"
    with pytest.raises(QueryError) as info:
        parse_query(sql, CATALOG, "bad1", source=path)
    assert str(info.value) == f"{path}:5:3: syntax error: expected a condition after 'WHERE'"
    with pytest.raises(QueryError) as info:  # every error, not only syntax errors
        parse_query("SELECT *\nFROM nope", CATALOG, "bad1", source=path)
    assert str(info.value) == f"{path}:2:6: unknown table 'nope'"
    with pytest.raises(QueryError) as info:  # no position: just the file
        parse_query("  ", CATALOG, "bad1", source=path)
    assert str(info.value) == f"{path}: empty query"
    with pytest.raises(QueryError) as info:
        parse_query("SELECT * FROM orders WHERE", CATALOG, source="SQL text")
    assert str(info.value) == (
        "SQL text: line 1, column 22: syntax error: expected a condition after 'WHERE'"
    )


# --- date literals --------------------------------------------------------------------------

DATED = Catalog.from_dict(
    {
        "tables": {
            "orders": {
                "rows": 100,
                "columns": {
                    "o_orderdate": {"min": "1992-01-01", "max": "1998-08-02"},
                    "o_shiptime": {
                        "histogram": {
                            "bounds": ["1992-01-01T00:00:00", "1998-01-01T12:00:00"],
                            "counts": [100],
                        }
                    },
                    "o_comment": {"min": "a", "max": "z"},
                    "o_custkey": {"min": 1, "max": 10},
                    "o_clerk": {},
                },
            }
        }
    }
)
_NOT_A_DATE = "is not a valid ISO date (YYYY-MM-DD), but column"


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "SELECT * FROM orders o WHERE o.o_orderdate < 'yesterday'",
            f"line 1, column 46: 'yesterday' {_NOT_A_DATE} 'o.o_orderdate' (orders.o_orderdate)",
        ),
        (
            "SELECT * FROM orders WHERE o_orderdate BETWEEN '1995-01-01' AND DATE '1995-13-45'",
            f"line 1, column 70: '1995-13-45' {_NOT_A_DATE} 'orders.o_orderdate'",
        ),
        (
            "SELECT * FROM orders WHERE o_orderdate BETWEEN 'yesterday' AND '1995-01-01'",
            f"line 1, column 48: 'yesterday' {_NOT_A_DATE} 'orders.o_orderdate'",
        ),
        (
            "SELECT * FROM orders WHERE o_orderdate IN ('1995-01-01', 19950101)",
            f"line 1, column 58: 19950101 {_NOT_A_DATE} 'orders.o_orderdate'",
        ),
        (
            "SELECT * FROM orders WHERE o_custkey = 1 OR NOT (o_orderdate >= '1995-02-30')",
            f"line 1, column 65: '1995-02-30' {_NOT_A_DATE} 'orders.o_orderdate'",
        ),
        (
            "SELECT * FROM orders WHERE o_orderdate = '1995-01-01 junk'",
            f"line 1, column 42: '1995-01-01 junk' {_NOT_A_DATE} 'orders.o_orderdate'",
        ),
        (  # dates known from the histogram alone
            "SELECT * FROM orders\nWHERE o_shiptime > 'tomorrow'",
            f"line 2, column 20: 'tomorrow' {_NOT_A_DATE} 'orders.o_shiptime'",
        ),
    ],
)
def test_invalid_date_literals_on_date_columns_are_rejected(sql: str, message: str) -> None:
    assert error(sql, DATED) == f"query q5: {message} holds dates"


def test_valid_date_literals_and_other_columns_are_accepted() -> None:
    sql = (
        "SELECT * FROM orders o WHERE o.o_orderdate < '1995-03-15'"
        " AND o_orderdate >= DATE '1995-03-15' - INTERVAL '1' MONTH"
        " AND o_shiptime < TIMESTAMP '1995-03-15 06:00:00' AND o_orderdate <> NULL"
        " AND o_orderdate IN ('1995-01-01', '1996-02-29') AND o_orderdate LIKE '1995%'"
        " AND o_comment < 'yesterday' AND o_clerk = 'yesterday' AND o_custkey < 5"
    )
    date, comment = ColumnRef("o", "o_orderdate"), ColumnRef("o", "o_comment")
    assert parse_query(sql, DATED, "q5").filters == (
        Compare(date, "<", "1995-03-15"),
        Compare(date, ">=", "1995-02-15"),
        Compare(ColumnRef("o", "o_shiptime"), "<", "1995-03-15 06:00:00"),
        Compare(date, "<>", None),
        InList(date, ("1995-01-01", "1996-02-29")),
        Like(date, "1995%"),
        Compare(comment, "<", "yesterday"),  # text statistics: strings as before
        Compare(ColumnRef("o", "o_clerk"), "=", "yesterday"),  # no statistics
        Compare(ColumnRef("o", "o_custkey"), "<", 5),
    )


# --- loading queries: reopt.api.load_query, the Optimizer, the CLI --------------------------


@pytest.fixture(scope="module")
def tpch() -> Catalog:
    return tpch_catalog(1)


def test_load_query_inline_text_errors_say_sql_text(tpch: Catalog) -> None:
    assert load_query("SELECT * FROM orders", tpch).name == "query"
    with pytest.raises(QueryError) as info:
        load_query("SELECT * FROM orders WHERE", tpch)
    assert str(info.value) == (
        "SQL text: line 1, column 22: syntax error: expected a condition after 'WHERE'"
    )


def test_load_query_files_by_str_and_path(tmp_path: Path, tpch: Catalog) -> None:
    good = tmp_path / "good.sql"
    good.write_text("SELECT * FROM orders WHERE o_orderdate < DATE '1995-03-15'")
    for spec in (good, str(good)):
        query = load_query(spec, tpch)
        assert query.name == "good"
        assert query.filters == (Compare(ColumnRef("orders", "o_orderdate"), "<", "1995-03-15"),)
    other = tmp_path / "query.txt"  # a Path is a file whatever its suffix
    other.write_text("SELECT * FROM orders")
    assert load_query(other, tpch).relations == (Relation("orders", "orders"),)
    bad = tmp_path / "bad1.sql"
    bad.write_text("SELECT *\nFROM orders\n\n\n  WHERE\n")
    for spec in (bad, str(bad)):
        with pytest.raises(QueryError) as info:
            load_query(spec, tpch)
        assert str(info.value) == f"{bad}:5:3: syntax error: expected a condition after 'WHERE'"
    missing = tmp_path / "missing.sql"
    with pytest.raises(ReoptError) as info:
        load_query(missing, tpch)
    assert str(info.value) == f"{missing}: cannot read query: No such file or directory"
    binary = tmp_path / "binary.sql"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ReoptError) as info:
        load_query(binary, tpch)
    assert str(info.value) == f"{binary}: cannot read query: not UTF-8 text"


@pytest.mark.parametrize(("spec", "kind"), [(None, "NoneType"), (42, "int"), (b"q5", "bytes")])
def test_load_query_rejects_other_types(spec: object, kind: str, tpch: Catalog) -> None:
    with pytest.raises(ReoptError) as info:
        load_query(spec, tpch)  # type: ignore[arg-type]
    assert str(info.value) == (
        "query must be SQL text, a .sql file path, a built-in name (tpch:q5) or a Query, "
        f"got {kind}"
    )


def test_builtin_names_without_prefix(tmp_path: Path, monkeypatch, tpch: Catalog) -> None:
    for name in builtin_query_names():
        bare = load_query(name.upper(), tpch)
        assert bare == load_query(f"tpch:{name}", tpch)
        assert bare.name == f"tpch:{name}"
    with pytest.raises(QueryError) as info:  # the message this makes true
        load_query("tpch:q99", tpch)
    assert "('tpch:' is optional)" in str(info.value)
    with pytest.raises(ReoptError) as info:
        load_query("q99", tpch)
    assert str(info.value).startswith("'q99' is neither a built-in query")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "q5").write_text("SELECT * FROM orders")
    with pytest.raises(ReoptError) as info:  # a file of that name: say so, guess nothing
        load_query("q5", tpch)
    assert str(info.value) == (
        "'q5' is a file, but query files must end in .sql (for the built-in query write tpch:q5)"
    )


def test_optimizer_takes_a_path_and_rejects_bad_arguments(tmp_path: Path) -> None:
    sql = tmp_path / "q.sql"
    sql.write_text("SELECT * FROM orders WHERE o_orderdate < DATE '1995-03-15'")
    assert Optimizer(sql, optimizer="topdown").optimize().cost > 0
    with pytest.raises(ReoptError) as info:
        Optimizer(None, optimizer="topdown")  # type: ignore[arg-type]
    assert str(info.value).startswith("query must be SQL text, a .sql file path,")
    with pytest.raises(CatalogError) as info:
        Optimizer("tpch:q3", {"tables": {}}, optimizer="topdown")  # type: ignore[arg-type]
    assert str(info.value) == (
        "catalog: expected a path to a catalog JSON file, got dict "
        "(Catalog.from_dict builds a catalog from a dict)"
    )


def test_cli_syntax_errors_are_one_line_exit_2(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad1.sql"
    bad.write_text("SELECT *\nFROM orders\n\n\n  WHERE\n")
    cases = [
        (
            "SELECT * FROM orders WHERE",
            "SQL text: line 1, column 22: syntax error: expected a condition after 'WHERE'",
        ),
        (str(bad), f"{bad}:5:3: syntax error: expected a condition after 'WHERE'"),
        (
            "SELECT * FROM orders WHERE o_orderdate < 'yesterday'",
            f"SQL text: line 1, column 42: 'yesterday' {_NOT_A_DATE} 'orders.o_orderdate' "
            "holds dates",
        ),
    ]
    for query, message in cases:
        assert main(["optimize", query, "--engine", "python"]) == 2
        out, err = capsys.readouterr()
        assert (out, err) == ("", f"reopt: {message}\n")
    assert main(["optimize", "q5", "--optimizer", "topdown"]) == 0
    assert capsys.readouterr().out.startswith("== tpch:q5 · io · topdown: cost=")


# --- TPC-H ----------------------------------------------------------------------------------

TPCH_Q3 = (
    "SELECT l_orderkey, sum(l_extendedprice*(1-l_discount)) as revenue, o_orderdate,"
    " o_shippriority FROM customer, orders, lineitem WHERE c_mktsegment = 'MACHINERY' and"
    " c_custkey = o_custkey and l_orderkey = o_orderkey and o_orderdate < '1995-03-15' and"
    " l_shipdate > '1995-03-15' GROUP BY l_orderkey, o_orderdate, o_shippriority"
)
TPCH_Q6 = (
    "SELECT sum(l_extendedprice*l_discount) as revenue FROM lineitem WHERE l_shipdate >="
    " '1994-01-01' and l_shipdate < '1995-01-01' and l_discount >= 0.06 - 0.01 and l_discount"
    " <= 0.06 + 0.01 and l_quantity < 24"
)


def test_tpch_q3() -> None:
    query = parse_query(TPCH_Q3, TPCH, "q3")
    assert query.relations == (
        Relation("customer", "customer"),
        Relation("orders", "orders"),
        Relation("lineitem", "lineitem"),
    )
    assert query.filters == (
        Compare(ColumnRef("customer", "c_mktsegment"), "=", "MACHINERY"),
        Compare(ColumnRef("orders", "o_orderdate"), "<", "1995-03-15"),
        Compare(ColumnRef("lineitem", "l_shipdate"), ">", "1995-03-15"),
    )
    assert query.joins == (
        JoinPredicate.of(ColumnRef("customer", "c_custkey"), ColumnRef("orders", "o_custkey")),
        JoinPredicate.of(ColumnRef("lineitem", "l_orderkey"), ColumnRef("orders", "o_orderkey")),
    )
    assert query.group_by == (
        ColumnRef("lineitem", "l_orderkey"),
        ColumnRef("orders", "o_orderdate"),
        ColumnRef("orders", "o_shippriority"),
    )
    assert query.aggregates
    assert query.order_by == ()


def test_tpch_q6() -> None:
    query = parse_query(TPCH_Q6, TPCH, "q6")
    shipdate = ColumnRef("lineitem", "l_shipdate")
    discount = ColumnRef("lineitem", "l_discount")
    assert query.relations == (Relation("lineitem", "lineitem"),)
    assert query.filters == (
        Compare(shipdate, ">=", "1994-01-01"),
        Compare(shipdate, "<", "1995-01-01"),
        Compare(discount, ">=", 0.05),
        Compare(discount, "<=", 0.07),
        Compare(ColumnRef("lineitem", "l_quantity"), "<", 24),
    )
    assert query.joins == ()
    assert query.aggregates and query.group_by == ()


@pytest.mark.parametrize(
    "sql",
    [
        # TPC-H Q5 (spec text: date arithmetic, ORDER BY an aggregate alias)
        "select n_name, sum(l_extendedprice * (1 - l_discount)) as revenue"
        " from customer, orders, lineitem, supplier, nation, region"
        " where c_custkey = o_custkey and l_orderkey = o_orderkey and l_suppkey = s_suppkey"
        " and c_nationkey = s_nationkey and s_nationkey = n_nationkey"
        " and n_regionkey = r_regionkey and r_name = 'ASIA'"
        " and o_orderdate >= date '1994-01-01'"
        " and o_orderdate < date '1994-01-01' + interval '1' year"
        " group by n_name order by revenue desc",
        # TPC-H Q10 without LIMIT
        "select c_custkey, c_name, sum(l_extendedprice * (1 - l_discount)) as revenue,"
        " c_acctbal, n_name, c_address, c_phone, c_comment"
        " from customer, orders, lineitem, nation"
        " where c_custkey = o_custkey and l_orderkey = o_orderkey"
        " and o_orderdate >= date '1993-10-01'"
        " and o_orderdate < date '1993-10-01' + interval '3' month"
        " and l_returnflag = 'R' and c_nationkey = n_nationkey"
        " group by c_custkey, c_name, c_acctbal, c_phone, n_name, c_address, c_comment"
        " order by revenue desc",
        # TPC-H Q12 with CASE in the select list
        "select l_shipmode, sum(case when o_orderpriority = '1-URGENT'"
        " or o_orderpriority = '2-HIGH' then 1 else 0 end) as high_line_count"
        " from orders, lineitem where o_orderkey = l_orderkey"
        " and l_shipmode in ('MAIL', 'SHIP') and l_commitdate < l_receiptdate"
        " and l_shipdate < l_commitdate and l_receiptdate >= date '1994-01-01'"
        " and l_receiptdate < date '1994-01-01' + interval '1' year"
        " group by l_shipmode order by l_shipmode",
    ],
)
def test_more_tpch_queries_parse(sql: str) -> None:
    query = parse_query(sql, TPCH, "tpch")
    assert query.has_final
    assert query.joins
    assert all(j.left.alias != j.right.alias for j in query.joins)
