"""Pruning inside the datalog evaluation (python engine): every mode finds the optimum, and
what each mode holds at the fixpoint and every Bound are what an independent recursion over
the plan space says they must be."""

from __future__ import annotations

import math
from functools import cache

import pytest
import schedules
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from randq import SHAPES, make_query
from rulefiles import ONDEMAND_PLAN, edited_rules

from reopt.api import Optimizer
from reopt.costmodel.builtins import BUILTINS, LONG, SEED_SLACK, STRING, Builtin
from reopt.costmodel.errors import ReoptError
from reopt.costmodel.models import cost_model
from reopt.costmodel.space import Alt, PlanSpace, plan_cost
from reopt.evaluator.compiler import compile_program
from reopt.evaluator.driver import INPUTS, PRUNING_MODES, evaluate, load_program, rule_files
from reopt.evaluator.features import DirectiveError
from reopt.evaluator.parser import parse, parse_files
from reopt.evaluator.python_engine import PythonEngine
from reopt.optimizers.greedy import greedy
from reopt.optimizers.topdown import topdown

PROGRAMS = {mode: load_program(pruning=mode) for mode in PRUNING_MODES}
TPCH = ("tpch:q3", "tpch:q10", "tpch:q5", "tpch:q5s", "tpch:q8join", "tpch:q8joins")


class Oracle:
    """Best cost of every OR node and of every AND node, by plain recursion (no datalog)."""

    def __init__(self, space: PlanSpace):
        self.space = space

        @cache
        def best(node: tuple[int, str]) -> float:
            return min((self.cost(a) for a in space.alternatives(*node)), default=math.inf)

        self.best = best

    def cost(self, alt: Alt) -> float:
        return plan_cost(self.space.local_cost(alt), *(self.best(c) for c in alt.children))

    def optimal_and_nodes(self) -> set[Alt]:
        """AND nodes that are the cheapest of their OR node, over every reachable OR node."""
        return {a for node in self.space.or_nodes() for a in self.space.alternatives(*node)
                if self.cost(a) == self.best(node)}

    def optimal_trees(self) -> set[Alt]:
        """AND nodes on some optimal plan tree of the root (ties: every optimal tree)."""
        out: set[Alt] = set()
        todo = [self.space.root]
        seen = set(todo)
        while todo:
            node = todo.pop()
            for a in self.space.alternatives(*node):
                if self.cost(a) == self.best(node):
                    out.add(a)
                    for c in a.children:
                        if c not in seen:
                            seen.add(c)
                            todo.append(c)
        return out


def held_and_nodes(ev) -> set[Alt]:
    return {Alt(*r[1:10]) for r in ev.rows("SearchSpace")}


def check_mode(space: PlanSpace, mode: str) -> None:
    oracle = Oracle(space)
    ev = evaluate([space], "python", program=PROGRAMS[mode])
    assert ev.best_cost(0) == oracle.best(space.root)
    assert ev.best_plan(0).cost == oracle.best(space.root)
    held = held_and_nodes(ev)
    seed = greedy(space).cost * (1 + SEED_SLACK)  # the seed bound: a plan's cost, rounded up
    within = {n for n in space.or_nodes() if oracle.best(n) <= seed}
    if mode == "evita":  # prunes plans only, never plan-table entries
        assert len(held) == space.size()["and_nodes"]
    elif mode == "aggsel":  # suppression: only optimal plans stay
        assert held == oracle.optimal_and_nodes()
    elif mode == "aggsel+bound":  # and only of OR nodes whose optimum is within the seed:
        # a node above it has every plan rejected, and its parents' plans are never costed
        assert held == {a for a in oracle.optimal_and_nodes() if (a.expr, a.prop) in within}
    elif mode in ("aggsel+refcount", "all"):  # and only those some optimal tree uses
        assert held == oracle.optimal_trees()
    costs = {(r[1], r[2]): r[3] for r in ev.rows("BestCost")}
    for node, cost in costs.items():
        assert cost == oracle.best(node)
    if mode == "aggsel+bound":
        assert set(costs) == within
    check_bounds(space, ev, oracle)


def check_bounds(space: PlanSpace, ev, oracle: Oracle) -> None:
    """Bound (rules/bounds.dl) against its definition, evaluated parents-first over the AND
    nodes the evaluation kept a cost for, with the same floating-point operations."""
    costed = {Alt(*r[1:10]) for r in ev.rows("PlanCost")}
    best = {(r[1], r[2]): r[3] for r in ev.rows("BestCost")}
    parents: dict[tuple[int, str], list[Alt]] = {}
    for a in costed:
        for c in a.children:
            parents.setdefault(c, []).append(a)
    bound: dict[tuple[int, str], float] = {}
    for node in sorted(best, key=lambda n: -space.rank(*n)):
        allowed = []
        for a in parents.get(node, ()):
            if (a.expr, a.prop) not in bound:
                continue
            local = space.local_cost(a)
            sib = [c for c in a.children if c != node]
            if sib and sib[0] not in best:
                continue
            b = bound[(a.expr, a.prop)]
            allowed.append(b - best[sib[0]] - local if sib else b - local)
        bound[node] = min([best[node], max(allowed)] if allowed else [best[node]])
    got = {(r[1], r[2]): r[3] for r in ev.rows("Bound")}
    assert got == bound
    # Proposition 7: the optimal plan's sub-plans are within their bounds (up to the rounding
    # of subtracting costs from the root's: relative to the root's cost)
    slack = 1e-12 * oracle.best(space.root)
    for a in oracle.optimal_trees():
        node = (a.expr, a.prop)
        if node in got:
            assert oracle.best(node) <= got[node] + slack


# without pruning PlanCost has a tuple per distinct plan-tree cost: only the small spaces
NO_PRUNING = {("tpch:q3", "io"), ("tpch:q3", "cout"), ("tpch:q10", "io"), ("tpch:q10", "cout"),
              ("tpch:q5", "cout"), ("tpch:q5s", "cout")}


@pytest.mark.parametrize("query, model, mode", [
    (q, m, mode) for q in TPCH for m in ("io", "cout") for mode in PRUNING_MODES
    if mode != "none" or (q, m) in NO_PRUNING
])
def test_tpch(query, model, mode):
    space = Optimizer(query, cost_model=model, optimizer="topdown").space()
    check_mode(space, mode)
    assert evaluate([space], "python", program=PROGRAMS[mode]).best_cost(0) == \
        topdown(space).cost


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 6), seed=st.integers(0, 2**31),
       model=st.sampled_from(["io", "cout"]),
       mode=st.sampled_from([m for m in PRUNING_MODES if m != "none"]))
def test_random_queries(shape, n, seed, model, mode):
    q, cat = make_query(shape, n, seed)
    check_mode(PlanSpace(q, cat, cost_model(model)), mode)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), n=st.integers(2, 4), seed=st.integers(0, 2**31))
def test_bounds_without_pruning(shape, n, seed):
    q, cat = make_query(shape, n, seed)
    space = PlanSpace(q, cat, cost_model("cout"))
    check_mode(space, "none")


@pytest.mark.parametrize("query", TPCH)
def test_rank_separates_parents_from_children(query):
    space = Optimizer(query, cost_model="io", optimizer="topdown").space()
    for node in space.or_nodes():
        for a in space.alternatives(*node):
            for c in a.children:
                assert space.rank(*c) < space.rank(*node)


def test_batch_equals_one_by_one():
    spaces = [Optimizer(q, cost_model="io", optimizer="topdown").space()
              for q in ("tpch:q3", "tpch:q5", "tpch:q10")]
    together = evaluate(spaces, "python", program=PROGRAMS["all"])
    for q, space in enumerate(spaces):
        alone = evaluate([space], "python", program=PROGRAMS["all"])
        for pred in ("SearchSpace", "PlanCost", "BestCost", "Bound", "Goal"):
            assert {r[1:] for r in together.rows(pred) if r[0] == q} == \
                {r[1:] for r in alone.rows(pred)}, pred


def test_metrics_in_a_step():
    m = Optimizer("tpch:q5", cost_model="io", engine="python").optimize().metrics
    assert m["search_space"] == {"or_nodes": 100, "and_nodes": 592}
    assert m["held"]["and_nodes"] < m["search_space"]["and_nodes"]
    assert m["pruning_ratio"]["and"] == 1 - m["held"]["and_nodes"] / 592
    assert m["derived"]["SearchSpace"] == 592 and m["state_bytes"] > 0
    evita = Optimizer("tpch:q5", cost_model="io", engine="python", pruning="evita")
    assert evita.optimize().metrics["pruning_ratio"] == {"or": 0.0, "and": 0.0}


# --- the declarations are checked --------------------------------------------------------------


@pytest.mark.parametrize("extra, message", [
    (".prune PlanCost.", "unknown directive"),
    (".aggsel Goal.", "min<>/max<> over a single relation"),
    (".schedule sideways Fn_rank Goal.", "ascending|descending"),
    (".schedule ascending Fn_sum Goal.", "not a built-in with one integer output"),
    (".suppress PlanCost Nothing.", "unknown relation Nothing"),
    (".schedule ascending Fn_rank BestPlan BestPlan.", "already scheduled"),
    (".bound PlanCost BestPlan.", "PlanCost already has a bound"),
    (".bound Goal BestCost.", "needs aggregate selection on Goal"),
])
def test_bad_directives(tmp_path, extra, message):
    with pytest.raises(DirectiveError, match=message) as e:
        load_program(edited_rules(tmp_path, extra=extra), pruning="all")
    assert ".dl:" in str(e.value)


@pytest.mark.parametrize("bound", ["BestPlan", "Expr"])
def test_a_bound_relation_is_keyed_by_the_group(tmp_path, bound):
    """A bound's columns are a prefix of the group's and its value: BestPlan has twelve
    (declared eager here: a relation derived when read cannot be a bound at all)."""
    rules = edited_rules(tmp_path, ".bound PlanCost SeedBound.", f".bound PlanCost {bound}.")
    plan = rules / "optimizer.dl"
    plan.write_text(plan.read_text().replace(ONDEMAND_PLAN, ""))
    with pytest.raises(DirectiveError, match="optimizer.dl:.*" + (
            "BestPlan must have leading group columns of BestCost" if bound == "BestPlan"
            else "Expr has no rules")):
        load_program(rules, pruning="all")


@pytest.mark.parametrize("body", ["R(k, v), v > 1", "R(k, v), S(k, _)", "!S(k, v), R(k, v)"])
def test_aggsel_needs_an_aggregate_of_one_atom(body):
    """Aggregate selection compares candidates with the aggregate of ONE input relation; an
    aggregate whose rule also filters or joins is not that relation's min and is refused."""
    text = f"S(1, 1). S(1, 5). R(k, v) :- S(k, v). A(k, min<v>) :- {body}. .aggsel A."
    with pytest.raises(DirectiveError, match="min<>/max<> over a single relation"):
        compile_program(parse(text), BUILTINS, {}, frozenset({"aggsel"}))
    compile_program(parse(text.replace(" .aggsel A.", "")), BUILTINS, {}, frozenset({"aggsel"}))


def test_aggregate_in_recursion_needs_a_schedule(tmp_path):
    rules = edited_rules(tmp_path, ".schedule descending Fn_rank ParentBound MaxBound Bound.",
                         "", file="bounds.dl")
    with pytest.raises(ReoptError, match="not stratifiable"):
        load_program(rules)


def test_a_rank_that_does_not_separate_is_an_error(tmp_path):
    # rank by the number of relations only: an enforcer's input (the same expression) gets
    # the rank of the enforcer, so its bound arrives after its rank was released
    flat = Builtin("Fn_flat", (LONG, LONG, STRING), (LONG,),
                   lambda ctx, q, e, p: [(bin(e).count("1"),)])
    rules = edited_rules(tmp_path, "Fn_rank ParentBound", "Fn_flat ParentBound",
                         file="bounds.dl")
    program = compile_program(parse_files(rule_files(rules)), {**BUILTINS, "Fn_flat": flat},
                              INPUTS)
    space = Optimizer("tpch:q3", cost_model="io", optimizer="topdown").space()
    ev = evaluate([space], "python", program=program)  # (the bounds are derived when read)
    for _ in range(2):  # (a failed derivation leaves them stale: read again, it fails again)
        with pytest.raises(ReoptError, match="Fn_flat.* has rank"):
            ev.rows("Bound")


# --- the steps of a rank ---------------------------------------------------------------------


def test_rank_steps_of_the_optimizer():
    """Costing and bounds release each rank as a fixed sequence — plain relations, then each
    aggregate after its inputs (README, "Scheduling and pruning") — which lets Spark settle a
    rank with one job."""
    fused = {s.preds: s.steps.fused for s in PROGRAMS["all"].strata if s.steps}
    assert fused == {("BestCost", "PlanCost"): (("PlanCost",), ("BestCost",)),
                     ("Bound", "MaxBound", "ParentBound"):
                         (("ParentBound",), ("MaxBound",), ("Bound",))}


@pytest.mark.parametrize("text, fused", [(schedules.FUSED, (("Reach",), ("Best",))),
                                         (schedules.STEPWISE, None)])
def test_rank_steps_fused_or_stepwise(text, fused):
    """A rule keeping the rank into a plain relation rules the fixed sequence out; either
    way the relations are the oracle's, and a rank takes one step per relation released."""
    program = schedules.program(text)
    (stratum,) = [s for s in program.strata if s.steps]
    assert stratum.steps.fused == fused
    rels, stats = PythonEngine(program, {}).evaluate({})
    assert rels["Best"].rows == schedules.distances()
    levels = {n // 10 for n, _ in schedules.distances()}
    per_rank = 2 if fused else 3  # Reach, Best (+ Via before Reach)
    assert stats.iterations == 2 + per_rank * (len(levels) - 1)  # the root's rank: no Via
