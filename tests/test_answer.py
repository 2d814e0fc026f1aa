"""Answers kept in Spark (:mod:`reopt.answer`): per-split answers combined and digested there.

Oracles: Spark SQL's own answer to the whole query over the whole data (digested the same
way), and the driver path (:meth:`reopt.combine.Combiner.combine` of the collected partials,
digested by :func:`reopt.execute.answer_digest`). The digest must tell answers apart: a
dropped row, a changed value, and a duplicated row each change it; the order of the rows and
float noise below 12 significant digits do not.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from reopt.answer import digest, keep, settle, spark_sql_digest
from reopt.api import load_catalog, load_query
from reopt.combine import combiner
from reopt.execute import answer_digest, collect

pytestmark = pytest.mark.spark

CATALOG = load_catalog(None, 0.01)
K = 2
SQL = {
    # GROUP BY with SUM: the workload's own
    "q3": None,
    # COUNT, SUM, MIN, MAX without GROUP BY, a date among them
    "global": """SELECT count(*) AS n, sum(l_quantity) AS q, min(l_shipdate) AS first,
                        max(o_totalprice) AS top
                 FROM orders, lineitem WHERE o_orderkey = l_orderkey
                   AND o_orderdate < '1993-01-01'""",
    # SELECT DISTINCT: the same pair comes from many splits
    "distinct": """SELECT DISTINCT c_mktsegment, o_orderpriority
                   FROM customer, orders, lineitem
                   WHERE c_custkey = o_custkey AND o_orderkey = l_orderkey
                     AND l_returnflag = 'R'""",
    # ORDER BY and LIMIT applied after combining (DESC, then a second key)
    "top": """SELECT l_orderkey, l_linenumber, l_extendedprice * (1 - l_discount) AS net
              FROM orders, lineitem WHERE o_orderkey = l_orderkey
                AND o_orderdate >= '1995-03-01' AND o_orderdate < '1995-04-01'
              ORDER BY net DESC, l_orderkey LIMIT 7""",
    # a plain union of joined rows, a double column among them
    "union": """SELECT o_orderkey, l_linenumber, CAST(l_discount AS DOUBLE) * 3.1 AS d,
                       o_orderdate
                FROM orders, lineitem WHERE o_orderkey = l_orderkey
                  AND o_orderdate < '1992-03-01'""",
}


def _sql(name: str) -> str:
    text = SQL[name]
    return text if text is not None else load_query(f"tpch:{name}", CATALOG).sql


@contextlib.contextmanager
def _views(data, spark, split: int | None = None, table: str = "lineitem"):
    """Every TPC-H table of ``data`` as a view under its name; with ``split``, ``table``
    holds only hash split ``split`` of K (by its first column, as ``reopt run`` cuts it)."""
    tables = {p.stem: spark.read.parquet(str(p)) for p in sorted(Path(data).glob("*.parquet"))}
    try:
        for t, df in tables.items():
            if split is not None and t == table:
                df = df.filter(f"pmod(xxhash64({df.columns[0]}), {K}) = {split}")
            df.createOrReplaceTempView(t)
        yield
    finally:
        for t in tables:
            spark.catalog.dropTempView(t)


def _split_answers(sql: str, data, spark, table: str = "lineitem") -> list:
    """The split query's answer on each of K hash splits of ``table`` (the other tables
    whole), each kept in Spark as the loop keeps them."""
    parts = []
    for i in range(K):
        with _views(data, spark, i, table):
            parts.append(keep(spark.sql(sql)))
    return parts


def _oracle(sql: str, data, spark) -> tuple[int, str]:
    """Spark SQL's answer to the whole query over the whole data, digested."""
    with _views(data, spark):
        return digest(spark.sql(sql))


@pytest.mark.parametrize("name", list(SQL))
def test_combined_in_spark_is_spark_sqls_answer_and_the_driver_paths(spark, tpch_dir, name):
    sql = _sql(name)
    c = combiner(sql, name)
    kept = spark.sparkContext._jsc.getPersistentRDDs().size()
    parts = _split_answers(c.split_sql, tpch_dir, spark)
    driver = c.combine([collect(p) for p in parts])  # the driver path, from the same partials
    answer = settle(c, parts, parts[0].columns, show=10**6)  # small: every row shown
    assert spark.sparkContext._jsc.getPersistentRDDs().size() == kept  # the parts released
    assert answer.result_rows > 0
    assert (answer.result_rows, answer.digest) == _oracle(sql, tpch_dir, spark)
    if SQL[name] is None:  # the loop's own oracle gives the same
        assert (answer.result_rows, answer.digest) == spark_sql_digest(
            load_query(f"tpch:{name}", CATALOG), tpch_dir, spark)
    assert len(answer.head) == answer.result_rows == len(driver)
    assert answer_digest(answer.head) == answer_digest(driver)
    if c.order:  # shown in the query's order
        assert answer.head == [tuple(r) for r in driver]
        assert answer.head[:3] == settle(c, _split_answers(c.split_sql, tpch_dir, spark),
                                         parts[0].columns, show=3).head


def test_the_digest_tells_answers_apart(spark):
    from pyspark.sql import functions as F

    rows = [(i, f"name {i % 5}", i * 0.1 + 1e6, None if i % 7 == 0 else i % 3)
            for i in range(200)]
    df = spark.createDataFrame(rows, "k long, s string, x double, n int")
    base = digest(df)
    assert base[0] == 200
    # the same multiset: other order and partitioning, float noise below 12 digits
    assert digest(df.repartition(5).orderBy(F.desc("k"))) == base
    assert digest(df.withColumn("x", F.col("x") * (1 + 1e-15))) == base
    # a dropped row, a duplicated row, one changed value, a value moved between two rows
    assert digest(df.filter("k <> 17")) != base
    dup = digest(df.union(df.filter("k = 17")))
    assert dup[0] == 201 and dup != base
    assert digest(df.withColumn("s", F.when(F.col("k") == 3, "other").otherwise(F.col("s")))
                  ) != base
    assert digest(df.withColumn("n", F.when(F.col("k") == 8, None).otherwise(F.col("n")))
                  ) != base
    swapped = df.withColumn("s", F.when(F.col("k") == 1, "name 2")
                            .when(F.col("k") == 2, "name 1").otherwise(F.col("s")))
    assert digest(swapped) != base
    # the count stays, the rows differ: 2 copies of one row against one each of two rows
    pair = spark.createDataFrame([(1, "a"), (2, "b")], "k long, s string")
    twice = spark.createDataFrame([(1, "a"), (1, "a")], "k long, s string")
    assert digest(pair) != digest(twice)
