"""Incremental top-down and bottom-up optimizers (``topdown-inc``, ``bottomup-inc``).

The two extremes of the paper's memoization trade-off (Section 5.4), on one shared memo
(:class:`reopt.optimizers.memo.IncrementalMemo`, which holds the update propagation):

* :class:`BottomUpInc` memoizes everything: its first optimization is System R's dynamic
  programming over every OR node (like :func:`reopt.optimizers.bottomup.bottomup`), keeping the
  cost of every alternative. An update re-costs the alternatives whose inputs changed and
  propagates upward; it never searches, every record being exact.
* :class:`TopDownInc` memoizes what branch-and-bound explored: its first optimization is the
  Volcano search of :func:`reopt.optimizers.topdown.topdown`, keeping each pruned
  alternative's lower bound. An update propagates costs upward the same way, and bounds
  downward: a pruned alternative whose lower bound falls under its node's new best cost is
  searched again, with the remaining budget passed to its children.

Usage::

    opt = BottomUpInc(space)
    r = opt.optimize()                 # a Result, like bottomup(space)
    r2 = opt.update(new_space)         # same query, new statistics; equal to from-scratch
"""

from __future__ import annotations

import math

from reopt.optimizers.memo import IncrementalMemo


class BottomUpInc(IncrementalMemo):
    """Incremental System R dynamic programming: every alternative's cost memoized."""

    def _initial(self) -> None:
        space = self.space
        for g in sorted(space.or_nodes(), key=lambda g: space.rank(*g)):
            self._register(g)
            for alt in self.alts[g]:
                self._recost(alt)  # children rank lower: already settled
            self._settle(g, self.alts[g], math.inf, None)


class TopDownInc(IncrementalMemo):
    """Incremental Volcano branch-and-bound: explored alternatives and bounds memoized."""

    def _initial(self) -> None:
        self._solve(self.space.root, math.inf)
