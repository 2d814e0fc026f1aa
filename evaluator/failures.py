"""Turning a crash inside a rule's evaluation into one line about the rule.

Rules compute values (``e2 = e + 1``) that they may then hand to built-in functions; a
built-in given a relation set its query does not have fails deep inside the plan space with an
``IndexError`` or a ``KeyError``. Checking every input of every call would slow the hot loop of
every evaluation, so nothing is checked up front: when a variant fails, :func:`describe`
finds the built-in call that failed in the traceback (zero cost until something fails) and
says which rule passed which inputs and what is wrong with them — on the python engine as a
:class:`RuleError` (:func:`rule_failure`), inside a Spark task as a ReoptError the task raises
and the driver reports as it is (:func:`executor_failure`).
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from typing import Any

from reopt.costmodel.builtins import Builtin
from reopt.costmodel.errors import ReoptError
from reopt.evaluator.ast import Rule
from reopt.evaluator.compiler import RuleError, Variant

_SHOWN = 6
"""Inputs shown of a failed call (a cost built-in takes a dozen)."""


CRASHES = (LookupError, ArithmeticError, TypeError, ValueError, AttributeError,
           AssertionError)
"""What evaluating a rule raises when the rule hands a built-in inputs it cannot take (a
relation set the query does not have): reported in the rules' terms."""


def failed_call(err: BaseException, builtins: Mapping[str, Builtin]
                ) -> tuple[str, tuple] | None:
    """The innermost built-in call in ``err``'s traceback: its name and its inputs (the
    tuple form's arguments after ``ctx``), or None when no built-in was running."""
    codes = {f.__code__: name for name, b in builtins.items()
             for f in (b.fn, b.one) if hasattr(f, "__code__")}  # (one: bound directly)
    found = None
    for frame, _ in traceback.walk_tb(err.__traceback__):
        name = codes.get(frame.f_code)
        if name is not None:
            code = frame.f_code
            params = code.co_varnames[1:code.co_argcount]
            found = (name, tuple(frame.f_locals.get(p) for p in params))
    return found


def bad_input(inputs: tuple, ctx: Mapping[int, Any]) -> str | None:
    """What is wrong with a built-in's ``(q, expr, …)`` inputs, if the query id or the
    relation set is the problem (the usual one: a rule computed a relation set)."""
    if len(inputs) < 2 or not all(isinstance(x, int) for x in inputs[:2]):
        return None
    q, expr = inputs[:2]
    space = ctx.get(q)
    if space is None:
        return f"{q} is not the id of a query of this evaluation"
    if not space.is_expression(expr):
        return (f"{expr} is not a relation set of query {space.query.name} (built-ins take "
                "the relation sets that Expr and their own outputs give, not computed ones)")
    return None


def call_failure(err: BaseException, builtins: Mapping[str, Builtin],
                 ctx: Mapping[int, Any]) -> str | None:
    """``called Fn_x(inputs), which failed: why`` for the built-in call that raised ``err``,
    or None when the failure was not inside a built-in."""
    call = failed_call(err, builtins)
    if call is None:
        return None
    name, inputs = call
    shown = ", ".join(repr(x) for x in inputs[:_SHOWN]) + (", …" if len(inputs) > _SHOWN else "")
    why = bad_input(inputs, ctx) or _cause(err)
    return f"called {name}({shown}), which failed: {why}"


def _cause(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".splitlines()[0][:200]


def rule_label(rule: Rule) -> str:
    """``file:line:col: rule <the rule>``, the rule cut to 120 characters."""
    text = str(rule)
    if len(text) > 120:
        text = text[:117] + "..."
    return f"{rule.pos}: rule {text}"


def describe(label: str, err: BaseException, builtins: Mapping[str, Builtin],
             ctx: Mapping[int, Any]) -> str:
    """One line: the rule (``label``, :func:`rule_label`), the built-in call that failed and
    why — or, when no built-in was running, the exception."""
    call = call_failure(err, builtins, ctx)
    return f"{label} {call}" if call else f"{label}: evaluating it failed: {_cause(err)}"


def rule_failure(v: Variant, err: Exception, builtins: Mapping[str, Builtin],
                 ctx: Mapping[int, Any]) -> RuleError:
    """The error a variant's crash becomes on the python engine."""
    return RuleError(describe(rule_label(v.rule), err, builtins, ctx))


def executor_failure(label: str, err: BaseException, builtins: Mapping[str, Builtin],
                     ctx: Mapping[int, Any]) -> ReoptError:
    """The same inside a Spark task: raised there, its one line is what the driver reports
    (:func:`reopt.spark.worker_reopt_error`)."""
    return ReoptError(describe(label, err, builtins, ctx))
