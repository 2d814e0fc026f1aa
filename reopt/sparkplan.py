"""The true rows of a reopt plan's scans and joins, read off Spark's executed physical plan.

Spark counts the output rows of every operator as it runs (the ``numOutputRows`` SQL metric:
a counter in the generated code, no extra node, no extra pass). After :mod:`reopt.execute` has
run a plan, :func:`node_counts` walks reopt's plan tree and Spark's executed plan together:

* a reopt **join** is the next physical node with two children below the current one (Spark's
  join keeps the DataFrame join's left and right inputs as its own; join reordering is off
  for the run); its count is that join's output;
* a reopt **scan** is the leaf below; its rows are the leaf's output (the table's rows: the
  run turns file-format filter pushdown off, so no row group is skipped unread), and after its
  filters the output of the highest ``Filter`` directly above it (only projections, columnar
  conversion and code-generation wrappers in between: Spark merges a relation's conjuncts
  into one ``Filter``);
* a sort enforcer or the final operator is its input's node (the final's rows are the
  answer's, counted by the caller).

Reused exchanges and adaptive query stages are followed to the plan they stand for (the same
operators, counted once). A shape that does not match raises :class:`ReoptError` naming the
node: a bug, never a wrong count.
"""

from __future__ import annotations

from typing import Any

from reopt.costmodel.errors import ReoptError
from reopt.plan import PlanNode

TRANSPARENT = frozenset({"ProjectExec", "FilterExec", "ColumnarToRowExec", "InputAdapter",
                         "WholeStageCodegenExec", "CollectMetricsExec"})
"""Operators that may sit between a scan and its filters' ``Filter`` (and above it)."""
WRAPPERS = {"ReusedExchangeExec": "child", "ShuffleQueryStageExec": "plan",
            "BroadcastQueryStageExec": "plan", "TableCacheQueryStageExec": "plan",
            "ResultQueryStageExec": "plan", "AdaptiveSparkPlanExec": "executedPlan"}
"""Leaves (to Spark's tree) that stand for another plan: the method giving it."""


def _name(p: Any) -> str:
    return str(p.getClass().getSimpleName())


def _children(p: Any) -> list[Any]:
    method = WRAPPERS.get(_name(p))
    if method is not None:
        return [getattr(p, method)()]
    seq = p.children()
    return [seq.apply(i) for i in range(seq.size())]


def _rows(p: Any) -> int | None:
    metric = p.metrics().get("numOutputRows")
    return int(metric.get().value()) if metric.isDefined() else None


def _is_join(p: Any) -> bool:
    name = _name(p)
    return name.endswith("JoinExec") or name == "CartesianProductExec"


def _chain(p: Any) -> tuple[list[Any], list[Any]]:
    """The nodes from ``p`` down its single-child chain, and the children of the last."""
    path = [p]
    while len(kids := _children(path[-1])) == 1:
        path.append(kids[0])
    return path, kids


def node_counts(plan: PlanNode, physical: Any) -> dict[int, tuple[int, int]]:
    """``id(node)`` -> (output rows, rows read before filters) for every scan and join of
    ``plan``, read from ``physical`` (the executed ``SparkPlan`` of the plan's run, a Py4J
    object)."""
    out: dict[int, tuple[int, int]] = {}

    def missing(node: PlanNode, what: str) -> ReoptError:
        return ReoptError(f"Spark's executed plan has no {what} for plan node {node.op} "
                          f"{{{', '.join(node.relations)}}}")

    def match(node: PlanNode, p: Any) -> None:
        log = node.alt.log_op
        if log not in ("scan", "join"):  # a sort enforcer or the final operator
            match(node.children[0], p)
            return
        path, kids = _chain(p)
        top = path[-1]
        if log == "join":
            if len(kids) != 2 or not _is_join(top):
                raise missing(node, "join")
            rows = _rows(top)
            if rows is None:
                raise missing(node, "row count")
            out[id(node)] = (rows, rows)
            match(node.children[0], kids[0])
            match(node.children[1], kids[1])
            return
        if kids:
            raise missing(node, "scan")
        scanned = _rows(top)
        observed = scanned
        for q in reversed(path[:-1]):
            name = _name(q)
            if name not in TRANSPARENT:
                break
            if name == "FilterExec":
                observed = _rows(q)
        if scanned is None or observed is None:
            raise missing(node, "row count")
        out[id(node)] = (observed, scanned)

    match(plan, physical)
    return out
