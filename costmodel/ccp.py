"""DPccp's enumeration compiled: every csg and every csg-cmp pair of a join graph as arrays.

The same algorithm as :class:`~reopt.costmodel.joingraph.JoinGraph`'s Python methods
(``EnumerateCsg`` / ``EnumerateCmp``, Moerkotte and Neumann, VLDB 2006), with the recursion of
``EnumerateCsgRec`` as an explicit stack, compiled by numba: the enumeration is a tight loop
over bitsets that no array operation expresses, and in Python it costs about as much as a
plain DPccp's whole search. The sets come out in another order than the recursive one (each
still exactly once), and the same count of sets examined, which the tests hold to the pairs.

Without numba (an interpreter it does not support), :data:`AVAILABLE` is False and
:class:`JoinGraph` enumerates in Python.
"""

from __future__ import annotations

import numpy as np

try:  # pragma: no cover - exercised by whichever interpreter runs the tests
    from numba import njit

    AVAILABLE = True
except ImportError:  # pragma: no cover
    AVAILABLE = False

    def njit(*args, **kwargs):
        return lambda fn: fn


DENSE = 22
"""Graphs of at most this many relations find a split's expression among the csgs through a
table of ``2**n`` entries (16 MiB at 22): one read, where a binary search over the csgs costs
about 60 ns a pair (large-clique-14: 7 ms of 115,343 pairs); larger ones search."""


@njit(cache=True)
def _push(buf: np.ndarray, k: int, x: int) -> np.ndarray:
    if k == buf.shape[0]:
        buf = _grown(buf, k, 2 * k)
    buf[k] = x
    return buf


@njit(cache=True)
def _tables(neighbors: np.ndarray) -> np.ndarray:
    """The union of the neighbours of every set of eight relations, by byte of a bitset:
    ``table[c, b]`` for the relations ``8c + i`` with bit ``i`` of ``b`` set."""
    n = neighbors.shape[0]
    chunks = (n + 7) // 8
    table = np.zeros((max(chunks, 1), 256), dtype=np.int64)
    for c in range(chunks):
        for b in range(1, 256):
            low = b & -b
            i = 0
            while (1 << i) != low:
                i += 1
            j = 8 * c + i
            table[c, b] = table[c, b ^ low] | (neighbors[j] if j < n else 0)
    return table


@njit(cache=True)
def _neighborhood(s: int, table: np.ndarray) -> int:
    out = 0
    m = s
    c = 0
    while m != 0:
        out |= table[c, m & 255]
        m >>= 8
        c += 1
    return out & ~s


@njit(cache=True)
def _grow(start: int, exclude: int, table: np.ndarray, out: np.ndarray, k: int,
          examined: int, budget: int, stack_s: np.ndarray, stack_x: np.ndarray):
    """``EnumerateCsgRec(start, exclude)``: append every connected ``start ∪ t`` (``t`` non-
    empty, reachable without entering ``exclude``) to ``out`` from position ``k``. The
    stacks are the caller's, kept across calls (grown as needed, and returned)."""
    stack_s[0], stack_x[0] = start, exclude
    top = 1
    while top > 0:
        top -= 1
        s, x = stack_s[top], stack_x[top]
        nb = _neighborhood(s, table) & ~x
        if nb == 0:
            continue
        # counted before they are built: a star's hub has 2^(n-1) - 1 of them, which the
        # budget must refuse without making them
        count = 0
        m = nb
        while m != 0:
            count += 1
            m &= m - 1
        examined += (np.int64(1) << count) - 1
        if examined > budget:
            return out, k, examined, True, stack_s, stack_x
        need = top + (np.int64(1) << count)
        if need > stack_s.shape[0]:
            stack_s = _grown(stack_s, top, 2 * need)
            stack_x = _grown(stack_x, top, 2 * need)
        xn = x | nb
        t = nb
        while t != 0:
            out = _push(out, k, s | t)
            k += 1
            stack_s[top] = s | t
            stack_x[top] = xn
            top += 1
            t = (t - 1) & nb
    return out, k, examined, False, stack_s, stack_x


@njit(cache=True)
def _grown(buf: np.ndarray, used: int, size: int) -> np.ndarray:
    out = np.empty(size, dtype=np.int64)
    out[:used] = buf[:used]
    return out


@njit(cache=True)
def _grouped(csgs: np.ndarray, unions: np.ndarray, lefts: np.ndarray, n: int, dense: bool):
    """The pairs ``(unions[j], lefts[j])`` of sets of ``n`` relations ordered by union (each
    a csg, ``csgs`` ascending), keeping their order within a union: a counting sort by the
    union's rank among the csgs, found through a table (``dense``) or by binary search.
    Returns the distinct unions, where each one's left sides start (and, last, where the
    final one's end), and the left sides."""
    k, p = csgs.shape[0], unions.shape[0]
    rank = np.empty(p, dtype=np.int64)
    if dense:
        rank_of = np.empty(np.int64(1) << n, dtype=np.int32)
        for r in range(k):
            rank_of[csgs[r]] = r
        for j in range(p):
            rank[j] = rank_of[unions[j]]
    else:
        rank = np.searchsorted(csgs, unions)
    starts = np.zeros(k + 1, dtype=np.int64)
    for j in range(p):
        starts[rank[j] + 1] += 1
    groups = 0
    for r in range(k):
        if starts[r + 1]:
            groups += 1
        starts[r + 1] += starts[r]
    ordered = np.empty(p, dtype=np.int64)
    at = starts[:k].copy()
    for j in range(p):
        r = rank[j]
        ordered[at[r]] = lefts[j]
        at[r] += 1
    exprs = np.empty(groups, dtype=np.int64)
    bounds = np.empty(groups + 1, dtype=np.int64)
    g = 0
    for r in range(k):
        if starts[r + 1] > starts[r]:
            exprs[g] = csgs[r]
            bounds[g] = starts[r]
            g += 1
    bounds[groups] = p
    return exprs, bounds, ordered


@njit(cache=True)
def enumerate_pairs(neighbors: np.ndarray, budget: int):
    """Every csg of the connected graph ``neighbors`` (bitsets per relation) and every
    csg-cmp pair ``(s1, s2)``, ``s1`` holding the pair's lowest relation, each once, grouped
    by union as :meth:`~reopt.costmodel.joingraph.JoinGraph.flat_halves` gives them (the
    unions ascending, where each one's left sides start, the left sides ascending per
    union); the number of sets examined; whether that number passed ``budget`` (then the
    rest is incomplete and the three arrays empty). The csgs ``s1`` are taken in ascending
    order, so each union's left sides come out ascending and one stable counting sort by
    union groups them (on large-clique-14 5.6 ms in all, against 14 ms for pairs in
    enumeration order sorted after)."""
    n = neighbors.shape[0]
    table = _tables(neighbors)
    csgs = np.empty(64, dtype=np.int64)
    stack_s = np.empty(64, dtype=np.int64)
    stack_x = np.empty(64, dtype=np.int64)
    empty = csgs[:0]
    k, examined = 0, 0
    for i in range(n - 1, -1, -1):
        v = np.int64(1) << i
        csgs = _push(csgs, k, v)
        k += 1
        examined += 1
        csgs, k, examined, over, stack_s, stack_x = _grow(
            v, (v << 1) - 1, table, csgs, k, examined, budget, stack_s, stack_x)
        if over:
            return csgs[:k], empty, empty, empty, examined, True
    csgs = csgs[:k]
    ascending = np.sort(csgs)
    lefts = np.empty(64, dtype=np.int64)
    unions = np.empty(64, dtype=np.int64)
    found = np.empty(64, dtype=np.int64)
    p = 0
    for c in range(k):
        s1 = ascending[c]
        low = s1 & -s1
        x = ((low << 1) - 1) | s1
        nb = _neighborhood(s1, table) & ~x
        for i in range(n - 1, -1, -1):
            v = np.int64(1) << i
            if not nb & v:
                continue
            examined += 1
            found[0] = v
            found, m, examined, over, stack_s, stack_x = _grow(
                v, x | (((v << 1) - 1) & nb), table, found, 1, examined, budget, stack_s,
                stack_x)
            if over:
                return csgs, empty, empty, empty, examined, True
            if p + m > lefts.shape[0]:
                lefts = _grown(lefts, p, 2 * (p + m))
                unions = _grown(unions, p, 2 * (p + m))
            for j in range(m):
                lefts[p] = s1
                unions[p] = s1 | found[j]
                p += 1
    exprs, bounds, ordered = _grouped(ascending, unions[:p], lefts[:p], n, n <= DENSE)
    return csgs, exprs, bounds, ordered, examined, False
