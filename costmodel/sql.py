"""SQL front-end: one SELECT-FROM-WHERE block becomes a :class:`~reopt.costmodel.query.Query`.

The optimizer reasons only about select-project-join blocks with conjunctive equi-joins, plus
a final GROUP BY / aggregate / ORDER BY that merely decides whether a final operator is costed.
The front-end therefore accepts exactly that shape and rejects everything else with a
:class:`QueryError` naming the construct and where it is: silently approximating an unsupported
construct would make the optimizer plan a different query than the one the user wrote.

sqlglot does the parsing; this module walks its tree. Positions come from two places: the
``meta`` sqlglot attaches to identifiers, literals and function names (``start`` is a character
offset into the SQL text), and the token stream, for keywords such as ``LEFT`` or ``HAVING`` that
have no tree node carrying a position. sqlglot's own syntax-error messages are written for its
developers (``Required keyword: 'this' missing for <class '...Where'>``); they are reworded here
from the token it stopped at, so the user reads ``expected a condition after 'WHERE'``.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from decimal import Decimal, DivisionByZero, InvalidOperation
from functools import cached_property
from typing import TypeVar

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, SqlglotError, TokenError
from sqlglot.optimizer.simplify import simplify
from sqlglot.tokens import Token, TokenType

from reopt.costmodel.cardinality import not_a_date
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.errors import QueryError
from reopt.costmodel.numeric import NumberError, OutOfRange, compact, exact_number, short_text
from reopt.costmodel.query import (
    And,
    Between,
    ColumnRef,
    Compare,
    InList,
    IsNull,
    JoinPredicate,
    Like,
    Not,
    Opaque,
    Or,
    Predicate,
    Query,
    Relation,
    Value,
)

__all__ = ["parse_query"]


def parse_query(
    sql: str, catalog: Catalog, name: str = "query", *, source: str | os.PathLike | None = None
) -> Query:
    """Parse one SELECT block over ``catalog``'s tables into a :class:`Query` named ``name``.

    ``source`` is where the text came from, for error messages: a path (``os.PathLike``) for a
    file, so errors read ``bad.sql:5:3: …`` like a compiler's; a label for other text
    (``"SQL text"`` gives ``SQL text: line 1, column 22: …``); by default ``query NAME``.

    Top-level conjuncts of WHERE and of every ``JOIN ... ON`` are split: single-relation ones
    become ``Query.filters`` (in text order, ON conditions first), equi-joins between two
    relations become ``Query.joins`` (each distinct predicate once).

    GROUP BY items and ORDER BY items may be columns, select-list aliases, ordinals or
    expressions; each is recorded as the base columns it mentions. An ORDER BY item that involves
    an aggregate (``ORDER BY revenue DESC`` with ``revenue = sum(...)``) records *nothing*: the
    sort key is the aggregate's output, not a base column, and recording its inputs would claim
    an interesting order the plan cannot provide. ``has_final`` stays true for such a query
    because the aggregate sets ``aggregates``. The only ORDER BY that leaves the query without a
    final operator is one over constants, which sorts nothing.

    A single-relation condition of a shape the estimator does not model (``o.a = o.b``,
    ``upper(o.c) = 'X'``, ``o.c ILIKE 'x'``) becomes :class:`Opaque`; the optimizer then uses a
    default selectivity instead of rejecting an otherwise plannable query.

    A literal compared with a column whose statistics are dates must be an ISO date: with
    ``o_orderdate < 'yesterday'`` the estimate would silently fall back to a default selectivity.

    Numbers are read strictly (:mod:`reopt.costmodel.numeric`): a literal, or a constant
    expression, beyond the float range (``1e400``, 400 digits) is an error at its position. A
    UTF-8 byte-order mark at the start of the text is ignored. Deep nesting is parsed with
    :data:`RECURSION_FRAMES` of Python recursion (sqlglot recurses per parenthesis and per
    ``NOT``); deeper text, and a condition nested more than :data:`MAX_CONDITION_DEPTH` deep
    after flattening ``AND``/``OR`` chains, parentheses and double negations, is an error
    naming its depth — everything downstream (estimation, hashing, pickling to Spark) then
    works within Python's default recursion limit.

    Raises :class:`QueryError` (one line, with the position where known) for syntax errors,
    unknown/ambiguous names, invalid date literals and every construct outside the supported
    subset.
    """
    parser = _Parser(sql.removeprefix("\ufeff"), catalog, name, source)
    with _recursion_frames(RECURSION_FRAMES):
        try:
            return parser.parse()
        except RecursionError:
            raise parser.too_deep() from None


_WINDOW_UNITS = {"SECOND": 1.0, "SECONDS": 1.0, "MINUTE": 60.0, "MINUTES": 60.0,
                 "HOUR": 3600.0, "HOURS": 3600.0}
"""The units of a window clause, in seconds."""

RECURSION_FRAMES = 50_000
"""Python frames a parse may use. sqlglot's parser takes about 20 frames per nested parenthesis
and 9 per ``NOT``, so the default limit of 1000 fails at some 50 parentheses; Python 3.11 runs
pure-Python recursion without growing the C stack, so this many frames (some 2,500
parentheses) is safe. Deeper text is a :class:`QueryError` naming its depth."""
MAX_CONDITION_DEPTH = 100
"""How deep a filter's ``AND``/``OR``/``NOT`` tree may nest (chains of one operator are flat,
parentheses and double negations vanish): the estimator, ``hash`` and ``pickle`` recurse
over it within Python's default limit."""


@contextmanager
def _recursion_frames(frames: int) -> Iterator[None]:
    """Allow at least ``frames`` Python frames inside the block, then restore the limit."""
    old = sys.getrecursionlimit()
    if old < frames:
        sys.setrecursionlimit(frames)
    try:
        yield
    finally:
        if old < frames:
            sys.setrecursionlimit(old)


# --- constants ------------------------------------------------------------------------------

_COMPARISONS: dict[type[exp.Expression], str] = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}
_FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}

#: SELECT clauses the front-end understands; any other non-empty clause is rejected.
_ACCEPTED_CLAUSES = frozenset({"expressions", "from_", "joins", "where", "group", "order"})
_CLAUSE_NAMES = {
    "with_": "WITH",
    "distinct": "DISTINCT",
    "having": "HAVING",
    "limit": "LIMIT",
    "offset": "OFFSET",
    "qualify": "QUALIFY",
    "windows": "WINDOW",
    "into": "INTO",
    "locks": "FOR UPDATE",
    "sample": "TABLESAMPLE",
    "laterals": "LATERAL",
    "kind": "SELECT AS",
    "hint": "optimizer hint",
    "connect": "CONNECT BY",
    "prewhere": "PREWHERE",
    "distribute": "DISTRIBUTE BY",
    "sort": "SORT BY",
    "cluster": "CLUSTER BY",
    "pivots": "PIVOT",
    "match": "MATCH_RECOGNIZE",
}
_TABLE_ARG_NAMES = {
    "db": "schema-qualified table",
    "catalog": "schema-qualified table",
    "joins": "parenthesized join",
    "sample": "TABLESAMPLE",
    "hints": "table hint",
    "pivots": "PIVOT",
    "laterals": "LATERAL",
    "version": "time travel",
    "system_time": "time travel",
}
_JOIN_WORDS = frozenset(
    {"LEFT", "RIGHT", "FULL", "OUTER", "INNER", "CROSS", "NATURAL", "SEMI", "ANTI", "ASOF"}
)
_OTHER_NODES: dict[type[exp.Expression], str] = {
    exp.Window: "window function",
    exp.Lateral: "LATERAL",
    exp.Unnest: "UNNEST",
    exp.Values: "VALUES",
    exp.Rollup: "ROLLUP",
    exp.Cube: "CUBE",
    exp.GroupingSets: "GROUPING SETS",
    exp.Pivot: "PIVOT",
}

#: What text the tokenizer could not read starts with, and what it then is.
_UNTERMINATED = (
    ("'", "unterminated string"),
    ('"', "unterminated quoted name"),
    ("`", "unterminated quoted name"),
    ("[", "unterminated quoted name"),
    ("/*", "unterminated comment"),
    ("$", "unterminated dollar-quoted string"),
)
_REQUIRED = re.compile(r"Required keyword: '(\w+)' missing for <class '(?:[\w.]*\.)?(\w+)'>")
_EXPECTED_NAME = re.compile(r"Expected (\w+) name but got\b")
_EXPECTING = re.compile(r"Expect(?:ing|ed) ([^\w\s]+|[A-Z]+)$")  # a token: ``)``, ``IN``
#: sqlglot classes whose missing operand is a condition (the rest take an expression).
_CONDITION_NODES = frozenset({"Where", "Having", "Qualify", "And", "Or", "Xor", "Not"})

_UNKNOWN = object()

_T = TypeVar("_T")


# --- the parser -----------------------------------------------------------------------------


class _Parser:
    """State for parsing one query: the SQL text (for positions) and the FROM relations."""

    def __init__(
        self, sql: str, catalog: Catalog, name: str, source: str | os.PathLike | None = None
    ) -> None:
        self.sql = sql
        self.text = sql
        """The query as written (:attr:`sql` loses its window clauses)."""
        self.catalog = catalog
        self.name = name
        self.source = source
        self._windows: dict[int, tuple[float, int]] = {}
        """Offset of a window clause's ``[`` → (its seconds, the offset just past its
        ``]``); :meth:`_cut_windows` blanks the clauses out of :attr:`sql` (same length, so
        every offset stays where it was) before sqlglot parses the text."""
        self._original_tokens: list[Token] = []
        self._cut_windows()
        self.windows: list[tuple[str, float]] = []
        self.relations: list[Relation] = []
        self.by_alias: dict[str, Relation] = {}
        self.items: list[exp.Expression] = []  # select list, aliases stripped
        self.outputs: dict[str, exp.Expression] = {}  # select-list alias -> expression
        self.output_columns: list[ColumnRef] = []
        """Columns the select list, GROUP BY and ORDER BY read (``*`` and ``x.*``: every
        column of the relations): :attr:`~reopt.costmodel.query.Query.output_columns`."""

    def parse(self) -> Query:
        root = self._parse_statement()
        select = self._check_statement(root)
        self._check_clauses(select)
        self._check_nodes(select)
        on_conditions = self._read_from(select)
        self._check_windows_used()
        aggregates = self._read_select_list(select)
        where = select.args.get("where")
        conditions = [("ON", c) for c in on_conditions]
        if where is not None:
            conditions.append(("WHERE", where.this))
        filters, joins = self._read_conditions(conditions)
        group_by = self._read_group_by(select)
        order_by, order_aggregates = self._read_order_by(select)
        return Query(
            name=self.name,
            relations=tuple(self.relations),
            filters=tuple(filters),
            joins=tuple(joins),
            group_by=tuple(_unique(group_by)),
            aggregates=aggregates or order_aggregates,
            order_by=tuple(_unique(order_by)),
            windows=tuple(self.windows),
            output_columns=tuple(_unique(self.output_columns)),
            sql=self.text,
        )

    # -- window clauses ----------------------------------------------------------------------
    def _cut_windows(self) -> None:
        """Find the window clauses (``[RANGE <n> SECONDS|MINUTES|HOURS]``) in the token
        stream (so brackets inside string literals are left alone), record them and blank
        them out of the text sqlglot parses; :meth:`_add_relation` attaches each to the table
        name right before it. Text that does not tokenize is left to the parser's errors."""
        try:
            tokens = sqlglot.tokenize(self.sql)
        except SqlglotError:
            return
        self._original_tokens = tokens
        text = list(self.sql)
        for i, t in enumerate(tokens):
            if t.token_type != TokenType.L_BRACKET or i + 1 >= len(tokens):
                continue
            if tokens[i + 1].text.upper() != "RANGE":
                continue
            clause = tokens[i:i + 5]
            ok = (len(clause) == 5 and clause[2].token_type == TokenType.NUMBER
                  and clause[3].text.upper() in _WINDOW_UNITS
                  and clause[4].token_type == TokenType.R_BRACKET)
            if not ok:
                raise self._error("window clause: expected [RANGE <n> SECONDS|MINUTES|HOURS] "
                                  "after a stream's name", t.start)
            try:
                n = exact_number(clause[2].text)
            except (NumberError, OutOfRange):
                n = 0
            seconds = float(n) * _WINDOW_UNITS[clause[3].text.upper()]
            if not 0 < seconds < math.inf:
                raise self._error(f"window clause: the window must be a finite number of "
                                  f"seconds above 0, got {clause[2].text}", clause[2].start)
            item = tokens[i - 2].token_type if i >= 2 else None
            if item not in (TokenType.FROM, TokenType.COMMA, TokenType.JOIN):
                raise self._misplaced(t.start)  # not right after the name of a FROM item
            end = clause[4].end + 1
            self._windows[t.start] = (seconds, end)
            text[t.start:end] = [c if c == "\n" else " " for c in text[t.start:end]]
        self.sql = "".join(text)

    def _window_after(self, table: exp.Table) -> float | None:
        """The window clause right after ``table``'s name (consumed), or None."""
        anchor = _anchor(table.this)
        tokens = self._original_tokens
        for i, t in enumerate(tokens[:-1]):
            if t.start == anchor:
                hit = self._windows.pop(tokens[i + 1].start, None)
                return None if hit is None else hit[0]
        return None

    def _check_windows_used(self) -> None:
        """A window clause not right after a table name in FROM is misplaced."""
        for start in self._windows:
            raise self._misplaced(start)

    def _misplaced(self, start: int) -> QueryError:
        return self._error("window clause: [RANGE …] goes right after a stream's name in "
                           "FROM (FROM bids [RANGE 30 SECONDS] b)", start)

    # -- errors and positions ----------------------------------------------------------------
    def _error_at(self, line: int | None, col: int | None, message: str) -> QueryError:
        known = line is not None and col is not None
        if isinstance(self.source, os.PathLike):
            where = f":{line}:{col}" if known else ""
            return QueryError(f"{os.fspath(self.source)}{where}: {message}")
        label = self.source if self.source is not None else f"query {self.name}"
        where = f"line {line}, column {col}: " if known else ""
        return QueryError(f"{label}: {where}{message}")

    def _error(self, message: str, offset: int | None = None) -> QueryError:
        if offset is None:
            return self._error_at(None, None, message)
        line = self.sql.count("\n", 0, offset) + 1
        col = offset - (self.sql.rfind("\n", 0, offset) + 1) + 1
        return self._error_at(line, col, message)

    def _unsupported(self, construct: str, offset: int | None) -> QueryError:
        return self._error(f"unsupported construct {construct}", offset)

    def too_deep(self) -> QueryError:
        """The error for text nested deeper than :data:`RECURSION_FRAMES` allow, naming how
        deep its parentheses and ``NOT`` chains go (the tokenizer does not recurse)."""
        depth = deepest = nots = longest = 0
        at: int | None = None
        try:
            tokens = self._tokens
        except Exception:  # untokenizable text cannot have parsed this far; be safe anyway
            tokens = []
        for token in tokens:
            kind = token.token_type
            depth += kind == TokenType.L_PAREN
            depth -= kind == TokenType.R_PAREN
            nots = nots + 1 if kind == TokenType.NOT else 0
            if depth > deepest or nots > longest:
                at = token.start
            deepest, longest = max(deepest, depth), max(longest, nots)
        return self._error(
            f"the query is nested too deeply to parse ({deepest} levels of parentheses, "
            f"{longest} NOTs in a row)", at)

    @cached_property
    def _tokens(self) -> list[Token]:
        return sqlglot.tokenize(self.sql)

    def _keyword_offset(self, word: str) -> int | None:
        """Offset of ``word``'s first occurrence outside parentheses (else anywhere)."""
        depth, anywhere = 0, None
        for token in self._tokens:
            if token.token_type == TokenType.L_PAREN:
                depth += 1
            elif token.token_type == TokenType.R_PAREN:
                depth -= 1
            elif token.text.upper() == word:
                if depth == 0:
                    return token.start
                anywhere = token.start if anywhere is None else anywhere
        return anywhere

    def _keyword_before(self, word: str, offset: int | None) -> int | None:
        """Offset of the last ``word`` token at or before ``offset``."""
        if offset is None:
            return None
        hits = [t.start for t in self._tokens if t.start <= offset and t.text.upper() == word]
        return hits[-1] if hits else offset

    def _keyword_after(self, word: str, offset: int | None) -> int | None:
        """Offset of the first ``word`` token after ``offset``."""
        if offset is None:
            return None
        hits = [t.start for t in self._tokens if t.start > offset and t.text.upper() == word]
        return hits[0] if hits else offset

    # -- statement level ---------------------------------------------------------------------
    def _parse_statement(self) -> exp.Expression:
        dialect = Dialect.get_or_raise(None)
        parser = dialect.parser()  # what sqlglot.parse does, keeping the parser to ask it below
        try:
            parsed = parser.parse(dialect.tokenize(self.sql), self.sql)
            statements = [s for s in parsed if s is not None]
        except ParseError as e:
            # Whether sqlglot ran out of tokens: then the token it names is the last one it read,
            # not one that stood where something else was expected. Its current token is then
            # None (a falsy sentinel in sqlglot 30); private, hence the fallback: None lets
            # _parse_error judge by the token's place.
            current = getattr(parser, "_curr", _UNKNOWN)
            ran_out = None if current is _UNKNOWN else not current
            raise self._parse_error(e, ran_out) from None
        except TokenError:
            raise self._token_error() from None
        except SqlglotError as e:
            raise self._error(f"syntax error: {_without_reprs(_one_line(str(e)))}") from None
        if not statements:
            raise self._error("empty query")
        if len(statements) > 1:
            raise self._unsupported("multiple statements", self._second_statement_offset())
        root = statements[0]
        # ``(SELECT ...)`` is the same query as ``SELECT ...``.
        while isinstance(root, exp.Subquery) and _set_args(root) == {"this"}:
            root = root.this
        return root

    def _parse_error(self, e: ParseError, ran_out: bool | None = None) -> QueryError:
        """A syntax error at the start of the token sqlglot stopped at, in words.

        sqlglot reports the token's *last* line and column; the token with that end is looked up
        in the token stream, so the position is its first character and the message can name it
        and the token before it. ``ran_out``: sqlglot read every token of the statement, so the
        token is the last one it read (``SELECT * FROM t WHERE``: ``'WHERE'``) and what is
        missing is missing after it; None when unknown (then: the statement ends there).
        """
        info = e.errors[0] if e.errors else {}
        line, col = info.get("line"), info.get("col")
        description = _one_line(info.get("description") or str(e))
        index = next(
            (i for i, t in enumerate(self._tokens) if (t.line, t.col) == (line, col)), None
        )
        if index is None:  # not a token of the text: keep sqlglot's position, drop its reprs
            return self._error_at(line, col, f"syntax error: {_without_reprs(description)}")
        token = self._tokens[index]
        after = self._tokens[index + 1] if index + 1 < len(self._tokens) else None
        at_end = after is None or after.token_type == TokenType.SEMICOLON
        if ran_out is not None:
            at_end = ran_out
        before = self._token_text(self._tokens[index - 1]) if index > 0 else None
        message = _syntax_message(description, self._token_text(token), before, at_end)
        return self._error(f"syntax error: {message}", token.start)

    def _token_text(self, token: Token) -> str:
        """``token`` as written (quotes included), quoted for a message; long ones shortened."""
        text = _one_line(self.sql[token.start : token.end + 1])
        return repr(text if len(text) <= 30 else text[:29] + "…")

    def _token_error(self) -> QueryError:
        """Point at the text the tokenizer could not read (an unterminated string, quoted
        identifier or comment): the first non-blank character after the last good token.
        sqlglot's own message only says where it gave up, usually the end of the text."""
        tokenizer = Dialect.get_or_raise(None).tokenizer()
        try:
            tokenizer.tokenize(self.sql)
        except TokenError:
            pass
        done = tokenizer.tokens[-1].end + 1 if tokenizer.tokens else 0
        rest = self.sql[done:]
        offset = done + len(rest) - len(rest.lstrip())
        near = self.sql[offset : offset + 20].split("\n")[0]
        what = next((w for start, w in _UNTERMINATED if near.startswith(start)), "cannot read")
        return self._error(f"syntax error: {what} {near!r}", offset)

    def _second_statement_offset(self) -> int | None:
        seen_statement = seen_separator = False
        for token in self._tokens:
            if token.token_type == TokenType.SEMICOLON:
                seen_separator = seen_statement
            elif seen_separator:
                return token.start
            else:
                seen_statement = True
        return None

    def _check_statement(self, root: exp.Expression) -> exp.Select:
        if isinstance(root, exp.SetOperation):
            word = type(root).__name__.upper()  # Union, Intersect, Except
            raise self._unsupported(word, self._keyword_offset(word))
        if not isinstance(root, exp.Select):
            first = self._tokens[0] if self._tokens else None
            what = first.text.upper() if first else type(root).__name__.upper()
            raise self._unsupported(f"{what} statement", first.start if first else None)
        return root

    def _check_clauses(self, select: exp.Select) -> None:
        """Reject SELECT clauses outside the subset (HAVING, LIMIT, DISTINCT, WITH, ...)."""
        for key, value in select.args.items():
            if not value or key in _ACCEPTED_CLAUSES:
                continue
            if key == "limit" and isinstance(value, exp.Fetch):
                construct = "FETCH"
            elif key == "distinct" and value.args.get("on"):
                construct = "DISTINCT ON"
            else:
                construct = _CLAUSE_NAMES.get(key, key.rstrip("_").upper())
            offset = self._keyword_offset(construct.split()[0])
            raise self._unsupported(construct, _first(offset, _anchor(value)))

    def _check_nodes(self, select: exp.Select) -> None:
        """Reject constructs that may appear anywhere in the tree: subqueries, windows, ..."""
        for node in select.walk():
            if node is select:
                continue
            if isinstance(node, exp.Subquery) and not isinstance(node.this, exp.Query):
                offset = self._keyword_before("(", _anchor(node))
                raise self._unsupported("parenthesized join", offset)
            if isinstance(node, (exp.Subquery, exp.Query, exp.Exists)):
                raise self._unsupported("subquery", self._keyword_before("SELECT", _anchor(node)))
            if isinstance(node, exp.Table) and not isinstance(node.this, exp.Identifier):
                raise self._unsupported("table function", _anchor(node))
            for node_type, construct in _OTHER_NODES.items():
                if isinstance(node, node_type):
                    offset = _anchor(node)
                    if construct.isupper():  # a keyword (LATERAL, ROLLUP, ...) starts it
                        offset = self._keyword_before(construct.split()[0], offset)
                    raise self._unsupported(construct, offset)

    # -- FROM --------------------------------------------------------------------------------
    def _read_from(self, select: exp.Select) -> list[exp.Expression]:
        """Record the FROM relations; return the ON conditions of explicit joins."""
        from_ = select.args.get("from_")
        if from_ is None:
            raise self._unsupported("SELECT without FROM", self._tokens[0].start)
        self._add_relation(from_.this)
        on_conditions: list[exp.Expression] = []
        for join in select.args.get("joins") or []:
            self._check_join(join)
            self._add_relation(join.this)
            if join.args.get("on") is not None:
                on_conditions.append(join.args["on"])
        return on_conditions

    def _check_join(self, join: exp.Join) -> None:
        offset, written = self._join_keywords(join)
        construct = _join_construct(join)
        if construct is not None:
            if written and written != construct:
                construct = f"{construct} ({written})"
            raise self._unsupported(construct, offset)
        if join.args.get("using"):
            raise self._unsupported("USING", self._keyword_after("USING", _anchor(join.this)))
        if join.args.get("on") is None and written != ",":
            raise self._unsupported("JOIN without ON", offset)

    def _join_keywords(self, join: exp.Join) -> tuple[int | None, str]:
        """Where the join's keywords start and how they were written (``,`` for a comma join).

        sqlglot gives ``FROM a, b`` and ``FROM a JOIN b`` the same tree, so the tokens decide.
        """
        anchor = _anchor(join.this)
        if anchor is None:
            return None, ""
        tokens = [t for t in self._tokens if t.start < anchor]
        for i in range(len(tokens) - 1, -1, -1):
            if tokens[i].token_type == TokenType.COMMA:
                return tokens[i].start, ","
            if tokens[i].token_type == TokenType.JOIN:
                first = i
                while first > 0 and tokens[first - 1].text.upper() in _JOIN_WORDS:
                    first -= 1
                words = " ".join(t.text.upper() for t in tokens[first : i + 1])
                return tokens[first].start, words
        return anchor, ""

    def _add_relation(self, table: exp.Expression) -> None:
        if not isinstance(table, exp.Table):
            raise self._unsupported(f"{type(table).__name__} in FROM", _anchor(table))
        for key, value in table.args.items():
            if value and key not in ("this", "alias"):
                construct = _TABLE_ARG_NAMES.get(key, f"{key} on a table")
                offset = _anchor(table)
                if construct.isupper():  # a keyword after the table name: TABLESAMPLE, PIVOT
                    offset = self._keyword_after(construct, offset)
                raise self._unsupported(f"{construct} '{table.sql()}'", offset)
        alias_node = table.args.get("alias")
        if alias_node is not None and alias_node.columns:
            raise self._unsupported("column alias list", _anchor(alias_node))
        name = table.name.lower()
        if name not in self.catalog.tables:
            raise self._error(f"unknown table '{name}'", _anchor(table.this))
        alias = (table.alias or name).lower()
        if alias in self.by_alias:
            offset = _first(_anchor(alias_node), _anchor(table))
            raise self._error(f"duplicate alias '{alias}'", offset)
        relation = Relation(alias, name)
        stats = self.catalog.tables[name]
        window = self._window_after(table)
        if window is not None and not stats.is_stream:
            raise self._error(f"window on table '{name}', which is not a stream (only a catalog "
                              "entry with a 'rate' is one)", _anchor(table.this))
        if stats.is_stream and window is None and stats.window is None:
            raise self._error(f"stream '{name}' has no window: write FROM {name} [RANGE <n> "
                              "SECONDS] or give it a 'window' in the catalog",
                              _anchor(table.this))
        if window is not None:
            self.windows.append((alias, window))
        self.relations.append(relation)
        self.by_alias[alias] = relation

    # -- names -------------------------------------------------------------------------------
    def _owners(self, column: str) -> list[Relation]:
        """The FROM relations whose table has ``column`` (FROM order)."""
        return [r for r in self.relations if column in self.catalog.tables[r.table].columns]

    def _resolve(self, column: exp.Column) -> ColumnRef:
        name = column.name.lower()
        offset = _anchor(column)
        if column.args.get("db") or column.args.get("catalog"):
            raise self._unsupported(f"qualified column name '{column.sql()}'", offset)
        qualifier = column.table.lower()
        if qualifier:
            relation = self.by_alias.get(qualifier)
            if relation is None:
                raise self._error(
                    f"unknown column '{qualifier}.{name}' (no relation '{qualifier}' in FROM)",
                    offset,
                )
            if name not in self.catalog.tables[relation.table].columns:
                raise self._error(f"unknown column '{qualifier}.{name}'", offset)
            return ColumnRef(qualifier, name)
        owners = self._owners(name)
        if not owners:
            raise self._error(f"unknown column '{name}'", offset)
        if len(owners) > 1:
            aliases = ", ".join(r.alias for r in owners)
            raise self._error(f"ambiguous column '{name}' (in {aliases})", offset)
        return ColumnRef(owners[0].alias, name)

    def _refs(self, e: exp.Expression) -> list[ColumnRef]:
        """Resolve every column in ``e`` (text order); ``x.*`` only checks that ``x`` exists."""
        refs: list[ColumnRef] = []
        for column in sorted(e.find_all(exp.Column), key=_sort_key):
            if isinstance(column.this, exp.Star):
                qualifier = column.table.lower()
                if qualifier not in self.by_alias:
                    message = f"unknown relation '{qualifier}' in '{column.sql()}'"
                    raise self._error(message, _anchor(column))
                continue
            refs.append(self._resolve(column))
        return refs

    def _starred(self, e: exp.Expression) -> list[ColumnRef]:
        """Every column ``*`` (all relations) or ``x.*`` (relation ``x``) in ``e`` stands for,
        in FROM and catalog order."""
        if isinstance(e, exp.Star):
            relations = self.relations
        else:
            relations = [self.by_alias[c.table.lower()] for c in e.find_all(exp.Column)
                         if isinstance(c.this, exp.Star)]
        return [ColumnRef(r.alias, c) for r in relations
                for c in self.catalog.tables[r.table].columns]

    # -- WHERE / ON --------------------------------------------------------------------------
    def _read_conditions(
        self, conditions: list[tuple[str, exp.Expression]]
    ) -> tuple[list[Predicate], list[JoinPredicate]]:
        filters: list[Predicate] = []
        joins: list[JoinPredicate] = []
        for clause, condition in conditions:
            for conjunct in _conjuncts(condition):
                self._reject_aggregate(conjunct, clause)
                aliases = _unique(ref.alias for ref in self._refs(conjunct))
                if not aliases:
                    construct = f"constant condition '{conjunct.sql()}'"
                    raise self._unsupported(construct, _anchor(conjunct))
                if len(aliases) == 1:
                    filters.append(self._checked_depth(
                        self._predicate(conjunct, aliases[0]), conjunct))
                    continue
                join = self._join_predicate(conjunct)
                if join not in joins:
                    joins.append(join)
        return filters, joins

    def _checked_depth(self, p: Predicate, conjunct: exp.Expression) -> Predicate:
        """``p``, unless it nests deeper than :data:`MAX_CONDITION_DEPTH` (an error at the
        condition naming its depth)."""
        depth = _depth(p)
        if depth > MAX_CONDITION_DEPTH:
            raise self._error(
                f"condition nested {depth} levels deep (AND, OR and NOT within each other; "
                f"the limit is {MAX_CONDITION_DEPTH})", _anchor(conjunct))
        return p

    def _reject_aggregate(self, e: exp.Expression, clause: str) -> None:
        aggregate = e.find(exp.AggFunc)
        if aggregate is not None:
            offset = _first(_anchor(aggregate), _anchor(e))
            raise self._unsupported(f"aggregate function in {clause}", offset)

    def _join_predicate(self, conjunct: exp.Expression) -> JoinPredicate:
        """A conjunct over two or more relations must be ``a.x = b.y``."""
        e = _unparen(conjunct)
        offset = _anchor(e)
        if isinstance(e, exp.EQ):
            left, right = _unparen(e.this), _unparen(e.expression)
            if isinstance(left, exp.Column) and isinstance(right, exp.Column):
                return JoinPredicate.of(self._resolve(left), self._resolve(right))
            raise self._unsupported(f"join predicate over expressions '{e.sql()}'", offset)
        if isinstance(e, exp.Or):
            raise self._unsupported("OR across relations", offset)
        if isinstance(e, exp.Not):
            raise self._unsupported("NOT across relations", offset)
        raise self._unsupported(f"non-equi join predicate '{e.sql()}'", offset)

    def _predicate(self, e: exp.Expression, alias: str) -> Predicate:
        """Map a condition over the single relation ``alias`` to a filter predicate.

        Parentheses and chains of ``NOT`` are read in a loop, not by recursion, and an even
        number of negations cancels (``NOT NOT c`` is ``c``), so 2,000 ``NOT``s are one level.
        """
        negated = False
        e = _unparen(e)
        while isinstance(e, exp.Not):
            negated, e = not negated, _unparen(e.this)
        p = self._positive_predicate(e, alias)
        return _negation(p) if negated else p

    def _positive_predicate(self, e: exp.Expression, alias: str) -> Predicate:
        """:meth:`_predicate` of a condition that is not a ``NOT``."""
        if e.args.get("negate"):  # sqlglot writes ``x NOT LIKE p`` as Like(negate=True)
            positive = e.copy()
            positive.set("negate", None)
            inner = self._predicate(positive, alias)
            return Opaque(alias, e.sql()) if isinstance(inner, Opaque) else _negation(inner)
        if isinstance(e, exp.And):
            return And(tuple(self._predicate(c, alias) for c in _flatten(e, exp.And)))
        if isinstance(e, exp.Or):
            return Or(tuple(self._predicate(c, alias) for c in _flatten(e, exp.Or)))
        try:
            leaf = self._leaf(e)
        except _NotConstant:
            leaf = None
        except _OutOfRange as big:
            raise self._error(
                f"{big.text} is out of range (a float holds at most "
                f"±{compact(sys.float_info.max)})", _first(_anchor(big.node), _anchor(e))
            ) from None
        return leaf if leaf is not None else Opaque(alias, e.sql())

    def _leaf(self, e: exp.Expression) -> Predicate | None:
        """A modelled leaf predicate; None (or _NotConstant) when ``e`` has another shape."""
        if type(e) in _COMPARISONS:
            return self._compare(e, _COMPARISONS[type(e)])
        column = _unparen(e.this) if isinstance(e.this, exp.Expression) else None
        if not isinstance(column, exp.Column):
            return None
        if isinstance(e, exp.Between) and not e.args.get("symmetric"):
            ref = self._resolve(column)
            low = self._literal(ref, e.args["low"])
            return Between(ref, low, self._literal(ref, e.args["high"]))
        if isinstance(e, exp.In) and _set_args(e) == {"this", "expressions"}:
            ref = self._resolve(column)
            return InList(ref, tuple(self._literal(ref, v) for v in e.expressions))
        if isinstance(e, exp.In) and _set_args(e) == {"this"}:
            raise self._unsupported("empty IN list", _anchor(e))
        if isinstance(e, exp.Like) and _set_args(e) == {"this", "expression"}:
            pattern = _constant(e.expression)
            return Like(self._resolve(column), pattern) if isinstance(pattern, str) else None
        if isinstance(e, exp.Is) and isinstance(e.expression, exp.Null):
            return IsNull(self._resolve(column))
        return None

    def _compare(self, e: exp.Expression, op: str) -> Compare | None:
        """``col OP constant``, or ``constant OP col`` with the operator flipped."""
        left, right = _unparen(e.this), _unparen(e.expression)
        for column, other, oriented in ((left, right, op), (right, left, _FLIPPED[op])):
            if isinstance(column, exp.Column) and not isinstance(other, exp.Column):
                ref = self._resolve(column)
                return Compare(ref, oriented, self._literal(ref, other))
        return None

    def _literal(self, ref: ColumnRef, e: exp.Expression) -> Value:
        """The constant ``e`` compared with column ``ref``; raises :class:`_NotConstant`, and
        for a literal a date column cannot take (:func:`not_a_date`) an error at its position."""
        value = _constant(e)
        table = self.by_alias[ref.alias].table
        why = not_a_date(value, ref, table, self.catalog.tables[table].columns.get(ref.column))
        if why is not None:
            raise self._error(why, _anchor(e))
        return value

    # -- SELECT / GROUP BY / ORDER BY --------------------------------------------------------
    def _read_select_list(self, select: exp.Select) -> bool:
        """Resolve the select list, remember its aliases; return whether it aggregates."""
        aggregates = False
        for item in select.expressions:
            e = item.this if isinstance(item, exp.Alias) else item
            if isinstance(item, exp.Alias):
                self.outputs.setdefault(item.alias.lower(), e)
            self.output_columns += self._refs(e) + self._starred(e)
            aggregates = aggregates or e.find(exp.AggFunc) is not None
            self.items.append(e)
        return aggregates

    def _output_target(
        self, e: exp.Expression, clause: str, *, prefer_output: bool
    ) -> exp.Expression | None:
        """What a GROUP BY / ORDER BY item stands for: an ordinal or a select-list alias is
        replaced by the select-list expression; ``None`` for an ordinal naming ``*``.

        ORDER BY prefers select-list aliases over input columns (SQL standard), GROUP BY the
        input columns (as PostgreSQL does).
        """
        if isinstance(e, exp.Literal) and not e.is_string and e.is_int:
            position = int(e.this) if len(e.this) < 20 else 0  # a long one is out of range too
            if not 1 <= position <= len(self.items):
                message = f"{clause} position {short_text(e.this)} is not in the select list"
                raise self._error(message, _anchor(e))
            target = self.items[position - 1]
            return None if isinstance(target, exp.Star) else target
        if isinstance(e, exp.Column) and not e.table and isinstance(e.this, exp.Identifier):
            name = e.name.lower()
            if name in self.outputs and (prefer_output or not self._owners(name)):
                return self.outputs[name]
        return e

    def _read_group_by(self, select: exp.Select) -> list[ColumnRef]:
        group = select.args.get("group")
        if group is None:
            return []
        for key, value in group.args.items():
            if value and key != "expressions":
                construct = f"GROUP BY {key.upper().replace('_', ' ')}"
                raise self._unsupported(construct, self._keyword_offset("GROUP"))
        refs: list[ColumnRef] = []
        for e in group.expressions:
            target = self._output_target(e, "GROUP BY", prefer_output=False)
            if target is not None:
                self._reject_aggregate(target, "GROUP BY")
                refs.extend(self._refs(target))
        self.output_columns += refs
        return refs

    def _read_order_by(self, select: exp.Select) -> tuple[list[ColumnRef], bool]:
        """ORDER BY columns, and whether an ORDER BY item aggregates (see :func:`parse_query`)."""
        order = select.args.get("order")
        refs: list[ColumnRef] = []
        aggregates = False
        for ordered in order.expressions if order is not None else []:
            target = self._output_target(ordered.this, "ORDER BY", prefer_output=True)
            if target is None:
                continue
            columns = self._refs(target)
            self.output_columns += columns
            if target.find(exp.AggFunc) is not None:
                aggregates = True
            else:
                refs.extend(columns)
        return refs, aggregates


# --- tree helpers ---------------------------------------------------------------------------


def _anchor(node: object) -> int | None:
    """The smallest source offset sqlglot recorded inside ``node`` (or a list of nodes)."""
    roots = node if isinstance(node, list) else [node]
    starts = [
        n.meta["start"]
        for root in roots
        if isinstance(root, exp.Expression)
        for n in root.walk()
        if "start" in n.meta
    ]
    return min(starts) if starts else None


def _sort_key(node: exp.Expression) -> int:
    anchor = _anchor(node)
    return -1 if anchor is None else anchor


def _first(*offsets: int | None) -> int | None:
    """The first known offset (0 is a valid offset, so ``or`` will not do)."""
    return next((o for o in offsets if o is not None), None)


def _set_args(e: exp.Expression) -> set[str]:
    return {k for k, v in e.args.items() if v is not None and v is not False and v != []}


def _unparen(e: exp.Expression) -> exp.Expression:
    while isinstance(e, exp.Paren):
        e = e.this
    return e


def _flatten(e: exp.Expression, kind: type[exp.Expression]) -> Iterator[exp.Expression]:
    """The operands of a chain of ``kind`` (And/Or), looking through parentheses, in text
    order. A loop over an explicit stack: sqlglot builds a chain of 2,000 ``OR``s as a tree
    2,000 deep."""
    stack = [e]
    while stack:
        node = _unparen(stack.pop())
        if isinstance(node, kind):
            stack.append(node.expression)
            stack.append(node.this)
        else:
            yield node


def _negation(p: Predicate) -> Predicate:
    """``NOT p``, cancelling a double negation."""
    return p.item if isinstance(p, Not) else Not(p)


def _depth(p: Predicate) -> int:
    """How deep ``And``/``Or``/``Not`` nest in ``p`` (a leaf is 1), without recursion."""
    deepest, stack = 0, [(p, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if isinstance(node, (And, Or)):
            stack.extend((item, d + 1) for item in node.items)
        elif isinstance(node, Not):
            stack.append((node.item, d + 1))
    return deepest


def _conjuncts(e: exp.Expression) -> list[exp.Expression]:
    return list(_flatten(e, exp.And))


def _join_construct(join: exp.Join) -> str | None:
    """The unsupported kind of ``join`` (``OUTER JOIN``, ``CROSS JOIN``, ...), or None."""
    method, side, kind = join.method.upper(), join.side.upper(), join.kind.upper()
    if method:
        return f"{method} JOIN"
    if side:
        return "OUTER JOIN" if kind in ("", "OUTER") else f"{side} {kind} JOIN"
    if kind and kind != "INNER":
        return f"{kind} JOIN"
    for key, value in join.args.items():
        if value and key not in ("this", "on", "kind", "using"):
            return f"{key.rstrip('_').upper()} JOIN"
    return None


def _unique(items: Iterable[_T]) -> list[_T]:
    return list(dict.fromkeys(items))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _without_reprs(description: str) -> str:
    """sqlglot's description without the Python reprs it embeds (``<Token ...>``,
    ``<class ...>``), first letter lower-cased to follow ``syntax error:``."""
    text = re.sub(r"\s*(?:but got |for )?<[^<>]*>", "", description).strip().rstrip(".")
    return text[:1].lower() + text[1:] if text else "invalid SQL"


def _wanted(description: str) -> str | None:
    """What sqlglot was looking for, in words (``a table name``, ``')'``), if it says."""
    m = _REQUIRED.match(description)
    if m:
        arg, node = m.groups()
        if node == "Between":
            return "AND and an upper bound" if arg == "high" else "a lower bound"
        return "a condition" if node in _CONDITION_NODES else "an expression"
    m = _EXPECTED_NAME.match(description)
    if m:
        return f"a {m.group(1).lower()} name"
    m = _EXPECTING.match(description)
    if m:
        return repr(m.group(1))
    return None


def _syntax_message(description: str, token: str, before: str | None, at_end: bool) -> str:
    """One short sentence for a syntax error at ``token`` (quoted text), after ``before``.

    ``at_end``: nothing follows ``token`` in the statement, so whatever was missing was
    missing *after* it; otherwise ``token`` is what stood where something else was expected.
    """
    wanted = _wanted(description)
    if wanted is not None:
        if at_end:
            return f"expected {wanted} after {token}"
        if before is not None:
            return f"expected {wanted} after {before}, got {token}"
        return f"expected {wanted}, got {token}"
    if "<" in description or description.startswith("Invalid expression"):
        return f"unexpected {token}"
    return _without_reprs(description)


# --- constant folding -----------------------------------------------------------------------


class _NotConstant(Exception):
    """Raised while folding an expression that is not a literal constant."""


class _OutOfRange(Exception):
    """A literal or folded constant no float holds (``1e400``, 400 digits, ``1e300 * 1e300``):
    ``text`` names it, short, for the message; ``node`` is where it was written."""

    def __init__(self, text: str, node: exp.Expression):
        super().__init__(text)
        self.text = text
        self.node = node


_Number = int | Decimal
_LARGEST = Decimal(sys.float_info.max)


def _constant(e: exp.Expression) -> Value:
    """The literal value of ``e``; raises :class:`_NotConstant` if it has none, and
    :class:`_OutOfRange` for a number no float holds.

    Numbers fold exactly (``0.06 - 0.01`` is 0.05, not 0.049999...), integers stay int,
    everything else numeric becomes float; ``DATE '1994-01-01'`` is the string ``'1994-01-01'``.
    Date arithmetic (``DATE '1994-01-01' + INTERVAL '3' MONTH``) is left to sqlglot's simplifier.
    """
    try:
        return _value(_fold(e), e)
    except _NotConstant:
        if e.find(exp.Column) is not None:
            raise
    try:
        simplified = simplify(e.copy())
    except Exception:  # the simplifier is best effort; failing just means "not constant"
        raise _NotConstant from None
    return _value(_fold(simplified), e)


def _value(v: _Number | str | None, e: exp.Expression) -> Value:
    if isinstance(v, Decimal):
        f = float(v)
        if abs(f) == float("inf"):  # just above the largest float, rounded up
            raise _OutOfRange(short_text(str(v)), e)
        return f
    return v


def _fold(e: exp.Expression) -> _Number | str | None:
    if isinstance(e, exp.Paren):
        return _fold(e.this)
    if isinstance(e, exp.Null):
        return None
    if isinstance(e, exp.Literal):
        return e.this if e.is_string else _number(e.this, e)
    if isinstance(e, exp.Neg):
        return -_numeric(_fold(e.this))
    if isinstance(e, exp.Cast):
        return _fold_cast(e)
    if isinstance(e, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
        return _arithmetic(e, _numeric(_fold(e.this)), _numeric(_fold(e.expression)))
    raise _NotConstant


def _fold_cast(e: exp.Cast) -> _Number | str:
    """``CAST('1994-01-01' AS DATE)`` (and ``DATE '...'``) is the date string; numeric casts
    of a constant are its number (a string in strict number syntax only: not ``'1_000'``)."""
    inner = _fold(e.this)
    if e.to.is_type(*exp.DataType.TEMPORAL_TYPES, *exp.DataType.TEXT_TYPES):
        if isinstance(inner, str):
            return inner
    elif e.to.is_type(*exp.DataType.NUMERIC_TYPES) and inner is not None:
        return inner if not isinstance(inner, str) else _number(inner, e)
    raise _NotConstant


def _number(text: str, e: exp.Expression) -> _Number:
    """A number literal, exactly (:func:`~reopt.costmodel.numeric.exact_number`)."""
    try:
        return exact_number(text)
    except OutOfRange:
        raise _OutOfRange(short_text(text), e) from None
    except NumberError:
        raise _NotConstant from None


def _numeric(v: object) -> _Number:
    if isinstance(v, bool) or not isinstance(v, (int, Decimal)):
        raise _NotConstant
    return v


def _arithmetic(e: exp.Expression, a: _Number, b: _Number) -> _Number:
    """``a OP b``; integer results stay int except for division, which is always fractional.
    A result no float holds is :class:`_OutOfRange` at once, so a long chain of products
    never builds a huge integer."""
    try:
        if isinstance(e, exp.Add):
            v = a + b
        elif isinstance(e, exp.Sub):
            v = a - b
        elif isinstance(e, exp.Mul):
            v = a * b
        else:
            v = Decimal(a) / Decimal(b)
    except (ZeroDivisionError, DivisionByZero, InvalidOperation):
        raise _NotConstant from None
    if abs(v) > _LARGEST:
        raise _OutOfRange(f"the value of {short_text(e.sql(), 60)}", e)
    return v


def sql_without_windows(sql: str, catalog: Catalog) -> str:
    """``sql`` with its window clauses blanked out (same length, offsets kept): the text a
    SQL engine without CQL's windows reads (the stream executor runs it on Spark)."""
    return _Parser(sql.removeprefix("\ufeff"), catalog, "query").sql
