"""Parser for reopt's datalog dialect (documented in the README, 'Rule syntax').

::

    % a comment (also // …)
    JoinMethod(hashjoin).                      % a fact: bare names are symbols
    R9: BestCost(q, e, p, min<cost>) :-        % optional label, head with an aggregate
        PlanCost(q, e, p, _, _, _, _, _, _, _, _, cost).
    Goal(q, r, rp) :- SearchSpace(q, _, _, _, _, _, _, _, r, rp), r != 0.
    .prune PlanCost BestCost.                  % a directive (engine feature switch)

In rules, bare identifiers are variables, ``_`` is a wildcard, and constants are quoted strings,
numbers, ``true``, ``false`` and ``inf``. Predicates named ``Fn_…`` are built-in functions.
Body literals are atoms, negated atoms (``!P(…)``) and comparisons (``= != < <= > >=``).
Rule heads and comparisons may compute with ``+`` and ``-`` (``bound - rCost - localCost``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from reopt.costmodel.errors import ReoptError
from reopt.evaluator.ast import (
    Aggregate,
    Arith,
    Atom,
    Comparison,
    Const,
    Directive,
    Literal,
    Pos,
    Program,
    Rule,
    Term,
    Var,
    Wildcard,
)

AGGREGATES = ("min", "max")
ARITHMETIC = ("+", "-")
COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")
MAX_ARITH_TERMS = 100
"""The most terms one ``+``/``-`` chain may have: the compiler and the engines walk a chain
recursively, and rules compute a few costs, so a longer chain is a mistake, refused with
its position instead of exhausting the interpreter's stack."""
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
"""An integer constant must fit the 64-bit columns (``long``) that hold it."""
_KEYWORDS = {"true": True, "false": False, "inf": math.inf}

_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\r]+|\n)
  | (?P<comment>%[^\n]*|//[^\n]*)
  | (?P<string>"[^"\n]*"|'[^'\n]*')
  | (?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>:-|!=|<=|>=|[(),.:!=<>+\-])
    """,
    re.VERBOSE,
)


class RuleSyntaxError(ReoptError):
    """A rule file does not parse; the message starts with ``file:line:col``."""


class _Tok:
    __slots__ = ("kind", "text", "pos")

    def __init__(self, kind: str, text: str, pos: Pos):
        self.kind, self.text, self.pos = kind, text, pos

    def __repr__(self) -> str:
        return f"{self.kind}:{self.text!r}"


def _tokenize(text: str, file: str) -> list[_Tok]:
    toks: list[_Tok] = []
    line, line_start, i = 1, 0, 0
    while i < len(text):
        m = _TOKEN.match(text, i)
        pos = Pos(file, line, i - line_start + 1)
        if not m:
            raise RuleSyntaxError(f"{pos}: unexpected character {text[i]!r}")
        kind = m.lastgroup
        assert kind is not None
        if kind == "ws":
            if m.group() == "\n":
                line += 1
                line_start = m.end()
        elif kind != "comment":
            toks.append(_Tok(kind, m.group(), pos))
        i = m.end()
    toks.append(_Tok("eof", "", Pos(file, line, i - line_start + 1)))
    return toks


class _Parser:
    def __init__(self, text: str, file: str):
        self.toks = _tokenize(text, file)
        self.i = 0

    # -- token helpers ----------------------------------------------------------------------
    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def error(self, msg: str, tok: _Tok | None = None) -> RuleSyntaxError:
        t = tok or self.tok
        found = "end of file" if t.kind == "eof" else repr(t.text)
        return RuleSyntaxError(f"{t.pos}: {msg}, found {found}")

    def take(self, text: str) -> _Tok:
        if self.tok.text != text or self.tok.kind not in ("punct", "ident"):
            raise self.error(f"expected '{text}'")
        t = self.tok
        self.i += 1
        return t

    def accept(self, text: str) -> bool:
        if self.tok.kind == "punct" and self.tok.text == text:
            self.i += 1
            return True
        return False

    # -- grammar -----------------------------------------------------------------------------
    def program(self) -> Program:
        prog = Program()
        while self.tok.kind != "eof":
            if self.tok.text == "." and self.peek().kind == "ident":
                prog.directives.append(self.directive())
                continue
            self.clause(prog)
        return prog

    def directive(self) -> Directive:
        start = self.take(".")
        name = self.tok.text
        self.i += 1
        args: list[str] = []
        while not (self.tok.kind == "punct" and self.tok.text == "."):
            if self.tok.kind == "eof":
                raise self.error(f"directive '.{name}' must end with '.'")
            if self.tok.text != ",":
                args.append(self.tok.text)
            self.i += 1
        self.take(".")
        return Directive(name, tuple(args), start.pos)

    def clause(self, prog: Program) -> None:
        label = None
        if self.tok.kind == "ident" and self.peek().text == ":":
            label = self.tok.text
            self.i += 2
        head = self.atom(head=True)
        if self.accept("."):
            if label is not None:
                raise self.error("a fact cannot have a label", self.toks[self.i - 1])
            prog.facts.setdefault(head.pred, []).append(self.fact_row(head))
            prog.fact_pos.setdefault(head.pred, []).append(head.pos)
            return
        self.take(":-")
        body = [self.literal()]
        while self.accept(","):
            body.append(self.literal())
        if not self.accept("."):
            raise self.error("expected ',' or '.' after a body literal")
        prog.rules.append(Rule(head, tuple(body), label))

    def fact_row(self, head: Atom) -> tuple:
        row = []
        for a in head.args:
            if isinstance(a, Const):
                row.append(a.value)
            elif isinstance(a, Var):
                row.append(a.name)  # bare names in facts are symbols
            else:
                raise RuleSyntaxError(f"{head.pos}: a fact's arguments must be constants")
        return tuple(row)

    def literal(self) -> Literal:
        if self.accept("!"):
            atom = self.atom()
            return Atom(atom.pred, atom.args, atom.pos, negated=True)
        if self.tok.kind == "ident" and self.peek().text == "(":
            return self.atom()
        left_tok = self.tok
        left = self.term()
        if self.tok.kind != "punct" or self.tok.text not in COMPARISONS:
            raise self.error("expected a comparison (= != < <= > >=) or an atom", self.tok)
        op = self.tok.text
        self.i += 1
        right = self.term()
        return Comparison(op, left, right, left_tok.pos)

    def atom(self, head: bool = False) -> Atom:
        t = self.tok
        if t.kind != "ident":
            raise self.error("expected a predicate name")
        self.i += 1
        self.take("(")
        args: list[Term | Aggregate] = []
        if not self.accept(")"):
            args.append(self.arg(head))
            while self.accept(","):
                args.append(self.arg(head))
            if not self.accept(")"):
                raise self.error("expected ',' or ')' in an argument list")
        return Atom(t.text, tuple(args), t.pos)

    def arg(self, head: bool) -> Term | Aggregate:
        if self.tok.kind == "ident" and self.tok.text in AGGREGATES and self.peek().text == "<":
            t = self.tok
            if not head:
                raise self.error("aggregates are only allowed in rule heads", t)
            self.i += 2
            if self.tok.kind != "ident":
                raise self.error(f"expected a variable inside {t.text}<…>")
            var = Var(self.tok.text)
            self.i += 1
            self.take(">")
            return Aggregate(t.text, var)
        return self.term()

    def term(self) -> Term:
        """A term, possibly arithmetic: ``a - b - c`` (``+``/``-``, left-associative)."""
        start = self.tok
        left = self.simple_term()
        terms = 1
        while self.tok.kind == "punct" and self.tok.text in ARITHMETIC:
            op_tok = self.tok
            terms += 1
            if terms > MAX_ARITH_TERMS:
                raise RuleSyntaxError(f"{start.pos}: arithmetic of more than {MAX_ARITH_TERMS} "
                                      "terms (a '+'/'-' chain this long is not supported)")
            self.i += 1
            right = self.simple_term()
            for side in (left, right):
                if isinstance(side, Wildcard):
                    raise self.error("'_' cannot be used in arithmetic", op_tok)
            left = Arith(op_tok.text, left, right)
        return left

    def simple_term(self) -> Term:
        if self.tok.kind == "punct" and self.tok.text == "-" and self.peek().kind == "number":
            self.i += 1
            return self.number(self.tok, negative=True)
        t = self.tok
        self.i += 1
        if t.kind == "ident":
            if t.text == "_":
                return Wildcard()
            if t.text in _KEYWORDS:
                return Const(_KEYWORDS[t.text])
            return Var(t.text)
        if t.kind == "string":
            return Const(t.text[1:-1])
        if t.kind == "number":
            self.i -= 1
            return self.number(t)
        self.i -= 1
        raise self.error("expected a variable, '_' or a constant")

    def number(self, t: _Tok, negative: bool = False) -> Const:
        """A numeric constant: an integer that fits 64 bits, or a finite float. Anything else
        (a 5,000-digit integer, ``1e400``) is an error at its position, not a silent ``inf``
        or a crash converting it."""
        self.i += 1
        sign = -1 if negative else 1
        if re.fullmatch(r"\d+", t.text):
            digits = t.text.lstrip("0") or "0"
            if len(digits) <= 19 and LONG_MIN <= sign * int(digits) <= LONG_MAX:
                return Const(sign * int(digits))
            raise RuleSyntaxError(f"{t.pos}: integer constant of {len(digits):,} digits does "
                                  f"not fit 64 bits ({LONG_MIN} to {LONG_MAX})")
        v = sign * float(t.text)
        if not math.isfinite(v):
            shown = t.text if len(t.text) <= 30 else f"{t.text[:20]}… ({len(t.text):,} chars)"
            raise RuleSyntaxError(f"{t.pos}: number {shown} is out of the float range")
        return Const(v)


def parse(text: str, file: str = "<rules>") -> Program:
    """Parse one rule file's text."""
    return _Parser(text, file).program()


def read_rule_file(path: Path | str) -> str:
    """A rule file's text, or a :class:`RuleSyntaxError` saying why it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise RuleSyntaxError(f"{path}: cannot read rule file: {e.strerror}") from None
    except UnicodeDecodeError as e:
        line = e.object[:e.start].count(b"\n") + 1
        raise RuleSyntaxError(f"{path}:{line}: not UTF-8 text (byte 0x{e.object[e.start]:02x} "
                              f"at offset {e.start})") from None


def parse_files(paths: list[Path]) -> Program:
    prog = Program()
    for p in paths:
        prog.extend(parse(read_rule_file(p), str(p)))
    return prog
