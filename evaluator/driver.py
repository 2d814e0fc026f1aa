"""Run the optimizer program: rules → compiled plans → an engine → relations → best plans.

:func:`load_program` reads and compiles the rule files (the installed ``reopt.rules`` or a
directory given with ``--rules``/``rules=``). :func:`evaluate` runs one evaluation for a batch
of queries: each query gets an id ``q`` (its position in the batch), the input relation
``Expr(q, root, prop)`` names its root, and the built-in functions find its
:class:`~reopt.costmodel.space.PlanSpace` by ``q``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from importlib import resources
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from reopt.costmodel.builtins import BOOLEAN, BUILTINS, DOUBLE, LONG, STRING
from reopt.costmodel.errors import ReoptError
from reopt.costmodel.space import Alt, PlanSpace
from reopt.evaluator.ast import Program
from reopt.evaluator.budget import Budget
from reopt.evaluator.compiler import CompiledProgram, compile_program
from reopt.evaluator.frames import STRINGS, Frame, distinct
from reopt.evaluator.parser import parse, read_rule_file
from reopt.evaluator.python_engine import PythonEngine, Relation, RunStats
from reopt.plan import PlanCache, PlanNode

INPUTS = {"Expr": (LONG, LONG, STRING)}
RESULT_RELATIONS = ("SearchSpace", "PlanCost", "BestCost", "BestPlan", "Bound")
_ALT = (LONG, LONG, STRING, LONG, STRING, STRING, LONG, STRING, LONG, STRING)
REQUIRED: dict[str, tuple[str, ...]] = {
    "SearchSpace": _ALT,
    "PlanCost": (*_ALT, DOUBLE, DOUBLE),
    "BestCost": (LONG, LONG, STRING, DOUBLE),
    "BestPlan": (*_ALT, DOUBLE, DOUBLE),
}
"""The relations the driver reads plans and metrics from, with their column types: a rule
program must define each (``rules/optimizer.dl``'s R1-R10), or there is no plan to read."""
ENGINES = ("python", "spark")


def rule_files(rules: str | Path | None = None) -> list[Path]:
    """The ``*.dl`` files of a rules directory (default: the installed ``reopt.rules``)."""
    if rules is None:
        base = Path(str(resources.files("reopt.rules")))
    else:
        base = Path(rules)
        if not base.exists():
            raise ReoptError(f"{base}: rules directory not found")
        if not base.is_dir():
            raise ReoptError(f"{base}: not a directory (--rules/rules= names a directory of "
                             "*.dl files, e.g. a copy of rules/)")
    files = sorted(base.glob("*.dl"))
    if not files:
        raise ReoptError(f"{base}: no *.dl rule files")
    return files


PRUNING_MODES: dict[str, frozenset[str]] = {
    "none": frozenset(),
    "evita": frozenset({"aggsel"}),
    "aggsel": frozenset({"aggsel", "suppress"}),
    "aggsel+refcount": frozenset({"aggsel", "suppress", "refcount"}),
    "aggsel+bound": frozenset({"aggsel", "suppress", "bound"}),
    "all": frozenset({"aggsel", "suppress", "refcount", "bound"}),
}
"""Pruning mode → the features (rule-file declarations) it switches on. ``evita`` is the
Evita Raced baseline: pruning against equivalent plans only, never deleting plan-table
entries."""


def load_program(rules: str | Path | None = None, pruning: str = "none",
                 budget: Budget | None = None) -> CompiledProgram:
    """Read and compile the rule files with the features of pruning mode ``pruning``; its
    evaluations stop with an error beyond ``budget`` (default: :class:`Budget`'s).

    Compiled once per process for the same rule texts and mode (:data:`_COMPILED`); every call
    returns a program object of its own — optimizers given the same object are evaluated as
    one batch (``optimize_batch``), those loading their rules apart are not — sharing with
    the first one its variants (so the code generated for them) and the structures read off
    it (:meth:`CompiledProgram.memoized`: the maintenance plan, its cut variants and theirs).
    A fresh optimizer no longer pays them again in its first optimization and its first
    update (chain-12: about 1 ms of a 5 ms optimization from scratch)."""
    if pruning not in PRUNING_MODES:
        raise ReoptError(f"unknown pruning mode '{pruning}' "
                         f"(choose from {', '.join(PRUNING_MODES)})")
    t0 = time.perf_counter()
    files = rule_files(rules)
    source = ProgramSource(tuple((str(f), read_rule_file(f)) for f in files), pruning)
    first = _compiled(source)
    check_interface(first, files)
    if budget is None:
        budget = first.budget
    prog = replace(first, budget=budget, compile_seconds=time.perf_counter() - t0)
    if budget == first.budget:  # (another budget: structures of its own, as replace() gives)
        prog.derived = first.derived
    return prog


def _compiled(source: ProgramSource) -> CompiledProgram:
    """The program of ``source``, compiled once per process (:data:`_COMPILED`)."""
    prog = _COMPILED.get(source)
    if prog is None:
        parsed = Program()
        for name, text in source.files:
            parsed.extend(parse(text, name))
        prog = compile_program(parsed, BUILTINS, INPUTS, PRUNING_MODES[source.pruning])
        prog.source = source
        _COMPILED[source] = prog
    return prog


@dataclass(frozen=True)
class ProgramSource:
    """The rule files (name, text) and the pruning mode a program was compiled from: enough
    to compile it again in another process (a Spark worker, a restarted driver)."""

    files: tuple[tuple[str, str], ...]
    pruning: str


_COMPILED: dict[ProgramSource, CompiledProgram] = {}
"""Programs compiled from a source in this process: :func:`restore_program` hands them out
(a worker restores many states of one program: it compiles it once), :func:`load_program`
copies sharing their compilation."""


def restore_program(source: ProgramSource, budget: Budget) -> CompiledProgram:
    """The program compiled from ``source``, with ``budget`` (how a program unpickles)."""
    prog = _compiled(source)
    return prog if prog.budget == budget else replace(prog, budget=budget)


def check_interface(prog: CompiledProgram, files: list[Path]) -> None:
    """Refuse a program lacking a relation the driver reads (:data:`REQUIRED`), or defining
    one with other columns, naming the relation, what it should be and where it is defined —
    instead of a ``KeyError`` when the plan is read."""
    where = files[0].parent if len(files) > 1 else files[0]
    for pred, types in REQUIRED.items():
        have = prog.schemas.get(pred)
        if have is None:
            raise ReoptError(f"{where}: the rule files define no relation {pred}, which the "
                             f"optimizer reads the plan from ({pred}({', '.join(types)}); "
                             "see rules/optimizer.dl)")
        if have != types:
            rule = next((r for r in prog.rules if r.head.pred == pred), None)
            pos = rule.pos if rule else where
            raise ReoptError(f"{pos}: {pred} has columns ({', '.join(have)}) but the optimizer "
                             f"reads {pred}({', '.join(types)})")


@dataclass
class Evaluation:
    """The relations of one evaluation, and how to read plans out of them."""

    program: CompiledProgram
    spaces: dict[int, PlanSpace]
    relations: dict[str, Any]
    stats: RunStats
    input_sizes: dict[str, int]
    held_cache: dict[int, dict[str, int]] = field(default_factory=dict, repr=False)
    """:meth:`held` per query, computed at most once (on Spark it costs jobs). A session
    makes a new evaluation after every update (the python engine changes its relations in
    place), except after one that changed nothing, which hands this cache on."""
    plans: dict[int, PlanCache] = field(default_factory=dict, repr=False)
    """Per query, the last plan read (:meth:`best_plan`) and its nodes, which the next read
    reuses where nothing moved: a session hands it from each evaluation to the next."""

    def rows(self, pred: str) -> set[tuple]:
        return self.relations[pred].rows

    def query_rows(self, pred: str, q: int) -> list[tuple]:
        """The tuples of query ``q`` in relation ``pred`` (first column ``q``), sorted; on
        Spark only those tuples reach the driver."""
        rel = self.relations[pred]
        if hasattr(rel, "df"):
            from pyspark.sql import functions as F

            return sorted(tuple(r) for r in rel.df.where(F.col(rel.df.columns[0]) == q).collect())
        return sorted(r for r in rel.rows if r[0] == q)

    def best_cost(self, q: int) -> float:
        root = self.spaces[q].root
        rel = self.relations["BestCost"]
        if isinstance(rel, Relation):  # the root's group in the index kept by the engine
            costs = [r[3] for r in rel.index((0, 1, 2)).get((q, *root), ())]
        else:
            costs = [r[3] for r in self.rows("BestCost") if r[0] == q and (r[1], r[2]) == root]
        if not costs:
            raise ReoptError(f"query {self.spaces[q].query.name}: no plan was derived")
        return costs[0]

    def best_plan(self, q: int) -> PlanNode:
        """The best plan tree from BestPlan (ties broken by the smallest alternative)."""
        rel = self.relations["BestPlan"]
        first: Callable[[tuple[int, str]], tuple | None]
        if isinstance(rel, Relation):  # its tuples by OR node: an index kept up to date by
            # the engine, or (derived when read, and stale) derived for the plan's OR nodes
            # alone, so an update reads only the plan's tuples and does not follow the rest
            from reopt.evaluator.keyed import reader

            of_node = reader(rel, "BestPlan", 3)

            def first(node: tuple[int, str]) -> tuple | None:
                got = of_node((q, *node))
                return min(got) if got else None
        else:
            smallest: dict[tuple[int, str], tuple] = {}  # per OR node its smallest tuple
            for r in self.rows("BestPlan"):
                if r[0] == q:
                    had = smallest.setdefault((r[1], r[2]), r)
                    if r < had:
                        smallest[(r[1], r[2])] = r
            first = smallest.get
        space = self.spaces[q]

        def choose(node: tuple[int, str]) -> Alt:
            r = first(node)  # (an Alt made only for the plan's nodes, not every node's)
            if r is None:  # rules that cost a plan without a plan of each input
                raise ReoptError(f"query {space.query.name}: the best plan needs a plan of "
                                 f"{'/'.join(space.relations(node[0]))} ({node[1]}), and the "
                                 "rules derived none")
            return tuple.__new__(Alt, r[1:10])

        return self.plans.setdefault(q, PlanCache()).build_chosen(space, choose)

    def sizes(self) -> dict[str, int]:
        """Tuples per relation at the fixpoint, as the engine counted them (no extra pass
        over the relations; on Spark, no extra jobs) — but for the relations derived when
        read (``.ondemand``), on every engine: counting them would derive them."""
        lazy = self.program.ondemand
        if self.stats.held:
            return {p: n for p, n in self.stats.held.items() if p not in lazy}
        out = {}
        for p in self.program.schemas:
            if p in lazy:
                continue
            given = len(self.program.facts.get(p, ())) + self.input_sizes.get(p, 0)
            out[p] = given + self.stats.derived.get(p, 0)
        return out

    def held(self, q: int) -> dict[str, int]:
        """What query ``q`` holds at the fixpoint: OR nodes (distinct (expr, prop) of
        SearchSpace), AND nodes (SearchSpace tuples), and ``state_bytes``, the size of all its
        tuples in every relation but those derived when read (8 bytes per number, 1 per
        boolean, UTF-8 length of strings: the same definition on every engine)."""
        if q not in self.held_cache:
            self.held_cache[q] = self._held(q)
        return dict(self.held_cache[q])

    def _held(self, q: int) -> dict[str, int]:
        keyed = self._keyed()
        rels = {p: self.relations[p] for p in keyed}
        if any(hasattr(r, "df") for r in rels.values()):
            return _held_spark(self.program, rels, q, _WIDTHS)
        alone = list(self.spaces) == [q]  # a batch of one query: every tuple is its own

        def mine(rows: set[tuple]) -> Any:
            return rows if alone else [r for r in rows if r[0] == q]

        def framed(rel: Relation) -> Frame | None:  # (a frame of its tuples: counted on it)
            f = rel.as_frame()
            return f if f is None or alone else f.filter(f.cols["c0"] == q)

        state = 0
        for p, rel in rels.items():
            f = framed(rel)
            types = self.program.schemas[p]
            state += (_state_bytes(types, mine(rel.rows)) if f is None
                      else _frame_state_bytes(types, f))
        f = framed(self.relations["SearchSpace"])
        if f is not None:
            return {"or_nodes": distinct(f.select([("c1", "c1"), ("c2", "c2")])).height,
                    "and_nodes": f.height, "state_bytes": state}
        space = mine(self.rows("SearchSpace"))
        return {"or_nodes": len({r[1:3] for r in space}), "and_nodes": len(space),
                "state_bytes": state}

    def _keyed(self) -> list[str]:
        """The relations that hold queries' state: a query id first, not facts, and not
        derived when read (``.ondemand``: a step leaves them stale, and derived they are
        what the others determine)."""
        lazy = self.program.ondemand
        return [p for p, t in self.program.schemas.items() if t and t[0] == LONG
                and p not in self.program.facts and p not in lazy]

    def follow_held(self, before: dict[int, dict[str, int]],
                    changes: dict[str, tuple[Collection[tuple], set[tuple]]]) -> None:
        """:meth:`held` of the queries in ``before`` (an earlier evaluation's, of these same
        in-process relations) after ``changes`` (per relation, its tuples inserted or deleted
        since, and the tuples it holds now), from the changes alone instead of a pass over
        every relation, when they are fewer than half the tuples held (else :meth:`held`
        recounts, on demand): what an update's metrics cost then follows what it changed,
        or what is held, whichever is less. OR nodes are told apart through an index of
        SearchSpace by node (built once, then kept up to date)."""
        keyed = set(self._keyed())
        if any(hasattr(self.relations[p], "df") for p in keyed):
            return
        moved = [(p, diff, now) for p, (diff, now) in changes.items() if p in keyed]
        if 2 * sum(len(diff) for _, diff, _ in moved) >= sum(len(self.relations[p])
                                                              for p in keyed):
            return
        space = "SearchSpace"
        by_node = self.relations[space].index((0, 1, 2)) if space in changes else {}
        alone = len(self.spaces) == 1  # (one query: every tuple is its own)
        for q, was in before.items():
            held = dict(was)
            for p, diff, now in moved:
                mine = diff if alone else [r for r in diff if r[0] == q]
                came = [r for r in mine if r in now]
                went = [r for r in mine if r not in now] if len(came) < len(mine) else []
                types = self.program.schemas[p]
                held["state_bytes"] += _state_bytes(types, came) - _state_bytes(types, went)
                if p == space:
                    held["and_nodes"] += len(came) - len(went)
                    nodes = Counter(r[:3] for r in came)
                    nodes.subtract(r[:3] for r in went)
                    for node, n in nodes.items():  # present now, and before (n more ago)
                        count = len(by_node.get(node, ()))
                        held["or_nodes"] += (count > 0) - (count - n > 0)
            self.held_cache[q] = held

    def frames(self) -> dict[str, Any]:
        """Every relation as a frame with named columns: Spark DataFrames for the ``spark``
        engine, pandas DataFrames for ``python``."""
        out: dict[str, Any] = {}
        for pred in self.program.schemas:
            names = column_names(self.program, pred)
            rel = self.relations[pred]
            if hasattr(rel, "df"):
                out[pred] = rel.df.toDF(*names)
            else:
                import pandas as pd

                out[pred] = pd.DataFrame(sorted(rel.rows), columns=names)
        return out


_WIDTHS = {LONG: 8, DOUBLE: 8, BOOLEAN: 1}
"""Bytes per value of a column type of fixed width (``state_bytes``); any other column
counts the UTF-8 length of its value."""


def _frame_state_bytes(types: tuple[str, ...], f: Frame) -> int:
    """:func:`_state_bytes` of a frame's rows (a relation whose tuples are not made): each
    string column's distinct codes counted, each decoded once."""
    state = f.height * sum(_WIDTHS[t] for t in types if t in _WIDTHS)
    for i, t in enumerate(types):
        if t not in _WIDTHS:
            codes, n = np.unique(f.cols[f"c{i}"], return_counts=True)
            values = STRINGS.decode(codes) if t == STRING else codes
            state += sum(len(str(v).encode()) * k
                         for v, k in zip(values.tolist(), n.tolist(), strict=True))
    return state


def _state_bytes(types: tuple[str, ...], rows: Any) -> int:
    """``state_bytes`` of ``rows`` (a collection of tuples of one relation of column
    ``types``): the fixed width of its numeric and boolean columns per tuple, plus the UTF-8
    length of each other column — counted per distinct value (a string column holds a few
    distinct values)."""
    if not rows:
        return 0
    state = len(rows) * sum(_WIDTHS[t] for t in types if t in _WIDTHS)
    for i, t in enumerate(types):
        if t not in _WIDTHS:  # (one column read in C, not the tuples transposed)
            state += sum(len(str(v).encode()) * n
                         for v, n in Counter(map(itemgetter(i), rows)).items())
    return state


def _held_spark(program: CompiledProgram, rels: dict[str, Any], q: int,
                widths: dict[str, int]) -> dict[str, int]:
    from pyspark.sql import functions as F

    ss = rels["SearchSpace"].df.toDF(*column_names(program, "SearchSpace")).where(F.col("q") == q)
    row = ss.agg(F.count("*").alias("a"),
                 F.countDistinct("expr", "prop").alias("o")).collect()[0]
    state = 0
    for p, rel in rels.items():
        types = program.schemas[p]
        cols = rel.df.columns
        size = sum((F.lit(widths[t]) if t in widths else F.length(F.col(c)))
                   for c, t in zip(cols, types, strict=True))
        got = rel.df.where(F.col(cols[0]) == q).agg(F.sum(size)).collect()[0][0]
        state += int(got or 0)
    return {"or_nodes": int(row["o"]), "and_nodes": int(row["a"]), "state_bytes": state}


def column_names(program: CompiledProgram, pred: str) -> list[str]:
    """Column names of a relation: per position, the first variable name any rule head
    defining it uses there (``c<i>`` where none does, and for facts)."""
    if pred == "Expr":
        return ["q", "expr", "prop"]
    n = len(program.schemas[pred])
    names: list[str | None] = [None] * n
    for rule in program.rules:
        if rule.head.pred == pred:
            for i, a in enumerate(rule.head.args):
                name = getattr(getattr(a, "var", a), "name", None)
                if name and name.startswith("_"):
                    name = None  # a variable the compiler made up for head arithmetic
                if names[i] is None and name and name not in names:
                    names[i] = name
    return [name or f"c{i}" for i, name in enumerate(names)]


def evaluate(
    spaces: list[PlanSpace],
    engine: str = "python",
    rules: str | Path | None = None,
    program: CompiledProgram | None = None,
) -> Evaluation:
    prog = program or load_program(rules)
    ctx = dict(enumerate(spaces))
    inputs = {"Expr": [(q, *s.root) for q, s in ctx.items()]}
    if engine == "python":
        rels, stats = PythonEngine(prog, ctx).evaluate(inputs)
    elif engine == "spark":
        from reopt.evaluator.spark_engine import SparkEngine

        rels, stats = SparkEngine(prog, ctx).evaluate(inputs)
    else:
        raise ReoptError(f"unknown engine '{engine}' (choose from {', '.join(ENGINES)})")
    sizes = {p: len(set(rows)) for p, rows in inputs.items()}
    ev = Evaluation(prog, ctx, rels, stats, sizes)
    if prog.features.bound and not set(inputs["Expr"]) <= {r[:3] for r in ev.rows("BestCost")}:
        # A seed bound left some query without a plan: it was below that query's optimum,
        # which happens only when the rules' space lacks a plan the seed costed (edited rules
        # deleting an operator its greedy plan uses). Without bounds, then: exact again.
        return evaluate(spaces, engine, program=without_bounds(prog))
    return ev


def without_bounds(program: CompiledProgram) -> CompiledProgram:
    """``program`` with its ``.bound`` pruning off (the strata stay as they are)."""
    return replace(program, features=replace(program.features, bound={}))
