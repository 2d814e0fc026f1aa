"""``reopt run --per-subset KEY``: a plan per subset of the data (Query Mesh) on SF 0.01.

Oracles: Spark SQL's answer to the whole query; a fresh from-scratch optimizer fed only the
observations of one subset's splits (the subset's session must end on its plan); and the
dates of TPC-H Q5, which say where its joined rows can fall (below).
"""

from __future__ import annotations

import datetime as dt
import json

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from reopt import adaptive
from reopt.adaptive import Loop, Splits, plan_shape
from reopt.answer import Answer, spark_sql_digest
from reopt.api import Optimizer, load_catalog
from reopt.combine import combiner
from reopt.execute import Execution, NodeRun

CATALOG = load_catalog(None, 0.01)
Q5_LAST_SHIP = dt.date(1994, 1, 1) + dt.timedelta(days=121)
"""Q5 keeps orders of 1993; a line ships 1..121 days after its order (TPC-H clause 4.2.3,
kept by ``reopt data --skew``, which redraws keys, not dates): no line Q5 joins ships later."""


def q5() -> Optimizer:
    return Optimizer("tpch:q5", CATALOG, optimizer="topdown-inc")


def estimate(o: Optimizer, aliases: tuple[str, ...]) -> float:
    return o.space().estimator.card(o.query.mask(aliases))


def fake_loop(monkeypatch) -> Loop:
    """Q5 over four hand-made splits of 100 lineitem rows each, subsets 0, 1, 0, 1, run by
    a stand-in for Spark: every node observes 100 rows per relation it joins, except that
    subset 1 (condition ``late``) joins no line with an order (0 rows)."""
    def fake_execute(plan, query, data_dir, spark, restrict=None, inputs=None, keep=False):
        late = inputs["lineitem"].startswith("late")  # the split's stand-in: its condition
        nodes = [NodeRun(n.op, n.alt.log_op, n.relations, n.rows,
                         0 if late and {"orders", "lineitem"} <= set(n.relations)
                         else 100 * len(n.relations))
                 for n in plan.walk()]
        return Execution([], [], "", 0.0, nodes)

    monkeypatch.setattr(adaptive, "execute", fake_execute)
    # no answers to combine in Spark
    monkeypatch.setattr(adaptive, "settle", lambda *_: Answer([], 0, ""))
    monkeypatch.setattr(adaptive, "release", lambda _: None)
    loop = Loop.__new__(Loop)
    loop.make_optimizer, loop.data_dir, loop.spark, loop.deltas = q5, "data", None, []
    loop.query = loop.split_query = q5().query
    loop.combiner = combiner(loop.query.sql, loop.query.name)
    loop.splits = Splits("lineitem", "lineitem", "l_shipdate", 4, [100] * 4, "subset",
                         ("early a", "late a", "early b", "late b"), (0, 1, 0, 1),
                         ("early", "late"))
    loop.split_input = loop.splits.condition  # no Spark: a split is named by its condition
    loop._tables = {}  # the other tables, read once by split_input: none here
    return loop


def test_observations_go_to_their_subsets_session_only(monkeypatch):
    """Routing without Spark: each subset's session took exactly its own splits' deltas
    (its last split pushes none: no next split of the subset), and its estimates are its own
    observations; with ``per_subset=False`` one session took every split's but the last."""
    def pushed(split) -> list[str]:  # all splits have 100 rows: scale 1
        return Execution([], [], "", 0.0, split.nodes).deltas(1.0, scaled="lineitem")

    loop = fake_loop(monkeypatch)
    run = loop.run("adaptive")
    early, late = run.sessions
    assert (early.subset, late.subset) == (0, 1)
    assert early.deltas == pushed(run.splits[0]) and late.deltas == pushed(run.splits[1])
    assert estimate(early.optimizer, ("orders", "lineitem")) == 200
    assert estimate(late.optimizer, ("orders", "lineitem")) == 1  # observed 0, clamped to 1
    assert [x.subset for x in run.splits] == [0, 1, 0, 1]
    # plan_changed compares a split with its subset's previous split
    assert [x.plan_changed for x in run.splits] == [
        False, False, run.splits[2].plan != run.splits[0].plan,
        run.splits[3].plan != run.splits[1].plan]
    assert run.splits[3].plan == plan_shape(late.plan) != plan_shape(early.plan)

    one = loop.run("adaptive", per_subset=False)
    (session,) = one.sessions
    assert session.subset is None
    assert session.deltas == [d for x in one.splits[:3] for d in pushed(x)]
    assert "subsets" not in one.to_json()


@pytest.mark.spark
def test_each_subset_keeps_its_own_plan_and_statistics(spark, skew_dir):
    """Q5 over lineitem cut by ship date into 2 subsets, 4 splits taking them in turn, on
    skewed, drifting data. The median ship date is after ``Q5_LAST_SHIP``, so subset 1 holds
    no line Q5 joins: every join over lineitem observes 0 there and many rows in subset 0.
    Each session must hold its own subset's observations only (a fresh optimizer fed them
    alone picks the same plan and estimates), so the two end with different statistics for
    {orders, lineitem} (1 row, the clamp of 0, against hundreds), and here different plans.
    The combined answer is Spark SQL's and the plain (one session, hash splits) run's."""
    mesh = Loop(q5, skew_dir, 4, spark, by="subset", column="L_SHIPDATE", subsets=2)
    s = mesh.splits
    assert (s.by, s.column, s.subsets) == ("subset", "l_shipdate", (0, 1, 0, 1))
    lineitem = pq.read_table(skew_dir / "lineitem.parquet", columns=["l_shipdate"])
    assert sum(s.rows) == lineitem.num_rows
    median = pc.approximate_median(lineitem["l_shipdate"].cast("int32")).as_py()
    assert dt.date(1970, 1, 1) + dt.timedelta(days=int(median)) > Q5_LAST_SHIP + dt.timedelta(30)
    run = mesh.run("adaptive")

    truth = spark_sql_digest(mesh.query, skew_dir, spark)[1]
    assert run.answer_digest == truth
    assert Loop(q5, skew_dir, 2, spark).run("static").answer_digest == truth  # the plain run

    assert [x.subset for x in run.splits] == [0, 1, 0, 1]
    assert [x.subset for x in run.sessions] == [0, 1]
    for session in run.sessions:
        mine = [x for x in run.splits if x.subset == session.subset]
        # the oracle: a fresh optimizer with the first plan's statistics and only this
        # subset's observations, each scaled to the subset's next split
        fresh = Optimizer("tpch:q5", CATALOG, optimizer="topdown")
        fresh.optimize()
        fresh.update([f"card lineitem *{1 / 4!r}"])
        for a, b in zip(mine, mine[1:], strict=False):
            pushed = Execution([], [], "", 0.0, a.nodes).deltas(b.split_rows / a.split_rows,
                                                               scaled="lineitem")
            step = fresh.update(pushed)
        assert plan_shape(session.plan) == plan_shape(step.plan) == mine[-1].plan
        observed = {n.relations: n.observed for x in mine for n in x.nodes}
        joined = [r for r in observed if {"orders", "lineitem"} <= set(r)]
        assert joined, "every Q5 plan joins orders and lineitem somewhere"
        if session.subset == 1:  # no line Q5 joins ships this late
            assert all(observed[r] == 0 for r in joined)
    first, second = (x.optimizer for x in run.sessions)
    assert estimate(first, ("orders", "lineitem")) > 100
    assert estimate(second, ("orders", "lineitem")) == 1
    assert plan_shape(run.sessions[0].plan) != plan_shape(run.sessions[1].plan)


@pytest.mark.spark
def test_cli_reports_the_subset_of_each_split(spark, tpch_dir, capsys):
    """On one of the loop workload's own queries (two aliases of nation, combined by their
    group keys): each split's subset and plan in --json, each subset's final plan, and the
    answer Spark SQL's."""
    from reopt.cli import main

    code = main(["run", "tpch:q7join", "--data", str(tpch_dir), "--splits", "2",
                 "--per-subset", "l_shipdate", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["same_answer"]
    assert doc["split"]["by"] == "subset" and doc["split"]["subsets"] == [0, 1]
    assert len(doc["split"]["subset_conditions"]) == 2
    whole = Optimizer("tpch:q7join", CATALOG).query
    truth = spark_sql_digest(whole, tpch_dir, spark)[1]
    (adaptive,) = doc["strategies"]
    assert adaptive["answer_digest"] == truth
    assert [x["subset"] for x in adaptive["splits"]] == [0, 1]
    assert [x["subset"] for x in adaptive["subsets"]] == [0, 1]
    # one split per subset: each subset's final plan is the plan its split ran
    assert [x["plan"] for x in adaptive["subsets"]] == [x["plan"] for x in adaptive["splits"]]


@pytest.mark.spark
@pytest.mark.parametrize(("argv", "message"), [
    (["--per-subset", "o_orderdate"], "table 'lineitem' has no column 'o_orderdate' to make "
                                      "subsets of (--per-subset)"),
    (["--per-subset", "l_shipdate", "--subsets", "3"], "--subsets 3 is more than --splits 2"),
    (["--subsets", "2"], "--subsets needs --per-subset KEY"),
    (["--per-subset", "l_shipdate", "--split-by", "range"],
     "--split-by cannot be combined with --per-subset"),
])
def test_bad_per_subset_arguments(spark, tpch_dir, capsys, argv, message):
    from reopt.cli import main

    code = main(["run", "tpch:q3", "--data", str(tpch_dir), "--splits", "2", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("reopt: ") and err.count("\n") == 1, err
    assert message in err
