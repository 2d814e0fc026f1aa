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
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reopt.costmodel.errors import CatalogError


def as_number(v: Any) -> float | None:
    """A value on a numeric axis for range interpolation: numbers, and ISO dates as day numbers."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, str):
        try:
            return float(_dt.date.fromisoformat(v.strip()[:10]).toordinal())
        except ValueError:
            try:
                return float(v)
            except ValueError:
                return None
    return None


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
                acc += c * (x - lo) / (hi - lo)
            break
        return min(1.0, max(0.0, acc / total))


@dataclass(frozen=True)
class ColumnStats:
    distinct: float | None = None
    min: Any = None
    max: Any = None
    histogram: Histogram | None = None


@dataclass(frozen=True)
class TableStats:
    rows: float
    columns: dict[str, ColumnStats] = field(default_factory=dict)
    indexes: tuple[str, ...] = ()
    sorted_on: str | None = None


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
        for name, t in data["tables"].items():
            tables[name.lower()] = _parse_table(source, name, t)
        return Catalog(tables, source)

    @staticmethod
    def load(path: str | Path) -> Catalog:
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as e:
            raise CatalogError(f"{p}: cannot read catalog: {e.strerror}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise CatalogError(f"{p}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
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
            out[name] = d
        return {"tables": out}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")


def _positive(source: str, where: str, v: Any, *, allow_zero: bool = True) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise CatalogError(f"{source}: {where} must be a finite number, got {v!r}")
    if v < 0 or (v == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise CatalogError(f"{source}: {where} must be {bound}, got {v!r}")
    return float(v)


def _parse_table(source: str, name: str, t: Any) -> TableStats:
    where = f"table '{name}'"
    if not isinstance(t, dict):
        raise CatalogError(f"{source}: {where} must be an object")
    if "rows" not in t:
        raise CatalogError(f"{source}: {where} has no 'rows'")
    unknown = set(t) - {"rows", "columns", "indexes", "sorted_on"}
    if unknown:
        raise CatalogError(f"{source}: {where} has unknown key '{sorted(unknown)[0]}'")
    rows = _positive(source, f"{where} rows", t["rows"])
    cols_in = t.get("columns", {})
    if not isinstance(cols_in, dict):
        raise CatalogError(f"{source}: {where} 'columns' must be an object")
    columns = {c.lower(): _parse_column(source, name, c, s) for c, s in cols_in.items()}
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
    return TableStats(rows, columns, tuple(indexes), sorted_on)


def _parse_column(source: str, table: str, name: str, s: Any) -> ColumnStats:
    where = f"column '{table}.{name}'"
    if not isinstance(s, dict):
        raise CatalogError(f"{source}: {where} must be an object")
    unknown = set(s) - {"distinct", "min", "max", "histogram"}
    if unknown:
        raise CatalogError(f"{source}: {where} has unknown key '{sorted(unknown)[0]}'")
    distinct = None
    if s.get("distinct") is not None:
        distinct = _positive(source, f"{where} distinct", s["distinct"], allow_zero=False)
    hist = None
    if s.get("histogram") is not None:
        h = s["histogram"]
        if not isinstance(h, dict) or not isinstance(h.get("bounds"), list) or not isinstance(
            h.get("counts"), list
        ):
            raise CatalogError(f"{source}: {where} histogram needs 'bounds' and 'counts' lists")
        bounds = [as_number(b) for b in h["bounds"]]
        if any(b is None for b in bounds):
            raise CatalogError(f"{source}: {where} histogram bounds must be numbers or dates")
        counts = [_positive(source, f"{where} histogram count", c) for c in h["counts"]]
        if len(bounds) != len(counts) + 1 or not counts:
            raise CatalogError(
                f"{source}: {where} histogram needs len(bounds) == len(counts) + 1 "
                f"(got {len(bounds)} bounds, {len(counts)} counts)"
            )
        if any(b2 < b1 for b1, b2 in zip(bounds, bounds[1:], strict=False)):
            raise CatalogError(f"{source}: {where} histogram bounds must be non-decreasing")
        hist = Histogram(tuple(bounds), tuple(counts), tuple(h["bounds"]))  # type: ignore[arg-type]
    return ColumnStats(distinct, s.get("min"), s.get("max"), hist)
