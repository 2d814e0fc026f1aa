"""The plan space of one query: the paper's built-in functions, shared by every optimizer.

An OR node is an (expression, property) pair; an AND node is an :class:`Alt`, one row of the
paper's SearchSpace relation ``(expr, prop, index, logOp, phyOp, lExpr, lProp, rExpr, rProp)``.
:class:`PlanSpace` answers the questions the datalog rules ask through built-in functions:

==========================  ====================================================
``Fn_isleaf(expr)``         :meth:`PlanSpace.is_leaf`
``Fn_split(expr, prop, m)`` :meth:`PlanSpace.join_alternatives` (method ``m``)
``Fn_phyOp(expr, prop)``    :meth:`PlanSpace.scan_alternatives`
enforcers / final op        :meth:`PlanSpace.enforcer_alternatives`, :meth:`final_alternatives`
``Fn_*summary``             :meth:`PlanSpace.summary` (estimated rows)
``Fn_*cost``                :meth:`PlanSpace.local_cost`
``Fn_sum``                  :func:`plan_cost`
==========================  ====================================================

The procedural optimizers call exactly these, so all optimizers search the same space and cost
every plan with the same floating-point operations.

Expressions are bitmasks over the query's relations. Valid expressions are the connected
subsets of one component of the join graph, and unions of whole components: a disconnected
query is planned with cross products between components only. The final group-by/sort (``io``
model, when the query has one) is a unary operator over the pseudo-expression
:attr:`PlanSpace.top` (all relations plus one extra bit).

Properties are strings: ``any`` (no requirement), ``sort:<class>`` (sorted on a join-column
equivalence class, named by its smallest member ``alias.column``) and ``probe:<class>`` (the
inner of an index nested-loop join: an index on that class's column).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Iterator
from functools import cached_property, reduce
from itertools import repeat
from operator import or_
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from reopt.costmodel import widths
from reopt.costmodel.cardinality import (
    NO_ADJUSTMENTS,
    Adjustments,
    Estimator,
    changed_factors,
)
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.errors import OptimizerError, QueryError
from reopt.costmodel.joingraph import MAX_RELATIONS, JoinGraph, bits
from reopt.costmodel.query import ColumnRef, Query

if TYPE_CHECKING:
    from reopt.costmodel.models import CostModel

ANY = "any"
NONE = ""
"""The property of an absent child."""
_NO_LEFTS: list[int] = []
PREFETCH_FROM = 64
"""The fewest csgs for which a plan space estimates them all in one vectorized call before
its first local costs (:meth:`PlanSpace.local_costs`)."""


class Alt(NamedTuple):
    """An AND node: one plan alternative for an (expression, property) OR node."""

    expr: int
    prop: str
    index: int
    log_op: str
    phy_op: str
    left: int = 0
    left_prop: str = NONE
    right: int = 0
    right_prop: str = NONE

    @property
    def children(self) -> tuple[tuple[int, str], ...]:
        out = []
        if self.left:
            out.append((self.left, self.left_prop))
        if self.right:
            out.append((self.right, self.right_prop))
        return tuple(out)


class AltColumns(NamedTuple):
    """One OR node's alternatives as columns: every field of :class:`Alt` but the node's own
    ``expr`` and ``prop``, one list each, in the order of :meth:`PlanSpace.alternatives`.

    The batch form the optimizers loop over and the built-ins answer from: a node's joins
    are built as a few lists, not an object per alternative; :meth:`rows` makes the
    :class:`Alt` objects when a caller wants them."""

    index: list[int]
    log_op: list[str]
    phy_op: list[str]
    left: list[int]
    left_prop: list[str]
    right: list[int]
    right_prop: list[str]

    @staticmethod
    def of(alts: list[Alt]) -> AltColumns:
        """The columns of a list of alternatives (of one OR node)."""
        if not alts:
            return NO_COLUMNS
        return AltColumns(*map(list, list(zip(*alts, strict=True))[2:]))

    @staticmethod
    def concat(parts: list[AltColumns]) -> AltColumns:
        parts = [p for p in parts if p.index]
        if not parts:
            return NO_COLUMNS
        if len(parts) == 1:
            return parts[0]
        return AltColumns(*([x for p in parts for x in p[f]] for f in range(7)))

    @property
    def count(self) -> int:
        return len(self.index)

    def rows(self, expr: int, prop: str) -> list[Alt]:
        """The alternatives as :class:`Alt` objects (built in C: zip makes the fields,
        ``tuple.__new__`` the Alt, without the Python-level ``__new__`` of a NamedTuple)."""
        k = len(self.index)
        return list(map(tuple.__new__, repeat(Alt, k),
                        zip(repeat(expr, k), repeat(prop, k), *self, strict=False)))


NO_COLUMNS = AltColumns([], [], [], [], [], [], [])


def plan_cost(local: float, left: float | None = None, right: float | None = None) -> float:
    """``Fn_sum``: a plan's cost is its local cost plus its children's plan costs.

    Every optimizer adds in this order so equal plans get bit-identical costs.
    """
    c = local
    if left is not None:
        c = c + left
    if right is not None:
        c = c + right
    return c


def fold_bits(masks: np.ndarray, images: list[int], combine: np.ufunc = np.bitwise_or
              ) -> np.ndarray:
    """For each bitset of ``masks`` (``int64``), ``combine`` (OR, or XOR) of ``images[k]``
    over its set bits ``k`` (0 for none; ``images`` are non-negative ``int64`` values, bits
    past them absent): a bitset mapped through a table of 256 values per byte, one look-up
    per byte of ``len(images)`` bits instead of a pass per bit."""
    out = np.zeros(len(masks), dtype=np.int64)
    byte = np.arange(256, dtype=np.int64)
    for low in range(0, len(images), 8):
        table = np.zeros(256, dtype=np.int64)
        for j, image in enumerate(images[low:low + 8]):
            table = np.where(byte >> j & 1 == 1, combine(table, image), table)
        combine(out, table[(masks >> low) & 255], out=out)
    return out


def popcount(x: int) -> int:
    return x.bit_count()


def sort_prop(cls: str) -> str:
    return f"sort:{cls}"


def probe_prop(cls: str) -> str:
    return f"probe:{cls}"


def prop_class(prop: str) -> str:
    return prop.split(":", 1)[1]


class CrossingPredicate(NamedTuple):
    left_bit: int
    right_bit: int
    left: ColumnRef
    right: ColumnRef
    cls: str


class PlanSpace:
    """The search space of one query under one cost model and one set of statistics."""

    # what a space carries over between statistics (set in __init__; here for the spaces of
    # older pickles, which lack them)
    greedy: Any = None
    _greedy_before: tuple[Any, Callable[[int], bool]] | None = None
    _local_before: tuple[dict[Alt, float], Callable[[int], bool]] | None = None

    def __init__(
        self,
        query: Query,
        catalog: Catalog,
        model: CostModel,
        adjustments: Adjustments | None = None,
    ):
        if query.n > MAX_RELATIONS:
            raise QueryError(
                f"query {query.name}: it joins {query.n} relations; reopt plans at most "
                f"{MAX_RELATIONS} (relation sets are 64-bit bitsets)")
        self.query = query
        self.catalog = catalog
        self.model = model
        self.adjustments = adjustments or NO_ADJUSTMENTS
        self.estimator = Estimator(query, catalog, self.adjustments)
        n = query.n
        self.all = query.all_mask
        self.top = self.all | (1 << n)
        neighbors = [0] * n
        for both in query.join_masks:
            for i in bits(both):
                neighbors[i] |= both
        self.graph = JoinGraph(n, [nb & ~(1 << i) for i, nb in enumerate(neighbors)])
        """The join graph's csgs and csg-cmp pairs (statistics-independent, enumerated once)."""
        self.components = self.graph.components
        # structure (statistics-independent): shared by with_adjustments()
        self._alts: dict[tuple[int, str], list[Alt]] = {}
        self._cols: dict[tuple[int, str], AltColumns] = {}
        self._join_alts: dict[tuple[int, str, str], list[Alt]] = {}
        self._scans: dict[tuple[int, str], list[Alt]] = {}
        self._joins: dict[tuple[int, str], dict[str, AltColumns]] = {}
        self._outside_memo: dict[tuple[int, str], tuple[int, ...]] = {}
        """OR node → the children its alternatives read outside its expression
        (:meth:`_outside`)."""
        self._props_memo: dict[int, list[str]] = {}
        """Expression → its interesting properties (:meth:`interesting_props`)."""
        self._crossing: dict[tuple[int, int], list[CrossingPredicate]] = {}
        self._row_bytes: dict[int, float] = {}
        # statistics-dependent
        self._local: dict[Alt, float] = {}
        self._node_local: dict[tuple[int, str], list[float]] = {}
        self.greedy = None
        """The greedy plan's DP under these statistics, once computed
        (:func:`reopt.optimizers.greedy.greedy_cost`: the seed bound)."""
        self._local_before = None
        """The local costs the space this one was derived from computed, and ``moved(expr)``
        since (:meth:`with_adjustments`): :meth:`local_cost` takes those of alternatives
        whose expression did not move instead of costing them again."""
        self._greedy_before = None
        """The DP of the space this one was derived from and what moved since
        (:meth:`with_adjustments`), until this space's own DP is computed."""
        self._prefetch = True
        """Cost every node in bulk before the first node's local costs (:meth:`_cost_in_bulk`):
        a search from scratch is about to ask for nearly all."""
        self._summaries_in_bulk = True
        """Estimate every csg at once before the first batch of :meth:`summaries`: a costing
        from scratch is about to ask for nearly all, rank by rank."""

    def with_adjustments(self, adjustments: Adjustments) -> PlanSpace:
        """The same query under other statistics. The alternatives do not depend on the
        statistics, so the new space shares this one's memoized structure (splits,
        alternatives) and recomputes only estimates and costs — what re-optimization after a
        delta needs, without re-enumerating the space. Estimates the delta cannot move are
        carried over; local costs are not (an update re-costs only the alternatives of stale
        OR nodes, and nearly all of those moved: looking each up would cost more than it
        saves)."""
        out = copy.copy(self)  # shares the structure: join graph, classes, memoized alternatives
        out.adjustments = adjustments
        out.estimator = Estimator(self.query, self.catalog, adjustments, previous=self.estimator)
        out._local = {}
        out._node_local = {}
        out._prefetch = out._summaries_in_bulk = False  # an update estimates only the
        # expressions it reaches
        out.greedy = out._greedy_before = out._local_before = None
        self._local_before = None  # (one space back at most: its hits are in its own memo)
        moved, ops = out.changed_inputs(self)
        if not ops:  # (a moved cost factor moves costs of any expression)
            if self.greedy is not None:
                out._greedy_before = (self.greedy, moved)
            if self.model.children_within:  # (a child outside its expression may move alone)
                out._local_before = (self._local, moved)
        return out

    def __getstate__(self) -> dict[str, Any]:
        """Saved (a session's state) without what it carries over from the space it was
        derived from: caches only, and ``moved`` is a closure."""
        state = self.__dict__.copy()
        state["_greedy_before"] = state["_local_before"] = None
        return state

    def greedy_before(self) -> tuple[Any, Callable[[int], bool]] | None:
        """The greedy DP of the space this one was derived from, with ``moved(expr)`` since
        (:meth:`changed_inputs`), for the greedy plan's DP here to carry over what did not
        move; None when there is none, or a cost factor moved. Handed out once: after it,
        this space's own DP is kept (nothing holds the earlier one)."""
        before = self._greedy_before
        self._greedy_before = None
        return before

    # -- join graph --------------------------------------------------------------------------
    # Built on first use (a model with physical properties asks; ``cout`` never does), and
    # shared with the spaces of with_adjustments(), which copy this one's attributes.
    @cached_property
    def classes(self) -> dict[ColumnRef, str]:
        """Each join column → its equivalence class, named by its smallest member."""
        return self._column_classes()

    @cached_property
    def relation_bytes(self) -> list[float]:
        """Per relation, the bytes its columns take in a row above the scan
        (:func:`~reopt.costmodel.widths.relation_bytes`; statistics-independent)."""
        return widths.relation_bytes(self.query, self.catalog)

    def row_bytes(self, expr: int) -> float:
        """Bytes of one row of ``expr`` as Spark estimates it (:mod:`reopt.costmodel.widths`;
        memoized, and shared with the spaces of with_adjustments(): it is structure)."""
        out = self._row_bytes.get(expr)
        if out is None:
            out = self._row_bytes[expr] = widths.row_bytes(self.relation_bytes, expr)
        return out

    @cached_property
    def predicates(self) -> list[CrossingPredicate]:
        """The join predicates with their relations' bits and their class."""
        q = self.query
        return [CrossingPredicate(q.bit(p.left.alias), q.bit(p.right.alias), p.left, p.right,
                                  self.classes[p.left])
                for p in q.joins]

    @cached_property
    def _component_of(self) -> dict[int, int]:
        """Relation → the join-graph component holding it."""
        return {i: c for c in self.components for i in bits(c)}

    def _column_classes(self) -> dict[ColumnRef, str]:
        parent: dict[ColumnRef, ColumnRef] = {}

        def find(x: ColumnRef) -> ColumnRef:
            while parent.setdefault(x, x) != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for p in self.query.joins:
            ra, rb = find(p.left), find(p.right)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
        return {c: str(find(c)) for c in parent}

    def is_connected(self, mask: int) -> bool:
        return self.graph.is_connected(mask)

    def neighbors(self, mask: int) -> int:
        """Relations joined to some relation of ``mask``, outside ``mask``."""
        return self.graph.neighborhood(mask)

    def _within_one_component(self, mask: int) -> bool:
        low = (mask & -mask).bit_length() - 1
        return mask & ~self._component_of[low] == 0

    def is_expression(self, mask: int) -> bool:
        """Valid expressions: connected subsets of a component, or unions of whole components."""
        if mask == self.top:
            return self.model.has_final(self)
        if mask <= 0 or mask & ~self.all:
            return False
        if self._within_one_component(mask):
            return self.is_connected(mask)
        return all(mask & c in (0, c) for c in self.components)

    def expressions(self) -> list[int]:
        """All valid expressions, smaller ones first (the bottom-up order): the join graph's
        connected subsets, enumerated (:class:`~reopt.costmodel.joingraph.JoinGraph`)."""
        return self.graph.expressions()

    def groups(self) -> list[tuple[int, str]]:
        """Every OR node, bottom-up: expressions smallest first (the final operator's
        pseudo-expression last, when there is one), each with its interesting properties,
        ``any`` first (a sort enforcer builds on it)."""
        exprs = self.expressions()
        if self.root[0] == self.top:
            exprs.append(self.top)
        out = []
        interesting = self.model.interesting_props  # (bound once: called per expression)
        for e in exprs:
            props = interesting(self, e)
            assert props[0] == ANY
            if len(props) == 1:
                out.append((e, ANY))
            else:
                out += [(e, p) for p in props]
        return out

    # -- Fn_isleaf / Fn_split ---------------------------------------------------------------
    def is_leaf(self, expr: int) -> bool:
        return expr != self.top and expr & (expr - 1) == 0

    def splits(self, expr: int) -> list[tuple[int, int]]:
        """Logical splits (left, right) of an expression, both orders, sorted.

        Inside one component both sides are connected and joined by a predicate (the csg-cmp
        pairs whose union is ``expr``); across components both sides are unions of whole
        components (cross products). Enumerated once for the whole query, in proportion to
        the pairs (:meth:`JoinGraph.lefts`)."""
        return self.graph.splits(expr)

    def crossing(self, left: int, right: int) -> list[CrossingPredicate]:
        """Join predicates with one side in ``left`` and the other in ``right`` (memoized:
        every join method of every split asks)."""
        hit = self._crossing.get((left, right))
        if hit is None:
            hit = self._crossing[(left, right)] = [
                p
                for p in self.predicates
                if (p.left_bit & left and p.right_bit & right)
                or (p.left_bit & right and p.right_bit & left)
            ]
        return hit

    def crossing_masks(self, lefts: np.ndarray, rights: np.ndarray) -> np.ndarray | None:
        """:meth:`crossing` of many splits at once (``int64`` columns of disjoint left and
        right sides), each as a bitset over :attr:`predicates` (bit ``k``: predicate ``k``
        crosses); None for a query of more than 63 predicates (a bitset is one ``int64``).

        A predicate crosses a split when exactly one of its relations is on each side: the
        XOR of its relations' incidences over one side marks the predicates with exactly
        one relation there (a predicate within one relation never crosses, and is left
        out), so a split's crossing predicates are that mark of its left side AND of its
        right side — two table look-ups per byte of a side (:func:`fold_bits`), with no
        loop over the predicates."""
        incidence = self._incidence
        if incidence is None:
            return None
        return (fold_bits(np.asarray(lefts, dtype=np.int64), incidence, np.bitwise_xor)
                & fold_bits(np.asarray(rights, dtype=np.int64), incidence, np.bitwise_xor))

    @cached_property
    def _incidence(self) -> list[int] | None:
        """Per relation, the bitset of the :attr:`predicates` between it and another
        relation (:meth:`crossing_masks`); None past 63 predicates."""
        if len(self.predicates) > 63:
            return None
        out = [0] * self.query.n
        for k, p in enumerate(self.predicates):
            if p.left_bit != p.right_bit:
                for b in (p.left_bit, p.right_bit):
                    out[b.bit_length() - 1] |= 1 << k
        return out

    def interesting_props(self, expr: int) -> list[str]:
        """Properties a parent could require of ``expr`` (for bottom-up enumeration;
        memoized: structure, shared with the spaces of with_adjustments(), which the seed
        bound's greedy plan asks about every expression of its tree on every update)."""
        memo = self.__dict__.setdefault("_props_memo", {})  # (absent from older pickles)
        hit = memo.get(expr)
        if hit is None:
            hit = memo[expr] = self.model.interesting_props(self, expr)
        return hit

    # -- alternatives (AND nodes) -----------------------------------------------------------
    @property
    def root(self) -> tuple[int, str]:
        return (self.top if self.model.has_final(self) else self.all, ANY)

    def scan_alternatives(self, expr: int, prop: str) -> list[Alt]:
        """The scans of an OR node (memoized: ``Fn_phyop`` asks once per access method)."""
        key = (expr, prop)
        hit = self._scans.get(key)
        if hit is None:
            hit = self.model.scan_alternatives(self, expr, prop) if self.is_leaf(expr) else []
            self._scans[key] = hit
        return hit

    def join_alternatives(self, expr: int, prop: str, method: str) -> list[Alt]:
        """The joins of ``method`` for an OR node (``Fn_split``; memoized)."""
        key = (expr, prop, method)
        hit = self._join_alts.get(key)
        if hit is None:
            cols = self._joins_by_method(expr, prop).get(method, NO_COLUMNS)
            hit = self._join_alts[key] = cols.rows(expr, prop)
        return hit

    def join_columns(self, expr: int, prop: str, method: str) -> AltColumns:
        """The joins of ``method`` for an OR node as columns (the batch ``Fn_split``)."""
        hit = self._joins.get((expr, prop))
        if hit is None:
            hit = self._joins_in_one_batch(expr, prop) or self._joins_by_method(expr, prop)
        return hit.get(method, NO_COLUMNS)

    def _joins_in_one_batch(self, expr: int, prop: str) -> dict[str, AltColumns] | None:
        """:meth:`_joins_by_method` of an OR node of at least the model's
        :attr:`~reopt.costmodel.models.CostModel.batch_splits_from` splits, from one call of
        its batch form (:meth:`~reopt.costmodel.models.CostModel.joins_batch`) for every
        method (memoized as that is); None for a smaller node or a model without one."""
        least = self.model.batch_splits_from
        if least is None or expr == self.top or self.graph.split_count(expr) < least:
            return None
        if not self._batch_joins([(expr, prop)]):
            return None
        return self._joins[(expr, prop)]

    def _batch_joins(self, nodes: list[tuple[int, str]]) -> bool:
        """Memoize the joins of every method of each of ``nodes`` (OR nodes of join
        expressions) from ONE call of the model's
        :meth:`~reopt.costmodel.models.CostModel.joins_batch`, as
        :meth:`_joins_by_method` would find them node by node; False if the model has no
        batch form (nothing memoized)."""
        methods = self.model.join_methods
        k = len(methods)
        got = self.model.joins_batch(
            self, np.repeat(np.fromiter((e for e, _ in nodes), np.int64, len(nodes)), k),
            np.repeat(np.asarray([p for _, p in nodes], dtype=object), k),
            np.tile(np.asarray(methods, dtype=object), len(nodes)))
        if got is None:
            return False
        row, index, left, left_prop, right, right_prop = got
        cuts = np.searchsorted(row, np.arange(k * len(nodes) + 1)).tolist()
        for i, node in enumerate(nodes):
            out: dict[str, AltColumns] = {}
            for j, m in enumerate(methods):
                a, b = cuts[i * k + j], cuts[i * k + j + 1]
                n = b - a
                out[m] = NO_COLUMNS if not n else tuple.__new__(AltColumns, (
                    index[a:b].tolist(), ["join"] * n, [m] * n, left[a:b].tolist(),
                    left_prop[a:b].tolist(), right[a:b].tolist(), right_prop[a:b].tolist()))
            self._joins[node] = out
        return True

    def _joins_by_method(self, expr: int, prop: str) -> dict[str, AltColumns]:
        key = (expr, prop)
        hit = self._joins.get(key)
        if hit is None:
            lefts = self.split_lefts(expr)
            hit = {m: self.model.joins(self, expr, prop, m, lefts)
                   for m in self.model.join_methods}
            self._joins[key] = hit
        return hit

    def enforcer_alternatives(self, expr: int, prop: str) -> list[Alt]:
        return self.model.enforcer_alternatives(self, expr, prop)

    def final_alternatives(self, expr: int, prop: str) -> list[Alt]:
        if expr != self.top:
            return []
        return self.model.final_alternatives(self, prop)

    def columns(self, expr: int, prop: str) -> AltColumns:
        """Every AND node of an OR node as columns, in the order of :meth:`alternatives`
        (memoized): scans, enforcers, the final operator, then the joins by method."""
        key = (expr, prop)
        hit = self._cols.get(key)
        if hit is None:
            hit = self._cols[key] = self.model.node_columns(self, expr, prop)
        return hit

    def all_columns(self, expr: int, prop: str) -> AltColumns:
        """:meth:`columns` assembled from the built-ins — scans, enforcers, the final
        operator, the joins by method — what a model's
        :meth:`~reopt.costmodel.models.CostModel.node_columns` answers unless it knows a
        shorter way to the same columns."""
        leaf = self.is_leaf(expr)
        parts = [AltColumns.of(self.scan_alternatives(expr, prop) if leaf else []),
                 AltColumns.of(self.enforcer_alternatives(expr, prop)),
                 AltColumns.of(self.final_alternatives(expr, prop))]
        if not leaf:
            parts += self._joins_by_method(expr, prop).values()
        return AltColumns.concat(parts)

    def split_lefts(self, expr: int) -> list[int]:
        """The left sides of the splits a join of ``expr`` is built on: one order per split
        for a symmetric model (:meth:`JoinGraph.halves`), both orders otherwise
        (:meth:`JoinGraph.lefts`); none for the final operator's pseudo-expression."""
        if expr == self.top:
            return _NO_LEFTS
        if self.model.symmetric:
            return self.graph.halves_of(expr) or _NO_LEFTS
        return self.graph.lefts_of(expr) or _NO_LEFTS

    def alternative(self, expr: int, prop: str, i: int) -> Alt:
        """Alternative ``i`` of the OR node (``alternatives(expr, prop)[i]``), built from its
        columns without making the node's other alternatives: what a plan tree reads of a
        node with thousands of them."""
        alts = self._alts.get((expr, prop))
        if alts is not None:
            return alts[i]
        c = self.columns(expr, prop)
        return tuple.__new__(Alt, (expr, prop, c.index[i], c.log_op[i], c.phy_op[i], c.left[i],
                                   c.left_prop[i], c.right[i], c.right_prop[i]))

    def alternatives(self, expr: int, prop: str) -> list[Alt]:
        """Every AND node of an OR node, in a fixed order (memoized)."""
        key = (expr, prop)
        hit = self._alts.get(key)
        if hit is None:
            hit = self._alts[key] = self.columns(expr, prop).rows(expr, prop)
        return hit

    # -- summaries and costs ----------------------------------------------------------------
    def summary(self, expr: int) -> float:
        """Estimated output rows of an expression (the paper's ``md``)."""
        if expr == self.top:
            return self.estimator.groups()
        return self.estimator.card(expr)

    def summaries(self, exprs: np.ndarray) -> np.ndarray:
        """:meth:`summary` of many expressions (``int64``), vectorized
        (:meth:`~reopt.costmodel.cardinality.Estimator.cards`): the batch ``Fn_summary``."""
        exprs = np.asarray(exprs, dtype=np.int64)
        if self._summaries_in_bulk:
            self._summaries_in_bulk = False
            self._prefetch_cards()
        out = self.estimator.cards(exprs & self.all)
        top = exprs == self.top
        if top.any():
            out[top] = self.estimator.groups()
        return out

    def local_cost(self, alt: Alt) -> float:
        hit = self._local.get(alt)
        if hit is None:
            hit = self._carried_cost(alt)
            if hit is None:
                hit = self.model.local_cost(self, alt) * self.adjustments.op_factors.get(
                    alt.phy_op, 1.0
                )
            self._local[alt] = hit
        return hit

    def _carried_cost(self, alt: Alt) -> float | None:
        """``alt``'s local cost under the statistics this space was derived from, when its
        expression did not move since (then neither did its children, all within it, nor a
        scanned relation's rows: the same inputs, the same bits); None otherwise. An update
        re-costs through the built-ins the alternatives of the OR nodes it re-derives and of
        the later strata's plans, most of which did not move (the later strata are evaluated
        again whole)."""
        before = self._local_before
        if before is None:
            return None
        costs, moved = before
        if moved(alt.expr):
            return None
        return costs.get(alt)

    def chosen_local_cost(self, alt: Alt, i: int) -> float:
        """:meth:`local_cost` of ``alt``, alternative ``i`` of its OR node: read from the
        node's :meth:`local_costs` if they are memoized (the same bits), else computed."""
        costs = self._node_local.get((alt.expr, alt.prop))
        return costs[i] if costs is not None else self.local_cost(alt)

    def local_costs_of(self, alts: list[Alt]) -> list[float]:
        """:meth:`local_cost` of many alternatives of any OR nodes (the batch
        ``Fn_nonscancost``): the same values, without an entry per alternative in the memo."""
        return self._factored(self.model.local_costs_of(self, alts), [a[4] for a in alts])

    def local_cost_column(self, exprs: np.ndarray, ops: np.ndarray,
                          index: np.ndarray | None = None, left: np.ndarray | None = None,
                          right: np.ndarray | None = None) -> np.ndarray | None:
        """:meth:`local_costs_of` of alternatives given as columns — their OR nodes'
        expressions (``int64``), physical operators (``object``) and, where the caller has
        them, their indexes and children's expressions (``int64``) — vectorized where the
        model has a vectorized form (:meth:`CostModel.local_cost_columns`), with the same
        operator factors; None where it has none (callers then build the alternatives)."""
        codes = {name: k for k, name in enumerate(self.model.operators)}
        if ops.strides == (0,):  # one operator throughout (a broadcast): looked up once
            positions = np.full(len(ops), codes.get(ops[0], -1) if len(ops) else 0, np.int64)
        else:  # (a look-up per row: a quarter of the time of one object comparison per
            # operator over all rows, under io's eleven operators)
            positions = np.fromiter(map(codes.get, ops.tolist(), repeat(-1)), np.int64,
                                    len(ops))
        if bool((positions < 0).any()):
            return None
        costs = self.model.local_cost_columns(self, exprs, positions, index, left, right)
        if costs is None:
            return None
        factors = self.adjustments.op_factors
        for name, f in factors.items():
            if name in codes:
                costs[positions == codes[name]] *= f
        return costs

    def local_costs(self, expr: int, prop: str) -> list[float]:
        """The local cost of each of the OR node's :meth:`alternatives`, in their order
        (memoized per node): the batch form of :meth:`local_cost`, same values bit for bit,
        without a dictionary entry per alternative."""
        return self.costed(expr, prop)[1]

    def costed(self, expr: int, prop: str) -> tuple[AltColumns, list[float]]:
        """:meth:`columns` and :meth:`local_costs` of an OR node in one call (memoized as
        they are): what a search reads of every node it opens."""
        key = (expr, prop)
        costs = self._node_local.get(key)
        if costs is not None:
            return self._cols[key], costs
        if self._prefetch:  # a search from scratch: it is about to ask for nearly all
            self._prefetch = False
            self._cost_in_bulk()
            costs = self._node_local.get(key)
            if costs is not None:
                return self._cols[key], costs
        costs = self.node_costs(expr, prop)
        return self._cols[key], costs

    def _cost_in_bulk(self) -> None:
        """Before a search from scratch asks for its first node: estimate the join graph's
        csgs at once (:meth:`_prefetch_cards`), and enter every node's columns and local
        costs where the model gives them in one pass
        (:meth:`~reopt.costmodel.models.CostModel.costed_nodes`) — the same values the node
        by node calls give, without their chain of calls per node (on a small query a good
        part of the search's time)."""
        self._prefetch_cards()
        nodes = self.model.costed_nodes(self)
        if nodes is None:
            return
        columns, costs = nodes
        if self._cols:  # (columns asked for before: keep those)
            columns.update(self._cols)
        self._cols.update(columns)
        if self.adjustments.op_factors:
            costs = {key: self._factored(c, columns[key].phy_op) for key, c in costs.items()}
        self._node_local.update(costs)

    def _prefetch_cards(self) -> None:
        """Estimate the join graph's csgs at once: in one vectorized call
        (:meth:`Estimator.prefetch`) when there are at least :data:`PREFETCH_FROM` of them,
        else in one scalar pass (:meth:`Estimator.estimate_all`): below, numpy's fixed cost
        is more than it saves."""
        csgs = self.graph.csgs()
        if len(csgs) >= PREFETCH_FROM:
            self.estimator.prefetch(csgs)
        else:
            self.estimator.estimate_all(csgs)

    def estimate(self, exprs: Iterable[int]) -> None:
        """Estimate the given expressions' rows at once, into the estimator's memo
        (:meth:`Estimator.estimate_all`: one pass, leaf products shared, the same bits as
        one by one): what an update calls before it costs the nodes it reaches, one by one."""
        self.estimator.estimate_all([e & self.all for e in exprs])

    def _factored(self, costs: list[float], ops: list[str]) -> list[float]:
        """Local costs times their operators' factors (``cost OP *F``), as
        :meth:`local_cost` multiplies them; ``x * 1.0 == x``, so without factors, as they are."""
        factors = self.adjustments.op_factors
        if not factors:
            return costs
        return [c * factors.get(op, 1.0) for c, op in zip(costs, ops, strict=True)]

    def changed_inputs(self, old: PlanSpace) -> tuple[Callable[[int], bool], set[str]]:
        """What local costs depend on that differs from ``old`` (the same query under earlier
        statistics): ``moved(expr)``, whether an expression's estimated rows (for a base
        relation, also its rows before filters) differ, and the operators whose cost factor
        differs.

        A local cost depends only on the estimated rows of the alternative's expression and
        children, the base rows of a scanned relation and the operator's cost factor (README,
        "Cost models"). ``moved`` is read off the adjustments
        (:meth:`~reopt.costmodel.cardinality.Estimator.moved_masks`), without estimating: an
        expression moves when it contains a changed relation set — a superset of the
        expressions whose estimate differs, and no estimate is computed before it is needed."""
        ops = changed_factors(old.adjustments.op_factors, self.adjustments.op_factors)
        masks = self.estimator.moved_since(old.estimator)
        if masks and self.model.reads_root(self):
            masks = [0]  # every cost reads the whole query's estimate, which moved
        within = self.all  # the final operator's pseudo-expression: the whole query's rows

        def moved(expr: int) -> bool:
            e = expr & within
            for m in masks:  # a loop, not any(): called per expression on every update
                if m & e == m:
                    return True
            return False

        return moved, ops

    def moved_exprs(self, old: PlanSpace, exprs: np.ndarray) -> np.ndarray:
        """``moved`` of :meth:`changed_inputs` for many expressions (``int64``) at once."""
        exprs = np.asarray(exprs, dtype=np.int64) & self.all
        out = np.zeros(len(exprs), dtype=bool)
        masks = self.estimator.moved_since(old.estimator)
        if masks and self.model.reads_root(self):
            out[:] = True  # (as in changed_inputs)
            return out
        for m in masks:
            out |= (exprs & m) == m
        return out

    def stale_nodes(self, old: PlanSpace, nodes: Iterable[tuple[int, str]],
                    exprs: np.ndarray | None = None) -> set[tuple[int, str]]:
        """The OR nodes among ``nodes`` whose summary or some alternative's local cost differs
        between ``old`` (the same query under earlier statistics) and this space.

        The candidates are the nodes whose expression, a child's expression or one of whose
        alternatives' operators is among :meth:`changed_inputs` (read off the deltas, a
        superset); of those, only the ones whose answers actually differ are stale
        (:meth:`answers_differ`): a moved input often leaves a node's own numbers as they were
        — under ``cout`` a join costs its own expression's rows, whatever its children's; an
        estimate clamped at one row stays there — and re-deriving such a node would give back
        exactly what it holds (its children's changes reach it as a parent's do).

        An expression moves when it contains a changed relation set (:meth:`moved_exprs`), so
        a child contained in its node's expression — a join's sides, an enforcer's input, the
        final operator's input, the whole query — moves only if the node's expression does:
        the candidates are found from the nodes' own expressions, in one vectorized call,
        without an index of who reads what (building one cost a session's first update more
        than the rest of its search for stale nodes). Unless the model promises there are
        none (:attr:`CostModel.children_within`), children outside their node's expression
        (:meth:`_outside`) are checked one by one."""
        _, ops = self.changed_inputs(old)
        nodes = nodes if isinstance(nodes, list) else list(nodes)
        if exprs is None:  # (``exprs``: the nodes' expressions, given by a caller keeping them)
            exprs = np.fromiter((n[0] for n in nodes), np.int64, len(nodes))
        hit = np.flatnonzero(self.moved_exprs(old, exprs))
        outside = {} if self.model.children_within else {
            n: c for n in nodes if (c := self._outside(n))}
        if not outside and not ops and self.model.costs_follow_rows:
            return self._rows_differ(old, nodes, exprs, hit)
        # (a list: the nodes are distinct, and only the stale ones are hashed, into a set)
        reached: list | set = [nodes[i] for i in hit.tolist()]
        if outside:
            kids = sorted({c for cs in outside.values() for c in cs})
            moved = dict(zip(kids, self.moved_exprs(old, np.asarray(kids, np.int64)).tolist(),
                             strict=True))
            reached = set(reached)
            reached.update(n for n, cs in outside.items() if any(moved[c] for c in cs))
        if ops:  # an operator's cost factor changed (``cost OP *F``): the nodes using it
            reached = set(reached)
            reached.update(n for n in nodes if not ops.isdisjoint(self.columns(*n).phy_op))
        return self.answers_differ(old, reached)

    def _rows_differ(self, old: PlanSpace, nodes: list[tuple[int, str]], exprs: np.ndarray,
                     hit: np.ndarray) -> set[tuple[int, str]]:
        """:meth:`answers_differ` of the nodes at positions ``hit`` (their expressions in
        ``exprs``) when costs follow rows and no cost factor moved, so a node is stale
        exactly when its expression's summary differs: the expressions compared once each
        and the nodes picked on arrays — no Python pass over the thousands of nodes an
        update of a large query reaches, only over the stale ones."""
        reached = exprs[hit]
        sets = list(set((reached & self.all).tolist()))  # (a set: numpy's unique hashes slower)
        if len(sets) < PREFETCH_FROM:  # (numpy's fixed cost is more than it saves)
            return self.answers_differ(old, [nodes[i] for i in hit.tolist()])
        moved = self.estimator.differing(old.estimator, sets, True)
        if bool((reached == self.top).any()) and self.summary(self.top) != old.summary(self.top):
            moved.add(self.top)  # (the final operator's pseudo-expression: its own summary)
        if not moved:
            return set()
        moving = np.sort(np.fromiter(moved, np.int64, len(moved)))
        at = np.searchsorted(moving, reached).clip(0, len(moving) - 1)
        return {nodes[i] for i in hit[moving[at] == reached].tolist()}

    def _outside(self, node: tuple[int, str]) -> tuple[int, ...]:
        """The expressions the node's alternatives read as children that are not contained
        in the node's own expression (memoized: structure, shared with the spaces of
        with_adjustments()); checked in C over the node's columns."""
        memo = self.__dict__.setdefault("_outside_memo", {})  # (absent from older pickles)
        hit = memo.get(node)
        if hit is None:
            cols, expr = self.columns(*node), node[0]
            spread = reduce(or_, cols.left, 0) | reduce(or_, cols.right, 0)
            hit = memo[node] = () if spread & ~expr == 0 else tuple(
                {c for c in (*cols.left, *cols.right) if c & ~expr})
        return hit

    def answers_differ(self, old: PlanSpace, nodes: Iterable[tuple[int, str]]
                       ) -> set[tuple[int, str]]:
        """Those of ``nodes`` for which a ``statistics`` built-in answers differently here
        than under ``old``: the node's summary (its expression's estimated rows, for many
        nodes estimated under both statistics in one vectorized pass:
        :meth:`~reopt.costmodel.cardinality.Estimator.differing`) or the local cost of one of
        its alternatives (:meth:`node_costs`). The values are compared bit for bit (a NaN
        never equals itself: such a node counts as stale)."""
        nodes = nodes if isinstance(nodes, (list, set, frozenset)) else list(nodes)
        if not nodes:
            return set()
        masks = list({e & self.all for e, _ in nodes})
        # (below PREFETCH_FROM sets, numpy's fixed cost is more than it saves)
        moved = self.estimator.differing(old.estimator, masks, len(masks) >= PREFETCH_FROM)
        # the final operator's pseudo-expression (the only one with a bit outside ``all``):
        # its own summary, the query's groups
        if self.all in masks and self.summary(self.top) != old.summary(self.top):
            moved.add(self.top)
        if not self.model.costs_follow_rows:
            return {node for node in nodes if node[0] in moved
                    or self.node_costs(*node) != old.node_costs(*node)}
        # costs follow the node's summary: equal summaries, equal costs unless a factor of
        # one of the node's operators moved (only those nodes are costed)
        ops = changed_factors(old.adjustments.op_factors, self.adjustments.op_factors)
        if not ops:
            return {node for node in nodes if node[0] in moved}
        return {node for node in nodes if node[0] in moved or (
            not ops.isdisjoint(self.columns(*node).phy_op)
            and self.node_costs(*node) != old.node_costs(*node))}

    def node_costs(self, expr: int, prop: str) -> list[float]:
        """:meth:`local_costs` of one OR node without costing every node first (memoized as
        they are): what comparing a few nodes' costs across two spaces needs, where the bulk
        pass a search from scratch starts with (:meth:`costed`) would cost the whole space."""
        key = (expr, prop)
        costs = self._node_local.get(key)
        if costs is None:
            cols = self.columns(expr, prop)
            costs = self._node_local[key] = self._factored(
                self.model.local_costs(self, expr, prop, cols), cols.phy_op)
        return costs

    def relations(self, expr: int) -> tuple[str, ...]:
        return self.query.aliases_of(expr & self.all)

    def rank(self, expr: int, prop: str) -> int:
        """The OR node's place in bottom-up order: every child of an AND node ranks strictly
        below the AND node's OR node (a sub-expression has fewer relations; an enforcer's
        input is the same expression with property ``any``; the final operator's pseudo-
        expression has one bit more than the whole query). The scheduled strata of the rules
        (``.schedule``) release tuples in this order, ascending or descending."""
        return 2 * popcount(expr) + (prop != ANY)

    # -- sizes -------------------------------------------------------------------------------
    def children(self, expr: int, prop: str) -> set[tuple[int, str]]:
        """The OR nodes the node's alternatives read (from its columns)."""
        cols = self.columns(expr, prop)
        out = {c for c in zip(cols.left, cols.left_prop, strict=True) if c[0]}
        out.update(c for c in zip(cols.right, cols.right_prop, strict=True) if c[0])
        return out

    def or_nodes(self) -> Iterator[tuple[int, str]]:
        """OR nodes reachable from the root, parents before children."""
        seen = {self.root}
        stack = [self.root]
        while stack:
            node = stack.pop()
            yield node
            for child in sorted(self.children(*node) - seen):
                seen.add(child)
                stack.append(child)

    def size(self) -> dict[str, int]:
        """The full search space: OR nodes and AND nodes reachable from the root. Walked
        level by level (the count does not depend on the order), each level's joins asked of
        the model in one batch where it has a batch form (:meth:`_batch_joins`): a
        declarative optimization's first step sizes the space for its metrics without having
        built these columns, and node by node that cost as much as the search (0.9 s of a
        cold 1.7 s on a 14-relation clique under ``io``)."""
        ors = ands = 0
        seen = {self.root}
        level = [self.root]
        while level:
            joins = [n for n in level if n not in self._joins and n[0] != self.top
                     and not self.is_leaf(n[0])]
            if len(joins) > 1 and self.model.batch_splits_from is not None:
                self._batch_joins(joins)
            below: list[tuple[int, str]] = []
            for node in level:
                ors += 1
                ands += self.columns(*node).count
                for child in self.children(*node) - seen:
                    seen.add(child)
                    below.append(child)
            level = below
        return {"or_nodes": ors, "and_nodes": ands}

    def within_budget(self, max_pairs: int) -> bool:
        """Whether the join graph has at most ``max_pairs`` csg-cmp pairs (then enumerated
        once, for the search; else found out after about ``2 * max_pairs`` sets)."""
        return self.graph.pairs_within(max_pairs) is not None

    def check_size(self, max_pairs: int) -> None:
        """Refuse, before any search, a query whose join graph has more than ``max_pairs``
        csg-cmp pairs (:meth:`JoinGraph.pairs_within`): exact optimization takes time in
        proportion to them (a 30-relation star has 7.8 billion)."""
        if not self.within_budget(max_pairs):
            raise OptimizerError(
                f"query {self.query.name}: its {self.query.n} relations have more than "
                f"{max_pairs:,} csg-cmp pairs to search (--max-pairs {max_pairs}); raise "
                "--max-pairs (max_pairs= in the API) to optimize it exactly anyway")

    def count_trees(self, limit: float = math.inf) -> float:
        """Number of distinct plan trees for the root (stops counting past ``limit``)."""
        memo: dict[tuple[int, str], float] = {}

        def count(node: tuple[int, str]) -> float:
            hit = memo.get(node)
            if hit is not None:
                return hit
            total = 0.0
            for alt in self.alternatives(*node):
                t = 1.0
                for child in alt.children:
                    t *= count(child)
                total += t
            total = min(total, limit * 2 if math.isfinite(limit) else total)
            memo[node] = total
            return total

        return count(self.root)
