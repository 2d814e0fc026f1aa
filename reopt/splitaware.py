"""What ``adaptive`` tells the optimizer before a range split, when the query filters the
split column itself.

Range splits (``reopt run --split-by range``) cut the split relation at values of a column,
and each split's range is known before it runs. If the query has its own range filter on
that column, the filtered scan of the split relation keeps nothing of a split outside the
query's range and nearly everything of one inside it. Carrying the previous split's counts,
scaled by the splits' sizes, then plans each edge for the wrong data: a split that follows
an empty one is planned as empty, and one that follows a full one as full.

:class:`SplitAware` instead estimates the filtered scan of the split about to run from its
own range (:func:`reopt.costmodel.ranges.split_shares`: zero when the ranges miss each
other), and carries an observed set holding the split relation as a number of rows per row
of that filtered scan, from the latest split where the scan kept rows: a set observed on an
empty scan says nothing about a split that is not empty. Sets without the split relation are
carried as observed (the other relations are whole in every split), and the rows before
filters are scaled by the splits' sizes, as without ranges.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from reopt.costmodel.cardinality import Estimator
from reopt.costmodel.query import Query
from reopt.costmodel.ranges import SplitShares, split_shares
from reopt.execute import NodeRun, observation_deltas, observed_rows


@dataclass
class SplitAware:
    """One ``adaptive`` run's split-aware estimates of the split relation ``alias``."""

    alias: str
    rows: Sequence[int]
    """Rows of the split table in each split."""
    shares: SplitShares
    carried: dict[tuple[str, ...], float] = field(default_factory=dict)
    """Observed sets holding ``alias``, each as rows per row of ``alias``'s filtered scan,
    from the latest split where that scan kept rows."""
    kept: float | None = None
    """Of the rows passing the filters on the split column, the fraction the relation's
    other filters kept, as observed (None: not observed yet; the catalog's then)."""

    @staticmethod
    def of(query: Query, est: Estimator, alias: str, column: str, rows: Sequence[int],
           bounds: Sequence[tuple[object, object]]) -> SplitAware | None:
        """The estimates of splits ``[lo, hi)`` of ``column`` (``bounds``), or None when the
        query has no range filter on the column (the splits' sizes then say it all)."""
        shares = split_shares(est, alias, column, bounds)
        return None if shares is None else SplitAware(alias, rows, shares)

    def expected(self, j: int) -> float:
        """Rows the filtered scan of ``alias`` is expected to keep of split ``j``."""
        others = self.kept if self.kept is not None else self.shares.others
        return self.rows[j] * self.shares.shares[j] * others

    def first(self) -> list[str]:
        """The delta that plans split 0 for its own range."""
        return [f"card {{{self.alias}}} := {round(self.expected(0))}"]

    def after(self, i: int, j: int, nodes: Iterable[NodeRun]) -> list[str]:
        """The deltas after split ``i`` ran (its plan's ``nodes``), for split ``j``."""
        bases, sets = observed_rows(nodes)
        scan = sets.get((self.alias,))
        if scan:  # the scan kept rows: its sets say how the other relations join them
            passing = self.rows[i] * self.shares.shares[i]
            if self.shares.filtered_otherwise:
                self.kept = min(1.0, scan / passing) if passing > 0 else 1.0
            self.carried.update({r: n / scan for r, n in sets.items() if self.alias in r})
        n = self.expected(j)
        scale = self.rows[j] / self.rows[i]
        ahead = {r: m for r, m in sets.items() if self.alias not in r}
        ahead.update({r: round(per_row * n) for r, per_row in self.carried.items()})
        ahead.setdefault((self.alias,), round(n))
        return observation_deltas(
            {a: max(1, round(m * scale) if a == self.alias else m) for a, m in bases.items()},
            ahead)
