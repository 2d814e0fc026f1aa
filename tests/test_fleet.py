"""Fleets on Spark (issue 19): every query's result after every round equals an in-process
optimizer's — a fresh one fed the same accepted deltas (from scratch), and for a sample the
relations of an in-process session fed the same rounds —; a bad delta rejects that query's
deltas only; the jobs per round do not grow with the fleet; a saved fleet resumes."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from reopt.api import Optimizer
from reopt.costmodel.errors import ReoptError
from reopt.fleet import Fleet, FleetQuery, read_deltas, read_queries

sys.path.insert(0, "benchmarks")
from workload import generate  # noqa: E402

pytestmark = pytest.mark.spark

MODEL = "cout"
WORKLOAD = generate(11, 5, min_relations=4, max_relations=6)


def fleet_queries() -> list[FleetQuery]:
    out = [FleetQuery(w.name, w.sql, w.catalog) for w in WORKLOAD]
    out.append(FleetQuery("q3", "tpch:q3"))  # the fleet's catalog: built-in TPC-H
    out.append(FleetQuery("broken", "SELECT * FROM nosuch"))
    return out


def rounds() -> list[list[dict[str, str]]]:
    r1 = [{"query": w.name, "delta": d.strip()} for w in WORKLOAD
          for d in w.deltas[0].split(";")]
    r1.append({"query": "q3", "delta": "card orders *4"})
    r2 = [{"query": w.name, "delta": w.deltas[1].split(";")[0].strip()} for w in WORKLOAD]
    r2 += [{"query": WORKLOAD[0].name, "delta": "card nosuch *2"},  # rejects its batch
           {"query": "ghost", "delta": "card x *2"}]
    return [r1, r2]


def in_process(fq: FleetQuery) -> Optimizer:
    from reopt.evaluator.driver import load_program
    from reopt.fleet import FleetOptions, _optimizer

    return _optimizer(fq, FleetOptions(load_program(None, "all"), MODEL, "all"))


def plan_json(step) -> str:
    return json.dumps(step.plan.to_json(), sort_keys=True)


def test_a_fleet_equals_in_process_optimizers_round_after_round(spark, tmp_path):
    queries = fleet_queries()
    fleet = Fleet(queries, cost_model=MODEL, spark=spark, partitions=3,
                  checkpoint=tmp_path / "ck")
    r0 = fleet.optimize()
    assert [e.split(":")[0] for e in r0.errors] == ["query broken"]
    live = {fq.name: in_process(fq) for fq in queries if fq.name != "broken"}
    accepted: dict[str, list[str]] = {n: [] for n in live}
    for name, o in live.items():
        step = o.optimize()
        got = r0.by_name()[name]
        assert got["cost"] == step.cost and got["plan"] == plan_json(step)
    prev = r0.by_name()
    for k, deltas in enumerate(rounds(), 1):
        rnd = fleet.update(deltas)
        got = rnd.by_name()
        batches: dict[str, list[str]] = {}
        for d in deltas:
            batches.setdefault(d["query"], []).append(d["delta"])
        for name, batch in batches.items():
            if name not in live:
                assert got[name]["error"].startswith(f"query {name}: no such query")
                continue
            try:
                step = live[name].update(batch)
            except ReoptError:
                assert got[name]["error"].startswith(f"query {name}: ")
                assert got[name]["cost"] == prev[name]["cost"]  # its state as it was
                continue
            accepted[name] += batch
            fresh = in_process(next(fq for fq in queries if fq.name == name))
            fresh.adjustments = fresh.check(accepted[name])
            scratch = fresh.optimize()
            assert got[name]["error"] is None
            assert got[name]["cost"] == step.cost == scratch.cost, (k, name)
            assert got[name]["plan"] == plan_json(step) == plan_json(scratch)
        assert len(rnd.errors) == (0 if k == 1 else 2)
        prev = got
    # the relations the fleet holds for a sample equal the in-process sessions'
    for name in (WORKLOAD[0].name, "q3"):
        held = fleet.optimizer(name).relations()
        mine = live[name].relations()
        assert set(held) == set(mine)
        for p in held:
            assert set(map(tuple, held[p].itertuples(index=False))) == \
                set(map(tuple, mine[p].itertuples(index=False))), (name, p)


def test_jobs_per_round_do_not_grow_with_the_fleet(spark):
    one = Fleet(fleet_queries()[:1], cost_model=MODEL, spark=spark)
    many = Fleet(fleet_queries(), cost_model=MODEL, spark=spark, partitions=4)
    a0, b0 = one.optimize(), many.optimize()
    a1 = one.update(rounds()[0])
    b1 = many.update(rounds()[0])
    assert a0.jobs == b0.jobs and a1.jobs == b1.jobs
    assert 1 <= b1.jobs <= 3


def test_a_saved_fleet_resumes_where_it_stopped(spark, tmp_path):
    r1, r2 = rounds()
    a = Fleet(fleet_queries(), cost_model=MODEL, spark=spark, partitions=2)
    a.optimize()
    a.update(r1)
    a.save(tmp_path / "saved")
    old = tmp_path / "old"  # as saved before states had stamps: loads, with none
    shutil.copytree(tmp_path / "saved", old, ignore=shutil.ignore_patterns("state.parquet"))
    spark.read.parquet(str(tmp_path / "saved" / "state.parquet")).drop(
        "stamp", "resident").write.parquet(str(old / "state.parquet"))
    b = Fleet.load(tmp_path / "saved", spark=spark)
    c = Fleet.load(old, spark=spark)
    ra, rb, rc = a.update(r2), b.update(r2), c.update(r2)
    assert rc.number == rb.number == ra.number == 2
    assert rc.resident == rb.resident == 0  # a loaded fleet's first round loads every state

    def strip(rs):  # CPU seconds differ, and so the pickled steps holding them; the round's
        # id (stamp) and whether a worker held the optimizer say how, not what
        return [{k: v for k, v in r.items() if k not in ("seconds", "step", "resident", "stamp")}
                for r in rs]

    assert strip(rc.results) == strip(rb.results) == strip(ra.results)


def test_fleet_input_errors(tmp_path):
    with pytest.raises(ReoptError, match="used twice"):
        Fleet([FleetQuery("a", "tpch:q3"), FleetQuery("a", "tpch:q5")])
    (tmp_path / "d.jsonl").write_text('{"query": "a", "delta": "card x *2"}\n{"query": 3}\n')
    with pytest.raises(ReoptError, match=r"d.jsonl:2: expected"):
        read_deltas(tmp_path / "d.jsonl")
    with pytest.raises(ReoptError, match="no .sql files"):
        read_queries(tmp_path)
    (tmp_path / "q.jsonl").write_text('{"name": "a", "sql": "tpch:q3"}\nnot json\n')
    with pytest.raises(ReoptError, match=r"q.jsonl:2: not JSON"):
        read_queries(tmp_path / "q.jsonl")
    with pytest.raises(ReoptError, match="not a saved fleet"):
        Fleet.load(tmp_path)


def test_the_fleet_command(spark, tmp_path, capsys):
    from reopt.cli import main

    qdir = tmp_path / "q"
    qdir.mkdir()
    for w in WORKLOAD[:2]:
        (qdir / f"{w.name}.sql").write_text(w.sql)
        (qdir / f"{w.name}.catalog.json").write_text(json.dumps(w.catalog))
    (qdir / "q3.sql").write_text("tpch:q3")  # no catalog beside it: --catalog's, else TPC-H
    a, b = WORKLOAD[0].name, WORKLOAD[1].name
    (tmp_path / "r1.jsonl").write_text(
        json.dumps({"query": a, "delta": "card nosuch *2"}) + "\n"
        + json.dumps({"query": b, "delta": WORKLOAD[1].deltas[0].split(";")[0]}) + "\n")
    (tmp_path / "r2.jsonl").write_text(json.dumps({"query": "q3", "delta": "card orders *8"}))
    out = tmp_path / "out.jsonl"
    rc = main(["fleet", str(qdir), "--cost-model", MODEL, "--round", str(tmp_path / "r1.jsonl"),
               "--save", str(tmp_path / "saved"), "-o", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 0, err
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(x["round"], x["query"]) for x in lines] == \
        [(r, n) for r in (0, 1) for n in sorted([a, b, "q3"])]
    rejected = [x for x in lines if x["error"]]
    assert len(rejected) == 1 and rejected[0]["query"] == a and "nosuch" in rejected[0]["error"]
    assert f"reopt: query {a}: delta 'card nosuch *2'" in err
    assert "round 1: 3 queries" in err and "1 rejected" in err
    rc = main(["fleet", "--resume", str(tmp_path / "saved"), "--round",
               str(tmp_path / "r2.jsonl"), "--no-progress"])
    resumed = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert rc == 0 and {x["round"] for x in resumed} == {2}
    q3 = Optimizer("tpch:q3", engine="python", cost_model=MODEL)
    q3.adjustments = q3.check(["card orders *8"])
    assert next(x for x in resumed if x["query"] == "q3")["cost"] == q3.optimize().cost
    assert main(["fleet", "--no-progress"]) == 2
    assert "give QUERIES or --resume DIR" in capsys.readouterr().err
