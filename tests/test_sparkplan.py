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


@dataclass
class Phys:
    """A physical operator: its class name, output rows (None: no such metric), children."""

    kind: str
    rows: int | None = None
    kids: list[Phys] = field(default_factory=list)

    def getClass(self) -> SimpleNamespace:  # noqa: N802 (Java's)
        return SimpleNamespace(getSimpleName=lambda: self.kind)

    def children(self) -> _Seq:
        return _Seq([] if self.kind in ("ReusedExchangeExec", "BroadcastQueryStageExec")
                    else self.kids)

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
