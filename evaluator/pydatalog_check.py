"""Cross-check: the optimizer's rules evaluated by pyDatalog instead of our own engines.

The issue asks that "the same rules, translated mechanically from the AST to pyDatalog,
evaluated by pyDatalog on small queries, give the same BestCost for every (expression,
property)". :func:`translate` is that translation: one generic function over the AST
(:class:`Rule`, :class:`Atom`, :class:`Comparison`, :class:`Aggregate`), no code for any
particular rule or relation. It produces pyDatalog program text, loaded with
``pyDatalog``'s own parser:

* a relation ``P`` becomes the pyDatalog predicate ``P`` (same name);
* a variable ``x`` becomes the pyDatalog variable ``V_x``; every ``_`` a fresh ``W_<n>``;
* constants become Python literals (``repr``; ``inf`` as ``float('inf')``), so strings,
  integers, floats and booleans keep their type and floats their exact value;
* ``=`` becomes ``==``, other comparisons are kept (a variable is put on the left);
  a negated atom ``!P(…)`` becomes ``~P(…)``;
* body literals are ordered as our compiler orders them (the earliest literal whose inputs
  are bound comes next), because pyDatalog evaluates bodies left to right;
* a head ``P(k1, …, min<x>)`` becomes a pyDatalog aggregate function plus a plain rule::

      (Agg_10_R9[V_q, V_expr, V_prop] == min_(V_cost, order_by=V_cost)) <= body
      BestCost(V_q, V_expr, V_prop, V_cost) <= (Agg_10_R9[V_q, V_expr, V_prop] == V_cost)

  (one function per rule, named by its position and label, unioned into ``P``, as our
  engines aggregate per rule);
* facts of the program and the input ``Expr(q, root, prop)`` of every query are asserted;
* directives (``.prune …``: engine feature switches) are not translated -- pyDatalog
  evaluates the plain program.

Built-in functions (``Fn_*``). pyDatalog can call Python code while it evaluates a rule:
a *predicate resolver* (what ``@pyDatalog.predicate()`` registers in
``pyEngine.Python_resolvers``) is called with the literal's terms and yields the rows of the
predicate that match them. Every ``Fn_x`` atom therefore stays an ordinary pyDatalog
predicate ``Fn_x(inputs…, outputs…)`` whose resolver -- made mechanically from the declared
input count of :class:`~reopt.costmodel.builtins.Builtin` -- reads the bound inputs, calls
THE SAME built-in function ``fn(ctx, *inputs)`` our engines call and yields
``inputs + outputs`` for each output row. Nothing is precomputed: the function extensions
are the calls pyDatalog's own top-down evaluation makes (an unbound input is an error, which
the body ordering rules out). ``Fn_sum`` is no exception: it is called like the others, so a
plan's cost is ``plan_cost(local, l, r) = (local + l) + r`` computed by the same Python
code, bit for bit.

pyDatalog compares constants with Python's ``==`` (``0``, ``0.0`` and ``False`` are one
key in its tables), as our python engine's row sets do; the tests compare the rows with
their types and float bits and find them identical.

One pyDatalog setting matters: by default pyDatalog rounds every float it stores to about 8
significant digits (``pyEngine.Float_Precision = 8``: 27 of the 52 mantissa bits are kept),
which changes the costs (TPC-H q3 under io: BestCost differs in the 8th-9th significant digit)
and could merge distinct ones. The evaluation runs with
``Float_Precision = None`` (floats kept exactly) and restores the previous value afterwards.

pyDatalog keeps global state (a per-thread database, module-level settings and resolvers):
each evaluation clears the database before and after (``pyDatalog.clear()``), registers its
resolvers only for its own duration and is serialised by a lock, so the functions can be
called repeatedly in one process. pyDatalog evaluates by SLG resolution with tabling (top
down), independently of our semi-naive engines; it is slow, so it is for small queries
(≤ 4 relations in the tests).
"""

from __future__ import annotations

import builtins as python_builtins
import keyword
import math
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from reopt.costmodel.builtins import BUILTINS, Builtin
from reopt.costmodel.errors import ReoptError
from reopt.costmodel.space import PlanSpace
from reopt.evaluator.ast import (
    Aggregate,
    Arith,
    Atom,
    Comparison,
    Const,
    Literal,
    Rule,
    Var,
    Wildcard,
)
from reopt.evaluator.driver import INPUTS

VAR_PREFIX = "V_"
WILDCARD_PREFIX = "W_"
AGG_PREFIX = "Agg_"
_RESERVED = (VAR_PREFIX, WILDCARD_PREFIX, AGG_PREFIX)

_OPS = {"=": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_AGGREGATES = {"min": "min_", "max": "max_"}

_LOCK = threading.Lock()


class PyDatalogCheckError(ReoptError):
    """The program cannot be translated to pyDatalog, or pyDatalog's evaluation failed."""


# -- translation -----------------------------------------------------------------------------
def _builtins_of(program: Any) -> Mapping[str, Builtin]:
    return getattr(program, "builtins", None) or BUILTINS


def _check_pred_name(pred: str) -> None:
    """Predicates keep their names, so a name must not mean something else in pyDatalog
    source: a Python keyword or builtin, a pyDatalog aggregate, or one of our prefixes."""
    from pyDatalog.pyDatalog import ATOMS

    if (not pred.isidentifier() or keyword.iskeyword(pred) or hasattr(python_builtins, pred)
            or pred in ATOMS or pred.startswith(_RESERVED)):
        raise PyDatalogCheckError(f"relation name {pred!r} cannot be a pyDatalog predicate")


def literal(value: Any) -> str:
    """A constant as Python source that evaluates to exactly that value."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, bool | int | float | str):
        return repr(value)
    raise PyDatalogCheckError(f"constant {value!r} has no pyDatalog literal")


def _vars(terms: Iterable[Any]) -> set[str]:
    out: set[str] = set()
    for t in terms:
        if isinstance(t, Var):
            out.add(t.name)
        elif isinstance(t, Arith):
            out |= t.vars()
    return out


def order_body(body: Iterable[Literal], builtins: Mapping[str, Builtin]) -> list[Literal]:
    """Body literals in evaluation order: repeatedly the earliest one that can run with the
    variables bound so far (built-in inputs, negated atoms and comparisons need theirs; ``=``
    may bind one side). The same rule as :meth:`reopt.evaluator.compiler._Compiler.order`."""

    def ready(lit: Literal, bound: set[str]) -> bool:
        if isinstance(lit, Comparison):
            need = _vars((lit.left, lit.right))
            if lit.op != "=" or not need - bound:
                return need <= bound
            return any(isinstance(a, Var) and {a.name} == need - bound and _vars((b,)) <= bound
                       for a, b in ((lit.left, lit.right), (lit.right, lit.left)))
        if lit.is_builtin:
            ins = lit.args[: len(builtins[lit.pred].inputs)]
            return _vars(ins) <= bound and not any(isinstance(t, Wildcard) for t in ins)
        return not lit.negated or _vars(lit.args) <= bound

    todo, out, bound = list(body), [], set()
    while todo:
        lit = next((x for x in todo if ready(x, bound)), None)
        if lit is None:
            raise PyDatalogCheckError(f"{todo[0].pos}: cannot order '{todo[0]}': unbound inputs")
        todo.remove(lit)
        out.append(lit)
        if isinstance(lit, Comparison):
            bound |= _vars((lit.left, lit.right)) if lit.op == "=" else set()
        elif not lit.negated:
            bound |= _vars(lit.args)
    return out


class _RuleText:
    """Translates the terms and literals of one rule (fresh wildcard names per rule)."""

    def __init__(self) -> None:
        self.wildcards = 0

    def term(self, t: Any) -> str:
        if isinstance(t, Var):
            return VAR_PREFIX + t.name
        if isinstance(t, Wildcard):
            self.wildcards += 1
            return f"{WILDCARD_PREFIX}{self.wildcards}"
        if isinstance(t, Const):
            return literal(t.value)
        if isinstance(t, Arith):
            return f"({self.term(t.left)} {t.op} {self.term(t.right)})"
        raise PyDatalogCheckError(f"unexpected term {t!r}")

    def atom(self, a: Atom) -> str:
        _check_pred_name(a.pred)
        text = f"{a.pred}({', '.join(self.term(t) for t in a.args)})"
        return f"~{text}" if a.negated else text

    def comparison(self, c: Comparison, bound: set[str]) -> str:
        """``(left op right)`` with a variable on the left (the free one of a binding ``=``).
        Two constants are compared through a fresh variable: ``(W_n == a) & (W_n op b)``."""
        left, op, right = c.left, c.op, c.right
        if isinstance(left, Wildcard) or isinstance(right, Wildcard):
            raise PyDatalogCheckError(f"{c.pos}: '_' in a comparison")
        if isinstance(left, Const) and isinstance(right, Const):
            w = self.term(Wildcard())
            return f"({w} == {literal(left.value)}) & ({w} {_OPS[op]} {literal(right.value)})"
        right_free = isinstance(right, Var) and right.name not in bound
        left_free = isinstance(left, Var) and left.name not in bound
        if isinstance(left, Const) or (right_free and not left_free):
            left, right, op = right, left, _FLIP[op]
        return f"({self.term(left)} {_OPS[op]} {self.term(right)})"


def translate_rule(rule: Rule, builtins: Mapping[str, Builtin], index: int) -> list[str]:
    """The pyDatalog clauses (source lines) of one rule: one, or two for an aggregate."""
    if not rule.body:
        raise PyDatalogCheckError(f"{rule.pos}: a rule without a body")
    rt = _RuleText()
    body: list[str] = []
    bound: set[str] = set()
    for lit in order_body(rule.body, builtins):
        if isinstance(lit, Comparison):
            body.append(rt.comparison(lit, bound))
            if lit.op == "=":
                bound |= _vars((lit.left, lit.right))
        else:
            body.append(rt.atom(lit))
            if not lit.negated:
                bound |= _vars(lit.args)
    body_text = " & ".join(body)
    _check_pred_name(rule.head.pred)
    agg = rule.aggregate
    if agg is None:
        return [f"{rt.atom(rule.head)} <= {body_text}"]
    if agg.func not in _AGGREGATES:
        raise PyDatalogCheckError(f"{rule.pos}: aggregate {agg.func} has no pyDatalog form")
    # the rule feeds the aggregate's inputs; translate() aggregates them once per relation
    head_args = [rt.term(agg.var if isinstance(t, Aggregate) else t) for t in rule.head.args]
    return [f"{AGG_PREFIX}in_{rule.head.pred}({', '.join(head_args)}) <= {body_text}"]


def translate_aggregate(pred: str, arity: int, pos: int, func: str) -> list[str]:
    """``pred`` = the min/max over the union of its rules' bodies (``Agg_in_pred``)."""
    keys = [f"{VAR_PREFIX}_key{i}" for i in range(arity) if i != pos]
    value = f"{VAR_PREFIX}_value"
    args = keys[:pos] + [value] + keys[pos:]
    fn = f"{AGG_PREFIX}{pred}[{', '.join(keys) or '0'}]"
    inputs = f"{AGG_PREFIX}in_{pred}({', '.join(args)})"
    return [
        f"({fn} == {_AGGREGATES[func]}({value}, order_by={value})) <= {inputs}",
        f"{pred}({', '.join(args)}) <= ({fn} == {value})",
    ]


def needed_rules(program: Any, preds: Iterable[str]) -> list[Rule]:
    """The rules the relations ``preds`` depend on (so a check of BestCost does not ask
    pyDatalog to evaluate the bound rules, whose aggregates recurse)."""
    todo, need = list(preds), set()
    while todo:
        p = todo.pop()
        if p in need:
            continue
        need.add(p)
        for r in program.rules:
            if r.head.pred == p:
                todo.extend(lit.pred for lit in r.body
                            if isinstance(lit, Atom) and not lit.is_builtin)
    return [r for r in program.rules if r.head.pred in need]


def translate(program: Any, preds: Iterable[str] | None = None) -> str:
    """The rules of ``program`` (a CompiledProgram or an ast.Program) as pyDatalog source;
    with ``preds``, only those the relations ``preds`` depend on."""
    builtins = _builtins_of(program)
    lines: list[str] = []
    rules = program.rules if preds is None else needed_rules(program, preds)
    aggregates: dict[str, tuple[int, int, str]] = {}
    for i, rule in enumerate(rules):
        lines.append(f"# {rule}")
        lines.extend(translate_rule(rule, builtins, i))
        agg = rule.aggregate
        if agg is not None:
            pos = rule.head.args.index(agg)
            aggregates.setdefault(rule.head.pred, (len(rule.head.args), pos, agg.func))
    for pred, shape in aggregates.items():
        lines.append(f"# {pred}: the aggregate over its rules")
        lines.extend(translate_aggregate(pred, *shape))
    return "\n".join(lines) + "\n"


def _inputs(program: Any) -> Mapping[str, tuple[str, ...]]:
    return getattr(program, "inputs", None) or INPUTS


def arities(program: Any) -> dict[str, int]:
    """The number of arguments of every relation: facts, inputs, rule heads."""
    out = {p: len(rows[0]) for p, rows in program.facts.items() if rows}
    out.update({p: len(types) for p, types in _inputs(program).items()})
    for rule in program.rules:
        out[rule.head.pred] = len(rule.head.args)
    return out


# -- evaluation ------------------------------------------------------------------------------
def _resolver(b: Builtin, ctx: Mapping[int, PlanSpace]):
    n_in = len(b.inputs)

    def resolve(*terms):
        if not all(t.is_const() for t in terms[:n_in]):
            raise PyDatalogCheckError(f"{b.name} called with unbound inputs")
        args = tuple(t.id for t in terms[:n_in])
        for out in b.fn(ctx, *args):
            yield args + tuple(out)

    return resolve


def _used_builtins(program: Any) -> dict[str, Builtin]:
    builtins = _builtins_of(program)
    used = {lit.pred for r in program.rules for lit in r.body
            if isinstance(lit, Atom) and lit.is_builtin}
    missing = used - set(builtins)
    if missing:
        raise PyDatalogCheckError(f"unknown built-in functions {sorted(missing)}")
    return {name: builtins[name] for name in sorted(used)}


def pydatalog_relations(
    program: Any, spaces: Mapping[int, PlanSpace], preds: Iterable[str] = ("BestCost",)
) -> dict[str, set[tuple]]:
    """Evaluate ``program`` with pyDatalog for the queries ``spaces`` (``{q: PlanSpace}``)
    and return the rows of the relations ``preds``."""
    from pyDatalog import pyDatalog, pyEngine

    preds = list(preds)
    source = translate(program, preds)
    n_args = arities(program)
    unknown = [p for p in preds if p not in n_args]
    if unknown:
        raise PyDatalogCheckError(f"no relation {', '.join(unknown)} in the program")
    ctx = dict(spaces)
    resolvers = {f"{b.name}/{b.arity}": _resolver(b, ctx)
                 for b in _used_builtins(program).values()}
    with _LOCK:
        saved_precision = pyEngine.Float_Precision
        saved_resolvers = {k: pyEngine.Python_resolvers[k]
                           for k in resolvers if k in pyEngine.Python_resolvers}
        pyDatalog.clear()
        try:
            pyEngine.Float_Precision = None
            pyEngine.Python_resolvers.update(resolvers)
            for pred, rows in program.facts.items():
                for row in rows:
                    pyDatalog.assert_fact(pred, *row)
            for q, space in ctx.items():  # the input relation, as driver.evaluate builds it
                pyDatalog.assert_fact("Expr", q, *space.root)
            pyDatalog.load(source)
            out: dict[str, set[tuple]] = {}
            for pred in preds:
                args = ", ".join(f"X{i}" for i in range(n_args[pred]))
                answer = pyDatalog.ask(f"{pred}({args})")
                out[pred] = set() if answer is None else {tuple(r) for r in answer.answers}
            return out
        finally:
            pyDatalog.clear()
            pyEngine.Float_Precision = saved_precision
            for k in resolvers:
                pyEngine.Python_resolvers.pop(k, None)
            pyEngine.Python_resolvers.update(saved_resolvers)


def pydatalog_best_costs(program: Any, spaces: Mapping[int, PlanSpace]) -> set[tuple]:
    """BestCost rows ``(q, expr, prop, cost)`` computed by pyDatalog (see the module doc)."""
    return pydatalog_relations(program, spaces, ("BestCost",))["BestCost"]
