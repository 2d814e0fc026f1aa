"""Reading a few keys of a relation derived when read (``.ondemand``) without deriving it.

A reader after the tuples of a handful of groups — the plan tree, which reads the selected
plans of its own OR nodes only — would make a stale on-demand relation derive itself whole
(:mod:`.ondemand`), and then every later update follow it (it was read since the step
before). When the relation's stratum allows it, :func:`reader` derives instead only the
tuples of the keys asked for, each from the tuples holding its key in one atom per rule
(the atom :func:`~reopt.evaluator.later._key_source` finds, as a grouped later stratum's
re-derivation reads), and the relation stays stale: an update does not follow it.

Exactness: in a stratum that is not recursive, aggregates nothing and no pruning directive
acts on, a tuple is derived exactly when some rule's body holds for some binding; a rule's
head key is bound by the one atom of the rule that holds all of it (read once in the body),
so the bindings giving key ``k`` are exactly those extending that atom's tuples with key
``k``, evaluated against the same relations (earlier strata, final) and the same statistics
(those of the state that left the relation stale). So the tuples derived for ``k`` are the
relation's tuples with key ``k``, whichever way it would be derived.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from reopt.evaluator.compiler import CompiledProgram, Variant
from reopt.evaluator.later import _key_source, pruned
from reopt.evaluator.ondemand import Stale
from reopt.evaluator.python_engine import PythonEngine, Relation

Sources = tuple[tuple[Variant, str, tuple[int, ...]], ...]
"""Per rule deriving the relation: (the variant reading one atom's tuples as its delta, that
atom's relation, its columns holding the head's key)."""


def reader(rel: Relation, pred: str, width: int
           ) -> Callable[[tuple], Collection[tuple]]:
    """Key (the first ``width`` columns) → the tuples of ``rel`` (relation ``pred``) with
    that key. A relation that is not stale, or whose stratum a key cannot be derived alone
    in (:func:`key_sources`), is read through its index (a stale one derives itself first);
    a stale one that can is derived key by key, and stays stale — also when the last update
    followed it (:attr:`.ondemand.Pending.ready`): taking those tuples would be a read, and
    the next update would follow it again for a reader of a few keys."""
    sources = key_sources(rel.pending.program, pred, width) if isinstance(rel, Stale) \
        else None
    if sources is None:
        by_key = rel.index(tuple(range(width)))
        return lambda key: by_key.get(key, ())
    pending = rel.pending
    engine = PythonEngine(pending.program, pending.ctx)
    rels = pending.mapping(pred)

    def derive(key: tuple) -> Collection[tuple]:
        out: set[tuple] = set()
        for v, src, cols in sources:
            rows = rels[src].index(cols).get(key)
            if rows:
                out.update(engine.run_variant(v, rels, {src: Relation(rows)}))
        return out

    return derive


def key_sources(program: CompiledProgram, pred: str, width: int) -> Sources | None:
    """How to derive the tuples of ``pred`` with one key (its first ``width`` columns) alone,
    or None if its stratum does not allow it: an on-demand stratum, not recursive, without
    a schedule or aggregates, no pruning directive acting on it, and every rule deriving
    ``pred`` with an atom read once that holds the head's key (module doc). Read once per
    program object (:meth:`CompiledProgram.memoized`)."""
    return program.memoized(("key sources", pred, width),
                            lambda: _key_sources(program, pred, width))


def _key_sources(program: CompiledProgram, pred: str, width: int) -> Sources | None:
    stratum = next(s for s in program.strata if pred in s.preds)
    acted = pruned(program)
    if (not stratum.ondemand or stratum.recursive or stratum.schedule is not None
            or any(p in program.aggregates or p in acted for p in stratum.preds)):
        return None
    out = []
    for rule in program.rules:
        if rule.head.pred == pred:
            src = _key_source(program, rule, width)
            if src is None:
                return None
            out.append(src)
    return tuple(out)


__all__ = ["key_sources", "reader"]
