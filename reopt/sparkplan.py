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

**Parts of the plan Spark never ran.** The run has adaptive execution on
(:func:`reopt.spark.execution_settings`): once a query stage (a shuffle or a broadcast) has run
and turned out empty, Spark replaces every join it feeds by an empty relation
(``EmptyRelationExec``, which keeps the logical plan it replaced; ``LocalTableScanExec`` in
older versions) and never runs the rest of that part. Only what Spark really counted is read
there:

* a stage of the replaced part that had already run (a ``LogicalQueryStage`` of its logical
  plan, materialized) is read as above;
* a join of the replaced part with an input observed empty output 0 rows (an inner join of an
  empty input is empty: a fact, not an estimate), and so does a join an empty
  ``LocalTableScanExec`` stands for;
* every other scan and join of it, and everything below a stage that had not finished, was
  never run: it gets no count (absent from :func:`node_counts`' answer), never a guess.
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
STAGES = frozenset(k for k in WRAPPERS if k.endswith("QueryStageExec")) - {"ResultQueryStageExec"}
"""Adaptive query stages: what is below one was run only if the stage is materialized. (The
result stage is the caller's action itself, run to the end before the plan is read, but not
marked materialized when the answer is collected through Arrow.)"""
EMPTY_REPLACED = "EmptyRelationExec"
"""The leaf adaptive execution puts for a part of the plan found empty; ``logical()`` is the
logical plan it replaced."""
EMPTY_LOCAL = "LocalTableScanExec"
"""An empty one stands for a part found empty (Spark before 4.0), without what it replaced."""


def _name(p: Any) -> str:
    return str(p.getClass().getSimpleName())


def _children(p: Any) -> list[Any]:
    name = _name(p)
    if name in STAGES and not p.isMaterialized():
        return []  # never finished: a leaf, nothing below it is read
    method = WRAPPERS.get(name)
    if method is not None:
        return [getattr(p, method)()]
    seq = p.children()
    return [seq.apply(i) for i in range(seq.size())]


def final_plan(physical: Any) -> Any:
    """The plan Spark ran: an adaptive plan's final one (its string also shows the initial
    plan, whose joins the adaptive run may have replaced)."""
    return physical.executedPlan() if _name(physical) == "AdaptiveSparkPlanExec" else physical


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
    ``plan`` that Spark ran, read from ``physical`` (the executed ``SparkPlan`` of the plan's
    run, a Py4J object); a node Spark never ran has no entry."""
    out: dict[int, tuple[int, int]] = {}

    def missing(node: PlanNode, what: str) -> ReoptError:
        return ReoptError(f"Spark's executed plan has no {what} for plan node {node.op} "
                          f"{{{', '.join(node.relations)}}}")

    def counted(node: PlanNode) -> PlanNode:
        """The scan or join ``node`` stands for (a sort's or the final's input)."""
        while node.alt.log_op not in ("scan", "join"):
            node = node.children[0]
        return node

    def match(node: PlanNode, p: Any) -> None:
        node = counted(node)
        path, kids = _chain(p)
        top = path[-1]
        name = _name(top)
        if name == EMPTY_REPLACED:
            replaced(node, top.logical())
            return
        if name in STAGES:  # a stage that never finished: nothing below it was counted
            return
        if node.alt.log_op == "join":
            if name == EMPTY_LOCAL and _rows(top) == 0:
                out[id(node)] = (0, 0)  # the join was found empty and not run
                return
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

    def replaced(node: PlanNode, logical: Any) -> None:
        """``node``'s part of a logical plan adaptive execution found empty and replaced:
        its stages that ran are read; a join with an input observed empty is empty."""
        node = counted(node)
        path, kids = _chain(logical)
        top = path[-1]
        name = _name(top)
        if name == "LogicalQueryStage":
            match(node, top.physicalPlan())
        elif name in ("EmptyRelation", EMPTY_REPLACED):  # replaced again, inside
            replaced(node, top.logical())
        elif node.alt.log_op == "join":
            if len(kids) != 2 or name != "Join":
                raise missing(node, "join")
            for child, kid in zip(node.children, kids, strict=True):
                replaced(child, kid)
            if any(out.get(id(counted(c)), (None,))[0] == 0 for c in node.children):
                out[id(node)] = (0, 0)
        elif kids:
            raise missing(node, "scan")
        # else a scan that was never run: no count

    match(plan, physical)
    return out
