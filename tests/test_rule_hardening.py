"""Issue 22 on rule files: every edited rule directory works or fails with one line naming
the file, the line and what is wrong (the reproductions that crashed with a traceback)."""

from __future__ import annotations

import re

import pytest

from reopt.api import Optimizer
from reopt.costmodel.errors import ReoptError
from tests.clirun import one_line_error
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
