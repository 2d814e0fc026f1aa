"""Spark Structured Streaming's own stream-stream join (:mod:`reopt.sparkstream`): its results
per micro-batch and over the whole stream against the batch Spark SQL oracle of
``test_stream`` (the windowed join over all tuples, timestamp conditions as plain SQL)."""

from __future__ import annotations

import pytest
from test_stream import QUERY, batch_answer, per_batch, stream_tuples

from reopt.api import Optimizer
from reopt.execute import answer_digest
from reopt.sparkstream import SparkStreamJoin
from reopt.stream import StreamError
from reopt.streamgen import generate_stream


@pytest.mark.spark
def test_spark_stream_join_equals_batch_sql_per_window(spark, tmp_path):
    root = tmp_path / "nx"
    generate_stream("nexmark", root, seed=7, phases="2:keys=6;2:bids=80,keys=6")
    (root / "persons" / "000003.parquet").write_bytes(b"not parquet")  # a malformed file
    oracle = batch_answer(spark, stream_tuples(root))
    expected, sizes = per_batch(oracle)
    assert len(oracle) > 30 and len(sizes) == 2
    opt = Optimizer(QUERY, str(root / "catalog.json"), cost_model="rate", optimizer="topdown")
    join = SparkStreamJoin(opt.query, opt.catalog, root, spark, batch_seconds=2)
    join.start(tmp_path / "work", state_partitions=1)
    batches = list(join.run())
    assert join.handle is None  # stopped
    assert [b.plan for b in batches] == ["spark(spark(p, a), b)"] * 2
    for b in batches:
        assert len(b.rows) == sizes.get(b.index, 0), b.index
        assert answer_digest(b.rows) == expected.get(b.index), b.index
    assert batches[1].skipped == {"persons": 1}
    whole = [r for b in batches for r in b.rows]
    assert answer_digest(whole) == answer_digest(oracle.drop(columns="batch").itertuples(
        index=False))
    # no watermarks: the first join (p, a: no filters) keeps every person and auction fed
    assert batches[-1].state["spark join state"] >= sum(
        b.arrivals["persons"] + b.arrivals["auctions"] for b in batches)


def test_spark_join_needs_an_equality_in_from_order(tmp_path):
    root = tmp_path / "nx"
    generate_stream("nexmark", root, seconds=3)
    sql = ("SELECT p.id FROM persons [RANGE 3 SECONDS] p, bids [RANGE 1 SECOND] b, "
           "auctions [RANGE 2 SECONDS] a WHERE p.id = a.seller AND a.id = b.auction")
    opt = Optimizer(sql, str(root / "catalog.json"), cost_model="rate", optimizer="topdown")
    with pytest.raises(StreamError, match="needs an equality between 'b'"):
        SparkStreamJoin(opt.query, opt.catalog, root, spark=None)
