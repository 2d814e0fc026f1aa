"""A tiny naive datalog evaluator, independent of reopt (its own parser, no semi-naive
evaluation, no compiler): a second oracle for the hand-worked expectations of
``tests/testdata/``. It reads the dialect's common subset — facts, rules, negation,
comparisons, ``+``/``-``, ``min<>``/``max<>`` heads, the ``Fn_sum`` built-in — ignores
directives, and evaluates stratum by stratum, each by re-running every rule on everything
until nothing changes. Slow on purpose: plain and easy to check by reading."""

from __future__ import annotations

import operator
import re
from collections.abc import Iterator

_TOKEN = re.compile(r'\s+|%[^\n]*|//[^\n]*|(?P<t>"[^"\n]*"|\'[^\'\n]*\''
                    r'|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|[A-Za-z_]\w*'
                    r'|:-|!=|<=|>=|[(),.:!=<>+\-])')
_CMP = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge}


def _tokens(text: str) -> list[str]:
    out, i = [], 0
    while i < len(text):
        m = _TOKEN.match(text, i)
        if m is None:
            raise ValueError(f"cannot read {text[i:i + 20]!r}")
        if m.group("t"):
            out.append(m.group("t"))
        i = m.end()
    return out


class _Reader:
    """Terms: ``("var", name)``, ``("const", value)``, ``("_",)``, ``("arith", op, l, r)``,
    ``("agg", func, name)``. Literals: ``("atom", pred, args, negated)``,
    ``("cmp", op, left, right)``."""

    def __init__(self, text: str):
        self.t, self.i = _tokens(text), 0

    def next(self) -> str:
        self.i += 1
        return self.t[self.i - 1]

    def peek(self, k: int = 0) -> str:
        return self.t[self.i + k] if self.i + k < len(self.t) else ""

    def simple(self):
        tok = self.next()
        if tok == "-":
            return ("const", -self.simple()[1])
        if tok[0] in "\"'":
            return ("const", tok[1:-1])
        if tok[0].isdigit():
            return ("const", int(tok) if tok.isdigit() else float(tok))
        if tok in ("true", "false", "inf"):
            return ("const", {"true": True, "false": False, "inf": float("inf")}[tok])
        return ("_",) if tok == "_" else ("var", tok)

    def term(self):
        if self.peek() in ("min", "max") and self.peek(1) == "<":
            func, _, name, _ = self.next(), self.next(), self.next(), self.next()
            return ("agg", func, name)
        left = self.simple()
        while self.peek() in ("+", "-"):
            op = self.next()
            left = ("arith", op, left, self.simple())
        return left

    def atom(self, negated: bool = False):
        pred = self.next()
        assert self.next() == "("
        args = []
        while self.peek() != ")":
            args.append(self.term())
            if self.peek() == ",":
                self.next()
        self.next()
        return ("atom", pred, tuple(args), negated)

    def literal(self):
        if self.peek() == "!":
            self.next()
            return self.atom(negated=True)
        if self.peek(1) == "(":
            return self.atom()
        left = self.term()
        op = self.next()
        return ("cmp", op, left, self.term())

    def program(self):
        facts, rules = [], []
        while self.i < len(self.t):
            if self.peek() == ".":  # a directive: skipped up to its closing '.'
                self.next()
                while self.next() != ".":
                    pass
                continue
            if self.peek(1) == ":" and self.peek(2) != "-":  # a label
                self.i += 2
            head = self.atom()
            if self.next() == ".":
                facts.append((head[1], tuple(a[1] for a in head[2])))  # bare names: symbols
                continue
            body = [self.literal()]
            while self.next() == ",":
                body.append(self.literal())
            rules.append((head, body))
        return facts, rules


def _value(term, env):
    kind = term[0]
    if kind == "const":
        return term[1]
    if kind == "var":
        return env[term[1]]
    left, right = _value(term[2], env), _value(term[3], env)
    return left + right if term[1] == "+" else left - right


def _names(term) -> set[str]:
    if term[0] == "var":
        return {term[1]}
    if term[0] == "arith":
        return _names(term[2]) | _names(term[3])
    return set()


def _match(args, row, env) -> dict | None:
    env = dict(env)
    for a, v in zip(args, row, strict=True):
        if a[0] == "_":
            continue
        if a[0] == "var" and a[1] not in env:
            env[a[1]] = v
        elif _value(a, env) != v:
            return None
    return env


def _solve(body, db, env) -> Iterator[dict]:
    """Every binding of the body's variables: the first literal that can run runs."""
    if not body:
        yield env
        return
    for i, lit in enumerate(body):
        rest = body[:i] + body[i + 1:]
        if lit[0] == "atom" and not lit[3] and lit[1] == "Fn_sum":
            if {n for a in lit[2][:3] for n in _names(a)} <= set(env):
                total = sum(_value(a, env) for a in lit[2][:3])
                hit = _match(lit[2][3:], (total,), env)
                if hit is not None:
                    yield from _solve(rest, db, hit)
                return
        elif lit[0] == "atom" and not lit[3]:
            for row in list(db.get(lit[1], ())):
                hit = _match(lit[2], row, env)
                if hit is not None:
                    yield from _solve(rest, db, hit)
            return
        elif lit[0] == "atom":  # negated: once its variables are bound
            if {n for a in lit[2] for n in _names(a)} <= set(env):
                if not any(_match(lit[2], row, env) is not None for row in db.get(lit[1], ())):
                    yield from _solve(rest, db, env)
                return
        else:
            _, op, left, right = lit
            free = (_names(left) | _names(right)) - set(env)
            if not free:
                if _CMP[op](_value(left, env), _value(right, env)):
                    yield from _solve(rest, db, env)
                return
            for a, b in ((left, right), (right, left)):
                if op == "=" and a[0] == "var" and free == {a[1]}:
                    yield from _solve(rest, db, {**env, a[1]: _value(b, env)})
                    return
    raise ValueError(f"no literal of {body} can run with {sorted(env)} bound")


def _derive(rule, db) -> set[tuple]:
    head, body = rule
    out = set()
    for env in _solve(body, db, {}):
        out.add(tuple(env[a[2]] if a[0] == "agg" else _value(a, env) for a in head[2]))
    return out


def _aggregate(head, rows: set[tuple]) -> set[tuple]:
    pos = next(i for i, a in enumerate(head[2]) if a[0] == "agg")
    pick = min if head[2][pos][1] == "min" else max
    groups: dict[tuple, list] = {}
    for r in rows:
        groups.setdefault(r[:pos] + r[pos + 1:], []).append(r[pos])
    return {k[:pos] + (pick(vs),) + k[pos:] for k, vs in groups.items()}


def _strata(rules) -> list[list]:
    """Rules grouped by stratum: a head's stratum is at least each positive body relation's
    and above each negated or aggregated one's (raised until nothing changes)."""
    level = {r[0][1]: 0 for r in rules}
    for _ in range(len(level) + 1):
        changed = False
        for head, body in rules:
            agg = any(a[0] == "agg" for a in head[2])
            for lit in body:
                if lit[0] == "atom" and lit[1] in level:
                    need = level[lit[1]] + (1 if lit[3] or agg else 0)
                    if need > level[head[1]]:
                        level[head[1]], changed = need, True
        if not changed:
            return [[r for r in rules if level[r[0][1]] == s] for s in sorted(set(level.values()))]
    raise ValueError("not stratifiable")


def evaluate(text: str, inputs: dict[str, list[tuple]]) -> dict[str, set[tuple]]:
    """The relations the program's rules define, given its facts and ``inputs``."""
    facts, rules = _Reader(text).program()
    db: dict[str, set[tuple]] = {p: set(rows) for p, rows in inputs.items()}
    for pred, row in facts:
        db.setdefault(pred, set()).add(row)
    for stratum in _strata(rules):
        for head, _ in stratum:
            db.setdefault(head[1], set())
        while True:
            new = {}
            for rule in stratum:
                new.setdefault(rule[0][1], set()).update(_derive(rule, db))
            for head, _ in stratum:
                if any(a[0] == "agg" for a in head[2]):
                    new[head[1]] = _aggregate(head, new[head[1]])
            if all(new[p] <= db[p] for p in new):
                break
            for p, rows in new.items():
                db[p] |= rows
    return {head[1]: db[head[1]] for head, _ in rules}
