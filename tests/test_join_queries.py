"""The loop workload's own multi-join queries (``costmodel.tpch.JOIN_QUERIES``).

Their join graphs are read from the SQL text with sqlglot, independently of reopt's
front-end; their answers are checked against Spark SQL's answer to the same text on SF 0.01.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable

import networkx as nx
import pytest
import sqlglot
from sqlglot import exp

from reopt.api import Optimizer, load_catalog
from reopt.combine import combiner
from reopt.costmodel.tpch import JOIN_QUERIES, builtin_query_names, builtin_sql

CATALOG = load_catalog(None, 0.01)


def join_graph(sql: str) -> nx.Graph:
    """Relations (aliases, else table names) as nodes, an edge per pair of relations an
    equality of two columns connects; columns are resolved by their TPC-H prefix."""
    tree = sqlglot.parse_one(sql)
    tables = list(tree.find_all(exp.Table))
    by_prefix: dict[str, list[str]] = {}
    g = nx.Graph()
    for t in tables:
        name = t.alias_or_name
        g.add_node(name, table=t.name)
        prefix = {"partsupp": "ps"}.get(t.name, t.name[0])
        by_prefix.setdefault(prefix, []).append(name)

    def relation(c: exp.Column) -> str:
        if c.table:
            return c.table
        (only,) = by_prefix[c.name.split("_")[0]]  # unqualified: the one table of the prefix
        return only

    for eq in tree.find_all(exp.EQ):
        if isinstance(eq.left, exp.Column) and isinstance(eq.right, exp.Column):
            a, b = relation(eq.left), relation(eq.right)
            if a != b:
                g.add_edge(a, b)
    return g


def test_join_queries_are_builtin() -> None:
    assert len(JOIN_QUERIES) == 9
    for name, sql in JOIN_QUERIES.items():
        assert name in builtin_query_names()
        assert builtin_sql(f"tpch:{name}") == sql
        assert Optimizer(f"tpch:{name}", CATALOG).query.name == f"tpch:{name}"


def test_optimize_cli_takes_them(capsys) -> None:
    from reopt.cli import main

    code = main(["optimize", *[f"tpch:{n}" for n in JOIN_QUERIES], "--sf", "0.01",
                 "--optimizer", "topdown", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [q["query"] for q in doc["queries"]] == [f"tpch:{n}" for n in JOIN_QUERIES]
    for q in doc["queries"]:
        rels = sorted(q["initial"]["plan"]["relations"])
        assert rels == sorted(join_graph(JOIN_QUERIES[q["query"][5:]]).nodes), q["query"]


@pytest.mark.parametrize("name", list(JOIN_QUERIES))
def test_join_query_shape(name: str) -> None:
    """5-8 relations, connected, filtered, with an aggregate the loop can combine from splits;
    the front-end sees the relations the text names."""
    sql = JOIN_QUERIES[name]
    g = join_graph(sql)
    assert 5 <= g.number_of_nodes() <= 8
    assert nx.is_connected(g)
    q = Optimizer(f"tpch:{name}", CATALOG, optimizer="topdown").query
    assert sorted(q.aliases) == sorted(g.nodes)
    assert q.filters, "every query filters some relation"
    assert any(a is not None for a in combiner(sql, name).aggregates)


def test_join_query_shapes_differ() -> None:
    """The shapes the module docstring names: no two of the first six queries with the same
    graph, and no two of all nine joining the same tables the same way (the three partial-order
    queries are about a filter, not a shape; pclerk and psegment share a shape, not tables)."""
    graphs = {name: join_graph(sql) for name, sql in JOIN_QUERIES.items()}
    shapes = list(graphs)[:6]
    for a, b in itertools.combinations(shapes, 2):
        assert not nx.is_isomorphic(graphs[a], graphs[b]), (a, b)
    same_table = nx.algorithms.isomorphism.categorical_node_match("table", None)
    for a, b in itertools.combinations(graphs, 2):
        assert not nx.is_isomorphic(graphs[a], graphs[b], node_match=same_table), (a, b)
    chain = graphs["chain6"]
    assert nx.is_isomorphic(chain, nx.path_graph(6))
    assert [n for n in chain if chain.degree(n) == 1] in (["region", "part"],
                                                          ["part", "region"])
    assert nx.cycle_basis(graphs["q9join"])  # cyclic
    assert nx.is_isomorphic(graphs["q7join"], nx.cycle_graph(6))
    assert all(nx.is_tree(g) for n, g in graphs.items() if n not in ("q9join", "q7join"))
    for name in ("q7join", "q8"):
        nations = [n for n, t in graphs[name].nodes(data="table") if t == "nation"]
        assert len(nations) == 2, name
    assert graphs["star6"].degree("lineitem") == 3
    assert nx.is_isomorphic(graphs["q2join"], nx.path_graph(5))
    assert graphs["q2join"].degree("part") == 1 and graphs["q2join"].degree("region") == 1
    assert graphs["psegment"].degree("lineitem") == 3 and graphs["psegment"].degree("customer") == 2
    pnations = graphs["pnations"]  # Q8's graph without part: q8's minus its one leaf on lineitem
    q8 = graphs["q8"].copy()
    q8.remove_node("part")
    assert nx.is_isomorphic(pnations, q8)


@pytest.mark.spark
def test_join_queries_answer_as_spark_sql(spark, tpch_dir) -> None:
    """reopt's plan of each query (topdown's io optimum), run by reopt.execute, digests as
    Spark SQL's answer to the same text; every answer is non-empty, so equal means something."""
    assert_answers_as_spark_sql(JOIN_QUERIES, spark, tpch_dir)


def assert_answers_as_spark_sql(names: Iterable[str], spark, tpch_dir) -> None:
    """Each built-in query's topdown io optimum on the SF 0.01 catalog, run by
    reopt.execute, has a non-empty answer that digests as Spark SQL's to the same text."""
    from reopt.execute import answer_digest, execute, spark_sql_answer

    for name in names:
        o = Optimizer(f"tpch:{name}", CATALOG, optimizer="topdown")
        run = execute(o.optimize().plan, o.query, tpch_dir, spark)
        answer = spark_sql_answer(o.query, tpch_dir, spark)
        assert answer, name
        assert run.digest == answer_digest(answer), name


@pytest.mark.parametrize("name", ["pclerk", "psegment", "pnations"])
def test_partial_orders_are_misestimated_over_ten_times(name: str, tpch_dir) -> None:
    """The premise of the three ``o_orderstatus = 'P'`` queries: the catalog's estimate of
    their filtered orders input is >= 10x the rows the data has (counted here with pyarrow,
    not by reopt), on plain TPC-H data (tpchgen-cli, SF 0.01)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    statuses = pq.read_table(tpch_dir / "orders.parquet", columns=["o_orderstatus"])
    status = statuses["o_orderstatus"].cast("string")
    partial = pc.sum(pc.equal(status, "P")).as_py()
    assert 0 < partial < statuses.num_rows / 30  # only orders straddling 1995-06-17

    def scans(node):
        if not node.children:
            yield node
        for child in node.children:
            yield from scans(child)

    plan = Optimizer(f"tpch:{name}", CATALOG, optimizer="topdown").optimize().plan
    (orders,) = [n for n in scans(plan) if n.relations == ("orders",)]
    assert orders.rows == pytest.approx(statuses.num_rows / 3)  # 1/distinct of 3 statuses
    assert orders.rows >= 10 * partial
