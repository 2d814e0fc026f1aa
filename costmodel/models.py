"""Cost models: which physical operators exist, what they require and deliver, what they cost.

Two models share one interface (:class:`CostModel`), so the rules and the optimizers plug either
in unchanged:

* ``cout`` — logical C_out: a scan costs 0; a join producing T costs ``card(T)`` plus its
  children. One physical join operator (``join``), no properties, no final operator.
* ``io`` — the paper's physical model, CPU and I/O per tuple and page (constants below):
  ``tablescan``/``indexscan`` (and ``indexprobe``, the inner of an index nested-loop join, whose
  work the join pays), joins ``hashjoin`` (right input is the build side), ``sortmerge`` (inputs
  sorted on the join class), ``indexnl`` (inner is a base table with an index on the join
  column), ``blocknl`` (the only join for cross products), a ``sort`` enforcer, and a final
  ``hashagg``/``sortagg``/``topsort`` when the query groups, aggregates or orders.

Every local cost is multiplied by the operator's factor from ``cost OP *F`` deltas (default 1).
Local costs depend only on estimated rows of the expressions involved, never on the child plans,
so the principle of optimality holds and dynamic programming, branch-and-bound and the datalog
fixpoint all find the same optimum.
"""

from __future__ import annotations

import math
from itertools import repeat
from typing import TYPE_CHECKING

import numpy as np

from reopt.costmodel.dist import DistModel, dist_profile
from reopt.costmodel.errors import ReoptError
from reopt.costmodel.query import Between, Compare, InList
from reopt.costmodel.rate import RateModel, rate_profile
from reopt.costmodel.space import (
    ANY,
    NO_COLUMNS,
    NONE,
    Alt,
    AltColumns,
    fold_bits,
    probe_prop,
    prop_class,
    sort_prop,
)

if TYPE_CHECKING:
    from reopt.costmodel.space import PlanSpace

# --- io constants (documented in the README) ---------------------------------------------------
PAGE_ROWS = 100.0
"""Tuples per page."""
SEQ_PAGE = 1.0
"""Cost of reading one page sequentially."""
RANDOM_PAGE = 4.0
"""Cost of reading one page at random."""
CPU_TUPLE = 0.01
"""CPU cost of producing or processing one tuple."""
CPU_OPERATOR = 0.0025
"""CPU cost of one comparison or hash-probe step."""
INDEX_HEIGHT = 3.0
"""Random page reads to descend an index."""
SORT_MEMORY_ROWS = 100_000.0
"""A sort of more rows than this spills: one extra write and read of its input."""
HASH_MEMORY_ROWS = 1_000_000.0
"""A hash join whose build side is larger than this partitions both inputs to disk once."""
BLOCK_PAGES = 100.0
"""Pages of the outer input a block nested-loop join holds per pass over the inner."""


Rows = float | np.ndarray
"""Estimated rows: one expression's (a float) or many (a ``float64`` array); the join cost
formulas below take either, so one formula answers both :meth:`IOModel.local_cost` and its
batch form with the same IEEE operations in the same order (the same bits)."""


def pages(rows: Rows) -> Rows:
    return rows / PAGE_ROWS


def _when(test: bool | np.ndarray, value: Rows) -> Rows:
    """``value`` where ``test`` holds, else 0.0 — of one alternative or element-wise."""
    if isinstance(test, np.ndarray):
        return np.where(test, value, 0.0)
    return value if test else 0.0


def hashjoin_cost(lrows: Rows, rrows: Rows, out: Rows) -> Rows:
    """Build a hash table on the right input, probe it with the left; a build side past
    :data:`HASH_MEMORY_ROWS` partitions both inputs to disk once."""
    spill = _when(rrows > HASH_MEMORY_ROWS, 2.0 * SEQ_PAGE * (pages(lrows) + pages(rrows)))
    return 2.0 * CPU_TUPLE * rrows + CPU_OPERATOR * lrows + CPU_TUPLE * out + spill


def sortmerge_cost(lrows: Rows, rrows: Rows, out: Rows) -> Rows:
    """Merge two inputs sorted on the join class (their sorts are children's)."""
    return CPU_OPERATOR * (lrows + rrows) + CPU_TUPLE * out


def indexnl_cost(lrows: Rows, rrows: Rows, out: Rows) -> Rows:
    """One index probe of the inner base table per outer row."""
    return RANDOM_PAGE * lrows + CPU_TUPLE * out


def blocknl_cost(lrows: Rows, rrows: Rows, out: Rows) -> Rows:
    """A pass over the inner per :data:`BLOCK_PAGES` pages of the outer, every pair compared."""
    passes = pages(lrows) / BLOCK_PAGES + 1.0
    return (
        SEQ_PAGE * (pages(lrows) + passes * pages(rrows))
        + CPU_OPERATOR * lrows * rrows
        + CPU_TUPLE * out
    )


JOIN_COSTS = {"hashjoin": hashjoin_cost, "sortmerge": sortmerge_cost,
              "indexnl": indexnl_cost, "blocknl": blocknl_cost}
"""The ``io`` model's join methods → their local cost from the left input's, the right
input's and the output's estimated rows."""


def sort_cost(rows: Rows) -> Rows:
    """Sort ``rows`` (comparisons; a sort past :data:`SORT_MEMORY_ROWS` spills its input
    once): of one expression or element-wise, the same bits (``math.log2`` either way)."""
    cpu = 2.0 * CPU_OPERATOR * rows * _log2(np.maximum(rows, 2.0)
                                            if isinstance(rows, np.ndarray) else max(rows, 2.0))
    spill = _when(rows > SORT_MEMORY_ROWS, 2.0 * SEQ_PAGE * pages(rows))
    return cpu + spill


def _log2(x: Rows) -> Rows:
    """``math.log2`` of one value or of each (numpy's may differ in the last bit)."""
    if isinstance(x, np.ndarray):
        return np.fromiter(map(math.log2, x.tolist()), np.float64, len(x))
    return math.log2(x)


_ONLY_ANY = ["any"]
"""``[space.ANY]``: a model without physical properties asks only for any order."""


class CostModel:
    """Interface: alternatives per (expression, property) and the local cost of each."""

    name: str = ""
    symmetric: bool = False
    """Whether every join costs the same in both orders: then :meth:`joins` is given each
    split in one order only (:meth:`~reopt.costmodel.joingraph.JoinGraph.halves`)."""
    join_methods: tuple[str, ...] = ()
    operators: tuple[str, ...] = ()
    children_within: bool = False
    """Whether every alternative's children are contained in its OR node's expression (a
    join's sides split it, an enforcer reads it, the final operator the whole query): then a
    child's estimate moves only if the node's does, and :meth:`PlanSpace.stale_nodes` need
    not look through each node's columns for children outside it. False (the safe default):
    it does. Checked for every registered model in ``tests/test_stale.py``."""
    costs_follow_rows: bool = False
    """Whether every local cost of an OR node, before its operator's factor, is a function of
    that node's own summary (its expression's estimated rows) alone: then two spaces whose
    summaries of a node are equal, and whose factors of its operators are, give it the same
    local costs, and :meth:`PlanSpace.answers_differ` need not cost its alternatives to tell
    (most of a stale test's time on large queries). False (the safe default): it costs them.
    Checked for every registered model in ``tests/test_stale.py``."""

    def has_final(self, space: PlanSpace) -> bool:
        return False

    def reads_root(self, space: PlanSpace) -> bool:
        """Whether every local cost reads the whole query's estimate (then any moved
        estimate moves every cost: :meth:`PlanSpace.changed_inputs`)."""
        return False

    def interesting_props(self, space: PlanSpace, expr: int) -> list[str]:
        return _ONLY_ANY

    def scan_alternatives(self, space: PlanSpace, expr: int, prop: str) -> list[Alt]:
        raise NotImplementedError

    def join_alternatives(
        self, space: PlanSpace, expr: int, prop: str, left: int, right: int, method: str
    ) -> list[Alt]:
        raise NotImplementedError

    def joins(self, space: PlanSpace, expr: int, prop: str, method: str,
              lefts: list[int]) -> AltColumns:
        """The joins of ``method`` over all splits of an OR node (given by their left sides,
        sorted; the right side is ``expr ^ left``; one order per split for a
        :attr:`symmetric` model), in split order, as columns: the batch form of
        :meth:`join_alternatives` (a model may answer it without a call per split, with the
        same alternatives)."""
        out: list[Alt] = []
        for left in lefts:
            out += self.join_alternatives(space, expr, prop, left, expr ^ left, method)
        return AltColumns.of(out)

    batch_splits_from: int | None = None
    """The fewest splits of an expression (both orders) for which one call of
    :meth:`joins_batch` answers an OR node's joins of every method faster than :meth:`joins`
    does method by method (:meth:`PlanSpace.join_columns`: the tuple-at-a-time ``Fn_split``);
    None: never (no batch form, or joins cheaper than numpy's fixed cost per call)."""

    def joins_batch(self, space: PlanSpace, exprs: np.ndarray, props: np.ndarray,
                    methods: np.ndarray) -> tuple[np.ndarray, ...] | None:
        """:meth:`joins` of many OR nodes at once (the batch ``Fn_split``): for each input
        row's (expression, property, method), its joins in split order, as columns — the row
        each came from, index, left, left property, right, right property — or None: ask
        :meth:`joins` node by node (what every model but ``cout`` and ``io`` answers)."""
        return None

    def enforcer_alternatives(self, space: PlanSpace, expr: int, prop: str) -> list[Alt]:
        return []

    def enforcers_batch(self, space: PlanSpace, exprs: np.ndarray, props: np.ndarray,
                        methods: np.ndarray) -> tuple[np.ndarray, ...] | None:
        """:meth:`enforcer_alternatives` of many OR nodes at once (the batch ``Fn_enforce``):
        for each input row's (expression, property, enforcer), its enforcers of that
        operator as columns — the row each came from, index, input expression, input
        property — or None: ask row by row."""
        return None

    def final_alternatives(self, space: PlanSpace, prop: str) -> list[Alt]:
        return []

    def node_columns(self, space: PlanSpace, expr: int, prop: str) -> AltColumns:
        """Every alternative of an OR node as columns, in the order of
        :meth:`~reopt.costmodel.space.PlanSpace.alternatives`: scans, enforcers, the final
        operator, then the joins by method (:meth:`PlanSpace.all_columns`). A model may answer
        it without asking each built-in, with the same columns."""
        return space.all_columns(expr, prop)

    def local_cost(self, space: PlanSpace, alt: Alt) -> float:
        raise NotImplementedError

    def costed_nodes(self, space: PlanSpace
                     ) -> tuple[dict[tuple[int, str], AltColumns],
                                dict[tuple[int, str], list[float]]] | None:
        """Every OR node's columns and local costs (before operator factors) — what
        :meth:`node_columns` and :meth:`local_costs` answer node by node — in one pass, for
        a model that knows them all more cheaply at once than through a chain of calls per
        node; None (the default): node by node. A search from scratch asks for them first
        (:meth:`PlanSpace.costed`); nodes left out are asked for one by one."""
        return None

    def local_costs_of(self, space: PlanSpace, alts: list[Alt]) -> list[float]:
        """:meth:`local_cost` of many alternatives of any OR nodes (the batch form)."""
        return [self.local_cost(space, a) for a in alts]

    def local_costs(self, space: PlanSpace, expr: int, prop: str, cols: AltColumns
                    ) -> list[float]:
        """:meth:`local_cost` of each of one OR node's alternatives (the batch form)."""
        return [self.local_cost(space, a) for a in space.alternatives(expr, prop)]

    def local_cost_columns(self, space: PlanSpace, expr: np.ndarray, op: np.ndarray,
                           index: np.ndarray | None = None, left: np.ndarray | None = None,
                           right: np.ndarray | None = None) -> np.ndarray | None:
        """:meth:`local_cost` of many alternatives of any OR nodes given as columns — their
        OR nodes' expressions (``int64``), their operators (positions in
        :attr:`operators`) and, where the caller has them, their indexes and left and right
        children's expressions (``int64``) — before operator factors; None where the model
        has no vectorized form, or needs a column not given (callers then ask
        :meth:`local_costs` node by node)."""
        return None


_ANY = np.array([ANY], dtype=object)


def _anys(n: int) -> np.ndarray:
    """``n`` times ``ANY`` as a read-only ``object`` array: one element seen ``n`` times (a
    broadcast view, stride 0), so a batch of joins does not fill (and reference-count) a new
    array of hundreds of thousands of the same string — on large-clique-17 12 ms an
    optimization — and its encoding as a column reads the one string once
    (:meth:`~reopt.evaluator.frames.Strings.encode`)."""
    return np.broadcast_to(_ANY, (n,))


class CoutModel(CostModel):
    """C_out: the sum of the estimated rows of every join in the plan.

    C_out is symmetric: ``L ⋈ R`` and ``R ⋈ L`` cost the same, so each csg-cmp pair is ONE
    join alternative, written with the side holding the expression's lowest relation on the
    left. A second alternative per pair would double every optimizer's work (and the
    declarative optimizer's SearchSpace) without ever changing a best cost; DPccp costs each
    pair once for the same reason."""

    name = "cout"
    symmetric = True
    children_within = True
    costs_follow_rows = True  # a scan costs 0, a join its own expression's rows
    join_methods = ("join",)
    operators = ("scan", "join")

    def scan_alternatives(self, space: PlanSpace, expr: int, prop: str) -> list[Alt]:
        return [Alt(expr, prop, 0, "scan", "scan")] if prop == ANY else []

    def join_alternatives(self, space, expr, prop, left, right, method):
        if method != "join" or prop != ANY or not left & expr & -expr:
            return []
        return [Alt(expr, prop, left, "join", "join", left, ANY, right, ANY)]

    def joins(self, space, expr, prop, method, lefts):
        if method != "join" or prop != ANY or not lefts:
            return NO_COLUMNS
        k = len(lefts)  # one order per pair (class doc)
        joins, anys = ["join"] * k, [ANY] * k
        # (tuple.__new__: without the Python-level __new__ of a NamedTuple, once per node)
        return tuple.__new__(AltColumns, (lefts, joins, joins, lefts, anys,
                                          [expr ^ left for left in lefts], anys))

    def joins_batch(self, space, exprs, props, methods):
        # joins() of every row at once, from the splits as arrays (of either enumeration: the
        # Python one's lists made arrays once per graph): a row of method "join", property
        # "any" and an expression with splits (not the top) has one join per split
        if type(self).joins is not CoutModel.joins:
            return None
        unions, bounds, lefts = space.graph.halves_arrays()
        exprs = np.asarray(exprs, dtype=np.int64)
        pos = np.searchsorted(unions, exprs).clip(0, max(len(unions) - 1, 0))
        ok = ((np.asarray(methods, dtype=object) == "join")
              & (np.asarray(props, dtype=object) == ANY) & (exprs != space.top))
        if len(unions):
            ok &= unions[pos] == exprs
        else:
            ok[:] = False
        at = np.flatnonzero(ok)
        lo, hi = bounds[pos[at]], bounds[pos[at] + 1]
        count = hi - lo
        row = np.repeat(at, count)
        offsets = np.arange(int(count.sum()), dtype=np.int64) - np.repeat(
            np.cumsum(count) - count, count)
        left = lefts[np.repeat(lo, count) + offsets]
        anys = _anys(len(row))
        return row, left, left, anys, exprs[row] ^ left, anys

    def node_columns(self, space, expr, prop):
        # what all_columns assembles, directly: a leaf's OR node holds its scan, any other
        # its joins (no enforcers, no final operator, one join method; a property other
        # than ``any`` is never asked for and has no alternative)
        if prop != ANY or expr == space.top:
            return NO_COLUMNS
        if expr & (expr - 1) == 0:
            return _COUT_SCAN
        return self.joins(space, expr, prop, "join", space.split_lefts(expr))

    def costed_nodes(self, space):
        # node_columns and local_costs of every OR node with an alternative: a leaf's scan
        # costs 0, each join of an expression (one per split, from the splits grouped by
        # union) its estimate; no call per node but the estimate
        leaves = [(1 << i, ANY) for i in range(space.query.n)]
        columns = dict.fromkeys(leaves, _COUT_SCAN)
        costs = {leaf: [0.0] for leaf in leaves}
        card = space.estimator.card  # (summary, but no expression here is the final one's)
        for expr, lefts in space.graph.halves().items():
            k = len(lefts)
            joins, anys = ["join"] * k, [ANY] * k
            columns[(expr, ANY)] = tuple.__new__(AltColumns, (
                lefts, joins, joins, lefts, anys, list(map(expr.__xor__, lefts)), anys))
            costs[(expr, ANY)] = [card(expr)] * k
        return columns, costs

    def local_cost(self, space: PlanSpace, alt: Alt) -> float:
        return 0.0 if alt.log_op == "scan" else space.summary(alt.expr)

    def local_costs_of(self, space, alts):
        summary = space.summary
        return [0.0 if a[3] == "scan" else summary(a[0]) for a in alts]

    def local_costs(self, space, expr, prop, cols):
        # a leaf's OR node holds only its scan, any other only joins
        return [0.0 if expr & (expr - 1) == 0 else space.summary(expr)] * len(cols.index)

    def local_cost_columns(self, space, expr, op, index=None, left=None, right=None):
        # a scan (operator 0) costs 0, a join its expression's rows: one estimate per run of
        # equal expressions (a node's alternatives are contiguous), vectorized
        out = np.zeros(len(op))
        if not len(op):
            return out
        heads = np.flatnonzero(np.concatenate(([True], expr[1:] != expr[:-1])))
        rows = space.summaries(expr[heads])
        out[:] = np.repeat(rows, np.diff(np.append(heads, len(expr))))
        out[op == 0] = 0.0
        return out


class IOModel(CostModel):
    """The paper's physical model: scans, four joins, sort enforcer, final aggregate."""

    name = "io"
    children_within = True
    batch_splits_from = 64  # (one batch call costs about what 16-32 splits' joins do, and
    # the first builds the per-split bitsets of the whole space: not below 7 relations)
    join_methods = ("hashjoin", "sortmerge", "indexnl", "blocknl")
    operators = (
        "tablescan", "indexscan", "indexprobe", "hashjoin", "sortmerge", "indexnl", "blocknl",
        "sort", "hashagg", "sortagg", "topsort",
    )

    def has_final(self, space: PlanSpace) -> bool:
        return space.query.has_final

    # -- properties --------------------------------------------------------------------------
    def interesting_props(self, space: PlanSpace, expr: int) -> list[str]:
        if expr == space.top:
            return [ANY]
        out = [ANY]
        classes: set[str] = set()
        probes: set[str] = set()
        outside = space.all & ~expr
        for p in space.predicates:
            for mine, other, col in ((p.left_bit, p.right_bit, p.left),
                                     (p.right_bit, p.left_bit, p.right)):
                if mine & expr and other & outside:
                    classes.add(p.cls)
                    if space.is_leaf(expr) and self._index_no(space, col) is not None:
                        probes.add(p.cls)
        out += [sort_prop(c) for c in sorted(classes)]
        out += [probe_prop(c) for c in sorted(probes)]
        return out

    @staticmethod
    def _table(space: PlanSpace, alias: str):
        return space.catalog.table(space.query.table_of(alias))

    def _index_no(self, space: PlanSpace, col) -> int | None:
        """1-based position of ``col``'s index in its table's index list (the alt's index)."""
        idx = self._table(space, col.alias).indexes
        return idx.index(col.column) + 1 if col.column in idx else None

    def _class_columns(self, space: PlanSpace, alias: str, cls: str) -> list:
        return sorted(c for c, k in space.classes.items() if k == cls and c.alias == alias)

    # -- scans -------------------------------------------------------------------------------
    def scan_alternatives(self, space: PlanSpace, expr: int, prop: str) -> list[Alt]:
        alias = space.relations(expr)[0]
        table = self._table(space, alias)
        out: list[Alt] = []
        if prop == ANY:
            out.append(Alt(expr, prop, 0, "scan", "tablescan"))
            for k, col in enumerate(table.indexes, start=1):
                if any(_restricts(p, col) for p in space.query.filters_of(alias)):
                    out.append(Alt(expr, prop, k, "scan", "indexscan"))
            return out
        kind, cls = prop.split(":", 1)
        cols = [c.column for c in self._class_columns(space, alias, prop_class(prop))]
        if kind == "sort":
            if table.sorted_on in cols:
                out.append(Alt(expr, prop, 0, "scan", "tablescan"))
            for k, col in enumerate(table.indexes, start=1):
                if col in cols:
                    out.append(Alt(expr, prop, k, "scan", "indexscan"))
        elif kind == "probe":
            for k, col in enumerate(table.indexes, start=1):
                if col in cols:
                    out.append(Alt(expr, prop, k, "scan", "indexprobe"))
        return out

    # -- joins -------------------------------------------------------------------------------
    def join_alternatives(self, space, expr, prop, left, right, method):
        crossing = space.crossing(left, right)
        if method in ("blocknl", "hashjoin"):
            # block nested-loop joins anything; a hash join needs an equi-join predicate
            if prop != ANY or (method == "hashjoin" and not crossing):
                return []
            return [Alt(expr, prop, left, "join", method, left, ANY, right, ANY)]
        if not crossing:
            return []  # merge and index joins need an equi-join predicate
        if method == "sortmerge":
            classes = sorted({p.cls for p in crossing})
            return [
                Alt(expr, prop, left, "join", method, left, sort_prop(c), right, sort_prop(c))
                for c in classes
                if prop in (ANY, sort_prop(c))
            ]
        if method == "indexnl":
            if prop != ANY or not space.is_leaf(right):
                return []
            classes = set()
            for p in crossing:
                col = p.left if p.left_bit == right else p.right
                if self._index_no(space, col) is not None:
                    classes.add(p.cls)
            return [
                Alt(expr, prop, left, "join", method, left, ANY, right, probe_prop(c))
                for c in sorted(classes)
            ]
        return []

    def joins_batch(self, space, exprs, props, methods):
        # joins() of every row at once: each row's splits (both orders, from the join graph's
        # arrays), and per split the classes its crossing predicates join on and those an
        # index on the right (a leaf) answers, as bitsets made once per query (_SplitClasses);
        # a row's joins are then one per split (block NL; hash join if a class crosses) or
        # one per class of a split's bitset (sort-merge, index NL), in split order, each
        # split's classes by name — the order of join_alternatives and sorted()
        splits = _SplitClasses.of(space)
        if splits is None or type(self).joins is not IOModel.joins \
                or type(self).join_alternatives is not IOModel.join_alternatives:
            return None
        exprs = np.asarray(exprs, dtype=np.int64)
        props = np.asarray(props, dtype=object)
        methods = np.asarray(methods, dtype=object)
        pos = np.searchsorted(splits.unions, exprs).clip(0, max(len(splits.unions) - 1, 0))
        has = splits.unions[pos] == exprs if len(splits.unions) else np.zeros(len(exprs), bool)
        anyp = props == ANY
        sort_class = np.fromiter(map(splits.sort_class.get, props.tolist(), repeat(-1)),
                                 np.int64, len(props))
        plain = has & anyp & ((methods == "blocknl") | (methods == "hashjoin"))
        merge = has & (methods == "sortmerge") & (anyp | (sort_class >= 0))
        probe = has & anyp & (methods == "indexnl")
        at = np.flatnonzero(plain | merge | probe)
        # every (row, split) of those rows, in row order, each row's splits in order
        lo = splits.bounds[pos[at]]
        count = splits.bounds[pos[at] + 1] - lo
        row = np.repeat(at, count)
        split = np.arange(int(count.sum()), dtype=np.int64) + np.repeat(
            lo - (np.cumsum(count) - count), count)
        # per (row, split): the bitset of what it emits, one join per bit (bit 0 for a plain
        # join, else the classes)
        classes = splits.classes[split]
        emit = np.where(merge[row], np.where(sort_class[row] >= 0,
                                             classes & (1 << sort_class[row].clip(0)), classes),
                        np.where(probe[row], splits.probes[split],
                                 np.where(methods[row] == "blocknl", 1,
                                          (classes != 0).astype(np.int64))))
        per = np.bitwise_count(emit).astype(np.int64)
        keep = np.repeat(np.arange(len(row)), per)
        nth = np.arange(len(keep), dtype=np.int64) - np.repeat(np.cumsum(per) - per, per)
        cls = _nth_bit(emit[keep], nth)
        row, split = row[keep], split[keep]
        left = splits.lefts[split]
        right = exprs[row] ^ left
        left_prop = _anys(len(row)).copy()
        right_prop = left_prop.copy()
        merged = merge[row]
        left_prop[merged] = right_prop[merged] = splits.sort_names[cls[merged]]
        probed = probe[row]
        right_prop[probed] = splits.probe_names[cls[probed]]
        return row, left, left, left_prop, right, right_prop

    def enforcer_alternatives(self, space: PlanSpace, expr: int, prop: str) -> list[Alt]:
        if prop.startswith("sort:"):
            return [Alt(expr, prop, 0, "sort", "sort", expr, ANY)]
        return []

    def enforcers_batch(self, space, exprs, props, methods):
        # enforcer_alternatives of every row: a sort of the same expression's any-order
        # plans for a row asking for a sort property and the sort operator
        sorting = np.fromiter(map(str.startswith, np.asarray(props).tolist(),
                                  repeat("sort:")), bool, len(props))
        at = np.flatnonzero(sorting & (np.asarray(methods, dtype=object) == "sort"))
        return at, np.zeros(len(at), dtype=np.int64), np.asarray(exprs, np.int64)[at], \
            _anys(len(at))

    def final_alternatives(self, space: PlanSpace, prop: str) -> list[Alt]:
        q = space.query
        if q.group_by or q.aggregates:
            ops = ("hashagg", "sortagg")
            log = "groupby"
        else:
            ops = ("topsort",)
            log = "orderby"
        return [Alt(space.top, prop, 0, log, op, space.all, ANY) for op in ops]

    # -- costs -------------------------------------------------------------------------------
    def local_cost(self, space: PlanSpace, alt: Alt) -> float:
        op = alt.phy_op
        join = JOIN_COSTS.get(op)
        if join is not None:
            return join(space.summary(alt.left), space.summary(alt.right),
                        space.summary(alt.expr))
        return self._unjoined_cost(space, op, alt.expr, alt.index)

    def local_cost_columns(self, space, expr, op, index=None, left=None, right=None):
        # the joins (nearly every row) and the sort enforcer vectorized, by the formulas
        # local_cost applies; the scans and final operators (a few a query) one by one
        if index is None or left is None or right is None:
            return None
        out = np.empty(len(op), dtype=np.float64)
        codes = [self.operators.index(m) for m in JOIN_COSTS]
        sort = self.operators.index("sort")
        sorts = np.flatnonzero(op == sort)
        if len(sorts):  # (the enforcer: its own expression's rows sorted)
            out[sorts] = sort_cost(space.summaries(np.asarray(expr)[sorts]))
        joins = np.flatnonzero(np.isin(op, codes))
        if len(joins):
            rows = [space.summaries(np.asarray(c)[joins]) for c in (left, right, expr)]
            by_op = op[joins]
            for code, formula in zip(codes, JOIN_COSTS.values(), strict=True):
                at = np.flatnonzero(by_op == code)
                if len(at):
                    out[joins[at]] = formula(*(r[at] for r in rows))
        others = np.flatnonzero(~np.isin(op, [*codes, sort]))
        ops = self.operators
        for k, e, i, o in zip(others.tolist(), np.asarray(expr)[others].tolist(),
                              np.asarray(index)[others].tolist(), op[others].tolist(),
                              strict=True):
            out[k] = self._unjoined_cost(space, ops[o], e, i)
        return out

    def _unjoined_cost(self, space: PlanSpace, op: str, expr: int, index: int) -> float:
        """The local cost of an operator other than a join: a scan (``index``: its index),
        the sort enforcer, the final group-by or sort (``expr``: its OR node's)."""
        out = space.summary(expr)
        if op in ("tablescan", "indexscan", "indexprobe"):
            alias = space.relations(expr)[0]
            rows = space.estimator.base_rows(alias)
            if op == "tablescan":
                return SEQ_PAGE * pages(rows) + CPU_TUPLE * rows
            if op == "indexprobe":
                return 0.0
            table = self._table(space, alias)
            col = table.indexes[index - 1]
            sel = 1.0
            for p in space.query.filters_of(alias):
                if _restricts(p, col):
                    sel *= space.estimator.predicate_selectivity(p)
            matching = rows * sel
            fetch = pages(matching) if table.sorted_on == col else matching
            return RANDOM_PAGE * (INDEX_HEIGHT + fetch) + CPU_TUPLE * matching
        if op == "sort":
            return sort_cost(out)
        if op in ("hashagg", "sortagg", "topsort"):
            rows_in = space.summary(space.all)
            order = sort_cost(out) if space.query.order_by else 0.0
            if op == "hashagg":
                return 2.0 * CPU_TUPLE * rows_in + CPU_TUPLE * out + order
            if op == "sortagg":
                return sort_cost(rows_in) + CPU_OPERATOR * rows_in + CPU_TUPLE * out + order
            return sort_cost(rows_in)
        raise ValueError(f"io model: no cost for operator {op!r}")


def _nth_bit(masks: np.ndarray, nth: np.ndarray) -> np.ndarray:
    """The position of each mask's ``nth`` set bit, lowest first (``nth`` below its
    popcount)."""
    masks = masks.copy()
    for k in range(int(nth.max()) if len(nth) else 0):
        drop = nth > k
        masks[drop] &= masks[drop] - 1
    return np.bitwise_count((masks & -masks) - 1).astype(np.int64)


class _SplitClasses:
    """Per split of a query's join graph, both orders (:meth:`JoinGraph.flat_lefts`), the
    equivalence classes its crossing predicates join on, and those of them an index on the
    right side's join column answers when the right side is one relation (an index
    nested-loop join's inner), each as a bitset over the classes sorted by name — what
    :meth:`IOModel.join_alternatives` reads off :meth:`PlanSpace.crossing` split by split.
    Structure: made once per plan space (and shared with the spaces of
    :meth:`PlanSpace.with_adjustments` made after it)."""

    def __init__(self, space: PlanSpace, model: IOModel, rights: np.ndarray,
                 crossing: np.ndarray) -> None:
        self.unions, self.bounds, self.lefts = space.graph.flat_lefts()
        names = sorted({p.cls for p in space.predicates})
        rank = {c: k for k, c in enumerate(names)}
        self.sort_class = {sort_prop(c): k for k, c in enumerate(names)}
        self.sort_names = np.array([sort_prop(c) for c in names], dtype=object)
        self.probe_names = np.array([probe_prop(c) for c in names], dtype=object)
        of_class = [1 << rank[p.cls] for p in space.predicates]
        self.classes = fold_bits(crossing, of_class)
        # predicates whose column at relation i has an index (index NL's inner is relation i)
        indexed = [0] * space.query.n
        for k, p in enumerate(space.predicates):
            for bit, col in ((p.left_bit, p.left), (p.right_bit, p.right)):
                if model._index_no(space, col) is not None:
                    indexed[bit.bit_length() - 1] |= 1 << k
        leaf = (rights & (rights - 1)) == 0
        at = np.bitwise_count(rights - 1).astype(np.int64)  # a leaf's relation
        probing = np.where(leaf, np.asarray(indexed, dtype=np.int64)[
            np.where(leaf, at, 0)], 0) if space.query.n else np.zeros(len(rights), np.int64)
        self.probes = fold_bits(crossing & probing, of_class)

    @staticmethod
    def of(space: PlanSpace) -> _SplitClasses | None:
        """The space's (made on first use); None for a query of more than 63 predicates
        (:meth:`PlanSpace.crossing_masks`)."""
        memo = space.__dict__
        if "_split_classes" not in memo:
            unions, bounds, lefts = space.graph.flat_lefts()
            rights = np.repeat(unions, np.diff(bounds)) ^ lefts
            crossing = space.crossing_masks(lefts, rights)
            memo["_split_classes"] = None if crossing is None else _SplitClasses(
                space, space.model, rights, crossing)
        return memo["_split_classes"]


def _restricts(p, column: str) -> bool:
    """Whether a filter can be answered by an index on ``column`` (sargable predicate)."""
    if isinstance(p, Compare):
        return p.column.column == column and p.op != "<>"
    if isinstance(p, (Between, InList)):
        return p.column.column == column
    return False


_COUT_SCAN = AltColumns([0], ["scan"], ["scan"], [0], [NONE], [0], [NONE])
"""A leaf's only alternative under ``cout``, as columns: the same for every leaf (columns are
never modified, like the shared ``NO_COLUMNS``)."""

class RateCostModel(RateModel, CostModel):
    """:class:`~reopt.costmodel.rate.RateModel` under the :class:`CostModel` interface."""

    children_within = True


class DistCostModel(DistModel, CostModel):
    """:class:`~reopt.costmodel.dist.DistModel` under the :class:`CostModel` interface."""

    children_within = True


MODELS: dict[str, CostModel] = {"cout": CoutModel(), "io": IOModel(), "rate": RateCostModel(),
                                "dist": DistCostModel()}


def cost_model(name: str, objective: str | None = None,
               profile: str | None = None, dist: str | None = None) -> CostModel:
    """The cost model ``name``; ``objective`` (``rate`` or ``time-to:N``) and ``profile``
    (the per-tuple costs, :data:`reopt.costmodel.rate.PROFILES`) only for ``rate``; ``dist``
    (the constants, :data:`reopt.costmodel.dist.PROFILES`) only for ``dist``."""
    try:
        model = MODELS[name]
    except KeyError:
        raise ReoptError(
            f"unknown cost model '{name}' (choose from {', '.join(sorted(MODELS))})"
        ) from None
    if dist is not None and name != "dist":
        raise ReoptError(f"a dist profile ('{dist}') applies to the dist cost model only, "
                         f"not to '{name}'")
    if objective is None and profile is None:
        return model if dist is None else DistCostModel(dist_profile(dist))
    if name != "rate":
        what = f"an objective ('{objective}')" if objective is not None \
            else f"a rate profile ('{profile}')"
        raise ReoptError(f"{what} applies to the rate cost model only, not to '{name}'")
    return RateCostModel(objective or "rate", rate_profile(profile))
