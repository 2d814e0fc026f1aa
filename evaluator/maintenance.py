"""Incremental maintenance of the ``python`` engine's relations when statistics change.

After a delta, built-in functions marked ``statistics`` (summaries, local costs) may answer
differently; everything else the rules compute from them must follow, and the result must be
exactly the relations a from-scratch evaluation under the new statistics would give — in every
pruning mode. The engine keeps two layers between evaluations:

* the **complete layer**: the strata up to the maintained stratum (the one that holds the
  aggregate-selected relation, here ``{PlanCost, BestCost}``) evaluated with aggregate
  selection and the seed bounds of ``.bound`` — no suppression, no reference counting. It
  holds the best plans (the aggregate's inputs that can matter: Proposition 5) of every OR
  node whose best plan is within its seed bound, so a plan pruned in the live layer can come
  back without re-deriving its subplans (the paper's memoization, Section 5.4). An OR node
  above the seed holds none (a plan's inputs cost no more than it, so nothing above the seed
  is costed from it either): exactly the groups of an unbounded layer whose best is within
  the seed. When the seed is below some query's optimum (rules whose space lacks the greedy
  plan), the layer is evaluated without bounds instead (counted in ``fallbacks``).
* the **live layer**: what the pruning mode keeps — the complete layer with tuple source
  suppression and reference counting applied (their deletions cascade exactly as during a
  full evaluation) and, with ``.bound``, without the selected tuples above their bound, then
  the strata after the maintained one (BestPlan, LocalCost, Bound) derived from it. These are
  the relations the optimizer reports.

An update (Section 5.1's cases, at the granularity of OR nodes):

1. The costmodel names the *stale* groups (:func:`reopt.costmodel.builtins.stale_keys`): those
   for which a ``statistics`` built-in answers differently (compared value for value among
   the groups whose inputs the deltas moved).
2. Groups are re-derived in the maintained stratum's schedule order (ascending rank: children
   before parents), a rank at a time: one rank's groups read only lower ranks, so each rule
   runs once over all their source tuples (on frames where they are many: :mod:`.bulk`,
   :data:`BULK_FROM`). Re-deriving a group runs the rules of the
   selected relation for the group's source tuples (for the optimizer: R6–R8 for the OR
   node's SearchSpace tuples), selects the best, and re-aggregates. When a group's selected
   tuples change — insertion, deletion, or cost update — the groups whose rules read them
   (parents) are re-derived too; when they do not, propagation stops there (lazy
   propagation). A parent that is not stale itself is re-derived from the source tuples
   reading a changed child and those of its selected tuples only — every other one derives
   what it did, worse than the selected — and whole only if its selected tuples got worse.
   Through a child whose best got worse, only the parents' selected tuples' source tuples
   are reached: the others derived worse than the selected and, by the monotonicity that
   aggregate selection rests on, derive nothing better through a worse child.
3. Suppression and reference counting are replayed on the new complete layer; deletions
   cascade, and a plan that becomes optimal is present again because the complete layer kept
   it (undoing suppression, reference counts 0 → 1). The later strata follow the
   changes of the live layer (:mod:`.later`: counting, or their groups re-derived in
   schedule order; from empty where neither applies or pays).

The seed bounds of ``.bound`` depend on the statistics: their strata (read by no rule, reading
only inputs and facts: :attr:`MaintenancePlan.reseed`) are evaluated again on every update,
and the complete layer follows them (Section 5.3): a bound that falls re-derives the groups
above it (they leave, their parents with them), one that rises re-derives every group absent
under it (bounds that rise re-introduce plans: from its source tuples whose children are all
present, the others coming back through changed children), and a stale group is re-derived
whether it is present or not (a cheaper one may come within the bound). If the new seed
leaves some query without its root's plans, the groups the bounds kept out are derived too,
unbounded (:attr:`UpdateStats.fallback`). The live layer then takes the changed groups as in
step 3.

Nothing here is specific to one rule: the maintained stratum, its source relation, its group
key (the schedule's rank inputs) and the parents' rules are read off the compiled program, and
a program outside this shape is rejected with a clear error.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import Any

import numpy as np

from reopt.costmodel.builtins import Nodes, keys_by_query, stale_keys, stale_of_queries
from reopt.costmodel.errors import ReoptError
from reopt.evaluator import columnar, revival, sourcerows
from reopt.evaluator.ast import Aggregate, Atom, Const, Var, Wildcard, term_vars
from reopt.evaluator.bulk import RankFrames, Unframed
from reopt.evaluator.compiler import (
    COMPARE,
    DELTA,
    Call,
    CompiledProgram,
    Filter,
    Scan,
    Variant,
)
from reopt.evaluator.features import ASCENDING, Features, aggregate_input
from reopt.evaluator.frames import Frame, concat, group_best, lookup
from reopt.evaluator.later import LaterStrata, key_variant, watch, watched
from reopt.evaluator.python_engine import (
    Bucket,
    PythonEngine,
    Relation,
    Relations,
    RunStats,
    index_rows,
    key_of,
)
from reopt.evaluator.sourcerows import SourceRows

BATCH_RANKS_FROM = 64
"""Groups whose ranks one call of the rank built-in's batch form gives (below, numpy's fixed
cost is more than the calls one by one cost: :meth:`MaintainedEngine._ranks`)."""

FRAME_PROBES = 64
"""Lookups of one complete-layer relation made on its frames before a hash index of its
tuples is built instead (:meth:`MaintainedEngine._probing`)."""

BULK_FROM = 1000
"""Source tuples of one rank from which a variant re-deriving its groups runs on frames
(:mod:`.bulk`) instead of the generated loops (below, a frame operation's fixed cost is more
than the loops cost); ``REOPT_COLUMNAR=always``: from any number on, ``never``: none
(:func:`~.columnar.mode`)."""

REBUILD_SHARE = 0.7
"""An update whose re-derivation has queued more than this share of the groups that can
derive (every group the source relations name) stops and evaluates afresh instead: its
re-derivation, with the reach to the parents, would cost more than a fresh evaluation. A
rebuild keeps the enumeration and what no statistics move (:meth:`MaintainedEngine._unmoved`):
about half a from-scratch optimization on large-clique-14, plus the work thrown away. Lower
shares, and shares of the groups named stale or changed, were measured with that cheaper
rebuild and rejected (BENCHMARKS.md, "the first update on arrays, a cheaper rebuild"): each
rebuilt one-delta updates that cost less incrementally (large-clique-14's at 0.3: 125-147
ms rebuilt against 41-80 ms updated), as h40 found 0.3 and 0.5 did."""


class _Rebuild(Exception):
    """Raised by an update's re-derivation once it has queued more than
    :data:`REBUILD_SHARE` of the groups (:meth:`MaintainedEngine.update` rebuilds)."""



class Batch:
    """Distinct tuples handed to a variant as its delta: what the generated code reads of a
    delta — its ``rows``, iterated, and for a keyed scan an ``index`` — without the hash set
    a :class:`Relation` builds of them first (one hash of a wide tuple each). For the
    maintained stratum's source tuples. A variant asks whether a tuple is in its delta only
    for a second atom of the delta's relation scanned ``OLD``; a list answers that the same
    way (in linear time: the shipped rules read their source once, and the partial
    re-derivation needs that anyway, :func:`source_variant`)."""

    __slots__ = ("rows", "_rel", "_frame")

    def __init__(self, rows: list[tuple]):
        self.rows = rows
        self._rel: Relation | None = None
        self._frame: Frame | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def index(self, cols: tuple[int, ...]) -> dict[tuple, Any]:
        if self._rel is None:
            self._rel = Relation(self.rows)
        return self._rel.index(cols)

    def frame(self, types: tuple[str, ...]) -> Frame:
        """The tuples as a frame of columns ``c<j>`` of ``types``, made once (the rules
        reading a source alike share a batch: :mod:`.bulk`)."""
        if self._frame is None:
            self._frame = Frame.from_rows(self.rows, columnar.names(len(types)), types)
        return self._frame


@dataclass
class UpdateStats:
    """What one incremental update did."""

    stale: int = 0
    """Groups the costmodel named stale."""
    rederived: int = 0
    """Groups re-derived in the complete layer (stale ones and parents reached)."""
    changed: int = 0
    """Groups whose selected tuples changed."""
    derived: dict[str, int] = field(default_factory=dict)
    """Candidate tuples produced per relation while re-deriving."""
    from_empty: int = 0
    """Later strata evaluated again from empty rather than followed incrementally
    (:mod:`.later`: shapes it does not handle, or a change reaching a passed rank); of
    those derived when read (``.ondemand``), only the ones read since the step before (an
    update follows them; it leaves the others stale)."""
    fallback: bool = False
    """Whether the bounded complete layer had to be re-derived without bounds: the new seed
    bound was below some query's optimum (:meth:`MaintainedEngine.update`)."""
    rebuilt: bool = False
    """Whether the update reached so much of the space that both layers were evaluated
    afresh instead (:data:`REBUILD_SHARE`)."""
    seconds: float = 0.0


def _worse_than(func: str, new: Any, old: Any) -> bool:
    """Whether value ``new`` is strictly worse than ``old`` under aggregate ``func``."""
    return new > old if func == "min" else new < old


@dataclass(frozen=True)
class MaintenancePlan:
    """Where incremental maintenance acts, read off a compiled program."""

    stratum: int
    """Index of the maintained stratum."""
    target: str
    """The relation re-derived per group (the aggregate-selected one)."""
    key: int
    """Its group key: the leading ``key`` columns (the schedule's rank inputs)."""
    aggregates: dict[str, int]
    """Aggregates over ``target`` → the column of ``target`` they aggregate (their position
    and min|max are :attr:`CompiledProgram.aggregates`')."""
    sources: tuple[tuple[str, tuple[int, ...], Variant], ...]
    """Per rule of ``target``: (source relation, its columns holding the group key, the
    variant reading one group's source tuples)."""
    parents: tuple[Variant, ...]
    """Variants deriving the group keys of ``target`` tuples that read changed ``target``
    tuples (cut after the key is bound: no built-in runs)."""
    reseed: tuple[int, ...] = ()
    """Strata before the maintained one that no rule reads and that read only inputs and
    facts (the seed bounds of ``.bound``, which depend on statistics): evaluated again, whole,
    on every update."""
    reach: tuple[tuple[str, Variant], ...] = ()
    """Per variant of ``parents``: its rule's source relation and the variant cut once it has
    bound the source atom, projecting the source tuple — the parents' source tuples (their
    alternatives) that read changed ``target`` tuples. Empty when some rule's source atom is
    not all distinct variables, or appears twice: parents are then re-derived whole."""
    enter: tuple[tuple[str, Variant], ...] = ()
    """Per entry of ``sources``: the variant reading a group's source tuples cut before its
    first built-in call, projecting the source tuple — the source tuples whose scans and
    comparisons hold, every ``target`` atom matching a present tuple: those that can derive
    anything (empty with :attr:`reach`)."""


def caps_within(caps: Mapping[tuple, Any], key: tuple, value: Any) -> bool:
    """Whether ``value`` does not exceed the bound ``caps`` gives ``key`` (none: it does not)."""
    c = caps.get(key)
    return c is None or not value > c


def _seed_only(program: CompiledProgram, stratum) -> bool:
    """Whether ``stratum`` is read by no rule (only by ``.bound``, or by nothing) and reads
    only inputs and facts, which no update or pruning changes: evaluating it again whole
    after an update gives a from-scratch evaluation's tuples."""
    own = set(stratum.preds)
    if any(isinstance(a, Atom) and a.pred in own for r in program.rules for a in r.body):
        return False
    base = set(program.inputs) | set(program.facts)
    return all(a.is_builtin or a.pred in base
               for r in program.rules if r.head.pred in own
               for a in r.body if isinstance(a, Atom))


def maintenance_plan(program: CompiledProgram) -> MaintenancePlan:
    """Check that ``program`` can be maintained incrementally and say how (read once per
    program object: :meth:`CompiledProgram.memoized`)."""
    return program.memoized(("maintenance_plan",), lambda: _maintenance_plan(program))


def _maintenance_plan(program: CompiledProgram) -> MaintenancePlan:
    strata = program.strata
    sel_targets = set(program.features.aggsel)
    idx = next((i for i, s in enumerate(strata) if sel_targets & set(s.preds)), None)
    if idx is None:
        idx = next((i for i, s in enumerate(strata) if s.schedule is not None), None)
    if idx is None:
        raise ReoptError("incremental maintenance needs a scheduled stratum (.schedule)")
    st = strata[idx]
    sched = st.schedule
    if sched is None or sched.direction != ASCENDING:
        raise ReoptError(f"incremental maintenance: stratum {{{', '.join(st.preds)}}} must be "
                         "scheduled ascending (children before parents)")
    plain = [p for p in st.preds if p not in program.aggregates]
    if len(plain) != 1:
        raise ReoptError(f"incremental maintenance: stratum {{{', '.join(st.preds)}}} must "
                         "hold one relation and aggregates over it")
    target = plain[0]
    key = len(program.builtins[sched.rank].inputs)
    aggs: dict[str, int] = {}
    for rule in program.rules:
        if rule.head.pred in st.preds and rule.head.pred != target:
            sel = aggregate_input(rule)
            if sel is None or sel.target != target or sel.key != tuple(range(key)):
                raise ReoptError(f"{rule.pos}: incremental maintenance: an aggregate of the "
                                 f"maintained stratum must aggregate {target} by its first "
                                 f"{key} columns")
            aggs[rule.head.pred] = sel.value
    reseed = tuple(i for i, s in enumerate(strata[:idx]) if _seed_only(program, s))
    for i, s in enumerate(strata[:idx]):
        if i in reseed:
            continue  # a seed of .bound: evaluated again on update (MaintenancePlan.reseed)
        agg = next((p for p in s.preds if p in program.aggregates), None)
        if agg is not None:
            # its groups would have to follow pruning in the live layer; only the maintained
            # stratum's aggregates do (a session over such rules re-evaluates instead)
            raise ReoptError(f"incremental maintenance: {agg} aggregates before the maintained "
                             f"stratum {{{', '.join(st.preds)}}}")
        for v in (*s.base, *s.deltas):
            for op in v.ops:
                if isinstance(op, Call) and program.builtins[op.name].statistics:
                    raise ReoptError(f"{v.rule.pos}: incremental maintenance: {op.name} "
                                     "depends on statistics but is called before the "
                                     "maintained stratum")
    sources = []
    covered = set()
    for pred, variants in program.triggers.items():
        if pred in st.preds:
            continue
        for v in variants:
            if v.head_pred != target or v.embeds is None or id(v.rule) in covered:
                continue
            where = {h: i for i, h in enumerate(v.embeds)}
            if all(k in where for k in range(key)):
                covered.add(id(v.rule))
                sources.append((pred, tuple(where[k] for k in range(key)), v))
    rules = [r for r in program.rules if r.head.pred == target]
    if len(covered) != len(rules):
        raise ReoptError(f"incremental maintenance: every rule of {target} must read a "
                         f"relation of an earlier stratum holding the whole group key")
    readers = [v for v in program.triggers.get(target, ()) if v.head_pred == target]
    parents = tuple(key_variant(v, key) for v in readers)
    source_of = {id(v.rule): pred for pred, _, v in sources}
    reach = [source_variant(v, source_of[id(v.rule)]) for v in readers]
    enter = [source_variant(v, pred, joined=True) for pred, _, v in sources]
    if any(r is None for r in (*reach, *enter)):
        reach = enter = []
    reach = distinct_variants(reach)  # type: ignore[arg-type]
    return MaintenancePlan(idx, target, key, aggs, tuple(sources), parents, reseed,
                           tuple(reach), tuple(enter))  # type: ignore[arg-type]


def source_variant(v: Variant, source: str, *, joined: bool = False
                   ) -> tuple[str, Variant] | None:
    """``v`` (a rule of the maintained relation, triggered by it) cut after the scan of its
    rule's ``source`` atom — ``joined``: also after the scans and comparisons that follow it
    up to the first built-in call — projecting that atom's columns: the source tuples whose
    derivations read ``v``'s delta (and match the other atoms scanned). None when the atom
    is not all distinct variables or the rule reads ``source`` more than once (a source
    tuple could not be told from the bindings)."""
    atoms = [a for a in v.rule.body if isinstance(a, Atom) and a.pred == source]
    scans = [i for i, op in enumerate(v.ops)
             if isinstance(op, Scan) and op.pred == source and not op.negated]
    if len(atoms) != 1 or len(scans) != 1:
        return None
    args = v.ops[scans[0]].args
    if not all(isinstance(t, Var) for t in args) or len({t.name for t in args}) != len(args):
        return None
    end = scans[0] + 1
    while joined and end < len(v.ops) and (isinstance(v.ops[end], Filter) or (
            isinstance(v.ops[end], Scan) and not v.ops[end].negated)):
        end += 1
    return source, replace(v, ops=v.ops[:end], head=args, embeds=None)


def reach_join(v: Variant, target: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """For a variant of :attr:`MaintenancePlan.reach` that only scans its delta of
    ``target`` (distinct variables and wildcards: no test) and then its source atom (all
    distinct variables, projected: :func:`source_variant`): the delta's columns and the
    source's columns its join equates, in step — the source tuples it derives are those
    whose columns hold the values of a delta tuple's. None for any other shape."""
    if len(v.ops) != 2:
        return None
    d, s = v.ops
    if not (isinstance(d, Scan) and isinstance(s, Scan) and d.pred == target
            and d.version == DELTA and not d.negated and not s.negated
            and tuple(v.head) == tuple(s.args)):
        return None
    names: dict[str, int] = {}
    for i, t in enumerate(d.args):
        if isinstance(t, Var) and t.name not in names:
            names[t.name] = i
        elif not isinstance(t, Wildcard):
            return None  # (a constant or a repeated variable: a test of the delta)
    pairs = [(names[t.name], j) for j, t in enumerate(s.args)
             if isinstance(t, Var) and t.name in names]
    if not pairs:
        return None
    return tuple(i for i, _ in pairs), tuple(j for _, j in pairs)


def _delta_scan(v: Variant) -> Scan | None:
    """``v``'s first op when it scans its delta positively (what :func:`delta_reads` and
    :func:`source_tests` read a variant's delta tuples off); else None."""
    first = v.ops[0] if v.ops else None
    if not isinstance(first, Scan) or first.version != DELTA or first.negated:
        return None
    return first


def delta_reads(v: Variant) -> tuple[int, ...] | None:
    """The columns of ``v``'s delta atom that its derivations depend on: those holding a
    constant, a variable repeated in the atom, or a variable another op or the head uses.
    Delta tuples equal on these derive the same head tuples, so one of them stands for all
    (the parents' lookups read a changed group's key, not each of its selected tuples that
    went or came). None when ``v`` has no delta scan first (nothing is read off then)."""
    first = _delta_scan(v)
    if first is None:
        return None
    used: set[str] = set()
    for op in v.ops[1:]:
        if isinstance(op, Scan):
            terms: tuple = op.args
        elif isinstance(op, Call):
            terms = (*op.inputs, *op.outputs)
        else:
            terms = (op.left, op.right)
        for t in terms:
            used |= term_vars(t)
    for t in v.head:
        used |= term_vars(t.var if isinstance(t, Aggregate) else t)
    seen: dict[str, int] = {}
    for t in first.args:
        if isinstance(t, Var):
            seen[t.name] = seen.get(t.name, 0) + 1
    return tuple(j for j, t in enumerate(first.args)
                 if not isinstance(t, (Var, Wildcard))
                 or (isinstance(t, Var) and (t.name in used or seen[t.name] > 1)))


Test = tuple[str, Any, Any]
"""A test of a source tuple read off a variant (:func:`source_tests`): ``("held", cols,
None)`` — the group its columns ``cols`` name is present in the maintained relation — or
``("cmp", compare, (left, right))`` with each side ``("col", j)`` or ``("const", value)``."""


def source_tests(v: Variant, target: str, key: int) -> tuple[Test, ...]:
    """Tests every source tuple that derives anything through ``v`` passes, read off ``v``
    (a variant whose first op scans its delta, a source relation's tuples): its comparisons
    of the delta atom's variables and constants, and per scan of ``target`` whose group key
    — its leading ``key`` arguments — is all variables the delta's atom binds, that the
    group those columns name is present in ``target`` (the scan finds nothing otherwise).
    A tuple failing one derives nothing, so it may be dropped before the variant runs
    (:mod:`.sourcerows` does so on arrays) instead of being joined one by one: the join
    starts, in effect, from the children that are there. Empty when ``v`` does not start
    with a delta scan."""
    first = _delta_scan(v)
    if first is None:
        return ()
    pos: dict[str, int] = {}
    for j, t in enumerate(first.args):
        if isinstance(t, Var):
            pos.setdefault(t.name, j)

    def side(t: Any) -> tuple[str, Any] | None:
        if isinstance(t, Var) and t.name in pos:
            return ("col", pos[t.name])
        return ("const", t.value) if isinstance(t, Const) else None

    cmps: list[Test] = []
    held: list[Test] = []
    for op in v.ops[1:]:
        if isinstance(op, Filter):
            left, right = side(op.left), side(op.right)
            if left is not None and right is not None and "col" in (left[0], right[0]):
                cmps.append(("cmp", COMPARE[op.op], (left, right)))
        elif isinstance(op, Scan) and op.pred == target and not op.negated and len(
                op.args) >= key:
            args = op.args[:key]
            if all(isinstance(t, Var) and t.name in pos for t in args):
                test = ("held", tuple(pos[t.name] for t in args), None)  # type: ignore
                if test not in held:
                    held.append(test)
    return (*cmps, *held)  # (the comparisons first: cheaper, and often decisive)


def distinct_variants(variants: list[tuple[str, Variant]]) -> list[tuple[str, Variant]]:
    """``variants`` without those deriving what an earlier one does: the same ops and head
    up to the names of their variables (two rules reading a ``target`` atom alike, cut
    after their source atom, as R7's and R8's left child; a variant with an op other than
    a scan of variables, wildcards and constants is kept as it is)."""
    seen: set[tuple] = set()
    out = []
    for source, v in variants:
        shape = _renamed(v)
        if shape is None or (source, shape) not in seen:
            out.append((source, v))
            if shape is not None:
                seen.add((source, shape))
    return out


def _renamed(v: Variant) -> tuple | None:
    """``v``'s ops and head with each variable named by its first occurrence, or None when an
    op is not a scan or a term not a variable, wildcard or constant."""
    names: dict[str, int] = {}

    def term(t: Any) -> tuple | None:
        if isinstance(t, Var):
            return ("var", names.setdefault(t.name, len(names)))
        if isinstance(t, Const):
            return ("const", t.value)
        if isinstance(t, Wildcard):
            return ("any",)
        return None

    ops = []
    for op in v.ops:
        if not isinstance(op, Scan):
            return None
        args = tuple(term(t) for t in op.args)
        if None in args:
            return None
        ops.append((op.pred, op.version, op.negated, args))
    head = tuple(term(t) for t in v.head)
    return None if None in head else (tuple(ops), head)


@dataclass(frozen=True)
class Layers:
    """The two layers of a maintained evaluation, read off a compiled program (both engines'
    maintenance use it)."""

    complete_program: CompiledProgram
    """The program with aggregate selection only: what the complete layer evaluates."""
    layer: frozenset[str]
    """Relations of the strata up to the maintained one (held in both layers)."""
    post: frozenset[str]
    """Relations of the later strata (derived from the live layer)."""
    suppressing: dict[str, str]
    """Source relation → the relation whose selected tuples keep its tuples live."""
    embedded: dict[str, list[list[tuple[str, tuple[int, ...]]]]]
    """Relation of the layer → per rule, the (source relation, columns) its tuples embed."""
    alternatives: frozenset[str]
    """Relations whose tuples name an AND node in front: the source relation and those
    embedding it (or one of them) in their leading columns."""
    kept: frozenset[str]
    """Derived relations of the layer that no pruning deletes from: not counted, not
    aggregates, and no rule of theirs embeds its source (a user's ``Baz(q, e) :-
    SearchSpace(q, e, …)``). Deletions never cascade into them, and they are evaluated
    before anything is deleted (deletions start in the maintained stratum), so their live
    tuples are the complete layer's; revival, which follows embedded sources and counts,
    could not rebuild them. No statistics built-in runs before the maintained stratum, so an
    update never changes them either."""
    seeds: tuple[str, ...]
    """Relations live whole, whose tuples seed revival of the live layer under reference
    counting: the inputs, and the kept relations (their derivations count too)."""


def layers(compiled: CompiledProgram, plan: MaintenancePlan) -> Layers:
    f = compiled.features
    complete = replace(compiled, features=Features(schedules=f.schedules, aggsel=dict(f.aggsel)))
    layer = frozenset(p for s in compiled.strata[:plan.stratum + 1] for p in s.preds)
    post = frozenset(p for s in compiled.strata[plan.stratum + 1:] for p in s.preds)
    by_rule: dict[int, tuple[str, list[tuple[str, tuple[int, ...]]]]] = {}
    for src, variants in compiled.triggers.items():
        for v in variants:
            if v.embeds is not None and v.head_pred in layer:
                by_rule.setdefault(id(v.rule), (v.head_pred, []))[1].append(
                    (src, tuple(v.embeds)))
    embedded: dict[str, list[list[tuple[str, tuple[int, ...]]]]] = {}
    for head, atoms in by_rule.values():
        embedded.setdefault(head, []).append(atoms)
    source = plan.sources[0][0]
    width = len(compiled.schemas[source])
    alternatives = {source}
    grew = True
    while grew:
        grew = False
        for src in list(alternatives):
            for v in compiled.triggers.get(src, ()):
                if (v.embeds is not None and v.head_pred not in alternatives
                        and tuple(v.embeds[:width]) == tuple(range(width))):
                    alternatives.add(v.head_pred)
                    grew = True
    derived = {r.head.pred for r in compiled.rules}
    kept = frozenset(p for p in layer if p in derived and p not in f.refcount
                     and p not in compiled.aggregates and p not in embedded)
    return Layers(complete, layer, post, {s: r for r, s in f.suppress.items()}, embedded,
                  frozenset(alternatives), kept, (*compiled.inputs, *sorted(kept)))


def _revival_reads_aggregates(compiled: CompiledProgram, shape: Layers) -> bool:
    """Whether revival reads an aggregate of the layer: a rule it runs (one deriving a
    counted relation of the layer from a relation of the layer) scans one, or a relation of
    the layer embeds one (revival checks embedded sources are live)."""
    aggs = set(compiled.aggregates) & shape.layer
    counted = set(compiled.features.refcount)
    for p in shape.layer:
        for v in compiled.triggers.get(p, ()):
            if v.head_pred in counted and any(isinstance(op, Scan) and op.pred in aggs
                                              for op in v.ops):
                return True
    return any(src in aggs for rules in shape.embedded.values()
               for atoms in rules for src, _ in atoms)


def _support_tests(compiled: CompiledProgram, shape: Layers, head: str
                   ) -> list[tuple[tuple[str, tuple[int, ...]], ...]]:
    """The embedded sources a complete-layer tuple of ``head`` needs live to be live (all
    sources of any one list): one list per distinct list among ``head``'s rules — or, when
    every rule of ``head`` embeds its sources and the lists differ only in facts (relations
    no rule derives, outside the layer: both layers hold them whole, and no update changes
    them), the one list of the sources they all share.

    Exact for tuples of the complete layer, which are all revival tests: such a tuple was
    derived by one of the rules, whose facts held then and hold still, so "some list's
    sources all live" is "the shared ones live, and some list's facts there", and that
    rule's are. The rules deriving ``SearchSpace`` are of this kind (each embeds ``Goal``
    and one method fact: ``JoinMethod``, ``ScanMethod``, …): a candidate is tested once,
    against the live ``Goal``, instead of against each rule's pair until one holds (about
    1,300 candidates, two to eight tests each, in an 18-relation query's revival)."""
    lists = list(dict.fromkeys(tuple(atoms) for atoms in shape.embedded[head]))
    shared = tuple(a for a in lists[0] if all(a in atoms for atoms in lists[1:]))
    derived = {r.head.pred for r in compiled.rules}
    facts = {p for p in compiled.facts if p not in derived and p not in shape.layer}
    every_rule = len(shape.embedded[head]) == sum(r.head.pred == head for r in compiled.rules)
    if len(lists) > 1 and every_rule and all(
            src in facts for atoms in lists for src, cols in atoms if (src, cols) not in shared):
        return [shared]
    return lists


@dataclass(frozen=True)
class EngineReading:
    """What a :class:`MaintainedEngine` reads off its compiled program: the same for every
    session of the program, so it is made once per program object
    (:meth:`CompiledProgram.memoized`) instead of once per evaluation — a warm from-scratch
    optimization builds a new session, and on small queries this reading (about 0.3 ms) was
    a tenth of TPC-H Q3's optimization."""

    plan: MaintenancePlan
    shape: Layers
    complete_program: CompiledProgram
    """The complete layer's program: aggregate selection and the ``.bound`` seeds (when
    bounded), so that an OR node whose best plan is above its seed keeps no plan and the
    plans above it are never costed (the module's docstring, "bounded complete layer")."""
    embedded: dict[str, list[list[tuple[str, Callable[[tuple], tuple]]]]]
    """Relation of the layer → per distinct list of embedded sources among its rules, the
    sources and the functions reading their columns (:meth:`MaintainedEngine._supported`:
    rules that embed the same sources, as R6–R8 embed ``SearchSpace``, are checked once)."""
    suppressed_key: dict[str, tuple[int, ...]]
    """Source relation → its columns (the leading columns of the relation keeping it)."""
    rules_of: dict[str, int]
    """Relation of the layer → how many rules derive it."""
    regroup_after: bool
    """Whether a revival may recompute the aggregate groups it touches once, at its end,
    instead of at every wave that touches them (:meth:`MaintainedEngine._revive_all`)."""
    source_tests: dict[int, tuple[Test, ...]]
    """Per variant reading the maintained relation's source tuples (the rules and their
    cuts of :attr:`MaintenancePlan.enter`), the tests a source tuple must pass to derive
    anything through it (:func:`source_tests`)."""
    source_cols: dict[str, tuple[int, ...]]
    """Source relation → its columns holding the group key."""
    embeds_of: dict[str, list[tuple[int, ...]]]
    """Source relation → the distinct embeddings of its rules (:attr:`Variant.embeds`)."""
    reach_reads: list[tuple[int, ...] | None]
    """Per variant of :attr:`MaintenancePlan.reach`, the columns of a changed tuple it
    reads (:func:`delta_reads`)."""
    reach_joins: list[tuple[tuple[int, ...], tuple[int, ...]] | None]
    """Per variant of :attr:`MaintenancePlan.reach`, the columns its join reads of a
    changed tuple and of the source (:func:`reach_join`), or None."""
    support_cols: dict[str, list[tuple[tuple[str, tuple[int, ...]], ...]]]
    """:attr:`embedded` with the columns rather than the functions reading them (a revival
    on frames links the sources' rows once: :mod:`.revival`)."""

    @staticmethod
    def of(compiled: CompiledProgram, bounded: bool) -> EngineReading:
        """The reading of ``compiled`` (``bounded``: the complete layer keeps the seeds)."""
        return compiled.memoized(("maintained engine", bounded),
                                 lambda: EngineReading._read(compiled, bounded))

    @staticmethod
    def _read(compiled: CompiledProgram, bounded: bool) -> EngineReading:
        plan = maintenance_plan(compiled)
        shape = layers(compiled, plan)
        f = compiled.features
        complete = replace(shape.complete_program, features=replace(
            shape.complete_program.features, bound=dict(f.bound) if bounded else {}))
        support = {head: _support_tests(compiled, shape, head) for head in shape.embedded}
        embedded = {head: [[(s, key_of(c)) for s, c in atoms] for atoms in lists]
                    for head, lists in support.items()}
        embeds_of: dict[str, list[tuple[int, ...]]] = {}
        for pred, _, v in plan.sources:
            if v.embeds is not None and v.embeds not in embeds_of.get(pred, []):
                embeds_of.setdefault(pred, []).append(v.embeds)
        return EngineReading(
            plan, shape, complete, embedded,
            {s: tuple(range(len(compiled.schemas[s]))) for s in shape.suppressing},
            {p: sum(r.head.pred == p for r in compiled.rules) for p in shape.layer},
            not _revival_reads_aggregates(compiled, shape),
            {id(v): source_tests(v, plan.target, plan.key)
             for v in (*(v for _, _, v in plan.sources), *(v for _, v in plan.enter))},
            {pred: cols for pred, cols, _ in plan.sources}, embeds_of,
            [delta_reads(v) for _, v in plan.reach],
            [reach_join(v, plan.target) for _, v in plan.reach], support)


class MaintainedEngine(PythonEngine):
    """The ``python`` engine, keeping its complete layer between evaluations so that
    :meth:`update` can follow a change of statistics incrementally."""

    def __init__(self, compiled: CompiledProgram, ctx: dict[int, Any], *,
                 bounded: bool = True):
        """``bounded=False``: the complete layer without the seed bounds (the live layer is
        the same; the complete layer keeps every OR node, as the Spark twin's does)."""
        super().__init__(compiled, ctx)
        self.bounded = bounded
        reading = EngineReading.of(compiled, bounded)
        self.plan = reading.plan
        self.live_program = compiled
        shape = reading.shape
        self.complete_program = reading.complete_program
        """The complete layer's program (:attr:`EngineReading.complete_program`)."""
        self._unbounded = shape.complete_program
        """The complete layer's program without bounds: the fallback when a seed is below
        some query's optimum."""
        self.fallbacks = 0
        """Evaluations and updates whose complete layer was re-derived without bounds."""
        self.rebuild_share = REBUILD_SHARE
        """:data:`REBUILD_SHARE` for this engine (0: every update that re-derives a group
        evaluates afresh; infinite: none does)."""
        self._rebuild_limit = math.inf
        """During an update: how many groups its re-derivation may queue (:class:`_Rebuild`)."""
        self.rebuilds = 0
        """Updates that evaluated afresh (:data:`REBUILD_SHARE`)."""
        st = compiled.strata[self.plan.stratum]
        self._sel = compiled.features.aggsel.get(self.plan.target)
        self._rank = compiled.builtins[st.schedule.rank].fn  # type: ignore[union-attr]
        self._rank_batch = compiled.builtins[st.schedule.rank].batch  # type: ignore[union-attr]
        self._layer, self._post, self._kept = shape.layer, shape.post, shape.kept
        self._seeds = shape.seeds
        self._suppressing = shape.suppressing
        self._embedded = reading.embedded
        self._support_cols = reading.support_cols
        self._suppressed_key = reading.suppressed_key
        self._alternatives = shape.alternatives
        self._embeds = shape.embedded
        self._rules_of = reading.rules_of
        self._regroup_after = reading.regroup_after
        self._touched: dict[str, set[tuple]] | None = None
        """During such a revival: per aggregate, the groups to recompute at its end."""
        self._kept_sources: dict[str, dict[tuple, Bucket]] | None = None
        """During a from-scratch revival: per suppressed source relation, the only
        tuples of it that can be live, each with the suppressing relation's tuples keeping
        it (:meth:`_suppression_keeps`); else None."""
        self._candidate_indexes: dict[tuple[str, tuple[int, ...]], dict[tuple, list]] = {}
        """During a from-scratch revival: the candidates of a relation by columns
        (:meth:`_candidates`)."""
        self._source_tests = reading.source_tests
        self._source_rows: dict[tuple[str, tuple[int, ...]], SourceRows | None] = {}
        """Per source relation and group columns, its tuples on arrays after an evaluation
        on frames (:meth:`_picker`); made again after every evaluation."""
        self._source_cols, self._embeds_of = reading.source_cols, reading.embeds_of
        self._reach_reads, self._reach_joins = reading.reach_reads, reading.reach_joins
        self._frames: columnar.Maintained | None = None
        """The complete layer on frames after an evaluation, for revival (:meth:`_on_frames`)."""
        self._probes: dict[tuple[str, tuple[int, ...]], int] = {}
        """Lookups of the complete layer made on frames, per relation and columns: revival
        looks a large layer up on its frames (one probe per batch) instead of building a hash
        index over all of it, until it has probed :data:`FRAME_PROBES` times — an update's
        revival, group by group, makes many small lookups, which a hash index (built once,
        then kept) answers faster."""
        self._caps: dict[str, dict[tuple, Any]] = {}
        """Per relation pruned by a ``.bound``, its bounds (:meth:`_bound_caps`)."""
        self._cap_reads: dict[str, tuple] = {}
        """Per relation pruned by a ``.bound``, how :meth:`_within` reads its bounds."""
        self._unframed: set[int] = set()
        """Variants (by id) a re-derivation cannot run on frames (:class:`~.bulk.Unframed`)."""
        self._how = "auto"
        """During a re-derivation: ``REOPT_COLUMNAR`` (:func:`~.columnar.mode`), read at its
        start (:meth:`_rederive_stale`) rather than at each variant run (:func:`_bulk`)."""
        rank = compiled.strata[self.plan.stratum].schedule.rank  # type: ignore[union-attr]
        self.later = LaterStrata(compiled, self.plan.stratum + 1,
                                 compiled.builtins[rank].inputs, frozenset(
                                     p for i in self.plan.reseed
                                     for p in compiled.strata[i].preds))
        """The later strata, followed incrementally by updates (:mod:`.later`)."""
        self._old: Mapping[int, Any] = {}
        """During an update: the plan spaces before it."""
        self._keys_kept: tuple[list, frozenset[tuple], dict] | None = None
        """The source relations (with their versions) and the groups they name
        (:meth:`_source_keys`)."""
        self._asked: list[Collection[tuple]] = []
        self._named: set[tuple] = set()
        """During an update: the groups asked about for staleness and those named stale
        (:meth:`stale_of`)."""
        self.live_changes: dict[str, tuple[Collection[tuple], set[tuple]]] = {}
        """After :meth:`changed_since`: per live relation that changed, its tuples inserted
        or deleted and the tuples it holds now (those of the first in it were inserted): a
        session's ``held`` metrics follow them instead of recounting."""

    # -- saved state ----------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        """The state between updates: both layers (a relation the live layer shares with the
        complete one stays shared: pickle keeps identity), the reference counts, the bounds
        both layers were pruned with, the count of unbounded fallbacks and the plan spaces.
        The program pickles as its source; everything derived from it, and the frames (whose
        strings are codes of this process's dictionary), is made again."""
        if not hasattr(self, "complete"):
            return {"program": self.live_program, "ctx": self.ctx, "bounded": self.bounded}
        return {"program": self.live_program, "ctx": self.ctx, "bounded": self.bounded,
                "complete": self.complete,
                "live": self.live, "counts": self.counts, "stats": self.stats,
                "caps": self._caps, "fallbacks": self.fallbacks,
                "later": self.later.__getstate__(), "on_demand": self.on_demand,
                "pending": self.pending}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["program"], state["ctx"],  # type: ignore[misc]
                      bounded=state["bounded"])
        if "complete" not in state:
            return
        self.complete, self.live = state["complete"], state["live"]
        self.full, self.counts, self.stats = self.live, state["counts"], state["stats"]
        self._caps = state["caps"]
        self.fallbacks = state["fallbacks"]
        if "later" in state:  # (a state saved before the later strata kept any: counted anew)
            self.later.restore(state["later"])
        self.on_demand = state.get("on_demand", self.on_demand)
        self.pending = state.get("pending")
        self.frames = {}

    # -- from scratch ---------------------------------------------------------------------------
    def evaluate(self, inputs: Mapping[str, Iterable[tuple]],
                 kept: Mapping[str, tuple[Relation, Any]] | None = None
                 ) -> tuple[dict[str, Relation], RunStats]:
        """From scratch; ``kept``: relations of strata that no statistics move, as a former
        evaluation left them (with their frames), taken as they are instead of evaluated
        again (:meth:`_unmoved`)."""
        t0 = time.perf_counter()
        self.program = self.complete_program
        self._frames = None
        self._probes = {}
        kept = kept or {}
        arrays = {k: a for k, a in self._source_rows.items()
                  if a is not None and k[0] in kept}  # (on a kept source's frame: valid)
        self._source_rows = {}
        self.start(inputs)
        self._run_complete(kept)
        self._caps = self._bound_caps()
        if self.program.features.bound and not self._caps:
            # a seed below some query's optimum: the bounded layer lacks a root's plans;
            # without bounds, as a from-scratch evaluation (driver.evaluate) falls back
            self.fallbacks += 1
            first = self.stats
            self.program = self._unbounded
            self.start(inputs)
            self._run_complete(kept)
            for mine, theirs in ((self.stats.produced, first.produced),
                                 (self.stats.derived, first.derived)):
                for pred, n in theirs.items():  # the work of both runs
                    mine[pred] = mine.get(pred, 0) + n
        self.complete = self.full
        if arrays:
            held = self.complete[self.plan.target].index(tuple(range(self.plan.key))).keys()
            for a in arrays.values():
                a.hold(held)
            self._source_rows = arrays
        self._on_frames()
        self._live()
        self.live = self.full
        self.stats.held = self.sizes()
        self.defer()
        self.stats.seconds = time.perf_counter() - t0
        return self.full, self.stats

    def _run_complete(self, kept: Mapping[str, tuple[Relation, Any]]) -> None:
        """Evaluate the strata up to the maintained one, those whose relations are all
        ``kept`` taken from there (the relation, and its frame entry or None)."""
        for stratum in self.program.strata[:self.plan.stratum + 1]:
            if not stratum.preds or not all(p in kept for p in stratum.preds):
                self.run_stratum(stratum)
                continue
            for p in stratum.preds:
                rel, frame = kept[p]
                self.full[p] = rel
                if frame is not None:
                    self.frames[p] = frame

    def _unmoved(self) -> dict[str, tuple[Relation, Any]]:
        """The complete layer's relations that no change of statistics moves, with their
        frame entries where still valid: those of the strata before the maintained one that
        are no seed of ``.bound`` (evaluated again on every update), pruned by no bound,
        and read only inputs, facts and such relations — no statistics built-in runs there
        (:func:`maintenance_plan` checks), so a fresh evaluation derives them again, tuple
        for tuple (the enumeration: most of a from-scratch evaluation of the layer). An
        update never changes them either (the complete layer deletes from none)."""
        plan = self.plan
        prog = self.complete_program
        bounded = set(prog.features.bound) | set(self._unbounded.features.bound)
        fixed = set(prog.inputs) | set(prog.facts)
        out: dict[str, tuple[Relation, Any]] = {}
        for i, stratum in enumerate(prog.strata[:plan.stratum]):
            own = set(stratum.preds)
            reads = {a.pred for r in prog.rules if r.head.pred in own for a in r.body
                     if isinstance(a, Atom) and not a.is_builtin}
            if i in plan.reseed or own & bounded or not reads <= fixed | own:
                continue
            fixed |= own
            for p in own:
                rel, frame = self.complete[p], self.frames.get(p)
                valid = frame is not None and frame[0] is rel and frame[1] == rel.version
                out[p] = (rel, frame if valid else None)
        return out

    def _live(self) -> None:
        """Derive the live layer from the complete one: suppression and reference counting
        as a full evaluation applies them, then the later strata.

        With reference counting, everything live is supported from the inputs (the queries'
        roots), so the layer is built top-down by revival — touching only what stays live
        (for ``all``, the optimal plan trees) instead of copying the complete layer and
        deleting the rest; without it, suppression deletes from a copy."""
        prog = self.program = self.live_program
        counted = bool(prog.features.refcount) and bool(prog.features.suppress)
        self.full = Relations({p: ((Relation() if counted and p not in self._kept else r.copy())
                                   if p in self._layer else r)
                               for p, r in self.complete.items()})
        for pred in self._post:
            self.full[pred] = Relation()
        if counted:
            self.counts = {g: {} for g in prog.features.refcount}
            self._revive_from_scratch()
        else:
            self._count_and_suppress()
        self._later_strata()

    def _revive_from_scratch(self) -> None:
        """Revive the live layer from its seeds (the queries' roots, the relations kept
        whole): on the complete layer's frames, set at a time, where :func:`revival.plan`
        says it runs there (a large layer, kept on frames); else tuple at a time."""
        work: deque[tuple[str, Iterable[tuple]]] = deque()
        on_frames = revival.plan(self)
        if on_frames is None:
            self._kept_sources = keeps = self._suppression_keeps()
            # (the suppressing relation's candidates by source tuple: the same index)
            self._candidate_indexes = {(self._suppressing[s], self._suppressed_key[s]): by
                                       for s, by in (keeps or {}).items()}
        try:
            for p in self._seeds:
                self._spread(p, list(self.full[p].rows), work)
            if on_frames is None:
                self._revive_all(work)
            else:
                revival.revive(self, on_frames, work)
        finally:
            self._kept_sources, self._candidate_indexes = None, {}

    def _later_strata(self) -> None:
        """Evaluate the strata after the maintained one on the live layer."""
        for stratum in self.program.strata[self.plan.stratum + 1:]:
            if not stratum.ondemand:  # (left stale by evaluate(), derived when read)
                self.run_stratum(stratum)

    def _bound_caps(self) -> dict[str, dict[tuple, Any]]:
        """Per relation pruned by a ``.bound``: its bound per bound key (the bound relation's
        leading columns, a prefix of the group's), the tightest where there are several.

        None at all when a bound would leave an input's group (a query's root) without its
        selected tuples: that bound was below the optimum — rules whose space lacks a plan
        the seed costed — and a from-scratch evaluation then runs without bounds too
        (:func:`~reopt.evaluator.driver.evaluate`)."""
        prog, out = self.live_program, {}
        for target, caps in self._seed_caps().items():
            width = len(next(iter(caps))) if caps else 0
            sel = prog.features.aggsel[target]
            pos = prog.aggregates[sel.agg][0]
            n = len(sel.key)
            # the roots' groups looked up (kept index), not a map of every group made
            by_group = self.full[sel.agg].index(tuple(i for i in range(n + 1) if i != pos))
            for inp in prog.inputs:
                for root in self.full[inp].rows:
                    if len(root) == n and not caps_within(caps, root[:width], min(
                            (r[pos] for r in by_group.get(root, ())), default=math.inf)):
                        return {}
            out[target] = caps
        return out

    def _seed_caps(self) -> dict[str, dict[tuple, Any]]:
        """Per relation pruned by a ``.bound``: the tightest seed bound per bound key, as
        ``self.full`` holds the bound relations now (no check against the roots' optima)."""
        prog, out = self.live_program, {}
        for target, bound in prog.features.bound.items():
            width = len(prog.schemas[bound]) - 1
            out[target] = {k: min(t[-1] for t in ts)
                           for k, ts in self.full[bound].index(tuple(range(width))).items()
                           if ts}
        return out

    def _within(self, pred: str, rows: Iterable[tuple]) -> list[tuple]:
        """Those of ``rows`` (tuples of ``pred``) that do not exceed their bound: all of them
        unless ``pred`` is pruned by a ``.bound``. The live layer drops the others, and so
        does a bounded complete layer's re-derivation (:meth:`_settle`); an unbounded one
        (``bounded=False``) keeps them, for a bound that rises (paper, Section 5.3)."""
        caps = self._caps.get(pred)
        if not caps:
            return list(rows)
        read = self._cap_reads.get(pred)
        if read is None or read[0] is not caps:
            read = self._cap_reads[pred] = self._cap_read(pred, caps)
        _, lead, get, val = read
        return [r for r in rows if (c := get(lead(r))) is None or not r[val] > c]

    def _cap_read(self, pred: str, caps: dict[tuple, Any]
                  ) -> tuple[dict[tuple, Any], Callable[[tuple], Any], Callable[[Any], Any], int]:
        """How :meth:`_within` reads ``pred``'s bounds ``caps``: (``caps``, the function
        reading a tuple's bound key, the lookup of a key's bound, the bounded column). Made
        once per bounds object (an update replaces the bounds, never changes them in place),
        not once per call (a one-delta update asks about a hundred times)."""
        sel = self.live_program.features.aggsel[pred]
        width = len(next(iter(caps)))
        if width == 1:  # (one bound column, the query's: its value read, no key built)
            return caps, itemgetter(sel.key[0]), {k[0]: c for k, c in caps.items()}.get, \
                sel.value
        return caps, key_of(tuple(sel.key[:width])), caps.get, sel.value

    def _reject_above_bounds(self) -> None:
        """Delete the selected tuples that exceed their bound (see :meth:`_within`)."""
        for target in self._caps:
            rows = self.full[target].rows
            dead = rows - set(self._within(target, rows))
            if dead:
                self._delete(target, dead)

    def _reseed(self) -> None:
        """Evaluate again the strata no rule reads (:attr:`MaintenancePlan.reseed`: seed
        bounds under the new statistics), in the complete layer and in the live one."""
        for i in self.plan.reseed:
            stratum = self.program.strata[i]
            self.full = self.complete
            for p in stratum.preds:
                self.complete[p] = Relation()
            self.run_stratum(stratum)
            for p in stratum.preds:
                self.live[p] = self.complete[p].copy()

    def _count_and_suppress(self) -> None:
        prog = self.program
        self._reject_above_bounds()
        self.counts = {}
        for g in prog.features.refcount:
            counts: dict[tuple, int] = {}
            for r in self.full[g].rows if g in prog.inputs else ():
                counts[r] = 1
            for s in prog.strata:
                for v in s.base:
                    if v.head_pred == g:
                        for r in self.run_variant(v, self.full, {}):
                            counts[r] = counts.get(r, 0) + 1
            self.counts[g] = counts
        for pruned, source in prog.features.suppress.items():
            width = len(prog.schemas[source])
            have = self.full[pruned].index(tuple(range(width)))
            dead = [s for s in self.full[source].rows if s not in have]
            if dead:
                self._delete(source, dead)

    # -- incremental -------------------------------------------------------------------------
    def update(self, spaces: Mapping[int, Any]) -> tuple[dict[str, Relation], UpdateStats]:
        """Replace the queries' plan spaces (new statistics) and bring every relation to what
        a from-scratch evaluation under them gives."""
        t0 = time.perf_counter()
        old = self._old = dict(self.ctx)
        self._asked, self._named = [], set()
        self.ctx.clear()  # the compiled variants hold this very mapping
        self.ctx.update(spaces)
        self.stats = RunStats()
        up = UpdateStats()
        self.program = self.complete_program
        caps = self._caps
        self._reseed()
        self.full = self.complete
        self._rebuild_limit = self.rebuild_share * len(self._source_keys()[0])
        try:
            if self.bounded:
                changes = self._bounded_changes(old, caps, up)
            else:
                changes = self._unbounded_changes(old, caps, up)
        except _Rebuild:
            return self._rebuild(up, t0)
        finally:
            self._rebuild_limit = math.inf
        self.full = self.live
        self.program = self.live_program
        followed = self._read_since()
        up.from_empty = self._live_update(changes, old, followed)
        self.stats.held = self.sizes()
        self.defer(followed)  # (stale as of the new statistics; those followed kept ready)
        up.seconds = time.perf_counter() - t0
        return self.full, up

    def _rebuild(self, up: UpdateStats, t0: float) -> tuple[dict[str, Relation], UpdateStats]:
        """Finish an update that reached most of the space by evaluating afresh under the new
        statistics: both layers, the reference counts and the later strata's state become a
        fresh evaluation's (what the half-done re-derivation left is dropped). The relations
        no statistics move are kept as they are (:meth:`_unmoved`): not evaluated again, and
        what changed is told without comparing them (:meth:`changed_since`)."""
        inputs = {p: list(self.complete[p].rows) for p in self.live_program.inputs}
        rels, stats = self.evaluate(inputs, self._unmoved())
        self.later.forget()
        self.rebuilds += 1
        up.rebuilt = True
        for pred, n in stats.derived.items():  # (the aborted re-derivation's work, and this)
            up.derived[pred] = up.derived.get(pred, 0) + n
        up.seconds = time.perf_counter() - t0
        return rels, up

    def _unbounded_changes(self, old: Mapping[int, Any], caps: dict[str, dict[tuple, Any]],
                           up: UpdateStats) -> dict[tuple, tuple[set[tuple], set[tuple]]]:
        """An unbounded complete layer's changed groups: every OR node is there, so the
        stale ones change, and the bounds move only what the live layer holds."""
        complete = self.complete
        stale = self._stale_keys(old, complete[self.plan.target].index(
            tuple(range(self.plan.key))).keys())
        up.stale = len(stale)
        changes = self._rederive_stale(stale, up)
        up.changed = len(changes)
        self._caps = self._bound_caps()  # checked against the roots' new optima
        if caps != self._caps:
            self._crossing(caps, changes)
        return changes

    def _bounded_changes(self, old: Mapping[int, Any], caps: dict[str, dict[tuple, Any]],
                         up: UpdateStats) -> dict[tuple, tuple[set[tuple], set[tuple]]]:
        """A bounded complete layer's changed groups: the stale ones and those the moved
        bounds take in or out (:meth:`_stale`), without bounds when the new seed is below
        some query's optimum."""
        if caps or self.program.features.bound:
            self._caps = self._seed_caps()  # the complete layer's bounds from here
        stale, entering = self._stale(old, caps)
        up.stale = len(stale | entering)
        changes = self._rederive_stale(stale, up, entering)
        if self.program.features.bound and not self._bound_caps():
            # the new seed is below some query's optimum (rules whose space lacks the greedy
            # plan): the layer is completed without bounds, as a from-scratch evaluation falls
            # back to (driver.evaluate) — the groups the bounds kept out are derived now
            self.fallbacks += 1
            up.fallback = True
            bounded, self._caps = self._caps, {}
            again, entering = self._stale(self.ctx, bounded)
            up.stale += len(again | entering)
            for g, (removed, added) in self._rederive_stale(again, up, entering).items():
                went, came = changes.get(g, (set(), set()))
                went, came = went | (removed - came), (came - removed) | added
                changes[g] = (went - came, came - went)
        up.changed = len(changes)
        return changes

    def _stale(self, old: Mapping[int, Any], caps: dict[str, dict[tuple, Any]]
               ) -> tuple[set[tuple], set[tuple]]:
        """The groups to re-derive after the plan spaces ``old`` became ``self.ctx`` and the
        complete layer's bounds ``caps`` became ``self._caps``: those to re-derive whole, and
        those absent under a bound that rose (built-ins answering as before), which may enter
        (:meth:`_rederive_stale`).

        The complete layer holds exactly the groups whose best plan does not exceed their
        bound (a plan's inputs cost no more than it: an OR node above the bound has no plan
        below it, and the plans reading it none either), so besides the groups whose
        built-ins may answer differently (present or not: a cheaper one may enter), a bound
        that falls re-derives the groups above it (they leave), and one that rises every group
        absent under it (Section 5.3: a bound that rises re-introduces plans)."""
        plan, complete = self.plan, self.complete
        by_key = complete[plan.target].index(tuple(range(plan.key)))
        if not caps and not self._caps:  # unbounded: every group is there
            return self._stale_keys(old, by_key.keys()), set()
        keys, by_query = self._source_keys()
        stale = self._stale_keys(old, keys, by_query)
        new = self._caps.get(plan.target, {})
        was = caps.get(plan.target, {})
        if not new and not was:
            return stale, set()
        width = len(next(iter(new or was)))
        # (no bound for a key: unbounded, above every bound)
        rose = {k for k in set(new) | set(was)
                if (c := new.get(k)) is None or ((w := was.get(k)) is not None and c > w)}
        fell = {k for k in new if (w := was.get(k)) is None or new[k] < w}
        if not rose:
            entering: set[tuple] = set()
        elif width == 1 and all((q,) in rose for q in by_query):  # (a bound per query)
            entering = keys.difference(by_key, stale)  # every absent group: in C
        else:
            entering = {g for g in keys if g[:width] in rose and g not in by_key} - stale
        if fell:
            agg = next(iter(plan.aggregates), None)
            if agg is not None:
                pos = self.program.aggregates[agg][0]
                for r in complete[agg].rows:
                    g = r[:pos] + r[pos + 1:]
                    if g[:width] in fell and not caps_within(new, g[:width], r[pos]):
                        stale.add(g)
            else:
                stale.update(g for g in by_key if g[:width] in fell)
        return stale, entering

    def _source_keys(self) -> tuple[frozenset[tuple], dict[int, Nodes]]:
        """The groups the source relations' tuples name (every group that can derive), as a
        set and by query (:func:`keys_by_query`): kept while the source relations are the
        same objects at the same versions — between updates they are (no update changes
        the alternatives) — so an update does not gather them again (a pass over every
        group: about a millisecond of a small update on a large query)."""
        complete = self.complete
        rels = tuple(dict.fromkeys((s, c) for s, c, _ in self.plan.sources))
        stamp = [(complete[s], complete[s].version) for s, _ in rels]
        kept = self._keys_kept
        if kept is not None and len(kept[0]) == len(stamp) and all(
                a is b and v == w for (a, v), (b, w) in zip(kept[0], stamp, strict=True)):
            return kept[1], kept[2]
        keys: set[tuple] = set()
        for source, cols in rels:
            arrays = self._unindexed(source, cols)
            keys.update(arrays.run if arrays is not None else complete[source].index(cols))
        frozen = frozenset(keys)
        self._keys_kept = (stamp, frozen, keys_by_query(frozen))
        return frozen, self._keys_kept[2]

    def _stale_keys(self, old: Mapping[int, Any], keys: Collection[tuple],
                    by_query: Mapping[int, Nodes] | None = None
                    ) -> set[tuple]:
        """:func:`stale_keys` of ``keys`` (grouped by query already: ``by_query``); for the
        update's own statistics change (from ``old``), what was asked and named is kept for
        the later strata (:meth:`stale_of`)."""
        stale = (stale_keys(old, self.ctx, keys) if by_query is None
                 else stale_of_queries(old, self.ctx, by_query))
        if old is self._old:  # (a copy: an index's keys change as groups are re-derived)
            self._asked.append(keys if isinstance(keys, (set, frozenset)) else set(keys))
            self._named |= stale
        return stale

    def stale_of(self, keys: Iterable[tuple]) -> set[tuple]:
        """Those of the groups ``keys`` that the update's statistics change made stale: as
        named for the maintained stratum, which asked about every group of the complete layer
        before re-deriving it; the others asked now."""
        keys = set(keys)
        unknown = keys
        for asked in self._asked:
            unknown = unknown - asked
        if unknown:
            self._named |= stale_keys(self._old, self.ctx, unknown)
        return keys & self._named

    def _rederive_stale(self, stale: set[tuple], up: UpdateStats,
                        entering: set[tuple] = frozenset()  # type: ignore[assignment]
                        ) -> dict[tuple, tuple[set[tuple], set[tuple]]]:
        """Re-derive the ``stale`` groups, the ``entering`` ones (absent under a bound that
        rose, their built-ins answering as before) and the parents they reach, in rank order,
        a rank at a time (:meth:`_rederive_groups`); returns each changed group's selected
        tuples that went and that came.

        A parent reached only through changed children (not stale itself: its built-ins
        answer as before) is re-derived from the source tuples that read a changed child and
        those of its selected tuples (:attr:`MaintenancePlan.reach`), not from all of them:
        every other source tuple derives what it did, which was worse than the selected ones
        (or above the bound), so unless the selected ones got worse (then the group is
        re-derived whole), the best of those few is the group's best. A group without
        selected tuples — entering, or stale and absent: its built-ins may answer otherwise,
        but a plan needs its children's — is derived from its source tuples whose children
        are all present, or that read none (:attr:`MaintenancePlan.enter`; any other reads a
        child absent before, which comes back, if at all, as a changed child); one with none
        is not queued. An unbounded layer (``bounded=False``, the Spark twin's shape)
        re-derives every group it queues whole, as the Spark twin does (their update metrics
        are compared)."""
        plan, complete = self.plan, self.complete
        self._frames = None  # updates run on tuples; frames (revival's lookups) would lag
        self._how = columnar.mode()  # (read once, not at each of a rank's variant runs)
        partial: dict[tuple, dict[str, set[tuple]]] | None = (
            {} if plan.reach and self._sel is not None and self.bounded else None)
        if partial is None:
            stale = stale | entering  # (no way to tell their alternatives: whole)
        else:  # an absent group derives only from present children, stale or not
            selected = complete[plan.target].index(tuple(range(plan.key)))
            absent = {g for g in stale if not selected.get(g)}
            stale, entering = stale - absent, entering | absent
        if partial is not None and entering:
            deltas: dict[tuple[str, tuple[int, ...]], Batch] = {}  # (rules read one alike)
            groups = list(entering)  # (one list: the pickers look its runs up once)
            for (source, cols, _), (_, v) in zip(plan.sources, plan.enter, strict=True):
                picker = self._picker(source, cols, groups)
                if picker is not None:
                    delta = Batch(picker.pick(id(v), groups))
                elif (delta := deltas.get((source, cols))) is None:
                    delta = deltas[(source, cols)] = Batch(
                        self._group_rows(source, cols, groups))
                key = key_of(cols)
                for row in set(self.run_variant(v, complete, {source: delta})
                               if delta.rows else ()):
                    partial.setdefault(key(row), {}).setdefault(source, set()).add(row)
            entering = {g for g in entering if g in partial}
        pending: dict[int, set[tuple]] = {}
        queued: set[tuple] = set()

        def queue(groups: set[tuple]) -> None:
            groups -= queued
            queued.update(groups)
            if len(queued) > self._rebuild_limit:
                raise _Rebuild
            for g, k in zip(groups, self._ranks(groups), strict=True):
                pending.setdefault(k, set()).add(g)

        queue(stale | entering)
        changes: dict[tuple, tuple[set[tuple], set[tuple]]] = {}
        while pending:
            groups = sorted(pending.pop(min(pending)))
            up.rederived += len(groups)
            changed = self._rederive_groups(groups, up, partial or {})
            if not changed:
                continue
            changes.update(changed)
            parents: set[tuple] = set()
            if partial is None:
                moved = [t for went, came in changed.values() for t in (*went, *came)]
                delta = {plan.target: Relation(moved)}
                for v in plan.parents:
                    parents.update(self.run_variant(v, complete, delta))
            else:
                self._reach(changed, stale, parents, partial)
            queue(parents)
        return changes

    def _reach(self, changed: Mapping[tuple, tuple[set[tuple], set[tuple]]],
               stale: set[tuple], parents: set[tuple],
               partial: dict[tuple, dict[str, set[tuple]]]) -> None:
        """Add to ``parents`` the groups not ``stale`` (queued whole already) whose source
        tuples read a tuple of the ``changed`` groups, and those source tuples to ``partial``
        (per parent, per source relation: :attr:`MaintenancePlan.reach`).

        Of a group whose best got worse (:meth:`_worse_moved`), only the source tuples of
        the parents' selected tuples are taken, where the join is known
        (:meth:`_selected_readers`): any other one derived a tuple worse than
        its parent's selected ones (else it would be selected), and through a worse child
        it derives nothing better than it did — the monotonicity aggregate selection
        already rests on (a group's worse tuples are dropped because nothing derived from
        them can beat what its best derive). So such a parent keeps its best unless its
        selected tuples were reached and got worse, and then it is re-derived whole
        (:meth:`_rederive_groups`)."""
        plan, complete = self.plan, self.complete
        better, worse = self._worse_moved(changed)
        for (source, v), reads, join in zip(plan.reach, self._reach_reads, self._reach_joins,
                                            strict=True):
            key = key_of(self._source_cols[source])
            for moved, selected_only in ((better, False), (worse, True)):
                if not moved:
                    continue
                rows = (self._selected_readers(source, join, moved, stale) if selected_only
                        else self._readers(source, join, moved))
                if rows is None:
                    delta = {plan.target: Relation(moved)}
                    rows = self.run_variant(v, complete, self._one_each(moved, reads, delta))
                by_parent: dict[tuple, list[tuple]] = {}
                for parent, row in zip(map(key, rows), rows):  # noqa: B905 (keys read in C)
                    if (have := by_parent.get(parent)) is None:
                        by_parent[parent] = [row]
                    else:
                        have.append(row)
                for parent in by_parent.keys() - stale:  # (a stale one is queued whole)
                    partial.setdefault(parent, {}).setdefault(source, set()).update(
                        by_parent[parent])
                    parents.add(parent)

    def _readers(self, source: str, join: tuple[tuple[int, ...], tuple[int, ...]] | None,
                 moved: list[tuple]) -> list[tuple] | None:
        """The tuples of ``source`` that a reach variant joining ``moved`` on ``join``
        (:func:`reach_join`) finds, looked up on the source's arrays
        (:meth:`SourceRows.readers`) — no hash index of a large source relation built for
        it; None where there are none (then the variant runs)."""
        if join is None:
            return None
        picker = self._arrays(source, self._source_cols[source])
        if picker is None:
            return None
        return picker.readers(join[1], set(map(key_of(join[0]), moved)))

    def _selected_readers(self, source: str,
                          join: tuple[tuple[int, ...], tuple[int, ...]] | None,
                          moved: list[tuple], stale: set[tuple]) -> list[tuple] | None:
        """:meth:`_readers` restricted to the source tuples of selected tuples of groups not
        ``stale`` (:meth:`_selected_sources`), read off the selected tuples themselves: those
        holding a moved tuple's values where they embed the joined source columns, looked
        up in an index of the maintained relation on those columns (kept up to date as
        groups settle) — work in proportion to the parents' best plans reading the moved
        tuples, not to all their alternatives. None where ``join`` is None."""
        if join is None:
            return None
        plan = self.plan
        rel = self.complete[plan.target]
        keys = set(map(key_of(join[0]), moved))
        out: list[tuple] = []
        for embeds in self._embeds_of[source]:
            idx = rel.index(tuple(embeds[j] for j in join[1]))
            embedded, n = key_of(embeds), plan.key
            out += [embedded(t) for k in keys for t in idx.get(k, ()) if t[:n] not in stale]
        if len(self._embeds_of) > 1 or len(self._embeds_of[source]) > 1:
            have = self.complete[source].rows  # (a tuple another rule derived: not a source)
            out = [r for r in out if r in have]
        return out

    def _worse_moved(self, changed: Mapping[tuple, tuple[set[tuple], set[tuple]]]
                     ) -> tuple[list[tuple], list[tuple]]:
        """The tuples that went and came of the ``changed`` groups, apart: those of groups
        whose best got strictly worse under the aggregate selection (or that lost every
        selected tuple), and the others (better, equal, or new)."""
        sel = self._sel
        better: list[tuple] = []
        worse: list[tuple] = []
        for went, came in changed.values():
            if sel is not None and went and (not came or _worse_than(
                    sel.func, next(iter(came))[sel.value], next(iter(went))[sel.value])):
                worse += went
                worse += came
            else:
                better += went
                better += came
        return better, worse

    def _picker(self, source: str, cols: tuple[int, ...], groups: list[tuple]
                ) -> SourceRows | None:
        """The source relation ``source``'s tuples on arrays, grouped by ``cols``, to pick
        the source tuples of ``groups`` that can derive (:mod:`.sourcerows`): made on first
        use after an evaluation that left the source on a frame, while it is the relation
        built from that frame (it never changes between evaluations); None otherwise, or
        when ``groups`` have few source tuples (the loops take every source tuple)."""
        picker = self._arrays(source, cols) if groups else None
        if picker is None or picker.tuples(groups) < sourcerows.PICK_FROM:
            return None
        return picker

    def _arrays(self, source: str, cols: tuple[int, ...]) -> SourceRows | None:
        """:meth:`_picker`'s arrays, whatever the batch: on the source's frame, its tuples
        made only as they are picked unless the relation has built them already (then
        picked from those)."""
        k = (source, cols)
        if k in self._source_rows:
            return self._source_rows[k]
        picker = None
        rel = self.complete[source]
        kept = self.frames.get(source)
        if kept is not None and kept[0] is rel and kept[1] == rel.version and len(
                rel) >= sourcerows.PICK_FROM:
            plan = self.plan
            tests = {id(v): self._source_tests[id(v)]
                     for (s, c, rule), (_, cut) in zip(plan.sources, plan.enter or [
                         (None, None)] * len(plan.sources), strict=True)
                     if (s, c) == k for v in (rule, cut) if v is not None}
            held = self.complete[plan.target].index(tuple(range(plan.key))).keys()
            picker = SourceRows.of(rel.as_built() if rel.built() else None, kept[2], cols,
                                   tests, held, rel.as_built)
        self._source_rows[k] = picker
        return picker

    def _group_rows(self, source: str, cols: tuple[int, ...], groups: Collection[tuple]
                    ) -> list[tuple]:
        """Every source tuple of ``groups`` (``source``'s tuples whose columns ``cols`` hold
        one of them): from the relation's index where it has one, else on its arrays
        (:meth:`_arrays`) — an index by group of a large source relation left on a frame
        is not built for a few groups — else from the index, built now."""
        arrays = self._unindexed(source, cols)
        if arrays is not None:
            return arrays.of_groups(groups if isinstance(groups, list) else list(groups))
        idx = self.complete[source].index(cols)
        return [r for g in groups for r in idx.get(g, ())]

    def _unindexed(self, source: str, cols: tuple[int, ...]) -> SourceRows | None:
        """The arrays to read ``source``'s groups by ``cols`` from (:meth:`_arrays`), unless
        the relation has an index by those columns already (a lookup there is cheaper) or
        has no arrays: None, then the index (built if need be)."""
        return None if self.complete[source].has_index(cols) else self._arrays(source, cols)

    def _one_each(self, moved: list[tuple], reads: tuple[int, ...] | None,
                  delta: dict[str, Relation]) -> dict[str, Relation]:
        """``delta`` (the changed ``target`` tuples ``moved``), or one of them per value of
        the columns a variant ``reads`` (:func:`delta_reads`): it derives the same either
        way."""
        if reads is None:
            return delta
        get = key_of(reads)
        one = {get(t): t for t in moved}
        if len(one) == len(moved):
            return delta
        return {self.plan.target: Relation(one.values())}

    def _ranks(self, groups: Collection[tuple]) -> list[int]:
        """The schedule's rank of each of ``groups`` (in their iteration order), from one
        call of the rank built-in's batch form (where it has one, for many groups)."""
        if not groups:
            return []
        if self._rank_batch is None or len(groups) < BATCH_RANKS_FROM:
            return [self._rank(self.ctx, *g)[0][0] for g in groups]
        row, ks = self._rank_batch(self.ctx, *zip(*groups, strict=True))
        return np.asarray(ks, dtype=np.int64)[np.argsort(np.asarray(row), kind="stable")
                                               ].tolist()

    def _rederive_groups(self, groups: list[tuple], up: UpdateStats,
                         partial: dict[tuple, dict[str, set[tuple]]]
                         ) -> dict[tuple, tuple[set[tuple], set[tuple]]]:
        """Re-derive ``groups`` (all of one rank) of the maintained relation, each rule run
        once over all their source tuples: a group's sources read only lower ranks, so one
        rank's groups are independent. A group in ``partial`` is re-derived from the source
        tuples given there and those of its selected tuples, and from the rest of its source
        tuples too only when its selected tuples got worse (:meth:`_rederive_stale`).
        Returns each changed group's selected tuples that went and that came."""
        plan, complete = self.plan, self.complete
        selected = complete[plan.target].index(tuple(range(plan.key)))
        cands: dict[tuple, list[tuple]] = {g: [] for g in groups}
        # the source tuples to run, per (source, key columns, columns embedded in the
        # target): rules reading their source alike share one delta (R6-R8: SearchSpace)
        firsts: dict[tuple, tuple[Batch, dict[tuple, Collection[tuple]]]] = {}
        seconds: dict[tuple, Batch] = {}

        whole = [g for g in groups if g not in partial]
        pickers = {(source, cols): self._picker(source, cols, whole)
                   for source, cols, _ in plan.sources}

        def first(source: str, cols: tuple[int, ...], embeds: tuple[int, ...]
                  ) -> tuple[Batch, dict[tuple, Collection[tuple]]]:
            """The groups' source tuples to run first, and per partial group those run;
            without the whole groups' when they are picked per variant (:meth:`_picker`)."""
            rows = [] if pickers[(source, cols)] is not None else self._group_rows(
                source, cols, whole)
            used: dict[tuple, Collection[tuple]] = {}
            for g in groups:
                given = partial.get(g)
                if given is not None:
                    mine = used[g] = given.get(source, ())
                    rows += mine
            return Batch(rows), used  # (each group's own source tuples: distinct)

        derived = 0
        for source, cols, v in plan.sources:
            key = (source, cols, v.embeds)
            if key not in firsts:
                firsts[key] = first(source, cols, v.embeds)  # type: ignore[arg-type]
            picker = pickers[(source, cols)]
            derived += self._derive(v, source, firsts[key][0], cands, None if picker is None
                                    else (picker, picker.picked(id(v), whole)))
        kept = self._unreached(groups, partial, selected)
        for t in self._within(plan.target, kept) if self.bounded else kept:
            cands[t[:plan.key]].append(t)
        worse = self._got_worse(groups, partial, cands, selected)
        for source, cols, v in plan.sources if worse else ():
            key = (source, cols, v.embeds)
            if key not in seconds:  # (a source tuple is of one group: those run, apart)
                ran = set().union(*(firsts[key][1][g] for g in worse))
                seconds[key] = Batch([r for r in self._group_rows(source, cols, worse)
                                      if r not in ran])
            derived += self._derive(v, source, seconds[key], cands)
        up.derived[plan.target] = up.derived.get(plan.target, 0) + derived
        return self._settle(groups, cands, selected)

    def _derive(self, v: Variant, source: str, delta: Batch,
                cands: Mapping[tuple, list[tuple]],
                picked: tuple[SourceRows, np.ndarray] | None = None) -> int:
        """Run ``v`` on the source tuples ``delta`` and those ``picked`` (rows of the
        source's arrays), adding its candidates to their groups' ``cands`` — within their
        bound in a bounded layer (:meth:`_within`: the others are dropped from it, so they
        count only as derived); returns how many it derived. From :data:`BULK_FROM` source
        tuples on, on frames (:mod:`.bulk`), else through the generated loops: a bounded
        layer's in their distinct form (tied selected tuples of a child, read for their
        cost, give its candidates once), an unbounded one's tuple by tuple, as its Spark
        twin counts."""
        size = len(delta) + (len(picked[1]) if picked is not None else 0)
        if size and id(v) not in self._unframed and _bulk(size, self._how):
            types = self.program.schemas[source]
            frame = delta.frame(types)
            if picked is not None:
                frame = concat([picked[0].frame_at(picked[1]), frame])
            try:
                got = RankFrames(self, self.complete, self.bounded).derive(v, source, frame)
            except Unframed:
                self._unframed.add(id(v))
            else:
                self._frame_candidates(got, cands)
                return got.height
        if picked is not None and len(picked[1]):
            mine = picked[0].rows_at(picked[1])
            delta = Batch(mine + delta.rows if delta.rows else mine)
        if not delta.rows:
            return 0
        plan = self.plan
        got = self.run_variant(v, self.complete, {source: delta}, self.bounded)
        for t in self._within(plan.target, got) if self.bounded else got:
            cands[t[:plan.key]].append(t)
        return len(got)

    def _frame_candidates(self, got: Frame, cands: Mapping[tuple, list[tuple]]) -> None:
        """Add the candidates ``got`` (a variant's head tuples, on frames) to their groups'
        ``cands``: within their bound in a bounded layer, and of each group only the best
        under the aggregate selection — all that :meth:`_best` and :meth:`_got_worse` read
        of them — so that a large rank makes tuples of its groups' best candidates alone."""
        plan = self.plan
        if self.bounded:
            got = self._frame_within(got)
        sel = self._sel
        if sel is not None and got.height:
            val = f"c{sel.value}"
            ids, best = group_best(got, columnar.names(plan.key), val, sel.func)
            got = got.filter(got.cols[val] == best[ids])
        for t in got.rows(columnar.names(len(self.program.schemas[plan.target]))):
            cands[t[:plan.key]].append(t)

    def _frame_within(self, got: Frame) -> Frame:
        """The candidates ``got`` (on frames) that do not exceed their bound, as
        :meth:`_within` keeps them."""
        target = self.plan.target
        caps = self._caps.get(target)
        if not caps or not got.height:
            return got
        prog = self.live_program
        sel = prog.features.aggsel[target]
        key = sel.key[:len(next(iter(caps)))]
        on = [f"c{j}" for j in key]
        types = prog.schemas[target]
        limits = Frame.from_rows([(*k, c) for k, c in caps.items()], [*on, "__v"],
                                 [*(types[j] for j in key), prog.schemas[prog.features.bound[
                                     target]][-1]])
        limit, found = lookup(got, limits, on, "__v")
        return got.filter(~found | ~(got.cols[f"c{sel.value}"] > limit))

    def _unreached(self, groups: list[tuple], partial: Mapping[tuple, Mapping[str, Any]],
                   selected: Mapping[tuple, Iterable[tuple]]) -> list[tuple]:
        """The selected tuples of ``groups`` re-derived partially (those in ``partial``)
        whose source tuple no changed child reached: they are candidates as they are. Such
        a tuple's source tuple is unchanged, the tuples it joined are (a changed one would
        have reached it) and so are its group's built-ins (the group is not stale): derived
        again it gives itself, and whatever else it derives was worse than it (it was
        selected), so running the rules on it again — most of a partial re-derivation's
        source tuples — is spared. A tuple some of whose possible source tuples were
        reached is left to them (derived afresh from those)."""
        complete = self.complete
        if len(self._embeds_of) == 1 and len(embeds := next(iter(self._embeds_of.values()))) == 1:
            return self._unreached_one(groups, partial, selected, key_of(embeds[0]))
        reads = [(source, key_of(embeds), complete[source].rows) for source, embeds in
                 dict.fromkeys((s, v.embeds) for s, _, v in self.plan.sources)]
        out = []
        for g in groups:
            given = partial.get(g)
            if given is None or not (sel := selected.get(g)):
                continue
            for t in sel:
                found = False
                for source, embedded, have in reads:
                    if (r := embedded(t)) in have:
                        if r in given.get(source, ()):
                            break  # (reached: derived afresh)
                        found = True
                else:
                    if found:
                        out.append(t)
        return out

    def _unreached_one(self, groups: list[tuple], partial: Mapping[tuple, Mapping[str, Any]],
                       selected: Mapping[tuple, Iterable[tuple]],
                       embedded: Callable[[tuple], tuple]) -> list[tuple]:
        """:meth:`_unreached` when every rule of the maintained relation reads one source
        relation, embedded alike: each selected tuple embeds the very source tuple that
        derived it (the source relation never changes between evaluations), so only
        whether that one was reached is asked."""
        (source,) = self._embeds_of
        out: list[tuple] = []
        for g in groups:
            given = partial.get(g)
            if given is None or not (sel := selected.get(g)):
                continue
            reached = given.get(source)
            if reached:
                out += [t for t in sel if embedded(t) not in reached]
            else:
                out += sel
        return out

    def _got_worse(self, groups: list[tuple], partial: Mapping[tuple, Any],
                   cands: Mapping[tuple, list[tuple]],
                   selected: Mapping[tuple, Collection[tuple]]) -> list[tuple]:
        """Those of ``groups`` re-derived partially (in ``partial``) that hold selected tuples
        and whose best candidate (``cands``: within the bound) is worse than they are, or
        that have none: they are re-derived whole."""
        sel = self._sel
        if sel is None:
            return [g for g in groups if g in partial and selected.get(g)]
        val, func = sel.value, sel.func
        best = min if func == "min" else max
        out = []
        for g in groups:
            if g not in partial or not (old := selected.get(g)):
                continue
            kept = cands[g]
            if not kept or _worse_than(func, best(r[val] for r in kept), next(iter(old))[val]):
                out.append(g)
        return out

    def _on_frames(self) -> None:
        """After an evaluation from scratch, the complete layer's frames for a large layer
        (:func:`~.columnar.maintains_on_frames`), which the live layer's revival looks up
        (:meth:`_probing`) instead of building hash indexes over all of it; none for a small
        one. Updates run on tuples and drop them (:meth:`_rederive_stale`)."""
        self._frames = None
        if columnar.maintains_on_frames(len(self.complete[self.plan.target])):
            plan = self.plan
            preds = set(self._layer) - set(plan.aggregates) - {
                p for i in plan.reseed for p in self.program.strata[i].preds}  # replaced
            self._frames = columnar.Maintained(self, self.complete, preds)
            self._frames.stats = self.stats

    def _settle(self, groups: list[tuple], cands: Mapping[tuple, list[tuple]],
                selected: Mapping[tuple, Iterable[tuple]]
                ) -> dict[tuple, tuple[set[tuple], set[tuple]]]:
        """Put each of ``groups``' best re-derived candidates ``cands`` (those within the
        bound, in a bounded layer) in place of its ``selected`` tuples; returns each changed
        group's tuples that went and that came. All the groups at once — one removal, one
        insertion and one recomputation of the aggregates over the groups that changed —
        since a rank's groups are independent and own disjoint tuples: a large round settles
        thousands of groups, and each removal or insertion walks every index of the
        relation."""
        plan = self.plan
        out: dict[tuple, tuple[set[tuple], set[tuple]]] = {}
        went: list[tuple] = []
        came: list[tuple] = []
        held: list[tuple[tuple, bool]] = []  # (groups that gained or lost every tuple)
        for g in groups:
            kept, old = cands[g], set(selected.get(g, ()))
            if not kept and not old:
                continue
            new = self._best(kept)
            if new == old:
                continue
            removed, added = old - new, new - old
            went += removed
            came += added
            out[g] = (removed, added)
            if bool(old) != bool(new):
                held.append((g, bool(new)))
        if not out:
            return out
        complete = self.complete
        complete[plan.target].remove(went)
        complete[plan.target].add(came)
        for picker in self._source_rows.values():
            if picker is not None:
                for g, now in held:
                    picker.set_held(g, now)
        for agg in plan.aggregates:
            self._set_groups(complete, agg, list(out))
        return out

    def _best(self, kept: list[tuple]) -> set[tuple]:
        """The candidates ``kept`` that the aggregate selection keeps (all of them without
        one): the best first, so that only the best ones are hashed."""
        if self._sel is None or not kept:
            return set(kept)
        val = self._sel.value
        best = (min if self._sel.func == "min" else max)(r[val] for r in kept)
        return {r for r in kept if r[val] == best}

    def _set_groups(self, rels: dict[str, Relation], agg: str, groups: Collection[tuple]
                    ) -> None:
        """Recompute the groups ``groups`` of an aggregate over ``target`` from ``rels``'
        inputs: one removal and one insertion for all of them."""
        plan = self.plan
        pos, func = self.program.aggregates[agg]
        keys = tuple(i for i in range(plan.key + 1) if i != pos)
        value = plan.aggregates[agg]
        rel = rels[agg]
        have = rel.index(keys)
        rel.remove([r for g in groups for r in have.get(g, ())])
        inputs = rels[plan.target].index(tuple(range(plan.key)))
        best = min if func == "min" else max
        rel.add([(*g[:pos], best(r[value] for r in got), *g[pos:])
                 for g in groups if (got := inputs.get(g))])

    # -- what an update touched ----------------------------------------------------------------
    def snapshot(self) -> dict[tuple[str, str], Relation]:
        """Where both layers stand, to tell afterwards what an update changed: the relations
        start their journal (:meth:`Relation.changed`); an update changes them in place, or
        replaces them (the seeds; a later stratum evaluated from empty) and the old object
        keeps what was."""
        out: dict[tuple[str, str], Relation] = {}
        for p in self._layer:
            rel = out[("complete", p)] = self.complete[p]
            rel.journal = {}
        lazy = self.program.ondemand  # (derived when read: an update only marks them stale)
        for p in self.program.schemas:
            if p not in self.program.facts and p not in self.program.inputs and p not in lazy:
                rel = out[("live", p)] = self.live[p]
                rel.journal = {}
        return out

    def changed_since(self, before: dict[tuple[str, str], Relation]
                      ) -> dict[int, dict[str, int]]:
        """Per query: OR nodes (a tuple's leading group key) and AND nodes (a tuple of the
        source relation, or of a relation embedding it in front) some of whose tuples, in
        either layer, were inserted, deleted or changed since ``before``. Also sets
        :attr:`live_changes` (what a session's metrics follow)."""
        or_keys: set[tuple] = set()
        and_keys: set[tuple] = set()
        width = len(self.program.schemas[self.plan.sources[0][0]])
        or_key, and_key = key_of(tuple(range(self.plan.key))), key_of(tuple(range(width)))
        changed: dict[int, list[tuple]] = {}  # a relation in both layers: its journal once
        was: dict[int, set[tuple]] = {}
        self.live_changes = {}
        for (layer, p), then in before.items():
            rel = (self.complete if layer == "complete" else self.live)[p]
            diff: Iterable[tuple]
            if then is rel:
                if id(rel) not in changed:
                    changed[id(rel)] = rel.changed()
                diff = changed[id(rel)]
            else:  # replaced meanwhile (a seed, a rebuild): the old relation, its journal
                if id(then) not in was:  # undone, holds what was (once: layers share some)
                    was[id(then)] = then.rows_then()
                diff = was[id(then)] ^ rel.rows
            if diff and layer == "live":
                self.live_changes[p] = (diff, rel.rows)
            if not diff or len(self.program.schemas[p]) < self.plan.key:
                continue  # (a relation narrower than the group key names no OR node)
            or_keys.update(map(or_key, diff))  # (keys read in C; counted per query below)
            if p in self._alternatives:
                and_keys.update(map(and_key, diff))
        ors, ands = Counter(k[0] for k in or_keys), Counter(k[0] for k in and_keys)
        return {q: {"or_nodes": ors[q], "and_nodes": ands[q]} for q in self.ctx}

    # -- the live layer, incrementally --------------------------------------------------------
    def _crossing(self, before: dict[str, dict[tuple, Any]],
                  changes: dict[tuple, tuple[set[tuple], set[tuple]]]) -> None:
        """Add to ``changes`` the groups whose selected tuples the move of the bounds (from
        ``before``) takes into or out of the live layer: a bound that rises brings plans
        back, one that falls prunes them (paper, Section 5.3). Only with an unbounded
        complete layer (``bounded=False``): a bounded one re-derives those groups."""
        plan, prog = self.plan, self.live_program
        sel = prog.features.aggsel.get(plan.target)
        caps = self._caps.get(plan.target, {})
        old = before.get(plan.target, {})
        if sel is None or not (caps or old):
            return
        pos = prog.aggregates[sel.agg][0]
        width = len(next(iter(caps or old)))
        by_key = self.complete[plan.target].index(tuple(range(plan.key)))
        live = self.live[plan.target].index(tuple(range(plan.key)))
        for r in self.complete[sel.agg].rows:
            g = r[:pos] + r[pos + 1:]
            if g in changes:
                # re-derived under the new statistics, it may also have crossed the bound: its
                # change then names only the tuples that went and came, not the ones that
                # stayed and were out of the live layer (a plan tied with a new one, both
                # under a bound that rose); all its selected tuples are what it should hold
                removed, _ = changes[g]
                changes[g] = (removed | set(live.get(g, ())), set(by_key.get(g, ())))
                continue
            k, v = g[:width], r[pos]
            was, now = caps_within(old, k, v), caps_within(caps, k, v)
            if was != now:
                changes[g] = (set(live.get(g, ())), set(by_key.get(g, ())))

    def _read_since(self) -> frozenset[int]:
        """The on-demand strata read since the last step, which this update follows (the
        others it leaves stale: :mod:`.ondemand`). The counts :mod:`.later` keeps of one that
        a read derived from empty are not of its relation any more: dropped."""
        pending = self.pending
        if pending is None:
            return frozenset()
        for i in pending.fresh:
            for p in self.program.strata[i].preds:
                self.later.derivations.pop(p, None)
        self.on_demand.followed += len(pending.read)
        return frozenset(pending.read)

    def _live_update(self, changes: dict[tuple, tuple[set[tuple], set[tuple]]],
                     old: Mapping[int, Any], followed: Collection[int] = ()) -> int:
        """Apply the complete layer's changed groups to the live layer, parents first:
        a plan no longer selected has its source suppressed (deletions cascade, reference
        counts fall), a newly selected plan has its source revived from the complete layer
        (reference counts rise, subplans come back). Then the later strata follow what that
        changed (:mod:`.later`; the plan spaces were ``old``) — of those derived when read,
        the ``followed`` ones only; returns how many of them were evaluated from empty."""
        marks = {p: watch(self.full[p]) for p in self.later.reads if p in self._layer}
        post = {p: self.full[p] for p in self._post}
        for pred in self._post:  # out of the deletions' cascades, which are the layer's
            self.full[pred] = Relation()
        order = sorted(changes, key=lambda g: self._rank(self.ctx, *g)[0][0], reverse=True)
        if self._regroup_after:
            self._live_groups(order, changes)
        else:  # (a revival or deletion may read an aggregate: each group's kept current)
            for g in order:
                self._live_groups([g], changes)
        self.full.update(post)
        moved = {p: watched(self.full[p], mark) for p, mark in marks.items()}
        skip = {i for i, s in enumerate(self.program.strata) if s.ondemand} - set(followed)
        return self.later.update(self, moved, old, self.stale_of, skip)

    def _live_groups(self, groups: list[tuple],
                     changes: Mapping[tuple, tuple[set[tuple], set[tuple]]]) -> None:
        """Apply the complete layer's changes of ``groups`` (parents first) to the live
        layer: their tuples that went are removed, the sources newly selected revived (all
        groups' in one revival), then the sources no longer selected deleted (deletions
        cascade), then their tuples that came added and their aggregate groups recomputed.
        Revival first: the subplans the old and the new selected plans share then only
        gain a reference and lose it again, where a deletion first took their counts to zero,
        deleted them with everything below and revival brought it all back (chain-12's
        one-delta updates: 70 of the about 80 tuples deleted were revived in the same
        update). All of a large round's groups at once (large-clique-17's round after a
        rebuild: about 2,300 groups), not one at a time: one revival's waves, one
        deletion's cascade and one recomputation of the aggregates instead of one of each
        per group. Exact in any grouping and in this order: the live layer is what the
        complete one supports; reference counts are counts of derivations, raised by a
        revival for those it makes and lowered by a deletion for those it takes away,
        whatever their order; a tuple a revival let in on what a deletion then takes away
        (an embedded source, a count) is taken away by its cascade; revival recomputes the
        aggregate groups it touches before the deletion reads them (its ``_regroup``),
        and the tuples of ``groups`` that went are out before either runs, so the
        deletion touches none of their aggregate groups, recomputed from the final tuples
        at the end — deferred only where nothing a deletion or revival reads is an
        aggregate (:attr:`EngineReading.regroup_after`: the caller passes one group at a
        time otherwise)."""
        plan, live = self.plan, self.full
        target = plan.target
        source = self.program.features.suppress.get(target)
        width = len(self.program.schemas[source]) if source else 0
        came = {g: set(self._within(target, changes[g][1])) for g in groups}
        live[target].remove([r for g in groups for r in changes[g][0]
                             if r in live[target].rows])
        if source is not None:
            srcs = live[source].rows
            dead_live = [s for g in groups for s in (
                {r[:width] for r in changes[g][0]} - {a[:width] for a in came[g]})
                if s in srcs and not self._within(target, self._derived_from([s]))]
            back = {a[:width] for g in groups for a in came[g]} - srcs
            if back:  # (revived before the deletion: what the old and new plans share
                self._revive(source, back)  # keeps a count, and is not deleted and revived)
            if dead_live:
                self._delete(source, dead_live)
            srcs = live[source].rows
            live[target].add([a for g in groups for a in came[g] if a[:width] in srcs])
        else:
            live[target].add([a for g in groups for a in came[g]])
        for agg in plan.aggregates:
            self._set_groups(live, agg, groups)

    def _derived_from(self, sources: list[tuple]) -> list[tuple]:
        """The complete layer's selected tuples embedding one of the source tuples
        ``sources`` (all of one width) in their leading columns (what keeps them live under
        suppression): read off their groups' selected tuples, which the index by group kept
        up to date holds, when the group key is among those columns — no index of the whole
        relation on the source's columns built for a session's first update (an update's
        revival asks for few; one from scratch looks many up on frames:
        :meth:`_complete_rows`) — else through that index."""
        if not sources:
            return []
        plan, width = self.plan, len(sources[0])
        rel = self.complete[plan.target]
        if plan.key > width:
            idx = rel.index(tuple(range(width)))
            return [t for s in sources for t in idx.get(s, ())]
        n, idx = plan.key, rel.index(tuple(range(plan.key)))
        return [t for s in sources for t in idx.get(s[:n], ()) if t[:width] == s]

    def _revive(self, pred: str, rows: Iterable[tuple]) -> None:
        """The reverse of :meth:`_delete`: put tuples of the complete layer back into the live
        layer, with what they support — tuples embedding them whose every embedded source is
        live, counted tuples whose count rises from zero, aggregate groups."""
        self._revive_all(deque([(pred, rows)]))

    def _revive_all(self, work: deque[tuple[str, Iterable[tuple]]]) -> None:
        """Revive the queued tuples and what they support. Where nothing revival checks or
        derives reads an aggregate of the layer, the aggregate groups the revived tuples
        touch are recomputed once each at the end (on large-clique-17 1,667 groups instead
        of 5,001 recomputations, each a removal and an insertion)."""
        touched = self._touched = {} if self._regroup_after else None
        try:
            while work:
                p, rs = _gathered(work)
                rel = self.full[p]
                rs = self._supported([r for r in set(rs) if r not in rel.rows], p)
                if rs:
                    rel.add(rs)
                    self._spread(p, rs, work)
        finally:
            self._touched = None
        for agg, groups in (touched or {}).items():
            self._set_groups(self.full, agg, groups)

    def _spread(self, p: str, rs: list[tuple], work: deque) -> None:
        """Queue what the newly live tuples ``rs`` of ``p`` support."""
        prog = self.program
        new = {p: Relation(rs)}
        queued = set()  # rules of one relation embedding p alike queue the same candidates
        for v in prog.triggers.get(p, ()):
            h = v.head_pred
            if h in self._post or (h, v.embeds) in queued:
                continue
            if h in self.counts:
                counts, up = self.counts[h], []
                for t in self.run_variant(v, self.full, new):
                    counts[t] = counts.get(t, 0) + 1
                    if counts[t] == 1:
                        up.append(t)
                work.append((h, up))
            elif h in prog.aggregates:
                groups = {t[:self.plan.key] for t in rs}
                if self._touched is not None:
                    self._touched.setdefault(h, set()).update(groups)
                else:
                    self._set_groups(self.full, h, groups)
            elif v.embeds is not None:
                # once: a candidate not supported yet is queued again by the embedded source
                # that makes it supported, when that source's tuple becomes live
                queued.add((h, v.embeds))
                work.append((h, self._candidates(h, v.embeds, rs)))

    def _supported(self, rows: list[tuple], pred: str) -> list[tuple]:
        """The complete-layer tuples of ``rows`` that belong in the live layer given what is
        live now."""
        if pred in self.counts:
            counts = self.counts[pred]
            return [r for r in rows if counts.get(r, 0) > 0]
        rows = self._within(pred, rows)
        pruned = self._suppressing.get(pred)
        if pruned is not None and self._kept_sources is not None:
            keeps = self._kept_sources[pred]
            rows = [r for r in rows if r in keeps]
        elif pruned is not None and rows and pruned in self._caps:
            cols = self._suppressed_key[pred]
            kept = (self._derived_from(rows)
                    if pruned == self.plan.target and self._frames is None
                    else self._complete_rows(pruned, cols, rows))
            have = {t[:len(cols)] for t in self._within(pruned, kept)}
            rows = [r for r in rows if r in have]
        elif pruned is not None and rows:
            have = self._complete_keys(pruned, self._suppressed_key[pred], rows)
            rows = [r for r in rows if r in have]
        rules = self._embedded.get(pred)
        if not rules:
            return rows
        full = self.full
        if len(rules) == 1 and len(rules[0]) == 1:  # one source: a membership test a row
            (src, key), = rules[0]
            live = full[src].rows
            return [r for r in rows if key(r) in live]
        return [r for r in rows
                if any(all(key(r) in full[src].rows for src, key in atoms) for atoms in rules)]

    def _suppression_keeps(self) -> dict[str, dict[tuple, Bucket]] | None:
        """For a revival from scratch: per suppressed source relation, its tuples that the
        complete layer's suppressing relation keeps (a tuple of it whose leading columns they
        are, within the bounds) — the only ones :meth:`_supported` can let in —, each with
        those tuples of the suppressing relation: the candidates revival looks up when the
        source tuple becomes live (:meth:`_candidates`; those above their bounds, which
        :meth:`_supported` drops, are left out: one pass over the suppressing relation's
        tuples and one bound test each instead of two). Taken from the
        suppressing side (on large-clique-17: 7,652 ``PlanCost`` tuples instead of the 53,534
        ``SearchSpace`` candidates of the live ``Goal`` tuples looked up, built and probed).
        They are tuples of the complete source relation because every rule of the suppressing
        relation embeds the source in those columns, and the complete layer never deletes a
        source tuple; None (look candidates up as an update does) when some rule does not
        embed it so. Small layers too: looking the candidates up there built a hash index of
        the whole source relation by group, or probed its arrays wave by wave (clique-14-s0-9:
        14 probes, 5 ms of a 60 ms optimization), for the few groups revival reaches; an
        update that needs that index builds it then."""
        out: dict[str, dict[tuple, Bucket]] = {}
        for source, pruned in self._suppressing.items():
            if not self.keeps_whole(source):
                return None
            out[source] = by_source = {}
            index_rows(key_of(self._suppressed_key[source]), by_source,
                       self._within(pruned, self.complete[pruned].rows))
        return out

    def keeps_whole(self, source: str) -> bool:
        """Whether the suppressed ``source``'s tuples that can be live are the leading
        columns of the suppressing relation's tuples: every rule deriving that relation
        embeds the source there (and it is no input or fact), so a revival from scratch
        takes its candidates from the suppressing side (:meth:`_suppression_keeps`,
        :mod:`.revival`)."""
        prog, pruned = self.program, self._suppressing[source]
        rules = self._embeds.get(pruned, [])
        return not (pruned in prog.inputs or prog.facts.get(pruned)
                    or len(rules) != self._rules_of.get(pruned)
                    or not all((source, self._suppressed_key[source]) in atoms
                               for atoms in rules))

    def _candidates(self, pred: str, cols: tuple[int, ...], keys: list[tuple]) -> list[tuple]:
        """The complete layer's tuples of ``pred`` whose columns ``cols`` equal one of
        ``keys`` that :meth:`_supported` may let in: during a revival from scratch, only the
        source tuples the suppressing relation keeps (:meth:`_suppression_keeps`), or of a
        relation whose tuples are built, through an index made for the revival and dropped
        after it; otherwise :meth:`_complete_rows`."""
        if self._kept_sources is None:
            return self._complete_rows(pred, cols, keys)
        idx = self._candidate_indexes.get((pred, cols))
        if idx is None:
            if pred in self._kept_sources:
                rows: Iterable[tuple] = self._kept_sources[pred]
            elif self.complete[pred].built():
                rows = self.complete[pred].rows
            else:
                return self._complete_rows(pred, cols, keys)
            idx = self._candidate_indexes[(pred, cols)] = {}
            index_rows(key_of(cols), idx, rows)  # (keys read in C; no list made per tuple)
        return [t for k in keys for t in idx.get(k, ())]

    def _complete_rows(self, pred: str, cols: tuple[int, ...], keys: list[tuple]
                       ) -> list[tuple]:
        """The complete layer's tuples of ``pred`` whose columns ``cols`` equal one of
        ``keys`` (a bag, key by key; on a source's arrays, each tuple once — the callers
        take them as a set): one probe of its frame for all keys while :meth:`_probing`
        says so, or of the source's arrays (:meth:`_source_readers`), else through a hash
        index of its tuples."""
        frames = self._probing(pred, cols)
        if frames is not None:
            return frames.lookup(pred, cols, keys)[1]
        got = self._source_readers(pred, cols, keys)
        if got is not None:
            return got
        if self._by_group(pred, cols):
            return self._derived_from(keys)
        idx = self.complete[pred].index(cols)
        return [t for k in keys for t in idx.get(k, ())]

    def _by_group(self, pred: str, cols: tuple[int, ...]) -> bool:
        """Whether lookups of the maintained relation ``pred`` by ``cols`` go through its
        groups' selected tuples (:meth:`_derived_from`) rather than a hash index on
        ``cols``: when ``cols`` are its leading columns, the group key among them, and no
        such index is there already. An index of every selected tuple by its embedded
        source tuple (large-clique-17's adaptive round after a rebuild: 23–37 ms for 30,000
        tuples) would also be kept up to date by every later settling of groups."""
        plan = self.plan
        return (pred == plan.target and len(cols) >= plan.key
                and cols == tuple(range(len(cols))) and not self.complete[pred].has_index(cols))

    def _source_readers(self, pred: str, cols: tuple[int, ...], keys: list[tuple]
                        ) -> list[tuple] | None:
        """:meth:`_complete_rows` of a source relation whose tuples are not built (left on a
        frame), looked up on its arrays (:meth:`SourceRows.readers`; each distinct tuple
        once) for its first :data:`FRAME_PROBES` lookups by ``cols``: an update's revival
        after a session's start or a rebuild asks for few, and building the tuples and a
        hash index first cost tens of ms on a large relation (large-clique-14: about 50);
        None otherwise (then the index)."""
        if pred not in self._source_cols or self.complete[pred].built():
            return None
        n = self._probes.get((pred, cols), 0)
        if n >= FRAME_PROBES:
            return None
        arrays = self._arrays(pred, self._source_cols[pred])
        if arrays is None:
            return None
        self._probes[(pred, cols)] = n + 1
        return arrays.readers(cols, set(keys))

    def _probing(self, pred: str, cols: tuple[int, ...]) -> columnar.Maintained | None:
        """The frames to look ``pred`` up on by ``cols``, or None: use a hash index."""
        frames = self._frames
        if frames is None or pred not in frames.full or self.complete[pred].has_index(cols):
            return None
        n = self._probes.get((pred, cols), 0)
        if n >= FRAME_PROBES:
            return None
        self._probes[(pred, cols)] = n + 1
        return frames

    def _complete_keys(self, pred: str, cols: tuple[int, ...], keys: list[tuple]
                       ) -> set[tuple]:
        """Those of ``keys`` that some complete-layer tuple of ``pred`` has in ``cols``."""
        frames = self._probing(pred, cols)
        if frames is not None:
            return {keys[i] for i in set(frames.lookup(pred, cols, keys)[0])}
        if self._by_group(pred, cols):
            return {t[:len(cols)] for t in self._derived_from(keys)}
        idx = self.complete[pred].index(cols)
        return {k for k in keys if k in idx}


def _bulk(size: int, how: str) -> bool:
    """Whether a variant re-deriving ``size`` source tuples runs on frames (:data:`BULK_FROM`)
    under ``REOPT_COLUMNAR`` = ``how`` (:func:`~.columnar.mode`)."""
    return how == "always" or (how == "auto" and size >= BULK_FROM)


def _gathered(work: deque[tuple[str, Iterable[tuple]]]) -> tuple[str, Iterable[tuple]]:
    """The first queued batch of a revival with every other batch of the same relation
    queued behind it, taken out of ``work``: one wave of the relation instead of one per
    tuple that queued it (a plan tree revived top-down queues its children's ``Goal`` and
    ``PlanCost`` tuples one by one; on a 12-relation chain 93 batches of about one tuple
    become about half as many). Revival is a fixpoint — a candidate not supported yet is
    queued again by the tuple that makes it supported, each live tuple spreads once and
    each derivation is counted once — so the order of its waves does not change what it
    revives."""
    p, rs = work.popleft()
    if not any(q == p for q, _ in work):
        return p, rs
    rows = list(rs)
    rest = []
    for q, more in work:
        if q == p:
            rows.extend(more)
        else:
            rest.append((q, more))
    work.clear()
    work.extend(rest)
    return p, rows
