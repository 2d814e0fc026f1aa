"""Intermediate join state and plan migration in the continuous-query executor
(:class:`reopt.stream.ContinuousQuery` with ``state="intermediate"``, :mod:`reopt.streamstate`).

Oracles: per micro-batch, as a multiset, the batch Spark SQL evaluation of the windowed join
over ALL tuples (``tests/test_stream.py``'s helper), across plan switches under both migration
strategies; every plan's kept state after every batch against a pandas join of the window
contents computed from scratch (the tuples the plan reads, the join conditions, the window
conditions, alive at the batch's end); the ownership rule against a brute-force statement of
"exactly one plan emits each result".
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_stream import (
    QUERY,
    batch_answer,
    brute_force,
    per_batch,
    self_join,
    stream_tuples,
    streams,
    write_streams,
)

from reopt.api import Optimizer
from reopt.costmodel.catalog import Catalog
from reopt.execute import answer_digest
from reopt.optimizers.exhaustive import all_plans
from reopt.stream import MIGRATIONS, ContinuousQuery, StreamError, plan_line
from reopt.streamgen import generate_stream
from reopt.streamlocal import EXECUTORS, make_query
from reopt.streamstate import Track, expire, retire

WINDOWS = {"p": 3.0, "a": 2.0, "b": 1.0}
""":data:`tests.test_stream.QUERY`'s windows."""


@pytest.fixture(scope="module")
def nexmark(tmp_path_factory, spark):
    """Six seconds of NEXMark-shaped streams, the query's two join orders and the oracle's
    answer per two-second window."""
    root = tmp_path_factory.mktemp("mig") / "nx"
    generate_stream("nexmark", root, seed=7, phases="2:keys=6;2:bids=80,keys=6;2:keys=3")
    catalog = str(root / "catalog.json")

    def plan(*deltas: str):
        o = Optimizer(QUERY, catalog, cost_model="rate", optimizer="topdown")
        step = o.optimize()
        for d in deltas:
            step = o.update(d)
        return o, step.plan

    opt, left_deep = plan()
    _, other = plan("rate persons *100")
    assert plan_line(left_deep) != plan_line(other)
    data = stream_tuples(root)
    oracle = batch_answer(spark, data)
    expected, sizes = per_batch(oracle)
    assert len(sizes) == 3
    return root, opt, left_deep, other, data, expected, sizes


def scratch_state(data: dict[str, pd.DataFrame], aliases: set[str], since: float,
                  end: float) -> Counter:
    """The join of ``aliases``' window contents after the batch ending at ``end`` from
    scratch: tuples with ``since <= ts < end``, the query's conditions among them, each
    within its window of the newest, all alive at ``end``; the multiset of their event
    times in alias order p, a, b."""
    tables = {"p": "persons", "a": "auctions", "b": "bids"}
    parts = {}
    for a in aliases:
        f = data[tables[a]]
        f = f[(f.ts >= since) & (f.ts < end) & (f.ts > end - WINDOWS[a])]
        if a == "b":
            f = f[f.price > 100]
        parts[a] = f.add_prefix(f"{a}_")
    if aliases == {"p", "a"}:
        j = parts["p"].merge(parts["a"], left_on="p_id", right_on="a_seller")
    elif aliases == {"a", "b"}:
        j = parts["a"].merge(parts["b"], left_on="a_id", right_on="b_auction")
    else:
        j = parts["p"].merge(parts["b"], how="cross")  # no predicate: a cross product
    order = [a for a in "pab" if a in aliases]
    newest = j[[f"{a}_ts" for a in order]].max(axis=1)
    for a in order:
        j = j[newest - j[f"{a}_ts"] < WINDOWS[a]]
    return Counter(tuple(round(float(r[f"{a}_ts"]), 3) for a in order)
                   for _, r in j.iterrows())


def kept_state(cq: ContinuousQuery, track: Track) -> dict[frozenset, Counter]:
    """Each state of ``track`` as the multiset of its rows' event times in alias order."""
    out = {}
    for rels, rows in track.states.items():
        cols = [f"_r{i}_ts" for i in sorted(rels)]
        out[rels] = Counter() if rows is None else Counter(
            tuple(round(float(v), 3) for v in r) for r in rows[cols].itertuples(index=False))
    return out


@pytest.mark.spark
@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("migration", ["moving", "parallel"])
def test_switches_under_each_migration_equal_batch_sql(spark, nexmark, migration, executor):
    """Plans switching after every batch, and once (after a batch of the other plan, the
    run stopped after the switch's batch): every window's results equal the oracle's, every
    plan's state equals the from-scratch join, and the old state is non-empty at each
    switch; on Spark and in process alike."""
    root, opt, left_deep, other, data, expected, sizes = nexmark
    aliases = list(opt.query.aliases)
    runs = {"every batch": (left_deep, other, left_deep), "once": (other, left_deep)}
    for name, order in runs.items():
        cq = make_query(executor, opt.query, opt.catalog, root, spark, batch_seconds=2,
                        state="intermediate", migration=migration)
        batches = []
        while len(batches) < len(order):
            b = cq.step(order[len(batches)])
            batches.append(b)
            assert len(b.rows) == sizes.get(b.index, 0), (name, b.index, b.plans)
            assert answer_digest(b.rows) == expected.get(b.index), (name, b.index)
            for track in cq.tracks:
                for rels, got in kept_state(cq, track).items():
                    want = scratch_state(data, {aliases[i] for i in rels}, track.since, b.end)
                    assert got == want, (name, b.index, rels, track.since)
        assert [b.migration for b in batches] == [None] + [migration] * (len(order) - 1)
        assert all(sum(b.join_state.values()) > 0 for b in batches), name  # never empty
        if migration == "parallel":  # the first plan runs on (its tuples live 3 s)
            assert [len(b.plans) for b in batches] == [1, 2, 3][:len(order)], name
        else:
            assert all(len(b.plans) == 1 for b in batches), name


def test_bad_state_or_migration_is_refused(tmp_path):
    root = tmp_path / "nx"
    generate_stream("nexmark", root, seconds=3)
    ok = Optimizer(str(root / "query.sql"), str(root / "catalog.json"), cost_model="rate",
                   optimizer="topdown")
    with pytest.raises(StreamError, match="unknown state 'all'"):
        ContinuousQuery(ok.query, ok.catalog, root, spark=None, state="all")
    with pytest.raises(StreamError, match="unknown migration 'copy'"):
        ContinuousQuery(ok.query, ok.catalog, root, spark=None, migration="copy")


MIGRATION_CASE = dict(
    data=streams(), windows=st.tuples(*[st.sampled_from([0.5, 1, 2, 3])] * 3),
    choices=st.lists(st.tuples(st.integers(0, 10 ** 6), st.sampled_from(MIGRATIONS)),
                     min_size=3, max_size=3))


@pytest.mark.spark
@settings(max_examples=1, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(**MIGRATION_CASE)
def test_any_plan_and_migration_per_batch_equals_brute_force(spark, tmp_path_factory, data,
                                                             windows, choices):
    """``tests/test_stream.py``'s self-join property with intermediate state: every batch
    under a plan drawn from all plan trees, every switch by a drawn migration; each batch's
    results against nested loops over all records."""
    check_plans_and_migrations("spark", spark, tmp_path_factory, data, windows, choices)


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(**MIGRATION_CASE)
def test_local_any_plan_and_migration_per_batch_equals_brute_force(tmp_path_factory, data,
                                                                   windows, choices):
    """The same property on the in-process executor (no Spark: many more cases)."""
    check_plans_and_migrations("local", None, tmp_path_factory, data, windows, choices)


def check_plans_and_migrations(executor, spark, tmp_path_factory, data, windows, choices):
    records, files = data
    root = tmp_path_factory.mktemp("propmig")
    write_streams(root, files)
    opt, w = self_join(windows)
    plans = list(all_plans(opt.space()))
    cq = make_query(executor, opt.query, opt.catalog, root, spark, batch_seconds=1,
                    state="intermediate")
    expected = brute_force(records, w, 1)

    def plan_for(last):
        pick, how = choices[0 if last is None else last.index + 1]
        return plans[pick % len(plans)], how

    seen = set()
    for b in cq.run(plan_for):
        got = Counter((int(k), round(xt, 3), round(yt, 3), round(zt, 3))
                      for k, xt, yt, zt in b.rows)
        want = Counter({(k, round(xt, 3), round(yt, 3), round(zt, 3)): n for
                        (k, xt, yt, zt), n in expected.get(b.index, Counter()).items()})
        assert got == want, (b.index, b.plans, b.migration)
        seen.add(b.index)
    assert set(expected) <= seen


# -- the bookkeeping, in pure pandas ----------------------------------------------------------
@settings(max_examples=200, deadline=None, derandomize=True)
@given(starts=st.lists(st.integers(1, 12), max_size=4, unique=True).map(sorted),
       window=st.sampled_from([0.5, 1.0, 2.0, 3.0]),
       times=st.lists(st.tuples(st.integers(0, 15_999), st.integers(0, 15_999)),
                      min_size=1, max_size=20),
       batch=st.sampled_from([1, 2]))
def test_every_result_has_one_owner_among_running_tracks(starts, window, times, batch):
    """Tracks started at ``starts`` (switches at batch starts; each reads tuples from its
    start), retired as the executor does after every batch: every result (two tuples within
    the window, emitted in the batch of its newest) is emitted by exactly one track running
    in that batch, and that track is the latest one started at or before the result's
    oldest tuple — one that has read all its tuples from its start, so its states hold the
    result's parts (a track retired too early, or a cut in the wrong place, fails this)."""
    from reopt.streamstate import owner

    ends = range(batch, 17, batch)
    tracks = [Track(-math.inf, -math.inf)]  # the plan field tags a track by its start
    started = [-math.inf]
    running: dict[int, list[Track]] = {}  # batch end -> the tracks that ran it
    for end in ends:
        if end - batch in starts:  # a switch at this batch's start
            tracks.append(Track(float(end - batch), float(end - batch)))
            started.append(float(end - batch))
        running[end] = list(tracks)
        tracks = retire(tracks, float(end), window)
    for x, y in times:
        tx, ty = x / 1000, y / 1000
        oldest = min(tx, ty)
        if max(tx, ty) - oldest >= window:
            continue  # not a result
        end = next(e for e in ends if e > max(tx, ty))
        ran = running[end]
        emitters = [t.plan for k, t in enumerate(ran) if t.since <= oldest
                    and (k + 1 == len(ran) or oldest < ran[k + 1].since)]
        right = max(s for s in started if s <= oldest and s < end)
        assert emitters == [right], (tx, ty, [(t.plan, t.since) for t in ran])
        assert ran[owner([t.since for t in ran], oldest)].plan == right


@given(rows=st.lists(st.tuples(st.floats(0, 10), st.floats(0, 10)), max_size=30),
       end=st.floats(0, 12), w=st.tuples(st.sampled_from([0.5, 1.0, 3.0]),
                                         st.sampled_from([0.5, 2.0])))
@settings(max_examples=100, deadline=None, derandomize=True)
def test_a_combination_expires_with_its_oldest_tuple(rows, end, w):
    frame = pd.DataFrame(rows, columns=["t0", "t1"], dtype=float)
    kept = expire(frame, {"t0": w[0], "t1": w[1]}, end)
    want = [r for r in rows if r[0] > end - w[0] - 1e-6 and r[1] > end - w[1] - 1e-6]
    assert sorted(map(tuple, kept.itertuples(index=False))) == sorted(want)


# -- --migration auto: the decision against hand-worked numbers -------------------------------
def three_streams() -> Optimizer:
    """x (10/s, 2 s), y (5/s, 4 s), z (2/s, 5 s); x.a = y.a (10 values), y.b = z.b (5)."""
    def table(rate: float, window: float, cols: dict[str, int]) -> dict:
        return {"rate": rate, "window": window,
                "columns": {**{c: {"distinct": d} for c, d in cols.items()}, "ts": {}}}

    catalog = Catalog.from_dict({"tables": {"s1": table(10, 2, {"a": 10}),
                                            "s2": table(5, 4, {"a": 10, "b": 5}),
                                            "s3": table(2, 5, {"b": 5})}})
    return Optimizer("SELECT x.a FROM s1 x, s2 y, s3 z WHERE x.a = y.a AND y.b = z.b",
                     catalog, cost_model="rate", optimizer="topdown")


def test_auto_switches_when_the_gain_exceeds_the_moving_cost():
    """By hand: windows hold n_x = 20, n_y = 20, n_z = 10, joins n_xy = n_yz = 40 results
    (n·n·sel), rates rate(E) = n_E·Σ1/W: xy 30, yz 18, xyz 80·0.95 = 76. Loads (shj
    3e-6 per input tuple, 5e-7 per result, scans 2e-7 per arrival): old (x⋈y)⋈z
    3.4e-6 + (15·3e-6 + 30·5e-7) + (32·3e-6 + 76·5e-7) = 1.974e-4, new x⋈(y⋈z)
    3.4e-6 + (7·3e-6 + 18·5e-7) + (28·3e-6 + 76·5e-7) = 1.554e-4. Moving builds y⋈z:
    (20 + 10)·3e-6 + 40·5e-7 = 1.1e-4; parallel runs the old plan 5 s more: 9.87e-4."""
    from reopt.migration import decide, parallel_seconds

    opt = three_streams()
    space = opt.space()
    plans = {plan_line(p): p for p in all_plans(space)}
    old, new = plans["shj(shj(x, y), z)"], plans["shj(x, shj(y, z))"]
    d = decide(space, old, new, interval=10, batch_seconds=1)
    assert d.old_load == pytest.approx(1.974e-4) and d.new_load == pytest.approx(1.554e-4)
    assert d.moving_cost == pytest.approx(1.1e-4)
    assert d.parallel_cost == pytest.approx(1.974e-4 * 5)
    assert d.gain == pytest.approx(4.2e-4) and d.switch and d.strategy == "moving"
    # hysteresis: the gain is 4.2e-4 / (1.974e-4 · 10) = 21% of the old plan's work over the
    # interval: enough for the default 10%, not for 25%
    assert not decide(space, old, new, interval=10, batch_seconds=1, min_gain=0.25).switch
    # over 2 s the gain (8.4e-5) does not pay for the move; 2 s batches: the old plan runs
    # 6 s (the 5 s window rounded up to whole batches)
    assert not decide(space, old, new, interval=2, batch_seconds=1).switch
    assert parallel_seconds(space, 2) == 6
    # the load of any plan is the cost the plan's own build reports
    assert all(decide(space, p, p, 1, 1).old_load == pytest.approx(p.cost)
               for p in plans.values())
    # a tree keeping the same relation sets moves nothing
    assert decide(space, old, plans["nlj(shj(x, y), z)"], 1, 1).moving_cost == 0


def test_auto_replanner_keeps_or_switches_as_decided():
    """The re-planning loop under ``auto``: a proposed plan that does not pay for its
    migration is not run (the old plan object comes back), one that does is run with the
    decision's strategy. The decision comes after the first batch (the first re-planning),
    priced over the interval ``every``; the schedule's next re-planning proposes the same
    plan again and decides nothing."""
    from reopt.migration import decide
    from reopt.stream import MicroBatch
    from reopt.streamcli import Replanner

    def batch(index: int, rates: dict[str, int]) -> MicroBatch:
        return MicroBatch(index, index, index + 1, "", rates, {}, [], [], 0.0)

    for every, switch in ((1, False), (1000, True)):
        opt = three_streams()
        r = Replanner(opt, every, "auto", batch_seconds=1)
        first = r(None)
        old_space_plan = first
        # z 2.5× faster: the optimizer proposes another tree after the first batch
        got = r(batch(0, {"s1": 10, "s2": 5, "s3": 5}))
        proposed = opt.optimize().plan
        assert plan_line(proposed) != plan_line(old_space_plan)
        d = decide(opt.space(), old_space_plan, proposed, every, 1)
        assert d.switch == switch and len(r.decisions) == 1
        if switch:
            assert (plan_line(got[0]), got[1]) == (plan_line(proposed), d.strategy)
        else:
            assert got is old_space_plan
        for k in range(1, every):
            r(batch(k, {"s1": 10, "s2": 5, "s3": 5}))
        assert len(r.decisions) == 1, r.log


def test_migration_needs_intermediate_state(tmp_path, capsys):
    from reopt.cli import main

    root = tmp_path / "nx"
    generate_stream("nexmark", root, seconds=3)
    assert main(["stream", QUERY, "--data", str(root), "--state", "windows",
                 "--migration", "parallel"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("reopt: ") and "needs --state intermediate" in err and "\n" not in err
    assert main(["stream", QUERY, "--data", str(root), "--max-state", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("reopt: ") and "--max-state" in err and "\n" not in err


# -- --max-state ----------------------------------------------------------------------------------
def test_max_state_runs_the_cheapest_plan_that_fits():
    """By hand: x, y 2/s over 5 s windows (10 tuples each), z 2/s over 1 s (2 tuples);
    x.a = y.a (10 values, sel 1/10), y.b = z.b (5, sel 1/5): x⋈y keeps 10 results, y⋈z 4.
    So (x⋈y)⋈z keeps 22 + 10 = 32 tuples and x⋈(y⋈z) 22 + 4 = 26; the optimizer's plan is
    the former. Budget 30: the cheapest plan keeping y⋈z; budget 25: nothing fits, the same
    plan (least state, cheapest among those) with a warning; budget 32: the optimizer's."""
    from reopt.costmodel.catalog import Catalog
    from reopt.statebudget import state_tuples, within_budget
    from reopt.streamcli import Replanner
    from reopt.streamstate import join_nodes

    def table(window: float, cols: dict[str, int]) -> dict:
        return {"rate": 2, "window": window,
                "columns": {**{c: {"distinct": d} for c, d in cols.items()}, "ts": {}}}

    catalog = Catalog.from_dict({"tables": {"s1": table(5, {"a": 10}),
                                            "s2": table(5, {"a": 5, "b": 5}),
                                            "s3": table(1, {"b": 5})}})
    sql = "SELECT x.a FROM s1 x, s2 y, s3 z WHERE x.a = y.a AND y.b = z.b"
    opt = Optimizer(sql, catalog, cost_model="rate", optimizer="topdown")
    space, best = opt.space(), opt.optimize().plan
    aliases = list(opt.query.aliases)

    def kept(p) -> set:
        return {frozenset(aliases[i] for i in r) for r, _ in join_nodes(p, aliases)}

    assert kept(best) == {frozenset("xy")} and state_tuples(space, best) == pytest.approx(32)
    yz = [p for p in all_plans(space) if kept(p) == {frozenset("yz")}]
    assert all(state_tuples(space, p) == pytest.approx(26) for p in yz)
    cheapest = min(yz, key=lambda p: p.cost)
    assert within_budget(space, best, 32) == (best, None)
    got, warning = within_budget(space, best, 30)
    assert plan_line(got) == plan_line(cheapest) and warning is None
    got, warning = within_budget(space, best, 25)
    assert plan_line(got) == plan_line(cheapest) and "least-state plan (26 tuples)" in warning
    r = Replanner(Optimizer(sql, catalog, cost_model="rate", optimizer="topdown"), None,
                  max_state=25)
    assert plan_line(r(None)) == plan_line(cheapest)
    assert r.log[0].startswith("initial plan: warning: every plan keeps more than")



@pytest.mark.spark
@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_state_reused_by_a_tree_with_its_children_swapped_equals_batch_sql(spark, nexmark,
                                                                             executor):
    """``join(join(p, a), b)`` then ``join(join(a, p), b)``: the second keeps the same
    relation sets, so the first's state is reused as is, its columns in the first tree's
    order (p's, then a's) while the second tree's schema puts a's first. The results still
    equal the oracle's (the state's columns were once mapped to the schema by position,
    shifting values into the wrong columns)."""
    root, opt, left_deep, _, _, expected, sizes = nexmark
    inner = left_deep.children[0]
    assert inner.alt.log_op == "join" and len(inner.children) == 2
    swapped = replace(left_deep, children=[
        replace(inner, children=inner.children[::-1],
                relations=(*inner.children[1].relations, *inner.children[0].relations)),
        *left_deep.children[1:]])
    assert plan_line(swapped) != plan_line(left_deep)
    cq = make_query(executor, opt.query, opt.catalog, root, spark, batch_seconds=2,
                    state="intermediate", migration="moving")
    for plan in (left_deep, swapped, swapped):
        b = cq.step(plan)
        assert len(b.rows) == sizes.get(b.index, 0), b.index
        assert answer_digest(b.rows) == expected.get(b.index), b.index
    assert sum(b.join_state.values()) > 0
