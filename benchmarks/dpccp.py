"""The benchmark baseline: a plain DPccp in pure Python that computes only C_out.

Moerkotte and Neumann's algorithm as the paper writes it (VLDB 2006, Figure 3 and the
``EnumerateCsg`` / ``EnumerateCmp`` procedures): relations numbered breadth-first, every
csg-cmp pair emitted once, in an order where both halves already have their best plan, each
costed as ``card(S1 ∪ S2) + cost(S1) + cost(S2)`` in both join orders. No physical operators,
no properties, no memo beyond one dictionary of best costs and one of cardinalities.

It shares no code with reopt's optimizers on purpose: it is the yardstick the issue sets for
them ("``topdown`` and ``bottomup`` from scratch within 2× of a plain pure-Python DPccp that
computes only C_out on the same query"), and a check of their C_out optimum.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence


def bfs_order(n: int, edges: Sequence[tuple[int, int]]) -> list[int]:
    """Relations in breadth-first order from relation 0 (then any unreached one)."""
    adj: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        adj[a].append(b)
        adj[b].append(a)
    order: list[int] = []
    seen = [False] * n
    for start in range(n):
        if seen[start]:
            continue
        seen[start] = True
        todo = deque([start])
        while todo:
            v = todo.popleft()
            order.append(v)
            for w in sorted(adj[v]):
                if not seen[w]:
                    seen[w] = True
                    todo.append(w)
    return order


def dpccp_cout(n: int, edges: Sequence[tuple[int, int, float]], rows: Sequence[float],
               base_rows: Sequence[float] | None = None) -> tuple[float, int]:
    """The C_out optimum of a connected join graph and the number of csg-cmp pairs.

    ``edges``: ``(a, b, selectivity)``; ``rows``: each relation's rows after its filters.
    A cardinality is ``Π rows × Π selectivity`` of the edges inside the set (several edges
    between two relations multiply), clamped to ``[1, Π base_rows]`` (the cross product of
    the rows before filters, as reopt's estimator and PostgreSQL do) when ``base_rows`` is
    given."""
    order = bfs_order(n, [(a, b) for a, b, _ in edges])
    pos = {v: i for i, v in enumerate(order)}
    nb = [0] * n
    sel: dict[tuple[int, int], float] = {}
    for a, b, s in edges:
        i, j = pos[a], pos[b]
        nb[i] |= 1 << j
        nb[j] |= 1 << i
        key = (min(i, j), max(i, j))
        sel[key] = sel.get(key, 1.0) * s
    raw: dict[int, float] = {1 << pos[v]: float(rows[v]) for v in range(n)}
    cross: dict[int, float] = {1 << pos[v]: float((base_rows or rows)[v]) for v in range(n)}
    card: dict[int, float] = {}
    best: dict[int, float] = dict.fromkeys(raw, 0.0)

    def neighborhood(s: int) -> int:
        out, m = 0, s
        while m:
            low = m & -m
            out |= nb[low.bit_length() - 1]
            m ^= low
        return out & ~s

    def cardinality(s1: int, s2: int) -> float:
        c = raw[s1] * raw[s2]
        m = s1
        while m:
            low = m & -m
            i = low.bit_length() - 1
            hit = nb[i] & s2
            while hit:
                lw = hit & -hit
                j = lw.bit_length() - 1
                c *= sel[(min(i, j), max(i, j))]
                hit ^= lw
            m ^= low
        u = s1 | s2
        raw[u] = c
        if base_rows is None:
            return c
        cross[u] = cross[s1] * cross[s2]
        return min(max(c, 1.0), cross[u])

    pairs = 0

    def emit(s1: int, s2: int) -> None:
        nonlocal pairs
        pairs += 1
        u = s1 | s2
        c = card.get(u)
        if c is None:
            c = card[u] = cardinality(s1, s2)
        # both join orders cost the same under C_out
        cost = c + best[s1] + best[s2]
        old = best.get(u)
        if old is None or cost < old:
            best[u] = cost

    def csg_rec(s: int, x: int, out: list[int]) -> None:
        nbh = neighborhood(s) & ~x
        if not nbh:
            return
        subs = []
        t = nbh
        while t:
            subs.append(t)
            t = (t - 1) & nbh
        for t in reversed(subs):  # increasing subsets: smaller sets first
            out.append(s | t)
        for t in reversed(subs):
            csg_rec(s | t, x | nbh, out)

    def cmp_of(s1: int) -> None:
        low = s1 & -s1
        x = ((low << 1) - 1) | s1
        nbh = neighborhood(s1) & ~x
        m = nbh
        vs = []
        while m:
            lw = m & -m
            vs.append(lw)
            m ^= lw
        for v in reversed(vs):
            emit(s1, v)
            found: list[int] = []
            csg_rec(v, x | (((v << 1) - 1) & nbh), found)
            for s2 in found:
                emit(s1, s2)

    for i in reversed(range(n)):
        v = 1 << i
        cmp_of(v)
        found: list[int] = []
        csg_rec(v, (v << 1) - 1, found)
        for s1 in found:
            cmp_of(s1)
    return best[(1 << n) - 1], pairs
