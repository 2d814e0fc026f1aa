"""reopt.combine: the answers of a query on the parts of a table combine into its answer on the
whole table. Oracle: SQLite (another SQL engine) running the query on the whole table."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reopt.combine import CombineError, combiner
from reopt.execute import answer_digest

QUERIES = [
    "SELECT g, sum(x) AS s, count(*) AS n, min(x) AS lo, max(y) AS hi FROM t GROUP BY g",
    "SELECT g, h, count(x) FROM t GROUP BY g, h ORDER BY 3 DESC, g, h LIMIT 3",
    "SELECT sum(x * 2) AS s, count(y), max(x) FROM t",
    "SELECT g, x, y FROM t WHERE x > 0 ORDER BY x DESC, g, y LIMIT 4",
    "SELECT DISTINCT g, h FROM t",
    "SELECT g FROM t GROUP BY g ORDER BY g DESC",
    "SELECT h, sum(x) AS total FROM t GROUP BY h ORDER BY total, h",
]
ROW = st.tuples(st.sampled_from(["a", "b", "c", None]), st.integers(0, 2),
                st.one_of(st.none(), st.integers(-5, 9)), st.one_of(st.none(), st.integers(0, 3)))


def answer(rows: list[tuple], sql: str) -> list[tuple]:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (g TEXT, h INTEGER, x INTEGER, y INTEGER)")
    db.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows)
    return db.execute(sql).fetchall()


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(ROW, max_size=30), parts=st.integers(1, 4), data=st.data())
def test_combined_parts_answer_as_the_whole(rows, parts, data):
    sql = data.draw(st.sampled_from(QUERIES))
    where = data.draw(st.lists(st.integers(0, parts - 1), min_size=len(rows),
                               max_size=len(rows)))
    c = combiner(sql)
    partials = [answer([r for r, p in zip(rows, where, strict=True) if p == i], c.split_sql)
                for i in range(parts)]
    got = c.combine(partials)
    want = answer(rows, sql)
    assert answer_digest(got) == answer_digest(want)
    if "ORDER BY" in sql:  # the order is the query's (each ORDER BY here is total)
        assert got == want


@pytest.mark.parametrize("sql, says", [
    ("SELECT g, avg(x) FROM t GROUP BY g", "AVG needs a SUM and a COUNT"),
    ("SELECT g, sum(x) / count(x) FROM t GROUP BY g", "expression over aggregates"),
    ("SELECT g, count(DISTINCT x) FROM t GROUP BY g", "counts distinct values"),
    ("SELECT g, sum(x) FROM t GROUP BY g HAVING sum(x) > 1", "HAVING"),
    ("SELECT sum(x) FROM t GROUP BY g", "GROUP BY g is not a select item"),
    ("SELECT g, x FROM t ORDER BY y", "ORDER BY y is not an output column"),
])
def test_refused(sql, says):
    with pytest.raises(CombineError, match=says):
        combiner(sql, "q")
