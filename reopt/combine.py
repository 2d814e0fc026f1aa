"""Combine the answers a query gives on the splits of one input into the whole query's answer.

``reopt run`` splits one relation of the query into disjoint parts and runs the query on each
with the other relations whole. Inner joins distribute over a union of one input, so the
joined rows of the whole query are the union of the splits' joined rows; what is left is the
final operator:

* no aggregate and no GROUP BY: the answer is the union of the splits' rows (``SELECT
  DISTINCT``: with duplicates dropped);
* GROUP BY (or an aggregate without GROUP BY) whose select items are each a group key or one
  of ``SUM``, ``COUNT``, ``MIN``, ``MAX`` (no ``DISTINCT`` inside): each split's rows are
  partial aggregates, re-aggregated by the group keys (a ``COUNT`` is summed). ``AVG``, an
  expression over aggregates (``sum(a) / sum(b)``), a GROUP BY key missing from the select
  list, ``HAVING`` and ``DISTINCT`` inside an aggregate cannot be combined from partials: such
  a query is refused (:class:`CombineError`, one line) unless it runs as one split;
* ``ORDER BY`` and ``LIMIT`` are taken off the split query and applied after combining; an
  ORDER BY item must be an output column (its name or alias, its position, or the same
  expression as a select item).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp

from reopt.costmodel.errors import ReoptError

COMBINABLE = {exp.Sum: "sum", exp.Count: "count", exp.Min: "min", exp.Max: "max"}
"""Aggregate function -> how two partials of it combine."""


class CombineError(ReoptError):
    """The query's answer cannot be combined from per-split answers; one line."""


@dataclass(frozen=True)
class OrderKey:
    position: int
    descending: bool
    nulls_first: bool


@dataclass
class Combiner:
    """How the per-split answers of one query combine: :func:`combiner` builds it."""

    split_sql: str
    """The query's SQL without ORDER BY and LIMIT: what each split runs."""
    aggregates: list[str | None]
    """Per output column: how partials combine (``sum``, ``count``, ``min``, ``max``), or
    None for a group key; empty when the query does not aggregate."""
    distinct: bool
    order: list[OrderKey]
    limit: int | None

    def combine(self, partials: Sequence[Sequence[tuple]]) -> list[tuple]:
        """The whole query's rows from each split's rows."""
        rows = [tuple(_null(v) for v in row) for part in partials for row in part]
        if self.aggregates:
            rows = self._reaggregate(rows)
        elif self.distinct:
            rows = list(dict.fromkeys(rows))
        for key in reversed(self.order):  # stable sorts, last key first
            rows.sort(key=lambda r, k=key: _sort_key(r[k.position], k), reverse=key.descending)
        return rows if self.limit is None else rows[:self.limit]

    def _reaggregate(self, rows: list[tuple]) -> list[tuple]:
        keys = [i for i, a in enumerate(self.aggregates) if a is None]
        groups: dict[tuple, list[Any]] = {}
        for row in rows:
            group = tuple(row[i] for i in keys)
            acc = groups.get(group)
            if acc is None:
                groups[group] = list(row)
                continue
            for i, how in enumerate(self.aggregates):
                if how is not None:
                    acc[i] = _merge(how, acc[i], row[i])
        return [tuple(acc) for acc in groups.values()]


def _null(v: Any) -> Any:
    """A numeric NULL comes from pandas as NaN: None, so that groups and merges see NULL."""
    return None if isinstance(v, float) and math.isnan(v) else v


def _merge(how: str, a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    if how in ("sum", "count"):
        return a + b
    return min(a, b) if how == "min" else max(a, b)


def _sort_key(v: Any, key: OrderKey) -> tuple:
    # Spark's default: NULLS FIRST ascending, NULLS LAST descending
    null_rank = 0 if key.nulls_first != key.descending else 1
    return (null_rank, 0) if v is None else (1 - null_rank, v)


def _unalias(e: exp.Expression) -> exp.Expression:
    return e.this if isinstance(e, exp.Alias) else e


def _output_name(item: exp.Expression) -> str | None:
    if isinstance(item, exp.Alias):
        return item.alias.lower()
    if isinstance(item, exp.Column):
        return item.name.lower()
    return None


def _how(name: str, item: exp.Expression) -> str | None:
    """How the select item combines: an aggregate's name, None for a group key."""
    e = _unalias(item)
    for kind, how in COMBINABLE.items():
        if isinstance(e, kind):
            if isinstance(e.this, exp.Distinct):
                raise CombineError(f"query {name}: {e.sql()} counts distinct values, which "
                                   "per-split partials cannot combine (run it as one split)")
            return how
    inner = e.find(exp.AggFunc)
    if inner is not None:
        what = ("AVG needs a SUM and a COUNT to combine" if isinstance(inner, exp.Avg)
                else "an expression over aggregates cannot be re-aggregated")
        raise CombineError(f"query {name}: select item {item.sql()}: {what} "
                           "(write the parts as separate items, or run it as one split)")
    return None


def combiner(sql: str, name: str = "query") -> Combiner:
    """The :class:`Combiner` of the query ``sql`` (raises :class:`CombineError`)."""
    tree = sqlglot.parse_one(sql.removeprefix("\ufeff"))
    while isinstance(tree, exp.Subquery):
        tree = tree.this
    if not isinstance(tree, exp.Select):
        raise CombineError(f"query {name}: only a SELECT block can be split")
    items = list(tree.expressions)
    if any(isinstance(i, exp.Star) or (isinstance(i, exp.Column) and isinstance(i.this, exp.Star))
           for i in items):
        if tree.args.get("group") or tree.find(exp.AggFunc):
            raise CombineError(f"query {name}: SELECT * with aggregation cannot be split")
    group = tree.args.get("group")
    aggregating = group is not None or any(_unalias(i).find(exp.AggFunc) for i in items)
    if tree.args.get("having") is not None:
        raise CombineError(f"query {name}: HAVING filters whole groups, which per-split "
                           "partials do not have (run it as one split)")
    aggregates: list[str | None] = []
    if aggregating:
        aggregates = [_how(name, i) for i in items]
        keys = {_unalias(i).sql().lower() for i, a in zip(items, aggregates, strict=True)
                if a is None}
        names = {_output_name(i) for i, a in zip(items, aggregates, strict=True) if a is None}
        for g in group.expressions if group is not None else []:
            text = g.sql().lower()
            if text not in keys and not (isinstance(g, exp.Column) and g.name.lower() in names):
                raise CombineError(f"query {name}: GROUP BY {g.sql()} is not a select item; "
                                   "partial groups could not be told apart")
    order = [_order_key(name, o, items) for o in (tree.args.get("order") or exp.Order()
                                                  ).expressions]
    limit = None
    if tree.args.get("limit") is not None:
        value = tree.args["limit"].expression
        if not (isinstance(value, exp.Literal) and value.is_int):
            raise CombineError(f"query {name}: LIMIT must be a number to be split")
        limit = int(value.name)
    split = tree.copy()
    split.set("order", None)
    split.set("limit", None)
    return Combiner(split.sql(dialect="spark"), aggregates, tree.args.get("distinct") is not None,
                    order, limit)


def _order_key(name: str, o: exp.Ordered, items: list[exp.Expression]) -> OrderKey:
    e = o.this
    desc = bool(o.args.get("desc"))
    nulls_first = bool(o.args.get("nulls_first"))
    position = None
    if isinstance(e, exp.Literal) and e.is_int:
        position = int(e.name) - 1
        if not 0 <= position < len(items):
            raise CombineError(f"query {name}: ORDER BY {e.name} names no select item")
    else:
        text = e.sql().lower()
        for i, item in enumerate(items):
            if (isinstance(e, exp.Column) and not e.table and _output_name(item) == e.name.lower()
                    or _unalias(item).sql().lower() == text):
                position = i
                break
    if position is None:
        raise CombineError(f"query {name}: ORDER BY {e.sql()} is not an output column, so it "
                           "cannot be applied after combining the splits")
    return OrderKey(position, desc, nulls_first)
