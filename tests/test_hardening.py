"""Issue 22, the front end: every input works or fails cleanly.

Each reproduction of the issue (items 1, 2, 4 and 6: SQL, catalogs, deltas as text and JSON,
command-line flags) is a test here, followed by a bounded, derandomized hypothesis fuzz over
malformed and extreme inputs. The contract they check (README, "Command line", "Python API"):

* an input either succeeds — a finite cost, strict JSON — or is a :class:`ReoptError` (API) /
  exit 2 with exactly one ``reopt: …`` line on stderr (CLI); never another exception;
* a failed ``update()`` leaves the optimizer as it was: its next answer equals a fresh
  optimizer's given the same accepted deltas;
* estimates stay within [1 row, cross product], costs finite, whatever deltas are in force.

Everything runs on the ``python`` engine.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import one_line_error, run
from fuzzing import fuzz
from hypothesis import event, given
from hypothesis import strategies as st

from reopt.api import Optimizer
from reopt.costmodel.cardinality import Adjustments, Estimator, scaled_float, scaled_product
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.deltas import parse_deltas
from reopt.costmodel.errors import CatalogError, DeltaError, ReoptError
from reopt.costmodel.numeric import MAX_ROWS, NumberError, OutOfRange, load_json, parse_number
from reopt.costmodel.space import PlanSpace

DATA = Path(__file__).parent / "data"
PROCEDURAL = ("topdown", "bottomup", "topdown-inc", "bottomup-inc")
ALL = (*PROCEDURAL, "declarative")
BIG400 = "9" * 400
BIG5000 = "9" * 5000


def make(optimizer: str, query: str = "tpch:q3", catalog=None, **kw) -> Optimizer:
    """An optimizer on the python engine; ``greedy`` is topdown with a budget of one pair and
    ``over_budget="greedy"``, so that a query of three or more relations is planned greedily."""
    if optimizer == "greedy":
        optimizer, kw = "topdown", {"max_pairs": 1, "over_budget": "greedy", **kw}
    return Optimizer(query, catalog, optimizer=optimizer, engine="python", **kw)


def fresh_cost(optimizer: str, batches: list, query: str = "tpch:q3", catalog=None) -> float:
    """The cost a new optimizer reaches after ``batches`` (each one update)."""
    o = make(optimizer, query, catalog)
    cost = o.optimize().cost
    for b in batches:
        cost = o.update(b).cost
    return cost


def strict_json(text: str):
    """Parse JSON that must not hold ``NaN``/``Infinity`` (Python's json accepts them)."""
    def refuse(name: str):
        raise AssertionError(f"non-finite number {name} in JSON output")
    return json.loads(text, parse_constant=refuse)


def one_line(e: BaseException) -> str:
    text = str(e)
    assert "\n" not in text and text, text
    return text


# --- numbers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text, value", [
    ("2", 2.0), (" 0.5 ", 0.5), (".5", 0.5), ("5.", 5.0), ("-1e6", -1e6), ("1.5E-3", 1.5e-3),
    ("1e-400", 0.0),  # underflow rounds, as any float computation
])
def test_strict_numbers_accept_plain_syntax(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize("text", ["1_000", "١٠", "٣", "nan", "inf", "-Infinity", "0x10", "1e",
                                  "", "1 000", "١e3", "+-1", "1.2.3"])
def test_strict_numbers_refuse_what_float_would_take(text):
    with pytest.raises(NumberError) as e:
        parse_number(text)
    assert not isinstance(e.value, OutOfRange)
    one_line(e.value)


@pytest.mark.parametrize("text", ["1e400", "-1e999", BIG400, BIG5000])
def test_strict_numbers_refuse_what_no_float_holds(text):
    with pytest.raises(OutOfRange) as e:
        parse_number(text)
    assert len(one_line(e.value)) < 120  # a 5,000-digit number is shown shortened


def test_json_numbers_no_float_holds_are_marked_not_raised():
    doc = load_json(f'{{"a": {BIG5000}, "b": {BIG400}, "c": 1e400, "d": NaN, "e": 7}}')
    assert [repr(doc[k]) for k in "abcd"] == [
        "999999999999…999999 (5000 digits)", "999999999999…999999 (400 digits)", "1e400", "NaN"]
    assert doc["e"] == 7


def test_scaled_product_is_the_plain_product_in_range_and_never_overflows():
    factors = [1500000.0, 1 / 150000, 0.3, 7.25, 1e-6]
    plain = 1.0
    for f in factors:
        plain *= f
    assert scaled_float(scaled_product(factors)) == plain  # bit for bit
    assert scaled_float(scaled_product([1e300, 1e300, 1e-300])) == pytest.approx(1e300)
    assert scaled_float(scaled_product([1e-300, 1e-300, 1e300])) == pytest.approx(1e-300)
    assert scaled_float(scaled_product([1e300] * 3)) == math.inf


# --- item 1: atomic updates ------------------------------------------------------------------


@pytest.mark.parametrize("optimizer", ALL)
def test_repro_overflowing_rows_are_refused_and_nothing_changes(optimizer):
    """Issue item 1: three ``card orders *1e300`` were accepted (cost inf), after which
    ``card {orders,customer} =5`` failed but kept its correction (5/inf = 0)."""
    o = make(optimizer)
    o.optimize()
    for _ in range(3):
        with pytest.raises(DeltaError, match=r"'orders' would have 1\.5e306 rows, above the "
                                             r"limit of 1e100") as e:
            o.update("card orders *1e300")
        one_line(e.value)
        assert o.adjustments == Adjustments()
    o.update("card {orders,customer} =5")
    got = o.update("card orders =5").cost
    assert math.isfinite(got)
    assert got == pytest.approx(fresh_cost(optimizer, ["card {orders,customer} =5",
                                                       "card orders =5"]), rel=1e-9)


@pytest.mark.parametrize("optimizer", PROCEDURAL)
def test_repro_refused_factor_does_not_stay_applied(optimizer):
    """Issue item 1: with topdown, topdown-inc and bottomup-inc ``card orders *1e300`` raised a
    bare RuntimeError and stayed applied, so ``*1e-300`` next returned the original cost."""
    o = make(optimizer)
    base = o.optimize().cost
    with pytest.raises(DeltaError):
        o.update("card orders *1e300")
    got = o.update("card orders *1e-300").cost
    assert got != base
    assert got == pytest.approx(fresh_cost(optimizer, ["card orders *1e-300"]), rel=1e-9)


@pytest.fixture
def failing_costs(monkeypatch):
    """Costing fails (RuntimeError) while the ``hashjoin`` factor is 7: an internal error in
    the middle of an update, wherever the optimizer is in its work."""
    def failing(name):
        original = getattr(PlanSpace, name)

        def cost(self, *args):
            if self.adjustments.op_factors.get("hashjoin") == 7.0:
                raise RuntimeError("boom")
            return original(self, *args)

        monkeypatch.setattr(PlanSpace, name, cost)

    # one alternative's, one node's (the batch), one node's with its columns (the searches)
    for name in ("local_cost", "local_costs", "costed"):
        failing(name)


def _relations(o: Optimizer) -> dict[str, list]:
    return {name: sorted(map(repr, df.itertuples(index=False)))
            for name, df in o.relations().items()}


@pytest.mark.parametrize("optimizer", ALL)
def test_any_failure_during_update_restores_the_optimizer(optimizer, failing_costs):
    """Not only DeltaError: any exception inside update() leaves statistics, the incremental
    memo and the declarative session as they were, and is one line naming query and delta."""
    o = make(optimizer)
    o.optimize()
    o.update("card orders *2")
    adjustments = o.adjustments
    memo = o._incremental
    # the memo's entries and its space are its state (its indexes are structure, valid for
    # every space of the query; its touched sets are the last step's metrics)
    before = (dict(memo._entries()), memo.space) if memo else None
    relations = _relations(o) if optimizer == "declarative" else None
    with pytest.raises(DeltaError) as e:
        o.update("cost hashjoin *7")
    message = one_line(e.value)
    assert "query tpch:q3" in message and "cost hashjoin *7" in message and "boom" in message
    assert isinstance(e.value.__cause__, RuntimeError)
    assert o.adjustments is adjustments
    if memo is not None:
        assert o._incremental is memo and (memo._entries(), memo.space) == before
    if relations is not None:
        fresh = make("declarative")
        fresh.optimize()
        fresh.update("card orders *2")
        assert _relations(o) == relations == _relations(fresh)
    got = o.update("card customer *3").cost
    assert got == pytest.approx(fresh_cost(optimizer, ["card orders *2", "card customer *3"]),
                                rel=1e-9)


def test_cli_failed_step_is_one_line(capsys, failing_costs):
    err = one_line_error(capsys, "optimize", "tpch:q3", "--engine", "python", "--optimizer",
                         "topdown-inc", "--delta", "cost hashjoin *7")
    assert "query tpch:q3: deltas 'cost hashjoin *7' could not be applied" in err


# --- item 2: finite numbers ------------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["--delta", "card orders *1e300", "--json"], "above the limit of 1e100"),
    (["--delta", "card orders =1e308"], "above the limit of 1e100"),
    (["--delta", "cost blocknl *1e308"], "the factor on blocknl would be 1e308"),
    (["--sf", "1e308"], "scale factor 1e308"),
    (["--sf", "1e95"], "above the limit of 1e100"),
    (["--delta", "card orders *1e-308; card orders *1e-308; card orders *1e-308"],
     "would have 0 rows"),
    (["--delta", "card orders *1e400"], "out of range"),
])
def test_repro_inputs_that_overflowed_are_one_line_errors(capsys, argv, message):
    err = one_line_error(capsys, "optimize", "tpch:q3", "--engine", "python", *argv)
    assert message in err


def test_repro_catalog_with_1e308_rows(capsys, tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"tables": {"orders": {"rows": 1e308}}}')
    err = one_line_error(capsys, "optimize", "SELECT * FROM orders", "--catalog", str(path),
                         "--engine", "python")
    assert "c.json: table 'orders' rows is 1e308, above the limit of 1e100 rows" in err


def test_repro_tiny_factors_are_refused_not_a_zero_cost():
    o = make("declarative")
    o.optimize()
    with pytest.raises(DeltaError, match="would have 0 rows"):
        o.update("card orders *1e-308; card orders *1e-308; card orders *1e-308")
    for text, message in [
        ("cost hashjoin *1e-200; cost hashjoin *1e-200", "would underflow to 0"),
        ("sel orders.o_custkey=customer.c_custkey *1e-300; "
         "sel orders.o_custkey=customer.c_custkey *1e-300", "would underflow to 0"),
        ("card {orders,customer} *1e300; card {orders,customer} *1e300", "beyond the float"),
        ("card {orders,customer} =0.5", "below 1, the least estimate"),
        ("card {orders,customer} =1e300", "the most the set can have"),
        (f"card orders *{BIG400}", "out of range"),
    ]:
        with pytest.raises(DeltaError, match=message):
            o.update(text)
    assert o.adjustments == Adjustments()


def test_extreme_but_accepted_deltas_keep_costs_finite_and_json_strict(capsys):
    code, out, err = run(capsys, "optimize", "tpch:q5", "--engine", "python", "--optimizer",
                         "topdown,bottomup-inc,declarative", "--sf", "1e80", "--json",
                         "--delta", "card orders *1e6; cost blocknl *1e100",
                         "--delta", "card orders *1e-200; sel orders.o_custkey=customer.c_custkey"
                         " *1e-200; card {orders,customer} *1e-300")
    assert code == 0, err
    doc = strict_json(out)
    for q in doc["queries"]:
        for step in [q["initial"], *q["steps"]]:
            assert math.isfinite(step["cost"]) and step["cost"] > 0
            stack = [step["plan"]]
            while stack:
                node = stack.pop()
                assert 1 <= node["rows"] <= MAX_ROWS
                stack.extend(node["children"])
    costs = {q["optimizer"]: [s["cost"] for s in [q["initial"], *q["steps"]]]
             for q in doc["queries"]}
    for c in costs.values():
        assert c == pytest.approx(costs["topdown"], rel=1e-9)


def test_estimates_stay_within_one_row_and_the_cross_product():
    """Tiny selectivities and huge corrections: every estimate is clamped, never 0 or inf."""
    o = make("topdown", "tpch:q5")
    adj = o.check("sel orders.o_custkey=customer.c_custkey =1e-300; "
                  "sel lineitem.l_orderkey=orders.o_orderkey =1e-300; "
                  "card {orders,lineitem} *1e300; card {supplier,nation} *1e-300")
    est = Estimator(o.query, o.catalog, adj)
    rows = [est.base_rows(a) for a in o.query.aliases]
    for mask in range(1, 1 << o.query.n):
        cross = math.prod(r for i, r in enumerate(rows) if mask >> i & 1)
        assert 1 <= est.card(mask) <= max(1.0, min(cross, MAX_ROWS))
    o.adjustments = adj
    assert math.isfinite(o.optimize().cost)


def test_cyclic_12_relations_case_is_finite_and_the_same_for_every_optimizer():
    """``../shared/cases/cyclic-12-relations.json`` (copied to tests/data): real statistics,
    estimates from 1.9e-58 rows, ``card {…} =N`` batches whose corrections overflowed after
    the 11th batch (cost inf, or "no plan found"). Now: a finite cost after every batch, equal
    across optimizers, incremental equal to from scratch."""
    case = json.loads((DATA / "cyclic-12-relations.json").read_text())
    catalog = Catalog.from_dict(case["catalog"])
    costs = {}
    for name in ALL:
        o = Optimizer(case["sql"], catalog, cost_model=case["cost_model"], optimizer=name,
                      engine="python")
        costs[name] = [o.optimize().cost]
        for i, batch in enumerate(case["batches"], 1):
            step = o.update(batch)
            costs[name].append(step.cost)
            # from scratch after every batch, the declarative one's (seconds each) at the end
            if name in ("topdown-inc", "bottomup-inc") or (
                name == "declarative" and i == len(case["batches"])
            ):
                scratch = Optimizer(case["sql"], catalog, cost_model=case["cost_model"],
                                    optimizer=name.removesuffix("-inc"), engine="python")
                scratch.adjustments = o.adjustments
                assert step.cost == pytest.approx(scratch.optimize().cost, rel=1e-9)
    for name, c in costs.items():
        assert all(math.isfinite(x) and x > 0 for x in c), name
        assert c == pytest.approx(costs["topdown"], rel=1e-9), name


# --- item 4: no tracebacks -------------------------------------------------------------------


def _alternating(depth: int) -> str:
    cond = "o_orderkey = 0"
    for i in range(depth):
        cond = f"(o_orderkey = {i} {'OR' if i % 2 else 'AND'} {cond})"
    return cond


@pytest.mark.parametrize("where, message", [
    (f"o_orderkey < {BIG400}", "line 1, column 41: 999999999999…999999 (400 digits) is out of "
                               "range"),
    (f"o_orderkey < {BIG5000}", "(5000 digits) is out of range"),
    (f"o_orderkey < -{BIG400}", "is out of range"),
    ("o_orderkey < 1e400", "1e400 is out of range"),
    ("o_orderkey < 1e300 * 1e300", "the value of 1e300 * 1e300 is out of range"),
    (f"o_orderkey IN (1, {BIG400})", "is out of range"),
    (_alternating(500), "condition nested 501 levels deep"),
    ("(" * 5000 + "o_orderkey = 1" + ")" * 5000, "5000 levels of parentheses"),
    ("NOT " * 20000 + "o_orderkey = 1", "20000 NOTs in a row"),
])
def test_repro_sql_that_crashed_is_one_line_errors(capsys, where, message):
    err = one_line_error(capsys, "optimize", f"SELECT * FROM orders WHERE {where}",
                         "--engine", "python", "--optimizer", "topdown")
    assert message in err


@pytest.mark.parametrize("where", [
    " OR ".join(f"o_orderkey = {i}" for i in range(2000)),
    " AND ".join(f"o_orderkey <> {i}" for i in range(2000)),
    "(" * 500 + "o_orderkey = 1" + ")" * 500,
    "NOT " * 2000 + "o_orderkey = 1",
    "NOT " * 2001 + "o_orderkey = 1",
    _alternating(90),
    "o_orderkey < " + " + ".join(["1"] * 3000),
    f"o_orderkey < {'0' * 5000}1",  # many digits, a small number
])
def test_repro_deep_but_valid_sql_works(where):
    o = make("topdown", f"SELECT * FROM orders WHERE {where}")
    assert math.isfinite(o.optimize().cost)


def test_double_negations_cancel():
    a = make("topdown", "SELECT * FROM orders WHERE " + "NOT " * 2000 + "o_orderkey < 5")
    b = make("topdown", "SELECT * FROM orders WHERE o_orderkey < 5")
    c = make("topdown", "SELECT * FROM orders WHERE " + "NOT " * 2001 + "o_orderkey < 5")
    d = make("topdown", "SELECT * FROM orders WHERE NOT o_orderkey < 5")
    assert a.query.filters == b.query.filters and c.query.filters == d.query.filters


def test_repro_bom_in_sql_file_is_accepted(tmp_path):
    path = tmp_path / "q.sql"
    path.write_bytes(b"\xef\xbb\xbfSELECT * FROM orders WHERE o_orderkey < 5")
    assert math.isfinite(make("topdown", str(path)).optimize().cost)
    # inline text too
    assert make("topdown", "\ufeffSELECT * FROM orders").optimize().cost > 0


def _catalog_text(rows: str = "1500000", minimum: str = "1") -> str:
    return ('{"tables": {"orders": {"rows": ' + rows + ', "columns": {"o_orderkey": '
            '{"distinct": 1500000, "min": ' + minimum + ', "max": 6000000}}}}}')


@pytest.mark.parametrize("content, message", [
    (_catalog_text(rows=BIG400), "rows must be a finite number: 999999999999…999999 (400 "
                                 "digits) is out of range"),
    (_catalog_text(rows=BIG5000), "(5000 digits) is out of range"),
    (_catalog_text(minimum=BIG400), "min must be a finite number"),
    (_catalog_text(minimum=BIG5000), "min must be a finite number"),
    (_catalog_text(minimum="NaN"), "NaN is not a finite number"),
    (_catalog_text(rows="Infinity"), "Infinity is not a finite number"),
    ('{"tables": ' + "[" * 100000 + "]" * 100000 + "}", "invalid JSON: nested too deeply"),
    (_catalog_text(minimum="[" * 5000 + "]" * 5000), "invalid JSON: nested too deeply"),
    (_catalog_text(minimum="[" * 300 + "]" * 300), "min must be a number, an ISO date"),
    (_catalog_text().encode("utf-16"), "not UTF-8 text but UTF-16; save it as UTF-8"),
    (bytes(range(256)), "cannot read catalog: not UTF-8 text"),
])
def test_repro_catalogs_that_crashed_are_one_line_errors(capsys, tmp_path, content, message):
    path = tmp_path / "cat.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    err = one_line_error(capsys, "optimize", "SELECT * FROM orders", "--catalog", str(path),
                         "--engine", "python", "--optimizer", "topdown")
    assert f"{path}" in err and message in err
    with pytest.raises(CatalogError):
        Catalog.load(path)


def test_repro_bom_in_catalog_is_accepted(tmp_path):
    path = tmp_path / "cat.json"
    path.write_bytes(b"\xef\xbb\xbf" + _catalog_text().encode())
    assert Catalog.load(path).tables["orders"].rows == 1500000


def test_python_values_no_float_holds_are_catalog_errors():
    for bad in (10**400, 10**5000, float("inf")):
        with pytest.raises(CatalogError) as e:
            Catalog.from_dict({"tables": {"t": {"rows": bad}}})
        assert len(one_line(e.value)) < 200
    with pytest.raises(CatalogError, match="table names must be strings"):
        Catalog.from_dict({"tables": {1: {"rows": 1}}})


@pytest.mark.parametrize("delta, message", [
    ('{"kind": "card", "target": "orders", "op": "*", "value": ' + BIG400 + "}",
     "(400 digits) is out of range"),
    ('{"kind": "card", "target": "orders", "op": "*", "value": ' + BIG5000 + "}",
     "(5000 digits) is out of range"),
    ('{"kind": "card", "target": "orders", "op": "*", "value": NaN}', "NaN is not a finite"),
    ("[" * 100000 + "]" * 100000, "invalid JSON: nested too deeply"),
    ('{"kind": "card", "target": "orders", "op": "*", "value": ' + "[" * 3000 + "]" * 3000
     + "}", "invalid JSON: nested too deeply"),
    (f"card orders *{BIG5000}", "(5000 digits) is out of range"),
])
def test_repro_deltas_that_crashed_are_one_line_errors(capsys, delta, message):
    err = one_line_error(capsys, "optimize", "tpch:q3", "--engine", "python", "--optimizer",
                         "topdown", "--delta", delta)
    assert message in err and len(err) < 400


@pytest.mark.parametrize("spec", [
    {"kind": "card", "target": "orders", "op": "*", "value": 10**5000},
    {"kind": "card", "target": "orders", "op": "*", "value": {1, 2}},
    {"kind": "card", "target": "orders", "op": "*", "value": [[[[[[[[[[[]]]]]]]]]]]},
    {1: 2, "kind": "card"},
    {"kind": 3, "target": "orders", "op": "*", "value": 2},
    {"kind": "card", "target": "orders", "op": "*", "value": float("nan")},
])
def test_odd_python_deltas_are_delta_errors(spec):
    with pytest.raises(DeltaError) as e:
        parse_deltas(spec)
    one_line(e.value)


# --- item 6 ----------------------------------------------------------------------------------


@pytest.mark.parametrize("delta, message", [
    ("card orders *1_000", "value '1_000' is not a number"),
    ("card orders *١٠٠٠", "value '١٠٠٠' is not a number"),
    ("card orders =٥", "value '٥' is not a number"),
    ('{"kind": "card", "target": "orders", "op": "*", "value": "1_000"}', "is not a number"),
    ('{"kind": "card", "target": "orders", "op": "*", "value": "٣"}', "is not a number"),
    ('{"kind": "card", "target": "orders", "op": "*", "value": 2, "valeu": 3}',
     "unknown key 'valeu' (expected kind, target, op, value)"),
    ('[{"kind": "card", "target": "orders", "op": "*", "value": 2, "note": "x"}]',
     "unknown key 'note'"),
])
def test_repro_sloppy_deltas_are_refused(capsys, delta, message):
    err = one_line_error(capsys, "optimize", "tpch:q3", "--engine", "python", "--optimizer",
                         "topdown", "--delta", delta)
    assert message in err


def test_repro_histogram_null_and_empty_mean_the_same():
    def catalog(histogram):
        return Catalog.from_dict({"tables": {"t": {"rows": 10, "columns": {
            "x": {"min": 0, "max": 9, "histogram": histogram}}}}})
    assert catalog(None) == catalog({})
    assert catalog({}).tables["t"].columns["x"].histogram is None


@pytest.mark.parametrize("flag", [["--pruning", "none"], ["--pruning", "all"],
                                  ["--rules", "rules"]])
def test_repro_declarative_flags_without_the_declarative_optimizer(capsys, flag):
    err = one_line_error(capsys, "optimize", "tpch:q3", "--optimizer", "topdown,bottomup",
                         *flag)
    assert f"{flag[0]} applies to the declarative optimizer" in err


def test_declarative_flags_with_the_declarative_optimizer_are_fine(capsys):
    code, out, err = run(capsys, "optimize", "tpch:q3", "--optimizer", "topdown,declarative",
                         "--engine", "python", "--pruning", "aggsel", "--json")
    assert code == 0, err
    assert strict_json(out)["queries"][1]["pruning"] == "aggsel"


@pytest.mark.parametrize("sf", ["1_000", "nan", "inf", "١", "0", "-1", "1e400", BIG5000])
def test_sf_is_read_strictly(capsys, sf):
    err = one_line_error(capsys, "optimize", "tpch:q3", "--engine", "python", "--sf", sf)
    assert "argument --sf" in err and len(err) < 300


# --- the CLI as a process ----------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["tpch:q3", "--delta", "card orders *1e300", "--json"],
    [f"SELECT * FROM orders WHERE o_orderkey < {BIG5000}"],
    ["SELECT * FROM orders WHERE " + "NOT " * 20000 + "o_orderkey = 1"],
    ["tpch:q3", "--optimizer", "topdown", "--pruning", "none"],
])
def test_cli_process_exits_2_with_one_line(argv):
    """As a user runs it: exit 2, one ``reopt:`` line, no traceback (not only in-process)."""
    done = subprocess.run([sys.executable, "-m", "reopt.cli", "optimize", "--engine", "python",
                           *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("reopt: ") and done.stderr.count("\n") == 1, done.stderr


def test_cli_process_json_is_strict():
    done = subprocess.run([sys.executable, "-m", "reopt.cli", "optimize", "tpch:q3", "--engine",
                           "python", "--delta", "card orders *1e90", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert math.isfinite(strict_json(done.stdout)["queries"][0]["steps"][0]["cost"])


# --- fuzz ------------------------------------------------------------------------------------
#
# Derandomized and bounded (a few hundred inputs, some seconds; REOPT_FUZZ_EXAMPLES=N for a
# long run, tests/fuzzing.py): malformed and extreme SQL, catalogs and deltas through the API,
# and a share of them through the CLI in process. Rule files: tests/test_rule_hardening.py.

GOOD_NUMBERS = st.sampled_from(["2", "0.5", ".5", "1e6", "3", "0.125", "8", "1e50", "1e-50",
                                 "1e99", "1e-300", "5e-324", "1e308", "1.7976931348623157e308"])
BAD_NUMBERS = st.sampled_from(["1e400", "-1e400", BIG400, BIG5000, "1_000", "١٠", "nan", "inf",
                               "-inf", "0x10", "1e", "'nan'", "'1e400'", "''", "NULL", "0",
                               "-3", "1e-400", "1e101"])
NUMBERS = st.one_of(GOOD_NUMBERS, GOOD_NUMBERS, BAD_NUMBERS)
COLUMNS = st.sampled_from(["o_orderkey", "o_totalprice", "o_orderdate", "o_comment",
                           "o_custkey", "c_custkey", "c_acctbal", "o_orderkey", "c_acctbal",
                           "nosuch"])
OPS = st.sampled_from(["=", "<>", "<", ">=", "LIKE", "IN", "BETWEEN"])


@st.composite
def conditions(draw) -> str:
    col, op, num = draw(COLUMNS), draw(OPS), draw(NUMBERS)
    if op == "IN":
        leaf = f"{col} IN ({num}, {draw(NUMBERS)})"
    elif op == "BETWEEN":
        leaf = f"{col} BETWEEN {num} AND {draw(NUMBERS)}"
    else:
        leaf = f"{col} {op} {num}"
    shape = draw(st.sampled_from(["leaf", "leaf", "not", "paren", "or", "arith", "alt"]))
    k = draw(st.sampled_from([1, 2, 40, 600, 3000]))
    if shape == "not":
        return "NOT " * k + leaf
    if shape == "paren":
        return "(" * k + leaf + ")" * k
    if shape == "or":
        return " OR ".join([leaf] * k)
    if shape == "arith":
        return f"{col} < " + " * ".join([num] * min(k, 50))
    if shape == "alt":
        return _alternating(min(k, 150))
    return leaf


@st.composite
def sql_texts(draw) -> str:
    where = " AND ".join(draw(st.lists(conditions(), min_size=1, max_size=3)))
    text = f"SELECT * FROM orders, customer WHERE o_custkey = c_custkey AND {where}"
    if draw(st.booleans()):
        text = "\ufeff" + text
    cut = draw(st.sampled_from([None] * 8 + [10, 40]))
    return text[:cut] if cut else text


TARGETS = {
    "card": ["orders", "customer", "lineitem", "{orders,customer}", "{orders,lineitem,customer}",
             "{orders}", "nation", "{}", "{orders"],
    "sel": ["orders.o_custkey=customer.c_custkey", "lineitem.l_orderkey=orders.o_orderkey",
            "orders.o_nosuch=customer.c_custkey"],
    "cost": ["hashjoin", "blocknl", "sort", "tablescan", "warp"],
}


@st.composite
def delta_texts(draw) -> str:
    kind = draw(st.sampled_from(["card", "card", "sel", "cost"]))
    op = draw(st.sampled_from(["*", "*", "="]))
    return f"{kind} {draw(st.sampled_from(TARGETS[kind]))} {op}{draw(NUMBERS)}"


@st.composite
def delta_json(draw) -> str:
    raw = draw(NUMBERS).strip("'")
    value = raw if draw(st.booleans()) else json.dumps(raw)
    kind = draw(st.sampled_from(["card", "sel", "cost"]))
    keys = {"kind": json.dumps(kind), "target": json.dumps(draw(st.sampled_from(TARGETS[kind]))),
            "op": json.dumps(draw(st.sampled_from("**="))), "value": value}
    if draw(st.integers(0, 4)) == 0:
        keys.pop(draw(st.sampled_from(list(keys))))
    if draw(st.integers(0, 4)) == 0:
        keys["extra"] = "1"
    body = "{" + ", ".join(f'"{k}": {v}' for k, v in keys.items()) + "}"
    depth = draw(st.sampled_from([0, 0, 0, 1, 5000]))
    return "[" * depth + body + "]" * depth


BATCHES = st.lists(st.lists(st.one_of(delta_texts(), delta_texts(), delta_json()), min_size=1,
                            max_size=2)
                   .map(lambda ds: ds[0] if ds[0].lstrip().startswith(("[", "{"))
                        else "; ".join(ds)), min_size=1, max_size=4)


def _check_step(step) -> None:
    assert math.isfinite(step.cost) and step.cost > 0
    strict_json(json.dumps(step.to_json(), allow_nan=False))


def _optimized_or_refused(make_optimizer) -> None:
    """Either the input is refused with one line, or the optimizer it makes gives a finite
    cost and strict JSON."""
    try:
        o = make_optimizer()
    except ReoptError as e:
        event(f"refused: {type(e).__name__}")
        one_line(e)
        return
    event("optimized")
    _check_step(o.optimize())


@fuzz(120)
@given(sql=sql_texts())
def test_fuzz_sql(sql):
    _optimized_or_refused(lambda: make("topdown", sql))


@st.composite
def catalog_texts(draw) -> str:
    """A small valid catalog with one value replaced by something extreme or malformed."""
    doc = {"tables": {
        "orders": {"rows": 1500000, "columns": {
            "o_orderkey": {"distinct": 1500000, "min": 1, "max": 6000000},
            "o_custkey": {"distinct": 99996},
            "o_orderdate": {"min": "1992-01-01", "max": "1998-08-02",
                            "histogram": {"bounds": ["1992-01-01", "1998-08-02"],
                                          "counts": [1500000]}}},
            "indexes": ["o_orderkey"]},
        "customer": {"rows": 150000, "columns": {"c_custkey": {"distinct": 150000}}}}}
    text = json.dumps(doc)
    spots = ['1500000', '150000', '99996', '6000000', '"1992-01-01"', '"1998-08-02"',
             '["o_orderkey"]', '{"distinct": 150000}', '"rows"', '"histogram"']
    spot = draw(st.sampled_from(spots))
    value = draw(st.sampled_from([
        BIG400, BIG5000, "1e308", "1e400", "-1", "0", "NaN", "Infinity", "null", "{}", "[]",
        "true", '"x"', '"1995-13-45"', '"nan"', "[" * 3000 + "]" * 3000, "1e101", "1e99",
        '{"bounds": [1], "counts": []}', '"rows2"', '"histogram2"', "1e-300", "5e-324", "1",
        "0.5", "1e100", '"2000-01-01"']))
    if draw(st.integers(0, 3)):
        text = text.replace(spot, value, 1)
    if draw(st.booleans()):
        text = "\ufeff" + text
    return text


@fuzz(80)
@given(text=catalog_texts(),
       encoding=st.sampled_from(["utf-8", "utf-8", "utf-8", "utf-16", "latin-1"]))
def test_fuzz_catalogs(tmp_path_factory, text, encoding):
    path = tmp_path_factory.mktemp("cat") / "cat.json"
    try:
        path.write_bytes(text.encode(encoding))
    except UnicodeEncodeError:
        path.write_bytes(text.encode("utf-8"))
    _optimized_or_refused(lambda: make(
        "bottomup", "SELECT * FROM orders, customer WHERE o_custkey = c_custkey "
        "AND o_orderkey < 5 AND o_orderdate < '1995-01-01'", str(path)))


def _replay(optimizer: str, accepted: list[str]) -> Optimizer:
    fresh = make(optimizer)
    fresh.optimize()
    for b in accepted:
        fresh.update(b)
    return fresh


@fuzz(60)
@given(optimizer=st.sampled_from((*PROCEDURAL, "greedy")), batches=BATCHES)
def test_fuzz_deltas_procedural(optimizer, batches):
    """Random batches, good and bad: accepted ones give finite costs; after each refused one
    the optimizer answers as a fresh one given the accepted batches does."""
    _fuzz_updates(optimizer, batches)


@fuzz(12)
@given(batches=BATCHES)
def test_fuzz_deltas_declarative(batches):
    _fuzz_updates("declarative", batches)


def _fuzz_updates(optimizer: str, batches: list[str]) -> None:
    o = make(optimizer)
    _check_step(o.optimize())
    accepted: list[str] = []
    failed = False
    for b in batches:
        try:
            step = o.update(b)
        except ReoptError as e:
            event("update refused")
            one_line(e)
            failed = True
            continue
        event("update accepted")
        _check_step(step)
        accepted.append(b)
    if failed:
        probe = "card customer *2"
        assert o.update(probe).cost == pytest.approx(
            _replay(optimizer, accepted).update(probe).cost, rel=1e-9)


@fuzz(40)
@given(sql=sql_texts(), batches=BATCHES,
       flags=st.sampled_from([[], ["--json"], ["--sf", "1e90"], ["--sf", "1_000"],
                              ["--pruning", "none"], ["--optimizer", "topdown-inc"],
                              ["--optimizer", "bottomup", "--rules", "rules"]]))
def test_fuzz_cli(capsys, sql, batches, flags):
    query = sql if "--sf" not in flags else "tpch:q3"
    argv = ["optimize", query, "--engine", "python", "--optimizer", "topdown", *flags]
    for b in batches[:2]:
        argv += ["--delta", b]
    code, out, err = run(capsys, *argv)
    event(f"exit {code}")
    if code == 0:
        assert err == ""
        if "--json" in flags:
            strict_json(out)
        return
    assert code == 2 and out == "", err
    assert err.startswith("reopt: ") and err.count("\n") == 1, err
