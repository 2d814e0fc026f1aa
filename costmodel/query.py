"""The logical query an optimizer works on: relations, filters, equi-joins, a final aggregate.

A query is what the SQL front-end (:mod:`reopt.costmodel.sql`) produces and what every
optimizer consumes. Relations are numbered in FROM order; relation ``i`` is bit ``1 << i`` of an
*expression*, the integer bitmask naming a set of relations (the paper's ``expr``). Bitmasks are
cheap to hash, to store in a Spark ``bigint`` column and to split with bit tricks.

Filter predicates are kept as a small tree (not SQL text) because cardinality estimation walks
them; anything the estimator cannot reason about is an :class:`Opaque` node with a default
selectivity.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from reopt.costmodel.joingraph import bits


@dataclass(frozen=True, order=True)
class ColumnRef:
    """A column of one relation of the query, addressed by alias (``o.o_custkey``)."""

    alias: str
    column: str

    def __str__(self) -> str:
        return f"{self.alias}.{self.column}"


@dataclass(frozen=True)
class Relation:
    """A base table occurrence in FROM: ``orders o`` is ``Relation("o", "orders")``."""

    alias: str
    table: str


# --- single-relation filter predicates ------------------------------------------------------

Value = int | float | str | None


@dataclass(frozen=True)
class Compare:
    """``col OP literal`` with OP one of ``= <> < <= > >=``."""

    column: ColumnRef
    op: str
    value: Value


@dataclass(frozen=True)
class Between:
    column: ColumnRef
    low: Value
    high: Value


@dataclass(frozen=True)
class InList:
    column: ColumnRef
    values: tuple[Value, ...]


@dataclass(frozen=True)
class Like:
    column: ColumnRef
    pattern: str


@dataclass(frozen=True)
class IsNull:
    column: ColumnRef


@dataclass(frozen=True)
class Or:
    items: tuple[Predicate, ...]


@dataclass(frozen=True)
class Not:
    item: Predicate


@dataclass(frozen=True)
class And:
    """A conjunction nested inside OR/NOT (top-level conjunctions are split into filters)."""

    items: tuple[Predicate, ...]


@dataclass(frozen=True)
class Opaque:
    """A single-relation condition the estimator does not model (e.g. ``a.x = a.y``)."""

    alias: str
    text: str


Predicate = Compare | Between | InList | Like | IsNull | Or | Not | And | Opaque


def predicate_aliases(p: Predicate) -> frozenset[str]:
    """The aliases a filter predicate mentions (always exactly one for a valid filter)."""
    if isinstance(p, (Or, And)):
        out: frozenset[str] = frozenset()
        for item in p.items:
            out |= predicate_aliases(item)
        return out
    if isinstance(p, Not):
        return predicate_aliases(p.item)
    if isinstance(p, Opaque):
        return frozenset({p.alias})
    return frozenset({p.column.alias})


# --- joins ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class JoinPredicate:
    """An equi-join ``left = right`` between two different relations, stored in sorted order."""

    left: ColumnRef
    right: ColumnRef

    @staticmethod
    def of(a: ColumnRef, b: ColumnRef) -> JoinPredicate:
        return JoinPredicate(*sorted((a, b)))

    @property
    def key(self) -> str:
        """Canonical text, the name a ``sel`` delta uses: ``a.x=b.y`` with sides sorted."""
        return f"{self.left}={self.right}"

    def __str__(self) -> str:
        return self.key


@dataclass(frozen=True)
class Query:
    """A select-project-join block with an optional final group-by / order-by.

    ``filters`` holds the top-level conjuncts that mention a single relation; ``joins`` the
    equi-join conjuncts. ``group_by``/``aggregates``/``order_by`` only decide whether (and how)
    the final operator above the join tree is costed.
    """

    name: str
    relations: tuple[Relation, ...]
    filters: tuple[Predicate, ...] = ()
    joins: tuple[JoinPredicate, ...] = ()
    group_by: tuple[ColumnRef, ...] = ()
    aggregates: bool = False
    order_by: tuple[ColumnRef, ...] = ()
    windows: tuple[tuple[str, float], ...] = ()
    """``(alias, seconds)`` for each FROM item written with a window clause
    (``FROM bids [RANGE 30 SECONDS] b``); a stream without one uses its catalog window."""
    output_columns: tuple[ColumnRef, ...] = field(default=(), compare=False)
    """The columns the select list, GROUP BY and ORDER BY read: with the join columns, what
    a join's rows carry above the scans (:meth:`carried_columns`). Empty for a query built
    without SQL."""
    sql: str = field(default="", compare=False)

    # -- addressing --------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return len(self.relations)

    @cached_property
    def aliases(self) -> tuple[str, ...]:
        return tuple(r.alias for r in self.relations)

    @property
    def all_mask(self) -> int:
        return (1 << self.n) - 1

    @cached_property
    def _positions(self) -> dict[str, int]:
        return {r.alias: i for i, r in enumerate(self.relations)}

    @cached_property
    def join_masks(self) -> tuple[int, ...]:
        """Each join predicate's two relations as a bitmask, in :attr:`joins` order."""
        bit = self.bit
        return tuple(bit(p.left.alias) | bit(p.right.alias) for p in self.joins)

    def index(self, alias: str) -> int:
        return self._positions[alias]

    def bit(self, alias: str) -> int:
        return 1 << self.index(alias)

    def mask(self, aliases: frozenset[str] | set[str] | list[str] | tuple[str, ...]) -> int:
        m = 0
        for a in aliases:
            m |= self.bit(a)
        return m

    def aliases_of(self, mask: int) -> tuple[str, ...]:
        """The aliases of the relations in ``mask``, in FROM order (made once per mask: a plan
        tree reads them for every node, after every update)."""
        hit = self._aliases_by_mask.get(mask)
        if hit is None:
            aliases = self.aliases
            hit = self._aliases_by_mask[mask] = tuple(aliases[j] for j in bits(mask))
        return hit

    @cached_property
    def _aliases_by_mask(self) -> dict[int, tuple[str, ...]]:
        """:meth:`aliases_of`'s answers so far."""
        return {}

    def table_of(self, alias: str) -> str:
        return self.relations[self._positions[alias]].table

    @cached_property
    def _filters_by_alias(self) -> dict[str, tuple[Predicate, ...]]:
        """Each alias's filters, in query order: estimation and the cost model ask for them
        on every plan space of the query (cached on this immutable query)."""
        out: dict[str, list[Predicate]] = {}
        for p in self.filters:
            for alias in predicate_aliases(p):
                out.setdefault(alias, []).append(p)
        return {a: tuple(ps) for a, ps in out.items()}

    def filters_of(self, alias: str) -> tuple[Predicate, ...]:
        return self._filters_by_alias.get(alias, ())

    @cached_property
    def _carried(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, dict[str, None]] = {a: {} for a in self.aliases}
        for p in self.joins:
            out[p.left.alias][p.left.column] = None
            out[p.right.alias][p.right.column] = None
        for c in self.output_columns:
            out[c.alias][c.column] = None
        return {a: tuple(cols) for a, cols in out.items()}

    def carried_columns(self, alias: str) -> tuple[str, ...]:
        """The columns of relation ``alias`` a row carries above its scan: its join columns
        and the columns the query's output reads (a column only its filters read is dropped
        after them, as Spark prunes it)."""
        return self._carried[alias]

    @cached_property
    def window_of(self) -> dict[str, float]:
        """Alias → the window its FROM item gives (only those written with one)."""
        return dict(self.windows)

    @property
    def has_final(self) -> bool:
        """Whether a final group-by / sort sits above the join tree."""
        return bool(self.group_by or self.aggregates or self.order_by)
