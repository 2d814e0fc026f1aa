"""A split run's answer kept in Spark: the splits' partial answers combined and digested there.

``reopt run`` executes a query split by split (:mod:`reopt.adaptive`). An answer can be far
larger than the driver: Q8Join at SF 1 groups about 24 million joined rows into about as many
groups, some 3 million per split. So no split's answer is collected: each is kept in Spark
(:func:`keep`: a local checkpoint on the executors' disks, filled by the query's own run, so
its observed counts come with it), the partials are combined by Spark (:func:`combine`: the
rules of :mod:`reopt.combine` as DataFrame operations), and only the combined answer's row
count, digest (:func:`digest`) and first rows reach the driver (:func:`settle`).

**The digest of an answer kept in Spark** (:func:`digest`) is order-independent, computed in
one pass, and says "same rows, as a multiset":

* each value becomes a canonical text: NULL (and a floating-point NaN) ``\\N``; a float or
  double ``0`` for zero, else its value to :data:`reopt.execute.DIGITS` significant digits in
  scientific notation (``%.11e``: a sum added in another order, which differs in the last bits,
  gives the same text); an integer, a decimal (exact in Spark: its scale is fixed by the query,
  and a re-aggregated ``SUM`` keeps it), a date (ISO ``yyyy-MM-dd``), a string, anything else:
  Spark's cast to string; a boolean ``true``/``false``;
* a row's line is its values' texts joined by U+001F;
* the digest is the SHA-256 (hex) of ``reopt-answer-v1 rows=N h1=S1 h2=S2``, where ``N`` is the
  row count and ``S1``, ``S2`` are the exact sums (as integers, no wrap-around) over the rows of
  two 64-bit hashes of the line: Spark's ``xxhash64(line)`` and ``xxhash64('reopt', line)``
  (the second seeded by the salt's hash: a different function, not one of the first).

Same answer (same rows, any order, same column types — the same query text) ⇒ same digest.
Different answers collide only if they have the same row count and both sums agree: for rows
hashed as random 64-bit values, a fixed difference between two multisets sums to exactly zero
with probability about 2^-64 per hash, so about 2^-128 for both — far below any other source
of error in a benchmark (the hashes are not cryptographic: this guards against mistakes, not
against an adversary). A dropped or added row always changes ``N``. It is not the SHA-256 of
sorted rows that :func:`reopt.execute.answer_digest` computes on the driver (that one sorts
the rows in Python); the two digests are each consistent, not equal to each other.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reopt.combine import Combiner
from reopt.costmodel.query import Query
from reopt.execute import DIGITS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

HEAD = 10
"""Rows of a combined answer brought to the driver to show (the rest stays in Spark)."""
SALT = "reopt"
"""Prefix that makes the second row hash a different function of the line."""
VERSION = "reopt-answer-v1"


@dataclass
class Answer:
    """A combined answer as the driver sees it: never its rows, only what describes them."""

    columns: list[str]
    result_rows: int
    digest: str
    head: list[tuple] = field(default_factory=list)
    """The first :data:`HEAD` rows (in the query's ORDER BY, else in no particular order)."""
    seconds: float = 0.0
    """Wall time of combining and digesting in Spark."""


def keep(df: DataFrame) -> DataFrame:
    """``df`` run now and kept in Spark (a local checkpoint on disk: nothing is collected to
    the driver, and a large answer does not need the executors' memory). The run is ``df``'s
    own query execution, so ``df``'s observed metrics (``DataFrame.observe``) are filled by it
    (writing Parquet would run another query execution and leave them empty)."""
    from pyspark import StorageLevel

    return df.localCheckpoint(eager=True, storageLevel=StorageLevel.DISK_ONLY)


def release(df: DataFrame) -> None:
    """Drop the blocks of a frame :func:`keep` made (else they stay until the JVM collects the
    frame). A frame that is no local checkpoint is left alone."""
    plan = df._jdf.logicalPlan()
    if plan.getClass().getSimpleName() == "LogicalRDD":
        plan.rdd().unpersist(False)


def _positional(df: DataFrame) -> DataFrame:
    """Columns renamed ``c0``, ``c1``, …: the splits' answers line up by position, and two
    output columns may share a name."""
    return df.toDF(*[f"c{i}" for i in range(len(df.columns))])


def combine(combiner: Combiner, parts: Sequence[DataFrame], columns: Sequence[str]
            ) -> DataFrame:
    """The whole query's answer from the splits' answers, as :meth:`Combiner.combine` makes
    it on the driver: the union (by position); re-aggregated by the group keys (a ``COUNT`` or
    ``SUM`` partial summed, ``MIN``/``MAX`` of the partials; NULL partials ignored) or
    deduplicated (``SELECT DISTINCT``); then ORDER BY and LIMIT. Under a LIMIT, rows that tie
    on the ORDER BY keys are ordered by all their columns, so the rows kept do not depend on
    the order the splits ran in. Columns get the names ``columns``."""
    from functools import reduce

    from pyspark.sql import functions as F

    if not parts:
        raise ValueError("no split answers to combine")
    df = reduce(lambda a, b: a.union(b), [_positional(p) for p in parts])
    names = [f"c{i}" for i in range(len(columns))]
    # as many groups per task as in a split's answer: the session's few shuffle partitions
    # would give each task several splits' worth (Q8Join at SF 1: 6 million groups a task,
    # spilling on a 2 GB driver)
    width = max(int(df.sparkSession.conf.get("spark.sql.shuffle.partitions", "1")),
                sum(p._jdf.rdd().getNumPartitions() for p in parts))
    if combiner.aggregates:
        keys = [n for n, how in zip(names, combiner.aggregates, strict=True) if how is None]
        merge = {"sum": F.sum, "count": F.sum, "min": F.min, "max": F.max}
        aggs = [merge[how](n).alias(n) for n, how in zip(names, combiner.aggregates, strict=True)
                if how is not None]
        if keys:
            df = df.repartition(width, *keys).groupBy(*keys).agg(*aggs).select(*names)
        else:
            df = df.agg(*aggs).select(*names)
    elif combiner.distinct:
        df = df.repartition(width, *names).distinct()
    order = [_order_column(names[k.position], k.descending, k.nulls_first)
             for k in combiner.order]
    if combiner.limit is not None:
        df = df.orderBy(*order, *[F.col(n).asc_nulls_first() for n in names])
        df = df.limit(combiner.limit)
    elif order:
        df = df.orderBy(*order)
    return df.toDF(*columns)


def _order_column(name: str, descending: bool, nulls_first: bool) -> Column:
    from pyspark.sql import functions as F

    c = F.col(name)
    if descending:
        return c.desc_nulls_first() if nulls_first else c.desc_nulls_last()
    return c.asc_nulls_first() if nulls_first else c.asc_nulls_last()


def _cell(df: DataFrame, i: int) -> Column:
    """The canonical text of column ``i`` of a :func:`_positional` frame (see the module's
    docstring)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    c = F.col(f"c{i}")
    kind = df.schema.fields[i].dataType
    if isinstance(kind, (T.FloatType, T.DoubleType)):
        text = (F.when(F.isnan(c), F.lit(None)).when(c == 0, F.lit("0"))
                .otherwise(F.format_string(f"%.{DIGITS - 1}e", c.cast("double"))))
    elif isinstance(kind, T.BooleanType):
        text = F.when(c, F.lit("true")).when(~c, F.lit("false"))
    else:
        text = c.cast("string")
    return F.coalesce(text, F.lit("\\N"))


def digest(df: DataFrame) -> tuple[int, str]:
    """The row count and order-independent digest of ``df``'s rows (module docstring), in
    one Spark job; one row reaches the driver."""
    from pyspark.sql import functions as F

    df = _positional(df)
    line = F.concat_ws("\x1f", *[_cell(df, i) for i in range(len(df.columns))])
    wide = "decimal(38,0)"  # exact sums of up to 10^19 64-bit values
    row = df.select(F.xxhash64(line).cast(wide).alias("h1"),
                    F.xxhash64(F.lit(SALT), line).cast(wide).alias("h2")
                    ).agg(F.count(F.lit(1)).alias("n"), F.sum("h1").alias("s1"),
                          F.sum("h2").alias("s2")).first()
    n = int(row["n"])
    s1, s2 = (int(row[k]) if row[k] is not None else 0 for k in ("s1", "s2"))
    text = f"{VERSION} rows={n} h1={s1} h2={s2}"
    return n, hashlib.sha256(text.encode("ascii")).hexdigest()


def head(df: DataFrame, combiner: Combiner, n: int = HEAD) -> list[tuple]:
    """The first ``n`` rows of a combined answer, in its ORDER BY (re-applied: a top-``n`` over
    the kept rows) if it has one."""
    from pyspark.sql import functions as F

    if combiner.order:
        df = _positional(df)
        names = df.columns
        df = df.orderBy(*[_order_column(names[k.position], k.descending, k.nulls_first)
                          for k in combiner.order],
                        *[F.col(c).asc_nulls_first() for c in names])
    return [tuple(r) for r in df.limit(n).collect()]


def settle(combiner: Combiner, parts: Sequence[DataFrame], columns: Sequence[str],
           show: int = HEAD) -> Answer:
    """Combine the splits' kept answers, digest the result and take its first rows, all in
    Spark; the parts are released after. The combined answer is computed once (persisted on
    disk while the digest and the first rows are read from it)."""
    from pyspark import StorageLevel

    t0 = time.perf_counter()
    try:
        whole = combine(combiner, parts, columns).persist(StorageLevel.DISK_ONLY)
        try:
            rows, text = digest(whole)
            first = head(whole, combiner, show) if rows else []
        finally:
            whole.unpersist()
    finally:
        for p in parts:
            release(p)
    return Answer(list(columns), rows, text, first, time.perf_counter() - t0)


def json_value(v: Any) -> Any:
    """A value of a shown row as JSON can carry it (decimals and dates as text)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def spark_sql_digest(query: Query, data_dir: str | Path, spark: SparkSession) -> tuple[int, str]:
    """Row count and :func:`digest` of Spark SQL's own answer to the query's whole text over
    the whole data (the tables registered as views under their names), never collected: the
    oracle a split run's combined answer must equal."""
    from reopt.execute import spark_sql_frame

    with spark_sql_frame(query, data_dir, spark) as frame:
        return digest(frame)
