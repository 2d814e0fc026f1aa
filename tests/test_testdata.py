"""The rule dialect on the data-driven cases of ``tests/testdata/`` (format:
``tests/datacases.py``; README, "Development"): each valid case's relations on the python
engine, and a subset of the cases (:data:`SPARK_SUBSET`; or all of them) merged into ONE Spark
evaluation, against relations worked out by hand; each invalid case rejected with its
one-line error."""

from __future__ import annotations

import os

import datacases
import naive_datalog
import pytest
from ways import WAYS, way

from reopt.costmodel.errors import ReoptError
from reopt.evaluator.compiler import compile_program
from reopt.evaluator.parser import parse
from reopt.evaluator.python_engine import PythonEngine

CASES = [datacases.load(n) for n in datacases.names()]
VALID = [c for c in CASES if c.error is None]
INVALID = [c for c in CASES if c.error is not None]
SPARK_SUBSET = ("aggregates", "empty_inputs", "negation_of_recursive", "nullary")
"""The cases ``make test`` runs on Spark. A Spark fixpoint costs about half a second per
iteration on this 2-core machine (several where a built-in starts Python workers), and all
cases take over a hundred iterations, so these few cover Spark's own SQL paths — grouped
aggregates with ties, string keys and without keys, empty inputs, recursion, negation of a
derived relation, relations without columns (Spark's grouping without columns is a global
aggregate: a row out of nothing) — in a few iterations (``.schedule`` and built-ins on Spark
are checked against the python engine in ``tests/test_spark_engine.py``).
``REOPT_TESTDATA_SPARK=all`` runs every case instead."""
ON_SPARK = [c for c in VALID
            if (os.environ.get("REOPT_TESTDATA_SPARK") == "all" or c.name in SPARK_SUBSET)]


def typed(rows) -> set[tuple]:
    """Tuples whose values carry their type: ``1``, ``1.0`` and ``True`` are all equal in
    Python, but a long column is not a double or a boolean one."""
    return {tuple((type(v).__name__, v) for v in r) for r in rows}


def mismatches(case: datacases.Case, got: dict[str, set[tuple]]) -> list[str]:
    assert case.expected is not None
    out = []
    for rel, rows in case.expected.rows.items():
        want, have = typed(rows), typed(got[rel])
        if want != have:
            out.append(f"{case.name}: {rel}: missing {sorted(want - have)}, "
                       f"unexpected {sorted(have - want)}")
    return out


def test_cases_are_well_formed():
    """Every file belongs to a case, every case has an expectation, and a valid case's
    expectation lists exactly the relations its rules define (none forgotten)."""
    files = {p.name for p in datacases.DIR.iterdir()}
    stems = set(datacases.names())
    assert {f for f in files if f.rsplit(".", 1)[0] not in stems} == set()
    assert {s for s in stems if f"{s}.expected" not in files} == set()
    assert len(VALID) >= 20 and len(INVALID) >= 10
    for case in VALID:
        program = datacases.compile_case(case)
        assert case.expected is not None
        assert set(case.expected.rows) == datacases.defined(program), case.name


@pytest.mark.parametrize("how", WAYS)
@pytest.mark.parametrize("case", VALID, ids=lambda c: c.name)
def test_python_engine(case, how):
    """Also what ``make test`` runs of every case: the python engine is fast — on tuples, on
    frames (every stratum that deletes nothing), and handing recursive strata over to frames
    after their first iteration."""
    program = datacases.compile_case(case)
    with way(how):
        rels, _ = PythonEngine(program, {}).evaluate(case.inputs.rows)
    assert mismatches(case, {p: r.rows for p, r in rels.items()}) == []


@pytest.mark.parametrize("case", [c for c in VALID if ".schedule" not in c.text],
                         ids=lambda c: c.name)
def test_expectations_against_naive_evaluator(case):
    """The hand-worked expectations agree with a second, independent evaluator (its own
    parser, naive fixpoint; scheduled cases have no naive meaning and are left to the hand)."""
    assert mismatches(case, naive_datalog.evaluate(case.text, case.inputs.rows)) == []


@pytest.mark.parametrize("case", INVALID, ids=lambda c: c.name)
def test_rejected(case):
    with pytest.raises(ReoptError) as e:
        datacases.compile_case(case)
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"{case.file}:"), "the error names no position"
    assert case.error in message


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")
def test_spark_engine_cases_at_once(spark):
    """The cases of :data:`SPARK_SUBSET` (or all), relations renamed apart (``C<i>_…``), in
    one program and one Spark evaluation (one session, one set of broadcasts)."""
    from reopt.evaluator.spark_engine import SparkEngine

    program, inputs, prefixes = datacases.merged(ON_SPARK)
    rels, _ = SparkEngine(program, {}, spark).evaluate(inputs)
    wrong = []
    for case, prefix in zip(ON_SPARK, prefixes, strict=True):
        assert case.expected is not None
        got = {rel: rels[prefix + rel].rows for rel in case.expected.rows}
        wrong += mismatches(case, got)
    assert wrong == []


@pytest.mark.parametrize("case", VALID, ids=lambda c: c.name)
def test_distinct_form_derives_the_same_tuples(case):
    """The ``distinct`` form of a rule variant (a keyed scan visits each distinct value of
    the columns it binds once: what an update re-derives with) derives the same set of
    tuples as the plain form, and never more of them, for every variant of every case, run
    over the case's fixpoint relations as both the full relations and the delta."""
    program = datacases.compile_case(case)
    engine = PythonEngine(program, {})
    rels, _ = engine.evaluate(case.inputs.rows)
    for stratum in program.strata:
        for v in (*stratum.base, *stratum.deltas):
            plain = engine.run_variant(v, rels, rels)
            distinct = engine.run_variant(v, rels, rels, distinct=True)
            assert typed(distinct) == typed(plain), (case.name, v.head_pred)
            assert len(distinct) <= len(plain), (case.name, v.head_pred)


def test_distinct_form_visits_each_value_read_once():
    """Hand-made: ``H(a, b) :- K(a), R(a, b, _)`` over R holding ``(1, 20, …)`` twice (two
    tuples that differ only in the column the rule ignores). The plain form derives
    ``(1, 20)`` twice, the distinct form once; both the set worked out by hand."""
    text = ("K(1). K(2).\nR(1, 10, 100). R(1, 20, 200). R(1, 20, 300). R(2, 30, 400).\n"
            "H(a, b) :- K(a), R(a, b, _).\n")
    program = compile_program(parse(text, "distinct.dl"), datacases.TEST_BUILTINS, {},
                              datacases.FEATURES)
    engine = PythonEngine(program, {})
    rels, _ = engine.evaluate({})
    (v,) = [v for s in program.strata for v in s.base if v.head_pred == "H"]
    plain = engine.run_variant(v, rels, rels)
    distinct = engine.run_variant(v, rels, rels, distinct=True)
    assert sorted(plain) == [(1, 10), (1, 20), (1, 20), (2, 30)]
    assert sorted(distinct) == [(1, 10), (1, 20), (2, 30)]
