"""Strata derived when read (``.ondemand``; ``evaluator/ondemand.py``): an evaluation or an
update leaves them stale, the first read derives them, and what is read equals a from-scratch
evaluation — after updates nobody read, across a saved session, after a rejected delta.

The oracle is the plain python engine evaluating the shipped rules without their
``.ondemand`` declaration (every stratum derived in place, in order) under the final
statistics.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from randq import SHAPES, applied, make_query, random_deltas
from rulefiles import ONDEMAND, eager_program, eager_rules, edited_rules

from reopt.api import Optimizer
from reopt.costmodel.errors import DeltaError, ReoptError
from reopt.costmodel.models import cost_model
from reopt.costmodel.space import PlanSpace
from reopt.evaluator import later
from reopt.evaluator.driver import evaluate, load_program
from reopt.evaluator.features import DirectiveError
from reopt.evaluator.maintenance import MaintainedEngine
from reopt.evaluator.ondemand import Stale
from reopt.evaluator.python_engine import PythonEngine
from reopt.incremental.session import Session

MODES = ("aggsel", "aggsel+bound", "all")
SHIPPED = {m: load_program(pruning=m) for m in MODES}
EAGER = {m: eager_program(m) for m in MODES}
LAZY = frozenset({"BestPlan", "LocalCost", "ParentBound", "MaxBound", "Bound"})


def from_scratch(program, space: PlanSpace) -> dict[str, set[tuple]]:
    rels, _ = PythonEngine(program, {0: space}).evaluate({"Expr": [(0, *space.root)]})
    return {p: r.rows for p, r in rels.items()}


def assert_read_equals(rels, want: dict[str, set[tuple]], preds=None) -> None:
    for pred in preds or want:
        assert rels[pred].rows == want[pred], pred


def test_the_bounds_are_declared_on_demand_and_come_last():
    program = SHIPPED["all"]
    assert program.ondemand == LAZY
    assert [s.ondemand for s in program.strata] == sorted(s.ondemand for s in program.strata)
    assert EAGER["all"].ondemand == frozenset()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), n=st.integers(3, 6), seed=st.integers(0, 2**31),
       model=st.sampled_from(["io", "cout"]), mode=st.sampled_from(MODES),
       k=st.integers(2, 5), save=st.integers(-1, 4), rebuild=st.booleans(),
       incremental=st.booleans(),
       reads=st.lists(st.sampled_from(["nothing", "LocalCost", "everything"]),
                      min_size=5, max_size=5))
def test_updates_read_or_not_then_read_equal_from_scratch(shape, n, seed, model, mode, k,
                                                          save, rebuild, incremental, reads):
    with pytest.MonkeyPatch.context() as mp:
        if incremental:  # (no stratum followed from empty because that costs less)
            mp.setattr(later, "WHOLE", 0)
            mp.setattr(later, "SMALL", 0)
        read_or_not(shape, n, seed, model, mode, k, save, rebuild, reads)


def read_or_not(shape, n, seed, model, mode, k, save, rebuild, reads):
    """Random delta sequences; after each update the on-demand relations are stale (the
    update derived none of them) and are read — or not, or only the first of them — and
    whatever is read equals a from-scratch evaluation under that step's statistics; the
    session is also saved stale and loaded midway. At the end everything is read. Updates
    maintain the state, or (``rebuild``) may evaluate afresh when they reach most of it; an
    update after a read follows what was read (``incremental``: never from empty to save
    work)."""
    m = cost_model(model)
    q, cat = make_query(shape, n, seed)
    deltas = random_deltas(q, random.Random(seed), k, m.operators)
    start = Session(SHIPPED[mode], [PlanSpace(q, cat, m)], "python")
    start.optimize()
    session, adj = start, start.ctx[0].adjustments
    for i, session, adj, moved in applied(start, q, cat, m, deltas, save):  # noqa: B007
        if not rebuild:
            session.engine.rebuild_share = math.inf
        session.update({0: adj})  # (not moved: the session leaves everything as it is)
        rels = session.evaluation.relations
        if moved:
            assert {p for p, r in rels.items() if type(r) is Stale} == LAZY
        assert not LAZY & set(session.evaluation.sizes())
        read = reads[i % len(reads)]
        if read == "nothing":
            continue
        want = from_scratch(EAGER[mode], PlanSpace(q, cat, m, adj))
        assert_read_equals(rels, want, ["LocalCost"] if read == "LocalCost" else None)
        if read == "LocalCost" and moved:  # (only the strata up to the one read are derived)
            assert type(rels["Bound"]) is Stale
    want = from_scratch(EAGER[mode], PlanSpace(q, cat, m, adj))
    assert_read_equals(session.evaluation.relations, want)


def test_an_evaluation_leaves_them_stale_and_counts_their_work_apart():
    """A from-scratch evaluation's statistics leave the on-demand strata out; the first read
    derives them once, counted in ``on_demand``; a relation read stays read."""
    space = Optimizer("tpch:q5", cost_model="cout", optimizer="topdown").space()
    ev = evaluate([space], "python", program=SHIPPED["all"])
    eager = evaluate([space], "python", program=EAGER["all"])
    derived = {p: n for p, n in eager.stats.derived.items() if p not in LAZY}
    assert ev.stats.derived == derived and not LAZY & set(ev.sizes())
    assert ev.stats.iterations < eager.stats.iterations
    rel = ev.relations["Bound"]
    assert type(rel) is Stale
    assert ev.rows("Bound") == eager.rows("Bound") != set()
    assert ev.relations["Bound"] is rel and type(rel) is not Stale
    assert_read_equals(ev.relations, {p: r.rows for p, r in eager.relations.items()})
    assert ev.stats.derived == derived  # (reads count apart)
    on_demand = rel.__dict__.get("pending")  # (it became the relation: nothing pending)
    assert on_demand is None


def test_a_saved_optimizer_keeps_them_stale_and_reads_them_after_loading(tmp_path):
    o = Optimizer("tpch:q5", cost_model="cout", engine="python", pruning="all")
    o.optimize()
    o.update("card orders *4")
    o.save(tmp_path / "saved")
    loaded = Optimizer.load(tmp_path / "saved")
    live = loaded._session.engine.live
    assert all(type(live[p]) is Stale for p in LAZY)
    want = from_scratch(EAGER["all"], o.space())
    assert_read_equals(live, want)


def test_a_stale_relation_stays_derivable_while_its_mapping_is_held():
    """A stale relation is derived from the mapping of relations it belongs to, which its
    pending strata hold weakly (no reference cycle): an evaluation kept alone — its engine
    dropped — still derives it; one taken out and read after its mapping is gone says so."""
    space = Optimizer("tpch:q3", cost_model="cout", optimizer="topdown").space()
    ev = evaluate([space], "python", program=SHIPPED["all"])
    eager = evaluate([space], "python", program=EAGER["all"])
    assert ev.rows("LocalCost") == eager.rows("LocalCost") != set()
    rel = ev.relations["Bound"]
    del ev
    with pytest.raises(ReoptError, match=r"relation Bound: a stale on-demand relation whose "
                                         r"evaluation is gone"):
        len(rel)


# --- the declaration is checked -------------------------------------------------------------


@pytest.mark.parametrize("old, new, extra, message", [
    ("", "", "Spread(q, e, p, b) :- Bound(q, e, p, b).\n",
     r"extra\.dl:1:1: Spread reads Bound, which is derived when read \(\.ondemand, "
     r".*bounds\.dl:\d+:\d+\): declare Spread on demand too"),
    (ONDEMAND, ".ondemand Bound.", "", r"ParentBound reads Bound, which is derived when read"),
    (ONDEMAND, ".ondemand LocalCost.", "", r"ParentBound reads LocalCost"),
    ("", "", ".ondemand SeedBound.\n",
     r"\.ondemand: SeedBound is named by \.bound \(.*optimizer\.dl:\d+:\d+\)"),
    ("", "", ".ondemand BestCost BestPlan.\n", r"BestCost is named by \.aggsel"),
    ("", "", ".ondemand Nope.\n", r"extra\.dl:1:1: \.ondemand: unknown relation Nope"),
    ("", "", ".ondemand.\n", r"expected '\.ondemand Relation …'"),
])
def test_a_relation_read_by_an_eager_one_or_by_pruning_cannot_be_on_demand(
        tmp_path, old, new, extra, message):
    """Every reader of an on-demand relation must be declared on demand itself (refused, one
    line naming the rule, rather than made lazy silently); none may be named by a pruning
    directive — whatever the pruning mode switches on."""
    rules = edited_rules(tmp_path, old=old, new=new, extra=extra, file="bounds.dl")
    for mode in ("none", "all"):
        with pytest.raises(DirectiveError, match=message):
            load_program(rules, pruning=mode)


def test_a_reader_declared_on_demand_is_derived_when_read(tmp_path):
    extra = ("Spread(q, e, p, b - c) :- Bound(q, e, p, b), BestCost(q, e, p, c).\n"
             ".ondemand Spread.\n")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    program = load_program(edited_rules(tmp_path / "a", extra=extra), pruning="all")
    oracle = load_program(eager_rules(tmp_path / "b", extra=extra.splitlines()[0]),
                          pruning="all")
    assert program.ondemand == LAZY | {"Spread"} and oracle.ondemand == frozenset()
    space = Optimizer("tpch:q3", cost_model="io", optimizer="topdown").space()
    ev = evaluate([space], "python", program=program)
    assert type(ev.relations["Spread"]) is Stale
    want = from_scratch(oracle, space)
    assert ev.rows("Spread") == want["Spread"] != set()
    assert_read_equals(ev.relations, want)


# --- a rejected delta ----------------------------------------------------------------------


def test_a_rejected_delta_after_unread_updates_leaves_every_relation_as_before(monkeypatch):
    """Two updates (after the first only LocalCost is read; after the second nothing), then
    a delta refused by validation: every relation, read afterwards, is what a from-scratch
    evaluation under the last accepted statistics gives; then a delta failing inside the
    update (restored by re-evaluating): the same again."""
    o = Optimizer("tpch:q5", cost_model="io", engine="python", pruning="all")
    o.optimize()
    o._session.engine.rebuild_share = math.inf  # (maintained, not evaluated afresh)
    o.update("card orders *4")
    assert o._session.engine.live["LocalCost"].rows
    o.update("card customer *0.25")
    assert o._session.engine.rebuilds == 0
    space = o.space()
    want = from_scratch(EAGER["all"], space)
    with pytest.raises(DeltaError):
        o.update("card nosuchtable *2")
    live = o._session.engine.live
    assert all(type(live[p]) is Stale for p in LAZY)
    assert_read_equals(live, want)
    failed = []

    def fail_once(self, *args, **kwargs):
        if not failed:
            failed.append(True)
            raise RuntimeError("boom")
        return live_update(self, *args, **kwargs)

    live_update = MaintainedEngine._live_update
    monkeypatch.setattr(MaintainedEngine, "_live_update", fail_once)
    with pytest.raises(DeltaError, match="could not be applied, nothing changed"):
        o.update("card lineitem *3")
    assert failed and o.space().adjustments == space.adjustments
    live = o._session.engine.live
    assert all(type(live[p]) is Stale for p in LAZY)
    assert_read_equals(live, want)
    frames = o.relations()
    assert all(len(frames[p]) == len(want[p]) for p in want)


@pytest.mark.usefixtures("incremental_later")
def test_a_stratum_read_after_every_update_is_followed_not_derived_again():
    """Read after every update, the bounds are followed by the next update (as when every
    update derived them; LocalCost by its derivation counts) and the read takes them;
    unread for one step, they are derived from empty at the next read, then followed again
    — the counts kept from before are not theirs any more."""
    o = Optimizer("tpch:q5", cost_model="io", engine="python", pruning="all")
    o.optimize()
    engine = o._session.engine
    engine.rebuild_share = math.inf
    assert o._evaluation.rows("Bound")
    assert (engine.on_demand.strata, engine.on_demand.followed) == (2, 0)  # LocalCost, bounds
    deltas = ["card orders *4", "card customer *0.25", "cost hashjoin *2", "card lineitem *3",
              "card {orders,customer} *5"]
    for i, delta in enumerate(deltas):
        o.update(delta)
        if i == 2:
            continue  # (unread: the next update leaves them stale)
        assert type(engine.live["Bound"]) is Stale
        want = from_scratch(EAGER["all"], o.space())
        assert_read_equals(o._evaluation.relations, want, [p for p in want if p != "BestPlan"])
    assert (engine.on_demand.strata, engine.on_demand.followed) == (4, 2 * 4)


@pytest.fixture
def incremental_later(monkeypatch):
    """Later strata followed whatever their size and the share of them a change reaches."""
    monkeypatch.setattr(later, "WHOLE", 0)
    monkeypatch.setattr(later, "SMALL", 0)


@pytest.mark.usefixtures("incremental_later")
def test_a_stratum_read_again_after_unread_steps_is_counted_anew():
    """LocalCost followed by its derivation counts, left stale by unread steps, then derived
    from empty by a read: the counts kept from before are not those of its tuples any
    more, and the next update that follows it must count anew (a sequence found by a
    random search where reusing them made LocalCost and the bounds wrong)."""
    o = Optimizer("tpch:q10", cost_model="io", engine="python", pruning="all")
    o.optimize()
    o._session.engine.rebuild_share = math.inf
    assert o._evaluation.rows("Bound")
    for delta, read in [("card lineitem *0.3333", False), ("card {orders,customer} *5", True),
                        ("card customer *4", False), ("card lineitem *0.3333", False),
                        ("card orders *4", True), ("card {orders,customer} *5", False),
                        ("card orders *0.25", True), ("cost hashjoin *2", True)]:
        o.update(delta)
        if read:
            assert_read_equals(o._evaluation.relations,
                               from_scratch(EAGER["all"], o.space()))
