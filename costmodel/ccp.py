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


@njit(cache=True)
def _push(buf: np.ndarray, k: int, x: int) -> np.ndarray:
    if k == buf.shape[0]:
        grown = np.empty(2 * buf.shape[0], dtype=np.int64)
        grown[:k] = buf[:k]
        buf = grown
    buf[k] = x
    return buf


@njit(cache=True)
def _neighborhood(s: int, neighbors: np.ndarray) -> int:
    out = 0
    for i in range(neighbors.shape[0]):
        if (s >> i) & 1:
            out |= neighbors[i]
    return out & ~s


@njit(cache=True)
def _grow(start: int, exclude: int, neighbors: np.ndarray, out: np.ndarray, k: int,
          examined: int, budget: int):
    """``EnumerateCsgRec(start, exclude)``: append every connected ``start ∪ t`` (``t`` non-
    empty, reachable without entering ``exclude``) to ``out`` from position ``k``."""
    stack_s = np.empty(64, dtype=np.int64)
    stack_x = np.empty(64, dtype=np.int64)
    stack_s[0], stack_x[0] = start, exclude
    top = 1
    while top > 0:
        top -= 1
        s, x = stack_s[top], stack_x[top]
        nb = _neighborhood(s, neighbors) & ~x
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
            return out, k, examined, True
        xn = x | nb
        t = nb
        while t != 0:
            out = _push(out, k, s | t)
            k += 1
            stack_s = _push(stack_s, top, s | t)
            stack_x = _push(stack_x, top, xn)
            top += 1
            t = (t - 1) & nb
    return out, k, examined, False


@njit(cache=True)
def enumerate_pairs(neighbors: np.ndarray, budget: int):
    """Every csg of the connected graph ``neighbors`` (bitsets per relation) and every
    csg-cmp pair ``(s1, s2)``, ``s1`` holding the pair's lowest relation, each once; the number
    of sets examined; whether that number passed ``budget`` (then the rest is incomplete)."""
    n = neighbors.shape[0]
    csgs = np.empty(64, dtype=np.int64)
    k, examined = 0, 0
    for i in range(n - 1, -1, -1):
        v = np.int64(1) << i
        csgs = _push(csgs, k, v)
        k += 1
        examined += 1
        csgs, k, examined, over = _grow(v, (v << 1) - 1, neighbors, csgs, k, examined, budget)
        if over:
            return csgs[:k], csgs[:0], csgs[:0], examined, True
    lefts = np.empty(64, dtype=np.int64)
    rights = np.empty(64, dtype=np.int64)
    p = 0
    found = np.empty(64, dtype=np.int64)
    for c in range(k):
        s1 = csgs[c]
        low = s1 & -s1
        x = ((low << 1) - 1) | s1
        nb = _neighborhood(s1, neighbors) & ~x
        for i in range(n - 1, -1, -1):
            v = np.int64(1) << i
            if not nb & v:
                continue
            examined += 1
            lefts = _push(lefts, p, s1)
            rights = _push(rights, p, v)
            p += 1
            found, m, examined, over = _grow(v, x | (((v << 1) - 1) & nb), neighbors, found, 0,
                                             examined, budget)
            if over:
                return csgs[:k], lefts[:p], rights[:p], examined, True
            for j in range(m):
                lefts = _push(lefts, p, s1)
                rights = _push(rights, p, found[j])
                p += 1
    return csgs[:k], lefts[:p], rights[:p], examined, False
