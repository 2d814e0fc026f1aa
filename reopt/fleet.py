"""Fleets: many standing queries optimized and re-optimized together on Spark.

The rule program is *decomposable* on the query id (:mod:`reopt.evaluator.decompose`):
evaluating it over a batch of queries gives, query by query, what evaluating it over each
query alone gives. So the fleet runs the BigDatalog way: its state is a DataFrame with one
row per query, hash-partitioned by query id, and a round — the initial optimization or one
batch of deltas — is a single ``mapInArrow`` over the partitions in which every task runs the
in-process engine (:class:`~reopt.incremental.session.Session` through
:class:`~reopt.api.Optimizer`) on its own queries: the whole fixpoint, or the incremental
update, with no exchange between tasks. The jobs per round are a fixed handful (the round
itself, its reliable checkpoint, collecting the results), whatever the number of queries,
their size or the number of ranks.

A query's state is its optimizer, pickled (the rule program pickles as its source, the
relations as their tuples: :meth:`CompiledProgram.__reduce__`,
:meth:`MaintainedEngine.__getstate__`) and compressed. A round's output is checkpointed
reliably (to ``checkpoint`` or the session's checkpoint directory), so a lost executor costs
a task retry — each task is a pure function of its input rows — and :meth:`Fleet.save` /
:meth:`Fleet.load` let a restarted driver resume.

The rows are the truth; the Python workers (which Spark reuses across tasks) also keep the
optimizers they last built or updated *resident* (:class:`Resident`), each under the
``stamp`` of the state it equals — the id of the round that wrote that state, unique per
round. A task updates a resident optimizer instead of unpickling the row's state only when
the stamps are equal, so a worker that did not see a query's last round (another worker
did), a retried task, a round the driver discarded or another fleet never yields an
optimizer that differs from the row.

A delta that fails for one query (unknown table, bad factor, a failure while re-optimizing)
is reported on that query's result row and leaves that query's state as it was; the other
queries' deltas go through.
"""

from __future__ import annotations

import glob
import json
import pickle
import struct
import threading
import time
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reopt.costmodel.errors import ReoptError
from reopt.optimizers.base import paused_gc

FORMAT = 1
"""Version of the saved fleet layout (:meth:`Fleet.save`); :meth:`Fleet.load` refuses others."""

STATE_COLUMNS = (
    ("q", "long"), ("name", "string"), ("version", "long"), ("state", "binary"),
    ("cost", "double"), ("plan", "string"), ("changed", "boolean"), ("error", "string"),
    ("seconds", "double"), ("derived", "long"), ("updated", "long"), ("step", "binary"),
    ("stamp", "string"), ("resident", "boolean"),
)
"""One row per query: its id and name, how many rounds changed its state, the state itself,
and what the last round gave it (best cost, plan as JSON, whether the plan changed, the error
that rejected its deltas, CPU seconds, PlanCost tuples derived, OR nodes whose state changed,
and the API's pickled step — or the exception that rejected the round — for
``Optimizer(engine="spark")``, which runs on a fleet); then the id of the round that wrote
the state (its ``stamp``: what a resident optimizer must carry to stand for it) and whether
the last round updated a resident optimizer (no unpickling)."""

RESULT_COLUMNS = tuple(c for c in STATE_COLUMNS if c[0] not in ("state", "step", "stamp"))


def _schema() -> str:
    return ", ".join(f"{n} {t}" for n, t in STATE_COLUMNS)


@dataclass(frozen=True)
class FleetQuery:
    """A standing query: its name, its SQL (or a built-in name such as ``tpch:q5``), its
    catalog (the JSON object of README "Catalog format"; None: the fleet's catalog) and
    deltas to apply before its first optimization (corrections known up front). ``seed``
    instead: a pickled, not yet optimized python-engine optimizer (``Optimizer(engine=
    "spark")`` hands its query over this way)."""

    name: str
    sql: str
    catalog: dict[str, Any] | None = None
    deltas: tuple[str, ...] = ()
    seed: bytes | None = None


@dataclass(frozen=True)
class FleetOptions:
    """What every query of a fleet is optimized with; pickled once into each round's tasks."""

    program: Any
    """The compiled rule program (pickles as its source: workers compile it once)."""
    cost_model: str = "io"
    pruning: str = "all"
    catalog: Any = None
    """The catalog of queries without their own (None: the built-in TPC-H statistics)."""
    max_pairs: int | None = None
    over_budget: str = "error"


# -- one query, in a task ---------------------------------------------------------------------

ZSTD = b"RZ"
"""A stored state's first bytes when its pickle is compressed with zstd (level 1; then its
size, 8 bytes little-endian, then the zstd frame). zstd at level 1 compressed the states of
a fleet's first 300 queries (`cout`) in 0.34 ms and decompressed them in 0.15 ms per query
to 39 KB, zlib at level 1 in 1.09 and 0.44 ms to 43 KB. A state without it is zlib's (saved
by an earlier reopt)."""


def _dump(opt: Any) -> bytes:
    import pyarrow as pa

    raw = pickle.dumps(opt, protocol=pickle.HIGHEST_PROTOCOL)
    packed = pa.Codec("zstd", compression_level=1).compress(raw, asbytes=True)
    return ZSTD + struct.pack("<Q", len(raw)) + packed


def _load(blob: bytes) -> Any:
    if blob[:2] != ZSTD:
        return pickle.loads(zlib.decompress(blob))
    import pyarrow as pa

    (size,) = struct.unpack_from("<Q", blob, 2)
    raw = pa.Codec("zstd").decompress(memoryview(blob)[10:], decompressed_size=size,
                                      asbytes=True)
    return pickle.loads(raw)


RESIDENT_BYTES = 64 << 20
"""How much state one Python worker keeps resident by default (``Fleet(resident=...)``),
counted as the states' stored (compressed) size. Live, an optimizer takes about
:data:`LIVE_PER_STORED` times that: 64 MiB stored is about 1.4 GB live per worker."""

LIVE_PER_STORED = 22
"""Live memory of an optimizer (after an update) over its stored state's size: the median of
a fleet's first 40 queries (`cout`, tracemalloc), 6.4 times its pickle, which compresses
about 3.5 times."""


class Resident:
    """The optimizers this Python worker last built or updated, by fleet and query id, each
    with the stamp of the state it equals (module doc). An optimizer is *taken out* while a
    task updates it and put back, under the new state's stamp, only once the round's row for
    it is built: a task that fails half-way leaves nothing behind that a retry could take
    for the state it started from.

    When full, another fleet's optimizers make room (least recently kept first), the fleet's
    own do not: the newcomer is not kept. A round visits a fleet's queries in the same order
    every time, so evicting the least recently kept of the fleet's own would evict each one
    just before it is needed (no hits at all); keeping those that fit gives the share that
    fits."""

    def __init__(self, capacity: int = RESIDENT_BYTES):
        self.capacity = capacity
        self.fleets: OrderedDict[str, dict[int, tuple[str, Any, int]]] = OrderedDict()
        """Fleet id → query id → (stamp, optimizer, stored size); fleets least recently
        kept into first."""
        self.size = 0
        self.hits = self.misses = 0

    def take(self, fleet: str, q: int, stamp: str | None) -> Any | None:
        """The optimizer of query ``q`` if this worker holds it at ``stamp``, removed; None
        otherwise (an entry at another stamp is dropped: the row has moved past it)."""
        got = self.fleets.get(fleet, {}).pop(q, None)
        if got is not None:
            self.size -= got[2]
        if got is None or stamp is None or got[0] != stamp:
            self.misses += 1
            return None
        self.hits += 1
        return got[1]

    def keep(self, fleet: str, q: int, stamp: str, opt: Any, size: int) -> None:
        """Hold ``opt`` as query ``q``'s state at ``stamp`` (``size``: its stored bytes) if
        it fits, after evicting other fleets' optimizers if need be."""
        mine = self.fleets.setdefault(fleet, {})
        self.fleets.move_to_end(fleet)
        while self.size + size > self.capacity:
            other = next(iter(self.fleets))
            if other == fleet:
                return
            for _, _, dropped in self.fleets.pop(other).values():
                self.size -= dropped
        mine[q] = (stamp, opt, size)
        self.size += size

    def clear(self) -> None:
        self.fleets.clear()
        self.size = 0


RESIDENT = Resident()
"""This process's resident optimizers (in a Spark Python worker: kept across its tasks)."""


def _optimizer(fq: FleetQuery, opts: FleetOptions) -> Any:
    from reopt.api import MAX_PAIRS, Optimizer, load_query
    from reopt.costmodel.catalog import Catalog
    from reopt.costmodel.sql import parse_query

    if fq.catalog is not None:
        catalog = Catalog.from_dict(fq.catalog, source=f"{fq.name}.catalog.json")
    else:
        catalog = opts.catalog if opts.catalog is not None else _tpch()
    text = fq.sql.strip()
    if text.lower().startswith("tpch:"):
        query = load_query(text, catalog)
    else:
        query = parse_query(text, catalog, name=fq.name, source=f"query {fq.name}")
    return Optimizer(query, catalog, cost_model=opts.cost_model, engine="python",
                     pruning=opts.pruning, program=opts.program,
                     max_pairs=opts.max_pairs or MAX_PAIRS, over_budget=opts.over_budget)


_TPCH: list[Any] = []


def _tpch() -> Any:
    if not _TPCH:
        from reopt.api import load_catalog

        _TPCH.append(load_catalog())
    return _TPCH[0]


def _outcome(step: Any, before: str | None) -> dict[str, Any]:
    plan = json.dumps(step.plan.to_json(), sort_keys=True)
    m = step.metrics
    return {"cost": float(step.cost), "plan": plan,
            "changed": before is not None and plan != before,
            "derived": int(m.get("derived", {}).get("PlanCost", 0))
            if isinstance(m.get("derived"), dict) else 0,
            "updated": int(m.get("updated", {}).get("or_nodes", 0))
            if isinstance(m.get("updated"), dict) else 0}


def initial(fq: FleetQuery, opts: FleetOptions
            ) -> tuple[bytes | None, dict[str, Any], Any]:
    """Optimize one query from scratch: its state, its result row (an ``error`` instead
    when its SQL, catalog or optimization fails) and its optimizer (None on an error)."""
    t0 = time.process_time()
    try:
        opt = _load(fq.seed) if fq.seed is not None else _optimizer(fq, opts)
        if fq.deltas:
            opt.adjustments = opt.check(list(fq.deltas))
        step = opt.optimize()
        out = _outcome(step, None)
        blob: bytes | None = _dump(opt)
        out["error"], out["step"] = None, pickle.dumps(step)
    except ReoptError as e:
        blob, out, opt = None, {"error": f"query {fq.name}: {e}", "step": pickle.dumps(e)}, None
    out["seconds"] = time.process_time() - t0
    return blob, out, opt


def advance(name: str, blob: bytes, change: Any, plan: str | None, live: Any = None
            ) -> tuple[bytes, dict[str, Any], Any]:
    """Apply one query's deltas of a round (all or nothing): its new state, its result row,
    and its updated optimizer — None when the batch was rejected (the state is kept and the
    row says why). ``change`` is the delta texts, or the new statistics (``Adjustments``,
    validated by the API's optimizer in the driver). ``live``: the optimizer ``blob``
    holds, already unpickled (a resident one), updated in place."""
    from reopt.api import update_steps

    t0 = time.process_time()
    opt = live if live is not None else _load(blob)
    try:
        if isinstance(change, list):
            step = opt.update(change)
        else:
            step = update_steps([opt], [change], [])[0]
        out = _outcome(step, plan)
        out["error"], out["step"] = None, pickle.dumps(step)
        blob = _dump(opt)
    except ReoptError as e:
        # (the update restored the optimizer; not kept all the same: loaded again next time)
        out = {"error": f"query {name}: {e}", "plan": plan, "changed": False,
               "step": pickle.dumps(e)}
        opt = None
    out["seconds"] = time.process_time() - t0
    out["resident"] = live is not None
    return blob, out, opt


# -- one round, in a task ---------------------------------------------------------------------

@contextmanager
def _query_gc(resident: int, parsed: bool = False) -> Iterator[None]:
    """The garbage-collection policy around one query's work in a task.

    A state's build, load or change allocates millions of tuples; with the collector on,
    the largest workload queries (2.5–3.4 MB states, `io`) loaded in 0.5–0.9 s instead of
    0.1–0.17 s and updated in 1.5–1.9 s instead of 0.8–1.0 s: it is paused.

    In a worker keeping optimizers resident (``resident`` bytes), what survives is then
    *frozen* (``gc.freeze()``): the collector never scans it again. PySpark's worker runs a
    full collection after every task (``pyspark/daemon.py``), which scanned the whole
    resident heap each time: 60% of the Python workers' time in an update round of 1,000
    queries (py-spy; 8 tasks a round, each collection scanning ~500 live optimizers).
    Frozen objects are still freed by reference counting when dropped (an optimizer
    evicted, replaced or updated in place), and a dropped optimizer leaves no cycle
    (``tests/test_incremental.py``), so nothing the fleet drops waits for the collector.
    ``parsed``: the work parsed a query, whose syntax trees (sqlglot's, with parent links)
    are cyclic garbage — collected with the young generation before the rest is frozen
    (240 objects a query in the initial round, which would stay frozen for good).

    Without ``resident``, nothing outlives the task: the young generation the query made
    is collected on exit, as everywhere else."""
    with paused_gc(collect_young=parsed or not resident, freeze=bool(resident)):
        yield


class _Kept(list):
    """The optimizers a task may make resident once its batch is built (query id, optimizer,
    stored size): at most ``resident`` bytes of them, counted as :class:`Resident` counts.
    One that cannot fit is dropped at once, not held until the batch is built: a task used
    to hold every optimizer of its partition until then, whatever the capacity (even with
    nothing to keep), and at N = 10,000 `io` queries on ``local[2]`` (1,250 a task) a
    Python worker grew to 11 GB and was killed by the kernel. An optimizer beyond the
    capacity could not be kept by :meth:`Resident.keep` anyway."""

    def __init__(self, resident: int):
        super().__init__()
        self.resident, self.held = resident, 0

    def offer(self, q: int, opt: Any, size: int) -> None:
        if self.held + size <= self.resident:
            self.append((q, opt, size))
            self.held += size


def _initial_task(batches: Iterator[Any], opts: FleetOptions, fleet: str, stamp: str,
                  resident: int) -> Iterator[Any]:
    for batch in batches:
        cols = batch.to_pydict()
        rows, kept = [], _Kept(resident)
        for q, name, sql, cat, ds, seed in zip(cols["q"], cols["name"], cols["sql"],
                                               cols["catalog"], cols["deltas"], cols["seed"],
                                               strict=True):
            fq = FleetQuery(name, sql, json.loads(cat) if cat else None, tuple(ds or ()), seed)
            with _query_gc(resident, parsed=True):
                blob, out, opt = initial(fq, opts)
            rows.append({"q": q, "name": name, "version": 0, "state": blob, **out,
                         "stamp": stamp if blob is not None else None, "resident": False})
            if opt is not None:
                kept.offer(q, opt, len(blob))
        yield _built(rows, kept, fleet, stamp, resident)


def _built(rows: list[dict[str, Any]], kept: list[tuple[int, Any, int]], fleet: str,
           stamp: str, resident: int) -> Any:
    """The task's output batch of ``rows``; only then are the ``kept`` optimizers (query
    id, optimizer, stored size) made resident, at the state ``stamp`` their rows carry, in
    a worker holding ``resident`` bytes (the fleet's setting; 0: nothing is kept, and the
    worker's other fleets keep theirs)."""
    import pyarrow as pa

    batch = pa.RecordBatch.from_pylist(rows, schema=_arrow_schema())
    if resident:
        RESIDENT.capacity = resident
        for q, opt, size in kept:
            RESIDENT.keep(fleet, q, stamp, opt, size)
    return batch


def _update_task(batches: Iterator[Any], deltas: Any, fleet: str, stamp: str,
                 resident: int) -> Iterator[Any]:
    """One task of an update round. ``stamp``: the round's id, which every state it changes
    takes (a retried task's states are the same: the update is a function of the row and
    the deltas); ``resident``: the worker's :attr:`Resident.capacity` (the fleet's)."""
    wanted: Mapping[str, list[str]] = deltas.value
    for batch in batches:
        rows = batch.to_pylist()
        kept = _Kept(resident)
        for row in rows:
            mine = wanted.get(row["name"])
            if mine is None or row["state"] is None:
                row.update(changed=False, error=None, seconds=0.0, derived=0, updated=0,
                           step=None, resident=False)
                continue
            live = RESIDENT.take(fleet, row["q"], row["stamp"])
            with _query_gc(resident):
                blob, out, opt = advance(row["name"], row["state"], mine, row["plan"], live)
            row.update(out)
            if opt is not None:
                row.update(state=blob, version=row["version"] + 1, stamp=stamp)
                kept.offer(row["q"], opt, len(blob))
        yield _built(rows, kept, fleet, stamp, resident)


def _arrow_schema() -> Any:
    import pyarrow as pa

    types = {"long": pa.int64(), "string": pa.string(), "binary": pa.large_binary(),
             "double": pa.float64(), "boolean": pa.bool_()}
    return pa.schema([(n, types[t]) for n, t in STATE_COLUMNS])


# -- the fleet --------------------------------------------------------------------------------

@dataclass
class Round:
    """What one round did: its per-query results (no state), its Spark jobs and wall time."""

    number: int
    results: list[dict[str, Any]]
    jobs: int
    seconds: float
    errors: list[str] = field(default_factory=list)
    resident: int = 0
    """Queries whose update found their optimizer resident in the task's Python worker."""

    def by_name(self) -> dict[str, dict[str, Any]]:
        return {r["name"]: r for r in self.results}


class Fleet:
    """Many standing queries, optimized together on Spark and re-optimized by rounds of
    deltas addressed by query name (module doc)."""

    def __init__(self, queries: Iterable[FleetQuery], catalog: Any = None, *,
                 cost_model: str = "io", pruning: str = "all", rules: str | Path | None = None,
                 spark: Any = None, partitions: int | None = None,
                 checkpoint: str | Path | None = None, progress: bool = False,
                 max_pairs: int | None = None, over_budget: str = "error",
                 program: Any = None, resident: int = RESIDENT_BYTES):
        from reopt.api import load_catalog
        from reopt.costmodel.catalog import Catalog
        from reopt.costmodel.models import cost_model as get_cost_model
        from reopt.evaluator.decompose import decomposition
        from reopt.evaluator.driver import load_program

        self.queries = list(queries)
        names = [fq.name for fq in self.queries]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise ReoptError(f"fleet: query name '{dup}' is used twice (deltas address "
                             "queries by name)")
        if not self.queries:
            raise ReoptError("fleet: no queries")
        get_cost_model(cost_model)  # a bad name fails here, not in every task
        program = program if program is not None else load_program(rules, pruning)
        why = decomposition(program)
        if not why.decomposable:
            raise ReoptError(f"fleet: the rule program is not decomposable by query id, so "
                             f"it cannot run a task per partition of queries: {why.reason}")
        if catalog is not None and not isinstance(catalog, Catalog):
            catalog = load_catalog(catalog)
        self.options = FleetOptions(program, cost_model, pruning, catalog, max_pairs,
                                    over_budget)
        self.spark = spark
        self.partitions = partitions
        self.checkpoint = str(checkpoint) if checkpoint is not None else None
        self.progress = progress
        self.state: Any = None
        """The state DataFrame (:data:`STATE_COLUMNS`), checkpointed, once optimized."""
        self.rounds = 0
        self.id = uuid.uuid4().hex
        """Names this fleet's optimizers resident in the Python workers (:class:`Resident`);
        a loaded fleet gets its own."""
        self.resident = resident
        """Stored bytes of state each Python worker keeps resident (0: none; module doc)."""

    # -- Spark plumbing ---------------------------------------------------------------------
    def _session(self) -> Any:
        if self.spark is None:
            from reopt.spark import get_spark

            self.spark = get_spark()
        if self.checkpoint is not None:
            self.spark.sparkContext.setCheckpointDir(self.checkpoint)
        return self.spark

    def _partitions(self) -> int:
        if self.partitions:
            return self.partitions
        cores = self._session().sparkContext.defaultParallelism
        return max(1, min(len(self.queries), 4 * cores))

    def _run(self, label: str, make: Any) -> Round:
        """Run one round: build the new state with ``make()``, checkpoint it reliably, read
        the results; counts the Spark jobs it took."""
        spark = self._session()
        sc = spark.sparkContext
        group = self.job_group()
        sc.setJobGroup(group, f"reopt fleet {label}")
        t0 = time.perf_counter()
        try:
            with _Progress(sc, group, label, self.progress):
                new = make().persist()
                new = new.checkpoint(eager=True)
                results = [r.asDict() for r in new.drop("state").collect()]
                for r in results:
                    r["step"] = bytes(r["step"]) if r["step"] is not None else None
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        seconds = time.perf_counter() - t0
        jobs = len(sc.statusTracker().getJobIdsForGroup(group))
        if self.state is not None:
            self.state.unpersist()
        self.state = new
        results.sort(key=lambda r: r["q"])
        rnd = Round(self.rounds, results, jobs, seconds,
                    [r["error"] for r in results if r["error"]],
                    sum(bool(r["resident"]) for r in results))
        self.rounds += 1
        return rnd

    def job_group(self) -> str:
        """The Spark job group of the next round (for watching it in the status tracker)."""
        return f"reopt-fleet-{id(self)}-{self.rounds}"

    # -- rounds -----------------------------------------------------------------------------
    def optimize(self) -> Round:
        """Round 0: every query optimized from scratch."""
        import pandas as pd

        spark = self._session()
        rows = pd.DataFrame({
            "q": list(range(len(self.queries))),
            "name": [fq.name for fq in self.queries],
            "sql": [fq.sql for fq in self.queries],
            "catalog": [json.dumps(fq.catalog) if fq.catalog is not None else None
                        for fq in self.queries],
            "deltas": [list(fq.deltas) for fq in self.queries],
            "seed": [fq.seed for fq in self.queries]})
        src = spark.createDataFrame(rows, "q long, name string, sql string, catalog string, "
                                    "deltas array<string>, seed binary")
        opts, fleet, stamp, cap = self.options, self.id, uuid.uuid4().hex, self.resident
        self.rounds = 0

        def make() -> Any:
            return (src.repartition(self._partitions(), "q")
                    .mapInArrow(lambda it: _initial_task(it, opts, fleet, stamp, cap),
                                _schema()))

        return self._run("optimize", make)

    def update(self, deltas: Iterable[Mapping[str, str]] | Mapping[str, Any]) -> Round:
        """One round of deltas: ``{"query": name, "delta": text}`` items (several for one
        query form one batch, applied all or nothing), or a mapping name → delta text(s).
        Queries without deltas keep their state untouched."""
        if self.state is None:
            raise ReoptError("fleet: optimize() (or load()) before update()")
        wanted = _by_query(deltas)
        known = {fq.name for fq in self.queries}
        unknown = sorted(set(wanted) - known)
        spark = self._session()
        bc = spark.sparkContext.broadcast({n: d for n, d in wanted.items() if n in known})
        state, fleet, stamp, cap = self.state, self.id, uuid.uuid4().hex, self.resident

        def make() -> Any:
            return state.mapInArrow(lambda it: _update_task(it, bc, fleet, stamp, cap),
                                    _schema())

        rnd = self._run("update", make)
        bc.unpersist()
        for n in unknown:
            what = "; ".join(wanted[n]) if isinstance(wanted[n], list) else "new statistics"
            msg = f"query {n}: no such query in the fleet (delta {what})"
            rnd.results.append({"q": None, "name": n, "error": msg})
            rnd.errors.append(msg)
        return rnd

    def results(self) -> Any:
        """The last round's results as a Spark DataFrame (:data:`RESULT_COLUMNS`)."""
        if self.state is None:
            raise ReoptError("fleet: optimize() first")
        return self.state.select(*(n for n, _ in RESULT_COLUMNS))

    def optimizer(self, name: str) -> Any:
        """The in-process optimizer of query ``name`` as the fleet holds it (its state read
        back to the driver): ``.relations()``, ``.graph()``, further ``.update()``s."""
        if self.state is None:
            raise ReoptError("fleet: optimize() first")
        rows = self.state.where(f"name = '{_quote(name)}'").select("state").collect()
        if not rows:
            raise ReoptError(f"fleet: no query named '{name}'")
        if rows[0]["state"] is None:
            raise ReoptError(f"fleet: query '{name}' failed to optimize; it has no state")
        return _load(rows[0]["state"])

    def optimizers(self) -> dict[str, Any]:
        """Every query's in-process optimizer as the fleet holds it, by name (all states read
        back to the driver: for small fleets)."""
        if self.state is None:
            raise ReoptError("fleet: optimize() first")
        return {r["name"]: _load(r["state"])
                for r in self.state.select("name", "state").collect()
                if r["state"] is not None}

    # -- saved state ------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Write the fleet (queries, options, state) to directory ``path``, for :meth:`load`
        in another driver."""
        if self.state is None:
            raise ReoptError("fleet: optimize() before save()")
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        self.state.write.mode("overwrite").parquet(str(out / "state.parquet"))
        meta = {"format": FORMAT, "rounds": self.rounds, "partitions": self.partitions}
        (out / "fleet.json").write_text(json.dumps(meta))
        (out / "fleet.pkl").write_bytes(pickle.dumps((self.queries, self.options)))

    @classmethod
    def load(cls, path: str | Path, *, spark: Any = None, checkpoint: str | Path | None = None,
             progress: bool = False, resident: int = RESIDENT_BYTES) -> Fleet:
        """A fleet saved by :meth:`save`; its next round continues where the saved one
        stopped."""
        base = Path(path)
        try:
            meta = json.loads((base / "fleet.json").read_text())
        except (OSError, ValueError) as e:
            raise ReoptError(f"{base}: not a saved fleet ({e})") from None
        if meta.get("format") != FORMAT:
            raise ReoptError(f"{base}: saved fleet format {meta.get('format')!r}; this reopt "
                             f"reads format {FORMAT}")
        queries, options = pickle.loads((base / "fleet.pkl").read_bytes())
        fleet = cls.__new__(cls)
        fleet.queries, fleet.options = queries, options
        fleet.spark, fleet.partitions = spark, meta.get("partitions")
        fleet.checkpoint = str(checkpoint) if checkpoint is not None else None
        fleet.progress, fleet.rounds, fleet.state = progress, meta["rounds"], None
        fleet.id, fleet.resident = uuid.uuid4().hex, resident
        sess = fleet._session()
        saved = _with_columns(sess.read.parquet(str(base / "state.parquet")))
        fleet.state = saved.repartition(fleet._partitions(), "q").checkpoint(eager=True)
        return fleet


def _with_columns(saved: Any) -> Any:
    """A saved state with every column of :data:`STATE_COLUMNS`, in order: a fleet saved
    before a column existed has it null (no stamp: nothing resident stands for its
    states)."""
    from pyspark.sql import functions as F

    have = set(saved.columns)
    return saved.select(*(F.col(n) if n in have else F.lit(None).cast(t).alias(n)
                          for n, t in STATE_COLUMNS))


def _quote(name: str) -> str:
    return name.replace("\\", "\\\\").replace("'", "\\'")


def _by_query(deltas: Iterable[Mapping[str, str]] | Mapping[str, Any]) -> dict[str, Any]:
    """Deltas grouped by query name, in order; a malformed item is a one-line error. A
    mapping's value may also be new statistics (``Adjustments``: the API's own updates)."""
    out: dict[str, Any] = {}
    if isinstance(deltas, Mapping):
        for name, d in deltas.items():
            if isinstance(d, str):
                out.setdefault(str(name), []).append(d)
            elif isinstance(d, (list, tuple)):
                out.setdefault(str(name), []).extend(d)
            else:
                out[str(name)] = d
        return out
    for i, item in enumerate(deltas):
        if not _is_delta_item(item):
            raise ReoptError(f"fleet deltas, item {i + 1}: expected {{\"query\": name, "
                             f"\"delta\": text}}, got {item!r}"[:300])
        out.setdefault(item["query"], []).append(item["delta"])
    return out


# -- reading a fleet --------------------------------------------------------------------------

def read_queries(spec: str | Path) -> list[FleetQuery]:
    """A fleet's queries from a directory of ``.sql`` files (each with its
    ``<name>.catalog.json`` when present, as ``benchmarks/workload.py`` writes them), a glob
    of ``.sql`` files, or a JSON lines file of ``{"name", "sql"[, "catalog"][, "deltas"]}``
    (``catalog``: a catalog object or a path; ``deltas``: applied before the first
    optimization)."""
    p = Path(spec)
    if p.is_dir():
        files = sorted(p.glob("*.sql"))
    elif p.suffix in (".jsonl", ".json") and p.is_file():
        return _json_queries(p)
    else:
        files = sorted(Path(f) for f in glob.glob(str(spec)))
        files = [f for f in files if f.suffix == ".sql"]
    if not files:
        raise ReoptError(f"{spec}: no .sql files (a fleet is a directory or glob of .sql "
                         "files, or a .jsonl file of {\"name\", \"sql\"} lines)")
    out = []
    for f in files:
        cat = f.with_name(f.stem + ".catalog.json")
        out.append(FleetQuery(f.stem, f.read_text(encoding="utf-8"),
                              _catalog_file(cat) if cat.exists() else None))
    return out


def _catalog_file(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ReoptError(f"{path}: cannot read catalog: {e}") from None


def _json_lines(path: Path, what: str) -> Iterator[tuple[int, Any]]:
    """(line number, value) of every non-blank line of a JSON lines file; a line that is not
    JSON is a one-line error naming the file and line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ReoptError(f"{path}: cannot read {what}: {e.strerror}") from None
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                yield n, json.loads(line)
            except ValueError as e:
                raise ReoptError(f"{path}:{n}: not JSON: {e}") from None


def _is_delta_item(item: Any) -> bool:
    """Whether ``item`` is a round's delta: ``{"query": name, "delta": text}``."""
    return isinstance(item, Mapping) and isinstance(item.get("query"), str) \
        and isinstance(item.get("delta"), str)


def _json_queries(path: Path) -> list[FleetQuery]:
    out = []
    for n, item in _json_lines(path, "queries"):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) \
                or not isinstance(item.get("sql"), str):
            raise ReoptError(f"{path}:{n}: expected {{\"name\": ..., \"sql\": ...}}")
        cat = item.get("catalog")
        if isinstance(cat, str):
            cat = _catalog_file(path.parent / cat)
        elif cat is not None and not isinstance(cat, dict):
            raise ReoptError(f"{path}:{n}: 'catalog' must be an object or a file path")
        deltas = item.get("deltas", [])
        if not isinstance(deltas, list) or not all(isinstance(d, str) for d in deltas):
            raise ReoptError(f"{path}:{n}: 'deltas' must be a list of delta texts")
        out.append(FleetQuery(item["name"], item["sql"], cat, tuple(deltas)))
    if not out:
        raise ReoptError(f"{path}: no queries")
    return out


def read_deltas(path: str | Path) -> list[dict[str, str]]:
    """One round's deltas: JSON lines ``{"query": name, "delta": text}``."""
    p = Path(path)
    out = []
    for n, item in _json_lines(p, "deltas"):
        if not _is_delta_item(item):
            raise ReoptError(f"{p}:{n}: expected {{\"query\": name, \"delta\": text}}")
        out.append(item)
    return out


# -- progress ---------------------------------------------------------------------------------

class _Progress:
    """A progress bar over a round's tasks (tqdm, on stderr), fed by polling Spark's status
    tracker; nothing when off."""

    def __init__(self, sc: Any, group: str, label: str, on: bool):
        self.sc, self.group, self.label, self.on = sc, group, label, on
        self._stop = threading.Event()

    def __enter__(self) -> _Progress:
        if self.on:
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.on:
            self._stop.set()
            self._thread.join()

    def _poll(self) -> None:
        from tqdm import tqdm

        tracker = self.sc.statusTracker()
        bar = tqdm(desc=f"fleet {self.label}", unit="task", leave=False)
        seen: dict[int, tuple[int, int]] = {}
        while not self._stop.wait(0.25):
            for job in tracker.getJobIdsForGroup(self.group):
                info = tracker.getJobInfo(job)
                for sid in info.stageIds if info else ():
                    st = tracker.getStageInfo(sid)
                    if st is not None:
                        seen[sid] = (st.numCompletedTasks, st.numTasks)
            done, total = sum(d for d, _ in seen.values()), sum(t for _, t in seen.values())
            bar.total = max(total, 1)
            bar.n = done
            bar.refresh()
        bar.close()

