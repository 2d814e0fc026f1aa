"""``reopt stats``: compute a catalog (row counts, distinct counts, min/max, histograms) with Spark.

Input paths name Parquet or CSV data; :func:`compute_catalog` returns a
:class:`~reopt.costmodel.catalog.Catalog` and :func:`main` writes it as the JSON documented in
:mod:`reopt.costmodel.catalog`.

Which tables a path stands for
------------------------------
* A **file** ``X.parquet`` / ``X.parq`` / ``X.pq`` / ``X.csv`` (also ``X.csv.gz``,
  ``X.csv.bz2``) is one table named ``x`` (the file name without its data suffix,
  lower-cased).  Any other suffix is an error.
* A **folder that looks like one data set** is one table named after the folder (data suffix
  stripped, lower-cased), read with all its data files.  It looks like one data set if

  - its name has a data suffix (``orders.parquet/``, as Spark writes them), or
  - it directly contains Spark-style part files (``part-*.parquet``, ``part-*.csv``), a
    ``_SUCCESS`` marker, or Hive partition folders (``year=2024/``).

  All its data files must have the same format (Parquet or CSV).
* **Any other folder** is a set of tables: one per child data file (named after the file) and
  one per child folder holding data (named after the child folder, read as one data set
  whatever its files are called).  Files without a data suffix, hidden entries and entries
  starting with ``_`` are ignored, so a folder may also hold e.g. the catalog JSON itself.

Two paths giving the same table name, an empty folder, a missing path, an unsupported suffix
or an unreadable file raise :class:`~reopt.costmodel.errors.CatalogError` naming the path.

What is computed
----------------
CSV is read with a header row and ``inferSchema=true``.  Table and column names are
lower-cased.  Per table, one aggregation pass (no data is collected to the driver) computes
the row count and per column:

* ``distinct``: exact ``countDistinct`` (nulls not counted).  Spark evaluates several exact
  distinct counts by expanding each row once per column, which is fine at the scale reopt
  targets (up to a few GB on one machine); omitted for an all-null column.
* ``min`` / ``max``: numbers as JSON numbers, strings and booleans as such, dates as ISO
  strings ``"YYYY-MM-DD"``, timestamps as ISO strings ``"YYYY-MM-DDTHH:MM:SS[.ffffff]"``
  in UTC (the catalog reads both at day granularity).  NaN and infinities are ignored.
* ``width``: bytes a value takes in a row as Spark estimates it (what the ``dist`` model's
  broadcast limit reads): a fixed-size type's ``defaultSize`` (8 for a long, double or
  decimal of up to 18 digits, 4 for an int or a date, 1 for a boolean), for text 12 + the
  mean UTF-8 length of its non-null values (omitted for an all-null text column).
* ``histogram`` (numeric, date and timestamp columns, restricted to ``histogram_columns`` if
  given): equi-depth, bounds at the ``0, 1/buckets, ..., 1`` quantiles computed by
  ``percentile_approx`` (relative rank error at most 1/10000; the first and last bounds are
  the exact min and max).  A value repeated over several quantiles (a frequent value) gets a
  zero-width bucket ``[v, v]`` holding exactly the rows equal to ``v``; other buckets are
  half-open ``[lo, hi)`` (the last one closed, and open at ``lo`` after a zero-width bucket
  at ``lo``).  The bucket counts are real row counts from a second aggregation pass, so they
  sum to the number of non-null values (the row count if the column has no nulls).

Strings, booleans and other types get no histogram; binary and nested columns are listed
without statistics (``{}``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reopt.cliargs import UsageParser, positive_int
from reopt.costmodel.catalog import TEXT_OVERHEAD, Catalog
from reopt.costmodel.errors import CatalogError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

# Data suffixes, longest first so ".csv.gz" wins over ".gz"-less matching.
_SUFFIXES: tuple[tuple[str, str], ...] = (
    (".csv.bz2", "csv"),
    (".csv.gz", "csv"),
    (".parquet", "parquet"),
    (".parq", "parquet"),
    (".pq", "parquet"),
    (".csv", "csv"),
)
_GLOBS = {"parquet": "*.{parquet,parq,pq}", "csv": "*.{csv,csv.gz,csv.bz2}"}
_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_UTC_EPOCH = _dt.datetime(1970, 1, 1)
# percentile_approx accuracy: relative rank error 1/_ACCURACY.
_ACCURACY = 10000


def _data_format(name: str) -> tuple[str, str] | None:
    """(format, name without data suffix) for a data file/folder name, else None."""
    low = name.lower()
    for suffix, fmt in _SUFFIXES:
        if low.endswith(suffix) and len(low) > len(suffix):
            return fmt, name[: -len(suffix)]
    return None


def _ignored(p: Path) -> bool:
    return p.name.startswith((".", "_"))


# -- discovering tables -------------------------------------------------------------------------
@dataclass
class _Source:
    name: str
    path: Path
    fmt: str
    is_dir: bool


def _is_dataset_folder(d: Path) -> bool:
    if _data_format(d.name) is not None:
        return True
    for child in d.iterdir():
        if child.name == "_SUCCESS":
            return True
        if child.is_dir() and not _ignored(child) and "=" in child.name:
            return True
        if child.is_file() and child.name.startswith("part-") and _data_format(child.name):
            return True
    return False


def _dataset_format(d: Path) -> str | None:
    """The one data format of the files under ``d`` (None if there are none)."""
    formats = set()
    for f in d.rglob("*"):
        rel = f.relative_to(d).parts
        if any(part.startswith((".", "_")) for part in rel) or not f.is_file():
            continue
        found = _data_format(f.name)
        if found is not None:
            formats.add(found[0])
    if len(formats) > 1:
        raise CatalogError(f"{d}: folder mixes Parquet and CSV files; use one format per table")
    return formats.pop() if formats else None


def _dataset_source(d: Path) -> _Source | None:
    fmt = _dataset_format(d)
    if fmt is None:
        return None
    found = _data_format(d.name)
    name = found[1] if found else d.name
    return _Source(name.lower(), d, fmt, True)


def _sources(path_str: str) -> list[_Source]:
    p = Path(path_str)
    if not p.exists():
        raise CatalogError(f"{path_str}: no such file or folder")
    if p.is_file():
        found = _data_format(p.name)
        if found is None:
            raise CatalogError(
                f"{path_str}: unsupported file type (expected .parquet, .parq, .pq or .csv)"
            )
        return [_Source(found[1].lower(), p, found[0], False)]
    if not p.is_dir():
        raise CatalogError(f"{path_str}: not a regular file or folder")
    try:
        if _is_dataset_folder(p):
            src = _dataset_source(p)
            if src is None:
                raise CatalogError(f"{path_str}: folder has no Parquet or CSV files")
            return [src]
        out: list[_Source] = []
        for child in sorted(p.iterdir()):
            if _ignored(child):
                continue
            if child.is_file():
                found = _data_format(child.name)
                if found is not None:
                    out.append(_Source(found[1].lower(), child, found[0], False))
            elif child.is_dir():
                src = _dataset_source(child)
                if src is not None:
                    out.append(src)
    except PermissionError as e:
        raise CatalogError(f"{e.filename or path_str}: permission denied") from None
    if not out:
        raise CatalogError(f"{path_str}: folder has no Parquet or CSV files")
    return out


def discover_tables(paths: list[str]) -> dict[str, Path]:
    """Table name -> path for the given paths, by the rule in the module docstring."""
    return {s.name: s.path for s in _discover(paths)}


def _discover(paths: list[str]) -> list[_Source]:
    if not paths:
        raise CatalogError("no input paths given")
    seen: dict[str, _Source] = {}
    for path_str in paths:
        for src in _sources(path_str):
            if src.name in seen:
                raise CatalogError(
                    f"{src.path}: table '{src.name}' is also given by {seen[src.name].path}"
                )
            seen[src.name] = src
    return list(seen.values())


# -- reading ------------------------------------------------------------------------------------
def _spark_errors() -> tuple[type[BaseException], ...]:
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return (PySparkException, Py4JError)


def _first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def _short(e: BaseException) -> str:
    """One line for a Spark error: the innermost JVM cause with a message (the most specific,
    e.g. "... is not a Parquet file"), else the first line of the Python exception."""
    msg = ""
    java = getattr(e, "java_exception", None)
    try:
        depth = 0
        while java is not None and depth < 20:
            msg = _first_line(java.getMessage()) or msg
            java, depth = java.getCause(), depth + 1
    except Exception:  # the JVM may be gone; fall back to the Python text
        pass
    msg = msg or _first_line(str(e)) or type(e).__name__
    return msg if len(msg) <= 300 else msg[:297] + "..."


def _read(spark: SparkSession, src: _Source) -> DataFrame:
    reader = spark.read
    if src.is_dir:
        reader = reader.option("pathGlobFilter", _GLOBS[src.fmt])
    try:
        if src.fmt == "parquet":
            df = reader.parquet(str(src.path))
        else:
            df = reader.csv(str(src.path), header=True, inferSchema=True)
    except _spark_errors() as e:
        raise CatalogError(f"{src.path}: cannot read {src.fmt} data: {_short(e)}") from None
    names = df.columns
    lowered = [n.lower() for n in names]
    firsts: dict[str, str] = {}
    for n, low in zip(names, lowered, strict=True):
        if low in firsts:
            raise CatalogError(
                f"{src.path}: columns '{firsts[low]}' and '{n}' are the same when lower-cased"
            )
        firsts[low] = n
    return df.toDF(*lowered)


# -- column kinds -------------------------------------------------------------------------------
def _col(name: str) -> Column:
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def _kind(dtype: Any) -> str:
    """'num' | 'float' | 'date' | 'ts' (histogram-capable), 'plain' (strings, booleans), 'none'."""
    from pyspark.sql import types as T

    if isinstance(dtype, (T.FloatType, T.DoubleType)):
        return "float"
    if isinstance(dtype, (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.DecimalType)):
        return "num"
    if isinstance(dtype, T.DateType):
        return "date"
    if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
        return "ts"
    if isinstance(dtype, (T.StringType, T.BooleanType, T.CharType, T.VarcharType)):
        return "plain"
    return "none"


def _type_size(dtype: Any) -> float | None:
    """Bytes a value of a fixed-size type takes in a row (Spark's ``DataType.defaultSize``,
    which PySpark does not expose); None for text (measured) and other types."""
    from pyspark.sql import types as T

    if isinstance(dtype, T.DecimalType):
        return 8.0 if dtype.precision <= 18 else 16.0
    sizes = ((T.BooleanType, 1.0), (T.ByteType, 1.0), (T.ShortType, 2.0),
             (T.IntegerType, 4.0), (T.DateType, 4.0), (T.FloatType, 4.0), (T.LongType, 8.0),
             (T.DoubleType, 8.0), (T.TimestampType, 8.0), (T.TimestampNTZType, 8.0))
    return next((size for t, size in sizes if isinstance(dtype, t)), None)


def _value_expr(name: str, kind: str) -> Column:
    """The column on the numeric axis used for min/max/quantiles (NaN/inf -> null)."""
    from pyspark.sql import functions as F

    c = _col(name)
    if kind == "float":
        return F.when(~F.isnan(c) & (F.abs(c) != F.lit(math.inf)), c)
    if kind == "date":
        return F.unix_date(c)
    if kind == "ts":
        return F.unix_micros(c.cast("timestamp"))
    return c


def _to_json(v: Any, kind: str, integral: bool) -> Any:
    """A value from the numeric axis (or a plain value) as it appears in the catalog JSON."""
    if v is None:
        return None
    if kind == "date":
        return _dt.date.fromordinal(_EPOCH_ORDINAL + int(v)).isoformat()
    if kind == "ts":
        return (_UTC_EPOCH + _dt.timedelta(microseconds=int(v))).isoformat()
    if isinstance(v, Decimal):
        return int(v) if integral else float(v)
    return v


# -- histograms ---------------------------------------------------------------------------------
def _bounds(quantiles: list[Any], lo: Any, hi: Any) -> list[Any]:
    """Histogram bounds from quantiles: ends set to the exact min/max, runs of one value
    collapsed to a single zero-width bucket ``[v, v]``."""
    qs = sorted(q for q in quantiles if q is not None)
    qs = [min(max(q, lo), hi) for q in qs]
    qs = [lo, *qs[1:-1], hi] if len(qs) >= 2 else [lo, hi]
    out: list[Any] = []
    for q in qs:
        if len(out) >= 2 and out[-1] == q and out[-2] == q:
            continue  # already a zero-width bucket at q
        out.append(q)
    return out


def _bucket_conditions(v: Column, bounds: list[Any]) -> list[Column]:
    """One condition per bucket; every non-null value satisfies exactly one."""
    conds = []
    last = len(bounds) - 2
    for i in range(len(bounds) - 1):
        lo, hi = bounds[i], bounds[i + 1]
        if lo == hi:
            conds.append(v == lo)
            continue
        lower = (v > lo) if i > 0 and bounds[i - 1] == lo else (v >= lo)
        upper = (v <= hi) if i == last else (v < hi)
        conds.append(lower & upper)
    return conds


# -- per-table statistics -----------------------------------------------------------------------
@dataclass
class _Plan:
    name: str
    kind: str
    integral: bool
    histogram: bool
    stats: dict[str, Any] = field(default_factory=dict)
    bounds: list[Any] | None = None
    size: float | None = None
    """A fixed-size type's bytes in a row (:func:`_type_size`); None for text, whose width is
    measured (12 + its mean UTF-8 length, Spark's row-size estimate), and other types."""
    text: bool = False


def _table_stats(
    src: _Source, df: DataFrame, plans: list[_Plan], buckets: int
) -> tuple[int, dict[str, Any]]:
    from pyspark.sql import functions as F

    probs = [i / buckets for i in range(buckets + 1)]
    aggs = [F.count(F.lit(1)).alias("rows")]
    for i, p in enumerate(plans):
        if p.kind == "none":
            continue
        v = _value_expr(p.name, p.kind)
        aggs += [
            F.countDistinct(_col(p.name)).alias(f"d{i}"),
            F.min(v).alias(f"lo{i}"),
            F.max(v).alias(f"hi{i}"),
        ]
        if p.size is None and p.text:
            aggs.append(F.avg(F.octet_length(_col(p.name))).alias(f"w{i}"))
        if p.histogram:
            aggs.append(F.percentile_approx(v, probs, _ACCURACY).alias(f"q{i}"))
    try:
        row = df.agg(*aggs).collect()[0].asDict()
        rows = int(row["rows"])
        count_aggs = []
        for i, p in enumerate(plans):
            if p.kind == "none":
                continue
            lo, hi = row[f"lo{i}"], row[f"hi{i}"]
            if row[f"d{i}"]:
                p.stats["distinct"] = int(row[f"d{i}"])
            if p.size is not None:
                p.stats["width"] = p.size
            elif p.text and row[f"w{i}"] is not None:  # (None: every value is NULL)
                p.stats["width"] = round(TEXT_OVERHEAD + float(row[f"w{i}"]), 2)
            if lo is not None:
                p.stats["min"] = _to_json(lo, p.kind, p.integral)
                p.stats["max"] = _to_json(hi, p.kind, p.integral)
            if p.histogram and lo is not None and row[f"q{i}"]:
                p.bounds = _bounds(list(row[f"q{i}"]), lo, hi)
                v = _value_expr(p.name, p.kind)
                count_aggs += [
                    F.count(F.when(c, 1)).alias(f"h{i}_{j}")
                    for j, c in enumerate(_bucket_conditions(v, p.bounds))
                ]
        counts = df.agg(*count_aggs).collect()[0].asDict() if count_aggs else {}
    except _spark_errors() as e:
        raise CatalogError(f"{src.path}: cannot read {src.fmt} data: {_short(e)}") from None
    columns: dict[str, Any] = {}
    for i, p in enumerate(plans):
        if p.bounds is not None:
            p.stats["histogram"] = {
                "bounds": [_to_json(b, p.kind, p.integral) for b in p.bounds],
                "counts": [int(counts[f"h{i}_{j}"]) for j in range(len(p.bounds) - 1)],
            }
        columns[p.name] = p.stats
    return rows, columns


def _wants_histogram(table: str, column: str, wanted: set[str] | None) -> bool:
    return wanted is None or column in wanted or f"{table}.{column}" in wanted


def compute_catalog_dict(
    paths: list[str],
    spark: SparkSession,
    buckets: int = 20,
    histogram_columns: set[str] | None = None,
    sorted_on: dict | None = None,
) -> dict[str, Any]:
    """Like :func:`compute_catalog`, but the catalog JSON object (dates as ISO strings)."""
    from pyspark.sql import types as T

    if buckets < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    wanted = None
    if histogram_columns is not None:
        wanted = {h.strip().lower() for h in histogram_columns} - {""}
    sources = _discover(paths)

    # Resolve every schema first so name errors surface before any statistics job runs.
    frames: list[tuple[_Source, DataFrame, list[_Plan]]] = []
    used: set[str] = set()
    for src in sources:
        df = _read(spark, src)
        plans = []
        for f in df.schema.fields:
            kind = _kind(f.dataType)
            hist = kind in ("num", "float", "date", "ts") and _wants_histogram(
                src.name, f.name, wanted
            )
            if hist and wanted is not None:
                used |= {f.name, f"{src.name}.{f.name}"} & wanted
            integral = kind == "num" and getattr(f.dataType, "scale", 0) == 0
            text = isinstance(f.dataType, (T.StringType, T.CharType, T.VarcharType))
            plans.append(_Plan(f.name, kind, integral, hist, size=_type_size(f.dataType),
                               text=text))
        frames.append((src, df, plans))
    if wanted is not None:
        for h in sorted(wanted - used):
            raise CatalogError(
                f"histogram column '{h}' names no numeric, date or timestamp column of "
                f"the tables {', '.join(s.name for s in sources)}"
            )
    sorted_map = {str(k).lower(): str(v).lower() for k, v in (sorted_on or {}).items()}
    for t, c in sorted_map.items():
        match = [plans for s, _, plans in frames if s.name == t]
        if not match:
            raise CatalogError(f"sorted_on: unknown table '{t}'")
        if c not in {p.name for p in match[0]}:
            raise CatalogError(f"sorted_on: table '{t}' has no column '{c}'")

    tables: dict[str, Any] = {}
    for src, df, plans in frames:
        rows, columns = _table_stats(src, df, plans, buckets)
        t: dict[str, Any] = {"rows": rows}
        if columns:
            t["columns"] = columns
        if src.name in sorted_map:
            t["sorted_on"] = sorted_map[src.name]
        tables[src.name] = t
    return {"tables": tables}


def compute_catalog(
    paths: list[str],
    spark: SparkSession,
    buckets: int = 20,
    histogram_columns: set[str] | None = None,
    sorted_on: dict | None = None,
) -> Catalog:
    """Statistics of the tables under ``paths``, computed with ``spark``.

    ``paths`` are files or folders (see the module docstring for which tables they stand
    for); ``buckets`` is the number of equi-depth histogram buckets; ``histogram_columns``
    restricts histograms to the given ``"table.column"`` or ``"column"`` names (each must
    name at least one numeric, date or timestamp column; an empty set means no histograms,
    None means all such columns); ``sorted_on`` maps table names to
    the column the data is sorted on (recorded as declared, not checked).

    The result is exactly what loading the written JSON gives (dates become day numbers in
    histogram bounds).  Raises :class:`CatalogError` on bad input, naming the path.
    """
    data = compute_catalog_dict(paths, spark, buckets, histogram_columns, sorted_on)
    return Catalog.from_dict(data, source="reopt stats")


# -- command line -------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    ap = UsageParser(
        prog="reopt stats",
        description="Compute a statistics catalog (JSON) from Parquet/CSV data with Spark.",
    )
    ap.add_argument("paths", nargs="+", metavar="PATH", help="data file or folder")
    ap.add_argument("-o", "--output", required=True, metavar="CATALOG.json")
    ap.add_argument(
        "--buckets", type=positive_int, default=20, help="histogram buckets (default 20)"
    )
    ap.add_argument(
        "--histogram-columns",
        metavar="COLS",
        help="comma-separated 'table.column' or 'column' names to build histograms for "
        "(default: every numeric, date and timestamp column; '' for none)",
    )
    ap.add_argument(
        "--master", metavar="URL", help="Spark master (default $REOPT_SPARK_MASTER or local[*])"
    )
    return ap


def main(argv: list[str]) -> int:
    """``reopt stats PATH... -o catalog.json [--buckets N] [--histogram-columns a,b]
    [--master URL]``: write the catalog, print one line per table, return 0.

    Bad input raises :class:`~reopt.costmodel.errors.ReoptError` (the CLI prints it as one
    line); argument errors exit via argparse.  The Spark session is left running (it may be
    shared with the caller) and ends with the process.
    """
    from reopt.spark import get_spark

    args = _parser().parse_args(argv)
    hist = None
    if args.histogram_columns is not None:
        hist = {h.strip() for h in args.histogram_columns.split(",") if h.strip()}
    out = Path(args.output)
    _discover(args.paths)  # bad paths and a missing output directory fail before Spark starts
    if not out.resolve().parent.is_dir():
        raise CatalogError(f"{out}: cannot write catalog: directory {out.parent} does not exist")
    spark = get_spark(args.master)
    data = compute_catalog_dict(args.paths, spark, args.buckets, hist)
    Catalog.from_dict(data, source="reopt stats")  # the file we write must load
    try:
        out.write_text(json.dumps(data, indent=2) + "\n")
    except OSError as e:
        raise CatalogError(f"{out}: cannot write catalog: {e.strerror}") from None
    for name, t in data["tables"].items():
        cols = t.get("columns", {})
        nh = sum(1 for c in cols.values() if "histogram" in c)
        print(f"{name}: {t['rows']} rows, {len(cols)} columns, {nh} histograms")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    import sys

    from reopt.costmodel.errors import ReoptError

    try:
        sys.exit(main(sys.argv[1:]))
    except ReoptError as e:
        print(f"reopt: {e}", file=sys.stderr)
        sys.exit(2)
