"""The batch form of every built-in the rules call equals its tuple-at-a-time form.

The oracle is the tuple form applied row by row (itself checked against the procedural
optimizers through the declarative optimizer's tests): for every OR node of random queries
under both cost models, each batch returns exactly the rows the tuple form returns for each
input row, in order, with the row index pointing back to that input, and the same
floating-point values bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from randq import make_query, queries

from reopt.costmodel import ccp
from reopt.costmodel.builtins import BUILTINS
from reopt.costmodel.errors import QueryError
from reopt.costmodel.models import cost_model
from reopt.costmodel.query import ColumnRef, JoinPredicate, Query, Relation
from reopt.costmodel.space import PlanSpace


def per_row(b, ctx, rows: list[tuple]) -> tuple[list[int], list[tuple]]:
    """The tuple form over ``rows``: (input row of each output, output tuples)."""
    at, out = [], []
    for k, args in enumerate(rows):
        for t in b.fn(ctx, *args):
            at.append(k)
            out.append(tuple(t))
    return at, out


def as_batch(b, ctx, rows: list[tuple]) -> tuple[list[int], list[tuple]]:
    cols = [np.asarray([r[j] for r in rows]) if isinstance(rows[0][j], (int, float))
            else [r[j] for r in rows] for j in range(len(rows[0]))]
    row, *outs = b.batch(ctx, *cols)
    assert all(len(o) == len(row) for o in outs)
    assert row.dtype == np.int64
    return row.tolist(), [tuple(o[k].item() if hasattr(o[k], "item") else o[k] for o in outs)
                          for k in range(len(row))]


def inputs(space: PlanSpace, q: int) -> dict[str, list[tuple]]:
    """Input rows for each built-in: every OR node, with every method of its kind."""
    nodes = sorted(space.or_nodes())
    joins = space.model.join_methods + ("join", "hashjoin", "nosuchmethod")
    alts = [a for n in nodes for a in space.alternatives(*n)]
    md = {e: space.summary(e) for e, _ in nodes}
    return {
        "Fn_isleaf": [(q, e) for e, _ in nodes],
        "Fn_split": [(q, e, p, m) for e, p in nodes for m in joins],
        "Fn_phyop": [(q, e, p, m) for e, p in nodes for m in
                     ("scan", "tablescan", "indexscan", "indexprobe")],
        "Fn_enforce": [(q, e, p, "sort") for e, p in nodes],
        "Fn_final": [(q, e, p, m) for e, p in nodes for m in ("hashagg", "sortagg", "topsort")],
        "Fn_scansummary": [(q, e) for e, _ in nodes],
        "Fn_nonscansummary": [(q, e, 1.0, 2.0) for e, _ in nodes],
        "Fn_scancost": [(q, a.expr, a.prop, a.index, a.phy_op, md[a.expr])
                        for a in alts if a.log_op == "scan"],
        "Fn_nonscancost": [(q, *a, md[a.expr]) for a in alts if a.log_op != "scan"],
        "Fn_rank": [(q, e, p) for e, p in nodes],
        "Fn_sum": [(space.local_cost(a), 0.1 * k, 1e-3 * k) for k, a in enumerate(alts)],
    }


@pytest.mark.parametrize("model", ["cout", "io"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 6), qid=st.integers(0, 3), compiled=st.booleans())
def test_batch_equals_tuple_form(model, qc, qid, compiled):
    """Every built-in's batch form against its tuple form; ``compiled``: the join graph
    enumerated by the compiled kernel (else Python, as below 14 relations), whose splits as
    arrays a model may read for the whole batch (``cout``'s ``Fn_split``)."""
    q, cat = qc
    space = PlanSpace(q, cat, cost_model(model))
    space.graph.compiled = compiled and ccp.AVAILABLE
    ctx = {qid: space}
    for name, rows in inputs(space, qid).items():
        if not rows:
            continue
        b = BUILTINS[name]
        assert as_batch(b, ctx, rows) == per_row(b, ctx, rows), name


def test_batches_mix_queries_and_keep_the_row_order():
    a, cat_a = make_query("chain", 4, 1, final=True)
    b, cat_b = make_query("star", 5, 2, final=False)
    sa, sb = PlanSpace(a, cat_a, cost_model("io")), PlanSpace(b, cat_b, cost_model("io"))
    ctx = {0: sa, 7: sb}
    rows = [(7, e, p, "hashjoin") for e, p in sorted(sb.or_nodes())]
    rows += [(0, e, p, "sortmerge") for e, p in sorted(sa.or_nodes())]
    rows = rows[::-1]
    b_ = BUILTINS["Fn_split"]
    assert as_batch(b_, ctx, rows) == per_row(b_, ctx, rows)
    row, index, left, lprop, right, rprop = b_.batch(
        ctx, np.asarray([r[0] for r in rows]), np.asarray([r[1] for r in rows]),
        [r[2] for r in rows], [r[3] for r in rows])
    assert left.dtype == np.int64 and right.dtype == np.int64 and lprop.dtype == object
    assert ((left | right) == np.asarray([rows[k][1] for k in row.tolist()])).all()
    assert not (left & right).any()


@pytest.mark.parametrize("model", ["cout", "io"])
def test_costs_of_mixed_queries_and_of_one_operator_broadcast_equal_the_tuple_form(model):
    """``Fn_nonscancost`` and ``Fn_nonscansummary`` over a batch of two queries
    interleaved (each query's rows gathered) and over one query's rows (read whole, no
    gather), with their string columns as the engine hands a column of one value over — a
    read-only broadcast, stride 0 — give the tuple form's answer row by row (fails when a
    one-query batch is written back anywhere but in place, or a broadcast operator is not
    looked up as the one value it repeats)."""
    a, cat_a = make_query("chain", 5, 1, final=True)
    b, cat_b = make_query("clique", 5, 2, final=False)
    ctx = {3: PlanSpace(a, cat_a, cost_model(model)), 8: PlanSpace(b, cat_b, cost_model(model))}
    cost, summary = BUILTINS["Fn_nonscancost"], BUILTINS["Fn_nonscansummary"]
    for qids in ((3, 8), (8,)):
        rows = [(qid, *alt, 2.0) for qid in qids for e, p in sorted(ctx[qid].or_nodes())
                for alt in ctx[qid].alternatives(e, p) if alt.log_op == "join"]
        rows = rows[1::2] + rows[::2]
        assert len(rows) > 8 and (model != "cout" or len({r[5] for r in rows}) == 1)
        columns = []
        for j in range(len(rows[0])):
            values = [r[j] for r in rows]
            if isinstance(values[0], str) and len(set(values)) == 1:
                columns.append(np.broadcast_to(np.asarray(values[:1], dtype=object),
                                               (len(rows),)))
            elif isinstance(values[0], str):
                columns.append(np.asarray(values, dtype=object))
            else:
                columns.append(np.asarray(values))
        row, got = cost.batch(ctx, *columns)
        assert row.tolist() == list(range(len(rows)))
        assert got.tolist() == [v for _, (v,) in zip(*per_row(cost, ctx, rows), strict=True)]
        row, got = summary.batch(ctx, columns[0], columns[1], columns[-1], columns[-1])
        want = per_row(summary, ctx, [(r[0], r[1], 2.0, 2.0) for r in rows])[1]
        assert got.tolist() == [v for (v,) in want]


def test_enforcers_of_queries_with_and_without_them_keep_the_row_order():
    """Fn_enforce's batch leaves out the rows of a query whose model has no enforcers
    (``cout``) and answers the others (``io``) row by row: as the tuple form, in row order,
    in a batch mixing both."""
    a, cat_a = make_query("chain", 4, 1, final=True)
    b, cat_b = make_query("star", 5, 2, final=False)
    ctx = {3: PlanSpace(a, cat_a, cost_model("cout")), 5: PlanSpace(b, cat_b, cost_model("io"))}
    rows = [(qid, e, p, "sort") for qid, s in ctx.items() for e, p in sorted(s.or_nodes())]
    rows = rows[1::2] + rows[::2]  # the queries interleaved
    b_ = BUILTINS["Fn_enforce"]
    got = as_batch(b_, ctx, rows)
    assert got == per_row(b_, ctx, rows)
    assert got[0] and {rows[k][0] for k in got[0]} == {5}  # (io's enforcers, none of cout's)


def test_a_batch_of_splits_answered_whole_and_node_by_node_keeps_the_row_order():
    """``cout`` on a compiled enumeration and ``io`` answer their query's rows at once,
    ``dist`` node by node: rows of all three, interleaved, come back as the tuple form gives
    them, row by row."""
    a, cat_a = make_query("clique", 5, 3)
    b, cat_b = make_query("star", 5, 2, final=False)
    sa, sb = PlanSpace(a, cat_a, cost_model("cout")), PlanSpace(b, cat_b, cost_model("io"))
    sc = PlanSpace(b, cat_b, cost_model("dist"))
    sa.graph.compiled = ccp.AVAILABLE
    ctx = {0: sa, 7: sb, 2: sc}
    rows = [(0, e, p, m) for e, p in sorted(sa.or_nodes()) for m in ("join", "hashjoin")]
    rows += [(7, e, p, m) for e, p in sorted(sb.or_nodes()) for m in ("hashjoin", "sortmerge")]
    rows += [(2, e, p, "shuffle") for e, p in sorted(sc.or_nodes())]
    rows = rows[::2] + rows[1::2][::-1]
    assert as_batch(BUILTINS["Fn_split"], ctx, rows) == per_row(BUILTINS["Fn_split"], ctx, rows)


def test_every_builtin_has_a_batch_form():
    assert all(callable(b.batch) for b in BUILTINS.values())


def test_a_query_wider_than_the_bitsets_is_one_clear_error():
    from reopt.costmodel.catalog import Catalog

    n = 63
    rels = tuple(Relation(f"r{i}", "t") for i in range(n))
    joins = tuple(JoinPredicate.of(ColumnRef(f"r{i}", "a"), ColumnRef(f"r{i + 1}", "a"))
                  for i in range(n - 1))
    cat = Catalog.from_dict({"tables": {"t": {"rows": 10, "columns": {"a": {}}}}})
    with pytest.raises(QueryError, match="joins 63 relations; reopt plans at most 62"):
        PlanSpace(Query("wide", rels, (), joins), cat, cost_model("cout"))


@pytest.mark.parametrize("model", ["cout", "io"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qc=queries(2, 6), qid=st.integers(0, 3))
def test_single_answer_form_equals_tuple_form(model, qc, qid):
    """A built-in declaring ``one`` (bound as a value by the generated variants) answers
    every input row with exactly one one-column row, whose value ``one`` gives bit for bit
    (fresh spaces for each form: no memo shared)."""
    q, cat = qc
    m = cost_model(model)
    singles = [name for name, b in BUILTINS.items() if b.one is not None]
    assert {"Fn_nonscancost", "Fn_sum", "Fn_nonscansummary"} <= set(singles)
    for name, rows in inputs(PlanSpace(q, cat, m), qid).items():
        b = BUILTINS[name]
        if b.one is None or not rows:
            continue
        tuples = {qid: PlanSpace(q, cat, m)}
        values = {qid: PlanSpace(q, cat, m)}
        for args in rows:
            got = list(b.fn(tuples, *args))
            assert len(got) == 1 and len(got[0]) == 1, name
            one = b.one(values, *args)
            assert type(one) is type(got[0][0]) and (one == got[0][0]), name
