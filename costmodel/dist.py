"""``dist``: a cost model of joins as a distributed engine like Spark runs them.

The paper's ``io`` model prices pages and index probes of a single-node engine; on Spark most
of those operators do not exist (no indexes) and what decides a join's time is how many rows
cross the network and how many are hashed, which ``io`` does not see: its plans shuffle tables
that Spark would broadcast (README, "The adaptive loop": Spark's own plans were the fastest on
every query). ``dist`` prices exactly those choices, so that a plan reopt runs on Spark is one
Spark itself could pick, in the order reopt's statistics say is best:

* ``scan`` — read a table, apply its filters: ``SCAN_ROW`` per stored row (the same in every
  plan of a query; it keeps costs comparable across queries).
* ``broadcast`` — the right input is collected and sent whole to every task, which hashes it
  and streams the left input through: ``BUILD_ROW·r + PROBE_ROW·l + OUT_ROW·out``. Without an
  equi-join predicate it is Spark's broadcast nested-loop join: ``PAIR·l·r`` instead of the
  probe. A right input above ``BROADCAST_BYTES`` bytes (its rows times the bytes of one of
  them, :meth:`~reopt.costmodel.space.PlanSpace.row_bytes`) also pays ``OVERSIZE_ROW`` per row
  beyond the rows that fit (the driver collects it whole and every task holds it; at SF 1
  Q8Join's 800,000 rows of part ⋈ partsupp ⋈ supplier ⋈ nation ⋈ region take about 150 MB),
  a smooth penalty rather than a missing alternative, so the set of alternatives never
  depends on estimates and incremental maintenance only ever re-costs.
* ``shuffle`` — both inputs are hash-partitioned on the join key and joined by sort-merge:
  ``SHUFFLE_ROW·(l + r) + OUT_ROW·out``; it needs an equi-join predicate.

No interesting orders, enforcers or final operator: Spark sorts for its own merge joins, and
the query's aggregate and ORDER BY cost the same under every join order. Local costs depend
only on the estimated rows of the expressions involved (the principle of optimality holds: the
DP optimizers, branch-and-bound and the rules' fixpoint find the same optimum). The constants
are set by reasoning about what each operator does, not fitted to measurements (there is no
calibration benchmark yet); only their ratios matter. Row widths depend on the query and the
catalog only (:mod:`reopt.costmodel.widths`), so a local cost still moves only with an
estimate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reopt.costmodel.space import ANY, Alt

if TYPE_CHECKING:
    from reopt.costmodel.space import PlanSpace

SCAN_ROW = 0.05
"""Reading and filtering one stored row (columnar Parquet)."""
SHUFFLE_ROW = 1.0
"""Serializing, writing, fetching and sorting one row of a shuffle join's input."""
BUILD_ROW = 1.0
"""Collecting, broadcasting and hashing one row of a broadcast join's right input."""
PROBE_ROW = 0.2
"""Streaming one row of a broadcast join's left input through the hash table."""
OUT_ROW = 0.3
"""Producing one output row of a join."""
PAIR = 0.01
"""Comparing one pair of rows in a nested-loop join."""
BROADCAST_BYTES = 10 * 1024 * 1024.0
"""Spark's own broadcast threshold (``spark.sql.autoBroadcastJoinThreshold``, 10 MB by
default), compared, as Spark does, with rows × estimated row bytes: a right input above it
also pays :data:`OVERSIZE_ROW` per row beyond the ``BROADCAST_BYTES / row bytes`` rows that
fit. Spark's value, so that reopt broadcasts what Spark itself would with the same estimates."""
OVERSIZE_ROW = 100.0
"""The penalty per row of a broadcast beyond :data:`BROADCAST_BYTES`: a hundred times a
shuffled row, so an oversized broadcast loses to a shuffle unless the other side is far
larger still."""


class DistModel:
    """The ``dist`` model (module doc) under the CostModel interface (``models.py`` wraps
    it): ``scan`` per relation, joins ``broadcast`` and ``shuffle``, no properties."""

    name = "dist"
    symmetric = False
    join_methods = ("broadcast", "shuffle")
    operators = ("scan", "broadcast", "shuffle")

    def scan_alternatives(self, space: PlanSpace, expr: int, prop: str) -> list[Alt]:
        return [Alt(expr, prop, 0, "scan", "scan")] if prop == ANY else []

    def join_alternatives(self, space, expr, prop, left, right, method):
        if prop != ANY:
            return []
        if method == "shuffle" and not space.crossing(left, right):
            return []  # a shuffle join partitions both inputs on an equi-join key
        return [Alt(expr, prop, left, "join", method, left, ANY, right, ANY)]

    def local_cost(self, space: PlanSpace, alt: Alt) -> float:
        if alt.log_op == "scan":
            return SCAN_ROW * space.estimator.base_rows(space.relations(alt.expr)[0])
        lrows, rrows = space.summary(alt.left), space.summary(alt.right)
        out = OUT_ROW * space.summary(alt.expr)
        if alt.phy_op == "shuffle":
            return SHUFFLE_ROW * (lrows + rrows) + out
        probe = (PROBE_ROW * lrows if space.crossing(alt.left, alt.right)
                 else PAIR * lrows * rrows)
        return BUILD_ROW * rrows + probe + out + oversize(rrows, space.row_bytes(alt.right))


def oversize(rows: float, row_bytes: float) -> float:
    """A broadcast's penalty for ``rows`` rows of ``row_bytes`` bytes each: :data:`OVERSIZE_ROW`
    per row beyond the :data:`BROADCAST_BYTES` that fit, 0 within them (continuous)."""
    fit = BROADCAST_BYTES / row_bytes
    return OVERSIZE_ROW * (rows - fit) if rows > fit else 0.0
