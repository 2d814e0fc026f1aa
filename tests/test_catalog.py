"""Catalog validation (README, "Catalog format"): statistics that would only make estimates
silently wrong — bad min/max, mixed kinds, tables or columns differing only in case — are
rejected on load with one line naming the file, the table and the column."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reopt.costmodel.catalog import Catalog, ColumnStats, Histogram, iso_date, value_kind
from reopt.costmodel.errors import CatalogError
from reopt.costmodel.tpch import tpch_catalog


def column(**stats: object) -> dict:
    return {"tables": {"orders": {"rows": 10, "columns": {"o_date": stats}}}}


def rejection(doc: dict) -> str:
    with pytest.raises(CatalogError) as info:
        Catalog.from_dict(doc, "cat.json")
    message = str(info.value)
    assert "\n" not in message
    return message


WHERE = "cat.json: column 'orders.o_date'"


@pytest.mark.parametrize(
    ("stats", "message"),
    [
        # not numbers or ISO dates
        (
            {"min": "notadate", "max": "1998-08-02"},
            "min 'notadate' is text but max '1998-08-02' is a date (min and max must be of "
            "one kind)",
        ),
        ({"min": "1995-13-45"}, "min '1995-13-45' is not a valid ISO date (YYYY-MM-DD)"),
        ({"max": "1995-02-30"}, "max '1995-02-30' is not a valid ISO date (YYYY-MM-DD)"),
        ({"min": "1995-1-5"}, "min '1995-1-5' is not a valid ISO date (YYYY-MM-DD)"),
        ({"min": "1995-01-01x"}, "min '1995-01-01x' is not a valid ISO date (YYYY-MM-DD)"),
        ({"min": [1]}, "min must be a number, an ISO date, text or a boolean, got [1]"),
        ({"max": {"v": 1}}, "max must be a number, an ISO date, text or a boolean, got {'v': 1}"),
        ({"min": float("nan")}, "min must be a number, an ISO date, text or a boolean, got nan"),
        # min > max
        ({"min": 10, "max": 5}, "min 10 is greater than max 5"),
        (
            {"min": "1998-01-02", "max": "1998-01-01"},
            "min '1998-01-02' is greater than max '1998-01-01'",
        ),
        ({"min": "b", "max": "a"}, "min 'b' is greater than max 'a'"),
        ({"min": True, "max": False}, "min True is greater than max False"),
        # mixed kinds
        (
            {"min": 1, "max": "1995-01-01"},
            "min 1 is a number but max '1995-01-01' is a date (min and max must be of one kind)",
        ),
        (
            {"min": "1", "max": 9},
            "min '1' is text but max 9 is a number (min and max must be of one kind)",
        ),
        (
            {"min": False, "max": 1},
            "min False is a boolean but max 1 is a number (min and max must be of one kind)",
        ),
        # histograms: bounds numbers or dates, of one kind, the kind of min/max
        (
            {"histogram": {"bounds": ["x", "y"], "counts": [1]}},
            "histogram bounds must be numbers or dates",
        ),
        (
            {"histogram": {"bounds": [0, "1995-01-01"], "counts": [1]}},
            "histogram bounds mix numbers and dates",
        ),
        (
            {"min": 0, "max": 5, "histogram": {"bounds": ["1995-01-01", "1995-01-02"],
                                               "counts": [1]}},
            "histogram bounds are dates but min/max are numbers",
        ),
    ],
)
def test_bad_min_max_are_rejected_naming_file_table_column(stats: dict, message: str) -> None:
    assert rejection(column(**stats)) == f"{WHERE} {message}"


@pytest.mark.parametrize(
    "stats",
    [
        {"distinct": 5, "min": 1, "max": 149999},
        {"min": -999.99, "max": 9999.99},
        {"min": 3, "max": 3},
        {"min": "1992-01-01", "max": "1998-08-02"},
        {"min": "1996-01-01T06:00:00", "max": "1996-12-31T23:59:59.5"},  # reopt stats timestamps
        {"min": "1998-01-01T06:00:00", "max": "1998-01-01T05:00:00"},  # same day: compared by day
        {"min": "1-URGENT", "max": "5-LOW"},  # text, as reopt stats writes for strings
        {"min": False, "max": True},
        {"min": "1992-01-01"},
        {"histogram": {"bounds": ["1992-01-01", "1995-06-17", "1998-08-02"], "counts": [5, 5]},
         "min": "1992-01-01", "max": "1998-08-02"},
        {},
    ],
)
def test_valid_statistics_load(stats: dict) -> None:
    loaded = Catalog.from_dict(column(**stats))
    got = loaded.tables["orders"].columns["o_date"]
    assert (got.min, got.max) == (stats.get("min"), stats.get("max"))


def test_value_kinds() -> None:
    assert [value_kind(v) for v in (1, 2.5, "1995-03-15", "x", True, None, "1995-13-01")] == [
        "number", "number", "date", "text", "boolean", None, None,
    ]
    assert iso_date("1995-03-15T06:00:00") == iso_date("1995-03-15")
    assert iso_date("yesterday") is None and iso_date(19950315) is None
    assert ColumnStats(min="1992-01-01").kind == "date"
    assert ColumnStats(histogram=Histogram((0.0, 1.0), (1.0,))).kind == "number"
    assert ColumnStats().kind is None


def test_tables_differing_only_in_case_are_an_error() -> None:
    doc = {"tables": {"Orders": {"rows": 1}, "orders": {"rows": 2}}}
    assert rejection(doc) == (
        "cat.json: tables 'Orders' and 'orders' differ only in case "
        "(table names are case-insensitive)"
    )


def test_columns_differing_only_in_case_are_an_error() -> None:
    doc = {"tables": {"orders": {"rows": 1, "columns": {"o_Date": {}, "o_date": {"min": 1}}}}}
    assert rejection(doc) == (
        "cat.json: table 'orders': columns 'o_Date' and 'o_date' differ only in case "
        "(column names are case-insensitive)"
    )


def test_names_in_another_case_still_load() -> None:
    doc = {"tables": {"ORDERS": {"rows": 1, "columns": {"O_DATE": {"min": "1992-01-01"}}}}}
    assert Catalog.from_dict(doc).tables["orders"].columns["o_date"].min == "1992-01-01"


def test_index_and_sort_columns_in_another_case_load() -> None:
    doc = {"tables": {"Orders": {"rows": 1, "columns": {"O_OrderKey": {}},
                                 "indexes": ["O_OrderKey"], "sorted_on": "O_ORDERKEY"}}}
    t = Catalog.from_dict(doc).tables["orders"]
    assert t.indexes == ("o_orderkey",) and t.sorted_on == "o_orderkey"


def test_histogram_bounds_may_repeat() -> None:
    # an equi-depth histogram of skewed data repeats a bound: non-decreasing is enough
    h = {"bounds": [0, 5, 5, 10], "counts": [40, 20, 40]}
    loaded = Catalog.from_dict(column(min=0, max=10, histogram=h))
    assert loaded.tables["orders"].columns["o_date"].histogram.bounds == (0, 5, 5, 10)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    p = tmp_path / "cat.json"
    p.write_text(json.dumps(column(min=10, max=5)))
    with pytest.raises(CatalogError) as info:
        Catalog.load(p)
    assert str(info.value) == f"{p}: column 'orders.o_date' min 10 is greater than max 5"


@pytest.mark.parametrize(("path", "kind"), [({"tables": {}}, "dict"), (3, "int")])
def test_load_rejects_what_is_not_a_path(path: object, kind: str) -> None:
    with pytest.raises(CatalogError) as info:
        Catalog.load(path)  # type: ignore[arg-type]
    hint = " (Catalog.from_dict builds a catalog from a dict)" if kind == "dict" else ""
    assert str(info.value) == (
        f"catalog: expected a path to a catalog JSON file, got {kind}{hint}"
    )


def test_builtin_tpch_catalog_round_trips() -> None:
    cat = tpch_catalog(1)
    assert Catalog.from_dict(cat.to_dict()).tables == cat.tables
    assert cat.tables["orders"].columns["o_orderdate"].kind == "date"


@pytest.mark.parametrize(
    ("width", "message"),
    [(0, "width must be > 0, got 0"), (-4, "width must be > 0, got -4"),
     ("8", "width must be a finite number, got '8'")],
)
def test_bad_width_is_rejected(width: object, message: str) -> None:
    assert rejection(column(width=width)) == f"{WHERE} {message}"


def test_width_loads_saves_and_defaults_by_kind() -> None:
    got = Catalog.from_dict(column(width=37.5)).tables["orders"].columns["o_date"]
    assert got.width == 37.5 and got.bytes == 37.5
    assert Catalog.from_dict(column(width=37.5)).to_dict()["tables"]["orders"]["columns"][
        "o_date"]["width"] == 37.5
    # without a width: Spark's DataType.defaultSize for the values' kind, 8 with no values
    assert [ColumnStats(min=v, max=v).bytes for v in (3, "1995-01-01", "x", True)] == \
        [8.0, 4.0, 20.0, 1.0]
    assert ColumnStats().bytes == 8.0
