"""The query's prepared Spark SQL expressions evaluated on pandas frames.

The eddy (:mod:`reopt.eddy`) and the local executor (:mod:`reopt.streamlocal`) join in
process, on the driver's window buffers, so they need the query's filters, join conditions and
SELECT list — which :func:`reopt.execute._prepare` writes as Spark SQL over renamed columns
(``_r0_id``) — as functions of a pandas frame. :func:`compile_expr` turns the subset of SQL a
select-project-join stream query uses into such a function: columns, numeric/string/boolean
literals, ``= <> < <= > >=``, ``AND OR NOT``, ``+ - * /`` and unary minus, ``BETWEEN``,
``IN (literals)``, ``IS [NOT] NULL``. Anything else is a :class:`reopt.stream.StreamError`
naming the expression, raised by :class:`FrameSQL` when the executor is built, before any
batch runs. NULLs follow pandas (a comparison with NaN is false), which equals SQL's
three-valued logic wherever a condition only filters rows (UNKNOWN drops the row too).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd
import sqlglot
from sqlglot import exp

Evaluator = Callable[[pd.DataFrame], Any]
"""A compiled expression: frame -> a Series aligned with it, or a scalar."""

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    exp.EQ: operator.eq, exp.NEQ: operator.ne, exp.LT: operator.lt, exp.LTE: operator.le,
    exp.GT: operator.gt, exp.GTE: operator.ge, exp.And: operator.and_, exp.Or: operator.or_,
    exp.Add: operator.add, exp.Sub: operator.sub, exp.Mul: operator.mul,
    exp.Div: operator.truediv,
}


RENAMED = re.compile(r"^_r(\d+)_")
"""A prepared column's name, ``_r<FROM position>_<column>``."""


class UnsupportedExpression(ValueError):
    """An expression the pandas evaluator does not cover (the caller names the query)."""


@dataclass(frozen=True)
class Condition:
    """A join condition of the prepared query, as a function of a frame."""

    used: frozenset[int]
    evaluate: Evaluator
    equi: tuple[str, str] | None
    """``(column, column)`` of a plain column = column condition between two FROM items,
    else None."""


class FrameSQL:
    """A prepared query's filters, join conditions, constant conditions and SELECT list
    compiled for one in-process executor (the eddy, the local continuous-query executor),
    which emits join results only. What the evaluator does not cover, and DISTINCT, ORDER BY
    or LIMIT, is ``error`` (one line naming the query and ``who`` runs it, with where it does
    run, ``elsewhere``), raised here, before any batch runs."""

    def __init__(self, prepared: Any, query: str, who: str, error: type[Exception],
                 elsewhere: str | None = None):
        self.query, self.who, self.error, self.elsewhere = query, who, error, elsewhere
        self.filters = {i: [self.text(t) for t in texts]
                        for i, texts in prepared.filters.items()}
        self.conditions = [self.condition(used, text) for used, text in prepared.conditions]
        self.constant = [self.text(t) for t in prepared.constant]
        final = parse(prepared.final_sql)
        if any(final.args.get(k) for k in ("distinct", "order", "limit", "offset")):
            where = f" ({elsewhere} runs them)" if elsewhere else ""
            raise error(f"query {query}: {who} emits join results; DISTINCT, ORDER BY and "
                        f"LIMIT are not supported{where}")
        self.select = [(item.alias_or_name, self.node(item)) for item in final.expressions]

    def node(self, node: exp.Expression) -> Evaluator:
        try:
            return compile_expr(node)
        except UnsupportedExpression as e:
            where = f"; {self.elsewhere} runs any" if self.elsewhere else ""
            raise self.error(f"query {self.query}: {self.who} cannot evaluate '{e}' (columns, "
                             "literals, comparisons, AND/OR/NOT, arithmetic, BETWEEN, IN, "
                             f"IS NULL only{where})") from None

    def text(self, text: str) -> Evaluator:
        return self.node(parse(text))

    def condition(self, used: frozenset[int], text: str) -> Condition:
        """A join condition, with its two columns when it equates columns of two items."""
        node = parse(text)
        while node.key == "paren":
            node = node.this
        equi = None
        if node.key == "eq" and node.left.key == "column" and node.right.key == "column":
            sides = [RENAMED.match(c.name) for c in (node.left, node.right)]
            if all(sides) and sides[0].group(1) != sides[1].group(1):
                equi = (node.left.name, node.right.name)
        return Condition(used, self.node(node), equi)


def parse(text: str) -> exp.Expression:
    """A prepared condition or SELECT item (Spark SQL) as a sqlglot tree."""
    return sqlglot.parse_one(text, dialect="spark")


def compile_expr(node: exp.Expression) -> Evaluator:
    """``node`` as a function of a frame holding the columns it names (see the module doc)."""
    if isinstance(node, exp.Paren | exp.Alias):
        return compile_expr(node.this)
    if isinstance(node, exp.Column):
        name = node.name
        return lambda f: f[name]
    if isinstance(node, exp.Literal):
        value: Any = node.this if node.is_string else float(node.this)
        if not node.is_string and value.is_integer() and "." not in node.this \
                and "e" not in node.this.lower():
            value = int(value)
        return lambda f: value
    if isinstance(node, exp.Boolean):
        flag = bool(node.this)
        return lambda f: flag
    if isinstance(node, exp.Neg):
        inner = compile_expr(node.this)
        return lambda f: -inner(f)
    if isinstance(node, exp.Not):
        inner = compile_expr(node.this)
        return lambda f: ~_series(inner(f), f).astype(bool)
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        inner = compile_expr(node.this)
        return lambda f: _series(inner(f), f).isna()
    if isinstance(node, exp.Between):
        x, lo, hi = (compile_expr(node.args[k]) for k in ("this", "low", "high"))
        return lambda f: (x(f) >= lo(f)) & (x(f) <= hi(f))
    if isinstance(node, exp.In) and node.expressions and not node.args.get("query"):
        x = compile_expr(node.this)
        items = [compile_expr(e) for e in node.expressions]
        return lambda f: _series(x(f), f).isin([i(f) for i in items])
    op = _BINARY.get(type(node))
    if op is not None:
        left, right = compile_expr(node.left), compile_expr(node.right)
        return lambda f: op(left(f), right(f))
    raise UnsupportedExpression(node.sql(dialect="spark"))


def _series(value: Any, frame: pd.DataFrame) -> pd.Series:
    """A scalar broadcast to the frame's rows (``NOT TRUE`` and the like)."""
    if isinstance(value, pd.Series):
        return value
    return pd.Series([value] * len(frame), index=frame.index)


def mask(evaluator: Evaluator, frame: pd.DataFrame) -> pd.Series:
    """A condition's rows as a boolean Series (a constant condition broadcast)."""
    return _series(evaluator(frame), frame).fillna(False).astype(bool)
