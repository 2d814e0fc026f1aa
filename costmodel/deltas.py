"""Cost deltas: what an executor (or a user) reports after observing a running plan.

Text form (also accepted as JSON, see :func:`parse_delta`)::

    card NAME *F          scale the rows (before filters) of a table (every alias) or one alias
    card NAME =N          set them
    card {A,B,…} *F       correction on a set of aliases: multiply its estimate, and every
                          superset's, by F
    card {A,B,…} =N       pick the factor that makes the set's estimate exactly N
    sel A.x=B.y *F        scale a join predicate's selectivity
    sel A.x=B.y =S        set it (0 < S <= 1)
    cost OPERATOR *F      scale an operator's local cost (e.g. ``cost hashjoin *2``)

Applying a delta returns new :class:`Adjustments`; nothing is mutated, so a delta that fails
validation leaves every optimizer exactly as it was.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from reopt.costmodel.cardinality import Adjustments, Estimator
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.errors import DeltaError
from reopt.costmodel.query import ColumnRef, JoinPredicate, Query

KINDS = ("card", "sel", "cost")
_TEXT = re.compile(r"^\s*(\w+)\s+(.+?)\s*([*=])\s*(\S+)\s*$")
_COLUMN = re.compile(r"^\s*(\w+)\.(\w+)\s*$")


class DeltaNotApplicable(DeltaError):
    """The delta names a catalog table the query does not use (a no-op for that query)."""


@dataclass(frozen=True)
class Delta:
    kind: str
    target: str
    op: str
    value: float
    text: str

    def __str__(self) -> str:
        return self.text


def _number(text: str, raw: Any) -> float:
    try:
        v = float(raw)
    except (TypeError, ValueError):
        raise DeltaError(f"delta '{text}': '{raw}' is not a number") from None
    if not math.isfinite(v) or v <= 0:
        raise DeltaError(f"delta '{text}': the number must be finite and positive, got {raw}")
    return v


def parse_delta(spec: str | dict[str, Any]) -> Delta:
    """Parse one delta from its text form or a JSON object
    ``{"kind": "card", "target": "orders", "op": "*", "value": 2}``."""
    if isinstance(spec, dict):
        text = json.dumps(spec, sort_keys=True)
        missing = [k for k in ("kind", "target", "op", "value") if k not in spec]
        if missing:
            raise DeltaError(f"delta {text}: missing '{missing[0]}'")
        kind, target, op, raw = spec["kind"], spec["target"], spec["op"], spec["value"]
        if not isinstance(target, str):
            raise DeltaError(f"delta {text}: 'target' must be a string")
        if isinstance(raw, bool):
            raise DeltaError(f"delta {text}: 'value' is not a number")
    elif isinstance(spec, str):
        text = spec.strip()
        m = _TEXT.match(text)
        if not m:
            raise DeltaError(
                f"delta '{text}': expected 'card|sel|cost TARGET *F' or 'card|sel TARGET =N'"
            )
        kind, target, op, raw = m.groups()
    else:
        raise DeltaError(f"delta {spec!r}: expected text or a JSON object")
    kind = str(kind).lower()
    if kind not in KINDS:
        raise DeltaError(f"delta '{text}': unknown kind '{kind}' (expected card, sel or cost)")
    if op not in ("*", "="):
        raise DeltaError(f"delta '{text}': operator must be '*' or '=', got '{op}'")
    if kind == "cost" and op != "*":
        raise DeltaError(f"delta '{text}': cost deltas scale (*F); they cannot set a value")
    value = _number(text, raw)
    if kind == "sel" and op == "=" and value > 1:
        raise DeltaError(f"delta '{text}': a selectivity must be in (0, 1], got {raw}")
    return Delta(kind, target.strip(), op, value, text)


def parse_deltas(spec: str | list | dict) -> list[Delta]:
    """Deltas from a text (one per line or ``;``-separated), a JSON text, or a JSON list."""
    if isinstance(spec, str):
        s = spec.strip()
        if s.startswith(("[", "{")):
            try:
                spec = json.loads(s)
            except json.JSONDecodeError as e:
                raise DeltaError(f"deltas: invalid JSON: {e.msg} at column {e.colno}") from None
        else:
            return [parse_delta(t) for t in re.split(r"[;\n]", s) if t.strip()]
    if isinstance(spec, dict):
        spec = [spec]
    return [parse_delta(d) for d in spec]


def _aliases_in_set(delta: Delta, query: Query) -> frozenset[str]:
    inner = delta.target.strip()[1:-1]
    names = [a.strip().lower() for a in inner.split(",") if a.strip()]
    if not names:
        raise DeltaError(f"delta '{delta}': empty relation set")
    for a in names:
        if a not in query.aliases:
            raise DeltaError(f"delta '{delta}': no relation '{a}' in query {query.name}")
    return frozenset(names)


def _join_predicate(delta: Delta, query: Query) -> JoinPredicate:
    sides = delta.target.split("=")
    if len(sides) != 2 or not all(_COLUMN.match(s) for s in sides):
        raise DeltaError(f"delta '{delta}': expected a join predicate 'A.x=B.y'")
    refs = [ColumnRef(*(g.lower() for g in _COLUMN.match(s).groups())) for s in sides]
    p = JoinPredicate.of(*refs)
    if p not in query.joins:
        raise DeltaError(f"delta '{delta}': no join predicate {p.key} in query {query.name}")
    return p


def apply_delta(
    delta: Delta,
    query: Query,
    catalog: Catalog,
    adj: Adjustments,
    operators: tuple[str, ...] = (),
) -> Adjustments:
    """The adjustments after ``delta``; raises :class:`DeltaError` and changes nothing on error.

    ``operators`` are the physical operators of the cost model in use (for ``cost`` deltas).
    """
    f, setting = delta.value, delta.op == "="
    if delta.kind == "cost":
        op = delta.target.lower()
        if op not in operators:
            raise DeltaError(
                f"delta '{delta}': unknown operator '{op}' (choose from {', '.join(operators)})"
            )
        factors = dict(adj.op_factors)
        factors[op] = factors.get(op, 1.0) * f
        return adj.replace(op_factors=factors)
    if delta.kind == "sel":
        p = _join_predicate(delta, query)
        est = Estimator(query, catalog, adj)
        sels = dict(adj.selectivities)
        sels[p.key] = f if setting else est.join_selectivity(p) * f
        return adj.replace(selectivities=sels)
    # card
    target = delta.target.strip()
    if target.startswith("{"):
        if not target.endswith("}"):
            raise DeltaError(f"delta '{delta}': unterminated relation set '{target}'")
        mask = query.mask(_aliases_in_set(delta, query))
        corr = dict(adj.corrections)
        if setting:
            base = Estimator(query, catalog, adj).card(mask, without_correction=mask)
            if base <= 0:
                raise DeltaError(f"delta '{delta}': the estimate without correction is 0")
            corr[mask] = f / base
        else:
            corr[mask] = corr.get(mask, 1.0) * f
        return adj.replace(corrections=corr)
    name = target.lower()
    if name in query.aliases:
        factors = dict(adj.alias_factors)
        if setting:
            table = query.table_of(name)
            rows = adj.table_rows.get(table, catalog.table(table).rows)
            if rows <= 0:
                raise DeltaError(f"delta '{delta}': table '{table}' has 0 rows; set the table")
            factors[name] = f / rows
        else:
            factors[name] = factors.get(name, 1.0) * f
        return adj.replace(alias_factors=factors)
    tables = {r.table for r in query.relations}
    if name in tables:
        rows = dict(adj.table_rows)
        factors = dict(adj.alias_factors)
        if setting:
            rows[name] = f
            for r in query.relations:
                if r.table == name:
                    factors.pop(r.alias, None)
        else:
            rows[name] = rows.get(name, catalog.table(name).rows) * f
        return adj.replace(table_rows=rows, alias_factors=factors)
    if name in catalog.tables:
        raise DeltaNotApplicable(f"delta '{delta}': query {query.name} does not use table '{name}'")
    raise DeltaError(f"delta '{delta}': no table or alias '{name}' in query {query.name}")


def apply_deltas(
    deltas: list[Delta],
    query: Query,
    catalog: Catalog,
    adj: Adjustments,
    operators: tuple[str, ...] = (),
) -> Adjustments:
    """Apply a batch in order; all or nothing."""
    for d in deltas:
        adj = apply_delta(d, query, catalog, adj, operators)
    return adj
