"""The numbers a declarative update reports about its state, recounted from its relations.

``held`` (OR and AND nodes of SearchSpace) and ``state_bytes`` are computed on every
update; these tests recount them from :meth:`Optimizer.relations` — the frames a user reads —
by the README's definition (8 bytes per number, 1 per boolean, the UTF-8 length of a string),
value by value, so a faster way of counting cannot drift from it."""

from __future__ import annotations

import pytest

from reopt.api import Optimizer
from reopt.costmodel.builtins import BOOLEAN, DOUBLE, LONG


def recount(o: Optimizer) -> tuple[int, int, int]:
    """OR nodes, AND nodes and state bytes of query 0, value by value from the frames."""
    prog = o._program
    width = {LONG: 8, DOUBLE: 8, BOOLEAN: 1}
    state = 0
    for pred, frame in o.relations().items():
        types = prog.schemas[pred]
        if not types or types[0] != LONG or pred in prog.facts:
            continue  # fact relations and those without a query id are no query's state
        for row in frame.itertuples(index=False):
            if row[0] != 0:
                continue
            for v, t in zip(row, types, strict=True):
                state += width[t] if t in width else len(str(v).encode("utf-8"))
    ss = o.relations()["SearchSpace"]
    ss = ss[ss.iloc[:, 0] == 0]
    ors = len({(r[1], r[2]) for r in ss.itertuples(index=False)})
    return ors, len(ss), state


@pytest.mark.parametrize("model", ["io", "dist"])
def test_state_metrics_match_a_recount_after_updates(model):
    o = Optimizer("tpch:q5", cost_model=model, engine="python", pruning="all")
    calls = [o.optimize,
             lambda: o.update(["card orders *3", "card {customer,orders} := 40000"]),
             lambda: o.update("sel orders.o_custkey=customer.c_custkey *0.5")]
    for call in calls:
        m = call().metrics
        ors, ands, state = recount(o)  # the relations of the step just made
        assert (m["held"]["or_nodes"], m["held"]["and_nodes"], m["state_bytes"]) == \
            (ors, ands, state)
        assert state > 0 and ands > 0
