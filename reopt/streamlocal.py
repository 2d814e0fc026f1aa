"""The continuous-query executor in process: the same batches, plans, states and migrations as
:class:`reopt.stream.ContinuousQuery` on Spark, with every DataFrame a pandas frame on the
driver (``reopt stream --executor local``, the default).

Why: a micro-batch of a few thousand tuples on Spark is mostly Spark's fixed cost per job —
building DataFrames from pandas, planning, one job per stateful join to collect its new
results, one for the answer (``benchmarks/stream_profile.py``, BENCHMARKS.md) — so the work a
plan decides (how many partial results its joins build and keep) is hidden under it. In
process that overhead is gone and the plan's work is what a batch costs; the eddy
(:mod:`reopt.eddy`) runs in process too, so the comparison with it is like for like.

Everything but the operations on frames is the Spark executor's own code (this class only
overrides them): the reader, window buffers and expiry, the delta terms
``ΔL ⋈ (R_old ∪ ΔR) ∪ L_old ⋈ ΔR``, the tracks and both migrations, the observations. The
operations:

* a leaf: the FROM item's renamed columns (``_r0_id``), its filters;
* a join carries out the plan's operator as Spark's hint does: ``nlj`` (Spark's
  ``shuffle_replicate_nl``) is a nested-loops join — every pair of the two sides, in blocks of
  at most :data:`BLOCK_PAIRS` pairs, then the join conditions — and every other operator is a
  hash join on the equi-join conditions between the sides (none: nested loops), then the
  other conditions; then the window condition of the tuples held (as on Spark). NULL keys
  never match (SQL), which pandas' ``merge`` would not ensure by itself;
* the answer: the constant conditions and the SELECT list, evaluated by
  :mod:`reopt.frameexpr` (the subset of SQL a select-project-join stream query uses; the
  query is refused when it is built otherwise, as by the eddy).

The results equal the Spark executor's per batch as multisets (tested against the same batch
Spark SQL oracle, across plan switches and both migrations).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from reopt.costmodel.cardinality import Adjustments
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.query import Query
from reopt.execute import _name
from reopt.frameexpr import Condition, FrameSQL, mask
from reopt.plan import PlanNode
from reopt.stream import ContinuousQuery, StreamError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EXECUTORS = ("local", "spark")
"""``reopt stream --executor``: in process (pandas) or on Spark."""
BLOCK_PAIRS = 1 << 21
"""Pairs a nested-loops join materializes at once (memory bound, not semantics)."""


class LocalContinuousQuery(ContinuousQuery):
    """:class:`reopt.stream.ContinuousQuery` on pandas frames (module doc); no Spark.
    Arguments as the Spark executor's, without the session."""

    def __init__(self, query: Query, catalog: Catalog, data_dir: str | Path,
                 batch_seconds: int = 1, adjustments: Adjustments | None = None,
                 state: str = "intermediate", migration: str = "moving"):
        super().__init__(query, catalog, data_dir, None, batch_seconds, adjustments,
                         state=state, migration=migration)
        sql = FrameSQL(self.prepared, self.query.name, "the local executor", StreamError,
                       elsewhere="--executor spark")
        self.filters, self.conditions = sql.filters, sql.conditions
        self.constant, self.select = sql.constant, sql.select
        self.dtypes: dict[str, Any] = {}
        """Each renamed column's pandas dtype (an empty state keeps its columns' types)."""
        for i, r in enumerate(self.query.relations):
            empty = self._empty(r.table)
            for c in self.prepared.needed[i]:
                self.dtypes[_name(i, c)] = empty[c].dtype

    # -- the operations of a batch, on pandas --------------------------------------------------
    def _check_session(self) -> None:
        return None

    def _session(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def _frame(self, table: str, pdf: pd.DataFrame) -> pd.DataFrame:
        return pdf

    def _typed_empty(self, columns: list[str]) -> pd.DataFrame:
        return pd.DataFrame({c: pd.Series(dtype=self.dtypes[c]) for c in columns})

    def _leaf(self, alias: str, frames: dict[str, tuple[pd.DataFrame, pd.DataFrame]]
              ) -> tuple[pd.DataFrame, pd.DataFrame]:
        i = self.query.index(alias)
        out = []
        for df in frames[self.query.table_of(alias)]:
            f = pd.DataFrame({_name(i, c): df[c].to_numpy()
                              for c in sorted(self.prepared.needed[i])})
            for keep in self.filters.get(i, []):
                f = f[mask(keep, f)]
            out.append(f.reset_index(drop=True))
        return out[0], out[1]

    def _join(self, node: PlanNode, left: pd.DataFrame, right: pd.DataFrame, lset: set[int],
              rset: set[int]) -> pd.DataFrame:
        both = lset | rset
        covered = [c for c in self.conditions
                   if c.used <= both and not c.used <= lset and not c.used <= rset]
        columns = [*left.columns, *right.columns]
        if len(left) == 0 or len(right) == 0:
            return self._typed_empty(columns)
        keys = [] if node.op == "nlj" else [
            (a, b) if a in left.columns else (b, a) for c in covered if c.equi is not None
            for a, b in [c.equi]]
        if keys:
            lk, rk = [a for a, _ in keys], [b for _, b in keys]
            out = left.dropna(subset=lk).merge(right.dropna(subset=rk), left_on=lk,
                                               right_on=rk, how="inner")
            rest = [c for c in covered if c.equi is None]
            out = self._keep(out, rest, both)
        else:
            step = max(1, BLOCK_PAIRS // len(right))
            parts = [self._keep(self._pairs(left.iloc[k:k + step], right), covered, both)
                     for k in range(0, len(left), step)]
            out = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
        return out[columns].reset_index(drop=True)

    @staticmethod
    def _pairs(left: pd.DataFrame, right: pd.DataFrame) -> pd.DataFrame:
        """Every pair of a row of ``left`` and a row of ``right`` (nested loops)."""
        li = np.repeat(np.arange(len(left)), len(right))
        ri = np.tile(np.arange(len(right)), len(left))
        return pd.DataFrame({**{c: left[c].to_numpy()[li] for c in left.columns},
                             **{c: right[c].to_numpy()[ri] for c in right.columns}})

    def _keep(self, frame: pd.DataFrame, conditions: list[Condition], held: set[int]
              ) -> pd.DataFrame:
        """``frame``'s rows meeting ``conditions`` and the window condition of ``held``."""
        if len(frame) == 0:
            return frame
        ok = np.ones(len(frame), dtype=bool)
        for c in conditions:
            ok &= mask(c.evaluate, frame).to_numpy()
        order = sorted(held)
        times = [frame[_name(i, self.time_of[i])].to_numpy(dtype=float) for i in order]
        newest = np.max(np.vstack(times), axis=0)
        for i, t in zip(order, times, strict=True):
            ok &= newest - t < self.windows[self.query.aliases[i]]
        return frame[ok]

    def _union(self, a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
        if len(b) == 0:
            return a
        if len(a) == 0:
            return b[list(a.columns)] if set(a.columns) == set(b.columns) else b
        return pd.concat([a, b[list(a.columns)]], ignore_index=True)

    def _rows(self, df: pd.DataFrame) -> pd.DataFrame:
        return df

    def _schema(self, df: pd.DataFrame) -> list[str]:
        return list(df.columns)

    def _state_frame(self, rows: pd.DataFrame | None, schema: Any) -> pd.DataFrame:
        if rows is None or len(rows) == 0:
            return self._typed_empty(schema)
        return rows[schema]

    def _owned(self, delta: pd.DataFrame, cut: float, held: set[int]) -> pd.DataFrame:
        ok = np.zeros(len(delta), dtype=bool)
        for i in held:
            ok |= delta[_name(i, self.time_of[i])].to_numpy() < cut
        return delta[ok].reset_index(drop=True)

    def _answer(self, delta: pd.DataFrame) -> tuple[list[str], list[tuple]]:
        for keep in self.constant:
            delta = delta[mask(keep, delta)]
        columns = [name for name, _ in self.select]
        if len(delta) == 0:
            return columns, []
        answer = pd.DataFrame({name: _column(f(delta), delta) for name, f in self.select})
        return columns, list(answer.itertuples(index=False, name=None))


def _column(value: Any, frame: pd.DataFrame) -> np.ndarray:
    """A SELECT item's values for every row (a constant item repeated)."""
    if isinstance(value, pd.Series):
        return value.to_numpy()
    return np.full(len(frame), value)


def make_query(executor: str, query: Query, catalog: Catalog, data_dir: str | Path,
               spark: SparkSession | None, batch_seconds: int = 1,
               adjustments: Adjustments | None = None, state: str = "intermediate",
               migration: str = "moving") -> ContinuousQuery:
    """The continuous query on ``executor`` (``local``: in process, ``spark`` on ``spark``,
    which may be set later, before the first batch)."""
    if executor == "local":
        return LocalContinuousQuery(query, catalog, data_dir, batch_seconds, adjustments,
                                    state=state, migration=migration)
    if executor == "spark":
        return ContinuousQuery(query, catalog, data_dir, spark, batch_seconds, adjustments,
                               state=state, migration=migration)
    raise StreamError(f"unknown executor '{executor}' (choose from {', '.join(EXECUTORS)})")

