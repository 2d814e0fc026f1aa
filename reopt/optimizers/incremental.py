"""Incremental top-down and bottom-up optimizers (``topdown-inc``, ``bottomup-inc``).

The two extremes of the paper's memoization trade-off (Section 5.4), sharing one update
procedure (:class:`Incremental`):

* :class:`BottomUpInc` memoizes everything: its first optimization is the dynamic programming
  of :class:`~reopt.optimizers.bottomup.BottomUp`, a winner for every OR node. An update
  re-settles the OR nodes the change reaches and never searches.
* :class:`TopDownInc` memoizes what branch-and-bound explored: its first optimization is the
  Volcano search of :class:`~reopt.optimizers.topdown.TopDown`, whose memo holds winners and
  "no plan under this limit" entries. An update re-searches the explored nodes the change
  reaches and forgets their limits, so a node pruned before is searched again when a parent
  asks for it under the new costs.

What a delta reaches. A local cost depends only on its operator's factor and the estimated
rows of the alternative's expression and children (README, "Cost models"; scans also on their
table's rows before filters). The and-or graph itself does not depend on statistics. So:

* an OR node whose expression *moved* (:meth:`PlanSpace.changed_inputs`: it contains a
  relation set whose estimate may differ) is stale, and so is every ancestor, since an
  ancestor's expression contains its descendants' — a card or sel delta re-settles exactly the
  supersets of what it changed, nothing else;
* a ``cost OP`` delta makes stale the nodes with an alternative using ``OP``; their parents
  hear of it only when a node's entry changed (lazy propagation).

Stale nodes are re-settled children first (by :meth:`PlanSpace.rank`); every other node's
entry is still the one a from-scratch optimization computes, so after any sequence of deltas
the result equals optimizing from scratch (property tests).

Usage::

    opt = BottomUpInc(space)
    r = opt.optimize()                 # a Result, like bottomup(space)
    r2 = opt.update(new_space)         # same query, new statistics; equal to from-scratch
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

import numpy as np

from reopt.costmodel.space import PlanSpace
from reopt.optimizers import dptable
from reopt.optimizers.base import Result, without_gc
from reopt.optimizers.dptable import DPTable
from reopt.optimizers.topdown import Group, TopDown
from reopt.plan import PlanCache, PlanNode


class Incremental:
    """What both incremental optimizers share: a memo that survives deltas, and an atomic
    update (on any failure the memo and the space are as before the call)."""

    space: PlanSpace
    touched_or: set[Group]
    """OR nodes the last optimize()/update() settled (for tests and metrics)."""

    def __init__(self, space: PlanSpace):
        self.space = space
        self.touched_or = set()
        self.plans = PlanCache()
        """The last plan's nodes, reused by the next plan where no change reaches them."""
        self._unchanged: Callable[[int], bool] | None = None
        """During an update without operator-factor changes: whether an expression did not
        move (what :class:`PlanCache` may reuse); None otherwise."""
        self._since: PlanSpace | None = None
        """During an update: the space before it (what the last plan may have been built on)."""
        self._pending: _LaterPlan | None = None
        """The last result's plan while it is not made yet: it reads the live memo until the
        next change to the memo hands it the copy taken before that change
        (:meth:`_hand_over`)."""

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_pending"] = None  # (the pending plan stays the live result's, unpickled)
        return state

    def _hand_over(self, saved: object) -> None:
        """Before the memo changes: give a result whose plan is not made yet ``saved``, the
        memo's entries as they are now (:meth:`_snapshot`), to make it from later."""
        if self._pending is not None:
            self._pending.freeze(saved)
            self._pending = None

    # -- to be provided ----------------------------------------------------------------------
    def optimize(self) -> Result:
        raise NotImplementedError

    def _update(self, old: PlanSpace, space: PlanSpace) -> Result:
        """Re-settle what the change from ``old`` to ``space`` (already ``self.space``)
        reaches."""
        raise NotImplementedError

    def _entries(self) -> dict[Group, tuple]:
        """The memo as node → entry (for tests: what a failed update must leave as it was)."""
        raise NotImplementedError

    def _snapshot(self) -> object:
        raise NotImplementedError

    def _restore(self, saved: object) -> None:
        raise NotImplementedError

    # -- the update --------------------------------------------------------------------------
    @without_gc
    def update(self, space: PlanSpace) -> Result:
        """Re-optimize for ``space`` (same query, catalog and cost model, new statistics),
        touching only what the change can affect. ``explored`` counts the OR nodes re-settled
        and the AND nodes costed by this update alone. Atomic."""
        old = self.space
        if space.query != old.query or space.model is not old.model or (
            space.catalog is not old.catalog
        ):
            raise ValueError("update() needs a space of the same query, catalog and cost model")
        saved, plans = self._snapshot(), (self.plans.nodes, self.plans.space)
        self._hand_over(saved)
        try:
            self.space, self._since = space, old
            return self._update(old, space)
        except BaseException:
            self.space = old
            self._restore(saved)
            self.plans.nodes, self.plans.space = plans
            raise
        finally:
            self._unchanged = self._since = None

    def _reuse_unmoved(self, moved: Callable[[int], bool], ops: set[str]) -> None:
        """Let this update's plan reuse the last plan's subtrees over expressions that did
        not move, unless an operator's cost factor changed (:class:`PlanCache`)."""
        self._unchanged = None if ops else (lambda expr: not moved(expr))


class BottomUpInc(Incremental):
    """Incremental System R dynamic programming: every OR node's winner memoized, as columns
    (:class:`~reopt.optimizers.dptable.DPTable`), so re-settling is vectorized."""

    def __init__(self, space: PlanSpace):
        Incremental.__init__(self, space)
        self.table: DPTable | None = None

    @without_gc
    def optimize(self) -> Result:
        table = self.table = DPTable(self.space)
        every = np.ones(table.absent, dtype=bool)
        table.cost_nodes(self.space, np.arange(table.absent))
        return self._settled(table.settle(every, propagate=False))

    def _entries(self) -> dict[Group, tuple]:
        return self.table.entries() if self.table is not None else {}

    def _snapshot(self) -> object:
        return self.table.snapshot() if self.table is not None else None

    def _restore(self, saved: object) -> None:
        if self.table is not None and saved is not None:
            self.table.restore(saved)

    def _update(self, old: PlanSpace, space: PlanSpace) -> Result:
        table = self.table
        if table is None:
            return self.optimize()
        moved, ops = space.changed_inputs(old)
        self._reuse_unmoved(moved, ops)
        if table.scalar:  # a small table: lists (moved() is moved_exprs() of one expression)
            stale = [moved(e) for e in table.expr_list]
            if ops:
                stale = [a or b for a, b in zip(stale, table.using(ops).tolist(), strict=True)]
            table.cost_nodes(space, [k for k, on in enumerate(stale) if on])
        else:
            stale = space.moved_exprs(old, table.exprs)
            if ops:
                stale |= table.using(ops)
            table.cost_nodes(space, np.flatnonzero(stale))
        # a moved node's parents are moved too; only a cost delta needs propagation
        return self._settled(table.settle(stale, propagate=bool(ops)))

    def _settled(self, done: np.ndarray | list[bool]) -> Result:
        table, space = self.table, self.space
        groups = table.groups
        if isinstance(done, list):  # a small table's (DPTable.settle)
            picked = [k for k, on in enumerate(done) if on]
            sizes = table.lists[3]
            ands = sum([sizes[k] for k in picked])
        else:
            at = np.flatnonzero(done)
            ands = int((table.offsets[at + 1] - table.offsets[at]).sum())
            picked = at.tolist()
        self.touched_or = {groups[k] for k in picked}
        root = table.entry(space.root)
        if root is None:  # pragma: no cover - every root has a plan
            raise RuntimeError("no plan found")
        plan = self._pending = _TablePlan(self.plans, space, self._since, self._unchanged,
                                          table.winner.copy(), table.index)
        return Result.later(root[0], plan, {"or_nodes": len(picked), "and_nodes": ands})


class TopDownInc(Incremental, TopDown):
    """Incremental Volcano branch-and-bound: the explored nodes' winners and limits memoized.

    Re-settling a stale node: a winner is searched again without a limit (it was exact, and
    stays exact); a "no plan under L" entry is dropped — it held for the old costs — and the
    node is searched again only if a parent asks for it. In a large space the reached nodes
    are re-settled a rank at a time, most of them in bulk (:class:`_Bulk`)."""

    def __init__(self, space: PlanSpace):
        TopDown.__init__(self, space)
        Incremental.__init__(self, space)
        self._parents: dict[Group, list[Group]] = {}
        self._by_op: dict[str, list[Group]] = {}
        self._indexed: set[Group] = set()
        """Nodes entered in ``_parents`` and ``_by_op`` (built on the first ``cost`` delta:
        a card or sel delta needs neither)."""
        self._dearer = False
        self._searched: set[Group] = set()
        """Groups searched by the current optimize()/update() (their alternatives costed)."""
        self._written: list[Group] = []
        """Groups whose memo entry was written or dropped since :class:`_Bulk` last read."""
        self.bulk: _Bulk | None = None
        """The memo over the and-or graph's columns, for re-settling in bulk (large spaces
        only: below :data:`~reopt.optimizers.dptable.SCALAR_ALTERNATIVES` csg-cmp pairs
        numpy's calls cost more than the search)."""

    def optimize(self) -> Result:
        self._hand_over(self._snapshot())
        self.memo.clear()
        self._searched = set()
        result = TopDown.optimize(self)
        self.touched_or = set(self.memo)
        if self.space.graph.pair_count > dptable.SCALAR_ALTERNATIVES:
            if self.bulk is None:
                self.bulk = _Bulk(self, DPTable(self.space))
            self.bulk.read_all()
        return result

    def _with_plan(self, cost: float, explored: dict[str, int]) -> Result:
        plan = self._pending = _MemoPlan(self.plans, self.space, self._since, self._unchanged,
                                         self.memo)
        return Result.later(cost, plan, explored)

    def _search(self, group: Group, limit: float) -> float | None:
        self._searched.add(group)
        self._written.append(group)
        return TopDown._search(self, group, limit)

    def _entries(self) -> dict[Group, tuple]:
        return self.memo

    def _snapshot(self) -> object:
        return dict(self.memo)  # its entries are immutable tuples: a shallow copy is all

    def _restore(self, saved: object) -> None:
        self.memo.clear()
        self.memo.update(saved)
        if self.bulk is not None:
            self.bulk.read_all()

    def _update(self, old: PlanSpace, space: PlanSpace) -> Result:
        entries = self._entries()
        self.touched_or = set()
        self._searched = set()
        if not entries:
            return self.optimize()
        moved, ops = space.changed_inputs(old)
        self._reuse_unmoved(moved, ops)
        self._dearer = all(space.adjustments.op_factors.get(op, 1.0)
                           >= old.adjustments.op_factors.get(op, 1.0) for op in ops)
        """Whether the change only raised operator factors (no local cost fell)."""
        if self.bulk is not None:
            return self.bulk.update(old, space, ops)
        stale = {g for g in entries if moved(g[0])}
        space.estimate([g[0] for g in stale])  # (all at once: each is about to be re-costed)
        seeds = set(stale)
        if ops:
            self._index(entries)
            for op in ops:
                seeds.update(self._by_op.get(op, ()))
        heap = [(space.rank(*g), g) for g in seeds]
        heapq.heapify(heap)
        queued = set(seeds)
        while heap:
            _, g = heapq.heappop(heap)
            before = entries.get(g)
            self.touched_or.add(g)
            self._resettle(g, g in stale)
            if g in stale or entries.get(g) == before:
                continue  # a moved node's parents are moved too; an unchanged one tells none
            for p in self._parents.get(g, ()):
                if p not in queued:
                    queued.add(p)
                    heapq.heappush(heap, (space.rank(*p), p))
        return self._finish()

    def _index(self, entries: dict[Group, tuple]) -> None:
        """Enter every memo node not yet indexed: its operators, and it as its children's
        parent (structure only: valid for every later space of the query)."""
        space = self.space
        for g in entries.keys() - self._indexed:
            self._indexed.add(g)
            for op in set(space.columns(*g).phy_op):
                self._by_op.setdefault(op, []).append(g)
            for c in space.children(*g):
                self._parents.setdefault(c, []).append(g)

    def _resettle(self, g: Group, moved: bool) -> None:
        entry = self.memo.get(g)
        if entry is None:  # a parent indexed once, dropped since
            return
        if entry[1] is None and not moved and self._dearer:
            return  # no plan under the limit before, and no cost fell: still none
        del self.memo[g]
        self._written.append(g)
        if entry[1] is not None:
            self._search(g, math.inf)

    def _finish(self) -> Result:
        self._optimize(self.space.root, math.inf)
        return self._result(len(self.touched_or), self._searched)

    def _and_nodes(self, searched: set[Group]) -> int:
        if self.bulk is None:
            return TopDown._and_nodes(self, searched)
        table = self.bulk.table
        index = table.index
        nodes = np.fromiter((index[g] for g in searched), dtype=np.int64, count=len(searched))
        if searched is self._searched:  # an update: with the nodes the bulk settled
            mask = self.bulk.entered.copy()
            mask[nodes] = True
            nodes = np.flatnonzero(mask)
        return int((table.offsets[nodes + 1] - table.offsets[nodes]).sum())


class _LaterPlan:
    """An incremental optimizer's plan, made when its result's plan is first read
    (:meth:`Result.later`), from the winners as that optimization left them, reusing the
    subtrees of the last plan made where :class:`PlanCache` may: those of a plan made on
    ``since``, the space before, over expressions ``unchanged`` since. Made at once, as the
    API and the CLI read it, it is the plan the optimizer used to build before returning;
    not read, it costs nothing — as a search from scratch's (:class:`WinnersPlan`)."""

    def __init__(self, cache: PlanCache, space: PlanSpace, since: PlanSpace | None,
                 unchanged: Callable[[int], bool] | None):
        self.cache: PlanCache | None = cache
        self.space = space
        self.since = since
        self.unchanged = unchanged

    def winner(self, g: Group) -> int:
        """The index of OR node ``g``'s winning alternative."""
        raise NotImplementedError

    def freeze(self, saved: object) -> None:
        """Read the winners from ``saved`` (the optimizer's snapshot of its memo, taken
        before the memo changes) from now on, if the memo is read live."""

    def __call__(self) -> PlanNode:
        cache = self.cache
        assert cache is not None, "a plan is made once"
        plan = cache.build(self.space, self.winner, self.unchanged, self.since)
        self.cache = self.since = self.unchanged = None  # (released: made once)
        return plan


class _MemoPlan(_LaterPlan):
    """``topdown-inc``'s: the winners of its memo, ``group → (cost, index)``."""

    def __init__(self, cache: PlanCache, space: PlanSpace, since: PlanSpace | None,
                 unchanged: Callable[[int], bool] | None, memo: dict[Group, tuple]):
        super().__init__(cache, space, since, unchanged)
        self.memo = memo

    def winner(self, g: Group) -> int:
        return self.memo[g][1]

    def freeze(self, saved: object) -> None:
        assert isinstance(saved, dict)
        self.memo = saved  # (a copy the optimizer never writes: restored from, not into)


class _TablePlan(_LaterPlan):
    """``bottomup-inc``'s: a copy of its DP table's winners, taken with the result."""

    def __init__(self, cache: PlanCache, space: PlanSpace, since: PlanSpace | None,
                 unchanged: Callable[[int], bool] | None, winners: np.ndarray,
                 index: dict[Group, int]):
        super().__init__(cache, space, since, unchanged)
        self.winners: np.ndarray | list[int] = winners
        self.index = index

    def winner(self, g: Group) -> int:
        return self.winners[self.index[g]]  # type: ignore[return-value]

    def __call__(self) -> PlanNode:
        self.winners = self.winners.tolist()  # (Python ints: read once per plan node)
        return super().__call__()


class _Bulk:
    """:class:`TopDownInc`'s memo over the :class:`DPTable` layout, and its update a rank at
    a time: per node, whether it has an entry, its winner's cost (``inf`` if none) and a lower
    bound of its cost — the winner's cost, the limit of a "no plan under L" entry, 0 for a
    node never explored (local costs are never negative).

    The update reaches the same nodes as the search-only one: the memo's nodes whose
    expression moved, those with an alternative using an operator whose factor changed, and
    (then) the parents of nodes whose entry changed. A reached winner is searched again
    without a limit, which finds the first alternative of least ``(local + left) + right``.
    So the reached winners of one rank are settled in one :meth:`DPTable.cheapest` call over
    their alternatives whose children are all winners, wherever each other alternative is
    bound to cost more than that least (its local cost plus its children's lower bounds:
    float additions are monotone) — that is the search's winner, and no child's entry changes.
    Any other reached node takes :meth:`TopDownInc._resettle`."""

    def __init__(self, opt: TopDownInc, table: DPTable):
        self.opt = opt
        self.table = table
        n = table.absent
        self.known = np.zeros(n, dtype=bool)
        self.best = np.full(n + 1, np.inf)
        self.best[n] = 0.0
        self.lower = np.zeros(n + 1)
        self.entered = np.zeros(n, dtype=bool)
        """Nodes the current update settled in bulk (searched, as :attr:`TopDownInc._searched`
        holds the groups the search settled one by one)."""
        parents = np.concatenate((table.node_of, table.node_of))
        children = np.concatenate((table.left, table.right))
        keep = children < n
        pairs = np.unique(np.stack((children[keep], parents[keep])), axis=1)
        self.parent_offsets = np.searchsorted(pairs[0], np.arange(n + 1))
        self.parent_nodes = pairs[1]
        """CSR: the nodes with an alternative reading node k are
        ``parent_nodes[parent_offsets[k]:parent_offsets[k + 1]]``."""

    # -- reading the memo -------------------------------------------------------------------
    def read_all(self) -> None:
        self.known[:] = False
        self.best[:-1] = np.inf
        self.lower[:-1] = 0.0
        self._read(self.opt.memo.keys())
        self.opt._written = []

    def read_written(self) -> None:
        """Take in the entries the search wrote (or dropped) since the last read."""
        opt = self.opt
        if opt._written:
            self._read(set(opt._written))
            opt._written = []

    def _read(self, groups) -> None:
        memo, index = self.opt.memo, self.table.index
        known, best, lower = self.known, self.best, self.lower
        for g in groups:
            k = index[g]
            entry = memo.get(g)
            if entry is None:
                known[k], best[k], lower[k] = False, np.inf, 0.0
            elif entry[1] is None:
                known[k], best[k], lower[k] = True, np.inf, entry[0]
            else:
                known[k] = True
                best[k] = lower[k] = entry[0]

    # -- the update -------------------------------------------------------------------------
    def update(self, old: PlanSpace, space: PlanSpace, ops: set[str]) -> Result:
        opt, table = self.opt, self.table
        self.read_written()
        self.entered[:] = False
        n = table.absent
        stale = space.moved_exprs(old, table.exprs) & self.known
        todo = stale.copy()
        if ops:
            todo |= table.using(ops) & self.known
        costed = todo & np.isfinite(self.best[:n])
        table.cost_nodes(space, np.flatnonzero(costed))  # one vectorized call for most
        changed = np.zeros(n, dtype=bool)
        memo, groups = opt.memo, table.groups
        for nodes in table.rank_nodes:
            picked = nodes[todo[nodes]]
            if not len(picked):
                continue
            batch = [groups[k] for k in picked.tolist()]
            before = [memo.get(g) for g in batch] if ops else batch  # (read only with ops)
            opt.touched_or.update(batch)
            uncosted = picked[~costed[picked]]
            if len(uncosted):
                table.cost_nodes(space, uncosted)
            for k in self._settle(picked):
                opt._resettle(groups[k], bool(stale[k]))
            self.read_written()
            if ops:  # a moved node's parents are moved too; an unchanged one tells none
                for k, g, was in zip(picked.tolist(), batch, before, strict=True):
                    if not stale[k] and memo.get(g) != was:
                        changed[k] = True
                        up = self.parent_nodes[self.parent_offsets[k]:self.parent_offsets[k + 1]]
                        todo[up[self.known[up]]] = True
        return opt._finish()

    def _settle(self, nodes: np.ndarray) -> list[int]:
        """Settle the winners among ``nodes`` (one rank, their local costs current) in bulk;
        return the other nodes (entries "no plan under L"), for the search."""
        table = self.table
        winners = np.isfinite(self.best[nodes])
        picked = nodes[winners]
        rest = nodes[~winners].tolist()
        if not len(picked):
            return rest
        alts = table.alternatives_of(picked)
        least, win = table.cheapest(picked, self.best, alts)  # alternatives with winners only
        left, right = table.left[alts], table.right[alts]
        unsure = np.isinf(self.best[left]) | np.isinf(self.best[right])
        if unsure.any():
            sizes = table.offsets[picked + 1] - table.offsets[picked]
            bound = (table.local[alts] + self.lower[left]) + self.lower[right]
            unsure &= ~(bound > np.repeat(least, sizes))
            if unsure.any():  # some child may matter: give each such child its exact cost
                self._explore(np.concatenate((left[unsure], right[unsure])))
                least, win = table.cheapest(picked, self.best, alts)
        self._enter(picked, least, win)
        return rest

    def _explore(self, start: np.ndarray) -> None:
        """Give every node reachable from ``start`` through nodes without a winner (never
        explored, or "no plan under L") its exact entry: the winner an unlimited search finds
        (or "no plan at all"), settled bottom-up a rank at a time."""
        opt, table = self.opt, self.table
        n = table.absent
        closure = np.zeros(n, dtype=bool)
        frontier = np.unique(start[start < n])
        frontier = frontier[np.isinf(self.best[frontier])]
        while len(frontier):
            closure[frontier] = True
            alts = table.alternatives_of(frontier)
            kids = np.concatenate((table.left[alts], table.right[alts]))
            kids = np.unique(kids[kids < n])
            frontier = kids[~closure[kids] & np.isinf(self.best[kids])]
        nodes = np.flatnonzero(closure)  # node numbers ascend with rank: children first
        table.cost_nodes(opt.space, nodes)
        for part in np.split(nodes, np.flatnonzero(np.diff(table.rank_of[nodes])) + 1):
            self._enter(part, *table.cheapest(part, self.best))

    def _enter(self, nodes: np.ndarray, least: np.ndarray, win: np.ndarray) -> None:
        """Write the searched entries of ``nodes`` (:meth:`DPTable.cheapest`'s answer: a
        winner, or "no plan at all" where there is none) to the memo and the arrays."""
        groups = self.table.groups
        self.opt.memo.update(zip([groups[k] for k in nodes.tolist()],
                                 [(c, i) if i >= 0 else (math.inf, None)
                                  for c, i in zip(least.tolist(), win.tolist(), strict=True)],
                                 strict=True))
        self.entered[nodes] = True
        self.known[nodes] = True
        self.best[nodes] = least
        self.lower[nodes] = least
