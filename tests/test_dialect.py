"""The rule dialect on programs the optimizer's rules do not exercise (README, "The rules"):
``tests/mini.py``'s relations from the python engine against the same relations computed in
plain Python; the Spark engine is checked against the same oracle in
``tests/test_spark_engine.py``."""

from __future__ import annotations

import mini

from reopt.costmodel.builtins import BUILTINS
from reopt.evaluator.compiler import compile_program
from reopt.evaluator.parser import parse
from reopt.evaluator.python_engine import PythonEngine


def test_small_program_against_plain_python():
    program = compile_program(parse(mini.MINI), BUILTINS, {})
    rels, stats = PythonEngine(program, {}).evaluate({})
    for pred, rows in mini.expected().items():
        assert rels[pred].rows == rows, pred


def test_semi_naive_evaluation_makes_every_derivation_once():
    """Each derivation of the non-linear ``Path`` is made in exactly one iteration: after the
    one where its last body tuple became new, never again."""
    program = compile_program(parse(mini.MINI), BUILTINS, {})
    _, stats = PythonEngine(program, {}).evaluate({})
    assert stats.produced["Path"] == mini.derivations_of_path()
