"""reopt.sparkplan on hand-built physical plans (stand-ins for Spark's Py4J objects): which
operator's row count each plan node gets, by the rules the module states; no Spark needed.
The same reading on real executed plans is checked against Spark SQL's counts of every
sub-join in tests/test_execute.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from reopt.costmodel.errors import ReoptError
from reopt.sparkplan import node_counts


class _Option:
    def __init__(self, value: int | None):
        self.value_ = value

    def isDefined(self) -> bool:  # noqa: N802 (Scala's Option)
        return self.value_ is not None

    def get(self) -> SimpleNamespace:
        return SimpleNamespace(value=lambda: self.value_)


class _Seq(list):
    def size(self) -> int:
        return len(self)

    def apply(self, i: int) -> Phys:
        return self[i]


LEAVES = ("ReusedExchangeExec", "BroadcastQueryStageExec", "ShuffleQueryStageExec",
          "EmptyRelationExec", "LogicalQueryStage")
"""Kinds whose plan below is reached by a method, not as a child (as in Spark)."""


@dataclass
class Phys:
    """A physical operator (or a logical one, under an ``EmptyRelationExec``): its class
    name, output rows (None: no such metric), children; a query stage is materialized unless
    ``ran`` is False."""

    kind: str
    rows: int | None = None
    kids: list[Phys] = field(default_factory=list)
    ran: bool = True

    def getClass(self) -> SimpleNamespace:  # noqa: N802 (Java's)
        return SimpleNamespace(getSimpleName=lambda: self.kind)

    def children(self) -> _Seq:
        return _Seq([] if self.kind in LEAVES else self.kids)

    def isMaterialized(self) -> bool:  # noqa: N802 (a query stage's)
        return self.ran

    def logical(self) -> Phys:  # EmptyRelationExec: the logical plan it replaced
        return self.kids[0]

    def physicalPlan(self) -> Phys:  # noqa: N802 (LogicalQueryStage's)
        return self.kids[0]

    def metrics(self) -> SimpleNamespace:
        return SimpleNamespace(get=lambda name: _Option(self.rows if name == "numOutputRows"
                                                        else None))

    def child(self) -> Phys:  # ReusedExchangeExec
        return self.kids[0]

    def plan(self) -> Phys:  # a query stage
        return self.kids[0]


def node(log: str, *children: SimpleNamespace, relations: tuple[str, ...] = ()
         ) -> SimpleNamespace:
    rels = relations or tuple(r for c in children for r in c.relations)
    return SimpleNamespace(op=log, alt=SimpleNamespace(log_op=log), children=list(children),
                           relations=rels)


def scan_of(table_rows: int, kept: int | None = None) -> Phys:
    """WholeStageCodegen(Project(Filter(ColumnarToRow(InputAdapter(FileScan)))))."""
    leaf = Phys("ColumnarToRowExec", table_rows, [Phys("InputAdapter", None, [
        Phys("FileSourceScanExec", table_rows)])])
    if kept is not None:
        leaf = Phys("FilterExec", kept, [leaf])
    return Phys("WholeStageCodegenExec", None, [Phys("ProjectExec", None, [leaf])])


def test_joins_scans_and_filters_get_their_operators_rows():
    a, b, c = (node("scan", relations=(x,)) for x in "abc")
    ab = node("join", a, b)
    top = node("join", ab, c)
    final = node("hashagg", node("sort", top))
    physical = Phys("HashAggregateExec", 4, [Phys("ShuffleExchangeExec", None, [
        Phys("FilterExec", 5, [  # a HAVING / constant filter above the joins: not a scan's
            Phys("BroadcastHashJoinExec", 7, [
                Phys("SortMergeJoinExec", 30, [
                    Phys("SortExec", None, [scan_of(100, 40)]),
                    Phys("SortExec", None, [Phys("ShuffleExchangeExec", None, [
                        scan_of(50)])])]),
                Phys("BroadcastExchangeExec", None, [scan_of(10, 3)])])])])])
    counts = node_counts(final, physical)
    assert counts[id(top)] == (7, 7) and counts[id(ab)] == (30, 30)
    assert counts[id(a)] == (40, 100)  # after its filter, and the table's rows
    assert counts[id(b)] == (50, 50)  # no filter: the table's rows
    assert counts[id(c)] == (3, 10)
    assert set(counts) == {id(x) for x in (a, b, c, ab, top)}


def test_a_single_scan_stops_at_the_aggregate_and_wrappers_are_followed():
    a = node("scan", relations=("a",))
    physical = Phys("FilterExec", 1, [Phys("HashAggregateExec", 2, [scan_of(9, 6)])])
    assert node_counts(node("hashagg", a), physical)[id(a)] == (6, 9)
    reused = Phys("ReusedExchangeExec", None, [Phys("BroadcastExchangeExec", None, [
        scan_of(8, 2)])])
    stage = Phys("BroadcastQueryStageExec", None, [scan_of(5)])
    x, y = node("scan", relations=("x",)), node("scan", relations=("y",))
    j = node("join", x, y)
    counts = node_counts(j, Phys("BroadcastHashJoinExec", 1, [reused, stage]))
    assert (counts[id(x)], counts[id(y)], counts[id(j)]) == ((2, 8), (5, 5), (1, 1))


def test_a_plan_that_does_not_match_is_an_error_not_a_wrong_count():
    a, b = node("scan", relations=("a",)), node("scan", relations=("b",))
    with pytest.raises(ReoptError, match=r"no join for plan node join \{a, b\}"):
        node_counts(node("join", a, b), scan_of(3))
    with pytest.raises(ReoptError, match=r"no scan for plan node scan \{a\}"):
        node_counts(a, Phys("SortMergeJoinExec", 1, [scan_of(1), scan_of(2)]))
    with pytest.raises(ReoptError, match="no row count"):
        node_counts(node("join", a, b), Phys("CartesianProductExec", None,
                                             [scan_of(1), scan_of(2)]))


def unread(table: str) -> Phys:
    """A relation's logical scan that was never run: Project(Filter(LogicalRelation))."""
    return Phys("Project", None, [Phys("Filter", None, [Phys("LogicalRelation")])])


def stage(kind: str, plan: Phys, ran: bool = True) -> Phys:
    """A logical query stage: a physical query stage of ``plan`` (materialized if ``ran``)."""
    exchange = "BroadcastExchangeExec" if kind == "Broadcast" else "ShuffleExchangeExec"
    return Phys("LogicalQueryStage", None, [Phys(f"{kind}QueryStageExec", None, [
        Phys(exchange, None, [plan])], ran=ran)])


def test_a_part_found_empty_counts_what_ran_and_nothing_else():
    """((a ⋈ b) ⋈ c) ⋈ d where b's broadcast ran and kept no row: adaptive execution replaced
    the joins above it by an empty relation. b's scan and the joins above it are observed (0
    rows, a fact); a, c and d were never scanned, and d's stage never finished: no counts."""
    a, b, c, d = (node("scan", relations=(x,)) for x in "abcd")
    ab = node("join", a, b)
    abc = node("join", ab, c)
    top = node("join", abc, d)
    replaced = Phys("Join", None, [
        Phys("Project", None, [Phys("Join", None, [
            Phys("Join", None, [unread("a"), stage("Broadcast", scan_of(100, 0))]),
            unread("c")])]),
        stage("Shuffle", scan_of(7), ran=False)])
    physical = Phys("HashAggregateExec", 0, [Phys("EmptyRelationExec", None, [replaced])])
    counts = node_counts(node("hashagg", top), physical)
    assert counts == {id(b): (0, 100), id(ab): (0, 0), id(abc): (0, 0), id(top): (0, 0)}


def test_a_stage_that_ran_inside_a_replaced_part_is_read_in_full():
    """The replaced part's stage that ran (here the whole join, below an aggregate found
    empty) gives every count it holds; a join with no input observed empty stays unknown."""
    a, b, c = (node("scan", relations=(x,)) for x in "abc")
    ab = node("join", a, b)
    joined = Phys("BroadcastHashJoinExec", 4, [scan_of(30, 20),
                                               Phys("BroadcastExchangeExec", None, [scan_of(9)])])
    inside = node_counts(ab, Phys("EmptyRelationExec", None, [
        Phys("Aggregate", None, [stage("Shuffle", Phys("HashAggregateExec", 0, [joined]))])]))
    assert inside == {id(ab): (4, 4), id(a): (20, 30), id(b): (9, 9)}
    abc = node("join", ab, c)
    outside = node_counts(abc, Phys("EmptyRelationExec", None, [Phys("Join", None, [
        stage("Shuffle", joined), stage("Broadcast", scan_of(5, 2), ran=False)])]))
    assert outside == inside  # abc: neither input observed empty, so no count for it


def test_an_empty_local_scan_stands_for_a_join_found_empty():
    a, b = node("scan", relations=("a",)), node("scan", relations=("b",))
    ab = node("join", a, b)
    assert node_counts(ab, Phys("ProjectExec", None, [Phys("LocalTableScanExec", 0)])) == {
        id(ab): (0, 0)}
    with pytest.raises(ReoptError, match=r"no join for plan node join \{a, b\}"):
        node_counts(ab, Phys("LocalTableScanExec", 3))  # rows: not a part found empty
    with pytest.raises(ReoptError, match=r"no join for plan node join \{a, b\}"):
        node_counts(ab, Phys("EmptyRelationExec", None, [unread("a")]))
