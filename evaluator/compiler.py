"""Compile a datalog program into semi-naive delta plans, one engine-neutral list of ops per
rule variant, grouped in strata.

Steps: check the program (arities, built-ins, safety) → infer column types → dependency graph
→ strongly connected components in topological order (strata; negation and aggregation must
reach strictly lower strata) → for every rule its *base* variant (every atom reads the full
relation; run once when the stratum starts) and, for every body atom of a relation defined in
the same stratum, a *delta* variant in which that atom reads only the tuples new in the last
iteration, atoms before it read the full relation and atoms after it the relation as it was
before the last iteration (so each new derivation is found once).

Each variant is a pipeline of :class:`Scan` (join with a relation, or anti-join when negated),
:class:`Call` (a built-in function: bind inputs, expand outputs) and :class:`Filter`
(comparison) ops, ending in a projection onto the head. The ``python`` and ``spark`` engines
both interpret exactly these ops.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from reopt.costmodel.builtins import BOOLEAN, DOUBLE, LONG, STRING, Builtin
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
from reopt.evaluator.budget import Budget
from reopt.evaluator.features import Features, Schedule, read_features

FULL, DELTA, OLD = "full", "delta", "old"


class RuleError(ReoptError):
    """The rules are well-formed text but not a valid program (names file, line, column)."""


@dataclass(frozen=True)
class Scan:
    pred: str
    version: str
    args: tuple[Term, ...]
    negated: bool = False


@dataclass(frozen=True)
class Call:
    name: str
    inputs: tuple[Term, ...]
    outputs: tuple[Term, ...]


@dataclass(frozen=True)
class Filter:
    op: str
    left: Term
    right: Term


Op = Scan | Call | Filter

COMPARE = {
    "=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
}
"""A :class:`Filter`'s comparison by its operator (on values, or elementwise on arrays)."""


@dataclass(frozen=True)
class Variant:
    rule: Rule
    delta_atom: int | None
    """Index in the rule body of the atom that reads the delta; None for the base variant."""
    ops: tuple[Op, ...]
    head_pred: str
    head: tuple[Term | Aggregate, ...]
    embeds: tuple[int, ...] | None = None
    """When the head repeats every column of the delta atom: the head position of each of the
    atom's columns. Each head tuple this variant derives then contains the delta tuple it came
    from, so deleting that tuple deletes exactly the head tuples that contain it."""
    delta_pred: str | None = None
    """The relation of the delta atom (None for the base variant)."""

    def keeps_key(self, n: int) -> bool:
        """Whether the head starts with the delta atom's first ``n`` terms, all variables:
        every head tuple then has the leading ``n`` values (for a schedule's rank built-in,
        the rank) of the delta tuple it came from."""
        if self.delta_atom is None:
            return False
        lead = self.rule.body[self.delta_atom].args[:n]  # type: ignore[union-attr]
        return all(isinstance(t, Var) for t in lead) and tuple(self.head[:n]) == tuple(lead)

    @property
    def aggregate(self) -> tuple[int, Aggregate] | None:
        for i, a in enumerate(self.head):
            if isinstance(a, Aggregate):
                return i, a
        return None


@dataclass(frozen=True)
class RankSteps:
    """The steps that release one rank of a scheduled stratum, in order (both engines): all
    plain relations with tuples pending at the rank together; when none has any, one
    aggregate whose inputs in the stratum have nothing pending at the rank — its groups are
    then complete (README, "Scheduling and pruning")."""

    plain: tuple[str, ...]
    aggregates: tuple[tuple[str, tuple[str, ...]], ...]
    """Aggregate → its input relations in the stratum (other than itself)."""

    fused: tuple[tuple[str, ...], ...] | None = None
    """The steps of a rank as a fixed sequence — the plain relations, then each aggregate
    after its inputs — when :meth:`next` cannot choose otherwise: no rule of the stratum
    derives a plain relation's tuple from one of the same group key (hence of the same
    rank), and the aggregates fed at the same key are ordered. An engine may then release a
    whole rank before looking at what is pending (Spark: one job per rank, not per step);
    None when the rules do not allow it."""

    def next(self, pending: Callable[[str], bool]) -> tuple[list[str], bool]:
        """The relations to release next, given which have tuples pending at the rank, and
        whether that is an aggregate (done for the rank); ``[]`` when the rank is done."""
        plain = [p for p in self.plain if pending(p)]
        if plain:
            return plain, False
        for p, inputs in self.aggregates:
            if pending(p) and not any(pending(i) for i in inputs):
                return [p], True
        return [], False

    def walk(self, pending: Callable[[str], bool], done: set[str]
             ) -> Iterator[tuple[list[str], bool]]:
        """The next steps of the rank, as ``(relations, aggregate)``: one pass over
        :attr:`fused` — a step for each entry with tuples pending, asked lazily (the steps
        before it have run by then) — or else the single step :meth:`next` chooses. An
        aggregate released goes into ``done`` and is not released again at this rank. Both
        engines call it until it yields nothing; a Spark pass is one job."""
        if self.fused is None:
            step, aggregate = self.next(pending)
            if step:
                if aggregate:
                    done.add(step[0])
                yield step, aggregate
            return
        for entry in self.fused:
            aggregate = entry[0] not in self.plain
            if aggregate and entry[0] in done:
                continue
            step = [p for p in entry if pending(p)]
            if step:
                if aggregate:
                    done.add(entry[0])
                yield step, aggregate


@dataclass
class Stratum:
    preds: tuple[str, ...]
    recursive: bool
    base: list[Variant] = field(default_factory=list)
    deltas: list[Variant] = field(default_factory=list)
    schedule: Schedule | None = None
    """Set when the stratum's relations are released rank by rank (``.schedule``)."""
    steps: RankSteps | None = None
    """With ``schedule``: the order of the steps within a rank."""
    ondemand: bool = False
    """Its relations are derived when read (``.ondemand``): engines may leave it stale after
    an evaluation or update (:mod:`.features`)."""


@dataclass
class CompiledProgram:
    strata: list[Stratum]
    schemas: dict[str, tuple[str, ...]]
    facts: dict[str, list[tuple]]
    inputs: dict[str, tuple[str, ...]]
    builtins: dict[str, Builtin]
    directives: list[Directive]
    rules: list[Rule]
    features: Features = field(default_factory=Features)
    """Scheduling and the pruning features switched on (directives × enabled features)."""
    aggregates: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Aggregate relation → (position of the aggregated column, min|max): the value is the
    aggregate over the union of all its rules' bodies."""
    compile_seconds: float = 0.0
    """Wall time of reading, parsing and compiling the rule files (set by the driver; rules
    compiled before in the process are read and found compiled: :func:`.driver.load_program`)."""
    budget: Budget = field(default_factory=Budget)
    """The iterations and tuples an evaluation may take before it is stopped as having no
    fixpoint (set by the driver from ``--max-tuples``/``--max-iterations``)."""

    source: Any = None
    """What the program was compiled from (:class:`~reopt.evaluator.driver.ProgramSource`, set
    by the driver): a program pickles as its source, so it reaches Spark's workers and a saved
    session without its generated code, and is compiled again there (once per process)."""

    triggers: dict[str, list[Variant]] = field(default_factory=dict)
    """Relation → for every rule body atom of it, the variant that derives what depends on
    tuples of that relation being deleted (that atom reads the deleted tuples, atoms before
    it the relations without them, atoms after it the relations with them)."""

    derived: dict[tuple, Any] = field(default_factory=dict, init=False, repr=False,
                                      compare=False)
    """Structures read off this very program object (:meth:`memoized`): not copied by
    ``dataclasses.replace`` (a new program gets its own), not pickled; shared only by the
    equal programs :func:`~reopt.evaluator.driver.load_program` and
    :func:`~reopt.evaluator.driver.restore_program` hand out for the same rules (change a
    program's fields through ``replace``, never in place)."""

    def memoized(self, key: tuple, make: Callable[[], Any]) -> Any:
        """``make()``, once per program object and ``key``: what the maintained engines read
        off the program (the maintenance plan, the later strata's shapes) is then shared by
        every session of it, with the code generated for its cut variants (generated once
        per variant object) — a fleet of small queries no longer generates it per query."""
        hit = self.derived.get(key)
        if hit is None:
            hit = self.derived[key] = make()
        return hit

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        if self.source is None:
            raise ReoptError("a rule program compiled without its source cannot be saved or "
                             "sent to Spark workers (load it with driver.load_program)")
        from reopt.evaluator.driver import restore_program

        return restore_program, (self.source, self.budget)

    @property
    def ondemand(self) -> frozenset[str]:
        """The relations derived when read (``.ondemand``; their strata come last): those the
        features declare, which mark exactly their strata (:meth:`_Compiler.strata`)."""
        return self.features.ondemand

    def variants(self):
        for s in self.strata:
            yield from s.base
            yield from s.deltas


CONST, BOUND, SAME = "k", "c", "o"
"""Kinds of check in :func:`match_terms` (short: the Spark engine ships them to executors)."""


def match_terms(terms, bound) -> tuple[list[tuple[int, str, Any]], list[tuple[int, str]]]:
    """How an engine matches a tuple against terms (an atom's arguments or a built-in's
    outputs) given the variables already ``bound``: per position either a check —
    ``(j, CONST, value)``, ``(j, BOUND, name)`` for a variable bound before, ``(j, SAME, i)``
    for a variable repeated at an earlier position ``i`` of the same tuple — or a binding
    ``(j, name)`` of a new variable, in order; wildcards are neither. Both engines build their
    scans and calls from this, so they read the terms alike."""
    checks: list[tuple[int, str, Any]] = []
    binds: list[tuple[int, str]] = []
    first: dict[str, int] = {}
    for j, t in enumerate(terms):
        if isinstance(t, Wildcard):
            continue
        if isinstance(t, Const):
            checks.append((j, CONST, t.value))
        elif t.name in bound:
            checks.append((j, BOUND, t.name))
        elif t.name in first:
            checks.append((j, SAME, first[t.name]))
        else:
            first[t.name] = j
            binds.append((j, t.name))
    return checks, binds


def _err(pos: Pos, msg: str) -> RuleError:
    return RuleError(f"{pos}: {msg}")


_KIND = {LONG: "number", DOUBLE: "number", STRING: "string", BOOLEAN: "boolean"}
"""Column types that mix: long and double are both numbers."""


class _RuleTypes:
    """The kind of every variable of one rule, checked wherever the variable is used."""

    def __init__(self, rule: Rule, schemas: Mapping[str, tuple[str, ...]],
                 builtins: Mapping[str, Builtin]):
        self.rule, self.schemas, self.builtins = rule, schemas, builtins
        self.kinds: dict[str, tuple[str, str]] = {}
        """Variable → its kind and where it got it."""

    def check(self) -> None:
        rule = self.rule
        for lit in rule.body:
            if isinstance(lit, Atom):
                b = self.builtins.get(lit.pred)
                sig = b.inputs + b.outputs if lit.is_builtin and b else self.schemas[lit.pred]
                for i, (t, ty) in enumerate(zip(lit.args, sig, strict=True)):
                    self.expect(t, _KIND[ty], f"argument {i + 1} of {lit.pred}")
        for _ in range(2):  # an assignment may use a variable a later one binds
            for lit in rule.body:
                if isinstance(lit, Comparison):
                    self.comparison(lit)
        for i, (a, ty) in enumerate(zip(rule.head.args, self.schemas[rule.head.pred],
                                        strict=True)):
            term = a.var if isinstance(a, Aggregate) else a
            self.expect(term, _KIND[ty], f"column {i + 1} of {rule.head.pred}")

    def kind(self, t: Any) -> str | None:
        if isinstance(t, Const):
            return _KIND[_py_type(t.value)]
        if isinstance(t, Var):
            return self.kinds.get(t.name, (None, ""))[0]
        if isinstance(t, Arith):
            for side in (t.left, t.right):
                k = self.kind(side)
                if k not in (None, "number"):
                    raise _err(self.rule.pos, f"arithmetic on a {k}: {t} (in {self.rule})")
            return "number"
        return None

    def expect(self, t: Any, kind: str, where: str) -> None:
        if isinstance(t, Var):
            seen = self.kinds.setdefault(t.name, (kind, where))
            if seen[0] != kind:
                raise _err(self.rule.pos, f"{t.name} is a {seen[0]} ({seen[1]}) but {where} "
                                          f"is a {kind}")
        elif isinstance(t, (Const, Arith)):
            k = self.kind(t)
            if k != kind:
                raise _err(self.rule.pos, f"{where} is a {kind}, not a {k}: {t}")

    def comparison(self, c: Comparison) -> None:
        left, right = self.kind(c.left), self.kind(c.right)
        if c.op == "=" and (left is None) != (right is None):
            free, known = (c.left, right) if left is None else (c.right, left)
            self.expect(free, known, f"'{c}'")  # type: ignore[arg-type]
        elif left and right and left != right:
            raise _err(self.rule.pos, f"'{c}' compares a {left} with a {right}")


def _py_type(v: object) -> str:
    if isinstance(v, bool):
        return BOOLEAN
    if isinstance(v, int):
        return LONG
    if isinstance(v, float):
        return DOUBLE
    return STRING


def _drop_views(g: nx.DiGraph) -> None:
    """Drop the views (edges, degrees) networkx caches on graph ``g``: each holds the graph,
    a reference cycle that only the cyclic collector frees (a program compiled per
    optimizer left two a compilation); without them, reference counting frees it."""
    for name in [n for n in vars(g)
                 if isinstance(getattr(type(g), n, None), functools.cached_property)]:
        del g.__dict__[name]


class _Compiler:
    def __init__(self, prog: Program, builtins: Mapping[str, Builtin],
                 inputs: Mapping[str, tuple[str, ...]]):
        self.prog = prog
        self.builtins = dict(builtins)
        self.inputs = dict(inputs)
        self.arity: dict[str, tuple[int, Pos]] = {}
        self.idb = {r.head.pred for r in prog.rules}
        self.agg_shape: dict[str, tuple[tuple[int, str] | None, Pos]] = {}
        self.features = Features()

    # -- checks ------------------------------------------------------------------------------
    def check(self) -> None:
        for pred, n in self.inputs.items():
            self.arity[pred] = (len(n), Pos("<input>", 0, 0))
        for pred, rows in self.prog.facts.items():
            for row, pos in zip(rows, self.prog.fact_pos[pred], strict=True):
                self._arity(pred, len(row), pos)
        for rule in self.prog.rules:
            if rule.head.is_builtin:
                raise _err(rule.pos, f"cannot define built-in function {rule.head.pred}")
            if rule.head.pred in self.inputs:
                raise _err(rule.pos, f"{rule.head.pred} is an input relation; it has no rules")
            self._arity(rule.head.pred, len(rule.head.args), rule.head.pos)
            aggs = [a for a in rule.head.args if isinstance(a, Aggregate)]
            if len(aggs) > 1:
                raise _err(rule.pos, "at most one aggregate per rule head")
            shape = next(((i, a.func) for i, a in enumerate(rule.head.args)
                          if isinstance(a, Aggregate)), None)
            seen = self.agg_shape.setdefault(rule.head.pred, (shape, rule.pos))
            if seen[0] != shape:
                raise _err(rule.pos, f"every rule of {rule.head.pred} must aggregate the same "
                                     f"way (see {seen[1]})")
            for lit in rule.body:
                if isinstance(lit, Atom):
                    self._check_atom(lit)
            self._check_safety(rule)

    def _arity(self, pred: str, n: int, pos: Pos) -> None:
        seen = self.arity.get(pred)
        if seen is None:
            self.arity[pred] = (n, pos)
        elif seen[0] != n:
            raise _err(pos, f"{pred} has {n} arguments here but {seen[0]} at {seen[1]}")

    def _check_atom(self, atom: Atom) -> None:
        for a in atom.args:
            if isinstance(a, Arith):
                raise _err(atom.pos, f"arithmetic ({a}) is only allowed in rule heads and "
                                     "comparisons; bind it with '=' first")
        if atom.is_builtin:
            b = self.builtins.get(atom.pred)
            if b is None:
                known = ", ".join(sorted(self.builtins))
                raise _err(atom.pos, f"unknown built-in function {atom.pred} (known: {known})")
            if len(atom.args) != b.arity:
                raise _err(atom.pos, f"{atom.pred} takes {b.arity} arguments, got {len(atom.args)}")
            if atom.negated:
                raise _err(atom.pos, f"built-in {atom.pred} cannot be negated")
            return
        if atom.pred not in self.idb and atom.pred not in self.prog.facts \
                and atom.pred not in self.inputs:
            raise _err(atom.pos, f"relation {atom.pred} has no rules, no facts and is no input")
        self._arity(atom.pred, len(atom.args), atom.pos)

    def _check_safety(self, rule: Rule) -> None:
        order = self.order(rule, None)  # raises when a literal can never be evaluated
        bound = set()
        for i in order:
            bound |= self._binds(rule.body[i], bound)
        for a in rule.head.args:
            v = a.var if isinstance(a, Aggregate) else a
            if isinstance(v, Wildcard):
                raise _err(rule.pos, "'_' cannot appear in a rule head")
            if isinstance(v, Var) and v.name not in bound:
                raise _err(rule.pos, f"head variable '{v.name}' is not bound by the body")

    # -- evaluation order --------------------------------------------------------------------
    @staticmethod
    def _vars(terms) -> set[str]:
        out: set[str] = set()
        for t in terms:
            if isinstance(t, Var):
                out.add(t.name)
            elif isinstance(t, Arith):
                out |= t.vars()
        return out

    def _ready(self, lit: Literal, bound: set[str]) -> bool:
        if isinstance(lit, Comparison):
            need = self._vars((lit.left, lit.right))
            if lit.op == "=":
                free = need - bound
                if not free:
                    return True
                # ``x = <bound expression>`` binds x; arithmetic never binds its own variables
                return any(isinstance(a, Var) and {a.name} == free and
                           self._vars((b,)) <= bound
                           for a, b in ((lit.left, lit.right), (lit.right, lit.left)))
            return need <= bound
        if lit.is_builtin:
            n_in = len(self.builtins[lit.pred].inputs)
            return self._vars(lit.args[:n_in]) <= bound and not any(
                isinstance(t, Wildcard) for t in lit.args[:n_in]
            )
        if lit.negated:
            return self._vars(lit.args) <= bound
        return True

    def _binds(self, lit: Literal, bound: set[str]) -> set[str]:
        if isinstance(lit, Comparison):
            return self._vars((lit.left, lit.right)) if lit.op == "=" else set()
        if isinstance(lit, Atom) and lit.negated:
            return set()
        return self._vars(lit.args)

    def order(self, rule: Rule, first: int | None) -> list[int]:
        """Body literal order: ``first`` (the delta atom) leads, then the earliest ready one."""
        todo = list(range(len(rule.body)))
        out: list[int] = []
        bound: set[str] = set()
        if first is not None:
            todo.remove(first)
            out.append(first)
            bound |= self._binds(rule.body[first], bound)
        while todo:
            for i in todo:
                if self._ready(rule.body[i], bound):
                    break
            else:
                lit = rule.body[todo[0]]
                raise _err(lit.pos, f"cannot evaluate '{lit}': its inputs are never bound")
            todo.remove(i)
            out.append(i)
            bound |= self._binds(rule.body[i], bound)
        return out

    # -- types -------------------------------------------------------------------------------
    def infer_schemas(self) -> dict[str, tuple[str, ...]]:
        types: dict[str, list[str | None]] = {p: [None] * n for p, (n, _) in self.arity.items()}
        for pred, t in self.inputs.items():
            types[pred] = list(t)
        for pred, rows in self.prog.facts.items():
            for row in rows:
                for i, v in enumerate(row):
                    types[pred][i] = types[pred][i] or _py_type(v)
        changed = True
        while changed:
            changed = False
            for rule in self.prog.rules:
                var_t: dict[str, str] = {}
                for lit in rule.body:
                    if isinstance(lit, Atom):
                        if lit.is_builtin:
                            b = self.builtins[lit.pred]
                            sig = b.inputs + b.outputs
                        else:
                            sig = tuple(types[lit.pred])
                        for t, ty in zip(lit.args, sig, strict=True):
                            if isinstance(t, Var) and ty:
                                var_t.setdefault(t.name, ty)
                typed = -1
                while typed != len(var_t):  # an assignment may use a variable a later one binds
                    typed = len(var_t)
                    for lit in rule.body:
                        if isinstance(lit, Comparison) and lit.op == "=":
                            for a, b in ((lit.left, lit.right), (lit.right, lit.left)):
                                if isinstance(a, Var) and a.name not in var_t:
                                    ty = self._term_type(b, var_t)
                                    if ty:
                                        var_t[a.name] = ty
                head_t = types[rule.head.pred]
                for i, a in enumerate(rule.head.args):
                    ty = None
                    if isinstance(a, Aggregate):
                        ty = var_t.get(a.var.name)
                    elif isinstance(a, Var):
                        ty = var_t.get(a.name)
                    else:
                        ty = self._term_type(a, var_t)
                    if ty and head_t[i] is None:
                        head_t[i] = ty
                        changed = True
        out = {}
        for pred, ts in types.items():
            if any(t is None for t in ts):
                raise _err(self.arity[pred][1], f"cannot infer the column types of {pred}")
            out[pred] = tuple(ts)  # type: ignore[arg-type]
        return out

    @staticmethod
    def _term_type(t, var_t: Mapping[str, str]) -> str | None:
        if isinstance(t, Const):
            return _py_type(t.value)
        if isinstance(t, Var):
            return var_t.get(t.name)
        if isinstance(t, Arith):
            sides = [_Compiler._term_type(x, var_t) for x in (t.left, t.right)]
            if None in sides:
                return None
            return DOUBLE if DOUBLE in sides else LONG
        return None

    def check_types(self, schemas: Mapping[str, tuple[str, ...]]) -> None:
        """Reject a rule that mixes kinds of values (number, string, boolean) in one
        variable, an argument, arithmetic or a comparison. Inference takes each column's type
        from the first rule that fixes it; without this check a mismatch would surface as a
        TypeError deep inside an engine, or as a join that silently never matches."""
        for rule in self.prog.rules:
            _RuleTypes(rule, schemas, self.builtins).check()

    # -- strata ------------------------------------------------------------------------------
    def components(self) -> list[tuple[tuple[str, ...], bool]]:
        """The strongly connected components of the derived relations' dependency graph in
        topological order (ties by their least relation's name), each as its relations,
        sorted, and whether it is recursive."""
        g = nx.DiGraph()
        g.add_nodes_from(self.idb)
        for rule in self.prog.rules:
            for lit in rule.body:
                if isinstance(lit, Atom) and not lit.is_builtin and lit.pred in self.idb:
                    g.add_edge(lit.pred, rule.head.pred)
        for sel in self.features.aggsel.values():
            g.add_edge(sel.agg, sel.target)  # the target's fixpoint consults the aggregate
        for target, bound in self.features.bound.items():
            if bound in self.idb and not nx.has_path(g, target, bound):
                g.add_edge(bound, target)  # bounds in force while the target is derived
        cond = nx.condensation(g)
        out = []
        for c in nx.lexicographical_topological_sort(
            cond, key=lambda c: min(cond.nodes[c]["members"])
        ):
            preds = tuple(sorted(cond.nodes[c]["members"]))
            out.append((preds, len(preds) > 1 or g.has_edge(preds[0], preds[0])))
        _drop_views(g)
        _drop_views(cond)
        return out

    def strata(self) -> list[Stratum]:
        out: list[Stratum] = []
        for preds, recursive in self.components():
            schedules = {self.features.schedules.get(p) for p in preds}
            if len(schedules) > 1:
                d = next(d for d in self.prog.directives
                         if d.name == "schedule" and set(d.args[2:]) & set(preds))
                raise RuleError(f"{d.pos}: .schedule: relations {', '.join(preds)} are mutually "
                                "recursive, so .schedule must list all of them in one directive")
            schedule = schedules.pop()
            lazy = {p in self.features.ondemand for p in preds}
            assert len(lazy) == 1, preds  # (a recursion reads each of its relations)
            stratum = Stratum(preds, recursive, schedule=schedule, ondemand=lazy.pop())
            for rule in self.prog.rules:
                if rule.head.pred not in preds:
                    continue
                rec = [i for i, lit in enumerate(rule.body)
                       if isinstance(lit, Atom) and not lit.is_builtin and lit.pred in preds]
                for i in rec:
                    lit = rule.body[i]
                    if lit.negated:
                        raise _err(lit.pos, f"negation of {lit.pred} inside its own recursion "
                                            "is not stratifiable")
                    if rule.aggregate is not None and schedule is None:
                        raise _err(rule.pos, f"aggregate over {lit.pred} inside its own "
                                             "recursion is not stratifiable (declare a "
                                             ".schedule for the recursion)")
                stratum.base.append(self.variant(rule, None, set(preds)))
                for i in rec:
                    stratum.deltas.append(self.variant(rule, i, set(preds)))
            if schedule is not None:
                stratum.steps = self.rank_steps(stratum)
            out.append(stratum)
        # on-demand strata last: no other stratum reads them (read_features checks), so the
        # order stays topological, and every deletion pruning makes comes before them — so
        # deriving them whenever they are read gives what an evaluation in this order gives
        return sorted(out, key=lambda s: s.ondemand)

    def rank_steps(self, stratum: Stratum) -> RankSteps:
        aggs = {p for p, (shape, _) in self.agg_shape.items() if shape is not None}
        inputs = {p: sorted({lit.pred for v in stratum.base if v.head_pred == p
                             for lit in v.rule.body
                             if isinstance(lit, Atom) and lit.pred in stratum.preds} - {p})
                  for p in stratum.preds if p in aggs}
        plain = tuple(p for p in stratum.preds if p not in aggs)
        ordered = tuple((p, tuple(i)) for p, i in inputs.items())
        return RankSteps(plain, ordered, self.fused_steps(stratum, plain, ordered))

    def fused_steps(self, stratum: Stratum, plain: tuple[str, ...],
                    aggregates: tuple[tuple[str, tuple[str, ...]], ...]
                    ) -> tuple[tuple[str, ...], ...] | None:
        """:attr:`RankSteps.fused`: the order :meth:`RankSteps.next` follows whatever is
        pending, or None. A rule deriving a tuple from one with the same group key (the
        rank built-in's inputs, the same variables in head and delta atom) keeps the rank;
        any other is taken to leave it (the engines check at run time that a released rank
        gets no more tuples). Same-rank derivations into a plain relation would make
        :meth:`~RankSteps.next` go back to the plain step, so they rule fusion out; among
        aggregates, :meth:`~RankSteps.next` takes the first ready one in ``aggregates``
        order, which is Kahn's order below."""
        assert stratum.schedule is not None
        n_key = len(self.builtins[stratum.schedule.rank].inputs)
        if any(v.head_pred in plain and v.keeps_key(n_key) for v in stratum.deltas):
            return None
        order: list[str] = []
        left = dict(aggregates)
        while left:
            ready = next((p for p, ins in left.items()
                          if not any(i in left for i in ins)), None)
            if ready is None:
                return None  # aggregates feeding each other: let the pending tuples decide
            order.append(ready)
            del left[ready]
        return (plain, *((p,) for p in order)) if plain else tuple((p,) for p in order)

    def triggers(self) -> dict[str, list[Variant]]:
        out: dict[str, list[Variant]] = {}
        for rule in self.prog.rules:
            for i, lit in enumerate(rule.body):
                if isinstance(lit, Atom) and not lit.is_builtin and not lit.negated:
                    v = self.variant(rule, i, {lit.pred for lit in rule.body
                                               if isinstance(lit, Atom)}, deleting=True)
                    out.setdefault(lit.pred, []).append(v)
        return out

    def variant(self, rule: Rule, delta: int | None, stratum: set[str],
                deleting: bool = False) -> Variant:
        ops: list[Op] = []
        before, after = (OLD, FULL) if deleting else (FULL, OLD)
        for i in self.order(rule, delta):
            lit = rule.body[i]
            if isinstance(lit, Comparison):
                ops.append(Filter(lit.op, lit.left, lit.right))
            elif lit.is_builtin:
                n_in = len(self.builtins[lit.pred].inputs)
                ops.append(Call(lit.pred, lit.args[:n_in], lit.args[n_in:]))
            else:
                version = FULL
                if delta is not None and lit.pred in stratum:
                    version = DELTA if i == delta else before if i < delta else after
                ops.append(Scan(lit.pred, version, lit.args, lit.negated))  # type: ignore[arg-type]
        embeds = None
        if delta is not None:
            args = rule.body[delta].args  # type: ignore[union-attr]
            names = [a.name for a in args if isinstance(a, Var)]
            where = {a.name: i for i, a in enumerate(rule.head.args) if isinstance(a, Var)}
            if len(names) == len(args) == len(set(names)) and set(names) <= set(where):
                embeds = tuple(where[n] for n in names)
        delta_pred = rule.body[delta].pred if delta is not None else None  # type: ignore[union-attr]
        return Variant(rule, delta, tuple(ops), rule.head.pred, rule.head.args, embeds,
                       delta_pred)


def _bind_head_arithmetic(rule: Rule) -> Rule:
    """``H(x, a - b) :- body`` becomes ``H(x, _0) :- body, _0 = a - b``: engines evaluate
    arithmetic only in comparisons."""
    if not any(isinstance(a, Arith) for a in rule.head.args):
        return rule
    args: list[Term | Aggregate] = []
    extra: list[Literal] = []
    for i, a in enumerate(rule.head.args):
        if isinstance(a, Arith):
            v = Var(f"_{i}")
            extra.append(Comparison("=", v, a, rule.head.pos))
            a = v
        args.append(a)
    head = Atom(rule.head.pred, tuple(args), rule.head.pos, rule.head.negated)
    return Rule(head, rule.body + tuple(extra), rule.label)


def compile_program(
    prog: Program,
    builtins: Mapping[str, Builtin],
    inputs: Mapping[str, tuple[str, ...]],
    features: frozenset[str] | set[str] = frozenset(),
) -> CompiledProgram:
    """Check and compile ``prog``; ``inputs`` are relations the caller supplies (name → types);
    ``features`` are the pruning features to switch on where the rules declare them."""
    prog = Program(
        rules=[_bind_head_arithmetic(r) for r in prog.rules],
        facts=prog.facts, fact_pos=prog.fact_pos, directives=prog.directives,
    )
    c = _Compiler(prog, builtins, inputs)
    c.check()
    c.features = read_features(prog.directives, prog.rules,
                               {p: n for p, (n, _) in c.arity.items()}, c.builtins,
                               frozenset(features))
    schemas = c.infer_schemas()
    c.check_types(schemas)
    return CompiledProgram(
        strata=c.strata(),
        schemas=schemas,
        facts={p: list(dict.fromkeys(rows)) for p, rows in prog.facts.items()},
        inputs=dict(inputs),
        builtins=dict(builtins),
        directives=list(prog.directives),
        rules=list(prog.rules),
        features=c.features,
        triggers=c.triggers(),
        aggregates={p: shape for p, (shape, _) in c.agg_shape.items() if shape is not None},
    )


__all__ = [
    "FULL", "DELTA", "OLD", "Scan", "Call", "Filter", "Op", "Variant", "Stratum", "RankSteps",
    "CompiledProgram", "RuleError", "compile_program", "LONG", "DOUBLE", "STRING", "BOOLEAN",
]
