"""Decomposability: whether a rule program evaluates one query at a time.

A program is *decomposable* on a partitioning column (BigDatalog, SIGMOD 2016: "decomposable
programs") when evaluating it over the union of many partitions' inputs gives the union of
evaluating it over each partition alone. Then a Spark task can run the whole fixpoint — and
every later update — for the queries of its partition, with no exchange between tasks, and an
evaluation costs a fixed handful of jobs whatever the number of ranks or queries
(:mod:`reopt.fleet`).

The shipped rules are decomposable on the query id, the first column of every derived
relation. This module checks a program for that, rule by rule, and says why not:

* every derived relation and every input relation is partitioned on its first column;
  relations defined only by facts without a query id (``JoinMethod(join)``) are replicated
  to every partition, so rules may join with them freely;
* in every rule, one variable — the rule's partition variable — is the first argument of the
  head and of every partitioned body atom, negated ones included: the rule then only ever
  combines tuples of one partition, and its head stays in it;
* every built-in that reads a plan space (all but arithmetic such as ``Fn_sum``) receives
  the partition variable as its first argument: it answers from one query's plan space,
  which a task holds only for its own queries;
* an aggregate groups by the partition column (it is in the head's key), and a partitioned
  relation has no facts (a fact's query id would tie it to one query of a batch).
"""

from __future__ import annotations

from dataclasses import dataclass

from reopt.evaluator.ast import Aggregate, Atom, Rule, Var
from reopt.evaluator.compiler import CompiledProgram


@dataclass(frozen=True)
class Decomposition:
    """The answer for one program: decomposable on column 0 of ``partitioned``, or why not."""

    partitioned: frozenset[str]
    """Relations partitioned on their first column (derived ones and inputs)."""
    replicated: frozenset[str]
    """Fact-only relations every partition reads in full."""
    reason: str = ""
    """Empty when decomposable; else the first rule (file:line) that is not, and why."""

    @property
    def decomposable(self) -> bool:
        return not self.reason


def decomposition(program: CompiledProgram) -> Decomposition:
    """Check ``program`` for decomposability on the first column of its relations."""
    derived = {r.head.pred for r in program.rules}
    partitioned = frozenset(derived | set(program.inputs))
    replicated = frozenset(set(program.facts) - partitioned)
    for pred in sorted(partitioned & set(program.facts)):
        if program.facts[pred]:
            return Decomposition(partitioned, replicated,
                                 f"relation {pred} is derived or an input and also has facts: "
                                 "a fact's first column would tie it to one query of a batch")
    for rule in program.rules:
        why = _rule_reason(rule, partitioned, program)
        if why:
            return Decomposition(partitioned, replicated, f"{rule.pos}: {why}")
    return Decomposition(partitioned, replicated)


def _rule_reason(rule: Rule, partitioned: frozenset[str], program: CompiledProgram) -> str:
    """Why ``rule`` combines tuples of different partitions, or empty if it cannot."""
    head = rule.head
    if not head.args or not isinstance(head.args[0], Var):
        return (f"the head {head} does not carry a variable in its first column, the "
                "partitioning column (a query id)")
    if isinstance(head.args[0], Aggregate):
        return f"the head {head} aggregates its first column, the partitioning column"
    part = head.args[0].name
    anchored = False
    for lit in rule.body:
        if not isinstance(lit, Atom):
            continue
        spatial = lit.is_builtin and program.builtins[lit.pred].reads_space
        if spatial or lit.pred in partitioned:
            first = lit.args[0] if lit.args else None
            if not isinstance(first, Var) or first.name != part:
                what = "built-in" if lit.is_builtin else "atom"
                return (f"the {what} {lit} does not take the head's first variable '{part}' "
                        "as its first argument, so the rule would combine tuples of "
                        "different partitions (queries)")
            anchored = anchored or not lit.negated
    if not anchored:
        return (f"no positive body atom binds the head's first variable '{part}' to a "
                "partition (query id)")
    return ""
