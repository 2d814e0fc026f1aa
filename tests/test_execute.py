"""reopt.execute on SF 0.01 TPC-H: every plan's answer is Spark SQL's answer to the query text;
every observed count is the count of the same sub-join computed by Spark SQL from the query's
text here; the join operators are the ones the plan names."""

from __future__ import annotations

import json
import re
import shutil
from functools import cache

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from reopt.api import Optimizer, load_catalog
from reopt.costmodel.errors import ReoptError
from reopt.execute import ExecutionError, answer_digest, collect, execute, spark_sql_answer
from reopt.plan import PlanNode

pytestmark = pytest.mark.spark

CATALOG = load_catalog(None, 0.01)
FORCED = ["cost hashjoin *1000", "cost sortmerge *1000"]  # index and nested-loop joins
BIG = ["card customer *10000", "card orders *1000"]  # above dist.BROADCAST_BYTES: shuffled
PLANS = {  # (cost model, deltas): the io optimum, the cout optimum, other operators and orders
    "q3": [("io", []), ("cout", []), ("io", FORCED),  # FORCED: indexnl and blocknl
           ("dist", []), ("dist", BIG)],  # dist: broadcast joins; BIG: a shuffle join too
    "q5": [("io", []), ("io", ["card {customer,orders} *300", "card {lineitem,supplier} *0.001"])],
    "q10": [("io", []), ("cout", [])],  # io: hashjoin and sortmerge
    # q8join (8 relations, 236,624 rows) is left to tests/test_join_queries.py: the suite's time
    "q5s": [("cout", [])],
}
SPARK_JOIN = {"io": {"hashjoin": "ShuffledHashJoin", "sortmerge": "SortMergeJoin",
                     "indexnl": "BroadcastHashJoin", "blocknl": "CartesianProduct"},
              "dist": {"broadcast": "BroadcastHashJoin", "shuffle": "SortMergeJoin"}}
PREFIX = {"ps": "partsupp", "p": "part", "s": "supplier", "c": "customer", "o": "orders",
          "l": "lineitem", "n": "nation", "r": "region"}


def plan_of(query: str, model: str, deltas: list[str]) -> tuple[Optimizer, PlanNode]:
    o = Optimizer(f"tpch:{query}", CATALOG, cost_model=model, optimizer="topdown")
    step = o.optimize()
    if deltas:
        step = o.update(deltas)
    return o, step.plan


def conjuncts(sql: str) -> list[tuple[frozenset[str], str]]:
    """The WHERE conjuncts of a built-in query and the tables each names (by the TPC-H
    column prefixes): read from the text, independently of reopt's front-end."""
    where = re.split(r"\bWHERE\b", sql, flags=re.I)[1]
    where = re.split(r"\bGROUP BY\b", where, flags=re.I)[0]
    out = []
    for c in re.split(r"\band\b", where, flags=re.I):
        tables = frozenset(PREFIX[m] for m in re.findall(r"\b([a-z]+)_\w+", c))
        out.append((tables, c.strip()))
    return out


@pytest.fixture(scope="module")
def sub_join_rows(spark, tpch_dir):
    """Rows of the join of ``tables`` under the query's conjuncts on them, by Spark SQL."""
    @cache
    def rows(sql: str, tables: frozenset[str]) -> int:
        for table in tables:  # (spark_sql_answer drops the views it registers)
            spark.read.parquet(str(tpch_dir / f"{table}.parquet")).createOrReplaceTempView(table)
        conds = [c for used, c in conjuncts(sql) if used <= tables]
        text = f"SELECT count(*) FROM {', '.join(sorted(tables))}"
        return spark.sql(text + (f" WHERE {' AND '.join(conds)}" if conds else "")).first()[0]

    return rows


@pytest.mark.parametrize("query", list(PLANS))
def test_plans_answer_as_spark_sql_and_observe_true_rows(spark, tpch_dir, sub_join_rows, query):
    variants = PLANS[query]
    shapes = set()
    reference = None
    for model, deltas in variants:
        o, plan = plan_of(query, model, deltas)
        if reference is None:
            reference = answer_digest(spark_sql_answer(o.query, tpch_dir, spark))
        run = execute(plan, o.query, tpch_dir, spark)
        assert run.digest == reference, (model, deltas)
        assert run.rows  # SF 0.01 answers every query of the workload
        for node, seen in zip(plan.walk(), run.nodes, strict=True):
            assert (seen.op, seen.relations) == (node.op, tuple(node.relations))
            if node.alt.log_op in ("scan", "join"):
                want = sub_join_rows(o.query.sql, frozenset(node.relations))
                assert seen.observed == want, (deltas, node.op, node.relations)
        assert run.nodes[0].observed == len(run.rows) or plan.alt.log_op == "join"
        shapes.add(tuple(tuple(n.relations) for n in plan.walk()  # which side counts too
                         if n.alt.log_op in ("join", "scan")))
        if model in SPARK_JOIN:  # each hinted join is the Spark join its operator maps to
            ops = [n.op for n in plan.walk()]
            for op, spark_join in SPARK_JOIN[model].items():
                assert run.spark_plan.count(spark_join) == ops.count(op), op
            if deltas == FORCED:
                assert {"indexnl", "blocknl"} <= set(ops)
            if deltas == BIG:
                assert {"broadcast", "shuffle"} <= set(ops)
    assert len(shapes) == len(set(map(str, variants))) or query == "q3"  # other join trees


ALIASED = """SELECT n1.n_name AS supp_nation, n2.n_name AS cust_nation, count(*) AS pairs,
       sum(c.c_acctbal) AS balance
FROM supplier s JOIN nation n1 ON s.s_nationkey = n1.n_nationkey, customer c, nation n2
WHERE c.c_nationkey = n2.n_nationkey AND n1.n_regionkey = n2.n_regionkey
  AND c.c_acctbal > 9000 AND s_acctbal < 0
GROUP BY n1.n_name, n2.n_name ORDER BY pairs DESC, supp_nation, 2"""


def test_aliases_self_join_and_output_names(spark, tpch_dir):
    """A query with aliases, one table twice, an ON clause, an unqualified column and ORDER BY
    an output name and an ordinal runs as Spark SQL runs its text."""
    answer = None
    for model in ("io", "cout"):
        o = Optimizer(ALIASED, CATALOG, cost_model=model, optimizer="topdown")
        run = execute(o.optimize().plan, o.query, tpch_dir, spark)
        answer = answer or spark_sql_answer(o.query, tpch_dir, spark)
        assert run.digest == answer_digest(answer) and run.rows
        assert run.columns == ["supp_nation", "cust_nation", "pairs", "balance"]
        assert run.rows == answer  # ORDER BY fixes the order: the same list


def test_observations_become_deltas_the_optimizer_takes(spark, tpch_dir):
    o, plan = plan_of("q3", "io", [])
    run = execute(plan, o.query, tpch_dir, spark)
    deltas = run.deltas(scale=2.0)  # the next split: twice the data
    scans = {n.relations[0]: n for n in run.nodes if n.logical == "scan"}
    # q3 filters every relation; the table rows are the data's (TPC-H at SF 0.01), doubled
    assert {a: n.scanned for a, n in scans.items()} == {
        "customer": 1500, "orders": 15000, "lineitem": len(pq.read_table(
            tpch_dir / "lineitem.parquet", columns=["l_orderkey"]))}
    assert deltas[:3] == [f"card {a} ={2 * n.scanned}" for a, n in scans.items()]
    step = o.update(deltas)  # the optimizer now estimates exactly what was observed, doubled
    for n in step.plan.walk():
        if n.alt.log_op in ("join", "scan"):
            seen = next(x for x in run.nodes if set(x.relations) == set(n.relations)
                        and x.logical == n.alt.log_op)
            assert n.rows == pytest.approx(2 * seen.observed)


def test_bad_data(spark, tpch_dir, tmp_path):
    o, plan = plan_of("q3", "io", [])
    partial = tmp_path / "partial"
    partial.mkdir()
    for t in ("customer", "orders"):
        shutil.copy(tpch_dir / f"{t}.parquet", partial)
    with pytest.raises(ReoptError, match=r"no table 'lineitem' \(query tpch:q3 uses it"):
        execute(plan, o.query, partial, spark)
    # a column the query names missing from the data
    shutil.copy(tpch_dir / "lineitem.parquet", partial)
    (partial / "customer.parquet").unlink()
    customer = pq.read_table(tpch_dir / "customer.parquet").drop_columns(["c_mktsegment"])
    pq.write_table(customer, partial / "customer.parquet")
    with pytest.raises(ReoptError, match="column 'c_mktsegment' is in the data of no relation"):
        execute(plan, o.query, partial, spark)
    # an empty table: an empty answer, as Spark SQL's, and zero rows observed above it
    empty = pq.read_table(tpch_dir / "customer.parquet").slice(0, 0)
    pq.write_table(empty, partial / "customer.parquet")
    run = execute(plan, o.query, partial, spark)
    assert run.rows == [] and run.digest == answer_digest(
        spark_sql_answer(o.query, partial, spark))
    assert all(n.observed == 0 for n in run.nodes if "customer" in n.relations)
    assert "card {customer} := 0" in run.deltas() and "card customer =1" in run.deltas()


def test_a_driver_out_of_room_is_one_line():
    """What Spark raises when task results are lost or the driver's heap is exhausted (here
    a stand-in DataFrame raising it) becomes one ExecutionError line; other errors pass."""
    class Answer:
        def __init__(self, text: str):
            self.text = text

        def toPandas(self):  # noqa: N802 (the DataFrame method's name)
            raise RuntimeError(f"An error occurred while calling o1.getResult.\n: {self.text}")

    with pytest.raises(ExecutionError) as e:
        collect(Answer("org.apache.spark.SparkException: Job aborted: Lost task 3.0 "
                       "(TID 79): TaskResultLost (result lost from block manager)"))
    assert "\n" not in str(e.value) and "driver ran out of room" in str(e.value)
    assert "TaskResultLost" in str(e.value)
    with pytest.raises(RuntimeError, match="Table or view not found"):
        collect(Answer("Table or view not found"))


def test_digest_normalizes_numbers_and_order():
    import datetime as dt
    from decimal import Decimal

    a = [(1, Decimal("0.10"), dt.date(1995, 3, 15), None), (2, 0.3, dt.date(1995, 1, 1), "x")]
    b = [(2, 0.1 + 0.2, dt.date(1995, 1, 1), "x"), (1, 0.1, dt.date(1995, 3, 15), None)]
    assert answer_digest(a) == answer_digest(b)
    assert answer_digest(a) != answer_digest(a[:1])
    assert answer_digest(a) != answer_digest([(1, 0.1000001, dt.date(1995, 3, 15), None),
                                              a[1]])
    assert pa  # pyarrow writes the test tables above


def test_cli_execute(spark, tpch_dir, tmp_path, capsys):
    from reopt.cli import main

    assert main(["execute", "tpch:q3", "--data", str(tpch_dir), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    o, _ = plan_of("q3", "io", [])
    answer = spark_sql_answer(o.query, tpch_dir, spark)
    assert doc["digest"] == answer_digest(answer) and doc["result_rows"] == len(answer)
    assert doc["nodes"][0]["estimated"] > 0 and doc["deltas"]
    # bad input: one line, exit 2, before Spark runs anything
    (tmp_path / "only").mkdir()
    shutil.copy(tpch_dir / "nation.parquet", tmp_path / "only")
    for argv, says in [
        (["--data", str(tmp_path / "none")], "no such file or folder"),
        (["--data", str(tmp_path / "only")], "no table 'customer' (query tpch:q3 uses it"),
        (["--data", str(tpch_dir), "--delta", "card nowhere *2"], "nowhere"),
    ]:
        assert main(["execute", "tpch:q3", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("reopt: ") and says in err and err.count("\n") == 1, err


def test_execution_settings_are_restored(spark):
    """The run's settings must not leak into the optimizer's engine, which wants code
    generation and adaptive execution off; the user's excluded rules are kept."""
    from reopt.spark import DYNAMIC_JOIN_SELECTION, REORDER_JOIN, execution_settings

    conf = spark.conf
    adaptive_excluded = "spark.sql.adaptive.optimizer.excludedRules"
    keys = ("spark.sql.codegen.wholeStage", "spark.sql.adaptive.enabled",
            "spark.sql.cbo.joinReorder.enabled", "spark.sql.optimizer.excludedRules",
            "spark.sql.adaptive.autoBroadcastJoinThreshold", "spark.sql.adaptive.skewJoin.enabled",
            adaptive_excluded)
    conf.set("spark.sql.optimizer.excludedRules", "x.Mine")
    before = {k: conf.get(k, None) for k in keys}
    with execution_settings(spark):
        assert conf.get("spark.sql.optimizer.excludedRules") == f"x.Mine,{REORDER_JOIN}"
        assert conf.get(adaptive_excluded) == DYNAMIC_JOIN_SELECTION
        assert conf.get("spark.sql.codegen.wholeStage") == "true"
        assert conf.get("spark.sql.adaptive.enabled") == "true"  # empty inputs cut plans short
        assert conf.get("spark.sql.adaptive.autoBroadcastJoinThreshold") == "-1"
        assert conf.get("spark.sql.adaptive.skewJoin.enabled") == "false"
        assert conf.get("spark.sql.cbo.joinReorder.enabled") == "false"
    assert {k: conf.get(k, None) for k in keys} == before
    conf.unset("spark.sql.optimizer.excludedRules")
    with execution_settings(spark):
        assert conf.get("spark.sql.optimizer.excludedRules") == REORDER_JOIN
    assert conf.get("spark.sql.optimizer.excludedRules", None) in (None, "")


def test_a_restricted_relation_counts_its_split(spark, tpch_dir, sub_join_rows):
    """``restrict`` (one split of a relation): its scan's rows before filters are the split's
    and every count above is the split's, each a Spark SQL count over the split."""
    o, plan = plan_of("q3", "io", [])
    split = "o_orderkey % 3 = 0"
    run = execute(plan, o.query, tpch_dir, spark, restrict={"orders": split})
    orders = spark.read.parquet(str(tpch_dir / "orders.parquet"))
    scan = next(n for n in run.nodes if n.logical == "scan" and n.relations == ("orders",))
    assert scan.scanned == orders.filter(split).count()
    joined = next(n for n in run.nodes if n.logical == "join"
                  and set(n.relations) == {"customer", "orders", "lineitem"})
    whole = sub_join_rows(o.query.sql, frozenset({"customer", "orders", "lineitem"}))
    for t in ("customer", "lineitem"):
        spark.read.parquet(str(tpch_dir / f"{t}.parquet")).createOrReplaceTempView(t)
    orders.filter(split).createOrReplaceTempView("orders")
    where = o.query.sql.split("WHERE")[1].split("GROUP BY")[0]
    try:
        want = spark.sql(f"SELECT count(*) FROM customer, orders, lineitem WHERE {where}"
                         ).first()[0]
    finally:
        for t in ("customer", "orders", "lineitem"):
            spark.catalog.dropTempView(t)
    assert joined.observed == want < whole


def test_an_input_found_empty_cuts_the_plan_short(spark, tpch_dir, tmp_path):
    """Q3 planned with lineitem's filtered scan at 1 row (so the plan broadcasts it below the
    other joins), run on a split of lineitem whose rows all fail Q3's filter on it: Spark's
    adaptive execution replaces every join above the empty broadcast by an empty relation
    and never scans the other tables. The answer is Spark SQL's (empty); the scan that ran
    is observed, the joins above it as 0 rows, the scans cut off as nothing (None, no delta).
    The same plan on a split with rows passing runs every join, each the Spark join its
    operator maps to (no other), every count Spark SQL's."""
    o, plan = plan_of("q3", "dist", ["card {lineitem} := 1"])
    assert [n.op for n in plan.walk() if n.alt.log_op == "join"] == ["broadcast"] * 2
    assert tuple(plan.children[1].children[1].relations) == ("lineitem",)  # deepest build
    lineitem = spark.read.parquet(str(tpch_dir / "lineitem.parquet"))
    for i, split in enumerate(("l_shipdate < '1995-01-01'",  # Q3 keeps lines after 1995-03-15
                               "l_shipdate BETWEEN '1995-03-10' AND '1995-04-10'")):
        lineitem.filter(split).write.parquet(str(tmp_path / f"s{i}"))
        part = spark.read.parquet(str(tmp_path / f"s{i}"))  # a split as the loop writes it
        run = execute(plan, o.query, tpch_dir, spark, inputs={"lineitem": part})
        for t in ("customer", "orders"):
            spark.read.parquet(str(tpch_dir / f"{t}.parquet")).createOrReplaceTempView(t)
        part.createOrReplaceTempView("lineitem")
        try:
            assert run.digest == answer_digest(collect(spark.sql(o.query.sql)))
            for n in run.nodes:
                if n.observed is not None and n.logical in ("scan", "join"):
                    conds = [c for used, c in conjuncts(o.query.sql) if used <= set(n.relations)]
                    assert n.observed == spark.sql(
                        f"SELECT count(*) FROM {', '.join(n.relations)} "
                        f"WHERE {' AND '.join(conds)}").first()[0], n
        finally:
            for t in ("customer", "orders", "lineitem"):
                spark.catalog.dropTempView(t)
        assert "ShuffledHashJoin" not in run.spark_plan and "SortMergeJoin" not in run.spark_plan
        scans = {n.relations[0]: n for n in run.nodes if n.logical == "scan"}
        joins = [n for n in run.nodes if n.logical == "join"]
        assert scans["lineitem"].scanned == part.count() > 0
        if i == 0:
            assert not run.rows and scans["lineitem"].observed == 0
            assert [n.observed for n in joins] == [0, 0]
            assert scans["orders"].observed is None and scans["customer"].observed is None
            assert "BroadcastHashJoin" not in run.spark_plan  # both joins were replaced
            deltas = run.deltas()
            assert not any(d.startswith(("card orders", "card customer")) for d in deltas)
            assert {"card {lineitem} := 0", f"card lineitem ={part.count()}"} <= set(deltas)
            assert {f"card {{{','.join(n.relations)}}} := 0" for n in joins} <= set(deltas)
        else:
            assert run.rows and all(n.observed for n in run.nodes)
            assert run.spark_plan.count("BroadcastHashJoin") == 2
