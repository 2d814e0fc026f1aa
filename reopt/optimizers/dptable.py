"""Bottom-up dynamic programming as columns: every OR node's winner, settled a rank at a time.

The and-or graph of a query does not change with its statistics, so ``bottomup-inc`` lays it
out once as arrays: OR nodes numbered in rank order (:meth:`PlanSpace.rank`: children rank
strictly below parents), their alternatives contiguous per node (CSR offsets), each with its
children's node numbers and its local cost. Settling a set of nodes is then a few numpy
operations per rank over their alternatives — ``cost = (local + best[left]) + best[right]``,
a segmented minimum, the first alternative reaching it — instead of a Python loop per
alternative: what makes an update a small fraction of optimizing from scratch.

Same numbers as :class:`~reopt.optimizers.bottomup.BottomUp`, bit for bit: float64 additions
in the same order (an absent child reads a 0.0 entry, and ``x + 0.0 == x``), the winner the
first alternative of least cost (the Python loop keeps the first strict minimum), a child
without a plan an infinite cost (costs are finite: estimates and factors are bounded).
"""

from __future__ import annotations

from functools import cached_property
from itertools import chain
from operator import itemgetter

import numpy as np

from reopt.costmodel.space import PlanSpace

Group = tuple[int, str]
SCALAR_ALTERNATIVES = 4096
"""Tables of at most this many alternatives are settled by a plain loop (:meth:`DPTable.settle`)."""


class DPTable:
    """The layout (statistics-independent) and the DP state (local costs, winners)."""

    def __init__(self, space: PlanSpace):
        # bottom-up: by rank, and within a rank in the order of groups() (a stable sort)
        ranked = sorted(((space.rank(*g), g) for g in space.groups()), key=itemgetter(0))
        groups = [g for _, g in ranked]
        self.groups = groups
        self.index = {g: k for k, g in enumerate(groups)}
        n = len(groups)
        self.absent = n
        """The node number of an absent child: its best cost is 0.0."""
        # (costed: a space from scratch then costs every node in one pass, as cost_nodes is
        # about to ask; its columns are the same)
        cols = [space.costed(*g)[0] for g in groups]
        counts = np.fromiter((c.count for c in cols), dtype=np.int64, count=n)
        self.offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=self.offsets[1:])
        self.node_of = np.repeat(np.arange(n, dtype=np.int64), counts)
        get, absent = self.index.get, self.absent
        self.left = self._children(cols, "left", get, absent)
        self.right = self._children(cols, "right", get, absent)
        self.exprs = np.fromiter((e for e, _ in groups), dtype=np.int64, count=n)
        """Each node's expression."""
        ranks = np.fromiter((r for r, _ in ranked), dtype=np.int64, count=n)
        self.rank_of = ranks
        """Each node's rank (:meth:`PlanSpace.rank`)."""
        ops = {op: k for k, op in enumerate(space.model.operators)}
        self.op_code = np.fromiter(
            (ops.get(op, -1) for op in chain.from_iterable(c.phy_op for c in cols)),
            dtype=np.int64, count=int(self.offsets[-1]))
        """Each alternative's operator as its position in the model's operator list."""
        self.operators = ops
        self.local = np.empty(int(self.offsets[-1]), dtype=np.float64)
        self.best = np.full(n + 1, np.inf)
        self.best[absent] = 0.0
        self.winner = np.full(n, -1, dtype=np.int64)
        """Index (within its node) of each node's winning alternative; -1: no plan."""

    @cached_property
    def rank_nodes(self) -> list[np.ndarray]:
        """Node numbers of each rank, ascending (made when first read: only a large table
        settles a rank at a time)."""
        cuts = np.flatnonzero(np.diff(self.rank_of)) + 1
        return np.split(np.arange(self.absent, dtype=np.int64), cuts)

    @cached_property
    def lists(self) -> tuple[list[int], list[int], list[int], list[int]]:
        """The structure as lists — offsets, left and right children, and each node's number
        of alternatives — for the loops of a small table (made when first read)."""
        offsets = self.offsets.tolist()
        sizes = [offsets[k + 1] - offsets[k] for k in range(len(offsets) - 1)]
        return offsets, self.left.tolist(), self.right.tolist(), sizes

    @cached_property
    def expr_list(self) -> list[int]:
        """Each node's expression, as a list (:attr:`exprs`)."""
        return self.exprs.tolist()

    @property
    def scalar(self) -> bool:
        """Whether the table is small enough for plain loops (:data:`SCALAR_ALTERNATIVES`):
        numpy's fixed cost per call would be more than their work."""
        return len(self.local) <= SCALAR_ALTERNATIVES

    @staticmethod
    def _children(cols, side: str, get, absent: int) -> np.ndarray:
        exprs = chain.from_iterable(getattr(c, side) for c in cols)
        props = chain.from_iterable(getattr(c, side + "_prop") for c in cols)
        return np.fromiter((get((e, p), absent) if e else absent
                            for e, p in zip(exprs, props, strict=True)), dtype=np.int64)

    # -- local costs ------------------------------------------------------------------------
    def cost_nodes(self, space: PlanSpace, nodes: np.ndarray | list[int]) -> None:
        """(Re)compute the local costs of the given nodes' alternatives under ``space``: in
        one vectorized call where the model has one
        (:meth:`~reopt.costmodel.models.CostModel.local_cost_columns`, then the operator
        factors, as :meth:`PlanSpace.local_costs` multiplies them: the same bits), else node
        by node (``nodes`` may then be a list)."""
        groups, offsets, local = self.groups, self.offsets, self.local
        if len(local) > SCALAR_ALTERNATIVES:  # a small table: numpy's calls cost more
            nodes = np.asarray(nodes, dtype=np.int64)
            alts = self.alternatives_of(nodes)
            costs = space.model.local_cost_columns(
                space, self.exprs[self.node_of[alts]], self.op_code[alts])
            if costs is not None:
                factors = space.adjustments.op_factors
                if factors:
                    by_code = np.ones(len(self.operators) + 1)  # code -1: no factor
                    for op, k in self.operators.items():
                        by_code[k] = factors.get(op, 1.0)
                    costs = costs * by_code[self.op_code[alts]]
                local[alts] = costs
                return
        nodes = nodes.tolist() if isinstance(nodes, np.ndarray) else nodes
        space.estimate([groups[k][0] for k in nodes])
        for k in nodes:
            local[offsets[k]:offsets[k + 1]] = space.local_costs(*groups[k])

    def alternatives_of(self, nodes: np.ndarray) -> np.ndarray:
        """The positions of the given nodes' alternatives, node by node."""
        starts = self.offsets[nodes]
        sizes = self.offsets[nodes + 1] - starts
        first = np.concatenate(([0], sizes.cumsum()[:-1]))
        return np.arange(int(sizes.sum())) + np.repeat(starts - first, sizes)

    def using(self, ops: set[str]) -> np.ndarray:
        """The mask of nodes with an alternative whose operator is in ``ops``."""
        codes = [self.operators[op] for op in ops if op in self.operators]
        out = np.zeros(self.absent, dtype=bool)
        out[self.node_of[np.isin(self.op_code, codes)]] = True
        return out

    # -- settling ---------------------------------------------------------------------------
    def settle(self, dirty: np.ndarray | list[bool], propagate: bool
               ) -> np.ndarray | list[bool]:
        """Settle the nodes marked in ``dirty`` (a boolean mask over nodes: an array, or a
        list for a small table), rank by rank; with ``propagate``, also every node with an
        alternative whose child's best cost or plan changed. Returns the mask of nodes
        settled (a list for a small table, an array otherwise).

        A small table (at most :data:`SCALAR_ALTERNATIVES`) is settled by a plain loop
        (:meth:`_settle_scalar`): numpy's two dozen calls per rank would cost more than the
        work. Both give the same numbers (the same additions, the same first minimum;
        ``tests/test_incremental_procedural.py`` compares them)."""
        if self.scalar:
            return self._settle_scalar(dirty, propagate)
        return self._settle_vector(np.asarray(dirty, dtype=bool), propagate)

    def _settle_scalar(self, dirty: np.ndarray | list[bool], propagate: bool) -> list[bool]:
        n = self.absent
        offsets, left, right, _ = self.lists
        local, best, winner = self.local.tolist(), self.best.tolist(), self.winner.tolist()
        todo = dirty.tolist() if isinstance(dirty, np.ndarray) else dirty
        done = [False] * n
        changed = [False] * (n + 1)
        for k in range(n):  # nodes are numbered in rank order: children come first
            lo, hi = offsets[k], offsets[k + 1]
            if not todo[k]:
                if not propagate or not any(changed[left[a]] or changed[right[a]]
                                            for a in range(lo, hi)):
                    continue
            done[k] = True
            least, win = float("inf"), -1
            for a in range(lo, hi):
                total = local[a] + best[left[a]] + best[right[a]]
                if total < least:
                    least, win = total, a - lo
            if least != best[k] or win != winner[k]:
                changed[k] = True
                best[k], winner[k] = least, win
        self.best[:n] = best[:n]
        self.winner[:] = winner
        return done

    def _settle_vector(self, dirty: np.ndarray, propagate: bool) -> np.ndarray:
        n = self.absent
        changed = np.zeros(n + 1, dtype=bool)
        done = np.zeros(n, dtype=bool)
        offsets, node_of, left, right = self.offsets, self.node_of, self.left, self.right
        for nodes in self.rank_nodes:
            lo, hi = int(offsets[nodes[0]]), int(offsets[nodes[-1] + 1])
            todo = dirty[nodes]
            if propagate:
                touched = changed[left[lo:hi]] | changed[right[lo:hi]]
                if touched.any():
                    todo = todo | np.bincount(node_of[lo:hi][touched] - nodes[0],
                                              minlength=len(nodes)).astype(bool)
            if not todo.any():
                continue
            picked = nodes[todo]
            done[picked] = True
            least, win = self.cheapest(picked, self.best)
            before_best, before_win = self.best[picked], self.winner[picked]
            self.best[picked] = least
            self.winner[picked] = win
            changed[picked] = (before_best != least) | (before_win != win)
        return done

    def cheapest(self, nodes: np.ndarray, best: np.ndarray, alts: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
        """Each node's least cost over its alternatives, ``(local + best[left]) +
        best[right]`` (the loops' additions), and the first alternative reaching it (the
        loops' strict ``<``); ``inf`` and -1 for a node without a finite one. ``best``: the
        children's best costs by node number (``best[absent] == 0.0``); ``alts``:
        :meth:`alternatives_of` ``nodes``, if the caller has it."""
        left, right = self.left, self.right
        sizes = self.offsets[nodes + 1] - self.offsets[nodes]
        first = np.concatenate(([0], sizes.cumsum()[:-1]))
        if alts is None:
            alts = self.alternatives_of(nodes)
        cost = (self.local[alts] + best[left[alts]]) + best[right[alts]]
        least = np.full(len(nodes), np.inf)
        has = sizes > 0
        if has.any():
            least[has] = np.minimum.reduceat(cost, first[has])
        # the first alternative reaching its node's least cost: the least position among
        # the hits of each segment (segments are contiguous, no sort needed)
        pos = np.arange(len(alts)) - np.repeat(first, sizes)
        hit = np.where(cost == np.repeat(least, sizes), pos, len(alts))
        win = np.full(len(nodes), -1, dtype=np.int64)
        if has.any():
            win[has] = np.minimum.reduceat(hit, first[has])
        win[~np.isfinite(least)] = -1
        return least, win

    # -- reading ----------------------------------------------------------------------------
    def entry(self, g: Group) -> tuple[float, int] | None:
        k = self.index.get(g)
        if k is None or self.winner[k] < 0:
            return None
        return float(self.best[k]), int(self.winner[k])

    def entries(self) -> dict[Group, tuple[float, int]]:
        """Every node with a plan → (best cost, winning alternative's index)."""
        have = np.flatnonzero(self.winner >= 0)
        return {self.groups[k]: (float(self.best[k]), int(self.winner[k]))
                for k in have.tolist()}

    def snapshot(self) -> tuple[np.ndarray, ...]:
        return self.local.copy(), self.best.copy(), self.winner.copy()

    def restore(self, saved: tuple[np.ndarray, ...]) -> None:
        self.local, self.best, self.winner = saved
