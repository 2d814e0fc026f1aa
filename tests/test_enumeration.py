"""The join enumerator (``costmodel/joingraph.py``): exactly the csgs and csg-cmp pairs, each
once, with work in proportion to the pairs.

Oracles: a brute-force scan of every subset with a connectivity test (the enumeration this
module replaced), the closed-form pair counts of chain, cycle, star and clique graphs
(Moerkotte and Neumann), and a plain DPccp (``benchmarks/dpccp.py``, its own enumeration) for
the C_out optimum.
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from randq import make_query, shape_edges
from test_optimizers import CCP, plain_query

from reopt.costmodel.errors import ReoptError
from reopt.costmodel.joingraph import MAX_RELATIONS, JoinGraph
from reopt.costmodel.models import cost_model
from reopt.costmodel.space import PlanSpace
from reopt.optimizers.bottomup import bottomup
from reopt.optimizers.exhaustive import exhaustive
from reopt.optimizers.incremental import BottomUpInc, TopDownInc
from reopt.optimizers.topdown import topdown

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from dpccp import dpccp_cout  # noqa: E402


def graph(n: int, edges) -> JoinGraph:
    nb = [0] * n
    for a, b in edges:
        nb[a] |= 1 << b
        nb[b] |= 1 << a
    return JoinGraph(n, nb)


def connected(nb: list[int], mask: int) -> bool:
    """Connectivity by search over the relations of ``mask`` (no JoinGraph code)."""
    if not mask:
        return False
    start = (mask & -mask).bit_length() - 1
    seen, todo = {start}, [start]
    while todo:
        i = todo.pop()
        for j in range(len(nb)):
            if nb[i] >> j & 1 and mask >> j & 1 and j not in seen:
                seen.add(j)
                todo.append(j)
    return len(seen) == mask.bit_count()


def brute_force(n: int, edges) -> tuple[set[int], dict[int, set[int]]]:
    """Every connected subset, and per connected subset the left sides of its splits into
    two connected halves joined by an edge: every subset scanned."""
    nb = [0] * n
    for a, b in edges:
        nb[a] |= 1 << b
        nb[b] |= 1 << a
    csgs = {m for m in range(1, 1 << n) if connected(nb, m)}
    lefts: dict[int, set[int]] = {}
    for u in csgs:
        for left in range(1, u):
            right = u ^ left
            if left & u != left or not right:
                continue
            adjacent = any(nb[i] & right for i in range(n) if left >> i & 1)
            if left in csgs and right in csgs and adjacent:
                lefts.setdefault(u, set()).add(left)
    return csgs, lefts


@st.composite
def random_graphs(draw, max_n: int = 9):
    n = draw(st.integers(1, max_n))
    p = draw(st.sampled_from([0.15, 0.3, 0.5, 0.9]))
    seed = draw(st.integers(0, 2**31))
    rng = random.Random(seed)
    edges = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < p]
    return n, edges


@settings(max_examples=200, deadline=None)
@given(g=random_graphs())
def test_csgs_and_pairs_equal_brute_force(g):
    n, edges = g
    jg = graph(n, edges)
    csgs, lefts = brute_force(n, edges)
    assert len(jg.csgs()) == len(set(jg.csgs())), "a connected subset enumerated twice"
    assert set(jg.csgs()) == csgs
    got = jg.lefts()
    inside = {u: v for u, v in got.items() if any(u & ~c == 0 for c in jg.components)}
    assert {u: set(v) for u, v in inside.items()} == lefts
    for v in inside.values():
        assert v == sorted(v) and len(v) == len(set(v)), "splits sorted, each once"
    if len(jg.components) == 1:
        assert jg.pair_count == sum(len(v) for v in lefts.values()) // 2


@settings(max_examples=200, deadline=None)
@given(g=random_graphs(12), budget=st.integers(0, 400))
# found by hypothesis: the compiled enumeration passed the budget where it tests it, the
# Python one (other order) only after its last test, so one refused and one did not
@example(g=(7, [(0, 3), (0, 5), (2, 4), (3, 5), (4, 6)]), budget=7)
def test_compiled_enumeration_equals_the_python_one(g, budget):
    """The compiled kernel (numba) and the Python methods find the same csgs, the same
    splits in the same order, and count the same sets examined — also when a pair budget
    stops them (both refuse exactly the same graphs)."""
    from reopt.costmodel import ccp

    if not ccp.AVAILABLE:  # pragma: no cover
        pytest.fail("numba is a dependency: the compiled enumeration must be there")
    n, edges = g
    runs = []
    for compiled in (True, False):
        jg = graph(n, edges)
        jg.compiled = compiled
        within = jg.pairs_within(budget)
        runs.append((within, jg.examined))
        jg = graph(n, edges)
        jg.compiled = compiled
        runs.append((sorted(jg.csgs()), jg.lefts(), jg.examined, jg.pair_count))
    assert runs[0] == runs[2]
    assert runs[1] == runs[3]


@settings(max_examples=100, deadline=None)
@given(g=random_graphs())
def test_disconnected_graphs_split_only_between_whole_components(g):
    n, edges = g
    jg = graph(n, edges)
    comps = jg.components
    assert sum(comps) == (1 << n) - 1 and all(a & b == 0 for a in comps for b in comps
                                              if a != b)
    for u in jg.component_unions():
        assert sum(c.bit_count() for c in comps if c & u) == u.bit_count()
        for left in jg.lefts()[u]:
            assert all(left & c in (0, c) for c in comps)
            assert 0 < left < u and left & u == left


@pytest.mark.parametrize("shape", sorted(CCP))
def test_pair_counts_equal_closed_forms_up_to_18_relations(shape):
    """The closed forms of Moerkotte and Neumann. A clique of n relations has (3^n − 2^(n+1)
    + 1)/2 pairs: 193 million at 18, out of reach of any enumeration in a test, so cliques
    stop at 12 (265,719 pairs); stars go to 16 (245,760 pairs; 18 is 1.1 million)."""
    top = {"chain": 18, "cycle": 18, "star": 16, "clique": 12}[shape]
    for n in range(3, top + 1):
        jg = graph(n, shape_edges(shape, n))
        assert jg.pair_count == CCP[shape](n), (shape, n)


@pytest.mark.parametrize("shape", ["chain", "cycle", "star", "clique", "random"])
def test_work_is_proportional_to_the_pairs(shape):
    """Every set the enumeration builds is a csg or a complement: the sets examined are at
    most the pairs plus the csgs, and a csg of two or more relations is the union of at least
    one pair, so at most 2 × pairs + n. A subset scan examines Σ 2^|S| over the csgs. Up to
    18 relations (cliques to 12, stars and random graphs to 14: a clique of 18 has 193 million
    pairs, a star of 18 1.1 million)."""
    rng = random.Random(7)
    top = {"clique": 12, "star": 14, "random": 14}.get(shape, 18)  # dense ones: pairs grow fast
    for n in (4, 8, 12, 14, 16, 18):
        if n > top:
            continue
        jg = graph(n, shape_edges(shape, n, rng))
        jg.halves()
        jg.halves()  # computed once
        pairs = jg.pair_count
        assert pairs > 0
        assert jg.examined <= 2 * pairs + n, (shape, n, jg.examined, pairs)
        scan = sum(2 ** c.bit_count() for c in jg.csgs())
        if n >= 12 and shape in ("chain", "cycle", "star"):
            assert jg.examined * 10 < scan


@pytest.mark.parametrize("model", ["cout", "io"])
def test_every_optimizer_enumerates_once_in_proportion_to_the_pairs(model):
    """All optimizers share the space's enumeration: running every one of them (and an
    update of the incremental ones) examines no more sets than one enumeration."""
    q, cat = make_query("random", 9, 3, final=True)
    space = PlanSpace(q, cat, cost_model(model))
    topdown(space)
    bottomup(space)
    if space.count_trees(limit=20_000) <= 20_000:
        exhaustive(space, max_trees=20_000)
    for inc in (TopDownInc(space), BottomUpInc(space)):
        inc.optimize()
    jg = space.graph
    assert jg.examined <= 2 * jg.pair_count + q.n


def test_the_enumeration_is_compiled_for_large_graphs_unless_told(monkeypatch):
    from reopt.costmodel import joingraph

    monkeypatch.delenv(joingraph.ENUMERATION_ENV, raising=False)
    assert not graph(joingraph.COMPILED_FROM - 1, []).compiled
    assert graph(joingraph.COMPILED_FROM, []).compiled
    monkeypatch.setenv(joingraph.ENUMERATION_ENV, "python")
    assert not graph(18, []).compiled
    monkeypatch.setenv(joingraph.ENUMERATION_ENV, "compiled")
    assert graph(3, []).compiled


def test_queries_above_the_bitset_width_are_refused():
    with pytest.raises(ValueError, match="at most 62 relations"):
        JoinGraph(MAX_RELATIONS + 1, [0] * (MAX_RELATIONS + 1))


@settings(max_examples=100, deadline=None)
@given(g=random_graphs(), compiled=st.booleans())
def test_halves_as_arrays_are_the_halves_of_either_enumeration(g, compiled):
    """``halves_arrays``: every expression with splits ascending, where its left sides start,
    and the left sides in ``halves``' order — the compiled enumeration's arrays or, for the
    Python one and for disconnected graphs (cross-product splits), made from the lists."""
    n, edges = g
    jg = graph(n, edges)
    jg.compiled = compiled
    unions, bounds, lefts = jg.halves_arrays()
    assert unions.dtype.name == bounds.dtype.name == lefts.dtype.name == "int64"
    cuts = bounds.tolist()
    got = {u: lefts[a:b].tolist() for u, a, b in zip(unions.tolist(), cuts, cuts[1:],
                                                      strict=False)}
    assert unions.tolist() == sorted(jg.halves()) and len(cuts) == len(unions) + 1
    assert got == jg.halves()


def test_pair_arrays_are_the_splits_as_columns():
    jg = graph(6, shape_edges("cycle", 6))
    union, left, right = jg.pair_arrays()
    assert union.dtype.name == "int64" and len(union) == 2 * jg.pair_count
    rows = list(zip(union.tolist(), left.tolist(), right.tolist(), strict=True))
    assert rows == [(u, lft, u ^ lft) for u in jg.expressions() for lft in jg.lefts().get(u, [])]
    assert all(u == lft | r and lft & r == 0 for u, lft, r in rows)


@settings(max_examples=100, deadline=None)
@given(n=st.sampled_from([2, 7, 17, 31]), dense=st.booleans(), data=st.data())
def test_compiled_pairs_are_grouped_by_union_in_the_order_they_came(n, dense, data):
    """The compiled enumeration groups its pairs by union with a counting sort over the
    csgs (a union's rank read from a table, or found by binary search): the unions
    ascending, each one's left sides in the order they were found — checked against
    Python's stable sort by union."""
    import numpy as np

    from reopt.costmodel import ccp

    if not ccp.AVAILABLE:  # pragma: no cover
        pytest.fail("numba is a dependency: the compiled enumeration must be there")
    sets = st.integers(1, 2**n - 1)
    csgs = sorted(data.draw(st.sets(sets, min_size=1, max_size=30)))
    pairs = data.draw(st.lists(st.tuples(st.sampled_from(csgs), sets), max_size=80))
    unions, bounds, lefts = ccp._grouped(np.asarray(csgs, dtype=np.int64),
                                         np.asarray([u for u, _ in pairs], dtype=np.int64),
                                         np.asarray([x for _, x in pairs], dtype=np.int64),
                                         n, dense and n <= 17)
    cuts = bounds.tolist()
    got = [(u, x) for i, u in enumerate(unions.tolist())
           for x in lefts[cuts[i]:cuts[i + 1]].tolist()]
    assert got == sorted(pairs, key=lambda p: p[0])
    assert len(cuts) == len(set(unions.tolist())) + 1 == len({u for u, _ in pairs}) + 1


@settings(max_examples=100, deadline=None)
@given(n=st.sampled_from([2, 7, 17, 31, 32, 45]), data=st.data())
def test_pairs_are_ordered_by_union_then_left_as_a_lexsort_orders_them(n, data):
    """Splits in both orders (:meth:`JoinGraph.flat_lefts`) are grouped by union with one
    sort of the pair packed into one number where both fit (2n bits), else by a lexsort: the
    same order either way, checked against Python's sort of the (union, left) pairs."""
    import numpy as np

    from reopt.costmodel.joingraph import _by_union

    sets = st.integers(1, 2**n - 1)
    pairs = data.draw(st.lists(st.tuples(sets, sets), unique=True, max_size=60))
    pairs = [(u | lft, lft) for u, lft in pairs]
    pairs = list(dict.fromkeys(pairs))  # (distinct, as the enumeration's)
    union = np.asarray([u for u, _ in pairs], dtype=np.int64)
    left = np.asarray([lft for _, lft in pairs], dtype=np.int64)
    got_union, got_left = _by_union(union, left, n)
    assert list(zip(got_union.tolist(), got_left.tolist(), strict=True)) == sorted(pairs)


@settings(max_examples=60, deadline=None)
@given(shape=st.sampled_from(["chain", "star", "cycle", "clique", "random"]),
       n=st.integers(2, 9), seed=st.integers(0, 2**31))
def test_dpccp_baseline_finds_the_cout_optimum(shape, n, seed):
    """The benchmark's plain DPccp (its own enumeration, breadth-first numbering) and
    reopt's bottom-up optimizer agree on the C_out optimum and on the pair count."""
    q, cat = make_query(shape, n, seed, final=False)
    space = PlanSpace(q, cat, cost_model("cout"))
    if len(space.components) > 1:
        return
    est = space.estimator
    edges = [(q.index(p.left.alias), q.index(p.right.alias), est.join_selectivity(p))
             for p in q.joins]
    cost, pairs = dpccp_cout(q.n, edges, [est.leaf_card(a) for a in q.aliases],
                             [est.base_rows(a) for a in q.aliases])
    assert pairs == space.graph.pair_count
    assert math.isclose(cost, bottomup(space).cost, rel_tol=1e-9)


def test_plan_space_joins_are_the_pairs_once_under_cout():
    """The graph's splits come in both orders; C_out is symmetric, so its join alternatives
    are the splits whose left side holds the expression's lowest relation: each pair once."""
    q, cat = plain_query("star", 7)
    space = PlanSpace(q, cat, cost_model("cout"))
    for e in space.expressions():
        splits = space.splits(e)
        assert {(r, lft) for lft, r in splits} == set(splits)
        low = e & -e
        assert [a.left for a in space.join_alternatives(e, "any", "join")] == [
            lft for lft, _ in splits if lft & low]
        assert 2 * len(space.join_alternatives(e, "any", "join")) == len(splits)


@pytest.mark.parametrize("max_pairs", [1, 50, 1000])
def test_the_pair_budget_is_checked_before_any_search(max_pairs):
    """pairs_within stops early above the budget (the sets it examined stay under
    2 · budget + n) and, within it, keeps the enumeration for the optimizer that follows."""
    n = 14
    jg = graph(n, shape_edges("clique", 10) + [(i, i + 1) for i in range(9, n - 1)])
    got = jg.pairs_within(max_pairs)
    assert got is None and jg.examined == 0 and jg._halves is None and jg._lefts is None
    jg._budget = None
    full = graph(n, shape_edges("clique", 10) + [(i, i + 1) for i in range(9, n - 1)])
    assert full.pairs_within(10**9) == full.pair_count > max_pairs
    examined = full.examined
    full.lefts()
    assert full.examined == examined  # not enumerated twice


def test_the_pair_budget_on_the_cli_and_api():
    from reopt.api import Optimizer
    from reopt.costmodel.errors import OptimizerError

    with pytest.raises(OptimizerError, match="more than 67 csg-cmp pairs.*--max-pairs 67"):
        Optimizer("tpch:q5", optimizer="topdown", max_pairs=67).optimize()
    assert Optimizer("tpch:q5", optimizer="topdown", max_pairs=68).optimize().cost > 0
    with pytest.raises(ReoptError, match="max_pairs must be a positive integer"):
        Optimizer("tpch:q5", optimizer="topdown", max_pairs=0)
