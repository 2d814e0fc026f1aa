"""The later strata (BestPlan, LocalCost, the bounds of ``rules/bounds.dl``, and any a user
adds after the maintained stratum) follow an update incrementally (``evaluator/later.py``).

The oracle is the plain python engine evaluating the rules from scratch under the final
statistics. The thresholds beyond which a stratum is evaluated whole instead are switched
off (``SMALL``, ``WHOLE``), so that on these small queries the incremental ways run —
counting, and group re-derivation in schedule order — and the counters prove they ran.

The shipped rules derive LocalCost and the bounds when read (``.ondemand``: an update leaves
them stale, ``tests/test_ondemand.py``); these tests run the rules without that declaration,
so that an update follows them as it follows any later stratum.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from randq import SHAPES, applied, make_query, random_deltas
from rulefiles import eager_program, eager_rules, edited_rules

from reopt.costmodel.models import cost_model
from reopt.costmodel.space import PlanSpace
from reopt.evaluator import later, maintenance
from reopt.evaluator.driver import load_program
from reopt.evaluator.python_engine import PythonEngine
from reopt.incremental.session import Session

PROGRAMS = {m: eager_program(m) for m in ("none", "aggsel", "aggsel+bound", "all")}


def from_scratch(program, space: PlanSpace) -> dict[str, set[tuple]]:
    rels, _ = PythonEngine(program, {0: space}).evaluate({"Expr": [(0, *space.root)]})
    return {p: r.rows for p, r in rels.items()}


def follow(program, q, cat, model: str, deltas: list[str], resave_at: int = -1
           ) -> tuple[Session, int]:
    """Optimize, apply ``deltas`` one at a time (saved and loaded again, pickled, before step
    ``resave_at``) and compare every relation with a from-scratch evaluation after each;
    the session and how many updates changed its statistics."""
    m = cost_model(model)
    start = Session(program, [PlanSpace(q, cat, m)], "python")
    start.optimize()
    session, updates = start, 0
    for i, session, adj, moved in applied(start, q, cat, m, deltas, resave_at):  # noqa: B007
        updates += moved  # (the same statistics: no engine work)
        session.update({0: adj})
        want = from_scratch(program, PlanSpace(q, cat, m, adj))
        got = session.evaluation.relations
        for pred, rows in want.items():
            assert got[pred].rows == rows, (deltas[i], pred)
    return session, updates


@pytest.fixture
def always_incremental(monkeypatch):
    monkeypatch.setattr(later, "WHOLE", 0)  # (changes reaching more than 1/0 of a stratum)
    monkeypatch.setattr(later, "SMALL", 0)


@pytest.mark.parametrize("whole", [0, 3])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(shape=st.sampled_from(SHAPES), n=st.integers(3, 6), seed=st.integers(0, 2**31),
       model=st.sampled_from(["io", "cout"]), mode=st.sampled_from(sorted(PROGRAMS)),
       k=st.integers(2, 5), resave=st.integers(-1, 4))
def test_later_strata_follow_updates_exactly(whole, shape, n, seed, model, mode, k, resave):
    """Random delta sequences change best costs both ways (so bounds rise and fall, parent
    bounds come and go, MaxBound/Bound groups are re-derived) and make groups stale whose
    local costs change without their plans changing; after every step every relation equals
    a from-scratch evaluation's, also across a pickled session (the derivation counts).
    ``whole=3``: the default threshold, so that on these small queries strata are also
    evaluated whole — up front, or stopping a pass midway (its changes undone first)."""
    if mode == "none" and n > 3:
        n = 3  # (no pruning: every plan tree is costed)
    q, cat = make_query(shape, n, seed)
    deltas = random_deltas(q, random.Random(seed), k, cost_model(model).operators)
    program = PROGRAMS[mode]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(later, "WHOLE", whole)
        mp.setattr(later, "SMALL", 0)
        mp.setattr(maintenance, "REBUILD_SHARE", math.inf)  # (every update follows them)
        session, updates = follow(program, q, cat, model, deltas, resave)
    lat = session.engine.later
    how = {p: s.how for s in lat.shapes for p in program.strata[s.stratum].preds}
    # the optimizer's later strata are followed incrementally; only the seed (a later stratum
    # without .bound: its built-in's argument is the query alone) is evaluated again
    assert how.pop("BestPlan") == how.pop("LocalCost") == later.COUNTED
    assert how.pop("Bound") == how.pop("MaxBound") == how.pop("ParentBound") == later.GROUPED
    if mode == "none":  # (BestCost aggregates PlanCost after the maintained stratum)
        assert how.pop("BestCost") == later.GROUPED
    assert how == ({} if program.features.bound else {"SeedBound": later.FROM_EMPTY})
    assert lat.from_empty == len(how) * updates
    if whole == 0:
        assert lat.whole == 0


# Later relations a user adds: one counted from two later relations, one aggregating without
# a schedule and one negating (both evaluated from empty), one reading a statistics built-in
# whose leading arguments are not a group key (from empty).
USER_LATER = """
Spread(q, e, p, b, c) :- Bound(q, e, p, b), LocalCost(q, e, p, _, _, _, _, _, c).
Cheapest(q, min<c>) :- BestCost(q, _, _, c).
Unbounded(q, e, p) :- BestCost(q, e, p, _), !MaxBound(q, e, p, _).
Rows(q, e, md) :- BestPlan(q, e, _, _, _, _, _, _, _, _, _, _), Fn_scansummary(q, e, md).
"""


@pytest.mark.usefixtures("always_incremental")
def test_later_strata_a_user_adds_are_maintained_or_evaluated_again(tmp_path):
    program = load_program(eager_rules(tmp_path, extra=USER_LATER), pruning="all")
    q, cat = make_query("clique", 5, 7)
    deltas = random_deltas(q, random.Random(7), 6, cost_model("cout").operators)
    session, _ = follow(program, q, cat, "cout", deltas)
    how = {p: s.how for s in session.engine.later.shapes
           for p in program.strata[s.stratum].preds}
    assert how["Spread"] == later.COUNTED
    assert how["Cheapest"] == how["Unbounded"] == how["Rows"] == later.FROM_EMPTY
    assert session.engine.later.from_empty >= 3


# A scheduled later stratum deriving across groups of the same rank: the OR node of a join's
# right input from that of its left input when both rank alike (a from-scratch evaluation
# releases both in one round). A change of one reaches the other within a rank the pass is
# releasing: the stratum is evaluated from empty instead.
SAME_RANK = """
.schedule descending Fn_rank Peer.
Peer(q, e, p, c) :- BestCost(q, e, p, c).
Peer(q, e2, p, c) :- Peer(q, e1, p, c), SearchSpace(q, _, _, _, "join", _, e1, p, e2, p),
    Fn_rank(q, e1, p, k), Fn_rank(q, e2, p, k).
"""


@pytest.mark.usefixtures("always_incremental")
def test_a_change_reaching_the_rank_being_released_evaluates_the_stratum_again(tmp_path):
    program = load_program(edited_rules(tmp_path, extra=SAME_RANK), pruning="evita")
    q, cat = make_query("clique", 4, 3)
    deltas = random_deltas(q, random.Random(3), 6, cost_model("cout").operators)
    session, _ = follow(program, q, cat, "cout", deltas)
    shape = next(s for s in session.engine.later.shapes
                 if "Peer" in program.strata[s.stratum].preds)
    assert shape.how == later.GROUPED
    assert session.engine.later.from_empty > 0
