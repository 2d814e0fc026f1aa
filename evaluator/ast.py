"""The rule AST: what the parser produces and the compiler consumes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pos:
    """Where something is written: file, 1-based line and column."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True)
class Var:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Const:
    value: Any

    def __str__(self) -> str:
        return f'"{self.value}"' if isinstance(self.value, str) else str(self.value).lower()


@dataclass(frozen=True)
class Wildcard:
    def __str__(self) -> str:
        return "_"


@dataclass(frozen=True)
class Arith:
    """``left + right`` / ``left - right``: arithmetic in rule heads and comparisons."""

    op: str
    left: Term
    right: Term

    def __str__(self) -> str:
        return f"{self.left} {self.op} {self.right}"

    def vars(self) -> set[str]:
        out = set()
        for side in (self.left, self.right):
            if isinstance(side, Var):
                out.add(side.name)
            elif isinstance(side, Arith):
                out |= side.vars()
        return out


Term = Var | Const | Wildcard | Arith


def term_vars(t: Any) -> set[str]:
    """The variables of a term (none for a constant, a wildcard or anything else)."""
    if isinstance(t, Var):
        return {t.name}
    if isinstance(t, Arith):
        return t.vars()
    return set()


@dataclass(frozen=True)
class Aggregate:
    """``min<cost>`` / ``max<cost>`` in a rule head."""

    func: str
    var: Var

    def __str__(self) -> str:
        return f"{self.func}<{self.var}>"


@dataclass(frozen=True)
class Atom:
    """``Pred(args)``, possibly negated (``!Pred(args)``). ``Fn_*`` predicates are built-ins."""

    pred: str
    args: tuple[Term | Aggregate, ...]
    pos: Pos
    negated: bool = False

    @property
    def is_builtin(self) -> bool:
        return self.pred.startswith("Fn_")

    def __str__(self) -> str:
        return f"{'!' if self.negated else ''}{self.pred}({', '.join(map(str, self.args))})"


@dataclass(frozen=True)
class Comparison:
    """``x != y``, ``x = 0``, ``cost < bound`` … between terms."""

    op: str
    left: Term
    right: Term
    pos: Pos

    def __str__(self) -> str:
        return f"{self.left} {self.op} {self.right}"


Literal = Atom | Comparison


@dataclass(frozen=True)
class Rule:
    head: Atom
    body: tuple[Literal, ...]
    label: str | None = None
    """An optional ``R1:`` style label written before the rule."""

    @property
    def pos(self) -> Pos:
        return self.head.pos

    @property
    def aggregate(self) -> Aggregate | None:
        for a in self.head.args:
            if isinstance(a, Aggregate):
                return a
        return None

    def __str__(self) -> str:
        label = f"{self.label}: " if self.label else ""
        return f"{label}{self.head} :- {', '.join(map(str, self.body))}."


@dataclass(frozen=True)
class Directive:
    """``.name args.`` — declarations that switch engine features on (e.g. pruning)."""

    name: str
    args: tuple[str, ...]
    pos: Pos


@dataclass
class Program:
    rules: list[Rule] = field(default_factory=list)
    facts: dict[str, list[tuple]] = field(default_factory=dict)
    fact_pos: dict[str, list[Pos]] = field(default_factory=dict)
    """Per relation, where each of its facts is written (aligned with ``facts``)."""
    directives: list[Directive] = field(default_factory=list)

    def extend(self, other: Program) -> None:
        self.rules += other.rules
        for pred, rows in other.facts.items():
            self.facts.setdefault(pred, []).extend(rows)
            self.fact_pos.setdefault(pred, []).extend(other.fact_pos[pred])
        self.directives += other.directives
