"""A seeded generator of large, realistic join queries: the workload every benchmark shares.

Run: ``.venv/bin/python benchmarks/workload.py -o DIR [--seed S] [--count N]
[--min-relations A] [--max-relations B] [--shapes chain,star,...] [--steps K] [--large]``
writes, per query, ``DIR/<name>.sql``, ``DIR/<name>.catalog.json`` and ``DIR/<name>.deltas.txt``
(one ``--delta`` step a line), and ``DIR/index.json`` (``[{name, shape, relations, pairs, csgs,
files}]``). ``reopt optimize DIR/<name>.sql --catalog DIR/<name>.catalog.json --delta "<line>"``
reads them. ``--large`` writes the fixed set of :func:`large_queries` instead of generated ones.
From Python: :func:`generate` and :func:`large_queries` return :class:`WorkloadQuery` values;
``wq.load()`` parses one through reopt's own front-end into ``(Query, Catalog)``, from which
``PlanSpace(query, catalog, cost_model("io"))`` builds the search space directly.

Why each choice:

* **Shapes** are the join graphs real workloads have: ``chain`` (a path, e.g. lineitem–orders–
  customer–nation–region), ``star`` (one fact table, every dimension joined to it),
  ``snowflake`` (a star whose dimensions have sub-dimensions one or two levels deep),
  ``tree`` (a random tree plus 1–3 extra edges, so cycles, as when a table references two
  tables that already join) and ``clique``: 4–6 fact tables joined pairwise on ONE shared key
  (JOB's movie_id, an order id shared by order lines, shipments and returns), which makes a
  clique of the join graph and one join-column equivalence class, with dimension chains
  hanging off the facts; some dimensions are *conformed* (also referenced by a second fact),
  which closes cycles through the clique as in TPC-DS's multi-fact queries. The clique shape
  is the one whose search space explodes (csg-cmp pairs), the others bracket it: a chain has
  the fewest pairs for its size, a star the most among trees.
* **Relations are numbered in FROM order** and the join graph of the SQL is exactly the
  generated one (checked when generating), so ``pairs`` and ``csgs`` — counted by
  :class:`reopt.costmodel.joingraph.JoinGraph`, the optimizers' own enumeration — are those of
  the plan space the optimizers search.
* **Each relation has its own table** (names unique per query: ``fact0``, ``dim4``, ``sub9`` by
  depth below the fact tables; aliases ``f0``, ``d4``, ``s9`` carry the FROM position), so a
  delta on an alias and one on its table mean the same thing and no table is ambiguous.
* **Row counts** are drawn log-uniformly in [4, 40 million] — the skew of real schemas, from a
  region table to a fact table — and then handed out by depth: the largest to the fact tables,
  the smallest to the deepest sub-dimensions, as in real snowflakes (the marginal distribution
  stays log-uniform).
* **Keys are consistent**: every table's ``id`` has ``distinct = rows``; a referencing table
  holds a foreign key ``<table>_id`` to the shallower-to-deeper neighbour (fact → dimension →
  sub-dimension; on an extra edge the shallower side references the deeper), whose distinct
  count is a share (30–100%) of ``min(rows of its table, rows of the referenced table)``;
  a fact clique's shared key has, per fact, a share of ``min(rows, key domain)``. Join
  selectivities ``1/max(distinct)`` are thus those of real foreign-key joins.
* **Filters** are selective and of the kinds the estimator models: equality or ``IN`` on a
  low-cardinality ``kind`` column, ranges on a numeric ``amount`` (with a skewed equi-depth
  histogram on some tables, so estimation is not always linear) and on a date ``day`` column;
  dimensions are filtered more often than facts, as in real queries. Some tables have
  ``indexes`` and a ``sorted_on`` column, which the ``io`` model's index scans, index
  nested-loop joins and sort-merge joins use. A third of the queries end in a GROUP BY (some
  with ORDER BY), some in a plain aggregate, so the ``io`` model's final operator runs too.
* **Deltas** are what an executor reports: ``card {A,B,…} *F`` on a random *connected* set of
  2–5 aliases (an intermediate result the plan may actually build) and ``card A *F`` on a base
  relation, factors 1/8 … 8 (the paper's); a quarter of the steps batch two deltas. Every step
  is checked with the project's own ``parse_deltas`` and ``apply_deltas`` (cumulatively).
* **Deterministic**: one ``random.Random(seed)`` draws a 64-bit seed per query, and each query
  is drawn from its own ``random.Random`` — so ``generate(s, 5)[:3] == generate(s, 3)`` — and no
  draw depends on hash order (lists are ordered, sets are sorted before choosing).
  Query ``i`` has shape ``shapes[i % len(shapes)]`` (a balanced mix; shapes in the order of
  ``SHAPES``) and a relation count drawn uniformly in ``[min_relations, max_relations]``;
  names are ``<shape>-<n>-s<seed>-<i>``.
* **At most 18 relations**: a star of 18 already has 1.1 million csg-cmp pairs (counting them
  takes seconds); larger queries would measure the pair enumeration, not the optimizers.
* :func:`large_queries` has FIXED join graphs (the seed changes statistics and deltas only),
  so benchmark results stay comparable across seeds: a 14- and a 17-relation query with a
  6-fact clique, dimension chains and conformed dimensions (pairs tuned to the order of the
  222,882 csg-cmp pairs of a real 17-relation query this project measured), an 18-relation
  snowflake, an 18-relation chain and an 18-relation tree with cycles.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import parser, script

from reopt.cliargs import name_list, positive_int
from reopt.costmodel.cardinality import Adjustments
from reopt.costmodel.catalog import Catalog
from reopt.costmodel.deltas import apply_deltas, parse_deltas
from reopt.costmodel.joingraph import JoinGraph
from reopt.costmodel.models import cost_model
from reopt.costmodel.query import Query
from reopt.costmodel.sql import parse_query

SHAPES = ("chain", "star", "snowflake", "tree", "clique")
MIN_RELATIONS = 4
MAX_RELATIONS = 18
MIN_ROWS = 4
MAX_ROWS = 40_000_000
FACTORS = (0.125, 0.25, 0.5, 2.0, 4.0, 8.0)
"""The paper's change factors 1/8 … 8."""
KEY_NAMES = ("movie_id", "order_id", "item_id", "customer_id", "session_id")
"""Names of a fact clique's shared key (cosmetic)."""
ROLES = ("fact", "dim", "sub")
"""Table-name prefix by depth below the fact tables (0, 1, 2 and deeper)."""
FIRST_DAY = dt.date(2015, 1, 1)
DAYS = 3653
"""The ``day`` columns span 2015-01-01 … 2024-12-31."""


# -- the join graph -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Link:
    """One join predicate between relations ``src`` and ``dst`` (FROM positions): ``src``'s
    foreign key ``<table of dst>_id = dst.id``, or, with ``key``, a fact clique's shared key
    ``src.<key> = dst.<key>``."""

    src: int
    dst: int
    key: bool = False


@dataclass(frozen=True)
class Skeleton:
    """A query's join graph before statistics: each relation's depth below the fact tables
    (0 = fact) and the join predicates."""

    shape: str
    depth: tuple[int, ...]
    links: tuple[Link, ...]

    @property
    def n(self) -> int:
        return len(self.depth)

    def neighbors(self) -> list[int]:
        """``neighbors[i]``: the bitset of relations joined with relation ``i``."""
        out = [0] * self.n
        for ln in self.links:
            out[ln.src] |= 1 << ln.dst
            out[ln.dst] |= 1 << ln.src
        return out


def tree_skeleton(shape: str, parents: Sequence[int],
                  extra: Sequence[tuple[int, int]] = ()) -> Skeleton:
    """A tree rooted at the relation whose parent is ``-1`` (the fact table), each parent
    referencing its children, plus ``extra`` edges, where the shallower side references the
    deeper one (by position on a tie)."""
    depth = [-1] * len(parents)

    def depth_of(i: int) -> int:
        if depth[i] < 0:
            depth[i] = 0 if parents[i] < 0 else depth_of(parents[i]) + 1
        return depth[i]

    for i in range(len(parents)):
        depth_of(i)
    links = [Link(p, i) for i, p in enumerate(parents) if p >= 0]
    for u, v in extra:
        src, dst = sorted((u, v), key=lambda r: (depth[r], r))
        links.append(Link(src, dst))
    return Skeleton(shape, tuple(depth), tuple(links))


def chain_skeleton(n: int, root: int) -> Skeleton:
    """A path ``0 – 1 – … – n-1`` whose fact table is ``root``."""
    parents = [i + 1 if i < root else i - 1 for i in range(n)]
    parents[root] = -1
    return tree_skeleton("chain", parents)


def clique_skeleton(facts: int, chains: Sequence[tuple[int, int]],
                    conformed: Sequence[tuple[int, int]] = ()) -> Skeleton:
    """``facts`` fact tables joined pairwise on one key; each ``(fact, length)`` of ``chains``
    hangs a dimension chain of that length off that fact; each ``(fact, c)`` of ``conformed``
    makes ``fact`` also reference the first dimension of chain ``c``."""
    depth = [0] * facts
    links = [Link(a, b, key=True) for a in range(facts) for b in range(a + 1, facts)]
    heads = []
    for fact, length in chains:
        prev = fact
        heads.append(len(depth))
        for level in range(1, length + 1):
            links.append(Link(prev, len(depth)))
            prev = len(depth)
            depth.append(level)
    links += [Link(fact, heads[c]) for fact, c in conformed]
    return Skeleton("clique", tuple(depth), tuple(links))


def _draw_chain(rng: random.Random, n: int) -> Skeleton:
    return chain_skeleton(n, rng.randrange(n))


def _draw_star(rng: random.Random, n: int) -> Skeleton:
    return tree_skeleton("star", [-1] + [0] * (n - 1))


def _draw_snowflake(rng: random.Random, n: int) -> Skeleton:
    """A hub, 2… dimensions, and at least one sub-dimension, each under a dimension (level 1)
    or under a level-1 sub-dimension (level 2)."""
    dims = rng.randint(max(2, math.ceil((n - 1) / 3)), n - 2)
    parents = [-1] + [0] * dims
    level1 = []
    for i in range(dims + 1, n):
        p = rng.choice(list(range(1, dims + 1)) + level1)
        if p <= dims:
            level1.append(i)
        parents.append(p)
    return tree_skeleton("snowflake", parents)


def _draw_tree(rng: random.Random, n: int) -> Skeleton:
    """A random recursive tree (each relation joins a random earlier one) plus 1–3 edges."""
    parents = [-1] + [rng.randrange(i) for i in range(1, n)]
    tree = {(p, i) for i, p in enumerate(parents) if p >= 0}
    absent = [(a, b) for a in range(n) for b in range(a + 1, n) if (a, b) not in tree]
    extra = rng.sample(absent, min(len(absent), rng.randint(1, 3)))
    return tree_skeleton("tree", parents, extra)


def _draw_clique(rng: random.Random, n: int) -> Skeleton:
    """4–6 facts; the other relations in dimension chains of 1–3 off random facts; up to two
    chain heads conformed (referenced by a second fact)."""
    facts = rng.randint(4, min(6, n))
    chains = []
    left = n - facts
    while left:
        length = rng.randint(1, min(3, left))
        chains.append((rng.randrange(facts), length))
        left -= length
    conformed = []
    for c in rng.sample(range(len(chains)), min(len(chains), rng.randint(0, 2))):
        others = [f for f in range(facts) if f != chains[c][0]]
        conformed.append((rng.choice(others), c))
    return clique_skeleton(facts, chains, conformed)


DRAW = {"chain": _draw_chain, "star": _draw_star, "snowflake": _draw_snowflake,
        "tree": _draw_tree, "clique": _draw_clique}


# -- statistics -------------------------------------------------------------------------------

@dataclass
class _Table:
    """One relation's table while it is built: catalog entry and the SQL of its filters."""

    name: str
    alias: str
    rows: int
    columns: dict[str, dict[str, Any]] = field(default_factory=dict)
    filters: list[str] = field(default_factory=list)

    def entry(self, indexes: list[str], sorted_on: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {"rows": self.rows, "columns": self.columns}
        if indexes:
            out["indexes"] = indexes
        if sorted_on:
            out["sorted_on"] = sorted_on
        return out


def _day(offset: int) -> str:
    return (FIRST_DAY + dt.timedelta(days=offset)).isoformat()


def _rows(rng: random.Random, depth: Sequence[int]) -> list[int]:
    """Log-uniform row counts, the largest to the shallowest relations (ties at random)."""
    lo, hi = math.log(MIN_ROWS), math.log(MAX_ROWS)
    draws = sorted((round(math.exp(rng.uniform(lo, hi))) for _ in depth), reverse=True)
    ties = [rng.random() for _ in depth]
    rows = [0] * len(depth)
    for r, i in zip(draws, sorted(range(len(depth)), key=lambda i: (depth[i], ties[i])),
                    strict=True):
        rows[i] = min(MAX_ROWS, max(MIN_ROWS, r))
    return rows


def _share(rng: random.Random, n: float, low: float) -> int:
    """A distinct count: a random share between ``low`` and 1 of ``n`` values, at least 1."""
    return max(1, round(n * rng.uniform(low, 1.0)))


def _histogram(rng: random.Random, rows: int, hi: float) -> dict[str, list]:
    """A skewed equi-depth histogram over ``[0, hi]``: bucket widths grow as a power, so most
    rows hold small amounts."""
    buckets = min(rows, rng.randint(4, 10))
    power = rng.uniform(1.5, 3.0)
    bounds = [round(hi * (j / buckets) ** power, 2) for j in range(buckets + 1)]
    each, extra = divmod(rows, buckets)
    return {"bounds": bounds, "counts": [each + (j < extra) for j in range(buckets)]}


def _plain_columns(rng: random.Random, t: _Table) -> None:
    """``id`` (the primary key), ``kind`` (low cardinality), ``amount`` (numeric), ``day``
    (dates) and ``name`` (no statistics)."""
    t.columns["id"] = {"distinct": t.rows, "min": 1, "max": t.rows}
    kinds = min(t.rows, rng.randint(2, 60))
    t.columns["kind"] = {"distinct": kinds, "min": 1, "max": kinds}
    hi = round(10 ** rng.uniform(2, 6), 2)
    amount: dict[str, Any] = {"distinct": _share(rng, t.rows, 0.1), "min": 0, "max": hi}
    if rng.random() < 0.3:
        amount["histogram"] = _histogram(rng, t.rows, hi)
    t.columns["amount"] = amount
    t.columns["day"] = {"distinct": min(t.rows, DAYS), "min": _day(0), "max": _day(DAYS - 1)}
    t.columns["name"] = {}


def _filter(rng: random.Random, t: _Table) -> str:
    """One selective single-table condition on ``t``."""
    a, pick = t.alias, rng.random()
    kinds = t.columns["kind"]["distinct"]
    if pick < 0.3:
        return f"{a}.kind = {rng.randint(1, kinds)}"
    if pick < 0.4 and kinds >= 3:
        values = sorted(rng.sample(range(1, kinds + 1), rng.randint(2, min(4, kinds - 1))))
        return f"{a}.kind IN ({', '.join(map(str, values))})"
    if pick < 0.7:
        hi = t.columns["amount"]["max"]
        x = round(hi * rng.uniform(0.01, 0.3), 2)
        if rng.random() < 0.5:
            return f"{a}.amount < {x}"
        return f"{a}.amount BETWEEN {x} AND {round(x + hi * rng.uniform(0.01, 0.2), 2)}"
    start = rng.randrange(DAYS - 30)
    if rng.random() < 0.5:
        return f"{a}.day >= '{_day(max(start, DAYS - 400))}'"
    end = min(DAYS - 1, start + rng.randint(7, 365))
    return f"{a}.day BETWEEN '{_day(start)}' AND '{_day(end)}'"


def _physical(rng: random.Random, t: _Table) -> tuple[list[str], str | None]:
    """Indexes (the key often, each other join column and filter column sometimes) and, on
    some tables, the column they are stored sorted by."""
    joins = [c for c in t.columns if c.endswith("_id")]
    indexes = [c for c, p in [("id", 0.6)] + [(c, 0.35) for c in joins]
               + [("kind", 0.2), ("amount", 0.2), ("day", 0.3)] if rng.random() < p]
    sorted_on = rng.choice(["id", "day", *joins]) if rng.random() < 0.4 else None
    return indexes, sorted_on


def _tables(rng: random.Random, sk: Skeleton, key: str) -> list[_Table]:
    """Every relation's table: columns with consistent key statistics, filters, indexes."""
    rows = _rows(rng, sk.depth)
    out = []
    for i, d in enumerate(sk.depth):
        role = ROLES[min(d, len(ROLES) - 1)]
        t = _Table(f"{role}{i}", f"{role[0]}{i}", rows[i])
        _plain_columns(rng, t)
        out.append(t)
    fact_rows = [rows[i] for i, d in enumerate(sk.depth) if d == 0]
    domain = _share(rng, min(fact_rows), 0.2)
    for ln in sk.links:
        src, dst = out[ln.src], out[ln.dst]
        if ln.key:
            for t in (src, dst):
                if key not in t.columns:
                    t.columns[key] = {"distinct": _share(rng, min(t.rows, domain), 0.5),
                                      "min": 1, "max": domain}
        else:
            src.columns[f"{dst.name}_id"] = {
                "distinct": _share(rng, min(src.rows, dst.rows), 0.3), "min": 1, "max": dst.rows}
    for t, d in zip(out, sk.depth, strict=True):
        if rng.random() < (0.25 if d == 0 else 0.5):
            t.filters.append(_filter(rng, t))
            if rng.random() < 0.2:
                t.filters.append(_filter(rng, t))
    return out


# -- SQL and deltas -----------------------------------------------------------------------------

def _predicate(ln: Link, tables: Sequence[_Table], key: str) -> str:
    src, dst = tables[ln.src], tables[ln.dst]
    if ln.key:
        return f"{src.alias}.{key} = {dst.alias}.{key}"
    return f"{src.alias}.{dst.name}_id = {dst.alias}.id"


def _final(rng: random.Random, tables: Sequence[_Table]) -> tuple[str, str]:
    """The select list and what follows WHERE: a GROUP BY (a third of the queries, half of
    them ordered), a plain aggregate, or a projection (no final operator)."""
    pick = rng.random()
    if pick < 0.33:
        g = f"{rng.choice(tables).alias}.kind"
        tail = f"\nGROUP BY {g}" + (f"\nORDER BY {g}" if rng.random() < 0.5 else "")
        return f"{g}, COUNT(*) AS cnt", tail
    if pick < 0.5:
        return f"COUNT(*) AS cnt, MIN({rng.choice(tables).alias}.amount) AS smallest", ""
    shown = sorted(rng.sample(range(len(tables)), 2))
    return ", ".join(f"{tables[i].alias}.{c}" for i, c in zip(shown, ("id", "name"),
                                                               strict=True)), ""


def _sql(rng: random.Random, sk: Skeleton, tables: Sequence[_Table], key: str) -> str:
    select, tail = _final(rng, tables)
    conds = [_predicate(ln, tables, key) for ln in sk.links]
    conds += [f for t in tables for f in t.filters]
    return (f"SELECT {select}\nFROM "
            + ",\n     ".join(f"{t.name} AS {t.alias}" for t in tables)
            + "\nWHERE " + "\n  AND ".join(conds) + tail + "\n")


def _connected_set(rng: random.Random, neighbors: Sequence[int], size: int) -> list[int]:
    """A random connected set of ``size`` relations, grown from a random one."""
    members = {rng.randrange(len(neighbors))}
    while len(members) < size:
        frontier = sorted({j for i in members for j in range(len(neighbors))
                           if neighbors[i] >> j & 1} - members)
        members.add(rng.choice(frontier))
    return sorted(members)


def _delta(rng: random.Random, neighbors: Sequence[int], aliases: Sequence[str]) -> str:
    factor = f"{rng.choice(FACTORS):g}"
    if rng.random() < 0.6:
        size = rng.randint(2, min(5, len(aliases)))
        members = _connected_set(rng, neighbors, size)
        return f"card {{{','.join(aliases[i] for i in members)}}} *{factor}"
    return f"card {rng.choice(aliases)} *{factor}"


def _deltas(rng: random.Random, sk: Skeleton, aliases: Sequence[str], steps: int) -> list[str]:
    """``steps`` lines, each one ``--delta`` step: one delta, or two (``;``) in a quarter."""
    nb = sk.neighbors()
    return ["; ".join(_delta(rng, nb, aliases) for _ in range(2 if rng.random() < 0.25 else 1))
            for _ in range(steps)]


# -- the queries --------------------------------------------------------------------------------

@dataclass(frozen=True)
class WorkloadQuery:
    """One generated query: its SQL, its catalog (the JSON of README "Catalog format"), its
    delta steps (each a ``--delta`` argument) and the size of its plan space: ``pairs``
    (csg-cmp pairs) and ``csgs`` (connected subsets) of its join graph."""

    name: str
    shape: str
    relations: int
    sql: str
    catalog: dict[str, Any] = field(hash=False)
    deltas: list[str] = field(hash=False)
    pairs: int
    csgs: int

    def load(self) -> tuple[Query, Catalog]:
        """The query and catalog through reopt's front-end, as ``reopt optimize`` reads the
        files :func:`write` makes."""
        catalog = Catalog.from_dict(self.catalog, source=f"{self.name}.catalog.json")
        return parse_query(self.sql, catalog, name=self.name, source=f"{self.name}.sql"), catalog


def _edges(query: Query) -> set[tuple[int, int]]:
    return {tuple(sorted((query.index(p.left.alias), query.index(p.right.alias))))
            for p in query.joins}


def _check(wq: WorkloadQuery, sk: Skeleton) -> None:
    """What the front-end reads is what was generated: the join graph, and every delta step
    accepted (steps applied one after the other)."""
    query, catalog = wq.load()
    if _edges(query) != {tuple(sorted((ln.src, ln.dst))) for ln in sk.links}:
        raise RuntimeError(f"{wq.name}: the SQL's join graph is not the generated one")
    adj, operators = Adjustments(), cost_model("io").operators
    for step in wq.deltas:
        adj = apply_deltas(parse_deltas(step), query, catalog, adj, operators)


def build(name: str, sk: Skeleton, rng: random.Random, steps: int) -> WorkloadQuery:
    """Statistics, SQL and deltas for join graph ``sk``, drawn from ``rng``; checked."""
    key = rng.choice(KEY_NAMES)
    tables = _tables(rng, sk, key)
    catalog = {"tables": {t.name: t.entry(*_physical(rng, t)) for t in tables}}
    sql = _sql(rng, sk, tables, key)
    deltas = _deltas(rng, sk, [t.alias for t in tables], steps)
    graph = JoinGraph(sk.n, sk.neighbors())
    wq = WorkloadQuery(name, sk.shape, sk.n, sql, catalog, deltas, graph.pair_count,
                       len(graph.csgs()))
    _check(wq, sk)
    return wq


def _check_options(count: int, shapes: Sequence[str], low: int, high: int, steps: int) -> None:
    if count < 0 or steps < 0:
        raise ValueError(f"count and steps must be at least 0, got {count} and {steps}")
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown or not shapes:
        raise ValueError(f"unknown shape '{unknown[0] if unknown else ''}' "
                         f"(choose from {', '.join(SHAPES)})")
    if not MIN_RELATIONS <= low <= high <= MAX_RELATIONS:
        raise ValueError(f"relation counts must satisfy {MIN_RELATIONS} <= min <= max <= "
                         f"{MAX_RELATIONS}, got min {low}, max {high}")


def generate(seed: int, count: int, *, shapes: Sequence[str] = SHAPES,
             min_relations: int = MIN_RELATIONS, max_relations: int = MAX_RELATIONS,
             steps: int = 8) -> list[WorkloadQuery]:
    """``count`` queries, the same for the same arguments: with ``shapes`` taken in the order
    of :data:`SHAPES` (as ``--shapes`` takes them), query ``i`` has shape
    ``shapes[i % len(shapes)]``, ``min_relations``–``max_relations`` relations and ``steps``
    delta steps. Raises ``ValueError`` for an unknown shape or a bad range."""
    _check_options(count, shapes, min_relations, max_relations, steps)
    shapes = [s for s in SHAPES if s in shapes]
    master = random.Random(seed)
    out = []
    for i in range(count):
        rng = random.Random(master.getrandbits(64))
        shape = shapes[i % len(shapes)]
        n = rng.randint(min_relations, max_relations)
        out.append(build(f"{shape}-{n}-s{seed}-{i}", DRAW[shape](rng, n), rng, steps))
    return out


LARGE: dict[str, Skeleton] = {
    # 6 facts, 8 dimensions (two chains of 2), 7 conformed links: 115,343 pairs
    "large-clique-14": clique_skeleton(
        6, [(0, 2), (1, 2), (2, 1), (3, 1), (4, 1), (5, 1)],
        [(1, 0), (2, 1), (3, 2), (4, 3), (5, 4), (0, 5), (4, 0)]),
    # 6 facts, 11 dimensions (three chains of 2), 3 conformed links: 223,771 pairs
    "large-clique-17": clique_skeleton(
        6, [(0, 2), (1, 2), (2, 2), (3, 1), (4, 1), (5, 1), (0, 1), (1, 1)],
        [(1, 0), (2, 1), (4, 3)]),
    # a hub, 6 dimensions, 7 level-1 and 4 level-2 sub-dimensions
    "large-snowflake-18": tree_skeleton(
        "snowflake", [-1, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 9, 10, 12]),
    "large-chain-18": chain_skeleton(18, 5),
    # a tree of depth 4 and three extra edges closing cycles of length 3, 4 and 5
    "large-tree-18": tree_skeleton(
        "tree", [-1, 0, 0, 0, 1, 1, 2, 2, 3, 4, 4, 5, 6, 7, 8, 9, 11, 12],
        [(1, 2), (4, 6), (9, 12)]),
}
"""The join graphs of :func:`large_queries` (fixed: the seed draws statistics and deltas)."""


def large_queries(seed: int = 0, steps: int = 8) -> list[WorkloadQuery]:
    """The fixed set of big queries for benchmarks (see :data:`LARGE`); the same join graphs
    for every seed, statistics and deltas drawn from ``seed``."""
    master = random.Random(seed)
    return [build(name, sk, random.Random(master.getrandbits(64)), steps)
            for name, sk in LARGE.items()]


# -- files ------------------------------------------------------------------------------------

def write(queries: Sequence[WorkloadQuery], out: Path) -> list[dict[str, Any]]:
    """Write each query's three files and ``index.json`` into ``out``; returns the index."""
    out.mkdir(parents=True, exist_ok=True)
    index = []
    for wq in queries:
        files = {"sql": f"{wq.name}.sql", "catalog": f"{wq.name}.catalog.json",
                 "deltas": f"{wq.name}.deltas.txt"}
        (out / files["sql"]).write_text(wq.sql)
        (out / files["catalog"]).write_text(json.dumps(wq.catalog, indent=1) + "\n")
        (out / files["deltas"]).write_text("".join(f"{d}\n" for d in wq.deltas))
        index.append({"name": wq.name, "shape": wq.shape, "relations": wq.relations,
                      "pairs": wq.pairs, "csgs": wq.csgs, "files": files})
    (out / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    return index


def out_dir(text: str) -> Path:
    """``type=`` of ``-o``: a directory, made if missing; not an existing file."""
    p = Path(text)
    if p.exists() and not p.is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a directory")
    return p


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    ap = parser(__doc__, prog="workload.py")
    ap.add_argument("-o", "--out", required=True, type=out_dir, metavar="DIR")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=positive_int)
    ap.add_argument("--min-relations", type=positive_int)
    ap.add_argument("--max-relations", type=positive_int)
    ap.add_argument("--shapes", type=name_list("shape", SHAPES))
    ap.add_argument("--steps", type=positive_int, default=8)
    ap.add_argument("--large", action="store_true",
                    help="write the fixed large_queries set instead of generated queries")
    args = ap.parse_args(argv)
    chosen = [o for o in ("count", "min_relations", "max_relations", "shapes")
              if getattr(args, o) is not None]
    if args.large and chosen:
        ap.error(f"--large writes a fixed set; --{chosen[0].replace('_', '-')} does not apply")
    low = args.min_relations or MIN_RELATIONS
    high = args.max_relations or MAX_RELATIONS
    if not MIN_RELATIONS <= low <= high <= MAX_RELATIONS:
        ap.error(f"relation counts must satisfy {MIN_RELATIONS} <= --min-relations <= "
                 f"--max-relations <= {MAX_RELATIONS}, got {low} and {high}")
    args.min_relations, args.max_relations = low, high
    return args


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    if args.large:
        queries = large_queries(args.seed, args.steps)
    else:
        queries = generate(args.seed, args.count or 20, shapes=args.shapes or SHAPES,
                           min_relations=args.min_relations,
                           max_relations=args.max_relations, steps=args.steps)
    for entry in write(queries, args.out):
        print(f"{entry['name']}: {entry['relations']} relations, {entry['pairs']} pairs, "
              f"{entry['csgs']} csgs")
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
