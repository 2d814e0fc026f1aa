"""Resident optimizers of a fleet (issue 19): a fleet task updates the optimizer its Python
worker kept from an earlier round instead of unpickling the row's state — but only when that
optimizer stands for exactly the row's state. Here the tasks run in this process (as a Spark
Python worker runs them, without Spark), with one :class:`Resident` per simulated worker, and
every round's results are compared with an uninterrupted in-process loop fed the same deltas:
with the cache warm, cleared, on another worker, after a retried task, and after a round the
driver discarded (same version numbers, other statistics: only the stamp tells them apart)."""

from __future__ import annotations

import gc
import json
import sys
from typing import Any

import pyarrow as pa
import pytest

from reopt import fleet as fleetmod
from reopt.evaluator.driver import load_program
from reopt.fleet import RESIDENT_BYTES, FleetOptions, FleetQuery, Resident, _optimizer

sys.path.insert(0, "benchmarks")
from workload import generate  # noqa: E402

MODEL = "cout"
WORKLOAD = generate(11, 4, min_relations=4, max_relations=6)
OPTS = FleetOptions(load_program(None, "all"), MODEL, "all")
FLEET = "test-fleet"


class Broadcast:
    """What a task reads of Spark's broadcast variable."""

    def __init__(self, value: Any):
        self.value = value


def queries() -> list[FleetQuery]:
    return [FleetQuery(w.name, w.sql, w.catalog) for w in WORKLOAD]


def step_deltas(k: int) -> dict[str, list[str]]:
    """Round ``k``'s deltas (the workload's ``k``-th delta step of every query)."""
    return {w.name: [d.strip() for d in w.deltas[k].split(";")] for w in WORKLOAD}


def initial_rows(stamp: str, resident: int = RESIDENT_BYTES) -> list[dict[str, Any]]:
    qs = queries()
    src = pa.RecordBatch.from_pylist(
        [{"q": i, "name": fq.name, "sql": fq.sql, "catalog": json.dumps(fq.catalog),
          "deltas": [], "seed": None} for i, fq in enumerate(qs)],
        schema=pa.schema([("q", pa.int64()), ("name", pa.string()), ("sql", pa.string()),
                          ("catalog", pa.string()), ("deltas", pa.list_(pa.string())),
                          ("seed", pa.binary())]))
    out = list(fleetmod._initial_task(iter([src]), OPTS, FLEET, stamp, resident))
    return [r for b in out for r in b.to_pylist()]


def task(rows: list[dict[str, Any]], deltas: dict[str, list[str]], stamp: str,
         fleet: str = FLEET, resident: int = RESIDENT_BYTES) -> list[dict[str, Any]]:
    """One update task over ``rows`` in this process (its worker: ``fleetmod.RESIDENT``)."""
    batch = pa.RecordBatch.from_pylist(rows, schema=fleetmod._arrow_schema())
    out = list(fleetmod._update_task(iter([batch]), Broadcast(deltas), fleet, stamp,
                                     resident))
    return [r for b in out for r in b.to_pylist()]


def loop(rounds: list[dict[str, list[str]]]) -> dict[str, tuple[float, str]]:
    """Per query, the best cost and plan of an uninterrupted in-process optimizer that
    optimized and then took ``rounds`` one after the other."""
    out = {}
    for fq in queries():
        o = _optimizer(fq, OPTS)
        step = o.optimize()
        for r in rounds:
            step = o.update(r[fq.name])
        out[fq.name] = (step.cost, json.dumps(step.plan.to_json(), sort_keys=True))
    return out


def got(rows: list[dict[str, Any]]) -> dict[str, tuple[float, str]]:
    assert all(r["error"] is None for r in rows)
    return {r["name"]: (r["cost"], r["plan"]) for r in rows}


@pytest.fixture(autouse=True)
def thawed():
    """A task keeping optimizers resident freezes what it keeps (``fleet._query_gc``), as a
    Spark Python worker should; this process is not one: thawed after each test."""
    yield
    gc.unfreeze()


def test_a_task_keeping_optimizers_freezes_them_and_nothing_cyclic(workers):
    """What a task keeps resident is frozen — out of every generation, so the full
    collection PySpark's worker runs after each task does not scan it — and what it froze
    holds no cyclic garbage (frozen, that would never be freed): after an initial round,
    which parses the queries (cyclic syntax trees), and an update round."""
    gc.collect()
    rows = task(initial_rows("s0"), step_deltas(0), "s1")
    assert all(r["resident"] for r in rows)
    kept = [opt for _, opt, _ in workers[0].fleets[FLEET].values()]
    assert gc.get_freeze_count() > 0
    tracked = {id(o) for g in range(3) for o in gc.get_objects(g)}
    assert kept and not any(id(o) in tracked for o in kept)
    gc.unfreeze()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        assert gc.collect() == 0, sorted({type(o).__name__ for o in gc.garbage})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


@pytest.fixture
def workers(monkeypatch) -> list[Resident]:
    """Two simulated Python workers; ``use(k)`` makes the next task run on worker ``k``."""
    ws = [Resident(), Resident()]
    monkeypatch.setattr(fleetmod, "RESIDENT", ws[0])
    return ws


def use(monkeypatch, ws: list[Resident], k: int) -> None:
    monkeypatch.setattr(fleetmod, "RESIDENT", ws[k])


def test_warm_cleared_and_other_workers_give_the_loops_results(workers, monkeypatch):
    rows = initial_rows("s0")
    r1 = task(rows, step_deltas(0), "s1")  # worker 0 built them: all resident
    assert all(r["resident"] for r in r1) and workers[0].hits == len(r1)
    assert got(r1) == loop([step_deltas(0)])
    use(monkeypatch, workers, 1)  # a worker that never saw them: all loaded from the rows
    r2 = task(r1, step_deltas(1), "s2")
    assert not any(r["resident"] for r in r2)
    assert got(r2) == loop([step_deltas(0), step_deltas(1)])
    use(monkeypatch, workers, 0)  # back on worker 0, which holds them at s1, not s2
    r3 = task(r2, step_deltas(2), "s3")
    assert not any(r["resident"] for r in r3)
    assert got(r3) == loop([step_deltas(k) for k in range(3)])
    workers[0].clear()  # a cleared cache (a restarted worker)
    r4 = task(r3, step_deltas(3), "s4")
    assert not any(r["resident"] for r in r4)
    assert got(r4) == loop([step_deltas(k) for k in range(4)])


def test_a_retried_task_loads_what_the_failed_attempt_left(workers):
    rows = initial_rows("s0")
    first = task(rows, step_deltas(0), "s1")  # an attempt whose output Spark then lost
    assert all(r["resident"] for r in first)
    again = task(rows, step_deltas(0), "s1")  # the retry, on the same worker, same input
    assert not any(r["resident"] for r in again)  # its rows are at s0; the cache at s1
    assert got(again) == got(first) == loop([step_deltas(0)])
    r2 = task(again, step_deltas(1), "s2")  # and the retry's optimizers are resident again
    assert all(r["resident"] for r in r2)
    assert got(r2) == loop([step_deltas(0), step_deltas(1)])


def test_a_discarded_rounds_optimizers_are_not_taken_for_the_kept_ones(workers, monkeypatch):
    """Round A runs on worker 0 and is discarded (say the driver failed after it); round B
    runs from the same rows on worker 1 and is kept. Rows after B and worker 0's optimizers
    after A have the same version number but other statistics: the next round on worker 0
    must load the rows (a check of versions alone would update A's optimizers)."""
    rows = initial_rows("s0")
    use(monkeypatch, workers, 1)
    rows = task(rows, step_deltas(0), "s1")
    a_deltas, b_deltas, c_deltas = step_deltas(1), step_deltas(2), step_deltas(3)
    use(monkeypatch, workers, 0)
    a = task(rows, a_deltas, "sA")
    use(monkeypatch, workers, 1)
    b = task(rows, b_deltas, "sB")
    assert [r["version"] for r in a] == [r["version"] for r in b]
    use(monkeypatch, workers, 0)
    c = task(b, c_deltas, "sC")
    assert not any(r["resident"] for r in c)
    want = loop([step_deltas(0), b_deltas, c_deltas])
    assert got(c) == want
    # (the check matters: A's lineage ends elsewhere for some query)
    assert loop([step_deltas(0), a_deltas, c_deltas]) != want


def test_a_rejected_batch_keeps_the_state_and_drops_the_resident_optimizer(workers):
    rows = initial_rows("s0")
    bad = dict(step_deltas(0))
    name = WORKLOAD[0].name
    bad[name] = ["card nosuch *2"]
    r1 = task(rows, bad, "s1")
    mine = next(r for r in r1 if r["name"] == name)
    before = next(r for r in rows if r["name"] == name)
    assert mine["error"].startswith(f"query {name}: ")
    assert (mine["stamp"], mine["version"], mine["state"]) == \
        (before["stamp"], before["version"], before["state"])
    r2 = task(r1, step_deltas(1), "s2")
    assert [r["resident"] for r in r2] == [r["name"] != name for r in r2]
    want = loop([step_deltas(0), step_deltas(1)])
    ok = {r["name"]: (r["cost"], r["plan"]) for r in r2}
    fresh = _optimizer(queries()[0], OPTS)
    fresh.optimize()
    step = fresh.update(step_deltas(1)[name])
    assert ok[name] == (step.cost, json.dumps(step.plan.to_json(), sort_keys=True))
    assert all(ok[n] == want[n] for n in ok if n != name)


def test_a_fleet_that_keeps_nothing_resident_leaves_the_others_theirs(workers):
    rows = initial_rows("s0")
    held = dict(workers[0].fleets[FLEET])
    out = task(rows, step_deltas(0), "t1", fleet="other", resident=0)
    assert not any(r["resident"] for r in out) and got(out) == loop([step_deltas(0)])
    assert workers[0].fleets[FLEET] == held and not workers[0].fleets.get("other")
    assert workers[0].capacity == RESIDENT_BYTES


def test_a_full_cache_keeps_what_fits_and_evicts_other_fleets_first():
    r = Resident(capacity=10)
    r.keep("f", 1, "a", "one", 4)
    r.keep("f", 2, "a", "two", 4)
    r.keep("f", 3, "a", "three", 4)  # 12 > 10: not kept (the fleet's own stay)
    assert r.size == 8 and r.take("f", 3, "a") is None
    r.keep("g", 1, "a", "g-one", 4)  # another fleet: f's make room
    assert r.size == 4 and r.take("f", 1, "a") is None
    assert r.take("g", 1, "a") == "g-one" and r.size == 0
    r.keep("g", 2, "a", "big", 11)  # larger than the whole cache: not kept
    assert r.take("g", 2, "a") is None and r.size == 0
    r.keep("g", 2, "b", "two", 4)
    assert r.take("g", 2, "a") is None  # another stamp: dropped, not handed out
    assert r.take("g", 2, "b") is None and r.size == 0


@pytest.mark.parametrize("resident", [0, 1])
def test_a_task_holds_no_optimizer_it_cannot_keep(workers, monkeypatch, resident):
    """A task drops each optimizer that cannot be kept resident as soon as its row is made:
    with no room (0 bytes: nothing resident; 1 byte: no state fits) at most two optimizers
    are alive at a time (the loop's last one and the one just made) in the initial round and
    in an update round, however many queries the task's partition holds (it used to hold all
    of them until the batch was built: an `io` fleet of 10,000 queries ran a worker out of
    memory)."""
    import weakref

    alive: set[int] = set()
    most = [0]
    made = {"initial": fleetmod.initial, "advance": fleetmod.advance}

    def watched(name: str):
        def run(*args: Any, **kwargs: Any) -> Any:
            blob, out, opt = made[name](*args, **kwargs)
            if opt is not None:
                alive.add(id(opt))
                weakref.finalize(opt, alive.discard, id(opt))
                most[0] = max(most[0], len(alive))
            return blob, out, opt
        return run

    monkeypatch.setattr(fleetmod, "initial", watched("initial"))
    monkeypatch.setattr(fleetmod, "advance", watched("advance"))
    qs = queries()
    rows = initial_rows("s0", resident)
    assert len(rows) == len(qs) > 1 and all(r["error"] is None for r in rows)
    out = task(rows, step_deltas(0), "s1", resident=resident)
    assert len(out) == len(qs) and not any(r["resident"] for r in out)
    assert most[0] <= 2 < len(qs)
    assert not workers[0].fleets.get(FLEET)
