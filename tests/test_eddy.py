"""The eddy (:mod:`reopt.eddy`): its results per micro-batch against independent oracles — a
batch Spark SQL evaluation of the windowed join (the helper of ``test_stream``), and nested
loops over all records under probe orders forced at random (any routing gives the same
results) — lottery routing reproducible under a seed, and tickets steering tuples to the
probe that eliminates them (seed 002 §4)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_stream import QUERY, batch_answer, per_batch, stream_tuples, streams, write_streams

from reopt.api import Optimizer
from reopt.costmodel.catalog import Catalog
from reopt.eddy import Eddy, EddyBatch, Part, Routed, Router, SparkEddy, States, make_eddy
from reopt.execute import answer_digest
from reopt.stream import StreamError
from reopt.streamgen import generate_stream
from reopt.streamrun import run_strategy


def _eddy(sql: str, catalog, root: Path, batch_seconds: int = 1, **kw) -> Eddy:
    opt = Optimizer(sql, catalog, cost_model="rate", optimizer="topdown")
    return Eddy(opt.query, opt.catalog, root, batch_seconds, **kw)


@pytest.mark.spark
def test_eddy_equals_batch_sql_per_window(spark, tmp_path):
    root = tmp_path / "nx"
    generate_stream("nexmark", root, seed=7, phases="2:keys=6;2:bids=80,keys=6;2:keys=3")
    (root / "persons" / "000003.parquet").write_bytes(b"not parquet")  # a malformed file
    oracle = batch_answer(spark, stream_tuples(root))
    expected, sizes = per_batch(oracle)
    assert len(oracle) > 30 and len(sizes) == 3
    batches = list(_eddy(QUERY, str(root / "catalog.json"), root, 2, seed=3).run())
    assert [b.index for b in batches] == [0, 1, 2]
    for b in batches:
        assert len(b.rows) == sizes.get(b.index, 0), b.index
        assert answer_digest(b.rows) == expected.get(b.index), b.index
    assert batches[1].skipped == {"persons": 1}
    assert batches[0].columns == list(oracle.columns[1:])


def _stepped(eddy: Eddy, sc=None, jobs: list[list[int]] | None = None
             ) -> Iterator[tuple[EddyBatch, dict[int, float]]]:
    """Every batch of ``eddy`` with the tickets banked after it (what the next batch's
    lotteries draw with: the batch's escrow summed over its parts); with a Spark context
    ``sc``, each batch's Spark jobs appended to ``jobs`` as their counts of tasks."""
    while eddy.batch * eddy.batch_seconds < eddy.seconds:
        group = f"test-eddy-{id(eddy)}-{eddy.batch}"
        if sc is not None:
            sc.setJobGroup(group, group)
        try:
            batch = eddy.step()
        finally:
            if sc is not None:
                sc.setJobGroup("", "")
        if sc is not None and jobs is not None:
            tracker = sc.statusTracker()
            jobs.append([sum(tracker.getStageInfo(s).numTasks
                             for s in tracker.getJobInfo(j).stageIds)
                         for j in tracker.getJobIdsForGroup(group)])
        yield batch, dict(eddy.banked)


@pytest.mark.spark
def test_spark_eddy_routes_every_part_as_the_in_process_eddy(spark, tmp_path):
    """One Spark job per batch, one task per part: per batch the same routes, probed
    counts, banked tickets and rows as the in-process eddy (its parts' lotteries are seeded
    per part, so the tasks' scheduling cannot change a draw), and the batch Spark SQL
    oracle's results. Item a (the auctions) has two eligible probes, so its draws follow the
    tickets banked from every part's escrow."""
    root = tmp_path / "nx"
    generate_stream("nexmark", root, seed=7, phases="2:keys=6;2:bids=80,keys=6;2:keys=3")
    expected, sizes = per_batch(batch_answer(spark, stream_tuples(root)))
    opt = Optimizer(QUERY, str(root / "catalog.json"), cost_model="rate", optimizer="topdown")
    local = Eddy(opt.query, opt.catalog, root, 2, seed=3, partitions=5)
    on_spark = make_eddy("spark", opt.query, opt.catalog, root, 2, seed=3, partitions=5)
    assert isinstance(on_spark, SparkEddy)
    on_spark.spark = spark
    jobs: list[list[int]] = []
    pairs = list(zip(_stepped(local), _stepped(on_spark, spark.sparkContext, jobs),
                     strict=True))
    assert len(pairs) == 3
    # one Spark job per micro-batch, one task per part (a part is one route)
    assert jobs == [[sum(got.routes.values())] for _, (got, _) in pairs], jobs
    drawn = 0
    for (want, banked), (got, spark_banked) in pairs:
        assert got.routes == want.routes and got.probed == want.probed, got.index
        assert spark_banked == banked, got.index
        assert Counter(got.rows) == Counter(want.rows), got.index
        assert answer_digest(got.rows) == expected.get(got.index, answer_digest([])), \
            got.index
        assert len(got.rows) == sizes.get(got.index, 0), got.index
        drawn += sum(n for r, n in got.routes.items() if r.startswith("a:"))
    assert drawn >= 10 and sum(sizes.values()) > 30
    assert all(banked.values())  # every item's escrow moved: a part's lost escrow would show


class ReversedEddy(Eddy):
    """An eddy that routes a batch's parts last first (as Spark tasks may run)."""

    def _route_all(self, parts: list[Part], states: States) -> list[Routed]:
        return super()._route_all(parts[::-1], states)[::-1]


def test_a_parts_lottery_does_not_depend_on_the_order_parts_are_routed(tmp_path):
    """Each part draws from its own generator, seeded by (seed, batch, item, part): routing
    the parts in reverse order changes no route and no result."""
    _three(tmp_path)
    catalog = Catalog.from_dict(THREE_CATALOG)
    forward = list(_eddy(THREE, catalog, tmp_path, seed=1).run())
    opt = Optimizer(THREE, catalog, cost_model="rate", optimizer="topdown")
    backward = list(ReversedEddy(opt.query, opt.catalog, tmp_path, 1, seed=1).run())
    assert [b.routes for b in backward] == [b.routes for b in forward]
    assert [b.probed for b in backward] == [b.probed for b in forward]
    assert sum(n for b in forward for r, n in b.routes.items() if r.startswith("a:")) > 4


@dataclass(frozen=True)
class ForcedRouter(Router):
    """A router whose probe order is dictated by ``choices`` instead of the lottery."""

    choices: tuple[int, ...] = (0,)
    drawn: list[int] = field(default_factory=lambda: [0])

    def lottery(self, eligible: list[int], tickets, rng) -> int:
        self.drawn[0] += 1
        return eligible[self.choices[self.drawn[0] % len(self.choices)] % len(eligible)]


class ForcedEddy(Eddy):
    """An eddy routing with a :class:`ForcedRouter`."""

    def __init__(self, *args, choices: list[int], **kw):
        super().__init__(*args, **kw)
        self.router = ForcedRouter(**{f.name: getattr(self.router, f.name)
                                      for f in fields(Router)}, choices=tuple(choices))


def nested_loops(records: dict[str, list[tuple[int, float]]], windows: dict[str, float],
                 batch_seconds: int, key_z: bool) -> dict[int, Counter]:
    """Batch -> multiset of (x.k, x.ts, y.ts, z.ts): x, y over s and z over r, x.k = y.k (and
    = z.k if ``key_z``), every tuple within its window of the newest."""
    out: dict[int, Counter] = {}
    for xk, xt in records["s"]:
        for yk, yt in records["s"]:
            for zk, zt in records["r"]:
                newest = max(xt, yt, zt)
                if (xk == yk and (zk == xk or not key_z) and newest - xt < windows["x"]
                        and newest - yt < windows["y"] and newest - zt < windows["z"]):
                    out.setdefault(int(newest // batch_seconds), Counter())[
                        (xk, xt, yt, zt)] += 1
    return out


CATALOG = {"tables": {n: {"rate": 2, "window": 1, "columns": {"k": {"distinct": 3}, "ts": {}}}
                      for n in ("s", "r")}}


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=streams(), windows=st.tuples(*[st.sampled_from([0.5, 1, 2, 3])] * 3),
       batch_seconds=st.sampled_from([1, 2]), partitions=st.integers(1, 5),
       choices=st.lists(st.integers(0, 5), min_size=1, max_size=8), cross=st.booleans())
def test_any_probe_order_equals_nested_loops(tmp_path_factory, data, windows, batch_seconds,
                                             partitions, choices, cross):
    """A self-join (two windows over stream s) and a third stream r, joined on the key or, with
    ``cross``, by a cross product the query forces; every lottery replaced by a drawn choice;
    each batch's results against nested loops over all records."""
    records, files = data
    root = tmp_path_factory.mktemp("eddyprop")
    write_streams(root, files)
    w = dict(zip("xyz", windows, strict=True))
    sql = (f"SELECT x.k, x.ts AS xt, y.ts AS yt, z.ts AS zt FROM s [RANGE {w['x']} SECONDS] x, "
           f"s [RANGE {w['y']} SECONDS] y, r [RANGE {w['z']} SECONDS] z WHERE x.k = y.k"
           + ("" if cross else " AND y.k = z.k"))
    opt = Optimizer(sql, Catalog.from_dict(CATALOG), cost_model="rate", optimizer="topdown")
    eddy = ForcedEddy(opt.query, opt.catalog, root, batch_seconds, partitions=partitions,
                      choices=choices)
    keyed = nested_loops(records, w, batch_seconds, key_z=not cross)
    seen = set()
    for b in eddy.run():
        got = Counter((int(k), round(xt, 3), round(yt, 3), round(zt, 3))
                      for k, xt, yt, zt in b.rows)
        want = Counter({(k, round(xt, 3), round(yt, 3), round(zt, 3)): n
                        for (k, xt, yt, zt), n in keyed.get(b.index, Counter()).items()})
        assert got == want, (b.index, b.routes)
        seen.add(b.index)
    assert set(keyed) <= seen


def _three(root: Path, seconds: int = 6) -> None:
    """Streams a (20/s, key 1), b (5/s, key 2: never joins a) and c (10/s, key 1: each a
    tuple meets every live c tuple)."""
    rng = np.random.default_rng(0)
    for name, n, key in (("a", 20, 1), ("b", 5, 2), ("c", 10, 1)):
        (root / name).mkdir(parents=True)
        for s in range(seconds):
            ts = np.sort(s + rng.integers(0, 1000, n) / 1000)
            pd.DataFrame({"k": np.full(n, key, dtype=np.int64), "ts": ts}).to_parquet(
                root / name / f"{s:06d}.parquet", index=False)


THREE = ("SELECT a.ts, b.ts, c.ts FROM a [RANGE 2 SECONDS] a, b [RANGE 2 SECONDS] b, "
         "c [RANGE 2 SECONDS] c WHERE a.k = b.k AND a.k = c.k")
THREE_CATALOG = {"tables": {n: {"rate": 1, "window": 2, "columns": {"k": {}, "ts": {}}}
                            for n in "abc"}}


def test_lottery_is_seeded_and_learns_the_eliminating_probe(tmp_path):
    """a's new tuples may probe b (eliminates every tuple: earns a ticket per tuple given) or
    c (returns ~20 per tuple: no tickets, a lottery counts at least 1). After the first batch
    b holds ~20+ tickets to c's 1, so a's parts go to b first far more often than a fair coin
    would send them (one in two). Same seed, same routes; another seed, other draws."""
    _three(tmp_path)
    catalog = Catalog.from_dict(THREE_CATALOG)
    runs = {seed: list(_eddy(THREE, catalog, tmp_path, seed=seed).run()) for seed in (1, 1, 2)}
    one = [b.routes for b in runs[1]]
    assert one == [b.routes for b in list(_eddy(THREE, catalog, tmp_path, seed=1).run())]
    assert all(len(b.rows) == 0 for b in runs[1])  # b never joins a
    later = Counter()
    for b in runs[1][1:]:
        later.update({r: n for r, n in b.routes.items() if r.startswith("a:")})
    assert sum(later.values()) == 5 * 4  # 5 batches, 4 parts of a's tuples each
    assert later["a:b"] >= 0.8 * sum(later.values()), later
    draws = [tuple(b.routes.items()) for b in runs[1]]
    assert any(draws != [tuple(b.routes.items()) for b in
                         _eddy(THREE, catalog, tmp_path, seed=s).run()] for s in (2, 3, 4))


def test_eddy_refuses_what_it_cannot_evaluate(tmp_path):
    _three(tmp_path, seconds=1)
    catalog = Catalog.from_dict(THREE_CATALOG)
    with pytest.raises(StreamError, match="cannot evaluate"):
        _eddy(THREE + " AND abs(a.k) < 3", catalog, tmp_path)
    with pytest.raises(StreamError, match="partitions"):
        _eddy(THREE, catalog, tmp_path, partitions=0)
    with pytest.raises(StreamError, match="routing"):
        _eddy(THREE, catalog, tmp_path, routing="random")


def test_fixed_routing_takes_from_order(tmp_path):
    """Without lotteries, every part probes the first connected item in FROM order: a's parts
    b (then stop: empty), b's a (then stop), c's a then b."""
    _three(tmp_path, seconds=2)
    batches = list(_eddy(THREE, Catalog.from_dict(THREE_CATALOG), tmp_path,
                         routing="fixed").run())
    assert [b.routes for b in batches] == [{"a:b": 4, "b:a": 4, "c:a>b": 4}] * 2


SEGTOLLS_ORACLE = """
SELECT floor(greatest(p.ts, s.ts, x.ts, q.ts, t.ts)) AS batch,
       p.vid, p.xway, p.seg, p.speed, s.avgspeed, s.cars, x.vid AS crashed,
       q.vid AS passing, t.avgspeed AS upstream
FROM positions p, segstats s, accidents x, positions q, segstats t
WHERE p.seg = s.seg AND s.seg = x.seg AND p.seg = q.seg AND p.xway = q.xway
  AND x.seg = t.seg AND x.xway = t.xway AND p.speed < 40 AND q.speed > 80 AND t.cars > 150
  AND greatest(p.ts, s.ts, x.ts, q.ts, t.ts) - p.ts < 5
  AND greatest(p.ts, s.ts, x.ts, q.ts, t.ts) - s.ts < 10
  AND greatest(p.ts, s.ts, x.ts, q.ts, t.ts) - x.ts < 30
  AND greatest(p.ts, s.ts, x.ts, q.ts, t.ts) - q.ts < 2
  AND greatest(p.ts, s.ts, x.ts, q.ts, t.ts) - t.ts < 30
"""
"""The SegTollS-shaped 5-way query of ``reopt data stream --workload segtolls`` over all
tuples, its windows (5, 10, 30, 2, 30 s) as plain timestamp conditions."""


def segtolls_per_batch(spark, root: Path) -> dict[int, str]:
    """A small drifting SegTollS stream written to ``root``, and batch Spark SQL's answer
    over all its tuples (:data:`SEGTOLLS_ORACLE`) digested per micro-batch."""
    generate_stream("segtolls", root, seed=2, phases="3:keys=8;3:positions=200,accidents=6,keys=8")
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
    return expected


@pytest.mark.spark
def test_eddy_runs_segtolls_like_batch_sql(spark, tmp_path):
    root = tmp_path / "st"
    expected = segtolls_per_batch(spark, root)
    eddy = _eddy((root / "query.sql").read_text(), str(root / "catalog.json"), root, seed=5)
    for b in eddy.run():
        assert answer_digest(b.rows) == expected.get(b.index, answer_digest([])), b.index


def test_the_eddy_strategy_routes_where_the_executor_runs(tmp_path):
    """``run_strategy("eddy", executor=...)``: in process with ``local``, the Spark eddy with
    ``spark`` (which, without a session, says so before any batch runs)."""
    _three(tmp_path, seconds=2)
    opt = Optimizer(THREE, Catalog.from_dict(THREE_CATALOG), cost_model="rate",
                    optimizer="topdown")
    assert next(run_strategy("eddy", opt, tmp_path, 1, None, None, executor="local")).routes
    with pytest.raises(StreamError, match="no Spark session"):
        next(run_strategy("eddy", opt, tmp_path, 1, None, None, executor="spark"))
