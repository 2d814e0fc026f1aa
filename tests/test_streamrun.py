"""``reopt stream --strategy``: hindsight's and static's plans against a fresh optimizer given
statistics counted independently from the files (rates: records per second; selectivities:
matching pairs among the windows' contents by nested loops); the eddy through the CLI,
without Spark, against the batch SQL oracle."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from test_stream import QUERY, batch_answer, stream_tuples

from reopt.api import Optimizer
from reopt.cli import main
from reopt.stream import ContinuousQuery, MicroBatch, plan_line
from reopt.streamgen import generate_stream
from reopt.streamrun import Strategy, run_strategy

WINDOWS = {"p": ("persons", 3), "a": ("auctions", 2), "b": ("bids", 1)}


def true_deltas(data, start: float, end: float) -> list[str]:
    """Batch [start, end)'s statistics counted from the records themselves."""
    out = [f"rate {s} ={n / (end - start):.6g}" for s, df in data.items()
           if (n := int(((df.ts >= start) & (df.ts < end)).sum())) > 0]
    alive = {a: data[t][(data[t].ts > end - w) & (data[t].ts < end)]
             for a, (t, w) in WINDOWS.items()}
    for (x, cx), (y, cy) in ((("a", "seller"), ("p", "id")), (("a", "id"), ("b", "auction"))):
        pairs = sum(int(u == v) for u in alive[x][cx] for v in alive[y][cy])
        if pairs:
            out.append(f"sel {x}.{cx}={y}.{cy} ={pairs / (len(alive[x]) * len(alive[y])):.6g}")
    return out


def fresh_plan(catalog: str, deltas: list[str]) -> str:
    opt = Optimizer(QUERY, catalog, cost_model="rate", optimizer="topdown")
    opt.optimize()
    return plan_line(opt.update(deltas).plan)


class PlansOnly(ContinuousQuery):
    """The executor without its joins: each step only records the plan it was given (the
    executor's results under any plan are ``test_stream``'s business)."""

    def step(self, plan):
        start = self.batch * self.batch_seconds
        self.batch += 1
        return MicroBatch(self.batch - 1, start, start + self.batch_seconds, plan_line(plan),
                          {}, {}, [], [], 0.0)


def test_hindsight_and_static_plans(tmp_path, monkeypatch):
    """Hindsight runs each batch under the plan a fresh optimizer picks from that batch's
    true statistics; static runs every batch under the first batch's."""
    root = tmp_path / "nx"
    generate_stream("nexmark", root, seed=7, phases="2:keys=6;2:bids=80,keys=6;2:persons=60")
    catalog = str(root / "catalog.json")
    data = stream_tuples(root)
    wanted = [fresh_plan(catalog, true_deltas(data, 2 * k, 2 * k + 2)) for k in range(3)]
    assert len(set(wanted)) > 1  # the statistics drift enough to change the best plan
    monkeypatch.setattr("reopt.streamrun.make_query",
                        lambda executor, *a, **k: PlansOnly(*a, **k))
    record = Strategy("hindsight")
    opt = Optimizer(QUERY, catalog, cost_model="rate", optimizer="topdown-inc")
    batches = list(run_strategy("hindsight", opt, root, 2, None, None, strategy=record))
    assert [b.plan for b in batches] == wanted
    assert record.switches == sum(x != y for x, y in zip(wanted, wanted[1:], strict=False))
    static = run_strategy("static", Optimizer(QUERY, catalog, cost_model="rate",
                                              optimizer="topdown"), root, 2, None, None)
    assert [b.plan for b in static] == [wanted[0]] * 3


@pytest.mark.spark
def test_cli_eddy_needs_no_spark_and_writes_each_result_once(spark, tmp_path, capsys,
                                                            monkeypatch):
    root = tmp_path / "nx"
    generate_stream("nexmark", root, seed=3, phases="2:keys=6;2:persons=40,keys=6")
    oracle = batch_answer(spark, stream_tuples(root))

    def no_spark(*args, **kwargs):
        raise AssertionError("the eddy started Spark")

    monkeypatch.setattr("reopt.spark.get_spark", no_spark)
    results = tmp_path / "results.jsonl"
    assert main(["stream", QUERY, "--data", str(root), "--batch-seconds", "2", "--strategy",
                 "eddy", "--seed", "4", "--json", "--results", str(results)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["strategy"] == "eddy" and {b["plan"] for b in doc["batches"]} == {"eddy"}
    assert all(b["routes"] for b in doc["batches"])
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    cols = ("batch", "person", "auction", "bidder", "price")
    assert Counter(tuple(r[c] for c in cols) for r in lines) == Counter(
        tuple(int(v) for v in r) for r in oracle[list(cols)].itertuples(index=False))
    assert len(lines) > 0


def test_strategies_refuse_bad_input_before_spark_starts(tmp_path, capsys, monkeypatch):
    root = tmp_path / "nx"
    generate_stream("nexmark", root, seconds=3)

    def no_spark(*args, **kwargs):
        raise AssertionError("Spark started for bad input")

    monkeypatch.setattr("reopt.spark.get_spark", no_spark)
    unordered = ("SELECT p.id FROM persons [RANGE 3 SECONDS] p, bids [RANGE 1 SECOND] b, "
                 "auctions [RANGE 2 SECONDS] a WHERE p.id = a.seller AND a.id = b.auction")
    for strategy, sql, message in (("spark", unordered, "needs an equality between 'b'"),
                                   ("eddy", QUERY + " AND abs(b.price) < 3",
                                    "eddy cannot evaluate"),
                                   ("static", QUERY + " AND abs(b.price) < 3",
                                    "local executor cannot evaluate")):
        assert main(["stream", sql, "--data", str(root), "--strategy", strategy]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("reopt: ") and message in err and "\n" not in err
    for executor in ("local", "spark"):  # the eddy on Spark: refused before Spark starts
        assert main(["stream", QUERY, "--data", str(root), "--strategy", "eddy", "--executor",
                     executor, "--seed", "-1"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("reopt: ") and "seed must be" in err and "\n" not in err
    assert main(["stream", QUERY, "--data", str(root), "--strategy", "psychic"]) == 2
    assert "psychic" in capsys.readouterr().err
