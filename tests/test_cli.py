"""The CLI and the Python API: output shapes, delta steps, and every bad-input path."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from clirun import run, run_json

from reopt.api import Optimizer
from reopt.cli import main
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.errors import DeltaError, OptimizerError
from reopt.costmodel.tpch import tpch_catalog


def check_node(node: dict) -> None:
    assert {"op", "relations", "rows", "cost", "children"} <= set(node)
    assert node["cost"] >= sum(c["cost"] for c in node["children"])
    for c in node["children"]:
        assert set(c["relations"]) <= set(node["relations"])
        check_node(c)


def test_json_output_shape(capsys):
    doc = run_json(capsys, "optimize", "tpch:q3", "tpch:q10", "--optimizer", "topdown,bottomup")
    assert [(q["query"], q["optimizer"]) for q in doc["queries"]] == [
        ("tpch:q3", "topdown"), ("tpch:q3", "bottomup"),
        ("tpch:q10", "topdown"), ("tpch:q10", "bottomup"),
    ]
    for q in doc["queries"]:
        init = q["initial"]
        check_node(init["plan"])
        assert init["cost"] == init["plan"]["cost"]
        m = init["metrics"]
        assert m["seconds"] >= 0
        assert m["search_space"]["or_nodes"] > 0 and m["search_space"]["and_nodes"] > 0
        est = init["estimates"]
        assert set(est["relations"]) == set(init["plan"]["relations"])
        for p in est["predicates"]:
            assert 0 < p["selectivity"] <= 1 and "." in p["left"] and "." in p["right"]
    # both optimizers agree
    assert math.isclose(doc["queries"][0]["initial"]["cost"], doc["queries"][1]["initial"]["cost"])


def test_delta_steps_equal_optimizing_with_changed_statistics(capsys):
    doc = run_json(
        capsys, "optimize", "tpch:q5", "--optimizer", "topdown",
        "--delta", "card orders *8", "--delta", "card lineitem =10",
    )
    steps = doc["queries"][0]["steps"]
    assert [s["deltas"] for s in steps] == [["card orders *8"], ["card lineitem =10"]]
    # independent: the same statistics written into the catalog itself
    cat = tpch_catalog()
    tables = dict(cat.tables)
    tables["orders"] = dataclasses.replace(tables["orders"], rows=tables["orders"].rows * 8)
    after1 = Optimizer("tpch:q5", Catalog(tables), optimizer="topdown").optimize().cost
    tables["lineitem"] = dataclasses.replace(tables["lineitem"], rows=10)
    after2 = Optimizer("tpch:q5", Catalog(tables), optimizer="topdown").optimize().cost
    assert math.isclose(steps[0]["cost"], after1, rel_tol=1e-12)
    assert math.isclose(steps[1]["cost"], after2, rel_tol=1e-12)
    assert steps[1]["cost"] < steps[0]["cost"]


def test_delta_for_a_table_only_some_queries_use(capsys):
    doc = run_json(capsys, "optimize", "tpch:q3", "tpch:q5", "--optimizer", "bottomup",
                   "--delta", "card supplier *4")
    q3, q5 = doc["queries"]
    assert q3["steps"][0]["cost"] == q3["initial"]["cost"]  # q3 has no supplier
    assert q5["steps"][0]["cost"] != q5["initial"]["cost"]


def test_plan_tree_printout(capsys):
    code, out, _ = run(capsys, "optimize", "tpch:q5", "--optimizer", "bottomup")
    assert code == 0
    assert out.startswith("== tpch:q5 · io · bottomup: cost=")
    lines = out.splitlines()
    assert lines[1].startswith("   explored ") and "/592 AND nodes" in lines[1]
    assert lines[2].startswith("hashagg") and "rows=" in lines[2] and "cost=" in lines[2]
    assert any(line.startswith("    ") for line in lines)  # indented children


def test_sql_file_and_catalog_file(tmp_path, capsys):
    cat = tmp_path / "cat.json"
    cat.write_text(json.dumps({"tables": {
        "r": {"rows": 100, "columns": {"a": {"distinct": 10}}},
        "s": {"rows": 50, "columns": {"a": {"distinct": 50}, "b": {}}},
    }}))
    sql = tmp_path / "join.sql"
    sql.write_text("SELECT r.a FROM r JOIN s ON r.a = s.a WHERE s.b = 3")
    doc = run_json(capsys, "optimize", str(sql), "--catalog", str(cat), "--cost-model", "cout",
                   "--optimizer", "exhaustive")
    q = doc["queries"][0]
    assert q["query"] == "join"
    # C_out: |r ⋈ s| = 100 × (50 × 0.1) / max(10, 50) = 10
    assert math.isclose(q["initial"]["cost"], 10.0)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["optimize", "tpch:q99"], "unknown built-in query"),
        (["optimize", "nothere.sql"], "nothere.sql: cannot read query"),
        (["optimize", "tpch:q5", "--optimizer", "sideways"], "unknown optimizer 'sideways'"),
        (["optimize", "tpch:q5", "--engine", "python", "--delta", "card orders *0"],
         "finite and positive"),
        (["optimize", "tpch:q3", "--engine", "python", "--rules", "/nonexistent"],
         "rules directory not found"),
        (["optimize", "tpch:q5", "--delta", "card nosuch *2"], "no table or alias 'nosuch'"),
        (["optimize", "tpch:q3", "--delta", "card part *2"], "no query uses the table"),
        (["optimize", "tpch:q5", "--delta", "cost warp *2"], "unknown operator 'warp'"),
        (["optimize", "tpch:q5", "--catalog", "missing.json"], "missing.json: cannot read"),
        (["optimize", "tpch:q5", "--optimizer", "exhaustive"], "more than 200,000 plan trees"),
        (["optimize", "SELECT x FROM orders"], "unknown column 'x'"),
        (["optimize", "SELECT * FROM orders LEFT JOIN lineitem ON o_orderkey = l_orderkey"],
         "OUTER JOIN"),
        # usage errors: argparse's own, as one line too
        (["optimize", "tpch:q5", "--pruning", "nope"],
         "optimize: argument --pruning: invalid choice: 'nope'"),
        (["optimize", "tpch:q5", "--sf", "abc"], "argument --sf: 'abc' is not a number"),
        (["optimize"], "the following arguments are required: QUERY"),
        ([], "the following arguments are required: command (see 'reopt --help')"),
        (["optimize", "tpch:q5", "--bogus"], "unrecognized arguments: --bogus"),
        (["optimize", "tpch:q5", "--optimizer", ","], "--optimizer ',' names no optimizer"),
        (["optimize", "tpch:q5", "--catalog", "c.json", "--sf", "10"],
         "--sf scales the built-in TPC-H catalog"),
        (["optimize", "tpch:q5", "--engine", "python", "--master", "local[2]"],
         "--master applies to the spark engine"),
    ],
)
def test_bad_input_gives_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.startswith("reopt: ") and err.count("\n") == 1
    assert message.lower() in err.lower()


def test_bad_catalog_json_names_file_and_line(tmp_path, capsys):
    p = tmp_path / "bad.json"
    p.write_text('{"tables": {"orders": {"rows": 1,}}}')
    code, _, err = run(capsys, "optimize", "tpch:q6", "--optimizer", "topdown", "--catalog", str(p))
    assert code == 2 and "bad.json:1:" in err and "invalid JSON" in err


def test_rejected_delta_leaves_the_optimizer_unchanged():
    opt = Optimizer("tpch:q10", cost_model="io", optimizer="topdown")
    first = opt.optimize().cost
    opt.update("card orders *2")
    before = opt.adjustments
    cost_before = opt.optimize().cost
    with pytest.raises(DeltaError):
        opt.update(["card customer *2", "card nosuch *2"])  # the second one is bad
    assert opt.adjustments is before
    assert opt.optimize().cost == cost_before != first


def test_exhaustive_refuses_large_spaces():
    with pytest.raises(OptimizerError, match="more than"):
        Optimizer("tpch:q8join", optimizer="exhaustive").optimize()


def test_text_output_of_every_optimizer(capsys):
    """The demo's commands (text, not JSON): every optimizer prints its cost, its held or
    explored state and the plan; a delta step prints its cost and what it updated."""
    assert main(["optimize", "tpch:q5", "--cost-model", "cout", "--engine", "python",
                 "--optimizer", "declarative,topdown,bottomup,exhaustive,topdown-inc",
                 "--delta", "card orders *2"]) == 0
    out = capsys.readouterr().out
    for name in ("declarative (python, pruning all)", "topdown", "bottomup", "exhaustive",
                 "topdown-inc"):
        assert f"== tpch:q5 · cout · {name}: cost=1.52392e+06" in out, name
    trees = Optimizer("tpch:q5", cost_model="cout", optimizer="topdown").space().count_trees()
    assert f"costed {int(trees):,} plan trees" in out
    assert out.count("-- after card orders *2: cost=") == 5
    assert "incremental: updated" in out


def test_scale_factor_option_scales_the_builtin_catalog(capsys):
    sql = "SELECT * FROM lineitem, orders WHERE l_orderkey = o_orderkey"
    rows = {sf: run_json(capsys, "optimize", sql, "--optimizer", "topdown", "--sf", str(sf))
            ["queries"][0]["initial"]["estimates"]["relations"] for sf in (1, 10)}
    assert rows[10] == {"lineitem": 60_000_000, "orders": 15_000_000}  # 6M·SF, 1.5M·SF
    assert rows[1] == {"lineitem": 6_001_215, "orders": 1_500_000}


def test_a_reader_that_goes_away_ends_the_run_quietly(monkeypatch, capsys):
    """`reopt … --json | head`: the pipe closes before the output is written; no traceback,
    the exit status a shell gives a command killed by SIGPIPE."""
    class ClosedPipe:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("sys.stdout", ClosedPipe())
    assert main(["optimize", "tpch:q3", "--optimizer", "topdown", "--json"]) == 141
    assert capsys.readouterr().err == ""
