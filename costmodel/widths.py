"""How many bytes a row of a relation set takes, as Spark estimates it.

The ``dist`` model's broadcast limit is a size in bytes (Spark's own threshold,
``spark.sql.autoBroadcastJoinThreshold``, is 10 MB), so it needs the width of an input's rows,
not only their number. A row of an expression carries, of each of its relations, the columns
the query reads above the scans (:meth:`~reopt.costmodel.query.Query.carried_columns`: join
columns and the output's columns; Spark prunes a column only the filters read), each taking
its catalog width (:attr:`~reopt.costmodel.catalog.ColumnStats.bytes`), plus
:data:`ROW_BYTES` per row: Spark's ``EstimationUtils.getSizePerRow``, the estimate its
broadcast threshold is compared with.

Widths depend on the query and the catalog only, never on estimates or deltas: a cost that
reads them still moves only when an estimate moves (incremental maintenance only re-costs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reopt.costmodel.joingraph import bits

if TYPE_CHECKING:
    from reopt.costmodel.catalog import Catalog
    from reopt.costmodel.query import Query

ROW_BYTES = 8.0
"""Bytes per row besides its columns' (Spark's row-size estimate adds 8)."""


def relation_bytes(query: Query, catalog: Catalog) -> list[float]:
    """Per relation of ``query`` (FROM order), the bytes its carried columns take in a row."""
    out = []
    for r in query.relations:
        columns = catalog.table(r.table).columns
        out.append(sum(columns[c].bytes for c in query.carried_columns(r.alias)
                       if c in columns))
    return out


def row_bytes(per_relation: list[float], expr: int) -> float:
    """Bytes of one row of expression ``expr`` (a bitmask of relations), given
    :func:`relation_bytes`."""
    return sum((per_relation[i] for i in bits(expr)), ROW_BYTES)
