"""Edited copies of the installed rule files, for tests that prove the rules are the program."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from reopt.evaluator.compiler import CompiledProgram
from reopt.evaluator.driver import load_program, rule_files


def edited_rules(tmp_path: Path, old: str = "", new: str = "", extra: str = "",
                 file: str = "optimizer.dl") -> Path:
    """A copy of the rules directory with ``old`` replaced by ``new`` in ``file``
    (``old`` must occur exactly once) and ``extra`` written to an additional ``extra.dl``."""
    out = tmp_path / "rules"
    out.mkdir()
    for f in rule_files():
        shutil.copy(f, out / f.name)
    target = out / file
    text = target.read_text()
    if old:
        assert text.count(old) == 1, old
        target.write_text(text.replace(old, new))
    if extra:
        (out / "extra.dl").write_text(extra)
    return out


# Relations a user adds (README, "Python API": ``rules="my_rules/"``): one from the input and
# one from the enumeration, evaluated before the maintained stratum (strata are ordered by
# name where dependencies allow: hence the names) and neither counted, aggregated nor
# embedding their source, so revival cannot rebuild them; one inside the enumeration's
# recursion that feeds Goal (its Goal derivations count: such a Goal is never pruned); one
# from the best costs, after the maintained stratum.
USER_RULES = """
Asked(q) :- Expr(q, _, _).
Alts(q, e) :- SearchSpace(q, e, _, _, _, _, _, _, _, _).
Inputs(q, e, p) :- SearchSpace(q, _, _, _, _, _, e, p, _, _), e != 0.
Goal(q, e, p) :- Inputs(q, e, p).
Priced(q, e, c) :- BestCost(q, e, _, c).
"""


ONDEMAND = ".ondemand LocalCost ParentBound MaxBound Bound."
"""``rules/bounds.dl``'s declaration of the relations derived when read."""

ONDEMAND_PLAN = ".ondemand BestPlan."
"""``rules/optimizer.dl``'s declaration of the relation derived when read."""


def eager_rules(tmp_path: Path, extra: str = "") -> Path:
    """A copy of the rules directory deriving everything at every evaluation and update
    (the ``.ondemand`` declarations removed), with ``extra`` as :func:`edited_rules` adds it."""
    out = edited_rules(tmp_path, old=ONDEMAND, new="", extra=extra, file="bounds.dl")
    plan = out / "optimizer.dl"
    text = plan.read_text()
    assert text.count(ONDEMAND_PLAN) == 1
    plan.write_text(text.replace(ONDEMAND_PLAN, ""))
    return out


def eager_program(pruning: str) -> CompiledProgram:
    """The shipped rules compiled without ``.ondemand`` (an oracle that derives every stratum
    in place; the program keeps its text, so the directory can go)."""
    with tempfile.TemporaryDirectory() as d:
        return load_program(eager_rules(Path(d)), pruning=pruning)
