"""Stream workloads (``reopt data stream``) and the continuous-query executor
(:class:`reopt.stream.ContinuousQuery`).

Oracles: the generator's phases (records per second against the phase's Poisson rate; a
join's selectivity against ``1/keys``); for the executor, a batch Spark SQL evaluation of the
windowed join over ALL tuples, written here as plain SQL with the timestamp conditions (each
result belongs to the micro-batch holding its newest tuple), compared per micro-batch as a
multiset; observed rates against the files' record counts and selectivities against a
brute-force count of matching pairs over the windows' contents.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reopt.api import Optimizer
from reopt.cli import main
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.errors import ReoptError
from reopt.execute import answer_digest
from reopt.stream import ContinuousQuery, StreamError, plan_line
from reopt.streamgen import WORKLOADS, generate_stream, parse_phases
from reopt.streamlocal import EXECUTORS, make_query


def frames(root: Path, stream: str) -> list[pd.DataFrame]:
    return [pd.read_parquet(p) for p in sorted((root / stream).glob("*.parquet"))]


# -- the generator ------------------------------------------------------------------------------
def test_same_seed_same_streams_other_seed_other_streams(tmp_path):
    a = generate_stream("nexmark", tmp_path / "a", seconds=3, seed=5)
    b = generate_stream("nexmark", tmp_path / "b", seconds=3, seed=5)
    generate_stream("nexmark", tmp_path / "c", seconds=3, seed=6)
    assert a == b
    for s in a["streams"]:
        for x, y in zip(frames(tmp_path / "a", s), frames(tmp_path / "b", s), strict=True):
            pd.testing.assert_frame_equal(x, y)
    assert any(not frames(tmp_path / "a", s)[0].equals(frames(tmp_path / "c", s)[0])
               for s in a["streams"])


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_files_hold_their_second_and_phases_drift(tmp_path, workload):
    """One file per stream second, records in [S, S+1) in ts order; the mean records per
    second of each phase near its Poisson rate (4 sigma); the join keys' selectivity near
    1/keys in a phase with few keys."""
    root = tmp_path / workload
    phases = {"nexmark": "4;4:bids=300,keys=5", "linearroad": "4;4:positions=300,keys=5",
              "segtolls": "4;4:positions=300,keys=5"}
    m = generate_stream(workload, root, seed=1, phases=phases[workload])
    plan = parse_phases(phases[workload], WORKLOADS[workload])
    for stream in m["streams"]:
        files = sorted((root / stream).glob("*.parquet"))
        assert [f.name for f in files] == [f"{s:06d}.parquet" for s in range(8)]
        per_second = []
        for s, f in enumerate(files):
            ts = pd.read_parquet(f)["ts"].to_numpy()
            assert ((ts >= s) & (ts < s + 1)).all() and (np.diff(ts) >= 0).all()
            per_second.append(len(ts))
        for k, phase in enumerate(plan):
            rate = phase.rates[stream]
            mean = np.mean(per_second[4 * k:4 * k + 4])
            assert abs(mean - rate) <= 4 * np.sqrt(rate / 4) + 0.5, (stream, k, mean, rate)
    key = {"nexmark": ("bids", "auction"), "linearroad": ("positions", "seg"),
           "segtolls": ("positions", "seg")}[workload]
    late = pd.concat(frames(root, key[0])[4:])[key[1]]
    assert set(late) <= set(range(5)) and len(set(late)) == 5
    counts = late.value_counts()
    assert abs((counts ** 2).sum() / len(late) ** 2 - 1 / 5) < 0.02


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_catalog_and_query_plan_under_the_rate_model(tmp_path, workload):
    root = tmp_path / workload
    generate_stream(workload, root, seconds=3)
    step = Optimizer(str(root / "query.sql"), str(root / "catalog.json"), cost_model="rate",
                     optimizer="topdown").optimize()
    catalog = json.loads((root / "catalog.json").read_text())
    aliases = {"nexmark": {"p", "a", "b"}, "linearroad": {"p", "s", "x"},
               "segtolls": {"p", "s", "x", "q", "t"}}[workload]
    assert set(step.plan.relations) == aliases and step.metrics["stream"]["rate"] > 0
    assert {t: e["rate"] for t, e in catalog["tables"].items()} == WORKLOADS[workload].rates


@pytest.mark.parametrize("argv, message", [
    (["--workload", "nexmark", "--phases", "2;x"], "must start with its length"),
    (["--workload", "nexmark", "--phases", "2:bogus=1"], "neither 'keys' nor a stream"),
    (["--workload", "nexmark", "--phases", "2:keys=0.5"], "keys in phase '2:keys=0.5'"),
    (["--workload", "nexmark", "--phases", "2:bids=-1"], "finite VALUE >= 0"),
    (["--workload", "nexmark", "--phases", "2;2", "--seconds", "5"], "disagrees with --phases"),
    (["--workload", "nexmark", "--seconds", "2"], "at least 3 seconds"),
])
def test_bad_stream_arguments_are_one_line_errors(tmp_path, capsys, argv, message):
    assert main(["data", "stream", "-o", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("reopt: ") and message in err and "\n" not in err


def test_segtolls_draws_linearroads_streams(tmp_path):
    """Same arguments, same records as linearroad (the workload only adds its 5-way query)."""
    a = generate_stream("linearroad", tmp_path / "lr", seed=4, phases="2;2:accidents=5")
    b = generate_stream("segtolls", tmp_path / "st", seed=4, phases="2;2:accidents=5")
    assert a["records"] == b["records"] and b["workload"] == "segtolls"
    for s in a["streams"]:
        for x, y in zip(frames(tmp_path / "lr", s), frames(tmp_path / "st", s), strict=True):
            pd.testing.assert_frame_equal(x, y)
    assert (tmp_path / "lr" / "catalog.json").read_text() == \
        (tmp_path / "st" / "catalog.json").read_text()
    assert (tmp_path / "st" / "query.sql").read_text().count(" [RANGE ") == 5


def test_data_stream_cli_writes_the_folder(tmp_path, capsys):
    out = tmp_path / "lr"
    assert main(["data", "stream", "--workload", "linearroad", "-o", str(out), "--seconds",
                 "3", "--seed", "2"]) == 0
    assert {p.name for p in out.iterdir()} == {"positions", "segstats", "accidents",
                                               "catalog.json", "query.sql", "stream.json"}
    assert main(["data", "stream", "--workload", "linearroad", "-o", str(out)]) == 2
    assert "must be empty" in capsys.readouterr().err


# -- the executor ---------------------------------------------------------------------------------
ORACLE = """
SELECT floor(greatest(p.ts, a.ts, b.ts) / {B}) AS batch,
       p.id AS person, p.state, a.id AS auction, a.category, b.bidder, b.price
FROM persons p, auctions a, bids b
WHERE p.id = a.seller AND a.id = b.auction AND b.price > 100
  AND greatest(p.ts, a.ts, b.ts) - p.ts < 3
  AND greatest(p.ts, a.ts, b.ts) - a.ts < 2
  AND greatest(p.ts, a.ts, b.ts) - b.ts < 1
"""
"""The windowed join of :data:`QUERY` over all tuples."""
QUERY = """SELECT p.id AS person, p.state, a.id AS auction, a.category, b.bidder, b.price
FROM persons [RANGE 3 SECONDS] p, auctions [RANGE 2 SECONDS] a, bids [RANGE 1 SECOND] b
WHERE p.id = a.seller AND a.id = b.auction AND b.price > 100"""
"""The NEXMark query with windows short enough to expire within the 6 s of the test's
stream (the generated query's 20/10/5 s would not)."""


def readable(root: Path, stream: str) -> pd.DataFrame:
    parts = []
    for p in sorted((root / stream).glob("*.parquet")):
        try:
            parts.append(pd.read_parquet(p))
        except Exception:  # the corrupted file the executor must skip
            continue
    return pd.concat(parts, ignore_index=True)


def stream_tuples(root: Path) -> dict[str, pd.DataFrame]:
    return {s: readable(root, s) for s in ("persons", "auctions", "bids")}


def per_batch(oracle: pd.DataFrame) -> tuple[dict[int, str], Counter]:
    """The oracle's results per micro-batch: the digest of each batch's rows, and how many."""
    expected = {int(k): answer_digest(g.drop(columns="batch").itertuples(index=False))
                for k, g in oracle.groupby("batch")}
    return expected, Counter(int(k) for k in oracle["batch"])


def batch_answer(spark, data: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The oracle: the windowed join over all the tuples, as batch Spark SQL."""
    for s, df in data.items():
        spark.createDataFrame(df).createOrReplaceTempView(s)
    try:
        return spark.sql(ORACLE.format(B=2)).toPandas()
    finally:
        for s in data:
            spark.catalog.dropTempView(s)


@pytest.mark.spark
def test_executor_equals_batch_sql_per_window_under_two_plans(spark, tmp_path):
    """Both executors (Spark, in process), one oracle."""
    root = tmp_path / "nx"
    generate_stream("nexmark", root, seed=7, phases="2:keys=6;2:bids=80,keys=6;2:keys=3")
    (root / "persons" / "000003.parquet").write_bytes(b"not parquet")  # a malformed file
    query, catalog = QUERY, str(root / "catalog.json")

    def plan(*deltas: str):
        o = Optimizer(query, catalog, cost_model="rate", optimizer="topdown")
        step = o.optimize()
        for d in deltas:
            step = o.update(d)
        return o, step.plan

    opt, left_deep = plan()
    _, bushy = plan("rate persons *100")
    assert plan_line(left_deep) != plan_line(bushy)  # two join orders, else the test is void

    data = stream_tuples(root)
    oracle = batch_answer(spark, data)
    expected, sizes = per_batch(oracle)
    assert len(oracle) > 30 and len(sizes) == 3  # results in every window

    # two runs, each plan running every other window: every window is computed by both
    # plans, and the plan changes after every batch, both ways (the switch moves no state)
    orders = {"bushy first": (bushy, left_deep, bushy),
              "left-deep first": (left_deep, bushy, left_deep)}
    for executor, (name, order) in itertools.product(EXECUTORS, orders.items()):
        name = f"{executor}, {name}"
        cq = make_query(executor, opt.query, opt.catalog, root, spark, batch_seconds=2,
                        state="windows")  # intermediate: tests/test_stream_migration.py
        batches = list(cq.run(lambda last, order=order: order[0 if last is None
                                                             else last.index + 1]))
        assert [b.index for b in batches] == [0, 1, 2]
        assert [b.plan for b in batches] == [plan_line(p) for p in order]
        for b in batches:
            assert len(b.rows) == sizes.get(b.index, 0), (name, b.index)
            assert answer_digest(b.rows) == expected.get(b.index), (name, b.index)
        assert batches[1].skipped == {"persons": 1}, name

    # the last run's observations: rates are the files' counts per second, selectivities
    # brute-force counts of matching pairs over the windows at the batch's end (t = 6)
    last = batches[-1]
    for s, df in data.items():
        n = int(((df.ts >= 4) & (df.ts < 6)).sum())
        assert f"rate {s} ={n / 2:.6g}" in last.deltas
    p = data["persons"][data["persons"].ts > 6 - 3]
    a = data["auctions"][data["auctions"].ts > 6 - 2]
    b = data["bids"][data["bids"].ts > 6 - 1]
    pairs = sum(int(x == y) for x in a.seller for y in p.id)
    assert f"sel a.seller=p.id ={pairs / (len(a) * len(p)):.6g}" in last.deltas
    pairs = sum(int(x == y) for x in a.id for y in b.auction)
    assert f"sel a.id=b.auction ={pairs / (len(a) * len(b)):.6g}" in last.deltas
    opt.check(last.deltas)  # the rate model accepts what the executor reports


def test_executor_refuses_what_it_cannot_run(tmp_path):
    root = tmp_path / "nx"
    generate_stream("nexmark", root, seconds=3)
    catalog = str(root / "catalog.json")
    agg = Optimizer("SELECT count(*) FROM bids [RANGE 5 SECONDS] b, auctions a "
                    "WHERE a.id = b.auction", catalog, cost_model="rate", optimizer="topdown")
    with pytest.raises(StreamError, match="aggregates"):
        ContinuousQuery(agg.query, agg.catalog, root, spark=None)
    ok = Optimizer(str(root / "query.sql"), catalog, cost_model="rate", optimizer="topdown")
    with pytest.raises(StreamError, match="no stream folder 'persons'"):
        ContinuousQuery(ok.query, ok.catalog, tmp_path, spark=None)
    with pytest.raises(ReoptError, match="batch seconds"):
        ContinuousQuery(ok.query, ok.catalog, root, spark=None, batch_seconds=0)


@pytest.mark.spark
def test_stream_cli_replans_and_writes_each_result_once(spark, tmp_path, capsys):
    """``reopt stream`` with re-planning every batch: per-batch result counts and the results
    file against the batch SQL oracle; the re-planning log names the observed deltas."""
    root = tmp_path / "nx"
    generate_stream("nexmark", root, seed=3, phases="2:keys=6;2:persons=40,keys=6")
    oracle = batch_answer(spark, stream_tuples(root))
    results = tmp_path / "results.jsonl"
    assert main(["stream", QUERY, "--data", str(root), "--batch-seconds", "2",
                 "--plan-every", "2", "--json", "--results", str(results)]) == 0
    doc = json.loads(capsys.readouterr().out)
    sizes = Counter(int(k) for k in oracle["batch"])
    assert [b["results"] for b in doc["batches"]] == [sizes.get(0, 0), sizes.get(1, 0)]
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(lines) == len(oracle) > 0
    got = Counter(tuple(r[c] for c in ("batch", "person", "auction", "bidder", "price"))
                  for r in lines)
    want = Counter(tuple(int(v) for v in r) for r in
                   oracle[["batch", "person", "auction", "bidder", "price"]].itertuples(
                       index=False))
    assert got == want
    assert len(doc["replanning"]) == 1 and "rate persons =" in doc["replanning"][0]


def test_stream_cli_bad_input_is_one_line(tmp_path, capsys):
    root = tmp_path / "nx"
    generate_stream("nexmark", root, seconds=3)
    assert main(["stream", QUERY, "--data", str(root), "--batch-seconds", "2",
                 "--plan-every", "3"]) == 2
    assert "not a multiple of --batch-seconds" in capsys.readouterr().err
    assert main(["stream", QUERY, "--data", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("reopt: ") and "\n" not in err


# -- a property: any plan per batch, any windows, against brute force ------------------------
def all_plans(opt: Optimizer) -> list:
    """Every plan tree of the query's plan space (join orders, shapes and operators)."""
    from reopt.optimizers.exhaustive import all_plans

    return list(all_plans(opt.space()))


def brute_force(records: dict[str, list[tuple[int, float]]], windows: dict[str, float],
                batch_seconds: int) -> dict[int, Counter]:
    """Batch -> multiset of (x.k, x.ts, y.ts, z.ts) for x, y over stream s and z over r,
    all keys equal, every tuple within its window of the newest: nested loops."""
    out: dict[int, Counter] = {}
    for xk, xt in records["s"]:
        for yk, yt in records["s"]:
            for zk, zt in records["r"]:
                newest = max(xt, yt, zt)
                if (xk == yk == zk and newest - xt < windows["x"]
                        and newest - yt < windows["y"] and newest - zt < windows["z"]):
                    out.setdefault(int(newest // batch_seconds), Counter())[
                        (xk, xt, yt, zt)] += 1
    return out


SECONDS = 3


@st.composite
def streams(draw):
    """Records of streams s(k, ts) and r(k, ts) over 3 seconds; some seconds have no file
    (a stalled source), every stream has at least one."""
    records, files = {}, {}
    for name in ("s", "r"):
        present = draw(st.lists(st.booleans(), min_size=SECONDS, max_size=SECONDS)
                       .filter(any))
        rows, seconds = [], []
        for second in range(SECONDS):
            n = draw(st.integers(0, 4))
            ms = sorted(draw(st.lists(st.integers(0, 999), min_size=n, max_size=n)))
            keys = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
            batch = [(k, second + m / 1000) for k, m in zip(keys, ms, strict=True)]
            if present[second]:
                rows += batch
                seconds.append((second, batch))
        records[name], files[name] = rows, seconds
    return records, files


@pytest.mark.spark
def write_streams(root: Path, files: dict[str, list[tuple[int, list[tuple[int, float]]]]]
                  ) -> None:
    """:func:`streams`' files under ``root``: ``STREAM/SSSSSS.parquet`` with ``k`` and ``ts``."""
    for name, seconds in files.items():
        (root / name).mkdir()
        for second, batch in seconds:
            frame = pd.DataFrame({"k": np.array([k for k, _ in batch], dtype=np.int64),
                                  "ts": np.array([t for _, t in batch], dtype=np.float64)})
            frame.to_parquet(root / name / f"{second:06d}.parquet", index=False)


def self_join(windows: tuple[float, float, float]) -> tuple[Optimizer, dict[str, float]]:
    """The self-join property's query (two windows ``x``, ``y`` over stream ``s`` and one,
    ``z``, over ``r``, joined on ``k``) under the rate model, and its windows by alias."""
    catalog = {"tables": {n: {"rate": 2, "window": 1, "columns": {"k": {"distinct": 3},
                                                                  "ts": {}}}
                          for n in ("s", "r")}}
    w = dict(zip("xyz", windows, strict=True))
    sql = (f"SELECT x.k, x.ts AS xt, y.ts AS yt, z.ts AS zt FROM s [RANGE {w['x']} SECONDS] x, "
           f"s [RANGE {w['y']} SECONDS] y, r [RANGE {w['z']} SECONDS] z "
           "WHERE x.k = y.k AND y.k = z.k")
    return Optimizer(sql, Catalog.from_dict(catalog), cost_model="rate",
                     optimizer="topdown"), w


PLAN_CASE = dict(data=streams(), windows=st.tuples(*[st.sampled_from([0.5, 1, 2, 3])] * 3),
                 batch_seconds=st.sampled_from([1, 2]),
                 choices=st.lists(st.integers(0, 10 ** 6), min_size=4, max_size=4))


@settings(max_examples=3, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(**PLAN_CASE)
def test_any_plan_per_batch_equals_brute_force(spark, tmp_path_factory, data, windows,
                                               batch_seconds, choices):
    """A self-join (two windows over stream s) and a third stream; every batch under a plan
    drawn from all plan trees; each batch's results against nested loops over all records."""
    check_any_plan("spark", spark, tmp_path_factory, data, windows, batch_seconds, choices)


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(**PLAN_CASE)
def test_local_any_plan_per_batch_equals_brute_force(tmp_path_factory, data, windows,
                                                     batch_seconds, choices):
    """The same property on the in-process executor (no Spark: many more cases)."""
    check_any_plan("local", None, tmp_path_factory, data, windows, batch_seconds, choices)


def check_any_plan(executor, spark, tmp_path_factory, data, windows, batch_seconds, choices):
    records, files = data
    root = tmp_path_factory.mktemp("prop")
    write_streams(root, files)
    opt, w = self_join(windows)
    plans = all_plans(opt)
    assert len({plan_line(p) for p in plans}) > 1
    cq = make_query(executor, opt.query, opt.catalog, root, spark, batch_seconds=batch_seconds,
                    state="windows")  # intermediate: tests/test_stream_migration.py
    expected = brute_force(records, w, batch_seconds)
    seen = set()
    for b in cq.run(lambda last: plans[choices[0 if last is None else last.index + 1]
                                       % len(plans)]):
        got = Counter((int(k), round(xt, 3), round(yt, 3), round(zt, 3))
                      for k, xt, yt, zt in b.rows)
        want = Counter({(k, round(xt, 3), round(yt, 3), round(zt, 3)): n for
                        (k, xt, yt, zt), n in expected.get(b.index, Counter()).items()})
        assert got == want, (b.index, b.plan)
        seen.add(b.index)
    assert set(expected) <= seen


def test_stream_cli_refuses_an_aggregate_before_spark_starts(tmp_path, capsys, monkeypatch):
    root = tmp_path / "nx"
    generate_stream("nexmark", root, seconds=3)

    def no_spark(*args, **kwargs):
        raise AssertionError("Spark started for bad input")

    monkeypatch.setattr("reopt.spark.get_spark", no_spark)
    assert main(["stream", "SELECT count(*) FROM bids b", "--data", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert "aggregates and GROUP BY over windows are not supported yet" in err
    assert "\n" not in err
