"""Incremental maintenance on the ``spark`` engine: the twin of :mod:`.maintenance`.

The session keeps the same two layers as the ``python`` engine's :class:`MaintainedEngine`,
as DataFrames: the **complete layer** (the strata up to the maintained one, evaluated with
aggregate selection only) and the **live layer** (suppression and reference counting applied,
then the later strata). The algorithm is the python engine's, set at a time:

* :meth:`SparkMaintainedEngine.update` finds the stale groups (OR nodes) inside Spark — a
  ``mapInPandas`` over the groups' keys calls the costmodel's
  :func:`~reopt.costmodel.builtins.stale_keys` with the old and the new contexts (both
  broadcast) and computes each group's rank;
* groups are re-derived **one rank at a time** (children before parents), all the groups of a
  rank in one set of DataFrame operations: their source tuples (a semi-join), the rules of the
  selected relation on them (the compiled variants, :meth:`SparkEngine.run_group`), the best
  per group (a window), what went and what came against the old tuples; only groups whose
  selected tuples changed reach their parents (the compiled parent variants, cut after the
  group key is bound) — lazy propagation. One Spark job per rank counts the changes and
  finds the next rank;
* the live layer follows the changed groups, all at once (:meth:`_live_update`): tuples no
  longer selected leave and their sources are deleted with the engine's deletion cascade
  (reference counts fall, subplans go); the sources of newly selected tuples are revived from
  the complete layer one plan-tree level per job (counts rise, subplans come back); the later
  strata are derived again. The initial live layer is built the same way, by revival from
  the queries' roots (for ``all`` it touches only the optimal plan trees);
* with ``.bound``, the seed strata are evaluated again on update, the bounds (a few tuples)
  checked on the driver, and the live layer kept within them as the python engine keeps it.

Only counts and minimum ranks reach the driver, as in a from-scratch evaluation; the relations
are those of a from-scratch evaluation (tests compare them with the python engine's after
every step).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from reopt.costmodel.builtins import stale_keys
from reopt.evaluator.compiler import CompiledProgram, Variant
from reopt.evaluator.maintenance import UpdateStats, layers, maintenance_plan
from reopt.evaluator.python_engine import RunStats
from reopt.evaluator.spark_engine import (
    SPARK_TYPES,
    SQL_TYPES,
    SparkEngine,
    SparkRelation,
    _context,
    _fresh,
    _group_agg,
    _ident,
    _join,
    _lookup,
    _sel,
    _union,
)


def _keyed_batches(new_bc, new_token: str, old_bc, old_token: str | None, rank_fn,
                   names: tuple[str, ...], batches: Iterator[pd.DataFrame]):
    """Per batch of group keys: the stale ones (when old contexts are given) with their rank."""
    new = _context(new_bc, new_token)
    old = _context(old_bc, old_token) if old_token is not None else None
    for batch in batches:
        keys = list(zip(*(batch[n].tolist() for n in names), strict=True)) if len(batch) else []
        if old is not None:
            stale = stale_keys(old, new, keys)
            keys = [k for k in keys if k in stale]
        ranks = [rank_fn(new, *k)[0][0] for k in keys]
        out = pd.DataFrame({n: [k[i] for k in keys] for i, n in enumerate(names)})
        for n in names:
            out[n] = out[n].astype(batch[n].dtype) if len(keys) else batch[n].iloc[:0]
        out["_rank"] = pd.Series(ranks, dtype="int64")
        yield out


_UNKNOWN = 1 << 50
"""The size of a relation changed without counting (counted at the end of the step): never
0, so no variant reading it is skipped as empty, whatever a cascade subtracts."""


class SparkMaintainedEngine(SparkEngine):
    """The ``spark`` engine keeping its complete layer between evaluations so that
    :meth:`update` follows a change of statistics incrementally."""

    def __init__(self, compiled: CompiledProgram, ctx: dict[int, Any],
                 spark: SparkSession | None = None):
        super().__init__(compiled, ctx, spark)
        self.plan = maintenance_plan(compiled)
        self.live_program = compiled
        shape = layers(compiled, self.plan)
        self.complete_program = shape.complete_program
        st = compiled.strata[self.plan.stratum]
        assert st.schedule is not None
        self._sel = compiled.features.aggsel.get(self.plan.target)
        self._rank_fn = compiled.builtins[st.schedule.rank].fn
        self._layer, self._post = shape.layer, shape.post
        self._kept, self._seeds = shape.kept, shape.seeds
        self._suppressing, self._embedded = shape.suppressing, shape.embedded
        self._alternatives = shape.alternatives
        self._seeds_strata = [compiled.strata[i] for i in self.plan.reseed]
        self._caps: dict[tuple, Any] = {}
        """The bounds of the maintained relation per bound key (see _bound_caps)."""
        self._caps_df: DataFrame | None = None
        target = self.plan.target
        self._key_cols = self.columns[target][:self.plan.key]
        self._key_schema = T.StructType(
            [T.StructField(n, SPARK_TYPES[t]) for n, t in
             zip(self._key_cols, compiled.schemas[target], strict=False)]
            + [T.StructField("_rank", T.LongType())])

    # -- from scratch ---------------------------------------------------------------------------
    def evaluate(self, inputs: Mapping[str, Any]) -> tuple[dict[str, SparkRelation], RunStats]:
        """The initial evaluation: the complete layer, then the live layer. The contexts stay
        broadcast until the next update replaces them."""
        t0 = time.perf_counter()
        self.program = self.complete_program
        self.start(inputs)
        for stratum in self.program.strata[:self.plan.stratum + 1]:
            self.run_stratum(stratum)
        self.complete, self.complete_size = dict(self.full), dict(self.size)
        self._set_caps()
        self._live()
        self.stats.held = dict(self.size)
        self.stats.seconds = time.perf_counter() - t0
        return self.relations(), self.stats

    def _live(self) -> None:
        """The live layer from the complete one (see :meth:`MaintainedEngine._live`)."""
        prog = self.program = self.live_program
        counted = bool(prog.features.refcount) and bool(prog.features.suppress)
        self.full, self.size = dict(self.complete), dict(self.complete_size)
        self._old, self._unknown = {}, set()
        for p in self._post | (self._layer - self._kept if counted else set()):
            self.full[p], self.size[p] = self._frame(p, []), 0
        if counted:
            self.counts = {g: _sel(self._frame(g, []), "*", f"1L AS {self._cnt[g]}")
                           for g in prog.features.refcount}
            work: dict[str, list[DataFrame]] = {}
            for p in self._seeds:
                self._spread(p, self.full[p], work)
            self._revive_all(work)
        else:
            self._count_and_suppress()
        self._post_strata()

    def _post_strata(self) -> None:
        """The strata after the maintained one, from the live layer; then the layer is kept
        (relations, sizes, reference counts) for the next update."""
        for stratum in self.program.strata[self.plan.stratum + 1:]:
            self.run_stratum(stratum)
        self._recount(self.full, self.size, *self._layer)
        self.live, self.live_size, self.live_counts = self.full, self.size, self.counts

    def _live_update(self, removed: list[DataFrame], added: list[DataFrame]) -> None:
        """Apply the complete layer's changes to the live layer (see
        :meth:`MaintainedEngine._live_update`), all changed groups at once: tuples no longer
        selected leave; their sources, unless still selected, are deleted with the deletion
        cascade (reference counts fall, subplans go); the sources of newly selected tuples
        are revived from the complete layer (counts rise, subplans come back); newly
        selected tuples whose source is live join. Then the later strata, from scratch."""
        prog = self.program = self.live_program
        self.full, self.size, self.counts = dict(self.live), dict(self.live_size), \
            dict(self.live_counts)
        self._old, self._unknown = {}, set()
        for p in self._post:
            self.full[p], self.size[p] = self._frame(p, []), 0
        for st in self._seeds_strata:  # evaluated again in the complete layer (update)
            for p in st.preds:
                self.full[p], self.size[p] = self.complete[p], self.complete_size[p]
        if not removed:  # nothing was stale
            self._post_strata()
            return
        target = self.plan.target
        names = self.columns[target]
        gone, came = _union(removed), self._within(_union(added))
        live = self.full
        live[target] = _join(live[target], gone, names, "left_anti")
        self.size[target] = _UNKNOWN
        source = prog.features.suppress.get(target)
        if source is not None:
            cols = self.columns[source]
            lead = names[:len(cols)]

            def src(df: DataFrame) -> DataFrame:
                return _sel(df, *[f"{_ident(c)} AS {_ident(n)}"
                                  for c, n in zip(lead, cols, strict=True)])

            dead = _join(src(gone).distinct(), src(came), cols, "left_anti")
            dead = _join(_join(dead, src(self._within(self.complete[target])), cols,
                               "left_anti"), live[source], cols, "left_semi")
            self._delete(source, dead)
            self._revive_all({source: [_join(src(came).distinct(), live[source], cols,
                                             "left_anti")]})
            came = self._sourced(target, source, came)
        live[target] = _union([live[target], _join(came, live[target], names, "left_anti")]) \
            .coalesce(1).localCheckpoint(eager=False)
        self._later.append(live[target])
        for agg in self.plan.aggregates:
            self._set_aggregate(live, self.size, agg)
        self._post_strata()

    def _count_and_suppress(self) -> None:
        prog = self.program
        target = self.plan.target
        if self._caps_df is not None:  # the selected tuples above their bound go
            rows = self.full[target]
            self._delete(target, _join(rows, self._within(rows), self.columns[target],
                                       "left_anti"))
        self.counts = {}
        for g in prog.features.refcount:
            ones = [self.full[g] if g in prog.inputs else None]
            ones += [self.run_group([v], self.full, {}, {}) for s in prog.strata
                     for v in s.base if v.head_pred == g]
            frames = [f for f in ones if f is not None] or [self._frame(g, [])]
            n = _ident(self._cnt[g])
            self.counts[g] = (_group_agg(_sel(_union(frames), "*", f"1L AS {n}").coalesce(1),
                                         self.columns[g], f"sum({n}) AS {n}")
                              .localCheckpoint(eager=False))
            self._later.append(self.counts[g])
        for pruned, source in prog.features.suppress.items():
            lead = self.columns[source]
            self._delete(source, _join(self.full[source], self._renamed(pruned, lead), lead,
                                       "left_anti"))

    # -- revival, one generation at a time ------------------------------------------------
    def _revive_all(self, work: dict[str, list[DataFrame]]) -> None:
        """Put complete-layer tuples into the live layer with what they support (see
        :meth:`MaintainedEngine._revive_all`), one *pass* at a time: a pass visits the
        relations in stratum order, adds each one's supported candidates and queues what
        they support — in this same pass for relations later in the order, in the next
        pass for the others — so a pass follows a plan tree down one level. One job per
        pass counts what was added and what the next pass has to do."""
        place = {p: i for i, p in enumerate(self._order)}
        while work:
            added: list[tuple[str, DataFrame]] = []
            nxt: dict[str, list[DataFrame]] = {}
            for i, p in enumerate(self._order):
                if p not in work:
                    continue
                cols = self.columns[p]
                cand = _union(work.pop(p)).coalesce(1).distinct()
                cand = self._supported(p, _join(cand, self.full[p], cols, "left_anti"))
                cand = cand.localCheckpoint(eager=False)
                self._later.append(cand)
                self.full[p] = _union([self.full[p], cand]).coalesce(1) \
                    .localCheckpoint(eager=False)
                self._later.append(self.full[p])
                queued: dict[str, list[DataFrame]] = {}
                self._spread(p, cand, queued)
                for h, frames in queued.items():
                    (work if place[h] > i else nxt).setdefault(h, []).extend(frames)
                added.append((p, cand))
            heads = list(nxt)
            got = self._measure([(df, None) for _, df in added]
                                + [(_union(nxt[h]), None) for h in heads] + self._take_later())
            for (p, _), n in zip(added, got, strict=False):
                self.size[p] += int(n)
            counted = got[len(added):len(added) + len(heads)]
            work = {h: nxt[h] for h, n in zip(heads, counted, strict=True) if n}
        for agg in self.plan.aggregates:
            self._set_aggregate(self.full, self.size, agg)

    def _spread(self, p: str, rows: DataFrame, work: dict[str, list[DataFrame]]) -> None:
        """Queue what the newly live tuples ``rows`` of ``p`` support (reference counts rise;
        a count reaching 1 queues its tuple)."""
        prog = self.program
        for v in prog.triggers.get(p, ()):
            h = v.head_pred
            if h in self._post or h in prog.aggregates:
                continue  # aggregates: recomputed when the revival is done
            if h in self.counts:
                derived = self.run_group([v], self.full, {p: rows}, self.full)
                if derived is None:
                    continue
                work.setdefault(h, []).append(self._count_up(h, derived))
            elif v.embeds is not None:
                keys = [self.columns[h][i] for i in v.embeds]
                hit = _sel(rows, *[f"{_ident(c)} AS {_ident(k)}" for c, k in
                                   zip(self.columns[p], keys, strict=True)])
                work.setdefault(h, []).append(_join(self.complete[h], hit, keys, "left_semi"))

    def _supported(self, p: str, cand: DataFrame) -> DataFrame:
        """The candidates that belong in the live layer given what is live now (see
        :meth:`MaintainedEngine._supported`)."""
        cols = self.columns[p]
        if p in self.counts:
            live = _sel(self.counts[p].filter(f"{_ident(self._cnt[p])} > 0"), *map(_ident, cols))
            return _join(cand, live, cols, "left_semi")
        if p == self.plan.target:
            cand = self._within(cand)
        pruned = self._suppressing.get(p)
        if pruned is not None:
            kept = _sel(self._within(self.complete[pruned]) if pruned == self.plan.target
                        else self.complete[pruned],
                        *[f"{_ident(c)} AS {_ident(n)}"
                          for c, n in zip(self.columns[pruned], cols, strict=False)])
            cand = _join(cand, kept, cols, "left_semi")
        rules = self._embedded.get(p)
        if not rules:
            return cand
        ok = []
        for atoms in rules:
            df = cand
            for src, at in atoms:
                on = [cols[i] for i in at]
                have = _sel(self.full[src], *[f"{_ident(c)} AS {_ident(n)}" for c, n in
                                              zip(self.columns[src], on, strict=True)])
                df = _join(df, have, on, "left_semi")
            ok.append(df)
        return _union(ok).coalesce(1).distinct()

    def _set_aggregate(self, rels: dict[str, DataFrame], sizes: dict[str, int],
                       agg: str, groups: DataFrame | None = None) -> None:
        """Recompute an aggregate over the maintained relation from ``rels``' inputs: every
        group, or those of ``groups`` (key columns)."""
        pos, func = self.live_program.aggregates[agg]
        names = self.columns[agg]
        value = _ident(self.columns[self.plan.target][self.plan.aggregates[agg]])
        keys = self._key_cols
        src = rels[self.plan.target]
        if groups is not None:
            src = _join(src, groups, keys, "left_semi")
        x = _fresh("_x", keys)
        got = _group_agg(src.coalesce(1), keys, f"{func}({value}) AS {_ident(x)}")
        order = [*keys[:pos], x, *keys[pos:]]
        got = _sel(got, *[f"{_ident(c)} AS {_ident(n)}"
                          for c, n in zip(order, names, strict=True)])
        if groups is not None:
            ren = _sel(groups, *[f"{_ident(k)} AS {_ident(n)}" for k, n in
                                 zip(keys, names[:pos] + names[pos + 1:], strict=True)])
            kept = _join(rels[agg], ren, names[:pos] + names[pos + 1:], "left_anti")
            got = _union([kept, got])
        rels[agg] = got.coalesce(1).localCheckpoint(eager=False)
        self._later.append(rels[agg])
        sizes[agg] = -1  # counted by the caller's next job

    # -- bounds (see MaintainedEngine._bound_caps, _within) ---------------------------
    def _set_caps(self) -> None:
        """The bounds of the maintained relation from the complete layer's bound relation (a
        few tuples: one job), checked against the queries' optima there: none at all when
        one would leave a root without its plans (:meth:`MaintainedEngine._bound_caps`)."""
        prog, target = self.live_program, self.plan.target
        bound = prog.features.bound.get(target)
        self._caps, self._caps_df = {}, None
        if bound is None:
            return
        sel = prog.features.aggsel[target]
        pos = prog.aggregates[sel.agg][0]
        caps: dict[tuple, Any] = {}
        for r in self.complete[bound].collect():
            k, c = tuple(r[:-1]), r[-1]
            caps[k] = c if k not in caps else min(caps[k], c)
        width = len(prog.schemas[bound]) - 1
        names = self.columns[sel.agg]
        group = names[:pos] + names[pos + 1:]
        for inp in prog.inputs:
            if len(prog.schemas[inp]) != len(group):
                continue
            roots = {tuple(r) for r in self.complete[inp].collect()}
            ren = _sel(self.complete[inp], *[f"{_ident(c)} AS {_ident(n)}" for c, n in
                                              zip(self.columns[inp], group, strict=True)])
            best = {tuple(r[:pos]) + tuple(r[pos + 1:]): r[pos] for r in
                    _join(self.complete[sel.agg], ren, group, "left_semi").collect()}
            for root in roots:
                v = best.get(root)
                c = caps.get(root[:width])
                if v is None or (c is not None and v > c):
                    return  # a bound below an optimum: no bounds (see the docstring)
        self._caps = caps
        lead = [self.columns[target][k] for k in sel.key[:width]]
        rows = [(*k, c) for k, c in caps.items()]
        self._caps_df = _sel(self._frame(bound, rows),
                             *[f"{_ident(c)} AS {_ident(n)}" for c, n in
                               zip(self.columns[bound], [*lead, "_cap"], strict=True)])

    def _within(self, rows: DataFrame, caps: DataFrame | None = None) -> DataFrame:
        """The tuples of the maintained relation in ``rows`` that do not exceed their bound
        (``caps``, default the current ones): all of them without bounds."""
        caps = self._caps_df if caps is None else caps
        if caps is None:
            return rows
        target = self.plan.target
        sel = self.live_program.features.aggsel[target]
        lead = caps.columns[:-1]
        v = _ident(self.columns[target][sel.value])
        return (_lookup(rows, caps, lead, "_cap")
                .filter(f"_cap IS NULL OR NOT ({v} > _cap)").drop("_cap"))

    def _crossing(self, before: DataFrame | None, removed: list[DataFrame],
                  added: list[DataFrame]) -> None:
        """Queue as changes the groups whose selected tuples the move of the bounds takes
        into or out of the live layer (the Spark complete layer stays unbounded)."""
        target, keys = self.plan.target, self._key_cols
        rows = self.complete[target]
        was = _sel(self._within(rows, before) if before is not None else rows,
                   *map(_ident, keys)).distinct()
        now = _sel(self._within(rows), *map(_ident, keys)).distinct()
        moved = _union([_join(was, now, keys, "left_anti"), _join(now, was, keys, "left_anti")])
        removed.append(_join(self.live[target], moved, keys, "left_semi"))
        added.append(_join(rows, moved, keys, "left_semi"))

    # -- incremental ---------------------------------------------------------------------------
    def update(self, spaces: Mapping[int, Any]) -> tuple[dict[str, SparkRelation], UpdateStats]:
        """Replace the queries' plan spaces (new statistics) and bring every relation to what
        a from-scratch evaluation under them gives."""
        t0 = time.perf_counter()
        old_bc, old_token = self._ctx_bc, self._token
        self.ctx.clear()  # the compiled variants hold this very mapping
        self.ctx.update(spaces)
        self.broadcast()
        self.stats = RunStats()
        up = UpdateStats()
        plan = self.plan
        self.program, self.full, self.size = self.complete_program, self.complete, \
            self.complete_size
        self._old, self._unknown, self._later = {}, set(), []
        for st in self._seeds_strata:  # seed bounds under the new statistics
            for p in st.preds:
                self.full[p], self.size[p] = self._frame(p, []), 0
            self.run_stratum(st)
        keys = self._key_cols
        groups = _sel(self.complete[plan.target], *map(_ident, keys)).distinct()
        queue = self._ranked(groups, old_bc, old_token).localCheckpoint(eager=False)
        queued = queue
        n_stale, low = self._measure([(queue, None), (queue, "_rank")])
        up.stale = int(n_stale)
        removed: list[DataFrame] = []
        added: list[DataFrame] = []
        while low is not None:
            level = queue.filter(f"_rank = {int(low)}").drop("_rank")
            queue = queue.filter(f"_rank != {int(low)}")
            gone, came, n_derived = self._rederive(level)
            changed = _union([gone, came])
            parents = [self._parent_keys(v, changed) for v in plan.parents]
            fresh = _join(_union(parents).distinct(), queued.drop("_rank"), keys, "left_anti") \
                if parents else None
            if fresh is not None:
                fresh = self._ranked(fresh, None, None)
                queue = _union([queue, fresh])
                queued = _union([queued, fresh])
            queue = queue.coalesce(1).localCheckpoint(eager=False)
            queued = queued.coalesce(1).localCheckpoint(eager=False)
            n_level, n_changed, n_cands, low, *_ = self._measure(
                [(level, None), (_sel(changed, *map(_ident, keys)).distinct(), None),
                 (n_derived, None),
                 (queue, "_rank"), (queued, None)] + self._take_later())
            up.rederived += int(n_level)
            up.changed += int(n_changed)
            up.derived[plan.target] = up.derived.get(plan.target, 0) + int(n_cands)
            removed.append(gone)
            added.append(came)
        self._recount(self.complete, self.complete_size, plan.target)
        before = self._caps_df
        self._set_caps()
        if before is not None or self._caps_df is not None:
            self._crossing(before, removed, added)
        self._live_update(removed, added)
        old_bc.unpersist()
        self.stats.held = dict(self.size)
        up.seconds = time.perf_counter() - t0
        return self.relations(), up

    def _ranked(self, keys: DataFrame, old_bc, old_token: str | None) -> DataFrame:
        """Group keys with their rank; only the stale ones when old contexts are given."""
        fn = functools.partial(_keyed_batches, self._ctx_bc, self._token, old_bc, old_token,
                               self._rank_fn, tuple(self._key_cols))
        return keys.coalesce(1).mapInPandas(fn, self._key_schema)

    def _rederive(self, level: DataFrame) -> tuple[DataFrame, DataFrame, DataFrame]:
        """Re-derive the groups of ``level`` (key columns) in the complete layer from their
        source tuples; returns the selected tuples that went, those that came (both
        checkpointed) and the candidates derived (to count)."""
        plan, full = self.plan, self.complete
        target, keys = plan.target, self._key_cols
        names = self.columns[target]
        cands = []
        for source, at, v in plan.sources:
            on = [self.columns[source][i] for i in at]
            hit = _sel(level, *[f"{_ident(k)} AS {_ident(c)}"
                                for k, c in zip(keys, on, strict=True)])
            rows = _join(full[source], hit, on, "left_semi")
            df = self.run_group([v], full, {source: rows}, full)
            if df is not None:
                cands.append(df)
        derived = _union(cands).localCheckpoint(eager=False) if cands else \
            self._frame(target, [])
        if cands:
            self._later.append(derived)
        new = derived.coalesce(1).distinct()
        sel = self._sel
        if sel is not None:
            v = _ident(names[sel.value])
            over = ", ".join(_ident(names[c]) for c in sel.key)
            best = _fresh("_best", names)
            new = (_sel(new, "*", f"{sel.func}({v}) OVER (PARTITION BY {over}) AS {best}")
                   .filter(f"{v} = {best}").drop(best))
        new = new.localCheckpoint(eager=False)
        self._later.append(new)
        old = _join(full[target], level, keys, "left_semi")
        gone = _join(old, new, names, "left_anti").localCheckpoint(eager=False)
        came = _join(new, old, names, "left_anti").localCheckpoint(eager=False)
        self._later += [gone, came]
        full[target] = _union([_join(full[target], level, keys, "left_anti"), new]) \
            .coalesce(1).localCheckpoint(eager=False)
        self._later.append(full[target])
        for agg in plan.aggregates:
            self._set_aggregate(full, self.complete_size, agg, level)
        return gone, came, derived

    def _parent_keys(self, v: Variant, changed: DataFrame) -> DataFrame:
        """The group keys of the parents reading the ``changed`` tuples (a parent variant,
        cut once the key is bound)."""
        b = self._bindings(v, self.complete, {self.plan.target: changed}, self.complete,
                           len(v.ops))
        types = self.program.schemas[self.plan.target]
        return _sel(b.df, *[f"CAST({b.term(t)} AS {SQL_TYPES[ty]}) AS {_ident(n)}"
                            for t, n, ty in zip(v.head, self._key_cols, types,
                                                strict=False)])

    def _recount(self, rels: dict[str, DataFrame], sizes: dict[str, int],
                 *also: str) -> None:
        """Count the relations whose size is unknown (negative), and ``also`` (one job)."""
        stale = [p for p, n in sizes.items() if n < 0 or p in also]
        got = self._measure([(rels[p], None) for p in stale] + self._take_later())
        for p, n in zip(stale, got, strict=False):
            sizes[p] = int(n)

    # -- what an update touched ----------------------------------------------------------------
    def snapshot(self) -> dict[tuple[str, str], DataFrame]:
        """Both layers' frames (immutable, checkpointed: keeping them costs nothing), but
        for the relations derived when read, which ``updated`` leaves out on every engine
        (the python engine's updates leave them stale: :mod:`.ondemand`)."""
        out = {("complete", p): self.complete[p] for p in self._layer}
        lazy = self.program.ondemand
        for p in self.program.schemas:
            if p not in self.program.facts and p not in self.program.inputs and p not in lazy:
                out[("live", p)] = self.full[p]
        return out

    def changed_since(self, before: Mapping[tuple[str, str], DataFrame]
                      ) -> dict[int, dict[str, int]]:
        """As :meth:`MaintainedEngine.changed_since`, computed in Spark: per query, the OR
        nodes and AND nodes some of whose tuples changed (one job; only the counts per query
        reach the driver)."""
        key = self.plan.key
        width = len(self.program.schemas[self.plan.sources[0][0]])
        alternatives = self._alternatives
        tkey = self.program.schemas[self.plan.target]
        src = self.plan.sources[0][0]
        ors, ands = [], []
        for (layer, p), was in before.items():
            now = (self.complete if layer == "complete" else self.full)[p]
            cols = self.columns[p]
            if len(cols) < key:
                continue
            diff = _union([_join(was, now, cols, "left_anti"), _join(now, was, cols, "left_anti")])
            ors.append(_sel(diff, *[f"CAST({_ident(c)} AS {SQL_TYPES[t]}) AS _k{i}"
                                    for i, (c, t) in enumerate(zip(cols, tkey[:key],
                                                                   strict=False))]))
            if p in alternatives:
                st = self.program.schemas[src]
                ands.append(_sel(diff, *[f"CAST({_ident(c)} AS {SQL_TYPES[t]}) AS _k{i}"
                                         for i, (c, t) in enumerate(zip(cols[:width], st,
                                                                        strict=True))]))
        out = {q: {"or_nodes": 0, "and_nodes": 0} for q in self.ctx}
        parts = [(_union(f).distinct(), kind) for f, kind in ((ors, "or_nodes"),
                                                                (ands, "and_nodes")) if f]
        if not parts:
            return out
        rows = _union([_sel(df.groupBy("_k0").count(), "_k0", "`count`", f"'{kind}' AS k")
                       for df, kind in parts]).collect()
        for q, n, kind in rows:
            out.setdefault(int(q), {"or_nodes": 0, "and_nodes": 0})[kind] = int(n)
        return out
