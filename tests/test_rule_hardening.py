"""Issue 22 on rule files: every edited rule directory works or fails with one line naming
the file, the line and what is wrong (the reproductions that crashed with a traceback)."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from reopt.api import Optimizer
from reopt.costmodel.errors import ReoptError
from reopt.evaluator.budget import BudgetError
from tests.clirun import one_line_error
from tests.fuzzing import fuzz
from tests.rulefiles import edited_rules

BIG = "7" * 5000
CHAIN = " + ".join(["1"] * 3000)


def _cli_error(capsys, rules) -> str:
    return one_line_error(capsys, "optimize", "tpch:q3", "--engine", "python",
                          "--rules", str(rules))


def test_repro_only_a_comment(capsys, tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "optimizer.dl").write_text("% only a comment\n")
    err = _cli_error(capsys, rules)
    assert "optimizer.dl: the rule files define no relation SearchSpace" in err


@pytest.mark.parametrize("extra, where, message", [
    # a computed relation set handed to the built-ins (was IndexError)
    ("Goal(q, e2, p) :- Goal(q, e, p), e2 = e + 1.\n", r"optimizer\.dl:\d+:\d+",
     r"called Fn_\w+\(0, \d+, .*is not a relation set of query tpch:q3"),
    # a computed query id handed to a built-in the variants call for its one answer
    ("Foo(q, md) :- Expr(q, e, _), q2 = q + 7, Fn_scansummary(q2, e, md).\n",
     r"extra\.dl:1:1", r"called Fn_scansummary\(7, \d+\), which failed: 7 is not the id"),
    (f"Goal(q, e, p) :- Goal(q, e, p), e != {BIG}.\n", r"extra\.dl:1:38",
     "integer constant of 5,000 digits does not fit 64 bits"),
    ("Goal(q, e, p) :- Goal(q, e, p), e != 1e400.\n", r"extra\.dl:1:38",
     "number 1e400 is out of the float range"),
    (f"Goal(q, e, p) :- Goal(q, e, p), e != {CHAIN}.\n", r"extra\.dl:1:38",
     "arithmetic of more than 100 terms"),
    # misused arithmetic: on a string column
    ('Goal(q, e, p2) :- Goal(q, e, p), p2 = p + 1.\n', r"extra\.dl:1:1", "arithmetic on a"),
])
def test_repro_rule_edits_that_crashed(capsys, tmp_path, extra, where, message):
    err = _cli_error(capsys, edited_rules(tmp_path, extra=extra))
    assert re.search(where, err), err
    assert re.search(message, err), err


def test_repro_required_relation_with_other_columns(capsys, tmp_path):
    rules = edited_rules(tmp_path, "R10: BestPlan(q, expr, prop,",
                         "R10: BestPlan(q, 1, expr, prop,")
    err = _cli_error(capsys, rules)
    assert re.search(r"optimizer\.dl:\d+:\d+: BestPlan has columns \(long, long, long, string,"
                     r".*\) but the optimizer reads BestPlan\(long, long, string, long,", err), err


def test_largest_accepted_constant_and_chain_still_work(tmp_path):
    """The limits refuse only what does not fit: 2**63 - 1 and a 100-term chain compile and
    change nothing (the filters they add are always true)."""
    extra = (f"Goal(q, e, p) :- Goal(q, e, p), e != {2**63 - 1}.\n"
             f"Goal(q, e, p) :- Goal(q, e, p), e != {' + '.join(['1'] * 100)}.\n")
    rules = edited_rules(tmp_path, extra=extra)
    plain = Optimizer("tpch:q3", engine="python").optimize().cost
    assert Optimizer("tpch:q3", engine="python", rules=rules).optimize().cost == plain
    with pytest.raises(ReoptError, match="does not fit 64 bits"):
        (rules / "extra.dl").write_text(f"Goal(q, e, p) :- Goal(q, e, p), e != {2**63}.\n")
        Optimizer("tpch:q3", engine="python", rules=rules).optimize()


# -- budgets: a program without a fixpoint stops with an error, not a hang -------------------
COUNTER = "Counter(q, 0) :- Expr(q, _, _).\nCounter(q, m) :- Counter(q, n), m = n + 1.\n"


def test_repro_counter_without_fixpoint_stops_at_the_iteration_budget(capsys, tmp_path):
    """The default budget (10,000 iterations: ten times what 62 relations take) stops it."""
    err = _cli_error(capsys, edited_rules(tmp_path, extra=COUNTER))
    assert re.search(r"extra\.dl:2:1: no fixpoint after 10,000 iterations \(--max-iterations, "
                     r"max_iterations=\): relation Counter keeps growing", err), err


@pytest.mark.parametrize("limit", [1, 500])
def test_counter_stops_at_the_tuple_budget(tmp_path, limit):
    rules = edited_rules(tmp_path, extra=COUNTER)
    o = Optimizer("tpch:q3", engine="python", rules=rules, max_tuples=limit)
    # Counter grows by one tuple an iteration: it holds limit + 1 when it is stopped
    with pytest.raises(BudgetError, match=rf"extra\.dl:2:1: relation Counter holds "
                                          rf"{limit + 1:,} tuples, more than the budget of "
                                          rf"{limit:,} \(--max-tuples"):
        o.optimize()


def test_budgets_bind_exactly():
    """A budget equal to what an evaluation takes lets it finish with the same plan; one less
    stops it (the iteration count is the one the metrics report)."""
    plain = Optimizer("tpch:q5", engine="python").optimize()
    n = plain.metrics["iterations"]
    within = Optimizer("tpch:q5", engine="python", max_iterations=n).optimize()
    assert within.cost == plain.cost and within.metrics["iterations"] == n
    with pytest.raises(BudgetError, match=f"no fixpoint after {n - 1:,} iterations"):
        Optimizer("tpch:q5", engine="python", max_iterations=n - 1).optimize()


@pytest.mark.parametrize("kw", [{"max_tuples": 0}, {"max_iterations": -1},
                                {"max_tuples": True}, {"max_iterations": 1.5}])
def test_budget_values_are_checked(kw):
    with pytest.raises(ReoptError, match=f"{next(iter(kw))} must be a positive integer"):
        Optimizer("tpch:q3", engine="python", **kw)


@pytest.mark.parametrize("argv, message", [
    (["--max-tuples", "0"], "--max-tuples: must be at least 1"),
    (["--max-iterations", "x"], "--max-iterations: expected a whole number"),
    (["--optimizer", "topdown", "--max-tuples", "5"],
     "--max-tuples applies to the declarative optimizer"),
])
def test_cli_budget_flags(capsys, argv, message):
    err = one_line_error(capsys, "optimize", "tpch:q3", "--engine", "python", *argv)
    assert message in err, err


@pytest.mark.spark
def test_spark_engine_stops_the_counter(spark, tmp_path):
    rules = edited_rules(tmp_path, extra=COUNTER)
    o = Optimizer("tpch:q3", engine="spark", rules=rules, max_iterations=3)
    with pytest.raises(BudgetError, match=r"extra\.dl:2:1: no fixpoint after 3 iterations.*"
                                          r"relation Counter keeps growing"):
        o.optimize()


@pytest.mark.spark
def test_spark_engine_names_the_built_in_a_rule_fed_a_computed_relation_set(spark, tmp_path):
    """The failure happens in a Spark task; the rule, the built-in call and what is wrong
    reach the driver as a ReoptError (one line), not as a Python worker's traceback."""
    rules = edited_rules(tmp_path, extra="Goal(q, e2, p) :- Goal(q, e, p), e2 = e + 1.\n")
    with pytest.raises(ReoptError, match=r"^\S+optimizer\.dl:\d+:\d+: rule .* called "
                                         r"Fn_\w+\(0, \d+, .*which failed: \d+ is not a "
                                         r"relation set of query tpch:q3"):
        Optimizer("tpch:q3", engine="spark", rules=rules).optimize()


# -- fuzz: random edits of the rule files ------------------------------------------------------
SNIPPETS = [
    COUNTER,
    "Goal(q, e2, p) :- Goal(q, e, p), e2 = e + 1.\n",
    "Goal(q, e2, p) :- Goal(q, e, p), e2 = e - e.\n",
    "Goal(q, -1, \"any\") :- Expr(q, _, _).\n",
    "Goal(q, 3, \"any\") :- Expr(q, _, _).\n",
    "Goal(7, e, p) :- Goal(q, e, p).\n",
    "Goal(q, e, \"sort:nosuch\") :- Goal(q, e, _).\n",
    "Goal(q, e, p2) :- Goal(q, e, p), p2 = p + 1.\n",
    "Goal(q, e, p) :- Goal(q, e, p, x).\n",
    "Goal(q, e, p) :- Goal(q, e, p), !Goal(q, e, p).\n",
    "Goal(q, e, p) :- Nope(q, e, p).\n",
    "Expr(q, e, p) :- Goal(q, e, p).\n",
    "BestCost(q, e, p, 0.0) :- Goal(q, e, p).\n",
    "Big(q, c) :- BestCost(q, _, _, c0), c = c0 + 1e308 + 1e308.\n",
    "Neg(q, c) :- BestCost(q, _, _, c0), c = 0 - c0 - 1e308.\n",
    f"Goal(q, e, p) :- Goal(q, e, p), e != {BIG}.\n",
    "Goal(q, e, p) :- Goal(q, e, p), e != 1e400.\n",
    f"Goal(q, e, p) :- Goal(q, e, p), e != {' - '.join(['1'] * 150)}.\n",
    "JoinMethod(warp).\n", "ScanMethod(1).\n", "FinalMethod(\"\").\n",
    ".schedule descending Fn_rank Goal SearchSpace.\n", ".bogus X.\n", ".aggsel Goal.\n",
    "% only a comment\n", "\x00\ufffd", "Goal(q, e, p) :- Goal(q, e, p)",
]
SWAPS = [("min<cost>", "max<cost>"), ("Fn_split", "Fn_splat"), ("lExpr != 0", "lExpr = 0"),
         ("ascending", "descending"), (".schedule", "% .schedule"), ("prop", "_"),
         ("cost)", "md)"), ("q, ", ""), (":-", ":- !"), ("R9:", "R9 R9:")]


@st.composite
def rule_edits(draw) -> list[tuple]:
    """One to three edits of the rule directory: a snippet appended, a line deleted, a file
    cut short, or a text swapped (first occurrence)."""
    edit = st.one_of(
        st.tuples(st.just("append"), st.sampled_from(SNIPPETS)),
        st.tuples(st.just("delete"), st.sampled_from(["optimizer.dl", "bounds.dl"]),
                  st.integers(0, 200)),
        st.tuples(st.just("cut"), st.sampled_from(["optimizer.dl", "bounds.dl"]),
                  st.floats(0, 1)),
        st.tuples(st.just("swap"), st.sampled_from(["optimizer.dl", "bounds.dl"]),
                  st.sampled_from(SWAPS)),
    )
    return draw(st.lists(edit, min_size=1, max_size=3))


def _apply(rules, edits: list[tuple]) -> None:
    for e in edits:
        if e[0] == "append":
            with open(rules / "extra.dl", "a", encoding="utf-8") as f:
                f.write(e[1])
            continue
        path = rules / e[1]
        text = path.read_text(encoding="utf-8")
        if e[0] == "delete":
            lines = text.splitlines(keepends=True)
            if lines:
                del lines[e[2] % len(lines)]
            text = "".join(lines)
        elif e[0] == "cut":
            text = text[:int(len(text) * e[2])]
        else:
            text = text.replace(*e[2], 1)
        path.write_text(text, encoding="utf-8")


@fuzz(60)
@given(edits=rule_edits())
def test_fuzz_rule_files(tmp_path_factory, edits):
    """Every edited rule directory either optimizes Q3 (finite cost, strict JSON) or fails
    with one ReoptError line; never another exception, never a hang (budgets kept small so a
    runaway program stops in well under a second)."""
    rules = edited_rules(tmp_path_factory.mktemp("fuzz"))
    _apply(rules, edits)
    try:
        step = Optimizer("tpch:q3", engine="python", rules=rules, max_iterations=2000,
                         max_tuples=200_000).optimize()
    except ReoptError as e:
        event(f"refused: {type(e).__name__}")
        assert str(e) and "\n" not in str(e), str(e)
        return
    event("optimized")
    assert math.isfinite(step.cost)
    json.loads(json.dumps(step.to_json(), allow_nan=False))
