"""Incremental maintenance of the live layer's later strata (those after the maintained one).

After an update the maintained stratum's relations change in a few groups, yet the strata
that read them (for the optimizer: BestPlan; LocalCost and the bounds of ``rules/bounds.dl``
when read since the step before — they are derived when read, :mod:`.ondemand`) hold
thousands of tuples. Re-deriving them from empty
on every update costs more than the update itself on large queries, so they follow the
changes instead, stratum by stratum, each
from the tuples the strata below it removed and added. The shape of each stratum, read off
the compiled program (nothing here names a rule or a relation), chooses how:

* **counted** — a non-recursive stratum without aggregates or a schedule: each tuple keeps
  the number of its derivations (Gupta, Mumick, Subrahmanian 1993). The relations below are
  set back to where they stood, the derivations lost to the removed tuples are counted off
  under the old statistics, then the added tuples' derivations counted on under the new
  ones; a tuple is present while its count is positive. The counts are made by an update
  that finds none (counting the stratum anew) and kept for the relation object they count.
* **grouped** — a scheduled stratum (recursive through ``min``/``max`` or not) whose rank
  steps are a fixed sequence: the groups (the schedule's rank key) whose inputs changed are
  re-derived in schedule order, each from the tuples holding its key in one atom per rule;
  a group whose tuples change queues the groups that read them, one whose tuples stay the
  same stops the propagation. This is what the maintained stratum's re-derivation does.
* **from empty** — any other shape, or one of the above whose changes reach a rank the
  schedule has passed: the stratum is evaluated again from empty (counted in
  :attr:`LaterStrata.from_empty`). The other two are evaluated whole too when that costs
  less (counted in :attr:`LaterStrata.whole`): a stratum reading few tuples
  (:data:`SMALL`), changes reaching a large part of it (:data:`WHOLE`: following a changed
  tuple costs several times deriving it), and the update right after such a change
  (:attr:`LaterStrata.calm`).

Built-ins marked ``statistics`` may answer differently after an update although their
arguments did not change: a rule calling one must bind the call's leading arguments (the
maintained stratum's group key, what :func:`~reopt.costmodel.builtins.stale_keys` speaks of)
from one body atom; that atom's tuples of stale groups are then treated as removed (under
the old statistics) and added again (under the new ones). A stratum where this cannot be
said is evaluated from empty.

Exactness: both ways give the tuples a from-scratch evaluation of the stratum gives.
Counting is exact for non-recursive rules. Re-deriving a group reads the stratum's tuples of
groups released before it (final by then) and the strata below (final); which groups to
re-derive is found from the changed tuples with the removed ones put back for the look-up
(both states' derivations are then seen), so a superset of the affected groups is re-derived
and a group whose inputs did not change comes out the same.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from reopt.costmodel.builtins import stale_keys
from reopt.evaluator.ast import Aggregate, Atom, Rule, Var, term_vars
from reopt.evaluator.compiler import (
    DELTA,
    Call,
    CompiledProgram,
    Filter,
    Op,
    Scan,
    Stratum,
    Variant,
)

if TYPE_CHECKING:
    from reopt.evaluator.python_engine import PythonEngine, Relation

COUNTED, GROUPED, FROM_EMPTY = "counted", "grouped", "from empty"

SMALL = 1000
"""A later stratum whose relations read hold fewer tuples than this in all is evaluated
again whole: one pass over a few tuples costs less than following their changes (TPC-H q5
under ``all``: 11 selected plans)."""

WHOLE = 3
"""A later stratum whose changes reach more than 1/WHOLE of what it reads is evaluated again
whole, and so is a grouped one whose pass queues more than 1/WHOLE of its groups or changes
more than 1/WHOLE of its tuples (the pass stops there): following a change costs a few times
more per tuple than deriving it (measured: BENCHMARKS.md, "Later strata of an update")."""

Changes = dict[str, tuple[set[tuple], set[tuple]]]
"""Relation → (tuples removed, tuples added) by an update so far."""


def key_variant(v: Variant, key: int) -> Variant:
    """``v`` cut after the ops that bind its head's first ``key`` terms, projecting them."""
    head = v.head[:key]
    need = {t.name for t in head if isinstance(t, Var)}
    bound: set[str] = set()
    ops = []
    for op in v.ops:
        if need <= bound:
            break
        ops.append(op)
        if isinstance(op, Scan) and not op.negated:
            bound.update(t.name for t in op.args if isinstance(t, Var))
        elif isinstance(op, Call):
            bound.update(t.name for t in op.outputs if isinstance(t, Var))
        else:
            bound.update(t.name for t in (op.left, op.right) if isinstance(t, Var))
    return replace(v, ops=tuple(ops), head=head, embeds=None)


def key_lookup(v: Variant, key: int) -> Variant:
    """A variant deriving the head's first ``key`` terms of the derivations ``v`` makes from
    its delta, or more: from the delta's scan, the fewest other ops that bind the key, each
    next one the scan sharing most variables bound so far (the rule's own order may join a
    relation on the query id alone before the atom that binds the key, e.g. ``r1`` reached
    from ``BestCost``: every ``Bound`` of the query per changed tuple). Leaving out an atom
    or a comparison only lets more bindings through: a superset of the keys."""
    need = {t.name for t in v.head[:key] if isinstance(t, Var)}
    first = next(op for op in v.ops if isinstance(op, Scan) and op.version == DELTA)
    ops: list[Op] = [first]
    bound = {t.name for t in first.args if isinstance(t, Var)}
    rest = [op for op in v.ops if op is not first and not (isinstance(op, Scan) and op.negated)]
    while not need <= bound:
        def score(op: Op) -> tuple[int, int] | None:
            if isinstance(op, Scan):
                names = {t.name for t in op.args if isinstance(t, Var)}
                return len(names & bound), len(names & need)
            if isinstance(op, Call):
                if all(term_vars(t) <= bound for t in op.inputs):
                    names = {t.name for t in op.outputs if isinstance(t, Var)}
                    return 0, len(names & need)
                return None
            free = [t for t in (op.left, op.right) if isinstance(t, Var) and t.name not in bound]
            other = op.right if free and free[0] is op.left else op.left
            if op.op == "=" and len(free) == 1 and term_vars(other) <= bound:
                return 0, int(free[0].name in need)
            return None
        scored = [(sc, n) for n, op in enumerate(rest) if (sc := score(op)) is not None]
        if not scored:
            return key_variant(v, key)  # (nothing to choose from: the rule's own order)
        _, n = max(scored, key=lambda x: x[0])
        op = rest.pop(n)
        ops.append(op)
        if isinstance(op, Scan):
            bound.update(t.name for t in op.args if isinstance(t, Var))
        elif isinstance(op, Call):
            bound.update(t.name for t in op.outputs if isinstance(t, Var))
        else:
            bound.update(term_vars(op.left) | term_vars(op.right))
        # comparisons whose variables are all bound now only narrow: keep them
        for f in [f for f in rest if isinstance(f, Filter)
                  and (term_vars(f.left) | term_vars(f.right)) <= bound]:
            rest.remove(f)
            ops.append(f)
    return replace(v, ops=tuple(ops), head=v.head[:key], embeds=None)


@dataclass(frozen=True)
class Shape:
    """How one later stratum is maintained, read off the program."""

    stratum: int
    how: str
    """:data:`COUNTED`, :data:`GROUPED` or :data:`FROM_EMPTY`."""
    why: str = ""
    """For :data:`FROM_EMPTY`: what the other ways do not handle."""
    reads: frozenset[str] = frozenset()
    """Relations of earlier strata its rules read."""
    stale: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """(relation, its columns holding the group key) of the atoms binding the leading
    arguments of statistics built-ins: their tuples of stale groups are re-derived."""
    key: int = 0
    """:data:`GROUPED`: the schedule's rank key (the leading columns)."""
    sources: dict[str, tuple[tuple[Variant, str, tuple[int, ...]], ...]] = field(
        default_factory=dict)
    """:data:`GROUPED`: relation → per rule, (the variant reading one atom's tuples as its
    delta, that atom's relation, its columns holding the head's key)."""
    keys: dict[str, tuple[Variant, ...]] = field(default_factory=dict)
    """:data:`GROUPED`: relation read → variants deriving the head keys its tuples reach."""
    joined: frozenset[str] = frozenset()
    """:data:`GROUPED`: relations those variants join with (not only read as the delta)."""


def shapes(program: CompiledProgram, first: int, stale_key: tuple[str, ...],
           replaced: frozenset[str]) -> tuple[Shape, ...]:
    """The shapes of the strata from index ``first`` on. ``stale_key``: the types of the
    group key stale groups are named by (the maintained stratum's rank inputs); ``replaced``:
    relations an update replaces whole rather than changing in place (their changes are not
    journaled). Read once per program object and arguments
    (:meth:`CompiledProgram.memoized`)."""
    return program.memoized(("later shapes", first, stale_key, replaced), lambda: tuple(
        _shape(program, i, stale_key, replaced) for i in range(first, len(program.strata))))


def _shape(program: CompiledProgram, i: int, width: tuple[str, ...],
           replaced: frozenset[str]) -> Shape:
    s = program.strata[i]
    own = set(s.preds)
    rules = [r for r in program.rules if r.head.pred in own]
    atoms = [a for r in rules for a in r.body if isinstance(a, Atom) and not a.is_builtin]
    reads = frozenset(a.pred for a in atoms if a.pred not in own)
    if own & pruned(program):
        return Shape(i, FROM_EMPTY, "a pruning feature acts on it")
    if any(a.negated for a in atoms):
        return Shape(i, FROM_EMPTY, "a rule negates an atom")
    if reads & replaced:
        return Shape(i, FROM_EMPTY, "it reads a relation an update evaluates again whole")
    stale = []
    for r in rules:
        found = _stale_atom(program, r, width, own)
        if found is None:
            return Shape(i, FROM_EMPTY, f"{r.pos}: a statistics built-in is not called with "
                                        "a group key one atom of an earlier stratum binds")
        stale += found
    stale_t = tuple(dict.fromkeys(stale))
    if s.schedule is None:
        if s.recursive or any(p in program.aggregates for p in own):
            return Shape(i, FROM_EMPTY, "recursive or aggregating without a schedule")
        return Shape(i, COUNTED, reads=reads, stale=stale_t)
    if s.steps is None or s.steps.fused is None:
        return Shape(i, FROM_EMPTY, "its rank steps are not a fixed sequence")
    key = len(program.builtins[s.schedule.rank].inputs)
    sources: dict[str, list[tuple[Variant, str, tuple[int, ...]]]] = {p: [] for p in own}
    for r in rules:
        src = _key_source(program, r, key)
        if src is None:
            return Shape(i, FROM_EMPTY, f"{r.pos}: no atom read once holds the head's key")
        sources[r.head.pred].append(src)
    keys: dict[str, list[Variant]] = {}
    for pred, variants in program.triggers.items():
        for v in variants:
            if v.head_pred in own:
                keys.setdefault(pred, []).append(key_lookup(v, key))
    joined = frozenset(op.pred for vs in keys.values() for v in vs for op in v.ops
                       if isinstance(op, Scan) and op.version != DELTA)
    return Shape(i, GROUPED, reads=reads, stale=stale_t, key=key,
                 sources={p: tuple(v) for p, v in sources.items()},
                 keys={p: tuple(v) for p, v in keys.items()}, joined=joined)


def pruned(program: CompiledProgram) -> set[str]:
    """The relations a pruning directive acts on (aggregate selection, suppression, reference
    counts, bounds), as the pruned one or the one pruning it."""
    f = program.features
    return (set(f.aggsel) | {a.agg for a in f.aggsel.values()} | set(f.suppress)
            | set(f.suppress.values()) | set(f.refcount) | set(f.bound)
            | set(f.bound.values()))


def _stale_atom(program: CompiledProgram, rule: Rule, key: tuple[str, ...], own: set[str]
                ) -> list[tuple[str, tuple[int, ...]]] | None:
    """Per statistics built-in of ``rule``, the (relation, columns) of a positive atom of an
    earlier stratum binding its leading arguments, which must be variables of the group key's
    types ``key`` (the call is then for that group, as the maintained stratum's calls are for
    theirs); None if a call has no such arguments or atom."""
    out = []
    width = len(key)
    for call in rule.body:
        if not (isinstance(call, Atom) and call.is_builtin
                and program.builtins[call.pred].statistics):
            continue
        lead = call.args[:width]
        if (program.builtins[call.pred].inputs[:width] != key
                or not all(isinstance(t, Var) for t in lead)):
            return None
        names = [t.name for t in lead]  # type: ignore[union-attr]
        hit = None
        for a in rule.body:
            if (isinstance(a, Atom) and not a.is_builtin and not a.negated
                    and a.pred not in own):
                at = {t.name: j for j, t in reversed(list(enumerate(a.args)))
                      if isinstance(t, Var)}
                if all(n in at for n in names):
                    hit = (a.pred, tuple(at[n] for n in names))
                    break
        if hit is None:
            return None
        out.append(hit)
    return out


def _key_source(program: CompiledProgram, rule: Rule, key: int
                ) -> tuple[Variant, str, tuple[int, ...]] | None:
    """The variant of ``rule`` reading, as its delta, an atom that holds the head's first
    ``key`` terms (all variables) and whose relation the body reads once, with that atom's
    relation and columns."""
    lead = rule.head.args[:key]
    if any(not isinstance(t, Var) for t in lead) or any(
            isinstance(t, Aggregate) for t in lead):
        return None
    names = [t.name for t in lead]  # type: ignore[union-attr]
    for j, a in enumerate(rule.body):
        if not isinstance(a, Atom) or a.is_builtin or a.negated:
            continue
        if sum(1 for b in rule.body if isinstance(b, Atom) and b.pred == a.pred) != 1:
            continue
        at = {t.name: c for c, t in reversed(list(enumerate(a.args))) if isinstance(t, Var)}
        if not all(n in at for n in names):
            continue
        v = next((v for v in program.triggers.get(a.pred, ())
                  if v.rule is rule and v.delta_atom == j), None)
        if v is not None:
            return v, a.pred, tuple(at[n] for n in names)
    return None


class _Passed(Exception):
    """A grouped stratum is evaluated again from empty: its change reached a rank its
    schedule has passed, or (``args[1]``) its changes reach many of its groups. ``args[0]``:
    what it changed in place so far."""


class LaterStrata:
    """The later strata of a maintained evaluation, followed incrementally."""

    def __init__(self, program: CompiledProgram, first: int, stale_key: tuple[str, ...],
                 replaced: frozenset[str]):
        self.program = program
        self.shapes = shapes(program, first, stale_key, replaced)
        self.reads = frozenset(p for s in self.shapes for p in s.reads)
        """Relations the later strata read (the journal watches the earlier ones)."""
        self.derivations: dict[str, tuple[Relation, dict[tuple, int]]] = {}
        """Counted relation → (the relation object counted, each tuple's derivations)."""
        self.from_empty = 0
        """Later strata evaluated again from empty by updates (other shapes, or a change
        reaching a rank already passed)."""
        self.whole = 0
        """Later strata evaluated again whole by updates because that was cheaper: they read
        few tuples (:data:`SMALL`) or the changes reached a large part of them (more than
        1/:data:`WHOLE`)."""
        self.calm: set[int] = set()
        """Strata whose last update changed little. Right after a large change another is
        likely (a cost model naming most groups stale; a moved optimum moving most bounds):
        the next update evaluates the stratum from empty (and it is calm again) rather than
        count anew or start a pass that would stop midway, both costing more."""
        self.everything_from_empty = False
        """Re-derive every later stratum from empty (the reference behaviour: benchmarks
        compare against it)."""
        self.forget()

    def forget(self) -> None:
        """Drop what updates learnt (the counted derivations, which strata are calm), as
        after a fresh evaluation; the counters of strata evaluated again stay."""
        self.derivations = {}
        self.calm = {s.stratum for s in self.shapes if s.how != FROM_EMPTY}

    # -- state ------------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        return {"derivations": self.derivations, "from_empty": self.from_empty,
                "whole": self.whole, "calm": self.calm}

    def restore(self, state: Mapping[str, Any]) -> None:
        self.derivations = dict(state["derivations"])
        self.from_empty = state["from_empty"]
        self.whole = state["whole"]
        self.calm = set(state["calm"])

    # -- an update ----------------------------------------------------------------------------
    def update(self, engine: PythonEngine, changes: Changes, old: Mapping[int, Any],
               stale_of: Callable[[Iterable[tuple]], set[tuple]] | None = None,
               skip: Collection[int] = ()) -> int:
        """Bring the later strata of ``engine.full`` from the state before the update to the
        one the ``changes`` of the earlier relations give, the statistics having moved from
        ``old`` to ``engine.ctx``; ``stale_of`` names the stale ones among groups (default:
        :func:`stale_keys`). Returns how many strata were evaluated from empty. The strata
        ``skip`` (derived when read and not read since: :mod:`.ondemand`) are left as they
        are; the work of the other on-demand ones is counted apart (:func:`.ondemand.apart`).

        A stratum (of a shape that can tell its stale tuples) none of whose inputs changed
        and none of whose tuples bind a stale group's built-ins is left as it is: evaluated
        again it would derive what it holds — not even from empty right after a large
        change (:attr:`calm`), which otherwise re-derived the whole stratum for nothing."""
        if stale_of is None:
            def stale_of(keys: Iterable[tuple]) -> set[tuple]:
                return stale_keys(old, engine.ctx, list(keys))
        from reopt.evaluator.ondemand import apart

        changes = {p: c for p, c in changes.items() if c[0] or c[1]}
        fresh = 0
        strata = self.program.strata
        shapes = [s for s in self.shapes if s.stratum not in skip]
        lazy = [s for s in shapes if strata[s.stratum].ondemand]
        for shape in shapes:
            if not strata[shape.stratum].ondemand:
                fresh += self._follow(engine, shape, changes, stale_of, old)
        if lazy:
            with apart(engine):  # (on-demand strata come last: they read the others' changes)
                for shape in lazy:
                    fresh += self._follow(engine, shape, changes, stale_of, old)
        self.from_empty += fresh
        return fresh

    def _follow(self, engine: PythonEngine, shape: Shape, changes: Changes,
                stale_of: Callable[[Iterable[tuple]], set[tuple]], old: Mapping[int, Any]
                ) -> int:
        """Bring one later stratum up to date (:meth:`update`), adding its changes to
        ``changes``; 1 if it was evaluated from empty for want of another way, else 0."""
        stratum = self.program.strata[shape.stratum]
        if shape.how == FROM_EMPTY or self.everything_from_empty:
            changes.update(self._from_empty(engine, stratum))
            return 1
        mine = {p: c for p, c in changes.items() if p in shape.reads}
        if not any(w or c for w, c in mine.values()) and not self._stale(
                engine, shape, stale_of, mine, math.inf):
            return 0  # nothing it reads moved, its built-ins answer as before: as it was
        size = sum(len(engine.full[p]) for p in shape.reads)
        # following a change costs several times deriving it: the changes (a stale tuple
        # goes and comes: twice) may reach 1/WHOLE of what the stratum reads
        budget = ((size / WHOLE if WHOLE else math.inf)  # (WHOLE = 0: never whole)
                  - sum(len(w) + len(c) for w, c in mine.values()))
        stale = (self._stale(engine, shape, stale_of, mine, budget / 2)
                 if size >= SMALL and budget >= 0 else None)
        if stale is None:
            changes.update(self._from_empty(engine, stratum))
            self.whole += 1
            if size >= SMALL:
                self.calm.discard(shape.stratum)
            return 0
        if shape.how == COUNTED:
            changes.update(self._counted(engine, stratum, shape, mine, stale, old))
            return 0
        for p, again in stale.items():
            went, came = mine.get(p, (set(), set()))
            mine[p] = (went | again, came | again)
        if shape.stratum not in self.calm:  # right after a pass that spread to most groups
            changes.update(self._from_empty(engine, stratum))
            self.whole += 1
            self.calm.add(shape.stratum)
            return 0
        try:
            changes.update(self._grouped(engine, stratum, shape, mine))
        except _Passed as e:
            changes.update(self._from_empty(engine, stratum, e.args[0]))
            if e.args[1]:
                self.whole += 1
                self.calm.discard(shape.stratum)
            else:
                return 1
        return 0

    def _from_empty(self, engine: PythonEngine, stratum: Stratum,
                    went_came: Changes | None = None) -> Changes:
        """Evaluate ``stratum`` again from empty, into new relation objects (the old ones
        keep the tuples from before the update, for :meth:`MaintainedEngine.changed_since`;
        a new relation is built faster than an old one is rewritten); their changes.
        ``went_came``: what an interrupted incremental pass already changed in place (undone
        on the old objects)."""
        from reopt.evaluator.python_engine import Relation

        old = {}
        for p in stratum.preds:
            went, came = (went_came or {}).get(p, (set(), set()))
            rel = engine.full[p]
            if went or came:
                rel.remove(list(came))
                rel.add(went)
            old[p] = rel.rows
            engine.full[p] = Relation()
        engine.run_stratum(stratum)
        return {p: (old[p] - engine.full[p].rows, engine.full[p].rows - old[p])
                for p in stratum.preds}

    def _stale(self, engine: PythonEngine, shape: Shape,
               stale_of: Callable[[Iterable[tuple]], set[tuple]],
               changes: Changes, budget: float) -> dict[str, set[tuple]] | None:
        """Per relation, its tuples that stayed but bind the arguments of a statistics
        built-in of a stale group: their derivations may differ under the new statistics.
        None (before collecting them) if they are more than ``budget``."""
        out: dict[str, set[tuple]] = {}
        for pred, cols in shape.stale:
            idx = engine.full[pred].index(cols)
            groups = stale_of(idx)
            budget -= sum(len(idx[g]) for g in groups)
            if budget < 0:
                return None
            came = changes.get(pred, (set(), set()))[1]
            again = {t for g in groups for t in idx[g] if t not in came}
            if again:
                out.setdefault(pred, set()).update(again)
        return out

    # -- counting ----------------------------------------------------------------------------
    def _counted(self, engine: PythonEngine, stratum: Stratum, shape: Shape, changes: Changes,
                 stale: dict[str, set[tuple]], old: Mapping[int, Any]) -> Changes:
        """Follow the changes by derivation counts: back to the state before the update,
        count off the removed tuples' derivations (old statistics), then the stale tuples'
        (old statistics) and on again (new ones) in the state both share, then count on the
        added tuples' derivations. Counted anew when the counts are not there (the first
        update; the second small one after a large one, :attr:`calm`)."""
        full, prog = engine.full, self.program
        own = set(stratum.preds)
        if not self._counting(engine, stratum):
            if shape.stratum not in self.calm:  # right after a large change: maybe another
                self.calm.add(shape.stratum)
                self.whole += 1
                return self._from_empty(engine, stratum)
            return self._recount(engine, stratum)
        counts = {p: self.derivations[p][1] for p in own}
        touched: dict[str, dict[tuple, int]] = {p: {} for p in own}

        def count(p: str, rows: set[tuple], by: int) -> None:
            delta = {p: _rel(rows)}
            for v in prog.triggers.get(p, ()):
                if v.head_pred in own:
                    _count(counts[v.head_pred], touched[v.head_pred],
                           engine.run_variant(v, full, delta), by)

        # only the relations a variant joins with are set to each state: the others are
        # read as the delta alone (LocalCost's PlanCost), and each change of them walks
        # every index of a large relation
        joined = _joined(prog, own, changes.keys() | stale.keys())
        for p, (went, came) in changes.items():  # back to the state before the update
            if p in joined:
                full[p].remove(list(came))
                full[p].add(went)
        several = len(stale) > 1  # (one relation's stale tuples are counted once as they are)
        with _statistics(engine.ctx, old):
            for p, (went, _) in changes.items():
                if went:
                    count(p, went, -1)
                    if p in joined:
                        full[p].remove(list(went))
            for p, again in stale.items():  # the state both share: count off, then on
                count(p, again, -1)
                if several and p in joined:
                    full[p].remove(list(again))
        for p, again in stale.items():
            if several and p in joined:
                full[p].add(again)
            count(p, again, 1)
        for p, (_, came) in changes.items():
            if p in joined:
                full[p].add(came)
            if came:
                count(p, came, 1)
        out: Changes = {}
        for p, seen in touched.items():
            c, rel = counts[p], full[p]
            went = {t for t in seen if c.get(t, 0) <= 0 and t in rel.rows}
            came = {t for t in seen if c.get(t, 0) > 0 and t not in rel.rows}
            rel.remove(list(went))
            rel.add(came)
            out[p] = (went, came)
        return out

    def _counting(self, engine: PythonEngine, stratum: Stratum) -> bool:
        """Whether the derivation counts kept are those of the relation objects held."""
        return all(p in self.derivations and self.derivations[p][0] is engine.full[p]
                   for p in stratum.preds)

    def _recount(self, engine: PythonEngine, stratum: Stratum) -> Changes:
        """Count every derivation of ``stratum`` anew (the current state and statistics) and
        make its relations, in place, the tuples counted; their changes."""
        full = engine.full
        counts: dict[str, dict[tuple, int]] = {p: {} for p in stratum.preds}
        for v in stratum.base:
            _count(counts[v.head_pred], {}, engine.run_variant(v, full, {}), 1)
        out: Changes = {}
        for p in stratum.preds:
            rel, now = full[p], counts[p].keys()
            went, came = rel.rows - now, now - rel.rows
            rel.remove(list(went))
            rel.add(came)
            self.derivations[p] = (rel, counts[p])
            out[p] = (went, came)
        return out

    # -- re-deriving groups --------------------------------------------------------------------
    def _grouped(self, engine: PythonEngine, stratum: Stratum, shape: Shape,
                 changes: Changes) -> Changes:
        from reopt.evaluator.python_engine import _aggregate

        prog, full, key = self.program, engine.full, shape.key
        sched, steps = stratum.schedule, stratum.steps
        assert sched is not None and steps is not None and steps.fused is not None
        rank_fn, ctx = prog.builtins[sched.rank].fn, engine.ctx
        sign = 1 if sched.direction == "ascending" else -1
        order = {p: n for n, entry in enumerate(steps.fused) for p in entry}
        cols = tuple(range(key))
        out: Changes = {p: (set(), set()) for p in stratum.preds}
        heap: list[int] = []
        pending: dict[int, set[tuple]] = {}
        total = max(len(full[p].index(cols)) for p in stratum.preds)  # groups
        queued = 0
        tuples, moved = sum(len(full[p]) for p in stratum.preds), 0

        def rank(g: tuple) -> int:
            return sign * rank_fn(ctx, *g)[0][0]

        def queue(reached: dict[str, set[tuple]], now: int | None, groups: set[tuple],
                  step: int) -> None:
            nonlocal queued
            for head, gs in reached.items():
                for g in gs:
                    k = rank(g)
                    if now is not None and (k < now or (k == now and (
                            g not in groups or order[head] <= step))):
                        raise _Passed(out, False)
                    if k == now:
                        continue  # re-derived at a later step of this rank
                    if k not in pending:
                        pending[k] = set()
                        heapq.heappush(heap, k)
                    if g not in pending[k]:
                        pending[k].add(g)
                        queued += 1
            if queued * WHOLE > total:  # most groups: a pass from empty costs less
                raise _Passed(out, True)

        queue(self._reached(engine, shape, changes), None, set(), 0)
        while heap:
            now = heapq.heappop(heap)
            groups = pending.pop(now)
            for step, entry in enumerate(steps.fused):
                for p in entry:
                    cands: list[tuple] = []
                    for v, src, at in shape.sources[p]:
                        idx = full[src].index(at)
                        rows = [t for g in groups for t in idx.get(g, ())]
                        if rows:
                            cands.extend(engine.run_variant(v, full, {src: _rel(rows)}))
                    if p in prog.aggregates:
                        cands = _aggregate(cands, *prog.aggregates[p])
                    new = set(cands)
                    have = full[p].index(cols)
                    was = {t for g in groups for t in have.get(g, ())}
                    went, came = was - new, new - was
                    if not went and not came:
                        continue
                    full[p].remove(list(went))
                    full[p].add(came)
                    gone, born = out[p]
                    out[p] = ((gone | (went - born)) - came, (born - went) | (came - gone))
                    moved += len(went) + len(came)
                    if moved * WHOLE > tuples:  # most tuples change: from empty costs less
                        raise _Passed(out, True)
                    queue(self._reached(engine, shape, {p: (went, came)}), now, groups, step)
        return out

    def _reached(self, engine: PythonEngine, shape: Shape, changes: Changes
                 ) -> dict[str, set[tuple]]:
        """Per relation of the stratum, the head keys that derivations reading the changed
        tuples have, before or after the change: looked up with the removed tuples put back
        (the rules are positive, so both states' derivations are among the union's; only
        where a variant joins with the relation)."""
        full = engine.full
        back = {p: [t for t in went if t not in full[p].rows]
                for p, (went, _) in changes.items() if p in shape.joined}
        for p, rows in back.items():
            full[p].add(rows)
        try:
            out: dict[str, set[tuple]] = {}
            for p, (went, came) in changes.items():
                variants = shape.keys.get(p, ())
                if not variants or not (went or came):
                    continue
                delta = {p: _rel(went | came)}
                for v in variants:
                    out.setdefault(v.head_pred, set()).update(
                        engine.run_variant(v, full, delta))
            return out
        finally:
            for p, rows in back.items():
                full[p].remove(rows)


def _joined(program: CompiledProgram, own: set[str], changed: Iterable[str]) -> set[str]:
    """The relations that the variants deriving ``own`` from a delta of the ``changed``
    ones read whole (not as their delta): the only ones whose state a count reads."""
    return {op.pred for p in changed for v in program.triggers.get(p, ())
            if v.head_pred in own for op in v.ops
            if isinstance(op, Scan) and op.version != DELTA}


def _rel(rows: Iterable[tuple]) -> Relation:
    from reopt.evaluator.python_engine import Relation

    return Relation(rows)


def _count(counts: dict[tuple, int], touched: dict[tuple, int], rows: list[tuple],
           by: int) -> None:
    for t in rows:
        n = counts.get(t, 0) + by
        if n:
            counts[t] = n
        else:
            del counts[t]
        touched[t] = 1


@contextmanager
def _statistics(ctx: dict[int, Any], spaces: Mapping[int, Any]) -> Iterator[None]:
    """Within: ``ctx`` (the very mapping the compiled variants read) holds ``spaces``; it
    holds what it held before afterwards."""
    now = dict(ctx)
    ctx.clear()
    ctx.update(spaces)
    try:
        yield
    finally:
        ctx.clear()
        ctx.update(now)


def watch(rel: Relation) -> dict[tuple, bool] | None:
    """Start following ``rel``'s changes (its journal); if a journal runs already (a
    snapshot's), the presence now of the tuples it names, to tell them from later changes."""
    if rel.journal is None:
        rel.journal = {}
        return None
    return {t: t in rel.rows for t in rel.journal}


def watched(rel: Relation, mark: dict[tuple, bool] | None) -> tuple[set[tuple], set[tuple]]:
    """The tuples removed from and added to ``rel`` since :func:`watch` gave ``mark``; stops
    the journal :func:`watch` started (not one that ran already)."""
    if mark is None:
        diff: Iterable[tuple] = rel.changed()
    else:
        have = rel.rows
        diff = [t for t, was in (rel.journal or {}).items()
                if (t in have) != mark.get(t, was)]
    have = rel.rows
    went, came = set(), set()
    for t in diff:
        (came if t in have else went).add(t)
    return went, came
