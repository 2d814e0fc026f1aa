"""The benchmark workload generator (``benchmarks/workload.py``): deterministic for a seed and
independent of hash order; every query goes through reopt's own front-end; its join graph has
the shape it claims; its pair and csg counts equal a brute-force count; its statistics are
consistent (row range, keys); every delta step is accepted; the files its command line writes
are read by ``reopt optimize``. Properties are checked on the parsed ``Query`` and the catalog,
never against numbers copied from the generator's output."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import subprocess
import sys
from collections import Counter
from itertools import combinations
from pathlib import Path

import pytest

from reopt.costmodel.cardinality import Adjustments
from reopt.costmodel.deltas import apply_deltas, parse_deltas
from reopt.costmodel.models import cost_model
from reopt.costmodel.query import Query

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
workload = importlib.import_module("workload")
harness = importlib.import_module("harness")

BIN = ROOT / ".venv" / "bin"
FACTORS = {0.125, 0.25, 0.5, 2.0, 4.0, 8.0}
SMALL = 10
"""The largest queries the brute-force pair count is run on (3^10 subset pairs)."""


@pytest.fixture(scope="module")
def small():
    """A mix of every shape, small enough for the brute-force oracle."""
    return workload.generate(11, 25, max_relations=SMALL)


@pytest.fixture(scope="module")
def large():
    return workload.large_queries(seed=0)


# -- the join graph, read from the parsed query ---------------------------------------------

def edges(q: Query) -> set[tuple[int, int]]:
    return {tuple(sorted((q.index(p.left.alias), q.index(p.right.alias)))) for p in q.joins}


def adjacency(q: Query) -> list[set[int]]:
    adj: list[set[int]] = [set() for _ in range(q.n)]
    for a, b in edges(q):
        adj[a].add(b)
        adj[b].add(a)
    return adj


def distances(adj: list[set[int]], start: int) -> dict[int, int]:
    dist, frontier = {start: 0}, [start]
    while frontier:
        nxt = []
        for i in frontier:
            for j in sorted(adj[i] - dist.keys()):
                dist[j] = dist[i] + 1
                nxt.append(j)
        frontier = nxt
    return dist


def connected(adj: list[set[int]], members: set[int]) -> bool:
    if not members:
        return False
    seen, todo = set(), [min(members)]
    while todo:
        i = todo.pop()
        if i not in seen:
            seen.add(i)
            todo.extend(adj[i] & members)
    return seen == members


def brute_force_counts(q: Query) -> tuple[int, int]:
    """(csg-cmp pairs, connected subsets) by scanning every subset: a pair is an unordered
    split of a connected subset into two connected halves joined by some predicate (the half
    holding the lowest relation counted first, so each split once)."""
    n = q.n
    adj = adjacency(q)
    nb = [sum(1 << j for j in adj[i]) for i in range(n)]
    conn = [connected(adj, {i for i in range(n) if m >> i & 1}) for m in range(1 << n)]
    reach = [0] * (1 << n)
    for m in range(1, 1 << n):
        low = (m & -m).bit_length() - 1
        reach[m] = reach[m & (m - 1)] | nb[low]
    pairs = csgs = 0
    for s in range(1, 1 << n):
        if not conn[s]:
            continue
        csgs += 1
        low = s & -s
        sub = (s - 1) & s
        while sub:
            rest = s ^ sub
            if sub & low and conn[sub] and conn[rest] and reach[sub] & rest:
                pairs += 1
            sub = (sub - 1) & s
    return pairs, csgs


# -- determinism ----------------------------------------------------------------------------

def test_same_seed_same_queries_other_seed_other_queries():
    a = workload.generate(7, 6, max_relations=9)
    assert a == workload.generate(7, 6, max_relations=9)
    assert workload.generate(7, 3, max_relations=9) == a[:3]  # query i depends on seed and i
    b = workload.generate(8, 6, max_relations=9)
    assert [q.sql for q in a] != [q.sql for q in b]
    assert [q.catalog for q in a] != [q.catalog for q in b]
    assert len({q.name for q in a + b}) == 12


DIGEST = """
import hashlib, json, sys
sys.path.insert(0, sys.argv[1])
import workload
qs = workload.generate(3, 10, max_relations=8) + workload.large_queries(seed=2)
print(hashlib.sha256(json.dumps([q.__dict__ for q in qs]).encode()).hexdigest())
"""


def test_no_dependence_on_hash_order():
    """Other string-hash seeds in other processes: the same queries, the same as here."""
    here = workload.generate(3, 10, max_relations=8) + workload.large_queries(seed=2)
    expected = hashlib.sha256(json.dumps([q.__dict__ for q in here]).encode()).hexdigest()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run([sys.executable, "-c", DIGEST, str(BENCH)], env=env, text=True,
                             capture_output=True, stdin=subprocess.DEVNULL, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == expected


# -- the front-end reads every query; counts; shapes ------------------------------------------

def test_every_query_parses_and_its_catalog_loads(small, large):
    for wq in small + large:
        q, catalog = wq.load()
        assert q.n == wq.relations and q.name == wq.name
        assert {r.table for r in q.relations} == set(catalog.tables)
        assert len({r.table for r in q.relations}) == q.n  # a table per relation
        assert connected(adjacency(q), set(range(q.n)))
        assert json.loads(json.dumps(wq.catalog)) == wq.catalog  # JSON as written


def test_relation_counts_and_shapes_as_asked(small):
    assert all(4 <= wq.relations <= SMALL for wq in small)
    assert [wq.shape for wq in small[:5]] == list(workload.SHAPES)
    only = workload.generate(1, 4, shapes=("star",), min_relations=6, max_relations=7)
    assert {wq.shape for wq in only} == {"star"}
    assert all(6 <= wq.relations <= 7 for wq in only)


def test_pair_and_csg_counts_equal_a_brute_force_count(small):
    for wq in small:
        assert (wq.pairs, wq.csgs) == brute_force_counts(wq.load()[0]), wq.name


def check_chain(q: Query) -> None:
    adj = adjacency(q)
    assert len(edges(q)) == q.n - 1
    assert max(len(a) for a in adj) == 2


def check_star(q: Query) -> None:
    degrees = sorted(len(a) for a in adjacency(q))
    assert len(edges(q)) == q.n - 1
    assert degrees == [1] * (q.n - 1) + [q.n - 1]  # one hub, every other joined to it only


def check_snowflake(q: Query) -> None:
    """A tree with a hub of two or more dimensions, every relation at most three joins away
    from it, some at least two (sub-dimensions)."""
    adj = adjacency(q)
    assert len(edges(q)) == q.n - 1
    hubs = []
    for c in range(q.n):
        far = max(distances(adj, c).values())
        if len(adj[c]) >= 2 and 2 <= far <= 3:
            hubs.append(c)
    assert hubs


def check_tree(q: Query) -> None:
    assert q.n <= len(edges(q)) <= q.n + 2  # a spanning tree plus 1-3 edges


def fact_clique(q: Query) -> tuple[set[str], set[str]]:
    """The relations joined on a same-named column, and those columns' names."""
    same = [p for p in q.joins if p.left.column == p.right.column]
    return ({r.alias for p in same for r in (p.left, p.right)},
            {p.left.column for p in same})


def check_clique(q: Query) -> None:
    facts, columns = fact_clique(q)
    assert 4 <= len(facts) <= 6
    assert len(columns) == 1  # ONE shared key, one equivalence class
    (key,) = columns
    joined = {frozenset((p.left.alias, p.right.alias)) for p in q.joins
              if p.left.column == p.right.column == key}
    assert joined == {frozenset(pair) for pair in combinations(facts, 2)}
    # the other relations hang off the facts through foreign keys to their primary key
    for p in q.joins:
        if p.left.column != p.right.column:
            assert "id" in (p.left.column, p.right.column)


SHAPE_CHECKS = {"chain": check_chain, "star": check_star, "snowflake": check_snowflake,
                "tree": check_tree, "clique": check_clique}


def test_shapes_are_what_they_claim(small, large):
    for wq in small + large:
        SHAPE_CHECKS[wq.shape](wq.load()[0])


def test_a_shape_check_can_fail():
    """The checks reject the wrong shape (a star is no chain, a chain no clique)."""
    star = next(wq for wq in workload.generate(2, 5, min_relations=6, max_relations=6)
                if wq.shape == "star").load()[0]
    with pytest.raises(AssertionError):
        check_chain(star)
    with pytest.raises(AssertionError):
        check_clique(star)


def test_large_queries(large):
    by_name = {wq.name: wq for wq in large}
    cliques = [wq for wq in large if wq.shape == "clique"]
    assert {wq.relations for wq in cliques} >= {14, 17}
    for wq in cliques:
        facts, _ = fact_clique(wq.load()[0])
        assert len(facts) == 6
        assert 100_000 <= wq.pairs <= 250_000, (wq.name, wq.pairs)
        q = wq.load()[0]
        depth = distances(adjacency(q), q.index(sorted(facts)[0]))
        assert max(depth.values()) >= 3  # a dimension chain: two joins beyond a fact
    assert any(wq.shape == "snowflake" and wq.relations == 18 for wq in large)
    assert any(wq.shape in ("chain", "tree") and wq.relations == 18 for wq in large)
    # fixed join graphs: another seed changes statistics and deltas only
    other = {wq.name: wq for wq in workload.large_queries(seed=1)}
    assert other.keys() == by_name.keys()
    for name, wq in by_name.items():
        assert edges(other[name].load()[0]) == edges(wq.load()[0])
        assert other[name].pairs == wq.pairs
    assert [wq.catalog for wq in other.values()] != [wq.catalog for wq in large]


# -- statistics --------------------------------------------------------------------------------

def test_statistics_are_consistent(small, large):
    for wq in small + large:
        q, catalog = wq.load()
        for r in q.relations:
            t = catalog.table(r.table)
            assert 4 <= t.rows <= 40_000_000
            assert t.columns["id"].distinct == t.rows  # primary key
            for c in t.columns.values():
                assert c.distinct is None or 1 <= c.distinct <= t.rows
            assert set(t.indexes) <= set(t.columns)
        for p in q.joins:
            if "id" not in (p.left.column, p.right.column) or p.left.column == p.right.column:
                continue
            fk, pk = (p.left, p.right) if p.right.column == "id" else (p.right, p.left)
            referenced = catalog.table(q.table_of(pk.alias)).rows
            fk_table = catalog.table(q.table_of(fk.alias))
            assert fk_table.columns[fk.column].distinct <= min(fk_table.rows, referenced)


def test_the_workload_has_what_the_io_model_uses(small, large):
    """Across the workload: filters of each kind, skewed rows, indexes, sort orders,
    histograms, and queries with and without a final operator."""
    queries = [wq.load() for wq in small + large]
    rows = [c.table(r.table).rows for q, c in queries for r in q.relations]
    assert max(rows) / min(rows) > 1000
    filters = Counter(type(f).__name__ for q, _ in queries for f in q.filters)
    assert {"Compare", "Between", "InList"} <= filters.keys()
    tables = [t for _, c in queries for t in c.tables.values()]
    assert any(t.indexes for t in tables) and any(not t.indexes for t in tables)
    assert any(t.sorted_on for t in tables) and any(not t.sorted_on for t in tables)
    assert any(col.histogram for t in tables for col in t.columns.values())
    finals = [q.has_final for q, _ in queries]
    assert any(finals) and not all(finals)
    assert any(q.group_by for q, _ in queries)


# -- deltas -------------------------------------------------------------------------------------

def test_every_delta_step_is_accepted_for_its_query(small, large):
    operators = cost_model("io").operators
    kinds = Counter()
    for wq in small + large:
        q, catalog = wq.load()
        adj = adjacency(q)
        assert len(wq.deltas) == 8
        state = Adjustments()
        for step in wq.deltas:
            assert "\n" not in step
            deltas = parse_deltas(step)
            state = apply_deltas(deltas, q, catalog, state, operators)
            for d in deltas:
                assert (d.kind, d.op) == ("card", "*") and d.value in FACTORS
                if d.target.startswith("{"):
                    members = {q.index(a) for a in d.target[1:-1].split(",")}
                    assert 2 <= len(members) <= 5 and connected(adj, members)
                    kinds["set"] += 1
                else:
                    assert d.target in q.aliases
                    kinds["relation"] += 1
    assert kinds["set"] and kinds["relation"]


def test_steps_option():
    (wq,) = workload.generate(5, 1, steps=3, max_relations=6)
    assert len(wq.deltas) == 3


@pytest.mark.parametrize("kwargs", [
    {"shapes": ("ring",)}, {"shapes": ()}, {"min_relations": 3}, {"max_relations": 19},
    {"min_relations": 9, "max_relations": 8}, {"steps": -1},
])
def test_bad_generator_options_are_value_errors(kwargs):
    with pytest.raises(ValueError):
        workload.generate(0, 1, **kwargs)


# -- the command line ----------------------------------------------------------------------------

def test_command_line_files_are_read_by_reopt(tmp_path):
    out = tmp_path / "w"
    gen = subprocess.run(
        [sys.executable, str(BENCH / "workload.py"), "-o", str(out), "--seed", "5",
         "--count", "2", "--min-relations", "5", "--max-relations", "6",
         "--shapes", "clique,tree"],
        text=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=120)
    assert gen.returncode == 0, gen.stderr
    index = json.loads((out / "index.json").read_text())
    expected = workload.generate(5, 2, shapes=("clique", "tree"), min_relations=5,
                                 max_relations=6)
    assert [e["name"] for e in index] == [wq.name for wq in expected]
    for entry, wq in zip(index, expected, strict=True):
        assert (entry["shape"], entry["relations"], entry["pairs"], entry["csgs"]) == (
            wq.shape, wq.relations, wq.pairs, wq.csgs)
        assert (out / entry["files"]["sql"]).read_text() == wq.sql
        assert json.loads((out / entry["files"]["catalog"]).read_text()) == wq.catalog
        assert (out / entry["files"]["deltas"]).read_text().splitlines() == wq.deltas
    first = index[0]
    delta = (out / first["files"]["deltas"]).read_text().splitlines()[0]
    run = subprocess.run(
        [str(BIN / "reopt"), "optimize", str(out / first["files"]["sql"]),
         "--catalog", str(out / first["files"]["catalog"]), "--optimizer", "topdown",
         "--cost-model", "cout", "--json", "--delta", delta],
        text=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=120)
    assert run.returncode == 0, run.stderr
    (result,) = json.loads(run.stdout)["queries"]
    assert result["query"] == first["name"]
    assert len(result["initial"]["plan"]["relations"]) == first["relations"]
    assert [s["deltas"] for s in result["steps"]] == [[d.strip() for d in delta.split(";")]]


def test_command_line_large_set(tmp_path, capsys):
    assert harness.script(workload.main, ["-o", str(tmp_path), "--large", "--steps", "2"]) == 0
    index = json.loads((tmp_path / "index.json").read_text())
    assert [e["name"] for e in index] == list(workload.LARGE)
    assert all(len((tmp_path / e["files"]["deltas"]).read_text().splitlines()) == 2
               for e in index)


@pytest.mark.parametrize("argv", [
    [], ["--count", "0"], ["--shapes", "ring"], ["--shapes", "chain,chain"],
    ["--min-relations", "9", "--max-relations", "5"], ["--max-relations", "30"],
    ["--min-relations", "2"], ["--large", "--count", "3"], ["--seed", "x"],
])
def test_bad_arguments_are_one_line_exit_2(tmp_path, capsys, argv):
    if argv:
        argv = ["-o", str(tmp_path / "out"), *argv]
    assert harness.script(workload.main, argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("reopt: ") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_output_path_that_is_a_file_is_refused(tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("")
    assert harness.script(workload.main, ["-o", str(f)]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_shapes_are_taken_in_a_fixed_order():
    """As ``--shapes`` takes them: the order they are named in does not matter."""
    assert workload.generate(4, 3, shapes=("tree", "chain"), max_relations=6) == \
        workload.generate(4, 3, shapes=("chain", "tree"), max_relations=6)
