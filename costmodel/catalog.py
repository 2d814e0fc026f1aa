"""Catalog: per-table statistics loaded from (and written to) the documented JSON format.

::

    {"tables": {"orders": {"rows": 1500000,
                           "columns": {"o_custkey": {"distinct": 99996, "min": 1, "max": 149999,
                                                     "histogram": {"bounds": [...],
                                                                   "counts": [...]}}},
                           "indexes": ["o_orderkey"],
                           "sorted_on": "o_orderkey"}}}

Only ``rows`` is required. ``columns`` is the table's schema as far as queries are concerned: a
query may reference exactly the listed columns (a column listed as ``{}`` has no statistics).
Histograms are equi-depth: ``bounds`` has one more entry than ``counts``; bucket ``i`` holds
``counts[i]`` rows with values in ``[bounds[i], bounds[i+1]]``. Values may be numbers or ISO dates
(``"1995-03-15"``), which estimation turns into day numbers.

Statistics are checked on load, because a wrong one does not fail later: it only makes every
estimate that uses it silently wrong. ``min``/``max`` are numbers, ISO dates or timestamps (read
at day granularity), or text and booleans (``reopt stats`` writes them for string and boolean
columns; estimation does not use them); both of one kind, ``min <= max``. A string that starts
like a date (``1995-13-45``, ``1995-1-5``) must be a valid ISO date. Names are case-insensitive,
so two tables (or two columns of a table) whose names differ only in case are an error.
Counts (rows, distinct, histogram counts) are finite, ``>= 0`` and at most
:data:`~reopt.costmodel.numeric.MAX_ROWS`; numbers no float holds are errors naming where
(:func:`~reopt.costmodel.numeric.load_json`). ``"histogram": null`` and ``{}`` both mean none.
Files are UTF-8 (a leading byte-order mark is dropped, :func:`decode_utf8`). A column's optional
``width`` (``> 0``) is the average bytes a value takes in a row as Spark holds it
(:attr:`ColumnStats.width`); only the ``dist`` model's broadcast limit reads it.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Literal

from reopt.costmodel.errors import CatalogError
from reopt.costmodel.numeric import (
    MAX_ROWS,
    JsonDepthError,
    NumberError,
    Unrepresentable,
    compact,
    finite_value,
    is_finite_number,
    load_json,
    parse_number,
    shown,
)

_ISO_DATE = re.compile(
    r"\d{4}-\d{2}-\d{2}"
    r"(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}(?::?\d{2})?)?)?"
)
"""An ISO date, or an ISO timestamp (``reopt stats`` writes them; read at day granularity)."""
_DATE_LIKE = re.compile(r"\s*\d{4}-\d{1,2}-\d{1,2}(?!\d)")
"""A string that starts like a date: meant as one, so it must be a valid ISO date."""

LITERALS_CACHED = 4096
"""How many strings :func:`iso_date` and :func:`as_number` remember their answer for (a
query's filter literals, a catalog's date statistics)."""

ValueKind = Literal["number", "date", "text", "boolean"]
"""What a statistic value holds."""


def iso_date(v: Any) -> _dt.date | None:
    """The day of an ISO date (``1995-03-15``) or timestamp (``1995-03-15T06:00:00``), else None.

    Strict on purpose (unlike :func:`as_number`, which reads the first ten characters): it
    decides whether a value *is* a date, and ``1995-13-45`` or ``yesterday`` must not be one.
    """
    return _text_date(v) if isinstance(v, str) else None


@lru_cache(maxsize=LITERALS_CACHED)
def _text_date(text: str) -> _dt.date | None:
    """:func:`iso_date` of a string. Memoized: a pure function of an immutable string, and
    the estimator of every plan space of a query checks the same filter literals."""
    if not _ISO_DATE.fullmatch(text.strip()):
        return None
    try:
        return _dt.datetime.fromisoformat(text.strip()).date()
    except ValueError:
        return None


def value_kind(v: Any) -> ValueKind | None:
    """The kind of a ``min``/``max``/histogram value; None when it is none of them (a list, an
    infinite number, a string that starts like a date but is not a valid one)."""
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number" if is_finite_number(v) else None
    if isinstance(v, str):
        if iso_date(v) is not None:
            return "date"
        return None if _DATE_LIKE.match(v) else "text"
    return None


def as_number(v: Any) -> float | None:
    """A value on a numeric axis for range interpolation: finite numbers, numeric strings in
    strict syntax (:func:`~reopt.costmodel.numeric.parse_number`: ``'nan'``, ``'1_000'`` are
    not numbers) and ISO dates as day numbers."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v) if is_finite_number(v) else None
    if isinstance(v, str):
        return _text_number(v)
    return None


@lru_cache(maxsize=LITERALS_CACHED)
def _text_number(text: str) -> float | None:
    """:func:`as_number` of a string. Memoized: a pure function of an immutable string, and
    the estimator of every plan space of a query reads the same filter literals."""
    try:
        return float(_dt.date.fromisoformat(text.strip()[:10]).toordinal())
    except ValueError:
        try:
            return parse_number(text)
        except NumberError:
            return None


def share(x: float, lo: float, hi: float) -> float:
    """``(x - lo) / (hi - lo)`` for ``lo < hi``, never NaN: with bounds near the float range's
    ends the differences overflow (``1e308 - -1e308``), so they are taken on halved values."""
    span = hi - lo
    if math.isfinite(span) and math.isfinite(x - lo):
        return (x - lo) / span
    return (x / 2 - lo / 2) / (hi / 2 - lo / 2)


@dataclass(frozen=True)
class Histogram:
    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    written: tuple[Any, ...] | None = field(default=None, compare=False)
    """The bounds as written in the catalog (ISO dates stay dates when saved again)."""

    def fraction_below(self, x: float) -> float:
        """Fraction of rows with value < x, interpolating linearly inside a bucket."""
        total = sum(self.counts)
        if total <= 0:
            return 0.0
        if x <= self.bounds[0]:
            return 0.0
        if x >= self.bounds[-1]:
            return 1.0
        acc = 0.0
        for i, c in enumerate(self.counts):
            lo, hi = self.bounds[i], self.bounds[i + 1]
            if x >= hi:
                acc += c
                continue
            if hi > lo:
                acc += c * share(x, lo, hi)
            break
        return min(1.0, max(0.0, acc / total))


@dataclass(frozen=True)
class ColumnStats:
    distinct: float | None = None
    min: Any = None
    max: Any = None
    histogram: Histogram | None = None
    width: float | None = None
    """Average bytes a value of the column takes in a row as Spark holds it (a fixed-size
    type's size; text: 12 bytes of offset and length plus its average UTF-8 length), None
    when the catalog does not say: :meth:`bytes` then guesses from the values' kind."""

    @property
    def bytes(self) -> float:
        """:attr:`width`, or Spark's own default size for the values' kind (its
        ``DataType.defaultSize``: 8 for a number, 4 for a date, 1 for a boolean, 20 for text),
        8 when the column has no values to tell. What the ``dist`` model's broadcast limit
        reads (:func:`reopt.costmodel.widths.row_bytes`)."""
        if self.width is not None:
            return self.width
        return _DEFAULT_BYTES.get(self.kind, 8.0)

    @cached_property
    def numeric_range(self) -> tuple[float | None, float | None]:
        """``min`` and ``max`` on the numeric axis of range estimates (:func:`as_number`;
        cached: parsing a date is most of a range estimate, and every estimator asks)."""
        return as_number(self.min), as_number(self.max)

    @cached_property
    def kind(self) -> ValueKind | None:
        """What the column's statistics hold (``"date"``, ``"number"``, ...), None without
        values. Estimation checks literals against it: a date column compared with
        ``'yesterday'`` is an error, not a default selectivity. (Cached: the statistics are
        immutable, and every estimator of a query with a filter on the column asks.)"""
        written = (self.histogram.written or self.histogram.bounds) if self.histogram else ()
        for v in (self.min, self.max, *written):
            kind = value_kind(v)
            if kind is not None:
                return kind
        return None


TEXT_OVERHEAD = 12.0
"""Bytes a text value takes in a row besides its characters: Spark's row-size estimate
(``EstimationUtils.getSizePerRow``) adds 8 + 4 to a string column's mean length."""
_DEFAULT_BYTES = {"number": 8.0, "date": 4.0, "boolean": 1.0, "text": 20.0}
"""A value's bytes by kind when the catalog gives no ``width`` (:meth:`ColumnStats.bytes`)."""


@dataclass(frozen=True)
class TableStats:
    rows: float
    columns: dict[str, ColumnStats] = field(default_factory=dict)
    indexes: tuple[str, ...] = ()
    sorted_on: str | None = None
    rate: float | None = None
    """A stream's arrival rate in tuples per second (None: a stored table). A stream's
    ``rows`` are the tuples its window holds, ``rate × window`` (``rate`` when it has no
    window here and every query gives one): what a join column without a distinct count
    takes as its distinct count."""
    window: float | None = None
    """A stream's default time-based sliding window in seconds (a query's
    ``[RANGE n SECONDS]`` overrides it)."""

    @property
    def is_stream(self) -> bool:
        return self.rate is not None


@dataclass(frozen=True)
class Catalog:
    tables: dict[str, TableStats]
    source: str = "<catalog>"

    def table(self, name: str) -> TableStats:
        try:
            return self.tables[name]
        except KeyError:
            raise CatalogError(f"{self.source}: unknown table '{name}'") from None

    # -- JSON ---------------------------------------------------------------------------------
    @staticmethod
    def from_dict(data: Any, source: str = "<catalog>") -> Catalog:
        if not isinstance(data, dict) or not isinstance(data.get("tables"), dict):
            raise CatalogError(f"{source}: expected an object with a 'tables' object")
        tables: dict[str, TableStats] = {}
        written: dict[str, str] = {}
        for name, t in data["tables"].items():
            key = _name(source, "table", name).lower()
            if key in written:
                raise CatalogError(
                    f"{source}: tables '{written[key]}' and '{name}' differ only in case "
                    "(table names are case-insensitive)"
                )
            written[key] = name
            tables[key] = _parse_table(source, name, t)
        return Catalog(tables, source)

    @staticmethod
    def load(path: str | os.PathLike[str]) -> Catalog:
        """The catalog in JSON file ``path``. Anything but a path (a dict given where a file is
        expected, ``Optimizer(q, {...})``) is a one-line error, not a TypeError from pathlib."""
        if not isinstance(path, (str, os.PathLike)):
            hint = ""
            if isinstance(path, dict):
                hint = " (Catalog.from_dict builds a catalog from a dict)"
            raise CatalogError(
                f"catalog: expected a path to a catalog JSON file, got {type(path).__name__}{hint}"
            )
        p = Path(path)
        try:
            raw = p.read_bytes()
        except OSError as e:
            raise CatalogError(f"{p}: cannot read catalog: {e.strerror}") from None
        text = decode_utf8(raw, f"{p}: cannot read catalog", CatalogError)
        try:
            data = load_json(text)
        except json.JSONDecodeError as e:
            raise CatalogError(f"{p}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
        except JsonDepthError:
            raise CatalogError(f"{p}: invalid JSON: nested too deeply") from None
        return Catalog.from_dict(data, str(p))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, t in self.tables.items():
            d: dict[str, Any] = {"rows": t.rows}
            if t.columns:
                cols: dict[str, Any] = {}
                for cname, c in t.columns.items():
                    cd: dict[str, Any] = {}
                    if c.distinct is not None:
                        cd["distinct"] = c.distinct
                    if c.min is not None:
                        cd["min"] = c.min
                    if c.max is not None:
                        cd["max"] = c.max
                    if c.width is not None:
                        cd["width"] = c.width
                    if c.histogram is not None:
                        cd["histogram"] = {
                            "bounds": list(c.histogram.written or c.histogram.bounds),
                            "counts": list(c.histogram.counts),
                        }
                    cols[cname] = cd
                d["columns"] = cols
            if t.indexes:
                d["indexes"] = list(t.indexes)
            if t.sorted_on:
                d["sorted_on"] = t.sorted_on
            if t.is_stream:
                del d["rows"]  # derived: rate × window
                d["rate"] = t.rate
                if t.window is not None:
                    d["window"] = t.window
            out[name] = d
        return {"tables": out}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n")


def decode_utf8(raw: bytes, what: str, error: type[Exception]) -> str:
    """A file's bytes as UTF-8 text, a leading byte-order mark dropped (editors on Windows write
    one). Anything else is ``error`` with one line starting ``what``: ``not UTF-8 text``, and
    for UTF-16 (a byte-order mark and text that decodes as such) what to do about it."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) and _decodes(raw, "utf-16"):
        raise error(f"{what}: not UTF-8 text but UTF-16; save it as UTF-8")
    raise error(f"{what}: not UTF-8 text")


def _decodes(raw: bytes, encoding: str) -> bool:
    try:
        raw.decode(encoding)
    except UnicodeDecodeError:
        return False
    return True


def _positive(source: str, where: str, v: Any, *, allow_zero: bool = True) -> float:
    """A count (rows, distinct values, a histogram bucket): a JSON number, finite, at least 0
    (above 0 unless ``allow_zero``) and at most :data:`~reopt.costmodel.numeric.MAX_ROWS`."""
    if not isinstance(v, (int, float, Unrepresentable)) or isinstance(v, bool):
        raise CatalogError(f"{source}: {where} must be a finite number, got {shown(v)}")
    try:
        x = finite_value(v)
    except NumberError as e:
        raise CatalogError(f"{source}: {where} must be a finite number: {e}") from None
    if x < 0 or (x == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise CatalogError(f"{source}: {where} must be {bound}, got {shown(v)}")
    if x > MAX_ROWS:
        raise CatalogError(
            f"{source}: {where} is {compact(x)}, above the limit of {compact(MAX_ROWS)} rows "
            "(estimates and costs must stay finite)"
        )
    return x


def _name(source: str, what: str, name: Any) -> str:
    """A table or column name: a string (JSON keys are; a dict built in Python may not be)."""
    if not isinstance(name, str):
        raise CatalogError(f"{source}: {what} names must be strings, got {shown(name)}")
    return name


def _parse_table(source: str, name: str, t: Any) -> TableStats:
    where = f"table '{name}'"
    if not isinstance(t, dict):
        raise CatalogError(f"{source}: {where} must be an object")
    unknown = set(t) - {"rows", "columns", "indexes", "sorted_on", "rate", "window"}
    if unknown:
        raise CatalogError(f"{source}: {where} has unknown key '{sorted(unknown)[0]}'")
    rate, window = _stream(source, where, t)
    if rate is None and "rows" not in t:
        raise CatalogError(f"{source}: {where} has no 'rows'")
    if rate is not None:
        rows = min(rate * (window or 1.0), MAX_ROWS)
    else:
        rows = _positive(source, f"{where} rows", t["rows"])
    cols_in = t.get("columns", {})
    if not isinstance(cols_in, dict):
        raise CatalogError(f"{source}: {where} 'columns' must be an object")
    columns: dict[str, ColumnStats] = {}
    written: dict[str, str] = {}
    for c, s in cols_in.items():
        if _name(source, f"{where} column", c).lower() in written:
            raise CatalogError(
                f"{source}: {where}: columns '{written[c.lower()]}' and '{c}' differ only in "
                "case (column names are case-insensitive)"
            )
        written[c.lower()] = c
        columns[c.lower()] = _parse_column(source, name, c, s)
    indexes = t.get("indexes", [])
    if not isinstance(indexes, list) or not all(isinstance(i, str) for i in indexes):
        raise CatalogError(f"{source}: {where} 'indexes' must be a list of column names")
    indexes = [i.lower() for i in indexes]
    sorted_on = t.get("sorted_on")
    if sorted_on is not None and not isinstance(sorted_on, str):
        raise CatalogError(f"{source}: {where} 'sorted_on' must be a column name")
    sorted_on = sorted_on.lower() if sorted_on else None
    for c in [*indexes, *([sorted_on] if sorted_on else [])]:
        if columns and c not in columns:
            raise CatalogError(f"{source}: {where}: index/sort column '{c}' is not a column")
    return TableStats(rows, columns, tuple(indexes), sorted_on, rate, window)


def _stream(source: str, where: str, t: dict) -> tuple[float | None, float | None]:
    """A stream's ``rate`` (tuples/s, > 0) and default ``window`` (seconds, > 0): a table
    entry with a ``rate`` is a stream, and has no ``rows`` (they are ``rate × window``); a
    ``window`` without a ``rate`` is a window on a table, an error."""
    if "rate" not in t:
        if "window" in t:
            raise CatalogError(f"{source}: {where} has a 'window' but no 'rate': only a stream "
                               "(an entry with a 'rate') has a window")
        return None, None
    if "rows" in t:
        raise CatalogError(f"{source}: {where} is a stream (it has a 'rate'); its rows are "
                           "rate × window, so it takes no 'rows'")
    rate = _positive(source, f"{where} rate", t["rate"], allow_zero=False)
    window = None
    if "window" in t:
        window = _positive(source, f"{where} window", t["window"], allow_zero=False)
        if rate * window > MAX_ROWS:
            raise CatalogError(f"{source}: {where}: rate × window is above the limit of "
                               f"{compact(MAX_ROWS)} rows")
    return rate, window


def _parse_column(source: str, table: str, name: str, s: Any) -> ColumnStats:
    where = f"column '{table}.{name}'"
    if not isinstance(s, dict):
        raise CatalogError(f"{source}: {where} must be an object")
    unknown = set(s) - {"distinct", "min", "max", "histogram", "width"}
    if unknown:
        raise CatalogError(f"{source}: {where} has unknown key '{sorted(unknown)[0]}'")
    distinct = None
    if s.get("distinct") is not None:
        distinct = _positive(source, f"{where} distinct", s["distinct"], allow_zero=False)
    lo, hi = s.get("min"), s.get("max")
    kind = _check_min_max(source, where, lo, hi)
    hist = None
    if s.get("histogram") not in (None, {}):  # null and {} alike: no histogram
        hist = _parse_histogram(source, where, s["histogram"], kind)
    width = None
    if s.get("width") is not None:
        width = _positive(source, f"{where} width", s["width"], allow_zero=False)
    return ColumnStats(distinct, lo, hi, hist, width)


_A_KIND = {"number": "a number", "date": "a date", "text": "text", "boolean": "a boolean"}
_KINDS = {"number": "numbers", "date": "dates", "text": "text", "boolean": "booleans"}


def _value_kind(source: str, where: str, what: str, v: Any) -> ValueKind:
    kind = value_kind(v)
    if kind is not None:
        return kind
    if isinstance(v, str):
        raise CatalogError(
            f"{source}: {where} {what} {shown(v)} is not a valid ISO date (YYYY-MM-DD)"
        )
    if isinstance(v, Unrepresentable):  # 1e400, 400 digits, NaN in the JSON text
        raise CatalogError(f"{source}: {where} {what} must be a finite number: {v.reason()}")
    raise CatalogError(
        f"{source}: {where} {what} must be a number, an ISO date, text or a boolean, "
        f"got {shown(v)}"
    )


def _check_min_max(source: str, where: str, lo: Any, hi: Any) -> ValueKind | None:
    """The kind of the column's ``min``/``max``; an error unless they are of one kind and
    ``min <= max`` (dates compared by day, as estimation reads them)."""
    kinds = {
        what: _value_kind(source, where, what, v)
        for what, v in (("min", lo), ("max", hi))
        if v is not None
    }
    if len(set(kinds.values())) > 1:
        raise CatalogError(
            f"{source}: {where} min {shown(lo)} is {_A_KIND[kinds['min']]} but max {shown(hi)} "
            f"is {_A_KIND[kinds['max']]} (min and max must be of one kind)"
        )
    kind = next(iter(kinds.values()), None)
    if len(kinds) == 2:
        key = as_number if kind in ("number", "date") else (lambda v: v)
        if key(lo) > key(hi):
            raise CatalogError(
                f"{source}: {where} min {shown(lo)} is greater than max {shown(hi)}"
            )
    return kind


def _parse_histogram(source: str, where: str, h: Any, kind: ValueKind | None) -> Histogram:
    """An equi-depth histogram whose bounds are numbers or dates, of the column's ``kind``."""
    if not isinstance(h, dict) or not isinstance(h.get("bounds"), list) or not isinstance(
        h.get("counts"), list
    ):
        raise CatalogError(f"{source}: {where} histogram needs 'bounds' and 'counts' lists")
    kinds = [value_kind(b) for b in h["bounds"]]
    if any(k not in ("number", "date") for k in kinds):
        raise CatalogError(f"{source}: {where} histogram bounds must be numbers or dates")
    if len(set(kinds)) > 1:
        raise CatalogError(f"{source}: {where} histogram bounds mix numbers and dates")
    if kinds and kind is not None and kinds[0] != kind:
        raise CatalogError(
            f"{source}: {where} histogram bounds are {_KINDS[kinds[0]]} but min/max are "
            f"{_KINDS[kind]}"
        )
    bounds = [as_number(b) for b in h["bounds"]]
    counts = [_positive(source, f"{where} histogram count", c) for c in h["counts"]]
    if len(bounds) != len(counts) + 1 or not counts:
        raise CatalogError(
            f"{source}: {where} histogram needs len(bounds) == len(counts) + 1 "
            f"(got {len(bounds)} bounds, {len(counts)} counts)"
        )
    if any(b2 < b1 for b1, b2 in zip(bounds, bounds[1:], strict=False)):
        raise CatalogError(f"{source}: {where} histogram bounds must be non-decreasing")
    return Histogram(tuple(bounds), tuple(counts), tuple(h["bounds"]))  # type: ignore[arg-type]
