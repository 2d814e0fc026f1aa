"""Cardinality estimation follows the documented rules (README, 'Cardinality estimation').

Expected values are computed by hand from the rules, not taken from the program's output.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from randq import queries

from reopt.costmodel import cardinality as card
from reopt.costmodel.cardinality import Adjustments, Estimator
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.deltas import apply_delta, apply_deltas, parse_delta, parse_deltas
from reopt.costmodel.errors import CatalogError, DeltaError, QueryError
from reopt.costmodel.models import cost_model
from reopt.costmodel.query import (
    And,
    Between,
    ColumnRef,
    Compare,
    InList,
    IsNull,
    JoinPredicate,
    Like,
    Not,
    Opaque,
    Or,
    Query,
    Relation,
)

C = ColumnRef
CAT = Catalog.from_dict(
    {
        "tables": {
            "a": {
                "rows": 1000,
                "columns": {
                    "x": {"distinct": 50, "min": 0, "max": 100},
                    "h": {"histogram": {"bounds": [0, 10, 100], "counts": [90, 10]}},
                    "d": {"min": "1995-01-01", "max": "1995-01-11"},
                    "s": {},
                },
                "indexes": ["x"],
            },
            "b": {"rows": 200, "columns": {"x": {"distinct": 200}, "y": {"distinct": 20}}},
            "c": {"rows": 40, "columns": {"y": {}}},
        }
    }
)


def query(*filters, joins=()) -> Query:
    return Query(
        "t",
        (Relation("a", "a"), Relation("b", "b"), Relation("c", "c")),
        tuple(filters),
        tuple(joins),
    )


def sel(p) -> float:
    return Estimator(query(p), CAT).predicate_selectivity(p)


@pytest.mark.parametrize(
    "pred, expected",
    [
        (Compare(C("a", "x"), "=", 3), 1 / 50),
        (Compare(C("a", "x"), "<>", 3), 1 - 1 / 50),
        (Compare(C("a", "x"), "<", 25), 0.25),  # interpolation on [0, 100]
        (Compare(C("a", "x"), ">=", 25), 0.75),
        (Between(C("a", "x"), 10, 30), 0.2),
        (Compare(C("a", "h"), "<", 5), 0.45),  # histogram: half of the first bucket (90 rows)
        (Compare(C("a", "h"), "<", 55), 0.95),  # 90 + half of the second bucket's 10
        (Compare(C("a", "d"), "<", "1995-01-06"), 0.5),  # dates interpolate as day numbers
        (InList(C("a", "x"), (1, 2, 3, 3)), 3 / 50),
        (Compare(C("a", "s"), "=", "q"), card.DEFAULT_EQ),  # no distinct
        (Compare(C("a", "s"), "<", "q"), card.DEFAULT_RANGE),  # no min/max
        (Between(C("a", "s"), "a", "b"), card.DEFAULT_BETWEEN),
        (Like(C("a", "s"), "%x%"), card.DEFAULT_LIKE),
        (IsNull(C("a", "s")), card.DEFAULT_IS_NULL),
        (Opaque("a", "a.x = a.h"), card.DEFAULT_OPAQUE),
        (Not(Compare(C("a", "x"), "<", 25)), 0.75),
        (Or((Compare(C("a", "x"), "=", 1), Compare(C("a", "x"), "=", 2))), 0.02 + 0.02 - 0.0004),
        (And((Compare(C("a", "x"), "=", 3), Compare(C("a", "x"), "<", 25))), 0.02 * 0.25),
        # AND nested inside OR: a product inside the OR's s1 + s2 − s1·s2
        (Or((And((Compare(C("a", "x"), "=", 3), Compare(C("a", "x"), "<", 25))),
             Compare(C("a", "x"), "=", 1))), 0.005 + 0.02 - 0.005 * 0.02),
        (Not(And((Compare(C("a", "x"), "<", 25), Compare(C("a", "x"), ">=", 25)))),
         1 - 0.25 * 0.75),
        (Compare(C("a", "x"), "<", 500), 1.0),  # clamped
    ],
)
def test_filter_selectivity(pred, expected):
    assert math.isclose(sel(pred), expected, rel_tol=1e-12)


def test_relation_cardinality_is_rows_times_filter_selectivities():
    q = query(Compare(C("a", "x"), "=", 3), Compare(C("a", "x"), "<", 25))
    assert math.isclose(Estimator(q, CAT).leaf_card("a"), 1000 * (1 / 50) * 0.25)


def test_join_cardinality_and_corrections():
    ab = JoinPredicate.of(C("a", "x"), C("b", "x"))
    bc = JoinPredicate.of(C("b", "y"), C("c", "y"))
    q = query(joins=(ab, bc))
    est = Estimator(q, CAT)
    # 1/max(50, 200); c.y has no distinct: the table's rows (40) stand in, max(20, 40)
    assert est.join_selectivity(ab) == 1 / 200
    assert est.join_selectivity(bc) == 1 / 40
    assert math.isclose(est.card(0b011), 1000 * 200 / 200)
    assert math.isclose(est.card(0b111), 1000 * 200 * 40 / 200 / 40)
    assert math.isclose(est.card(0b101), 1000 * 40)  # no predicate: cross product
    adj = apply_delta(parse_delta("card {a,b} *3"), q, CAT, Adjustments())
    est2 = Estimator(q, CAT, adj)
    assert math.isclose(est2.card(0b011), 3000) and math.isclose(est2.card(0b111), 3000)
    assert math.isclose(est2.card(0b110), est.card(0b110))  # not a superset of {a,b}
    adj = apply_delta(parse_delta("card {a,b} =500"), q, CAT, adj)
    assert math.isclose(Estimator(q, CAT, adj).card(0b011), 500)
    adj = apply_delta(parse_delta("card {b,c} =10"), q, CAT, adj)
    est3 = Estimator(q, CAT, adj)
    assert math.isclose(est3.card(0b110), 10)
    assert math.isclose(est3.card(0b011), 500)  # earlier correction kept
    assert math.isclose(est3.card(0b111), 1000 * 200 * 40 / 200 / 40 * (500 / 1000) * (10 / 200))


def test_estimates_are_clamped_to_one_row_and_the_cross_product():
    """README, "Cardinality estimation": at least 1 row, at most the product of the rows before
    filters; a ``card {…} =N`` is solved against the unclamped product, so N is exact."""
    ab = JoinPredicate.of(C("a", "x"), C("b", "x"))
    bc = JoinPredicate.of(C("b", "y"), C("c", "y"))
    three = tuple(Compare(C("a", "x"), "=", v) for v in (5, 6, 7))
    q = query(*three, joins=(ab, bc))
    est = Estimator(q, CAT)
    assert est.leaf_card("a") == 1.0  # 1000 / 50**3 = 0.008 rows
    assert est.card(0b011) == 1.0  # 1 × 200 / 200
    adj = apply_delta(parse_delta("sel a.x=b.x =1e-9"), q, CAT, Adjustments())
    assert Estimator(q, CAT, adj).card(0b111) == 1.0  # 1 × 200 × 40 × 1e-9 / 40 = 2e-7
    adj = apply_delta(parse_delta("card {a,b} =7"), q, CAT, adj)  # against 2e-7, not 1
    assert math.isclose(Estimator(q, CAT, adj).card(0b011), 7, rel_tol=1e-12)
    assert math.isclose(Estimator(q, CAT, adj).card(0b111), 7, rel_tol=1e-12)
    adj = apply_delta(parse_delta("card {b,c} *1e12"), query(joins=(ab, bc)), CAT, Adjustments())
    big = Estimator(query(joins=(ab, bc)), CAT, adj)
    assert big.card(0b110) == 200 * 40  # 200 × 40 / 40 × 1e12, above the cross product
    assert big.card(0b111) == 1000 * 200 * 40


def test_card_deltas_on_tables_and_aliases():
    q = Query("t", (Relation("a1", "a"), Relation("a2", "a"), Relation("b", "b")))
    adj = apply_deltas(parse_deltas("card a *2; card a2 *0.5"), q, CAT, Adjustments())
    est = Estimator(q, CAT, adj)
    assert est.base_rows("a1") == 2000 and est.base_rows("a2") == 1000
    adj = apply_delta(parse_delta("card a =10"), q, CAT, adj)  # every alias of the table
    est = Estimator(q, CAT, adj)
    assert est.base_rows("a1") == 10 and est.base_rows("a2") == 10
    adj = apply_delta(parse_delta("card a1 =7"), q, CAT, adj)
    assert Estimator(q, CAT, adj).base_rows("a1") == 7


def test_card_factors_compose():
    # "scale the rows": a second factor scales what the first left, on a table (every alias)
    # and on one alias alike
    q = Query("t", (Relation("a1", "a"), Relation("a2", "a"), Relation("b", "b")))
    adj = apply_deltas(parse_deltas("card a *2; card a *2; card a2 *3; card b *0.5; card b *0.5"),
                       q, CAT, Adjustments())
    est = Estimator(q, CAT, adj)
    assert est.base_rows("a1") == 4000 and est.base_rows("a2") == 12000
    assert est.base_rows("b") == 50
    adj = apply_delta(parse_delta("card a2 *0.5"), q, CAT, adj)
    assert Estimator(q, CAT, adj).base_rows("a2") == 6000


def test_sel_and_cost_deltas():
    ab = JoinPredicate.of(C("a", "x"), C("b", "x"))
    q = query(joins=(ab,))
    adj = apply_delta(parse_delta("sel b.x=a.x *4"), q, CAT, Adjustments())  # sides any order
    assert math.isclose(Estimator(q, CAT, adj).join_selectivity(ab), 4 / 200)
    adj = apply_delta(parse_delta("sel a.x = b.x =0.5"), q, CAT, adj)
    assert Estimator(q, CAT, adj).join_selectivity(ab) == 0.5
    ops = cost_model("io").operators
    adj = apply_delta(parse_delta("cost hashjoin *2"), q, CAT, adj, ops)
    adj = apply_delta(parse_delta("cost hashjoin *3"), q, CAT, adj, ops)
    assert adj.op_factors["hashjoin"] == 6


def test_json_deltas():
    ds = parse_deltas('[{"kind": "card", "target": "a", "op": "*", "value": 2}]')
    assert ds[0].kind == "card" and ds[0].value == 2


@pytest.mark.parametrize(
    "text, message",
    [
        ("card a", "expected 'card|sel|cost TARGET"),
        ("bogus a *2", "unknown kind 'bogus'"),
        ("card a *nan", "finite and positive"),
        ("card a *inf", "finite and positive"),
        ("card a *0", "finite and positive"),
        ("card a *-2", "finite and positive"),
        ("card a *x", "'x' is not a number"),
        ("cost hashjoin =2", "cost deltas scale"),
        ("sel a.x=b.x =2", "must be in (0, 1]"),
        ('{"kind": "card", "target": "a", "op": "*"}', "missing 'value'"),
        ('{"kind": "card", "target": "a", "op": "*", "value": true}', "not a number"),
        ('{"kind": "card", "target": "a", "op": "*", "value": null}', "value null is not a number"),
        ("[{", "invalid JSON"),
        # numbers are read strictly (issue 22): what float() would take is not a number here
        ("card a *1_000", "value '1_000' is not a number"),
        ("card a *١٠", "value '١٠' is not a number"),
        ("card a *1e400", "1e400 is out of range"),
        ('{"kind": "card", "target": "a", "op": "*", "value": 2, "vlaue": 3}',
         "unknown key 'vlaue'"),
        ("[" * 5000 + "]" * 5000, "nested too deeply"),
    ],
)
def test_malformed_deltas_are_rejected_with_the_delta_named(text, message):
    with pytest.raises(DeltaError) as e:
        parse_deltas(text)
    assert message in str(e.value)


@pytest.mark.parametrize(
    "text, message",
    [
        ("card zz *2", "no table or alias 'zz' in query t"),
        ("card {a,zz} *2", "no relation 'zz' in query t"),
        ("card {} *2", "empty relation set"),
        ("sel a.x=c.y *2", "no join predicate a.x=c.y in query t"),
        ("sel a.x *2", "expected a join predicate 'A.x=B.y'"),
        ("cost warpdrive *2", "unknown operator 'warpdrive'"),
    ],
)
def test_deltas_naming_nothing_are_rejected(text, message):
    q = query(joins=(JoinPredicate.of(C("a", "x"), C("b", "x")),))
    before = Adjustments()
    with pytest.raises(DeltaError) as e:
        apply_deltas(parse_deltas(text), q, CAT, before, cost_model("io").operators)
    assert message in str(e.value) and text.split()[0] in str(e.value)


@pytest.mark.parametrize(
    "doc, message",
    [
        ({}, "expected an object with a 'tables' object"),
        ({"tables": {"t": {}}}, "table 't' has no 'rows'"),
        ({"tables": {"t": {"rows": -1}}}, "table 't' rows must be >= 0"),
        ({"tables": {"t": {"rows": "many"}}}, "table 't' rows must be a finite number"),
        ({"tables": {"t": {"rows": 1, "colums": {}}}}, "unknown key 'colums'"),
        ({"tables": {"t": {"rows": 1, "columns": {"x": {"distinct": 0}}}}}, "'t.x' distinct"),
        (
            {"tables": {"t": {"rows": 1, "columns": {"x": {"histogram": {"bounds": [1, 2],
                                                                      "counts": [1, 2]}}}}}},
            "len(bounds) == len(counts) + 1",
        ),
        ({"tables": {"t": {"rows": 1, "columns": {"x": {}}, "indexes": ["y"]}}}, "'y' is not a"),
    ],
)
def test_bad_catalogs_are_rejected_naming_table_and_column(doc, message):
    with pytest.raises(CatalogError) as e:
        Catalog.from_dict(doc, "cat.json")
    assert message in str(e.value) and str(e.value).startswith("cat.json: ")


def test_catalog_file_errors(tmp_path):
    p = tmp_path / "c.json"
    p.write_text('{"tables": {\n  "t": {"rows": 1,}\n}}')
    with pytest.raises(CatalogError, match=r"c\.json:2:\d+: invalid JSON"):
        Catalog.load(p)
    with pytest.raises(CatalogError, match="cannot read catalog"):
        Catalog.load(tmp_path / "missing.json")


def test_adjusted_statistics_pickle_for_spark_workers():
    import pickle

    q = query(joins=(JoinPredicate.of(C("a", "x"), C("b", "x")),))
    adj = apply_deltas(parse_deltas("card a *2; cost hashjoin *3"), q, CAT, Adjustments(),
                       cost_model("io").operators)
    back = pickle.loads(pickle.dumps(adj))
    assert back == adj and dict(back.alias_factors) == {"a": 2.0}
    assert dict(back.op_factors) == {"hashjoin": 3.0}


@pytest.mark.parametrize(
    "pred, bad",
    [
        (Compare(C("a", "d"), "<", "yesterday"), "'yesterday'"),
        (Compare(C("a", "d"), "=", "1995-13-45"), "'1995-13-45'"),
        (Between(C("a", "d"), "1995-01-01", "1995-02-30"), "'1995-02-30'"),
        (InList(C("a", "d"), ("1995-01-01", 19950101)), "19950101"),
        (Not(Compare(C("a", "d"), ">=", "soon")), "'soon'"),
    ],
)
def test_invalid_date_literals_on_date_columns_are_errors(pred, bad):
    """Not the default 1/3: the literal has no place on the column's day axis."""
    with pytest.raises(QueryError) as e:
        Estimator(query(pred), CAT)
    assert str(e.value) == (
        f"query t: {bad} is not a valid ISO date (YYYY-MM-DD), but column 'a.d' holds dates"
    )


def test_date_literal_errors_name_alias_and_table():
    q = Query("t", (Relation("o", "a"),), (Compare(C("o", "d"), "<", "yesterday"),))
    with pytest.raises(QueryError, match=r"column 'o\.d' \(a\.d\) holds dates$"):
        Estimator(q, CAT)


@pytest.mark.parametrize(
    "pred, expected",
    [
        (Compare(C("a", "d"), "<", "1995-01-06T12:00:00"), 0.5),  # a timestamp: its day
        (Compare(C("a", "d"), "=", None), card.DEFAULT_EQ),  # NULL: nothing to check
        (Compare(C("a", "s"), "<", "yesterday"), card.DEFAULT_RANGE),  # no statistics
        (Compare(C("a", "x"), "<", "yesterday"), card.DEFAULT_RANGE),  # numbers: as before
    ],
)
def test_valid_literals_and_non_date_columns_estimate_as_before(pred, expected):
    assert math.isclose(sel(pred), expected, rel_tol=1e-12)


def test_strings_on_text_columns_estimate_as_before():
    cat = Catalog.from_dict(
        {"tables": {"a": {"rows": 10, "columns": {"t": {"distinct": 4, "min": "a", "max": "z"}}}}}
    )
    q = Query("t", (Relation("a", "a"),), (Compare(C("a", "t"), "<", "yesterday"),))
    est = Estimator(q, cat)
    assert est.predicate_selectivity(Compare(C("a", "t"), "<", "yesterday")) == card.DEFAULT_RANGE
    assert est.predicate_selectivity(Compare(C("a", "t"), "=", "yesterday")) == 1 / 4


@settings(max_examples=150, deadline=None)
@given(qc=queries(2, 7), data=st.data())
def test_the_plain_product_path_equals_the_exact_one(qc, data):
    """Estimator.card multiplies plain floats when it can; whenever it does, the result is
    the overflow-free product's (raw_card, clamped), bit for bit — under corrections of any
    size, including ones that push partial products out of the float range."""
    from reopt.costmodel.cardinality import clamp_rows

    q, cat = qc
    sizes = st.sampled_from([1e-300, 1e-200, 1e-20, 0.5, 3.0, 1e20, 1e200, 1e300])
    corrections = data.draw(st.dictionaries(st.integers(1, q.all_mask), sizes, max_size=4))
    est = Estimator(q, cat, Adjustments().replace(corrections=corrections))
    for mask in range(1, q.all_mask + 1):
        exact = clamp_rows(est.raw_card(mask), est.ceiling(mask))
        plain = est._plain_card(mask)
        assert plain is None or plain == exact, (mask, plain, exact)
        assert est.card(mask) == exact


@settings(max_examples=150, deadline=None)
@given(qc=queries(2, 7), data=st.data())
def test_the_batch_estimate_is_the_exact_one(qc, data):
    """Estimator.cards (the vectorized form the columnar callers use) gives every set the
    scalar estimate bit for bit, which without observations is the overflow-free product's
    (raw_card, clamped) — under corrections of any size and observations under either
    policy, whichever sets take the plain path and whichever the exact one."""
    from reopt.costmodel.cardinality import clamp_rows

    q, cat = qc
    sizes = st.sampled_from([1e-300, 1e-200, 1e-20, 0.5, 3.0, 1e20, 1e200, 1e300])
    corrections = data.draw(st.dictionaries(st.integers(1, q.all_mask), sizes, max_size=4))
    observed = data.draw(st.dictionaries(st.integers(1, q.all_mask),
                                         st.sampled_from([0.0, 5.0, 1e6, 1e30]), max_size=3))
    policy = data.draw(st.sampled_from(["keep", "propagate"]))
    adj = Adjustments(observed_supersets=policy).replace(corrections=corrections,
                                                         observations=observed)
    masks = list(range(1, q.all_mask + 1))
    data.draw(st.randoms()).shuffle(masks)
    got = Estimator(q, cat, adj).cards(np.asarray(masks, dtype=np.int64)).tolist()
    fresh = Estimator(q, cat, adj)
    assert got == [fresh.card(m) for m in masks]
    if not observed:  # the oracle: the overflow-free product
        assert got == [clamp_rows(fresh.raw_card(m), fresh.ceiling(m)) for m in masks]


@settings(max_examples=100, deadline=None)
@given(qc=queries(2, 7), data=st.data())
def test_batches_of_estimates_are_memoized_as_one_by_one(qc, data):
    """Estimator.cards memoizes: batches with repeated sets, overlapping earlier batches and
    interleaved with Estimator.card (which enters sets the sorted copy of the memo does not
    hold yet) each give a fresh estimator's card of every set, bit for bit, and afterwards
    the memo holds exactly the sets asked for (besides the leaves entered up front)."""
    q, cat = qc
    sizes = st.sampled_from([1e-200, 1e-20, 0.5, 3.0, 1e20, 1e200])
    corrections = data.draw(st.dictionaries(st.integers(1, q.all_mask), sizes, max_size=3))
    observed = data.draw(st.dictionaries(st.integers(1, q.all_mask),
                                         st.sampled_from([0.0, 5.0, 1e6]), max_size=2))
    adj = Adjustments().replace(corrections=corrections, observations=observed)
    est, fresh = Estimator(q, cat, adj), Estimator(q, cat, adj)
    leaves = set(est._card)
    sets = st.lists(st.integers(1, q.all_mask), max_size=30)
    asked: set[int] = set()
    for _ in range(data.draw(st.integers(1, 5))):
        batch = data.draw(sets)
        got = est.cards(np.asarray(batch, dtype=np.int64)).tolist()
        assert got == [fresh.card(m) for m in batch]
        single = data.draw(st.integers(1, q.all_mask))
        assert est.card(single) == fresh.card(single)
        asked.update(batch, [single])
    assert set(est._card) == leaves | asked


@settings(max_examples=60, deadline=None)
@given(qc=queries(2, 7), data=st.data())
def test_batches_read_off_the_table_by_set_are_the_estimates(qc, data):
    """Estimator.cards reads sets estimated already off a table indexed by set: batches
    with sets above the table (``TABLED_SETS`` drawn below the query's sets), sets not
    estimated yet and sets entered one by one between batches give a fresh estimator's
    card of every set, bit for bit (fails when a set past the table is looked up in it, or
    a set not estimated yet is read off it as its NaN)."""
    from unittest import mock

    q, cat = qc
    est, fresh = Estimator(q, cat), Estimator(q, cat)
    sets = st.lists(st.integers(1, q.all_mask), min_size=1, max_size=30)
    with mock.patch.object(card, "TABLED_SETS", data.draw(st.integers(0, q.all_mask + 1))):
        for _ in range(data.draw(st.integers(2, 5))):
            batch = data.draw(sets)
            for again in (batch, batch[::-1]):
                got = est.cards(np.asarray(again, dtype=np.int64)).tolist()
                assert got == [fresh.card(m) for m in again]
            single = data.draw(st.integers(1, q.all_mask))
            assert est.card(single) == fresh.card(single)


@settings(max_examples=150, deadline=None)
@given(qc=queries(2, 7), data=st.data())
def test_the_scalar_batch_estimate_is_the_exact_one(qc, data):
    """Estimator.estimate_all (a small plan space's csgs in one pass, leaf products shared
    through prefixes) enters every set's estimate bit for bit as card gives it one by one,
    which without observations is the overflow-free product's (raw_card, clamped) — for any
    sets (prefixes present or not), under corrections of any size and observations."""
    from reopt.costmodel.cardinality import clamp_rows

    q, cat = qc
    sizes = st.sampled_from([1e-300, 1e-200, 1e-20, 0.5, 3.0, 1e20, 1e200, 1e300])
    corrections = data.draw(st.dictionaries(st.integers(1, q.all_mask), sizes, max_size=4))
    observed = data.draw(st.dictionaries(st.integers(1, q.all_mask),
                                         st.sampled_from([0.0, 5.0, 1e6]), max_size=2))
    adj = Adjustments().replace(corrections=corrections, observations=observed)
    masks = data.draw(st.lists(st.integers(1, q.all_mask), unique=True, max_size=40))
    est = Estimator(q, cat, adj)
    est.estimate_all(masks)
    assert set(masks) <= set(est._card)
    fresh = Estimator(q, cat, adj)
    assert [est._card[m] for m in masks] == [fresh.card(m) for m in masks]
    if not observed:
        assert [est._card[m] for m in masks] == [clamp_rows(fresh.raw_card(m), fresh.ceiling(m))
                                                 for m in masks]


@settings(max_examples=40, deadline=None)
@given(shape=st.sampled_from(["clique", "star"]), n=st.integers(7, 9),
       seed=st.integers(0, 2**31), data=st.data())
def test_a_plan_space_estimates_its_csgs_in_bulk_as_one_by_one(shape, n, seed, data):
    """A plan space of at least PREFETCH_FROM csgs estimates them all in one vectorized call
    before its first local costs (Estimator.prefetch); every estimate a search then reads is
    a fresh estimator's card of the set, bit for bit, under corrections and observations."""
    from randq import make_query

    from reopt.costmodel.space import PREFETCH_FROM, PlanSpace

    q, cat = make_query(shape, n, seed)
    sizes = st.sampled_from([1e-200, 1e-20, 0.5, 3.0, 1e20, 1e200])
    corrections = data.draw(st.dictionaries(st.integers(1, q.all_mask), sizes, max_size=3))
    observed = data.draw(st.dictionaries(st.integers(1, q.all_mask),
                                         st.sampled_from([0.0, 5.0, 1e6]), max_size=2))
    adj = Adjustments().replace(corrections=corrections, observations=observed)
    space = PlanSpace(q, cat, cost_model("cout"), adj)
    csgs = space.graph.csgs()
    assert len(csgs) >= PREFETCH_FROM
    space.local_costs(space.all, "any")  # the first local costs: the bulk estimate
    assert set(csgs) <= set(space.estimator._card)
    fresh = Estimator(q, cat, adj)
    assert [space.summary(m) for m in csgs] == [fresh.card(m) for m in csgs]


def _statistics(q, data) -> Adjustments:
    """Random statistics of query ``q``: corrections of any size, row counts, alias factors,
    join selectivities and observations under either policy."""
    sizes = st.sampled_from([1e-300, 1e-20, 0.5, 3.0, 8.0, 1e20, 1e300])
    aliases = [r.alias for r in q.relations]
    keys = [p.key for p in q.joins]
    return Adjustments(observed_supersets=data.draw(st.sampled_from(["keep", "propagate"]))
                       ).replace(
        corrections=data.draw(st.dictionaries(st.integers(1, q.all_mask), sizes, max_size=4)),
        alias_factors=data.draw(st.dictionaries(st.sampled_from(aliases), sizes, max_size=2)),
        table_rows=data.draw(st.dictionaries(st.sampled_from(aliases),
                                             st.sampled_from([0.0, 7.0, 1e9]), max_size=1)),
        selectivities=data.draw(st.dictionaries(st.sampled_from(keys), st.sampled_from(
            [1e-9, 0.25, 1.0]), max_size=2)) if keys else {},
        observations=data.draw(st.dictionaries(st.integers(1, q.all_mask),
                                               st.sampled_from([0.0, 5.0, 1e30]), max_size=2)))


@settings(max_examples=150, deadline=None)
@given(qc=queries(2, 7), data=st.data())
def test_two_statistics_estimated_at_once_are_each_ones_estimates(qc, data):
    """Estimator.differing estimates the sets under both statistics in one pass, sharing the
    factors both multiply (an update's stale test): each side's estimates are a fresh
    estimator's card bit for bit, whatever differs between them (corrections added or
    changed, rows, selectivities, observations), so the sets it names are exactly those
    whose fresh estimates differ — whichever sets either had estimated before."""
    q, cat = qc
    first = _statistics(q, data)
    second = data.draw(st.sampled_from([first, _statistics(q, data)]))
    if data.draw(st.booleans()):  # a delta on top: the corrections keep their order
        second = first.replace(corrections={**first.corrections, **second.corrections})
    old = Estimator(q, cat, first)
    new = Estimator(q, cat, second, previous=old)
    masks = list(range(1, q.all_mask + 1))
    data.draw(st.randoms()).shuffle(masks)
    for m in data.draw(st.lists(st.sampled_from(masks), max_size=5)):
        data.draw(st.sampled_from([old, new])).card(m)  # estimated before, on either side
    now, was = new._estimated_with(old, np.asarray(masks, dtype=np.int64))
    a, b = Estimator(q, cat, second), Estimator(q, cat, first)
    assert now.tolist() == [a.card(m) for m in masks]
    assert was.tolist() == [b.card(m) for m in masks]
    expected = {m for m in masks if not a.card(m) == b.card(m)}
    assert Estimator(q, cat, second, previous=old).differing(old, masks, True) == expected
    assert new.differing(old, masks, True) == expected
