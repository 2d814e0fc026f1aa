"""Two small scheduled programs (shortest distances down a levelled DAG, released one level
at a time from the root) for the tests of :class:`~reopt.evaluator.compiler.RankSteps`: one
whose rank can be released as a fixed sequence of steps (``fused``), one whose rules derive a
plain relation at the same rank (so the pending tuples choose the steps)."""

from __future__ import annotations

from reopt.costmodel.builtins import BUILTINS, LONG, Builtin
from reopt.evaluator.compiler import CompiledProgram, compile_program
from reopt.evaluator.parser import parse

EDGES = [(1, 11, 4), (1, 12, 1), (11, 21, 1), (12, 21, 5), (12, 22, 2), (21, 31, 1),
         (22, 31, 1), (11, 22, 1)]
"""(from, to, weight): node ``n`` sits on level ``n // 10``; edges go one level down."""

FACTS = "Root(1).\n" + "".join(f"Edge({a}, {b}, {w}).\n" for a, b, w in EDGES)

FUSED = FACTS + """
Reach(x, 0) :- Root(x).
Reach(y, d + w) :- Best(x, d), Edge(x, y, w).
Best(x, min<d>) :- Reach(x, d).
.schedule descending Fn_level Reach Best.
"""

STEPWISE = FACTS + """
Reach(x, 0) :- Root(x).
Via(y, d + w) :- Best(x, d), Edge(x, y, w).
Reach(y, d) :- Via(y, d).
Best(x, min<d>) :- Reach(x, d).
.schedule descending Fn_level Via Reach Best.
"""
"""``Reach`` from ``Via`` keeps the node, hence the rank: the rank needs a second plain step."""


def program(text: str) -> CompiledProgram:
    # descending releases the highest rank first: rank = -level puts the root first
    level = Builtin("Fn_level", (LONG,), (LONG,), lambda ctx, x: [(-(x // 10),)])
    return compile_program(parse(text, "schedule.dl"), {**BUILTINS, "Fn_level": level}, {})


def distances() -> set[tuple[int, int]]:
    """Oracle: shortest distances from the root, level by level (no datalog)."""
    best = {1: 0}
    for a, b, w in sorted(EDGES):
        if a in best:
            best[b] = min(best.get(b, best[a] + w), best[a] + w)
    return set(best.items())
