"""Deltas as users write them: table names for aliases, multi-query runs where a delta fits
only some queries, and the bad inputs that must be one clear error leaving state untouched
(empty batches, selectivities above 1, values of the wrong type). The README's own delta
examples are run too, so the documentation cannot drift from what is accepted."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from clirun import one_line_error, run, run_json

from reopt.api import Optimizer, load_catalog, load_query
from reopt.costmodel.cardinality import Adjustments, Estimator
from reopt.costmodel.deltas import (
    DeltaNotApplicable,
    apply_delta,
    apply_deltas,
    parse_delta,
    parse_deltas,
)
from reopt.costmodel.errors import DeltaError
from reopt.costmodel.models import cost_model

README = Path(__file__).resolve().parent.parent / "README.md"
CATALOG = load_catalog()
OPERATORS = cost_model("io").operators
ALIASED = "SELECT c.c_name FROM orders o JOIN customer c ON o.o_custkey = c.c_custkey"
SELF_JOIN = "SELECT n1.n_name FROM nation n1 JOIN nation n2 ON n1.n_regionkey = n2.n_regionkey"
Q5_SEL = "sel orders.o_custkey=customer.c_custkey"





def sql_file(tmp_path: Path, name: str, sql: str) -> str:
    p = tmp_path / f"{name}.sql"
    p.write_text(sql)
    return str(p)


def apply(text: str, spec: str) -> Adjustments:
    q = load_query(spec, CATALOG)
    return apply_deltas(parse_deltas(text), q, CATALOG, Adjustments(), OPERATORS)


# -- table names wherever an alias is accepted -------------------------------------------------

def test_built_in_queries_take_table_names_in_sel_deltas():
    """The built-in queries have no aliases: the README's batch example must apply to Q5."""
    q = load_query("tpch:q5", CATALOG)
    before = Estimator(q, CATALOG, Adjustments())
    (p,) = [p for p in q.joins if p.key == "customer.c_custkey=orders.o_custkey"]
    adj = apply(f"card orders *2; {Q5_SEL} *0.5", "tpch:q5")
    assert adj.selectivities == {p.key: before.join_selectivity(p) * 0.5}
    # the sides in either order name the same predicate
    assert apply("sel customer.c_custkey=orders.o_custkey *0.5", "tpch:q5") == apply(
        f"{Q5_SEL} *0.5", "tpch:q5")


@pytest.mark.parametrize(
    "by_alias, by_table",
    [
        ("sel o.o_custkey=c.c_custkey *0.5", f"{Q5_SEL} *0.5"),
        ("sel o.o_custkey=c.c_custkey =0.25", "sel customer.c_custkey=orders.o_custkey =0.25"),
        ("card {o,c} *3", "card {orders,customer} *3"),
        ("card {o,c} =10", "card {customer,orders} =10"),
        ("card {o, customer} *3", "card {orders,c} *3"),
    ],
)
def test_a_table_appearing_once_stands_for_its_alias(by_alias, by_table):
    assert apply(by_alias, ALIASED) == apply(by_table, ALIASED) != Adjustments()


@pytest.mark.parametrize("text", [
    "sel nation.n_regionkey=n2.n_regionkey *0.5",
    "card {nation,n2} *2",
    "card {nation} =5",
])
def test_a_table_under_several_aliases_is_ambiguous(text):
    q = load_query(SELF_JOIN, CATALOG)
    with pytest.raises(DeltaError) as e:
        apply_delta(parse_delta(text), q, CATALOG, Adjustments())
    assert type(e.value) is DeltaError  # an error, not "this query lacks it"
    assert f"delta '{text}': 'nation' is ambiguous" in str(e.value)
    assert "appears as aliases n1, n2" in str(e.value)


def test_card_of_a_table_under_several_aliases_still_means_every_alias():
    q = load_query(SELF_JOIN, CATALOG)
    est = Estimator(q, CATALOG, apply("card nation =5", SELF_JOIN))
    assert est.base_rows("n1") == est.base_rows("n2") == 5


def test_an_alias_wins_over_a_table_of_the_same_name():
    sql = ("SELECT c.c_name FROM nation customer JOIN customer c "
           "ON customer.n_nationkey = c.c_nationkey")
    q = load_query(sql, CATALOG)
    adj = apply("card {customer} *4", sql)
    assert adj.corrections == {q.mask({"customer"}): 4}
    assert q.table_of("customer") == "nation"


# -- multi-query runs: not applicable is a no-op, unless no query can use the delta ------------

@pytest.mark.parametrize("delta", [
    "sel supplier.s_nationkey=customer.c_nationkey *2",  # q3 has no supplier
    "card {orders,nation} *2",                           # q3 has no nation
    "card supplier *4",                                  # q3 has no supplier
])
def test_a_delta_only_some_queries_can_use_is_a_no_op_for_the_others(capsys, delta):
    doc = run_json(capsys, "optimize", "tpch:q3", "tpch:q5", "--optimizer", "topdown",
                   "--delta", delta)
    q3, q5 = doc["queries"]
    assert q3["steps"][0]["cost"] == q3["initial"]["cost"]
    assert q5["steps"][0]["cost"] != q5["initial"]["cost"]
    assert q5["steps"][0]["deltas"] == [delta]


def test_alias_based_card_deltas_across_queries_with_different_aliases(capsys, tmp_path):
    a = sql_file(tmp_path, "a", ALIASED)
    b = sql_file(tmp_path, "b", "SELECT x.o_orderkey FROM orders x JOIN lineitem l "
                 "ON x.o_orderkey = l.l_orderkey")
    for delta in ("card o *4", "card {o,c} *4", "sel o.o_custkey=c.c_custkey *0.5"):
        doc = run_json(capsys, "optimize", a, b, "--optimizer", "topdown", "--delta", delta)
        qa, qb = doc["queries"]
        assert qa["steps"][0]["cost"] != qa["initial"]["cost"], delta
        assert qb["steps"][0]["cost"] == qb["initial"]["cost"], delta


@pytest.mark.parametrize(
    "queries, delta, reasons",
    [
        (["tpch:q3"], "card {orders,nation} *2",
         "no query uses the relation set it names (no relation 'nation' in query tpch:q3)"),
        (["tpch:q3", "tpch:q10"], "sel supplier.s_nationkey=customer.c_nationkey *2",
         "no query uses the join predicate it names (no join predicate "
         "customer.c_nationkey=supplier.s_nationkey in query tpch:q3, which has no table or "
         "alias 'supplier'; no join predicate customer.c_nationkey=supplier.s_nationkey in "
         "query tpch:q10, which has no table or alias 'supplier')"),
        (["tpch:q3", "tpch:q10"], "sel orders.o_custkey=customer.c_nationkey *2",
         "no query uses the join predicate it names (no join predicate "
         "customer.c_nationkey=orders.o_custkey in query tpch:q3; no join predicate "
         "customer.c_nationkey=orders.o_custkey in query tpch:q10)"),
        (["tpch:q3"], "card part *2",
         "no query uses the table or alias it names (query tpch:q3 does not use table 'part')"),
        (["tpch:q3"], "card zz *2",
         "no query uses the table or alias it names (no table or alias 'zz' in query tpch:q3)"),
    ],
)
def test_a_delta_no_query_can_use_is_one_error_with_each_querys_reason(
        capsys, queries, delta, reasons):
    err = one_line_error(capsys, "optimize", *queries, "--optimizer", "topdown,bottomup",
                         "--delta", "card orders *2", "--delta", delta)
    assert err == f"reopt: delta '{delta}': {reasons}\n"  # once per query, not per optimizer


@pytest.mark.parametrize(
    "delta, message",
    [
        ("sel orders.o_bogus=customer.c_custkey *2", "table 'orders' has no column 'o_bogus'"),
        ("sel supplier.s_nationkey=customer.c_bogus *2",
         "table 'customer' has no column 'c_bogus'"),
        ("sel orders.o_custkey *2", "expected a join predicate 'A.x=B.y'"),
        ("card {} *2", "empty relation set"),
        ("cost warp *2", "unknown operator 'warp'"),
    ],
)
def test_malformed_deltas_stay_errors_in_multi_query_runs(capsys, delta, message):
    """q5 has both tables, so the run is rejected even though q3 lacks supplier."""
    err = one_line_error(capsys, "optimize", "tpch:q3", "tpch:q5", "--optimizer", "topdown",
                         "--delta", delta)
    assert err.startswith(f"reopt: delta '{delta}': {message}")


@pytest.mark.parametrize("text, spec", [
    ("sel supplier.s_nationkey=customer.c_nationkey *2", "tpch:q3"),
    ("sel orders.o_custkey=customer.c_nationkey *2", "tpch:q3"),
    ("card {orders,nation} *2", "tpch:q3"),
    ("card o *2", "tpch:q3"),
    ("card part *2", "tpch:q3"),
])
def test_what_a_query_lacks_is_not_applicable(text, spec):
    q = load_query(spec, CATALOG)
    with pytest.raises(DeltaNotApplicable) as e:
        apply_delta(parse_delta(text), q, CATALOG, Adjustments(), OPERATORS)
    assert str(e.value) == f"delta '{text}': {e.value.reason}" and "tpch:q3" in e.value.reason


@pytest.mark.parametrize("text, message", [
    ("sel supplier.s_nationkey=customer.c_nationkey *2",
     "no join predicate customer.c_nationkey=supplier.s_nationkey in query tpch:q3"),
    ("card {orders,nation} *2", "no relation 'nation' in query tpch:q3"),
    ("card part *2", "query tpch:q3 does not use table 'part'"),
])
def test_the_api_rejects_a_delta_its_one_query_cannot_use(text, message):
    opt = Optimizer("tpch:q3", optimizer="topdown")
    opt.update("card orders *2")
    before, cost = opt.adjustments, opt.optimize().cost
    with pytest.raises(DeltaError) as e:
        opt.update(["card customer *2", text])
    assert f"delta '{text}': {message}" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(DeltaError):
        opt.check(text)
    assert opt.adjustments is before and opt.optimize().cost == cost


# -- empty batches -------------------------------------------------------------------------------

@pytest.mark.parametrize("delta", ["", ";", " ; \n ;", "[]", " [ ] "])
def test_an_empty_delta_step_is_rejected(capsys, delta):
    err = one_line_error(capsys, "optimize", "tpch:q3", "--optimizer", "topdown",
                         "--delta", "card orders *2", "--delta", delta)
    assert err.startswith(f"reopt: delta text '{' '.join(delta.split())}' contains no delta")


@pytest.mark.parametrize("deltas, message", [
    ([], "the delta list [] contains no delta"),
    ((), "the delta list () contains no delta"),
    (iter([]), "the delta list contains no delta"),
    ("", "delta text '' contains no delta"),
    ("  ;  ", "delta text ';' contains no delta"),
    ("[]", "delta text '[]' contains no delta"),
    ([""], "delta text '' contains no delta"),
    (["card orders *2", ";"], "delta text ';' contains no delta"),
])
def test_an_empty_update_is_rejected_and_changes_nothing(deltas, message):
    assert rejected_update(deltas).startswith(message)


def rejected_update(deltas) -> str:
    """The message of the DeltaError ``update(deltas)`` raises on an optimized Q3, which must
    keep its statistics."""
    opt = Optimizer("tpch:q3", optimizer="topdown")
    opt.optimize()
    before = opt.adjustments
    with pytest.raises(DeltaError) as e:
        opt.update(deltas)
    assert opt.adjustments is before
    return str(e.value)


# -- selectivities stay at most 1 ----------------------------------------------------------------

def test_a_sel_factor_taking_a_selectivity_above_1_is_rejected(capsys):
    bad = f"{Q5_SEL} *5"
    err = one_line_error(capsys, "optimize", "tpch:q3", "--optimizer", "topdown",
                         "--delta", f"{Q5_SEL} =1; {bad}")
    assert err == (f"reopt: delta '{bad}': the selectivity of "
                   "customer.c_custkey=orders.o_custkey would be 5, above 1\n")


def test_a_rejected_selectivity_leaves_the_optimizer_unchanged():
    opt = Optimizer("tpch:q3", optimizer="topdown")
    opt.update(f"{Q5_SEL} =0.25")
    before, cost = opt.adjustments, opt.optimize().cost
    with pytest.raises(DeltaError, match=r"would be 2, above 1"):
        opt.update([f"{Q5_SEL} *2", f"{Q5_SEL} *4"])  # 0.5, then 2: the whole batch goes
    assert opt.adjustments is before and opt.optimize().cost == cost
    opt.update(f"{Q5_SEL} *4")  # exactly 1 is a selectivity
    assert opt.adjustments.selectivities == {"customer.c_custkey=orders.o_custkey": 1.0}


# -- what update() accepts -------------------------------------------------------------------------

@pytest.mark.parametrize("deltas, got", [
    (None, "got None"),
    (5, "got int 5"),
    ([5], "got int 5"),
    (b"card orders *2", "got bytes b'card orders *2'"),
    (bytearray(b"card orders *2"), "got bytearray"),
    (["card orders *2", None], "got None"),
    ([["card orders *2"]], "got list ['card orders *2']"),
    (2.5, "got float 2.5"),
])
def test_an_update_of_the_wrong_type_is_a_delta_error(deltas, got):
    assert rejected_update(deltas).startswith(
        "deltas must be a string, a dict, a Delta or a list of them, " + got)


def test_every_accepted_form_of_a_batch_means_the_same():
    text = "card orders *2; cost hashjoin *1.5"
    as_dict = {"kind": "card", "target": "orders", "op": "*", "value": 2}
    cost = parse_delta("cost hashjoin *1.5")
    forms = [
        text,
        ["card orders *2", "cost hashjoin *1.5"],
        ("card orders *2", cost),
        [as_dict, "cost hashjoin *1.5"],
        (d for d in parse_deltas(text)),
        json.dumps([as_dict, {"kind": "cost", "target": "hashjoin", "op": "*", "value": 1.5}]),
    ]
    opt = Optimizer("tpch:q3", optimizer="topdown")
    results = [opt.check(f) for f in forms]
    assert all(r == results[0] for r in results) and results[0] != Adjustments()
    assert opt.check(cost) == opt.check("cost hashjoin *1.5")


# -- the README's own examples ---------------------------------------------------------------------

def readme_examples() -> tuple[list[str], list[list[str]]]:
    """Every delta the README writes out with real names, and every ``reopt optimize`` command
    with a delta step (without its JSON placeholders and empty-step counter-examples)."""
    text = README.read_text()
    deltas = {d for d in re.findall(r'--delta "([^"]*\w[^"]*)"', text)
              if d.split()[0] in ("card", "sel", "cost")}  # rate/window: streams (test_rate)
    deltas |= set(re.findall(r"`((?:card|sel|cost) [^`]*[*=][\d.e]+)`", text))
    commands = [shlex.split(c) for c in re.findall(r"`reopt (optimize [^`]*--delta [^`]*)`", text)]
    return sorted(deltas), commands


def test_the_readme_has_delta_examples(capsys):
    deltas, commands = readme_examples()
    assert f"card orders *2; {Q5_SEL} *0.5" in deltas
    assert "sel o.o_custkey=c.c_custkey *0.5" in deltas
    assert commands
    # the error the README quotes is the one given
    err = one_line_error(capsys, "optimize", "tpch:q3", "--optimizer", "topdown",
                         "--delta", "card {orders,nation} *2")
    assert err.split(": ", 2)[2].strip() in README.read_text()


def test_the_readme_python_example_runs():
    (batch,) = re.findall(r"opt\.update\((\[[^\]]*\])\)", README.read_text())
    opt = Optimizer("tpch:q3", cost_model="io", optimizer="topdown")
    cost = opt.optimize().cost
    step = opt.update(json.loads(batch))
    assert step.deltas == json.loads(batch) and step.cost != cost


@pytest.mark.parametrize("delta", readme_examples()[0])
def test_every_readme_delta_runs(capsys, tmp_path, delta):
    """Each applies to Q5 or to a query aliasing orders as o and customer as c (README)."""
    aliased = sql_file(tmp_path, "aliased", ALIASED)
    doc = run_json(capsys, "optimize", "tpch:q5", aliased, "--optimizer", "topdown",
                   "--delta", delta)
    assert any(q["steps"][0]["cost"] != q["initial"]["cost"] for q in doc["queries"])


@pytest.mark.parametrize("argv", readme_examples()[1])
def test_every_readme_delta_command_runs(capsys, argv):
    code, out, err = run(capsys, *argv, "--optimizer", "topdown")  # not Spark
    assert code == 0, err
    assert "-- after " in out
