"""Engine features the rule files switch on by declaration (directives), checked at compile time.

The rules stay the program: scheduling and pruning are declared next to the rules they act on,
and every engine implements the same declarations with the same semantics.

``.schedule ascending|descending Fn_rank P1 P2 ….``
    The listed relations form one recursive stratum whose tuples are released in rounds, one
    rank at a time (the rank of a tuple is the built-in applied to its leading columns), in
    increasing or decreasing order. A tuple derived for a rank already released is an error.
    Within a round, plain relations are released first, then each aggregate relation once its
    inputs have nothing pending at that rank, so ``min<>``/``max<>`` may appear inside the
    recursion: each group is aggregated once, over all of its inputs.

``.aggsel Agg.`` (pruning feature ``aggsel``)
    Aggregate selection (Section 4.1): ``Agg`` is a ``min``/``max`` over one relation ``R``;
    the selection is pushed into ``R``'s fixpoint, so only tuples that improve their group's
    aggregate are kept in ``R`` (per round, the best of each group).

``.suppress R S.`` (pruning feature ``suppress``)
    Tuple source suppression: ``S``'s tuples are ``R``'s leading columns; when aggregate
    selection (or a bound) rejects every ``R`` tuple of an ``S`` tuple, that ``S`` tuple is
    deleted, and deletions cascade to what was derived from it.

``.refcount G.`` (pruning feature ``refcount``)
    Reference counting (Section 4.2): each ``G`` tuple counts its derivations (distinct body
    tuples: for the optimizer, distinct parent plans); when deletions bring a count to zero the
    tuple is deleted, recursively.

``.bound R B.`` (pruning feature ``bound``)
    Recursive bounding (Section 4.3): an ``R`` tuple whose aggregate-selection value exceeds
    ``B``'s value for its group is rejected like a suppressed one (strictly above: a tuple
    equal to its bound stays). ``B``'s last column is the bound; its other columns (at least
    one) are a prefix of the group's, in the aggregate's order (all of them: one bound per
    group; fewer, e.g. the query id alone: one bound for every group they lead; the tightest
    where a key has several). A bound caps values from above, so it prunes a
    ``min<>`` selection only; with a ``max<>`` selection it is off. When ``B`` does not depend
    on ``R``, ``B`` is evaluated in an earlier stratum, so its bounds are in force while ``R``
    is derived. With a ``.schedule``, once the stratum is released, the ``.suppress`` sources
    that got no ``R`` tuple at all (an input of theirs was rejected by its bound) are
    suppressed too: every input ranks lower, so they could never get one.

``.ondemand P1 P2 ….``
    The listed relations are derived when read, not by every evaluation and update: an
    engine may leave their strata stale after evaluating or updating the others and derive
    them (from empty, with the stale strata they read) the first time a caller reads one of
    them. The declaration changes cost, never the answer: what is read equals a from-scratch
    evaluation, and an engine may evaluate them eagerly (Spark does). For the optimizer,
    the bounds of ``rules/bounds.dl``, which describe the fixpoint but prune nothing (the
    seed does): an update no longer re-derives thousands of tuples no answer reads. Checked:
    every rule reading an on-demand relation derives an on-demand one — refused otherwise
    rather than made on demand silently, so the rule files say exactly which relations wait
    for a reader — and no pruning directive names one (pruning acts while the others are
    derived, which a relation derived later cannot take part in). A recursive stratum is
    therefore on demand whole or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reopt.costmodel.builtins import LONG, Builtin
from reopt.costmodel.errors import ReoptError
from reopt.evaluator.ast import Aggregate, Atom, Directive, Rule, Var

ASCENDING, DESCENDING = "ascending", "descending"
PRUNING_FEATURES = ("aggsel", "suppress", "refcount", "bound")


class DirectiveError(ReoptError):
    """A directive in a rule file is malformed or names something that does not exist."""


@dataclass(frozen=True)
class Schedule:
    direction: str
    rank: str
    preds: tuple[str, ...]


@dataclass(frozen=True)
class AggSel:
    """Keep a ``target`` tuple only if it improves ``agg``'s group (``key`` columns of
    ``target``, in the aggregate head's order) on the ``value`` column."""

    agg: str
    target: str
    key: tuple[int, ...]
    value: int
    func: str


@dataclass
class Features:
    schedules: dict[str, Schedule] = field(default_factory=dict)
    """Relation → the schedule it is released by."""
    aggsel: dict[str, AggSel] = field(default_factory=dict)
    """Filtered relation → its aggregate selection."""
    suppress: dict[str, str] = field(default_factory=dict)
    """Pruned relation → the relation of its source tuples (a prefix of its columns)."""
    refcount: set[str] = field(default_factory=set)
    bound: dict[str, str] = field(default_factory=dict)
    """Filtered relation → the relation holding its groups' bounds."""
    ondemand: frozenset[str] = frozenset()
    """Relations derived when read (``.ondemand``), whatever the pruning mode."""


def _err(d: Directive, msg: str) -> DirectiveError:
    return DirectiveError(f"{d.pos}: .{d.name}: {msg}")


def read_features(
    directives: list[Directive],
    rules: list[Rule],
    arity: dict[str, int],
    builtins: dict[str, Builtin],
    enabled: frozenset[str],
) -> Features:
    """Check every directive; keep the pruning ones whose feature is ``enabled``."""
    out = Features()
    defined = {r.head.pred for r in rules}
    bound_at: dict[str, Directive] = {}
    ondemand_at: dict[str, Directive] = {}

    def relation(d: Directive, name: str, needs_rules: bool = True) -> str:
        if name not in arity:
            raise _err(d, f"unknown relation {name}")
        if needs_rules and name not in defined:
            raise _err(d, f"{name} has no rules")
        return name

    for d in directives:
        if d.name == "schedule":
            if len(d.args) < 3 or d.args[0] not in (ASCENDING, DESCENDING):
                raise _err(d, "expected '.schedule ascending|descending Fn_rank Relation …'")
            b = builtins.get(d.args[1])
            if b is None or b.outputs != (LONG,):
                raise _err(d, f"{d.args[1]} is not a built-in with one integer output")
            s = Schedule(d.args[0], d.args[1], tuple(relation(d, p) for p in d.args[2:]))
            for p in s.preds:
                if p in out.schedules:
                    raise _err(d, f"{p} is already scheduled")
                if arity[p] < len(b.inputs):
                    raise _err(d, f"{p} has fewer columns than {b.name} has inputs")
                out.schedules[p] = s
        elif d.name == "aggsel":
            if len(d.args) != 1:
                raise _err(d, "expected '.aggsel AggregateRelation.'")
            sel = _aggsel(d, relation(d, d.args[0]), rules)
            if "aggsel" in enabled:
                out.aggsel[sel.target] = sel
        elif d.name == "suppress":
            if len(d.args) != 2:
                raise _err(d, "expected '.suppress PrunedRelation SourceRelation.'")
            r, s = relation(d, d.args[0]), relation(d, d.args[1])
            if arity[s] >= arity[r]:
                raise _err(d, f"{s}'s columns must be a proper prefix of {r}'s")
            if "suppress" in enabled:
                for rule in rules:
                    if rule.head.pred == r and not _embeds_in_front(rule, s, arity[s]):
                        # a tuple without its source could be neither suppressed nor revived
                        raise _err(d, f"{rule.pos}: every rule of {r} must read a {s} tuple "
                                      f"whose columns are the first {arity[s]} of its head")
                out.suppress[r] = s
        elif d.name == "refcount":
            if len(d.args) != 1:
                raise _err(d, "expected '.refcount Relation.'")
            if "refcount" in enabled:
                out.refcount.add(relation(d, d.args[0]))
        elif d.name == "bound":
            if len(d.args) != 2:
                raise _err(d, "expected '.bound FilteredRelation BoundRelation.'")
            r, b = relation(d, d.args[0]), relation(d, d.args[1])
            if r in bound_at:
                raise _err(d, f"{r} already has a bound ({bound_at[r].pos})")
            bound_at[r] = d
            if "bound" in enabled:
                out.bound[r] = b
        elif d.name == "ondemand":
            if not d.args:
                raise _err(d, "expected '.ondemand Relation …'")
            for p in d.args:
                ondemand_at[relation(d, p)] = d
        else:
            raise _err(d, "unknown directive (known: schedule, aggsel, suppress, refcount, "
                          "bound, ondemand)")
    out.ondemand = _check_ondemand(ondemand_at, directives, rules)
    for r, b in out.bound.items():
        sel = out.aggsel.get(r)
        if sel is None:
            raise _err(bound_at[r], f"needs aggregate selection on {r} (its value column)")
        if not 2 <= arity[b] <= len(sel.key) + 1:
            raise _err(bound_at[r], f"{b} must have leading group columns of {sel.agg} "
                                    f"(1 to {len(sel.key)}) and one value")
    # an upper bound prunes a minimum only (module doc)
    out.bound = {r: b for r, b in out.bound.items() if out.aggsel[r].func == "min"}
    return out


def _check_ondemand(declared: dict[str, Directive], directives: list[Directive],
                    rules: list[Rule]) -> frozenset[str]:
    """The relations ``.ondemand`` declares, checked (module doc): no pruning directive names
    one, and every rule reading one derives one."""
    if not declared:
        return frozenset()
    for d in directives:
        if d.name in ("aggsel", "suppress", "refcount", "bound"):
            for p in d.args:
                if p in declared:
                    raise _err(declared[p], f"{p} is named by .{d.name} ({d.pos}); a relation "
                                            "pruning acts on or with cannot wait for a reader")
    for rule in rules:
        if rule.head.pred in declared:
            continue
        for a in rule.body:
            if isinstance(a, Atom) and a.pred in declared:
                raise DirectiveError(
                    f"{rule.pos}: {rule.head.pred} reads {a.pred}, which is derived when read "
                    f"(.ondemand, {declared[a.pred].pos}): declare {rule.head.pred} on demand "
                    "too")
    return frozenset(declared)


def _embeds_in_front(rule: Rule, source: str, width: int) -> bool:
    """Whether ``rule``'s head starts with the variables of a ``source`` atom of its body,
    all of them, in order (the head tuple names the source tuple it came from)."""
    lead = rule.head.args[:width]
    return any(isinstance(a, Atom) and a.pred == source and not a.negated
               and all(isinstance(t, Var) for t in a.args) and tuple(a.args) == tuple(lead)
               for a in rule.body)


def aggregate_input(rule: Rule) -> AggSel | None:
    """For ``A(k…, min<v>) :- R(…)`` (one atom, nothing else): which columns of ``R`` are
    ``A``'s group and value. None for any other shape."""
    a = rule.aggregate
    if a is None or len(rule.body) != 1 or not isinstance(rule.body[0], Atom):
        return None
    body = rule.body[0]
    if body.negated or body.is_builtin:
        return None
    where = {t.name: i for i, t in enumerate(body.args) if isinstance(t, Var)}
    key = []
    for t in rule.head.args:
        if isinstance(t, Aggregate):
            continue
        if not isinstance(t, Var) or t.name not in where:
            return None
        key.append(where[t.name])
    return AggSel(rule.head.pred, body.pred, tuple(key), where[a.var.name], a.func)


def aggregate_inputs(rules: list[Rule], aggregates) -> dict[str, list[AggSel]]:
    """Aggregate relation → its single-relation inputs (see :func:`aggregate_input`)."""
    out: dict[str, list[AggSel]] = {p: [] for p in aggregates}
    for rule in rules:
        sel = aggregate_input(rule)
        if sel is not None:
            out[sel.agg].append(sel)
    return out


def _aggsel(d: Directive, agg: str, rules: list[Rule]) -> AggSel:
    found: AggSel | None = None
    for rule in rules:
        if rule.head.pred != agg:
            continue
        sel = aggregate_input(rule)
        if sel is None:
            raise _err(d, f"{agg} must be defined by min<>/max<> over a single relation "
                          f"({rule.pos})")
        if found is not None and found != sel:
            raise _err(d, f"{agg}'s rules aggregate different relations or columns")
        found = sel
    assert found is not None
    return found


__all__ = ["ASCENDING", "DESCENDING", "PRUNING_FEATURES", "AggSel", "DirectiveError",
           "Features", "Schedule", "aggregate_input", "aggregate_inputs", "read_features"]
