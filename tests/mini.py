"""A small program exercising what the optimizer's rules do not — negation of facts and of
derived relations (with and without bound variables, written before the atoms that bind it, and
of a relation whose name sorts after its user, so only stratification orders them), constants,
negative numbers and repeated variables in atoms, assignments, every comparison at its
boundary, a call that starts a rule, max/min with and without group keys, a linear and a
non-linear recursion through one relation only — and its relations computed in plain Python
(:func:`expected`), the oracle both engines are checked against."""

from __future__ import annotations

EDGES = [(1, 2), (2, 3), (3, 4), (4, 2), (5, 5), (6, 1)]
BLOCKED = [3, 6]

MINI = "".join(f"Edge({a}, {b}). " for a, b in EDGES) + "\n" + "".join(
    f"Blocked({b}). " for b in BLOCKED) + r"""
Path(x, y) :- Edge(x, y).
Path(x, z) :- Path(x, y), Path(y, z).
Reach(x, y) :- Edge(x, y).
Reach(x, z) :- Reach(x, y), Edge(y, z).
Loop(x) :- Path(x, x).
SelfEdge(x) :- Edge(x, x).
Open(x, y) :- Path(x, y), !Blocked(y).
NegFirst(x) :- !Blocked(x), Edge(x, _).
NoLoop(x, y) :- Path(x, y), !Loop(x).
NoneLoop(x) :- Edge(x, _), !Loop(_).
NotBoth(x) :- Edge(x, _), !Blocked(_).
AUnbig(x) :- Edge(x, _), !ZBig(x).
ZBig(x) :- Edge(x, _), x > 4.
From1(y) :- Path(1, y).
Pair(x, tag) :- Blocked(x), tag = "b\'q".
Neg(x, y) :- Blocked(x), y = -5.
AboveMinus2(x) :- Edge(x, _), x - 8 > -1 - 6.
Two(x, z) :- Blocked(x), Blocked(z), x < z.
Lt3(x) :- Edge(x, _), x < 3.
Le3(x) :- Edge(x, _), x <= 3.
Gt3(x) :- Edge(x, _), x > 3.
Ge3(x) :- Edge(x, _), x >= 3.
Eq3(x) :- Edge(x, _), x = 3.
Ne3(x) :- Edge(x, _), x != 3.
Up(x, y) :- Path(x, y), x <= y, y != 4.
Cost(x, c) :- Path(x, y), Fn_sum(0.1, 0.2, 0.0, c), y >= 3.
Start(c) :- Fn_sum(1.5, 0.25, 0.0, c).
One(x, flag) :- x = 1, flag = true, Edge(x, _).
Far(x, max<y>) :- Path(x, y).
Least(min<y>) :- Path(_, y).
"""


def closure(edges: set[tuple[int, int]]) -> set[tuple[int, int]]:
    out = set(edges)
    while True:
        more = out | {(a, d) for a, b in out for c, d in edges if b == c}
        if more == out:
            return out
        out = more


def expected() -> dict[str, set[tuple]]:
    edge, blocked = set(EDGES), set(BLOCKED)
    path = closure(edge)
    nodes = {a for a, _ in edge}
    loop = {x for x, y in path if x == y}
    big = {x for x in nodes if x > 4}
    return {
        "Path": path,
        "Reach": path,
        "Loop": {(x,) for x in loop},
        "SelfEdge": {(x,) for x, y in edge if x == y},
        "Open": {(x, y) for x, y in path if y not in blocked},
        "NegFirst": {(x,) for x in nodes - blocked},
        "NoLoop": {(x, y) for x, y in path if x not in loop},
        "NoneLoop": set() if loop else {(x,) for x in nodes},
        "NotBoth": set() if blocked else {(x,) for x in nodes},
        "AUnbig": {(x,) for x in nodes - big},
        "ZBig": {(x,) for x in big},
        "From1": {(y,) for x, y in path if x == 1},
        "Pair": {(x, "b\\'q") for x in blocked},
        "Neg": {(x, -5) for x in blocked},
        "AboveMinus2": {(x,) for x in nodes if x - 8 > -7},
        "Two": {(x, z) for x in blocked for z in blocked if x < z},
        "Lt3": {(x,) for x in nodes if x < 3},
        "Le3": {(x,) for x in nodes if x <= 3},
        "Gt3": {(x,) for x in nodes if x > 3},
        "Ge3": {(x,) for x in nodes if x >= 3},
        "Eq3": {(3,)},
        "Ne3": {(x,) for x in nodes if x != 3},
        "Up": {(x, y) for x, y in path if x <= y and y != 4},
        "Cost": {(x, 0.1 + 0.2 + 0.0) for x, y in path if y >= 3},
        "Start": {(1.5 + 0.25 + 0.0,)},
        "One": {(1, True)},
        "Far": {(x, max(y for a, y in path if a == x)) for x, _ in path},
        "Least": {(min(y for _, y in path),)},
    }


def derivations_of_path() -> int:
    """Semi-naive evaluation finds every derivation of Path once: one per Edge tuple, one per
    pair Path(x, y), Path(y, z) of the final relation."""
    path = closure(set(EDGES))
    return len(EDGES) + sum(1 for _, y in path for y2, _ in path if y == y2)
