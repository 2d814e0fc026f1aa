"""The repeat-customer queries (``costmodel.tpch.REPEAT_QUERIES``): the setting where the plan
made from the catalog is wrong (``BENCHMARKS.md``, "A setting where the catalog's plan is
wrong").

Shapes are read from the SQL text with sqlglot (``test_join_queries.join_graph``), the
premise's true counts with pyarrow on the Parquet files, both independently of reopt; the
answers are checked against Spark SQL's answer to the same text.
"""

from __future__ import annotations

import datetime as dt
import itertools

import networkx as nx
import pytest
from test_join_queries import assert_answers_as_spark_sql, join_graph

from reopt.api import Optimizer, load_catalog
from reopt.combine import combiner
from reopt.costmodel.tpch import JOIN_QUERIES, REPEAT_QUERIES, builtin_query_names
from reopt.plan import PlanNode

SF1 = load_catalog(None, 1.0)
PAIRS = ("customer", "o1", "o2")
"""The many-to-many join of the two ``orders`` aliases through ``customer``."""


def build_sides(plan: PlanNode) -> list[set[str]]:
    """The relations of every join's build (right) side in ``plan``."""
    return [set(n.children[1].relations) for n in plan.walk() if len(n.children) == 2]


def catalog_plan(name: str, deltas: tuple[str, ...] = ()) -> PlanNode:
    """The ``dist`` (``local`` profile) optimum of ``name`` on the built-in SF 1 catalog, after
    ``deltas``: the plan ``static`` runs in the benchmark."""
    o = Optimizer(f"tpch:{name}", SF1, cost_model="dist", dist_profile="local",
                  optimizer="topdown")
    step = o.optimize()
    return o.update(list(deltas)).plan if deltas else step.plan


def test_six_builtin_queries() -> None:
    assert len(REPEAT_QUERIES) == 6
    names = builtin_query_names()
    assert all(n in names for n in REPEAT_QUERIES)
    assert not set(REPEAT_QUERIES) & set(JOIN_QUERIES)


@pytest.mark.parametrize("name", list(REPEAT_QUERIES))
def test_repeat_query_shape(name: str) -> None:
    """5-8 relations, connected, an aggregate the loop can combine, the front-end sees the
    relations the text names, and ``customer`` joins both ``orders`` aliases."""
    sql = REPEAT_QUERIES[name]
    g = join_graph(sql)
    assert 5 <= g.number_of_nodes() <= 8
    assert nx.is_connected(g)
    assert g.has_edge("o1", "customer") and g.has_edge("o2", "customer")
    assert g.has_edge("lineitem", "o1") and not g.has_edge("lineitem", "o2")
    q = Optimizer(f"tpch:{name}", SF1, optimizer="topdown").query
    assert sorted(q.aliases) == sorted(g.nodes)
    assert any(a is not None for a in combiner(sql, name).aggregates)


def test_repeat_queries_join_different_tables() -> None:
    """No two of the six, nor one of them and a join query, join the same tables the same
    way."""
    same_table = nx.algorithms.isomorphism.categorical_node_match("table", None)
    graphs = {n: join_graph(s) for n, s in {**JOIN_QUERIES, **REPEAT_QUERIES}.items()}
    for a, b in itertools.combinations(graphs, 2):
        if a in REPEAT_QUERIES or b in REPEAT_QUERIES:
            assert not nx.is_isomorphic(graphs[a], graphs[b], node_match=same_table), (a, b)


@pytest.mark.parametrize("name", list(REPEAT_QUERIES))
def test_catalog_plan_builds_the_pairs(name: str) -> None:
    """The premise: from the catalog, every query broadcasts the customer's order pairs
    (estimated at tens of thousands of rows); with the pairs pinned at the 4,017,445 rows they
    have on SF 1 ``--skew 1 --drift --correlate`` data, no build side holds them."""
    assert any(set(PAIRS) <= side and "lineitem" not in side
               for side in build_sides(catalog_plan(name)))
    observed = catalog_plan(name, ("card {o1,customer,o2} := 4017445",))
    assert not any(set(PAIRS) <= side for side in build_sides(observed))


def test_month_of_orders_is_overestimated_over_ten_times(tpch_dir) -> None:
    """``o1``'s two bounds on ``o_orderdate``, estimated independently, give >= 10x the March
    1995 orders the data has (counted with pyarrow on plain TPC-H, SF 0.01)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    dates = pq.read_table(tpch_dir / "orders.parquet", columns=["o_orderdate"])["o_orderdate"]
    march = pc.and_(pc.greater_equal(dates, dt.date(1995, 3, 1)),
                    pc.less(dates, dt.date(1995, 4, 1)))
    count = pc.sum(march).as_py()
    assert 0 < count < dates.length() / 50
    plan = Optimizer("tpch:rcregion", load_catalog(None, 0.01), optimizer="topdown").optimize()
    (o1,) = [n for n in plan.plan.walk() if n.relations == ("o1",)]
    assert o1.rows >= 10 * count


@pytest.mark.spark
def test_repeat_queries_answer_as_spark_sql(spark, tpch_dir) -> None:
    """reopt's plan of each query, run by reopt.execute, digests as Spark SQL's answer to the
    same text; every answer is non-empty, so equal means something."""
    assert_answers_as_spark_sql(REPEAT_QUERIES, spark, tpch_dir)
