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
are a profile, :class:`DistConstants` (:data:`PROFILES`): ``default``, the values below, set by
reasoning about what each operator does, and ``local``, fitted by
``benchmarks/dist_calibrate.py`` to the times of many plans run on Spark under a ``local[*]``
master (BENCHMARKS.md, "Calibrating ``dist`` to Spark"); the formulas are the same for every
profile, and only the constants' ratios matter. Row widths depend on the query and the
catalog only (:mod:`reopt.costmodel.widths`), so a local cost still moves only with an
estimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from reopt.costmodel.profiles import pick
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


@dataclass(frozen=True)
class DistConstants:
    """The ``dist`` model's constants, one profile per kind of Spark deployment (the module
    doc's formulas, the same for every profile; each field is the module constant of the
    same name in upper case, whose values are the ``default`` profile)."""

    name: str
    scan_row: float
    shuffle_row: float
    build_row: float
    probe_row: float
    out_row: float
    pair: float
    oversize_row: float
    broadcast_bytes: float

    def oversize(self, rows: float, row_bytes: float) -> float:
        """A broadcast's penalty for ``rows`` rows of ``row_bytes`` bytes each:
        ``oversize_row`` per row beyond the ``broadcast_bytes`` that fit, 0 within them
        (continuous)."""
        fit = self.broadcast_bytes / row_bytes
        return self.oversize_row * (rows - fit) if rows > fit else 0.0


DEFAULT = DistConstants("default", scan_row=SCAN_ROW, shuffle_row=SHUFFLE_ROW,
                        build_row=BUILD_ROW, probe_row=PROBE_ROW, out_row=OUT_ROW, pair=PAIR,
                        oversize_row=OVERSIZE_ROW, broadcast_bytes=BROADCAST_BYTES)
"""The constants set by reasoning (module doc), the default profile: a cluster, where a
broadcast beyond Spark's threshold is collected by the driver and copied to every
executor."""
LOCAL = DistConstants("local", scan_row=SCAN_ROW, shuffle_row=1.0, build_row=0.3, probe_row=0.0,
                      out_row=0.0, pair=PAIR, oversize_row=1.0, broadcast_bytes=BROADCAST_BYTES)
"""Fitted to Spark under a ``local[*]`` master by ``benchmarks/dist_calibrate.py`` from the JVM
CPU time of 49 plans on 8 ranges of the skewed SF 1 data (q5, pnations, q3, q7join; BENCHMARKS.md,
"Calibrating ``dist`` to Spark"): the ratios whose cheapest plan is the fastest most often, and
among those the ones that rank all the plans most like their times. There a broadcast stays in
one JVM: a row beyond Spark's 10 MB threshold costs about what a shuffled row does (the least
squares give 1.1×), not a hundred times; hashing a broadcast row costs a third of shuffling it,
and streaming the other side through the hash table or producing the output is not what
separates plans (the scans and the final aggregate, the same in every plan, dominate it).
``scan_row`` and ``pair`` are the default's: the same in every plan of a range, or in none of
the plans measured."""
PROFILES = {p.name: p for p in (DEFAULT, LOCAL)}
"""``--dist-profile`` / ``Optimizer(dist_profile=...)``."""
DEFAULT_PROFILE = "default"


def dist_profile(name: str | None) -> DistConstants:
    """The profile ``name`` (None: :data:`DEFAULT_PROFILE`); a one-line error otherwise."""
    return pick(PROFILES, DEFAULT_PROFILE, name, "dist")


class DistModel:
    """The ``dist`` model (module doc) under the CostModel interface (``models.py`` wraps
    it): ``scan`` per relation, joins ``broadcast`` and ``shuffle``, no properties;
    ``constants`` a profile of :data:`PROFILES` (default :data:`DEFAULT`)."""

    name = "dist"
    symmetric = False
    join_methods = ("broadcast", "shuffle")
    operators = ("scan", "broadcast", "shuffle")

    def __init__(self, constants: DistConstants | None = None) -> None:
        self.constants = constants or dist_profile(None)

    def scan_alternatives(self, space: PlanSpace, expr: int, prop: str) -> list[Alt]:
        return [Alt(expr, prop, 0, "scan", "scan")] if prop == ANY else []

    def join_alternatives(self, space, expr, prop, left, right, method):
        if prop != ANY:
            return []
        if method == "shuffle" and not space.crossing(left, right):
            return []  # a shuffle join partitions both inputs on an equi-join key
        return [Alt(expr, prop, left, "join", method, left, ANY, right, ANY)]

    def local_cost(self, space: PlanSpace, alt: Alt) -> float:
        c = self.constants
        if alt.log_op == "scan":
            return c.scan_row * space.estimator.base_rows(space.relations(alt.expr)[0])
        return join_cost(c, alt.phy_op, space.summary(alt.left), space.summary(alt.right),
                         space.summary(alt.expr), bool(space.crossing(alt.left, alt.right)),
                         space.row_bytes(alt.right))


def join_cost(c: DistConstants, op: str, lrows: float, rrows: float, out: float,
              equi: bool, right_bytes: float) -> float:
    """A join's local cost under ``c`` from its rows (left, right, output), whether it has
    an equi-join predicate and the bytes of one right row: shared by the model (estimated
    rows) and ``benchmarks/dist_calibrate.py`` (rows a run observed)."""
    if op == "shuffle":
        return c.shuffle_row * (lrows + rrows) + c.out_row * out
    probe = c.probe_row * lrows if equi else c.pair * lrows * rrows
    return c.build_row * rrows + probe + c.out_row * out + c.oversize(rrows, right_bytes)
