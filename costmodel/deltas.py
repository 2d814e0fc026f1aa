"""Cost deltas: what an executor (or a user) reports after observing a running plan.

Text form (also accepted as JSON, see :func:`parse_delta`)::

    card NAME *F          scale the rows (before filters) of a table (every alias) or one alias
    card NAME =N          set them
    card {A,B,…} *F       correction on a set of aliases: multiply its estimate, and every
                          superset's, by F
    card {A,B,…} =N       pick the factor that makes the set's estimate exactly N
    card {A,B,…} := N     an observation: the set's estimate IS N (clamped to [1, cross
                          product]), pinned until the set is observed again; never moved by
                          corrections or observations of subsets. ``card NAME := N`` is
                          ``card {NAME} := N`` (a relation's rows after its filters)
    sel A.x=B.y *F        scale a join predicate's selectivity (the result must stay <= 1)
    sel A.x=B.y =S        set it (0 < S <= 1)
    cost OPERATOR *F      scale an operator's local cost (e.g. ``cost hashjoin *2``)
    rate STREAM *F        scale a stream's arrival rate (tuples/s; ``STREAM`` a stream table
    rate STREAM =R        or an alias of one: the rate is the stream's, every alias of it)
    window NAME *F        scale the window of a stream alias (or of every alias of a stream
    window NAME =W        table); ``W`` in seconds, or with a unit: ``30s``, ``2m``, ``1h``

Wherever an alias is accepted (``A``, ``B``, a member of ``{…}``), so is the name of a table
that appears exactly once in the query: the built-in TPC-H queries name their relations by
table, and a user should not have to know which aliases a query's SQL chose.

Applying a delta returns new :class:`Adjustments`; nothing is mutated, so a delta that fails
validation leaves every optimizer exactly as it was. A delta naming something the query does
not have raises :class:`DeltaNotApplicable` (a :class:`DeltaError`): one query of a
multi-query run may legitimately lack what another has, so the CLI skips the query and
rejects the delta only when no query can use it.

Values are read strictly (:mod:`reopt.costmodel.numeric`), and a delta that cannot be honoured
within the limits that keep every estimate and cost finite is refused (:func:`apply_delta`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from reopt.costmodel.cardinality import Adjustments, Estimator, scaled_float
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.errors import DeltaError
from reopt.costmodel.numeric import (
    MAX_COST_FACTOR,
    MAX_ROWS,
    JsonDepthError,
    NumberError,
    OutOfRange,
    compact,
    finite_value,
    load_json,
    short_text,
    shown,
)
from reopt.costmodel.query import ColumnRef, JoinPredicate, Query

KINDS = ("card", "sel", "cost", "rate", "window")
STREAM_KINDS = ("rate", "window")
_WINDOW_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
"""Units a window delta's value may carry (``window bids =30s``); none means seconds."""
OBSERVE = ":="
"""The operator of an observation (``card {A,B} := N``)."""
OPS = ("*", "=", OBSERVE)
KEYS = ("kind", "target", "op", "value")
"""The keys of a delta's JSON object; any other is an error, as in the catalog."""
_TEXT = re.compile(r"^\s*(\w+)\s+(.+?)\s*(:=|[*=])\s*(\S+)\s*$")
_COLUMN = re.compile(r"^\s*(\w+)\.(\w+)\s*$")
_SEL_SLACK = 1e-9
"""How far above 1 a ``sel *F`` result may be and still mean 1: floating-point rounding."""


class DeltaNotApplicable(DeltaError):
    """The delta names something the query does not contain — a table, alias, set member or
    join predicate — so it is a no-op for that query (not malformed: another query of the
    same run may contain it). ``reason`` says what is missing, without the delta's text, so
    the CLI can report every query's reason in one line when no query can use the delta."""

    def __init__(self, delta: Delta, reason: str):
        super().__init__(f"delta '{delta}': {reason}")
        self.reason = reason


@dataclass(frozen=True)
class Delta:
    kind: str
    target: str
    op: str
    value: float
    text: str

    def __str__(self) -> str:
        return self.text

    @property
    def subject(self) -> str:
        """What the target names, for messages ("no query uses the join predicate it names")."""
        if self.kind == "sel":
            return "join predicate"
        if self.kind == "cost":
            return "operator"
        if self.kind in STREAM_KINDS:
            return "stream"
        return "relation set" if self.target.startswith("{") else "table or alias"

    @property
    def observation(self) -> bool:
        """An observed cardinality (``:=``), as opposed to a correction or a setting."""
        return self.op == OBSERVE


_NOT_FINITE = ("nan", "inf", "infinity")


def _number(text: str, raw: Any, *, zero: bool = False) -> float:
    """The delta's value: a finite positive number in strict syntax
    (:func:`~reopt.costmodel.numeric.finite_value`: ``1_000``, ``١٠``, ``nan`` are refused);
    with ``zero``, also 0 (an observation of an empty result)."""
    try:
        v = finite_value(raw)
    except OutOfRange as e:
        raise DeltaError(f"delta '{text}': the number must be finite and positive: {e}") from None
    except NumberError:
        if isinstance(raw, str) and raw.strip().lower().lstrip("+-") in _NOT_FINITE:
            raise DeltaError(
                f"delta '{text}': the number must be finite and positive, got {raw.strip()}"
            ) from None
        if isinstance(raw, str):
            raise DeltaError(f"delta '{text}': value '{raw}' is not a number (expected "
                             "ASCII digits, e.g. 2, 0.5 or 1e6)") from None
        got = "null" if raw is None else shown(raw)
        raise DeltaError(f"delta '{text}': value {got} is not a number") from None
    if v < 0 or (v == 0 and not zero):
        what = "at least 0" if zero else "positive"
        raise DeltaError(f"delta '{text}': the number must be finite and {what}, got {raw}")
    return v


def _dict_text(spec: dict) -> str:
    """A delta's JSON object as one line for messages; never fails (keys that do not sort,
    values JSON cannot write, nesting too deep for the encoder)."""
    try:
        return short_text(json.dumps(spec, sort_keys=True, allow_nan=False, default=shown,
                                     ensure_ascii=False), 200)
    except (TypeError, ValueError, RecursionError):
        return shown(spec)


def _from_dict(spec: dict[Any, Any]) -> tuple[str, Any, Any, Any, Any]:
    """The text and the four fields of a delta's JSON object: every key known, none missing,
    a string target and a value that is not a boolean."""
    text = _dict_text(spec)
    unknown = [k for k in spec if k not in KEYS]
    if unknown:
        raise DeltaError(
            f"delta {text}: unknown key {shown(unknown[0])} (expected {', '.join(KEYS)})"
        )
    missing = [k for k in KEYS if k not in spec]
    if missing:
        raise DeltaError(f"delta {text}: missing '{missing[0]}'")
    kind, target, op, raw = spec["kind"], spec["target"], spec["op"], spec["value"]
    if not isinstance(target, str):
        raise DeltaError(f"delta {text}: 'target' must be a string")
    if not isinstance(kind, str) or not isinstance(op, str):
        raise DeltaError(f"delta {text}: 'kind' and 'op' must be strings")
    if isinstance(raw, bool):
        raise DeltaError(f"delta {text}: 'value' is not a number")
    return text, kind, target, op, raw


def parse_delta(spec: str | dict[str, Any]) -> Delta:
    """Parse one delta from its text form or a JSON object
    ``{"kind": "card", "target": "orders", "op": "*", "value": 2}`` (exactly these keys)."""
    if isinstance(spec, dict):
        text, kind, target, op, raw = _from_dict(spec)
    elif isinstance(spec, str):
        text = short_text(spec, 200)  # for messages: a 5,000-digit factor stays readable
        m = _TEXT.match(spec.strip())
        if not m:
            raise DeltaError(
                f"delta '{text}': expected 'card|sel|cost TARGET *F', 'card|sel TARGET =N', "
                "'card TARGET := N' or 'rate|window STREAM *F|=N'"
            )
        kind, target, op, raw = m.groups()
    else:
        raise DeltaError(f"delta {shown(spec)}: expected text or a JSON object")
    kind = kind.lower()
    if kind not in KINDS:
        raise DeltaError(f"delta '{text}': unknown kind '{kind}' (expected card, sel, cost, "
                         "rate or window)")
    if op not in OPS:
        raise DeltaError(f"delta '{text}': operator must be '*', '=' or ':=', got '{op}'")
    if kind == "cost" and op != "*":
        raise DeltaError(f"delta '{text}': cost deltas scale (*F); they cannot set a value")
    if kind == "sel" and op == OBSERVE:
        raise DeltaError(f"delta '{text}': only cardinalities are observed ('card {{…}} := N'); "
                         "set a selectivity with '=S'")
    if kind in STREAM_KINDS and op == OBSERVE:
        raise DeltaError(f"delta '{text}': {kind} deltas scale (*F) or set (=N); only "
                         "cardinalities are observed (':=')")
    unit = 1.0
    if (kind == "window" and op == "=" and isinstance(raw, str)
            and raw[-1:].lower() in _WINDOW_UNITS):
        unit, raw = _WINDOW_UNITS[raw[-1].lower()], raw[:-1]
    value = _number(text, raw, zero=op == OBSERVE) * unit
    if not math.isfinite(value):  # (a window in hours near the float range)
        raise DeltaError(f"delta '{text}': the window must be a finite number of seconds")
    if kind == "sel" and op == "=" and value > 1:
        raise DeltaError(f"delta '{text}': a selectivity must be in (0, 1], got {raw}")
    return Delta(kind, target.strip(), op, value, spec.strip() if isinstance(spec, str) else text)


def _no_delta(what: str) -> DeltaError:
    """An empty batch is refused: taken as a step it would print (and time) a re-optimization
    that changed nothing, hiding a quoting mistake such as ``--delta "$UNSET"``. Whitespace
    is collapsed so the message stays one line."""
    one_line = " ".join(what.split())
    return DeltaError(f"{one_line} contains no delta (expected e.g. 'card orders *2')")


def _not_deltas(value: Any) -> DeltaError:
    """Anything else is refused by name rather than failing deep inside parsing (bytes would
    be iterated as integers, None is not iterable)."""
    got = "None" if value is None else f"{type(value).__name__} {shown(value)}"
    return DeltaError(f"deltas must be a string, a dict, a Delta or a list of them, got {got}")


def parse_deltas(spec: Any) -> list[Delta]:
    """Deltas from a text (one per line or ``;``-separated, or JSON), a JSON object, a
    :class:`Delta`, or a list (any iterable) of these, a text item possibly holding several:
    what ``--delta`` and ``Optimizer.update`` take. At least one (see :func:`_no_delta`); any
    other type is a :class:`DeltaError` naming it, so a caller's mistake is one clear line,
    never a TypeError from inside parsing."""
    if isinstance(spec, str):
        s = spec.strip()
        if not s.startswith(("[", "{")):
            out = [parse_delta(t) for t in re.split(r"[;\n]", s) if t.strip()]
            if not out:
                raise _no_delta(f"delta text '{s}'")
            return out
        try:
            spec = load_json(s)
        except json.JSONDecodeError as e:
            raise DeltaError(f"deltas: invalid JSON: {e.msg} at column {e.colno}") from None
        except JsonDepthError:
            raise DeltaError("deltas: invalid JSON: nested too deeply") from None
        if spec == []:
            raise _no_delta(f"delta text '{s}'")
    if isinstance(spec, (dict, Delta)):
        spec = [spec]
    if isinstance(spec, (bytes, bytearray, memoryview)) or not isinstance(spec, Iterable):
        raise _not_deltas(spec)
    out = [d for item in spec for d in _parse_item(item)]
    if not out:
        shown = f" {spec!r}" if isinstance(spec, (list, tuple)) else ""
        raise _no_delta(f"the delta list{shown}")
    return out


def _parse_item(item: Any) -> list[Delta]:
    """One element of a list of deltas."""
    if isinstance(item, Delta):
        return [item]
    if isinstance(item, dict):
        return [parse_delta(item)]
    if isinstance(item, str):
        return parse_deltas(item)
    raise _not_deltas(item)


def _alias(delta: Delta, query: Query, name: str) -> str | None:
    """The alias ``name`` stands for in ``query``: an alias itself (an alias wins over a table
    of the same name), else the one alias of the table ``name``. ``None`` when the query has
    no such relation (the delta may still apply to another query). A table under several
    aliases is refused, listing them: guessing which occurrence was meant would silently
    change the wrong estimate."""
    if name in query.aliases:
        return name
    aliases = [r.alias for r in query.relations if r.table == name]
    if len(aliases) > 1:
        raise DeltaError(
            f"delta '{delta}': '{name}' is ambiguous in query {query.name}: table {name} "
            f"appears as aliases {', '.join(aliases)}; name one of them"
        )
    return aliases[0] if aliases else None


def _aliases_in_set(delta: Delta, query: Query) -> frozenset[str]:
    inner = delta.target.strip()[1:-1]
    names = [a.strip().lower() for a in inner.split(",") if a.strip()]
    if not names:
        raise DeltaError(f"delta '{delta}': empty relation set")
    resolved = {a: _alias(delta, query, a) for a in names}  # ambiguity first: it is an error
    missing = [a for a, alias in resolved.items() if alias is None]
    if missing:
        listed = ", ".join(f"'{a}'" for a in missing)
        raise DeltaNotApplicable(delta, f"no relation {listed} in query {query.name}")
    return frozenset(resolved.values())


def _check_column(delta: Delta, query: Query, catalog: Catalog, alias: str, column: str) -> None:
    """A column its table does not have is a typo whatever the query (DeltaError), unlike a
    relation the query lacks; a column some join of the query uses always counts."""
    table = query.table_of(alias)
    if column in catalog.table(table).columns:
        return
    if any(ColumnRef(alias, column) in (p.left, p.right) for p in query.joins):
        return
    where = f"table '{table}'" + (f" (alias '{alias}')" if alias != table else "")
    raise DeltaError(f"delta '{delta}': {where} has no column '{column}'")


def _join_predicate(delta: Delta, query: Query, catalog: Catalog) -> JoinPredicate:
    sides = delta.target.split("=")
    if len(sides) != 2 or not all(_COLUMN.match(s) for s in sides):
        raise DeltaError(f"delta '{delta}': expected a join predicate 'A.x=B.y'")
    named = [ColumnRef(*(g.lower() for g in _COLUMN.match(s).groups())) for s in sides]
    aliases = [_alias(delta, query, r.alias) for r in named]
    for r, alias in zip(named, aliases, strict=True):
        if alias is not None:
            _check_column(delta, query, catalog, alias, r.column)
    missing = [r.alias for r, alias in zip(named, aliases, strict=True) if alias is None]
    if missing:
        listed = " or ".join(f"'{a}'" for a in dict.fromkeys(missing))
        raise DeltaNotApplicable(
            delta, f"no join predicate {JoinPredicate.of(*named).key} in query {query.name}, "
            f"which has no table or alias {listed}"
        )
    p = JoinPredicate.of(*(ColumnRef(a, r.column) for r, a in zip(named, aliases, strict=True)))
    if p not in query.joins:
        raise DeltaNotApplicable(delta, f"no join predicate {p.key} in query {query.name}")
    return p


def _selectivity(delta: Delta, p: JoinPredicate, value: float) -> float:
    """A join cannot return more rows than the cross product: a ``sel *F`` taking the
    selectivity above 1 is refused (``=S`` is checked when parsed)."""
    if value > 1 + _SEL_SLACK:
        raise DeltaError(
            f"delta '{delta}': the selectivity of {p.key} would be {value:.6g}, above 1"
        )
    return min(value, 1.0)


def apply_delta(
    delta: Delta,
    query: Query,
    catalog: Catalog,
    adj: Adjustments,
    operators: tuple[str, ...] = (),
) -> Adjustments:
    """The adjustments after ``delta``; raises :class:`DeltaError` and changes nothing on error
    (:class:`DeltaNotApplicable` when ``query`` does not contain what the delta names).

    ``operators`` are the physical operators of the cost model in use (for ``cost`` deltas).
    A delta that cannot be honoured within the limits that keep estimates and costs finite
    (README, "Cardinality estimation") is refused: rows above
    :data:`~reopt.costmodel.numeric.MAX_ROWS`, an operator factor above
    :data:`~reopt.costmodel.numeric.MAX_COST_FACTOR`, a factor that overflows or underflows.
    """
    if delta.kind == "cost":
        return _cost(delta, adj, operators)
    if delta.kind == "sel":
        return _sel(delta, query, catalog, adj)
    if delta.kind in STREAM_KINDS:
        return _stream(delta, query, catalog, adj)
    target = delta.target.strip()
    if delta.observation:
        return _observation(delta, query, adj)
    if target.startswith("{"):
        return _correction(delta, query, catalog, adj)
    after = _card(delta, query, catalog, adj)
    _check_rows(delta, query, catalog, adj, after)
    return after


def _cost(delta: Delta, adj: Adjustments, operators: tuple[str, ...]) -> Adjustments:
    op = delta.target.lower()
    if op not in operators:
        raise DeltaError(
            f"delta '{delta}': unknown operator '{op}' (choose from {', '.join(operators)})"
        )
    factors = dict(adj.op_factors)
    factors[op] = f = factors.get(op, 1.0) * delta.value
    if f > MAX_COST_FACTOR:
        raise DeltaError(
            f"delta '{delta}': the factor on {op} would be {compact(f)}, above the limit of "
            f"{compact(MAX_COST_FACTOR)} (costs must stay finite)"
        )
    if f == 0:
        raise DeltaError(f"delta '{delta}': the factor on {op} would underflow to 0")
    return adj.replace(op_factors=factors)


def _sel(delta: Delta, query: Query, catalog: Catalog, adj: Adjustments) -> Adjustments:
    p = _join_predicate(delta, query, catalog)
    f = delta.value
    if delta.op == "*":
        f = Estimator(query, catalog, adj).join_selectivity(p) * f
        if f == 0:
            raise DeltaError(f"delta '{delta}': the selectivity of {p.key} would underflow to 0")
    sels = dict(adj.selectivities)
    sels[p.key] = _selectivity(delta, p, f)
    return adj.replace(selectivities=sels)


def _correction(delta: Delta, query: Query, catalog: Catalog, adj: Adjustments) -> Adjustments:
    """``card {…} *F`` multiplies the set's correction; ``card {…} =N`` solves for the factor
    that makes the set's estimate N against the unclamped estimate without it, so N must be
    an estimate the set can have: within ``[1, cross product of its rows]``."""
    target = delta.target.strip()
    if not target.endswith("}"):
        raise DeltaError(f"delta '{delta}': unterminated relation set '{target}'")
    mask = query.mask(_aliases_in_set(delta, query))
    corr = dict(adj.corrections)
    if delta.op == "*":
        f = corr.get(mask, 1.0) * delta.value
    else:
        est = Estimator(query, catalog, adj)
        n, ceiling = delta.value, est.ceiling(mask)
        if n < 1:
            raise DeltaError(f"delta '{delta}': {compact(n)} rows is below 1, the least estimate")
        if n > ceiling:
            raise DeltaError(
                f"delta '{delta}': {compact(n)} rows is above {compact(ceiling)}, the most the "
                "set can have (the product of its relations' rows)"
            )
        m, e = est.unpinned_card(mask, without_correction=mask)
        if m == 0:
            raise DeltaError(f"delta '{delta}': the estimate without correction is 0")
        fm, fe = math.frexp(n / m)  # n / (m · 2**e), exactly as n / base while in range
        f = scaled_float((fm, fe - e))
    if not 0 < f < math.inf:
        raise DeltaError(
            f"delta '{delta}': the correction on the set would be {compact(f)}, beyond the "
            "float range"
        )
    corr[mask] = f
    return adj.replace(corrections=corr)


def _observation(delta: Delta, query: Query, adj: Adjustments) -> Adjustments:
    """``card {…} := N`` (or ``card NAME := N``): N rows observed for the set, kept as given and
    clamped when estimating (:meth:`~reopt.costmodel.cardinality.Estimator.pinned`), so a
    later change of the tables' rows clamps it anew; it replaces an earlier observation of
    the same set and leaves every other delta in force."""
    target = delta.target.strip()
    if target.startswith("{"):
        if not target.endswith("}"):
            raise DeltaError(f"delta '{delta}': unterminated relation set '{target}'")
        aliases = _aliases_in_set(delta, query)
    else:
        alias = _alias(delta, query, target.lower())
        if alias is None:
            raise DeltaNotApplicable(delta, f"no table or alias '{target.lower()}' in query "
                                     f"{query.name}")
        aliases = frozenset({alias})
    obs = dict(adj.observations)
    obs[query.mask(aliases)] = delta.value
    return adj.replace(observations=obs)


def _stream_table(delta: Delta, query: Query, catalog: Catalog) -> tuple[str, list[str]]:
    """The stream a ``rate``/``window`` delta names and the aliases it changes: an alias
    (rate: its stream, every alias of it; window: that alias) or a stream table (every alias
    of it). A name that is no stream is an error whatever the query; a stream the query does
    not read makes the delta not applicable to it."""
    name = delta.target.strip().lower()
    alias = name if name in query.aliases else None
    table = query.table_of(alias) if alias else name
    if table not in catalog.tables:
        raise DeltaNotApplicable(delta, f"no table or alias '{name}' in query {query.name}")
    if not catalog.table(table).is_stream:
        raise DeltaError(f"delta '{delta}': '{table}' is a table, not a stream (only a catalog "
                         f"entry with a 'rate' is one); {delta.kind} deltas name a stream")
    aliases = [r.alias for r in query.relations if r.table == table]
    if not aliases:
        raise DeltaNotApplicable(delta, f"query {query.name} does not read stream '{table}'")
    if delta.kind == "window" and alias:
        aliases = [alias]
    return table, aliases


def _stream(delta: Delta, query: Query, catalog: Catalog, adj: Adjustments) -> Adjustments:
    """``rate STREAM *F|=R`` sets the stream's arrival rate, ``window NAME *F|=W`` the window
    of its aliases; refused when a window would hold more than
    :data:`~reopt.costmodel.numeric.MAX_ROWS` tuples or a factor underflows to 0."""
    table, aliases = _stream_table(delta, query, catalog)
    est = Estimator(query, catalog, adj)
    if delta.kind == "rate":
        rate = delta.value if delta.op == "=" else est.arrival_rate(aliases[0]) * delta.value
        after = adj.replace(stream_rates={**adj.stream_rates, table: rate})
    else:
        windows = dict(adj.windows)
        for a in aliases:
            windows[a] = delta.value if delta.op == "=" else est.window(a) * delta.value
        after = adj.replace(windows=windows)
    new = Estimator(query, catalog, after)
    for a in aliases:
        rate, window = new.arrival_rate(a), new.window(a)
        if rate == 0 or window == 0:
            raise DeltaError(f"delta '{delta}': the {delta.kind} of '{a}' would underflow to 0")
        if not rate * window <= MAX_ROWS or not math.isfinite(window):
            raise DeltaError(
                f"delta '{delta}': the window of '{a}' would hold {compact(rate * window)} "
                f"tuples, above the limit of {compact(MAX_ROWS)} (estimates must stay finite)")
    return after


def _card(delta: Delta, query: Query, catalog: Catalog, adj: Adjustments) -> Adjustments:
    """``card NAME *F`` / ``=N`` on an alias (its factor) or a table (its rows)."""
    f, setting = delta.value, delta.op == "="
    name = delta.target.strip().lower()
    table = query.table_of(name) if name in query.aliases else name
    if table in catalog.tables and catalog.table(table).is_stream:
        raise DeltaError(f"delta '{delta}': '{name}' is a stream, whose rows are rate × window; "
                         "change them with a rate or window delta")
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
        raise DeltaNotApplicable(delta, f"query {query.name} does not use table '{name}'")
    raise DeltaNotApplicable(delta, f"no table or alias '{name}' in query {query.name}")


def _rows(query: Query, catalog: Catalog, adj: Adjustments, alias: str) -> float:
    """An alias's rows before filters under ``adj``, unclamped (what a delta asks for)."""
    table = query.table_of(alias)
    rows = adj.table_rows.get(table, catalog.table(table).rows)
    return rows * adj.alias_factors.get(alias, 1.0)


def _check_rows(delta: Delta, query: Query, catalog: Catalog, before: Adjustments,
                after: Adjustments) -> None:
    """Refuse a ``card`` delta that takes a relation above
    :data:`~reopt.costmodel.numeric.MAX_ROWS` rows, or to 0 rows from a positive count (a
    factor that underflows)."""
    for alias in query.aliases:
        rows = _rows(query, catalog, after, alias)
        where = f"'{alias}'" + (f" (table {query.table_of(alias)})"
                                if alias != query.table_of(alias) else "")
        if not rows <= MAX_ROWS:
            raise DeltaError(
                f"delta '{delta}': {where} would have {compact(rows)} rows, above the limit of "
                f"{compact(MAX_ROWS)} (estimates and costs must stay finite)"
            )
        if rows == 0 and _rows(query, catalog, before, alias) > 0:
            raise DeltaError(f"delta '{delta}': {where} would have 0 rows (the factor underflows)")


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
