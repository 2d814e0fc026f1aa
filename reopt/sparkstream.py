"""Spark Structured Streaming's own stream-stream join: the baseline of issue 21 that keeps the
FROM order as written (Spark turns cost-based join reordering off for streaming queries and
cannot rearrange a running query's stateful operators).

The query runs as ONE streaming query: every FROM item a file source (``readStream.parquet``)
over a staging folder per stream, its filters applied, the items joined left-deep in FROM
order by Spark's symmetric hash stream-stream join, each join carrying the query's conditions
it completes and the windows as pairwise event-time range conditions — for items ``i`` and
``j``: ``ts_i - ts_j < window_j AND ts_j - ts_i < window_i``. Together these say exactly what
the executor's window condition says (``max_j ts_j - ts_i < window_i`` for every ``i`` holds
iff every pair's does), so a result is the same combination as in
:class:`reopt.stream.ContinuousQuery`. The SELECT list is applied to the joined stream and
``foreachBatch`` collects the rows.

Feeding: micro-batch ``b`` writes the records of stream seconds ``[start, end)`` — the very
records the executor reads, through its reader (unreadable files and records outside their
second skipped and counted the same way) — into the staging folders, each file written under a
hidden name and renamed (Spark's file source ignores names starting with ``.`` and never sees a
half-written file), then waits for ``processAllAvailable``: Spark runs as many of its own
micro-batches as it needs, and every result they emit belongs to batch ``b``.

Where its semantics differ: no watermarks. Spark's stream-stream join expires state only
through watermarks on timestamp columns and range conditions between them; without them it
keeps every tuple of every input (and of every intermediate join) for the whole run, so its
state grows without bound and its results are never late-dropped. With that, since stream
seconds are fed in order, the results of each batch are exactly the combinations whose newest
tuple is in it — the executor's per-batch results (the tests compare per batch, and over the
whole stream). Watermarked expiry would change only the state sizes and time, not the results,
as long as the delay covers the windows and the feed stays in order; it is not implemented.
Spark refuses a stream-stream join without an equality predicate, so a FROM order with an
item joined to none before it is a :class:`StreamError` (Spark's join order is the FROM order).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from reopt.costmodel.cardinality import Adjustments
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.query import Query
from reopt.execute import _name
from reopt.stream import ContinuousQuery, MicroBatch, StreamError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class SparkStreamJoin(ContinuousQuery):
    """The query over the stream files in ``data_dir`` as one Spark streaming query (see the
    module doc); :meth:`run` feeds it batch by batch. Reuses the executor's checks, reading
    and prepared SQL; keeps no window buffers of its own (Spark's join state is the state).
    """

    def __init__(self, query: Query, catalog: Catalog, data_dir: str | Path,
                 spark: SparkSession | None, batch_seconds: int = 1,
                 adjustments: Adjustments | None = None):
        super().__init__(query, catalog, data_dir, spark, batch_seconds, adjustments)
        held: set[int] = {0}
        for i in range(1, len(self.query.aliases)):
            if not any(i in used and used <= held | {i} for used, _ in self.prepared.conditions):
                raise StreamError(f"query {self.query.name}: Spark's stream-stream join needs "
                                  f"an equality between '{self.query.aliases[i]}' and the items "
                                  "before it in FROM order (it joins in that order)")
            held.add(i)
        self.work: Path | None = None
        self.owned = False
        self.handle: Any = None
        self.found: list[tuple] = []
        self.columns: list[str] = []

    # -- the streaming query -------------------------------------------------------------------
    def _source(self, i: int) -> DataFrame:
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_schema

        table = self.query.relations[i].table
        df = self.spark.readStream.schema(from_arrow_schema(self.schemas[table])).parquet(
            str(self.work / "stage" / table))
        df = df.select(*[F.col(f"`{c}`").alias(_name(i, c))
                         for c in sorted(self.prepared.needed[i])])
        for text in self.prepared.filters.get(i, []):
            df = df.filter(F.expr(text))
        return df

    def _range(self, i: int, j: int) -> str:
        ti, tj = _name(i, self.time_of[i]), _name(j, self.time_of[j])
        wi, wj = (self.windows[self.query.aliases[k]] for k in (i, j))
        return f"({ti} - {tj} < {wj!r}) AND ({tj} - {ti} < {wi!r})"

    def joined(self) -> DataFrame:
        """The streaming DataFrame of the query's results, joins in FROM order."""
        from pyspark.sql import functions as F

        out, held = self._source(0), {0}
        for i in range(1, len(self.query.aliases)):
            conds = [f"({text})" for used, text in self.prepared.conditions
                     if i in used and used <= held | {i}]
            conds += [self._range(i, j) for j in sorted(held)]
            out = out.join(self._source(i), F.expr(" AND ".join(conds)), "inner")
            held.add(i)
        if self.prepared.constant:
            out = out.filter(F.expr(" AND ".join(f"({c})" for c in self.prepared.constant)))
        out.createOrReplaceTempView(self.view)
        try:
            return self.spark.sql(self.prepared.final_sql)
        finally:
            self.spark.catalog.dropTempView(self.view)

    def _collect(self, df: DataFrame, epoch: int) -> None:
        frame = df.toPandas()
        self.columns = list(frame.columns)
        self.found.extend(frame.itertuples(index=False, name=None))

    def start(self, work_dir: str | Path | None = None,
              state_partitions: int | None = None) -> None:
        """Start the streaming query (staging and checkpoint folders under ``work_dir``, a
        new temporary folder by default). ``state_partitions``: the shuffle partitions of its
        joins, hence of their state stores (a streaming query fixes them when it starts);
        default the session's ``spark.sql.shuffle.partitions``."""
        if self.spark is None:
            raise StreamError("no Spark session: set SparkStreamJoin.spark before starting")
        self.owned = work_dir is None
        self.work = Path(work_dir or tempfile.mkdtemp(prefix="reopt-sparkjoin-"))
        for t in self.tables:
            (self.work / "stage" / t).mkdir(parents=True, exist_ok=True)
        key = "spark.sql.shuffle.partitions"
        before = self.spark.conf.get(key)
        if state_partitions is not None:
            self.spark.conf.set(key, str(int(state_partitions)))
        try:
            result = self.joined()
            self.columns = list(result.columns)
            self.handle = (result.writeStream.foreachBatch(self._collect)
                           .option("checkpointLocation",
                                   str(self.work / f"ck-{uuid.uuid4().hex}"))
                           .queryName(self.view).start())
        finally:
            self.spark.conf.set(key, before)

    def stop(self) -> None:
        """Stop the streaming query; remove its folders if :meth:`start` made them."""
        if self.handle is not None:
            self.handle.stop()
            self.handle = None
        if self.owned and self.work is not None:
            shutil.rmtree(self.work, ignore_errors=True)
            self.work = None

    def _stage(self, table: str, second: int, skipped: dict[str, int]) -> int:
        frame = self._read(table, second, second + 1, skipped)
        if len(frame) == 0:
            return 0
        folder = self.work / "stage" / table
        hidden = folder / f".{second:06d}.parquet"
        pq.write_table(pa.Table.from_pandas(frame, schema=self.schemas[table],
                                            preserve_index=False), hidden)
        os.replace(hidden, folder / f"{second:06d}.parquet")
        return len(frame)

    def state_rows(self) -> int:
        """Rows in Spark's join state after its last micro-batch (all its stateful
        operators)."""
        progress = self.handle.lastProgress if self.handle is not None else None
        if not progress:
            return 0
        return sum(int(op.get("numRowsTotal", 0)) for op in progress.get("stateOperators", []))

    def step(self, plan: Any = None) -> MicroBatch:
        """Feed and run the next micro-batch (``plan`` ignored: the FROM order is the plan)."""
        if self.handle is None:
            raise StreamError("the Spark streaming query is not started (call start())")
        start, end = self._next_batch()
        t0 = time.perf_counter()
        skipped: dict[str, int] = {}
        arrivals = {t: sum(self._stage(t, s, skipped) for s in range(start, end))
                    for t in self.tables}
        self.found = []
        try:
            self.handle.processAllAvailable()
        except Exception as e:  # a failed streaming query: one line
            raise StreamError(f"Spark's streaming join failed in batch {self.batch}: "
                              f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"
                              ) from None
        batch = MicroBatch(self.batch, float(start), float(end), self.plan_text(), arrivals,
                           {"spark join state": self.state_rows()}, self.columns,
                           self.found, time.perf_counter() - t0, skipped=skipped)
        self.batch += 1
        return batch

    def plan_text(self) -> str:
        """The join order Spark runs: left-deep in FROM order."""
        text = self.query.aliases[0]
        for a in self.query.aliases[1:]:
            text = f"spark({text}, {a})"
        return text

    def run(self, plan_for: Any = None) -> Iterator[MicroBatch]:  # type: ignore[override]
        """Start, feed every remaining micro-batch, stop (also on an error)."""
        if self.handle is None:
            self.start()
        try:
            while self.batch * self.batch_seconds < self.seconds:
                yield self.step()
        finally:
            self.stop()
