"""Random queries and catalogs for property tests (hypothesis strategies).

Queries are built directly as :class:`Query` values (not SQL) so the optimizer tests do not
depend on the front-end. Shapes: chain, star, cycle, clique and random graphs (sometimes
disconnected); each relation is its own table with random statistics, indexes and sort order;
star and cycle queries sometimes reuse one join column so that several predicates share an
equivalence class.
"""

from __future__ import annotations

import random

from hypothesis import strategies as st

from reopt.costmodel.catalog import Catalog
from reopt.costmodel.query import (
    Between,
    ColumnRef,
    Compare,
    JoinPredicate,
    Query,
    Relation,
)
from reopt.costmodel.space import PlanSpace

SHAPES = ("chain", "star", "cycle", "clique", "random")


def shape_edges(shape: str, n: int, rng: random.Random | None = None) -> list[tuple[int, int]]:
    if shape == "chain":
        return [(i, i + 1) for i in range(n - 1)]
    if shape == "star":
        return [(0, i) for i in range(1, n)]
    if shape == "cycle":
        return [(i, (i + 1) % n) for i in range(n)] if n >= 3 else [(0, 1)]
    if shape == "clique":
        return [(i, j) for i in range(n) for j in range(i + 1, n)]
    assert rng is not None
    edges = [(rng.randrange(i), i) for i in range(1, n)]  # a random spanning tree
    extra = [(i, j) for i in range(n) for j in range(i + 1, n) if (i, j) not in edges]
    edges += [e for e in extra if rng.random() < 0.25]
    if n >= 3 and rng.random() < 0.2:  # sometimes drop a tree edge: disconnected graph
        edges.remove(rng.choice(edges[: n - 1]))
    return edges


def make_query(
    shape: str, n: int, seed: int, *, final: bool | None = None
) -> tuple[Query, Catalog]:
    """A random query of ``n`` relations with the given join-graph shape, and its catalog."""
    rng = random.Random(seed)
    edges = shape_edges(shape, n, rng)
    shared = shape in ("star", "cycle") and rng.random() < 0.5
    tables: dict = {}
    rows = [float(rng.choice([1, 5, 25, 100, 1000, 10_000, 150_000, 1_500_000, 6_000_000]))
            for _ in range(n)]
    cols: list[dict] = [{} for _ in range(n)]
    joins = []
    for a, b in edges:
        ca = "k" if shared else f"j{a}_{b}"
        cb = "k" if shared else f"j{b}_{a}"
        for i, c in ((a, ca), (b, cb)):
            if c not in cols[i]:
                cols[i][c] = {"distinct": max(1.0, float(rng.randint(1, int(rows[i]))))}
        joins.append(JoinPredicate.of(ColumnRef(f"r{a}", ca), ColumnRef(f"r{b}", cb)))
    filters = []
    for i in range(n):
        cols[i]["f"] = {"distinct": 100.0, "min": 0, "max": 1000}
        r = rng.random()
        if r < 0.3:
            filters.append(Compare(ColumnRef(f"r{i}", "f"), "<", rng.randint(0, 1000)))
        elif r < 0.4:
            filters.append(Between(ColumnRef(f"r{i}", "f"), 100, rng.randint(100, 900)))
        elif r < 0.5:
            filters.append(Compare(ColumnRef(f"r{i}", "f"), "=", 7))
        names = list(cols[i])
        indexes = [c for c in names if rng.random() < 0.4]
        sorted_on = rng.choice(names) if rng.random() < 0.4 else None
        tables[f"t{i}"] = {"rows": rows[i], "columns": cols[i], "indexes": indexes,
                           "sorted_on": sorted_on}
    if final is None:
        final = rng.random() < 0.5
    q = Query(
        name=f"{shape}{n}_{seed}",
        relations=tuple(Relation(f"r{i}", f"t{i}") for i in range(n)),
        filters=tuple(filters),
        joins=tuple(dict.fromkeys(joins)),
        group_by=(ColumnRef("r0", "f"),) if final else (),
        aggregates=final,
    )
    return q, Catalog.from_dict({"tables": tables})


@st.composite
def queries(draw, min_n: int = 2, max_n: int = 7, shapes=SHAPES):
    shape = draw(st.sampled_from(shapes))
    n = draw(st.integers(min_n, max_n))
    seed = draw(st.integers(0, 2**31))
    return make_query(shape, n, seed)


FACTORS = (0.125, 0.25, 0.5, 2.0, 4.0, 8.0)


OBSERVED_ROWS = (0, 1, 3, 1000, 50_000, 1e7, 1e15)
"""Observed rows: an empty result (estimated as 1 row), small and large results, and some
above many sets' cross products (clamped)."""


def random_deltas(q: Query, rng: random.Random, k: int, operators: tuple[str, ...], *,
                  observe: bool = False) -> list[str]:
    """``k`` random valid delta texts for ``q`` (card, set corrections, sel, cost). A ``sel``
    factor that would take the product of a predicate's factors above 1 is inverted: the
    estimate starts at most 1 and a selectivity above 1 is rejected. ``observe`` mixes in
    observations (``card {…} := N``, a third of them re-observing a set observed before, some
    of a single relation written without braces)."""
    out = []
    sel_scale: dict[str, float] = {}
    observed: list[str] = []
    kinds = ["card", "card", "corr", "sel", "cost", "set"]
    if observe:
        kinds += ["obs", "obs", "obs", "corrset"]
    for _ in range(k):
        kind = rng.choice(kinds)
        f = rng.choice(FACTORS)
        if kind == "obs":
            if observed and rng.random() < 1 / 3:
                target = rng.choice(observed)
            else:
                members = rng.sample(q.aliases, rng.randint(1, q.n))
                target = (members[0] if len(members) == 1 and rng.random() < 0.5
                          else f"{{{','.join(members)}}}")
                observed.append(target)
            out.append(f"card {target} := {rng.choice(OBSERVED_ROWS):g}")
        elif kind == "corrset":  # today's meaning of an observation, mixed with the new one
            # (1 row: any set's ceiling is at least that, so the correction is always valid)
            members = rng.sample(q.aliases, rng.randint(1, q.n))
            out.append(f"card {{{','.join(members)}}} =1")
        elif kind == "card":
            out.append(f"card {rng.choice(q.aliases)} *{f}")
        elif kind == "set":
            out.append(f"card {rng.choice(q.aliases)} ={rng.choice([1, 10, 1000, 50000])}")
        elif kind == "corr":
            size = rng.randint(1, q.n)
            out.append(f"card {{{','.join(rng.sample(q.aliases, size))}}} *{f}")
        elif kind == "sel" and q.joins:
            key = rng.choice(q.joins).key
            if sel_scale.get(key, 1.0) * f > 1:
                f = 1 / f
            sel_scale[key] = sel_scale.get(key, 1.0) * f
            out.append(f"sel {key} *{f}")
        else:
            out.append(f"cost {rng.choice(operators)} *{f}")
    return out


def tie_deltas(space: PlanSpace) -> tuple[str, str]:
    """A cost delta that makes some leaf's index scan cost exactly what its table scan costs
    (two alternatives of one OR node, different operators, tied for best), and the delta
    undoing it. Exact cost ties are what a cost model like ``cout`` never produces and what
    re-optimization must still follow: a group then changes by losing or gaining tuples of
    equal cost."""
    for node in space.or_nodes():
        costs = {a.phy_op: space.local_cost(a) for a in space.alternatives(*node)}
        if {"tablescan", "indexscan"} <= costs.keys():
            f = costs["tablescan"] / costs["indexscan"]
            if costs["indexscan"] * f == costs["tablescan"]:
                return f"cost indexscan *{f!r}", f"cost indexscan *{1 / f!r}"
    raise AssertionError(f"{space.query.name}: no leaf with both scans to tie")


def applied(session, q: Query, cat: Catalog, model, deltas: list[str], resave_at: int = -1):
    """Per delta of ``deltas`` that applies to query 0 of ``session``: its index, the
    session (pickled and loaded again before step ``resave_at``, as a saved session resumes),
    the statistics after it and whether they differ from the session's; the caller updates."""
    import pickle

    from reopt.costmodel.deltas import apply_deltas, parse_deltas
    from reopt.costmodel.errors import ReoptError

    adj = session.ctx[0].adjustments
    for i, delta in enumerate(deltas):
        try:
            adj = apply_deltas(list(parse_deltas(delta)), q, cat, adj, model.operators)
        except ReoptError:
            continue
        if i == resave_at:
            session = pickle.loads(pickle.dumps(session))
        yield i, session, adj, adj != session.ctx[0].adjustments
