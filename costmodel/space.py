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
from typing import TYPE_CHECKING, NamedTuple

from reopt.costmodel.cardinality import Adjustments, Estimator, changed_factors
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.query import ColumnRef, Query

if TYPE_CHECKING:
    from reopt.costmodel.models import CostModel

ANY = "any"
NONE = ""
"""The property of an absent child."""


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

    def __init__(
        self,
        query: Query,
        catalog: Catalog,
        model: CostModel,
        adjustments: Adjustments | None = None,
    ):
        self.query = query
        self.catalog = catalog
        self.model = model
        self.adjustments = adjustments or Adjustments()
        self.estimator = Estimator(query, catalog, self.adjustments)
        n = query.n
        self.all = query.all_mask
        self.top = self.all | (1 << n)
        self._neighbors = [0] * n
        for p in query.joins:
            a, b = query.index(p.left.alias), query.index(p.right.alias)
            self._neighbors[a] |= 1 << b
            self._neighbors[b] |= 1 << a
        self.classes = self._column_classes()
        self.predicates = [
            CrossingPredicate(
                query.bit(p.left.alias), query.bit(p.right.alias), p.left, p.right,
                self.classes[p.left],
            )
            for p in query.joins
        ]
        self.components = self._components()
        self._component_of = {}
        for c in self.components:
            for i in range(n):
                if c >> i & 1:
                    self._component_of[i] = c
        # structure (statistics-independent): shared by with_adjustments()
        self._splits: dict[int, list[tuple[int, int]]] = {}
        self._alts: dict[tuple[int, str], list[Alt]] = {}
        self._scans: dict[tuple[int, str], list[Alt]] = {}
        self._joins: dict[tuple[int, str], dict[str, list[Alt]]] = {}
        self._readers: dict[int | str, set[tuple[int, str]]] = {}
        """What local costs read → the OR nodes reading it (:meth:`stale_nodes`): an
        expression → the nodes whose summary or alternatives' local costs read its estimate
        (its own node, its parents); an operator → the nodes with an alternative using it."""
        self._indexed: set[tuple[int, str]] = set()
        """OR nodes entered in ``_readers``."""
        self._crossing: dict[tuple[int, int], list[CrossingPredicate]] = {}
        # statistics-dependent
        self._local: dict[Alt, float] = {}

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
        return out

    # -- join graph --------------------------------------------------------------------------
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

    def _components(self) -> list[int]:
        seen, out = 0, []
        for i in range(self.query.n):
            if not seen >> i & 1:
                c = self._closure(1 << i, self.all)
                out.append(c)
                seen |= c
        return out

    def _closure(self, start: int, within: int) -> int:
        reach, frontier = start, start
        while frontier:
            nxt = 0
            m, i = frontier, 0
            while m:
                if m & 1:
                    nxt |= self._neighbors[i]
                m >>= 1
                i += 1
            frontier = nxt & within & ~reach
            reach |= frontier
        return reach

    def is_connected(self, mask: int) -> bool:
        low = mask & -mask
        return self._closure(low, mask) == mask

    def neighbors(self, mask: int) -> int:
        out, m, i = 0, mask, 0
        while m:
            if m & 1:
                out |= self._neighbors[i]
            m >>= 1
            i += 1
        return out & ~mask

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
        """All valid expressions, smaller ones first (the bottom-up order)."""
        out = [m for m in range(1, self.all + 1) if self.is_expression(m)]
        out.sort(key=lambda m: (popcount(m), m))
        return out

    # -- Fn_isleaf / Fn_split ---------------------------------------------------------------
    def is_leaf(self, expr: int) -> bool:
        return expr != self.top and expr & (expr - 1) == 0

    def splits(self, expr: int) -> list[tuple[int, int]]:
        """Logical splits (left, right) of an expression, both orders (memoized).

        Inside one component both sides must be connected and joined by a predicate; across
        components both sides are unions of whole components (cross products).
        """
        hit = self._splits.get(expr)
        if hit is not None:
            return hit
        out: list[tuple[int, int]] = []
        if expr != self.top and not self.is_leaf(expr):
            within = self._within_one_component(expr)
            sub = (expr - 1) & expr
            while sub:
                rest = expr ^ sub
                if within:
                    if (
                        self.is_connected(sub)
                        and self.is_connected(rest)
                        and self.neighbors(sub) & rest
                    ):
                        out.append((sub, rest))
                elif all(sub & c in (0, c) for c in self.components):
                    out.append((sub, rest))
                sub = (sub - 1) & expr
        out.sort()
        self._splits[expr] = out
        return out

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

    def interesting_props(self, expr: int) -> list[str]:
        """Properties a parent could require of ``expr`` (for bottom-up enumeration)."""
        return self.model.interesting_props(self, expr)

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
        """The joins of ``method`` for an OR node (memoized with :meth:`alternatives`)."""
        return self._joins_by_method(expr, prop).get(method, [])

    def _joins_by_method(self, expr: int, prop: str) -> dict[str, list[Alt]]:
        key = (expr, prop)
        hit = self._joins.get(key)
        if hit is None:
            hit = {}
            for m in self.model.join_methods:
                for left, right in self.splits(expr):
                    hit.setdefault(m, []).extend(
                        self.model.join_alternatives(self, expr, prop, left, right, m))
            self._joins[key] = hit
        return hit

    def enforcer_alternatives(self, expr: int, prop: str) -> list[Alt]:
        return self.model.enforcer_alternatives(self, expr, prop)

    def final_alternatives(self, expr: int, prop: str) -> list[Alt]:
        if expr != self.top:
            return []
        return self.model.final_alternatives(self, prop)

    def alternatives(self, expr: int, prop: str) -> list[Alt]:
        """Every AND node of an OR node, in a fixed order (memoized)."""
        key = (expr, prop)
        hit = self._alts.get(key)
        if hit is not None:
            return hit
        out = self.scan_alternatives(expr, prop) + self.enforcer_alternatives(expr, prop)
        out += self.final_alternatives(expr, prop)
        for m in self.model.join_methods:
            out += self.join_alternatives(expr, prop, m)
        self._alts[key] = out
        return out

    # -- summaries and costs ----------------------------------------------------------------
    def summary(self, expr: int) -> float:
        """Estimated output rows of an expression (the paper's ``md``)."""
        if expr == self.top:
            return self.estimator.groups()
        return self.estimator.card(expr)

    def local_cost(self, alt: Alt) -> float:
        hit = self._local.get(alt)
        if hit is None:
            hit = self.model.local_cost(self, alt) * self.adjustments.op_factors.get(
                alt.phy_op, 1.0
            )
            self._local[alt] = hit
        return hit

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
        masks = self.estimator.moved_masks(old.estimator)
        within = self.all  # the final operator's pseudo-expression: the whole query's rows

        def moved(expr: int) -> bool:
            e = expr & within
            for m in masks:  # a loop, not any(): called per expression on every update
                if m & e == m:
                    return True
            return False

        return moved, ops

    def stale_nodes(self, old: PlanSpace, nodes: Iterable[tuple[int, str]]
                    ) -> set[tuple[int, str]]:
        """The OR nodes among ``nodes`` whose summary or some alternative's local cost may
        differ between ``old`` (the same query under earlier statistics) and this space.

        A node is stale when its expression, a child's expression or one of its alternatives'
        operators is among :meth:`changed_inputs`."""
        moved, ops = self.changed_inputs(old)
        nodes = nodes if isinstance(nodes, (set, frozenset)) else set(nodes)
        readers, indexed = self._readers, self._indexed
        for node in nodes - indexed:
            indexed.add(node)
            alts = self.alternatives(*node)
            for x in {node[0], *(c for a in alts for c, _ in a.children),
                      *(a.phy_op for a in alts)}:
                readers.setdefault(x, set()).add(node)
        # each expression and operator once (a node's inputs overlap its neighbours'), then
        # the nodes reading the ones that moved
        reached: set[tuple[int, str]] = set()
        for x, by in readers.items():
            if x in ops if isinstance(x, str) else moved(x):
                reached |= by
        return reached & nodes

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
    def or_nodes(self) -> Iterator[tuple[int, str]]:
        """OR nodes reachable from the root, parents before children."""
        seen = {self.root}
        stack = [self.root]
        while stack:
            node = stack.pop()
            yield node
            for alt in self.alternatives(*node):
                for child in alt.children:
                    if child not in seen:
                        seen.add(child)
                        stack.append(child)

    def size(self) -> dict[str, int]:
        """The full search space: OR nodes and AND nodes reachable from the root."""
        ors = ands = 0
        for node in self.or_nodes():
            ors += 1
            ands += len(self.alternatives(*node))
        return {"or_nodes": ors, "and_nodes": ands}

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
