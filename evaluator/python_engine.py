"""The ``python`` engine: compiled delta plans over in-memory relations with hash indexes.

The fast path for single queries and for tests; it must give exactly the relations the
``spark`` engine gives, because both run the same :mod:`reopt.evaluator.compiler` ops. Each
rule variant runs as Python generated from its ops once (:func:`_source`): nested loops that
bind the rule's variables to locals and build only the head tuples.
"""

from __future__ import annotations

import heapq
import operator
import time
import weakref
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from reopt.costmodel.errors import ReoptError
from reopt.evaluator import columnar
from reopt.evaluator.ast import Aggregate, Arith, Const, Var
from reopt.evaluator.compiler import (
    BOUND,
    CONST,
    DELTA,
    OLD,
    SAME,
    Call,
    CompiledProgram,
    Scan,
    Stratum,
    Variant,
    match_terms,
)
from reopt.evaluator.failures import CRASHES, rule_failure
from reopt.evaluator.features import ASCENDING, AggSel, aggregate_inputs

if TYPE_CHECKING:
    from reopt.evaluator.ondemand import Pending


def key_of(cols: tuple[int, ...]) -> Callable[[tuple], tuple]:
    """A function reading the key ``cols`` of a tuple (as a tuple, also for one column)."""
    get = _KEYS.get(cols)
    if get is None:
        if not cols:
            get = _no_key
        elif len(cols) == 1:
            get = _one_key(cols[0])
        else:
            get = operator.itemgetter(*cols)
        _KEYS[cols] = get
    return get


_KEYS: dict[tuple[int, ...], Callable[[tuple], tuple]] = {}


def _no_key(row: tuple) -> tuple:
    return ()


def _one_key(c: int) -> Callable[[tuple], tuple]:
    return lambda row: (row[c],)


Bucket = list[tuple] | dict[tuple, None]
"""The tuples of one key of an index (:meth:`Relation.index`)."""

Grouping = Callable[[tuple[int, ...]], "tuple[np.ndarray, np.ndarray]"]
"""Key columns → the positions of a frame's tuples ordered by those columns and the position
in that order where each key's run starts (:meth:`Relation.of_rows`)."""


class Relation:
    """A set of tuples with hash indexes on demand, kept up to date as tuples are added."""

    def __init__(self, rows: Iterable[tuple] = ()):
        self.rows: set[tuple] = set(rows)
        self._indexes: dict[tuple[int, ...], dict[tuple, Bucket]] = {}
        """Key columns → key → the tuples with that key: a list as the index is built (only
        the key is hashed), a dict as an ordered set from the first removal from it on (a
        tuple is then removed in constant time)."""
        self._keyed: list[tuple[Callable[[tuple], tuple], dict[tuple, Bucket]]] = []
        """The indexes with the function reading their key."""
        self.version = 0
        """Bumped by every change, so a copy kept elsewhere (a frame) can tell it is stale."""
        self.journal: dict[tuple, bool] | None = None
        """While set: every tuple inserted or deleted since, with whether it was there before
        (:meth:`changed`), so what an update changed costs what it changed, not a copy."""

    @classmethod
    def of_rows(cls, make: Callable[[], Iterable[tuple]], size: int,
                grouped: Grouping | None = None) -> Relation:
        """A relation of ``size`` distinct tuples that ``make`` builds on first use of
        :attr:`rows` (then it is an ordinary relation): a stratum evaluated on frames hands
        its relations back this way, so a relation no one reads as tuples — a large
        complete layer a from-scratch optimization only reads on frames — is never turned
        into Python tuples (nor traversed by the garbage collector).

        ``grouped`` (key columns → the positions of ``make``'s tuples ordered by those
        columns, and where each key's run starts) lets an index
        asked for before the relation changes be built by slicing runs rather than tuple by
        tuple (:meth:`index`): an update's first lookups of a large frame-built relation."""
        kind = Relation if cls is _Unbuilt else cls  # (handed back over an unbuilt one)
        rel = kind()
        del rel.rows  # read through _Unbuilt.__getattr__ until built
        rel._make, rel._size, rel._kind, rel._grouping = make, size, kind, grouped
        rel.__class__ = _Unbuilt
        return rel

    def __len__(self) -> int:
        return len(self.rows)

    def __getstate__(self) -> dict[str, Any]:
        """The tuples only: indexes are rebuilt on demand, and a journal is an update's."""
        return {"rows": self.rows, "version": self.version}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["rows"])  # type: ignore[misc]
        self.version = state["version"]

    def copy(self) -> Relation:
        """The same tuples; indexes are rebuilt on demand."""
        return Relation(self.rows)

    def built(self) -> bool:
        """Whether the tuples are made (a relation of :meth:`of_rows` makes them when first
        read)."""
        return True

    def keep_frame(self, frame: Any) -> None:
        """Keep ``frame`` (a :class:`~.frames.Frame` of these very tuples) beside them while
        the relation is unchanged (:meth:`as_frame`), for readers that count or scan all of
        it: a column pass instead of a loop over the tuples."""
        self._as_frame = (self.version, frame)

    def as_frame(self) -> Any:
        """The frame :meth:`keep_frame` kept, while the relation is as it was then; else
        None."""
        kept = self.__dict__.get("_as_frame")
        return kept[1] if kept is not None and kept[0] == self.version else None

    def has_index(self, cols: tuple[int, ...]) -> bool:
        """Whether the index on ``cols`` is built already."""
        return cols in self._indexes

    def index(self, cols: tuple[int, ...]) -> dict[tuple, Bucket]:
        """Key → the tuples with that key in ``cols`` (built on first use, then kept up to
        date; a bucket is iterated, never changed by the caller)."""
        idx = self._indexes.get(cols)
        if idx is None:
            key = key_of(cols)
            idx = self._grouped(cols, key)
            if idx is None:
                idx = {}
                index_rows(key, idx, self.rows)
            self._indexes[cols] = idx
            self._keyed.append((key, idx))
        return idx

    def as_built(self) -> np.ndarray | None:
        """The tuples as an object array in the order of the frame they were built from
        (:meth:`of_rows` with a grouping), while the relation is as built; else None."""
        made = self._as_made()
        return None if made is None else made[1]

    def _as_made(self) -> tuple[int, np.ndarray, Grouping] | None:
        """What :meth:`of_rows` kept of the built tuples (version, tuples, grouping) while
        the relation is as built; None once it changed (and then dropped: of no use again)."""
        self.rows  # noqa: B018 - built first, if it is not (it keeps the grouping then)
        made = self.__dict__.get("_made")
        if made is not None and made[0] != self.version:
            del self.__dict__["_made"]
            return None
        return made

    def _grouped(self, cols: tuple[int, ...], key: Callable[[tuple], tuple]
                 ) -> dict[tuple, Bucket] | None:
        """The index on ``cols`` cut from the runs of the tuples a frame built, ordered by
        key in bulk (:meth:`of_rows`), while the relation is as built; else None. Several
        times faster than entering the tuples one by one in the set's hash order, which
        visits memory at random (a 224,000-tuple SearchSpace: about 45 ms an index instead
        of 200), and exact: a run's tuples share their key (equal under ``==``), so the
        index has as many keys as runs unless two runs' keys are equal in Python, and then
        it is built tuple by tuple instead."""
        made = self._as_made()
        if made is None:
            return None
        rows, grouping = made[1], made[2]
        order, starts = grouping(cols)
        ordered = rows[order].tolist()  # (gathered in C: the tuples as an object array)
        bounds = starts.tolist()
        bounds.append(len(ordered))
        idx: dict[tuple, Bucket] = {key(ordered[a]): ordered[a:b]
                                    for a, b in zip(bounds, bounds[1:])}  # noqa: B905
        return idx if len(idx) == len(starts) else None

    def remove(self, rows: list[tuple]) -> None:
        self.version += 1
        if self.journal is not None:
            journal, have = self.journal, self.rows
            for r in rows:
                if r in have:
                    journal.setdefault(r, True)
        for r in rows:
            self.rows.discard(r)
        for get, idx in self._keyed:
            for r in rows:
                key = get(r)
                bucket = idx.get(key)
                if bucket is None:
                    continue
                if type(bucket) is list:  # as built: an ordered set from now on
                    if len(bucket) == 1:  # (its one tuple: the key goes, no set made)
                        if bucket[0] == r:
                            del idx[key]
                        continue
                    bucket = idx[key] = dict.fromkeys(bucket)
                if r in bucket:
                    del bucket[r]
                    if not bucket:
                        del idx[key]

    def changed(self) -> list[tuple]:
        """The tuples inserted or deleted since the journal started (one that came and went,
        or went and came back, is not among them); stops the journal."""
        journal, self.journal = self.journal or {}, None
        if not journal:
            return []  # (unchanged: the tuples of a relation left on a frame stay unbuilt)
        have = self.rows
        return [r for r, was in journal.items() if (r in have) != was]

    def rows_then(self) -> set[tuple]:
        """The tuples held when the journal started (all of them without one); stops the
        journal: what a relation replaced midway through an update held before it."""
        journal, self.journal = self.journal or {}, None
        if not journal:
            return self.rows
        return {r for r in self.rows if journal.get(r, True)} | {
            r for r, was in journal.items() if was}

    def add(self, rows: Iterable[tuple]) -> list[tuple]:
        """Insert; returns the tuples that were new."""
        new: list[tuple] = []
        have, put, keep = self.rows, self.rows.add, new.append
        for r in rows:
            if r not in have:
                put(r)
                keep(r)
        if new:
            self.version += 1
            if self.journal is not None:
                for r in new:
                    self.journal.setdefault(r, False)
            for get, idx in self._keyed:
                index_rows(get, idx, new)
        return new


class Relations(dict[str, Relation]):
    """An engine's relations by name: a dict a weak reference can name. The stale on-demand
    strata's :class:`~reopt.evaluator.ondemand.Pending` derives them from this mapping while
    the mapping's own :class:`~reopt.evaluator.ondemand.Stale` relations hold the ``Pending``:
    held weakly, the mapping is freed by reference counting alone when its engine and
    evaluations are dropped, not by the cyclic collector."""

    __slots__ = ("__weakref__",)


class _Unbuilt(Relation):
    """A relation of :meth:`Relation.of_rows` whose tuples are not built yet. A class of its
    own, so that ordinary relations have no ``__getattr__`` (which would slow every
    attribute read of theirs); once built, the relation takes its class back."""

    def __getattr__(self, name: str) -> Any:
        if name != "rows":
            raise AttributeError(name)
        state = self.__dict__
        make, kind = state.pop("_make"), state.pop("_kind")
        grouping = state.pop("_grouping")
        del state["_size"]
        rows = make()
        self.rows = set(rows)
        if grouping is not None and isinstance(rows, list):  # (for Relation._grouped)
            state["_made"] = (self.version, np.fromiter(rows, object, len(rows)), grouping)
        self.__class__ = kind
        return self.rows

    def __len__(self) -> int:
        return self._size

    def built(self) -> bool:
        return False

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Pickled as the relation it becomes (built first)."""
        self.rows  # noqa: B018 - builds the tuples, and the class is the ordinary one again
        return self.__reduce_ex__(protocol)


def index_rows(get: Callable[[tuple], tuple], idx: dict[tuple, Bucket],
               rows: Iterable[tuple]) -> None:
    """Enter ``rows`` (none of them in it yet) in the index ``idx``, each under its key
    ``get`` reads (a relation's index, or one a caller builds for itself)."""
    if not isinstance(rows, (list, tuple, set, frozenset)):
        rows = list(rows)  # (iterated twice, in step, below)
    for key, r in zip(map(get, rows), rows, strict=True):  # keys read in C, not per row here
        bucket = idx.get(key)
        if bucket is None:
            idx[key] = [r]
        elif type(bucket) is list:
            bucket.append(r)
        else:
            bucket[r] = None


@dataclass
class RunStats:
    iterations: int = 0
    derived: dict[str, int] = field(default_factory=dict)
    """New tuples inserted per relation."""
    produced: dict[str, int] = field(default_factory=dict)
    """Tuples produced by rule bodies per relation, duplicates included."""
    deleted: dict[str, int] = field(default_factory=dict)
    """Tuples pruned per relation (suppression, reference counting)."""
    held: dict[str, int] = field(default_factory=dict)
    """Tuples per relation at the fixpoint (set by the engine at the end), but for those
    derived when read (``.ondemand``), which an evaluation leaves stale."""
    seconds: float = 0.0


def _getter(t, schema: Mapping[str, int]) -> Callable[[tuple], Any]:
    """A function reading term ``t`` from a row whose columns are ``schema``'s variables."""
    if isinstance(t, Const):
        value = t.value
        return lambda row: value
    if isinstance(t, Arith):
        left, right = _getter(t.left, schema), _getter(t.right, schema)
        if t.op == "+":
            return lambda row: left(row) + right(row)
        return lambda row: left(row) - right(row)
    return operator.itemgetter(schema[t.name])


# -- per-variant code ---------------------------------------------------------------------------
_UNPACK_FROM = 2
"""A scan binding more columns than this unpacks its tuple in one statement."""
_OPS = {"=": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


SINGLE = "/one"
"""Suffix of a built-in's name in the functions a generated variant is given: its
single-answer form (:attr:`~reopt.costmodel.builtins.Builtin.one`)."""


def _term_source(t: Any, local: Mapping[str, str], const: Callable[[Any], str]) -> str:
    """Python expression of term ``t`` in a variant's generated code: its variables are the
    ``local`` names bound, its constants named by ``const``. (A function of the module: as a
    closure calling itself, it was a reference cycle per variant generated.)"""
    if isinstance(t, Const):
        return const(t.value)
    if isinstance(t, Arith):
        op = "+" if t.op == "+" else "-"
        return f"({_term_source(t.left, local, const)} {op} {_term_source(t.right, local, const)})"
    return local[t.name]


def _source(v: Variant, single: frozenset[str] = frozenset(), distinct: bool = False
            ) -> tuple[str, list]:
    """Python source of ``v``'s delta plan as nested loops over its ops, and its constants.
    A call of a built-in in ``single`` (one answer per input row) whose one output is a new
    variable binds it directly.

    ``distinct``: a keyed scan of a full relation that binds only some of its columns visits
    each distinct value of those columns once per lookup, not each tuple (several tuples of
    a key agreeing on the columns read — tied plans of one group, read for their cost — would
    derive the same bindings, and so the same tuples, again): the tuples derived are the
    same set, fewer times.

    The loops visit the bindings in the order an op-at-a-time pipeline would (each op's
    matches of each earlier binding, in turn) without building a tuple per op and binding. A
    scan reads the full relation, or the delta, or (``OLD``) the full relation without the
    delta's tuples; it looks its relation (and index) up the first time a binding reaches it,
    so an index is built only for a scan that runs. A negated scan keeps the binding when no
    tuple matches (``for … else``)."""
    consts: list = []
    local: dict[str, str] = {}

    def const(x: Any) -> str:
        consts.append(x)
        return f"k{len(consts) - 1}"

    def term(t: Any) -> str:
        return _term_source(t, local, const)

    def bind(name: str) -> str:
        local[name] = f"x{len(local)}"
        return local[name]

    pre: list[str] = []
    body: list[str] = []
    depth, looping = 1, False

    def emit(line: str) -> None:
        body.append("    " * depth + line)

    def skip_unless(conds: list[str]) -> None:
        nonlocal depth
        if not conds:
            return
        if looping:
            emit(f"if not ({' and '.join(conds)}): continue")
        else:
            emit(f"if {' and '.join(conds)}:")
            depth += 1

    for i, op in enumerate(v.ops):
        if isinstance(op, Scan):
            matched, binds = match_terms(op.args, local)
            keyed = [(kind, x) for _, kind, x in matched if kind != SAME]
            cols = tuple(j for j, kind, _ in matched if kind != SAME)
            same = [f"m{i}[{a}] == m{i}[{j}]" for j, kind, a in matched if kind == SAME]
            src = f"{'delta' if op.version == DELTA else 'full'}[{op.pred!r}]"
            conds = []
            if op.version == OLD:  # the relation without the delta's tuples
                pre.append(f"ex{i} = delta[{op.pred!r}].rows if {op.pred!r} in delta else None")
                pre.append(f"ex{i} = ex{i} or None")
                conds.append(f"(ex{i} is None or m{i} not in ex{i})")
            conds += same
            pre.append(f"s{i} = None")
            emit(f"if s{i} is None:")
            if not cols and not same and not op.negated:
                # no key: a cross product with the whole relation, no index needed
                fetch = f"{src}.rows"
                if op.version == OLD:
                    fetch = f"{src}.rows if ex{i} is None else {src}.index(()).get((), ())"
                emit(f"    s{i} = {fetch}")
                emit(f"for m{i} in s{i}:")
            else:
                key = "".join(f"{const(x) if kind == CONST else local[x]}, " for kind, x in keyed)
                emit(f"    s{i} = {src}.index({cols!r}).get")
                if (distinct and op.version != DELTA and not conds and not op.negated
                        and binds and len(binds) + len(cols) < len(op.args)):
                    # the distinct values of the columns bound, read in C (module doc)
                    pre.append(f"g{i} = itemgetter({', '.join(str(j) for j, _ in binds)})")
                    emit(f"b{i} = s{i}(({key}), ())")
                    emit(f"for {', '.join(bind(n) for _, n in binds)}, in (map(g{i}, b{i}) "
                         f"if len(b{i}) < 2 else dict.fromkeys(map(g{i}, b{i}))):"
                         if len(binds) > 1 else
                         f"for {bind(binds[0][1])} in (map(g{i}, b{i}) if len(b{i}) < 2 "
                         f"else dict.fromkeys(map(g{i}, b{i}))):")
                    depth += 1
                    looping = True
                    continue
                emit(f"for m{i} in s{i}(({key}), ()):")
            depth += 1
            if op.negated:
                if conds:
                    emit(f"if {' and '.join(conds)}: break")
                else:
                    emit("break")
                depth -= 1
                emit("else:")
                depth += 1
                continue
            looping = True
            skip_unless(conds)
            if len(binds) > _UNPACK_FROM:
                # one unpacking instead of a subscript per column (a wide tuple, e.g. a
                # SearchSpace alternative, is bound whole on every visit)
                names = dict(binds)
                targets = [bind(names[j]) if j in names else "_" for j in range(len(op.args))]
                emit(f"{', '.join(targets)}, = m{i}")
            else:
                for j, name in binds:
                    emit(f"{bind(name)} = m{i}[{j}]")
        elif isinstance(op, Call):
            args = "".join(f", {term(t)}" for t in op.inputs)
            matched, binds = match_terms(op.outputs, local)
            if op.name in single and not matched and len(binds) == 1:
                # exactly one answer: bound as a value, without a loop over its one row
                pre.append(f"f{i} = fns[{(op.name + SINGLE)!r}]")
                emit(f"{bind(binds[0][1])} = f{i}(ctx{args})")
                continue
            pre.append(f"f{i} = fns[{op.name!r}]")
            emit(f"for r{i} in f{i}(ctx{args}):")
            depth += 1
            looping = True
            bad = []
            for j, kind, x in matched:
                against = const(x) if kind == CONST else local[x] if kind == BOUND else f"r{i}[{x}]"
                bad.append(f"r{i}[{j}] != {against}")
            if bad:
                emit(f"if {' or '.join(bad)}: continue")
            for j, name in binds:
                emit(f"{bind(name)} = r{i}[{j}]")
        else:
            left_free = isinstance(op.left, Var) and op.left.name not in local
            right_free = isinstance(op.right, Var) and op.right.name not in local
            if op.op == "=" and (left_free or right_free):
                free, other = (op.left, op.right) if left_free else (op.right, op.left)
                value = term(other)
                emit(f"{bind(free.name)} = {value}")  # type: ignore[union-attr]
            else:
                skip_unless([f"{term(op.left)} {_OPS[op.op]} {term(op.right)}"])
    head = [t.var if isinstance(t, Aggregate) else t for t in v.head]
    emit(f"append(({''.join(f'{term(t)}, ' for t in head)}))")
    lines = ["def make(consts):",
             *(f"    k{n} = consts[{n}]" for n in range(len(consts))),
             "    def run(full, delta, ctx, fns):",
             "        out = []",
             "        append = out.append",
             *("        " + p for p in pre),
             *("    " * 1 + b for b in body),
             "        return out",
             "    return run"]
    return "\n".join(lines), consts


_CODE: dict[int, tuple[weakref.ref, Callable]] = {}
"""id of a variant → (a weak reference to it, its generated function): variants live as long
as their compiled program, engines come and go (one per evaluation)."""
_DISTINCT: dict[int, tuple[weakref.ref, Callable]] = {}
"""The same for the variants' ``distinct`` form (:func:`_source`)."""


_COMPILED: dict[str, Any] = {}
"""Generated source → its code object (the constants are not in the source)."""


def _generate(v: Variant, single: frozenset[str] = frozenset(), distinct: bool = False
              ) -> Callable:
    """The function running ``v`` (see :func:`_source`), generated once per variant and
    form (its program's built-ins, so ``single``, are the same every time)."""
    src, consts = _source(v, single, distinct)
    code = _COMPILED.get(src)
    if code is None:  # every program loaded from the same rules has the same variants
        code = _COMPILED[src] = compile(src, f"<rule variant of {v.head_pred}>", "exec")
    namespace: dict[str, Any] = {"itemgetter": operator.itemgetter}
    exec(code, namespace)
    # (taken out: left in the namespace, ``make`` and its globals would be a reference
    # cycle per variant that only the cyclic collector frees)
    fn = namespace.pop("make")(consts)
    key, cache = id(v), _DISTINCT if distinct else _CODE

    def forget(ref: weakref.ref) -> None:
        if cache.get(key, (None,))[0] is ref:
            del cache[key]

    cache[key] = (weakref.ref(v, forget), fn)
    return fn


class PythonEngine:
    name = "python"

    def __init__(self, compiled: CompiledProgram, ctx: Mapping[int, Any]):
        self.program = compiled
        self.ctx = ctx
        self._agg_inputs = compiled.memoized(  # (read once per program, not per session)
            ("aggregate inputs",), lambda: aggregate_inputs(compiled.rules, compiled.aggregates))
        self._fns = {name: b.fn for name, b in compiled.builtins.items()}
        self._single = frozenset(n for n, b in compiled.builtins.items() if b.one is not None)
        self._fns.update({n + SINGLE: compiled.builtins[n].one for n in self._single})
        from reopt.evaluator.ondemand import OnDemandStats

        self.on_demand = OnDemandStats()
        """What on-demand strata cost when read or followed (:mod:`.ondemand`)."""
        self.pending: Pending | None = None
        """The on-demand strata the last evaluation or update left stale."""

    # -- one variant --------------------------------------------------------------------------
    def run_variant(
        self, v: Variant, full: Mapping[str, Relation], delta: Mapping[str, Relation],
        distinct: bool = False
    ) -> list[tuple]:
        """The tuples ``v`` derives (a bag); ``distinct``: through its form visiting each
        distinct value read of a keyed scan once (:func:`_source`), fewer duplicates."""
        hit = (_DISTINCT if distinct else _CODE).get(id(v))
        fn = (hit[1] if hit is not None and hit[0]() is v
              else _generate(v, self._single, distinct))
        try:
            return fn(full, delta, self.ctx, self._fns)
        except ReoptError:
            raise
        except CRASHES as e:  # a rule fed a built-in what it cannot take: say which
            raise rule_failure(v, e, self.program.builtins, self.ctx) from e

    # -- fixpoint -----------------------------------------------------------------------------
    def evaluate(
        self, inputs: Mapping[str, Iterable[tuple]]
    ) -> tuple[dict[str, Relation], RunStats]:
        t0 = time.perf_counter()
        self.start(inputs)
        for stratum in self.program.strata:
            if not stratum.ondemand:
                self.run_stratum(stratum)
        self.stats.held = self.sizes()
        self.defer()
        self.stats.seconds = time.perf_counter() - t0
        return self.full, self.stats

    def sizes(self) -> dict[str, int]:
        """Tuples per relation, the on-demand ones aside (counting them would derive them)."""
        lazy = self.program.ondemand
        return {p: len(r) for p, r in self.full.items() if p not in lazy}

    def defer(self, kept: Collection[int] = ()) -> None:
        """Leave the on-demand strata stale, to be derived from the relations as they are
        now when first read; those of the strata ``kept`` keep their tuples for the read
        (:mod:`.ondemand`)."""
        from reopt.evaluator.ondemand import defer

        self.pending = defer(self, kept)

    def start(self, inputs: Mapping[str, Iterable[tuple]]) -> None:
        """Fresh relations holding the facts and the inputs; fresh statistics."""
        prog = self.program
        self.stats = RunStats()
        self.full = Relations({p: Relation() for p in prog.schemas})
        self.counts: dict[str, dict[tuple, int]] = {p: {} for p in prog.features.refcount}
        self.frames: dict[str, tuple[Relation, int, Any]] = {}
        """Relation → (the relation a stratum run on frames handed back, its version then,
        its frame), so the next such stratum reads the frame instead of the tuples while the
        relation is unchanged (:mod:`.columnar`)."""
        for p, rows in prog.facts.items():
            self.full[p].add(rows)
        for p in prog.inputs:
            self.full[p].add(inputs.get(p, ()))
            if p in self.counts:
                for r in self.full[p].rows:
                    self.counts[p][r] = 1

    def run_stratum(self, stratum: Stratum) -> None:
        if columnar.wanted(self, stratum):  # a large stratum that deletes nothing: on frames
            columnar.run(self, stratum)
        elif stratum.schedule is not None:
            self._run_scheduled(stratum)
        else:
            self._run_seminaive(stratum)

    def _live_base(self, stratum: Stratum) -> list[Variant]:
        """The base variants that can derive anything: one joining a relation of its own
        stratum that is still empty derives nothing (R7/R8 before any PlanCost exists), so
        it is not run — its derivations come from the delta variants."""
        own = set(stratum.preds)
        return [v for v in stratum.base
                if not any(isinstance(op, Scan) and not op.negated and op.pred in own
                           and not self.full[op.pred].rows for op in v.ops)]

    def _run_seminaive(self, stratum: Stratum) -> None:
        fresh = [p for p in stratum.preds if not len(self.full[p])]  # (for frames taking over)
        pending: dict[str, list[tuple]] = {p: [] for p in stratum.preds}
        for v in self._live_base(stratum):
            pending[v.head_pred].extend(self.run_variant(v, self.full, {}))
        before = 0  # the previous iteration's new tuples
        yields = columnar.Yields()
        while True:
            delta = {p: self._release(p, rows) for p, rows in pending.items()}
            self._iterated(delta)
            if not stratum.recursive or not any(delta.values()):
                return
            new = sum(len(d) for d in delta.values())
            if columnar.takes_over(self, stratum, before, yields.expected(delta, new)):
                # grown large, or about to: on frames from here
                columnar.resume(self, stratum, delta, fresh)
                return
            before = new
            pending = {p: [] for p in stratum.preds}
            for v in stratum.deltas:
                if delta[v.delta_pred]:  # type: ignore[index]
                    pending[v.head_pred].extend(self._run_delta(v, delta, yields))

    def _run_delta(self, v: Variant, delta: Mapping[str, Relation], yields: columnar.Yields
                   ) -> list[tuple]:
        """The tuples the delta variant ``v`` derives from ``delta`` (a bag): on frames when
        :func:`.columnar.batched` says its built-ins are better called once for the whole
        delta than once per tuple (``yields``: what its earlier runs derived), else tuple at a
        time."""
        n = len(delta[v.delta_pred])  # type: ignore[index]
        if columnar.batched(self, v, n, yields.of_variant(v)):
            out = columnar.run_batched(self, v, delta)
        else:
            out = self.run_variant(v, self.full, delta)
        yields.ran(v, n, len(out))
        return out

    def _run_scheduled(self, stratum: Stratum) -> None:
        """Release the stratum's tuples one rank at a time (see :mod:`.features`), each rank
        in the steps :class:`~reopt.evaluator.compiler.RankSteps` orders."""
        sched, steps = stratum.schedule, stratum.steps
        assert sched is not None and steps is not None
        rank_fn = self.program.builtins[sched.rank]
        rank, ctx, n_in = rank_fn.fn, self.ctx, len(rank_fn.inputs)
        sign = 1 if sched.direction == ASCENDING else -1
        pending: dict[str, dict[int, list[tuple]]] = {p: {} for p in stratum.preds}
        ranks: list[int] = []  # heap of the signed ranks with tuples pending, each once
        queued: set[int] = set()
        done: set[str] = set()
        current: int | None = None

        rank_of: dict[tuple, int] = {}  # the rank of each group met (the built-in is pure)

        def add(pred: str, rows: list[tuple]) -> None:
            buckets = pending[pred]
            for r in rows:
                g = r[:n_in]
                k = rank_of.get(g)
                if k is None:
                    k = rank_of[g] = rank(ctx, *g)[0][0]
                bucket = buckets.get(k)
                if bucket is None:  # the first tuple of pred at rank k: check the order
                    if current is not None and (sign * k < sign * current or
                                                (k == current and pred in done)):
                        raise ReoptError(
                            f".schedule {sched.direction} {sched.rank}: {pred}{r} has rank "
                            f"{k} but rank {current} is being released")
                    buckets[k] = bucket = []
                    if k != current and k not in queued:  # the current rank is drained below
                        queued.add(k)
                        heapq.heappush(ranks, sign * k)
                bucket.append(r)

        def at_current(pred: str) -> bool:
            return current in pending[pred]

        for v in self._live_base(stratum):
            add(v.head_pred, self.run_variant(v, self.full, {}))
        while ranks:
            current = sign * heapq.heappop(ranks)
            queued.discard(current)
            done = set()
            ran = True
            while ran and any(map(at_current, stratum.preds)):
                ran = False
                for step, _ in steps.walk(at_current, done):
                    ran = True
                    delta = {p: self._release(p, pending[p].pop(current)) for p in step}
                    self._iterated(delta)
                    for v in stratum.deltas:
                        d = delta.get(v.delta_pred)  # type: ignore[arg-type]
                        if d:
                            add(v.head_pred, self.run_variant(v, self.full, delta))
            left = [p for p in stratum.preds if current in pending[p]]
            if left:
                raise ReoptError(f".schedule: {', '.join(left)} depend on each other within "
                                 f"rank {current}; the rank must separate them")
        self._suppress_uncosted(stratum)

    def _suppress_uncosted(self, stratum: Stratum) -> None:
        """After a scheduled stratum, suppress the sources that got no tuple of a relation
        pruned by a ``.bound``: an input of theirs was rejected by its bound, and inputs rank
        lower, so none will come (without bounds every source gets its tuple; see
        :mod:`.features`, ``.bound``). Deleting them at the end or as each rank is released
        deletes the same: nothing at a later rank reads them, or what their cascade takes."""
        f = self.program.features
        for pred in stratum.preds:
            source = f.suppress.get(pred)
            if source is None or pred not in f.bound:
                continue
            width = len(self.program.schemas[source])
            have = self.full[pred].index(tuple(range(width)))
            dead = [s for s in self.full[source].rows if s not in have]
            if dead:
                self._delete(source, dead)

    def _iterated(self, delta: Mapping[str, Relation]) -> None:
        """Count a fixpoint iteration whose new tuples are ``delta``, within the program's
        budget (:mod:`.budget`: a program without a fixpoint stops with an error)."""
        self.stats.iterations += 1
        self.program.budget.step(self.stats.iterations, {p: len(d) for p, d in delta.items()},
                                 lambda p: len(self.full[p]), self.program.rules)

    # -- inserting: aggregates, selection, bounds, suppression ---------------------------------
    def _release(self, pred: str, rows: list[tuple]) -> Relation:
        """Insert candidate tuples of ``pred``; returns the ones that were new."""
        prog, stats = self.program, self.stats
        stats.produced[pred] = stats.produced.get(pred, 0) + len(rows)
        if pred in self.counts:
            counts = self.counts[pred]
            for r in rows:
                counts[r] = counts.get(r, 0) + 1
        agg = prog.aggregates.get(pred)
        if agg is not None:
            rows = _aggregate(rows, *agg)
        source = prog.features.suppress.get(pred)
        if source is not None:
            src = self.full[source].rows
            width = len(prog.schemas[source])
            rows = [r for r in rows if r[:width] in src]  # sources deleted meanwhile
        sel = prog.features.aggsel.get(pred)
        if sel is not None:
            kept = self._select(sel, rows)
            if source is not None:
                self._suppress(pred, source, rows, kept)
            rows = kept
        new = self.full[pred].add(rows)
        stats.derived[pred] = stats.derived.get(pred, 0) + len(new)
        return Relation(new)

    def _select(self, sel: AggSel, rows: list[tuple]) -> list[tuple]:
        """Aggregate selection: per group, the tuples with the best value, if that value beats
        the group's current aggregate and (with ``.bound``) does not exceed its bound."""
        better = operator.lt if sel.func == "min" else operator.gt
        best: dict[tuple, Any] = {}
        val = sel.value
        groups = list(map(key_of(sel.key), rows))
        for g, r in zip(groups, rows, strict=True):
            x = best.get(g, best)  # the dict itself: no value yet
            if x is best or better(r[val], x):
                best[g] = r[val]
        cols = tuple(range(len(sel.key)))
        current = self.full[sel.agg].index(cols)
        bound_pred = self.program.features.bound.get(sel.target)
        width = len(self.program.schemas[bound_pred]) - 1 if bound_pred else 0
        bounds = self.full[bound_pred].index(tuple(range(width))) if bound_pred else {}
        kept = []
        for g, r in zip(groups, rows, strict=True):
            v = r[val]
            if v != best[g]:
                continue
            cur = current.get(g)
            if cur and not better(v, next(iter(cur))[-1]):
                continue
            b = bounds.get(g[:width]) if bounds else None
            if b and better(min(t[-1] for t in b), v):
                continue
            kept.append(r)
        return kept

    def _suppress(self, pred: str, source: str, rows: list[tuple], kept: list[tuple]) -> None:
        """Tuple source suppression: delete the source of every rejected tuple that has no
        other tuple in ``pred``."""
        width = len(self.program.schemas[source])
        alive = {r[:width] for r in kept}
        have = self.full[pred].index(tuple(range(width)))
        dead = {r[:width] for r in rows} - alive
        dead = [s for s in dead if s not in have]
        if dead:
            self._delete(source, dead)

    # -- deleting: cascades through the rules ----------------------------------------------------
    def _delete(self, pred: str, rows: Iterable[tuple]) -> None:
        """Delete tuples and what was derived from them: a tuple that embeds a deleted source
        goes with it, a counted tuple (``.refcount``) loses one count per derivation and goes
        at zero, an aggregate group is recomputed from the inputs left. Any other derived
        tuple stays (it may have other derivations, and nothing counts them)."""
        prog, full = self.program, self.full
        work: deque[tuple[str, list[tuple]]] = deque([(pred, list(rows))])
        while work:
            p, rs = work.popleft()
            rel = full[p]
            rs = [r for r in set(rs) if r in rel.rows]
            if not rs:
                continue
            gone = {p: Relation(rs)}
            derived: dict[str, list[tuple]] = {}
            for v in prog.triggers.get(p, ()):
                h = v.head_pred
                if v.embeds is not None and h not in self.counts and h not in prog.aggregates:
                    idx = full[h].index(v.embeds)  # the head tuples containing a deleted one
                    derived.setdefault(h, []).extend(t for r in rs for t in idx.get(r, ()))
                elif h in self.counts or h in prog.aggregates:
                    derived.setdefault(h, []).extend(self.run_variant(v, full, gone))
            rel.remove(rs)
            self.stats.deleted[p] = self.stats.deleted.get(p, 0) + len(rs)
            for head, hs in derived.items():
                if head in self.counts:
                    counts, dead = self.counts[head], []
                    for h in hs:
                        counts[h] -= 1
                        if counts[h] == 0:
                            del counts[h]
                            dead.append(h)
                    work.append((head, dead))
                elif head in prog.aggregates:
                    work.append((head, self._regroup(head, hs)))
                else:
                    work.append((head, hs))

    def _regroup(self, pred: str, raw: list[tuple]) -> list[tuple]:
        """The tuples of aggregate groups whose inputs lost tuples and that are now empty.
        (Pruning removes whole groups or tuples that never carried the group's value; a group
        left with a different value would need re-derivation, which pruning never asks for.)"""
        pos, func = self.program.aggregates[pred]
        key_cols = tuple(i for i in range(len(self.program.schemas[pred])) if i != pos)
        idx = self.full[pred].index(key_cols)
        out = []
        for g in {tuple(r[c] for c in key_cols) for r in raw}:
            left = [r[pos] for r in self._group_inputs(pred, g)]
            for t in idx.get(g, ()):
                if not left:
                    out.append(t)
                elif (min if func == "min" else max)(left) != t[pos]:
                    raise ReoptError(
                        f"{pred}{t}: pruning deleted the inputs that carried this aggregate's "
                        "value; an aggregate over a relation that suppression or reference "
                        "counting deletes from is not supported (aggregate a relation pruning "
                        "keeps, or use --pruning evita)")
        return out

    def _group_inputs(self, pred: str, group: tuple) -> list[tuple]:
        """The input tuples of one aggregate group (aggregates over a single relation)."""
        out = []
        for inp in self._agg_inputs[pred]:
            hits = self.full[inp.target].index(inp.key).get(group, ())
            out.extend((*group, r[inp.value]) for r in hits)
        return out


def _aggregate(rows: list[tuple], pos: int, func: str) -> list[tuple]:
    """Group by every column but ``pos`` and keep the min/max of ``pos``."""
    better = operator.lt if func == "min" else operator.gt
    groups: dict[tuple, Any] = {}
    for r in rows:
        key = r[:pos] + r[pos + 1:]
        x = r[pos]
        if key not in groups or better(x, groups[key]):
            groups[key] = x
    return [k[:pos] + (x,) + k[pos:] for k, x in groups.items()]
