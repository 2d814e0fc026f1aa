"""The in-process continuous-query executor (:mod:`reopt.streamlocal`).

Its exactness on the nexmark query and the self-join property runs in the Spark executor's
own tests (``test_stream``, ``test_stream_migration``, parametrized by executor). Here: the
SegTollS-shaped 5-way join — every batch under a plan drawn from all 5-way trees (both
operators, so hash and nested-loops joins), switched by each migration — per batch against a
batch Spark SQL evaluation of the same tuples (``test_eddy``'s oracle), the ``nlj`` blocks
split small enough that a join runs in several; and what it refuses.
"""

from __future__ import annotations

import random

import pandas as pd
import pytest
from test_eddy import SEGTOLLS_ORACLE
from test_stream import QUERY

from reopt.api import Optimizer
from reopt.execute import answer_digest
from reopt.optimizers.exhaustive import all_plans
from reopt.stream import StreamError
from reopt.streamgen import generate_stream
from reopt.streamlocal import make_query


@pytest.mark.spark
def test_segtolls_under_drawn_plans_and_migrations_equals_batch_sql(spark, tmp_path,
                                                                    monkeypatch):
    root = tmp_path / "st"
    generate_stream("segtolls", root, seed=2,
                    phases="3:keys=8;3:positions=200,accidents=6,keys=8")
    data = {s: pd.concat([pd.read_parquet(p) for p in sorted((root / s).glob("*.parquet"))])
            for s in ("positions", "segstats", "accidents")}
    for s, df in data.items():
        spark.createDataFrame(df).createOrReplaceTempView(s)
    try:
        oracle = spark.sql(SEGTOLLS_ORACLE).toPandas()
    finally:
        for s in data:
            spark.catalog.dropTempView(s)
    expected = {int(k): answer_digest(g.drop(columns="batch").itertuples(index=False))
                for k, g in oracle.groupby("batch")}
    assert len(oracle) > 20 and len(expected) >= 2
    monkeypatch.setattr("reopt.streamlocal.BLOCK_PAIRS", 500)  # nested loops in blocks
    opt = Optimizer(str(root / "query.sql"), str(root / "catalog.json"), cost_model="rate",
                    optimizer="topdown")
    plans = list(all_plans(opt.space()))
    assert {p.op for p in plans} >= {"shj", "nlj"}
    draw = random.Random(21)
    for migration in ("moving", "parallel"):
        cq = make_query("local", opt.query, opt.catalog, root, None, 1,
                        migration=migration)
        moved = []
        for b in cq.run(lambda last: draw.choice(plans)):
            assert answer_digest(b.rows) == expected.get(b.index, answer_digest([])), (
                migration, b.index, b.plans)
            moved.append(b.migration)
        assert migration in moved  # a state really migrated


def test_local_executor_refuses_what_it_cannot_evaluate(tmp_path):
    root = tmp_path / "nx"
    generate_stream("nexmark", root, seconds=3)
    catalog = str(root / "catalog.json")
    opt = Optimizer(QUERY + " AND abs(b.price) < 3", catalog, cost_model="rate",
                    optimizer="topdown")
    with pytest.raises(StreamError, match="local executor cannot evaluate 'ABS"):
        make_query("local", opt.query, opt.catalog, root, None)
    opt = Optimizer(QUERY, catalog, cost_model="rate", optimizer="topdown")
    with pytest.raises(StreamError, match="unknown executor 'gpu'"):
        make_query("gpu", opt.query, opt.catalog, root, None)
