"""The and-or graph of ``Optimizer.graph()`` (reopt/graph.py): it covers the full plan space,
its held state and counts are the evaluation's (and the metrics'), the best plan is flagged,
costs agree with an independent recursion, and the exports have the documented shape."""

from __future__ import annotations

import math
import re
import sys
import types

import networkx as nx
import pandas as pd
import pytest

from reopt.api import Optimizer, optimize_batch
from reopt.costmodel.errors import ReoptError
from reopt.costmodel.space import Alt, plan_cost
from reopt.graph import EDGE_COLUMNS, VERTEX_COLUMNS, AndOrGraph, main

CASES = [(q, m) for q in ("tpch:q5", "tpch:q3") for m in ("io", "cout")]


def optimized(query: str, model: str, pruning: str = "all", **kw):
    opt = Optimizer(query, cost_model=model, engine="python", pruning=pruning, **kw)
    step = opt.optimize()
    return opt, step, opt.graph()


def oracle(space) -> dict[tuple[int, str], float]:
    """Cheapest plan of every OR node by plain recursion (no datalog, no graph code)."""
    memo: dict[tuple[int, str], float] = {}

    def best(node):
        if node not in memo:
            memo[node] = min(
                (plan_cost(space.local_cost(a), *(best(c) for c in a.children))
                 for a in space.alternatives(*node)), default=math.inf)
        return memo[node]

    return {n: best(n) for n in space.or_nodes()}


@pytest.mark.parametrize("query, model", CASES)
def test_counts_match_metrics(query, model):
    opt, step, g = optimized(query, model)
    counts = g.counts()
    assert counts["search_space"] == step.metrics["search_space"]
    assert counts["held"] == step.metrics["held"]
    # held + pruned = the full space, nothing else
    for nodes in (g.or_nodes, g.and_nodes):
        states = [n.state for n in nodes.values()]
        assert set(states) <= {"held", "pruned"}
    assert (sum(o.state == "pruned" for o in g.or_nodes.values()) + counts["held"]["or_nodes"]
            == step.metrics["search_space"]["or_nodes"])
    assert (sum(a.state == "pruned" for a in g.and_nodes.values())
            + counts["held"]["and_nodes"] == step.metrics["search_space"]["and_nodes"])
    # something really is pruned under "all" on Q5 io (100 OR / 592 AND, 12 / 13 held)
    if (query, model) == ("tpch:q5", "io"):
        assert counts["held"] == {"or_nodes": 12, "and_nodes": 13}
        assert counts["search_space"] == {"or_nodes": 100, "and_nodes": 592}


@pytest.mark.parametrize("query, model", CASES)
def test_held_state_is_the_evaluations(query, model):
    opt, step, g = optimized(query, model)
    rel = opt.relations()
    held = {Alt(*r[1:10]) for r in rel["SearchSpace"].itertuples(index=False)}
    assert {a.alt for a in g.and_nodes.values() if a.state == "held"} == held
    goal = {(r.expr, r.prop) for r in rel["Goal"].itertuples(index=False)}
    held_or = {(o.expr, o.prop) for o in g.or_nodes.values() if o.state == "held"}
    assert held_or == goal  # under "all", Goal is exactly the OR nodes still referenced
    best = {(r.expr, r.prop): r.cost for r in rel["BestCost"].itertuples(index=False)}
    bound = {(r.expr, r.prop): r.bound for r in rel["Bound"].itertuples(index=False)}
    for o in g.or_nodes.values():
        assert o.best_cost == best.get((o.expr, o.prop))
        assert o.bound == bound.get((o.expr, o.prop))
        # a held OR node is referenced (the root by the query); a pruned one by nothing held
        assert (o.refcount > 0) == (o.state == "held"), o.id
    assert g.or_nodes[g.root].refcount == 1
    for a in g.and_nodes.values():
        assert (a.cost is not None) == (a.state == "held"), a.id
        if a.state == "held":  # every input of a held plan is held
            assert all(g.or_nodes[c].state == "held" for c in a.children)


@pytest.mark.parametrize("query, model", CASES)
def test_costs_agree_with_recursion(query, model):
    opt, step, g = optimized(query, model)
    want = oracle(g.space)
    assert len(want) == len(g.or_nodes)
    for o in g.or_nodes.values():
        assert o.min_cost == want[(o.expr, o.prop)]
        if o.state == "held":
            assert o.best_cost == pytest.approx(o.min_cost, rel=1e-12)
            # Proposition 7: the bound never exceeds the best cost
            assert o.bound <= o.best_cost * (1 + 1e-9)
    for a in g.and_nodes.values():
        assert a.local_cost == g.space.local_cost(a.alt)
        assert a.min_cost == plan_cost(a.local_cost, *(want[(c.expr, c.prop)] for c in
                                                       map(g.or_nodes.get, a.children)))
        if a.state == "held":
            assert a.cost == pytest.approx(a.min_cost, rel=1e-12)
            # under "all" only optimal alternatives stay
            assert a.cost == pytest.approx(g.or_nodes[a.or_id].best_cost, rel=1e-12)
        else:  # pruned alternatives of held OR nodes were not cheaper than the best
            o = g.or_nodes[a.or_id]
            if o.state == "held":
                assert a.min_cost >= o.best_cost * (1 - 1e-12)
    assert g.subplan(g.root).cost == pytest.approx(step.cost, rel=1e-12)


@pytest.mark.parametrize("query, model", CASES)
def test_best_plan_is_flagged(query, model):
    opt, step, g = optimized(query, model)
    plan_alts = [n.alt for n in step.plan.walk()]
    flagged = [a for a in g.and_nodes.values() if a.on_best_plan]
    assert sorted(a.alt for a in flagged) == sorted(set(plan_alts))
    assert {o.id for o in g.or_nodes.values() if o.on_best_plan} == {
        f"or:{a.expr}:{a.prop}" for a in plan_alts}
    assert g.or_nodes[g.root].on_best_plan
    assert all(a.state == "held" for a in flagged)
    assert all(g.or_nodes[a.or_id].on_best_plan for a in flagged)
    # one flagged alternative per flagged OR node: a tree, not a set of ties
    assert len({a.or_id for a in flagged}) == len(flagged)
    # the flagged AND nodes form the best plan: their costs add up to the step's cost
    root_alt = next(a for a in flagged if a.or_id == g.root)
    assert root_alt.cost == pytest.approx(step.cost, rel=1e-12)
    assert g.best_plan.cost == step.plan.cost


def test_pruning_none_holds_everything_with_cheapest_plancost():
    opt, step, g = optimized("tpch:q3", "io", pruning="none")
    assert g.counts()["held"] == g.counts()["search_space"] == step.metrics["held"]
    assert step.metrics["relations"]["PlanCost"] > step.metrics["held"]["and_nodes"]
    for a in g.and_nodes.values():
        assert a.cost == pytest.approx(a.min_cost, rel=1e-12)  # min over its PlanCost tuples
    _, _, g_all = optimized("tpch:q3", "io")
    assert g_all.counts()["held"]["and_nodes"] < g.counts()["held"]["and_nodes"]
    assert g_all.counts()["search_space"] == g.counts()["search_space"]


def test_batch_members_get_their_own_query():
    opts = [Optimizer(q, cost_model="cout", engine="python") for q in ("tpch:q3", "tpch:q5")]
    steps = optimize_batch(opts)
    for o, s in zip(opts, steps, strict=True):
        g = o.graph()
        assert g.query == o.query.name
        assert g.counts() == {"search_space": s.metrics["search_space"],
                              "held": s.metrics["held"]}
        assert g.or_nodes[g.root].best_cost == s.cost


def test_procedural_optimizer_state_unknown():
    opt = Optimizer("tpch:q5", cost_model="io", optimizer="topdown")
    step = opt.optimize()
    g = opt.graph()
    assert g.counts()["search_space"] == step.metrics["search_space"]
    assert {n.state for n in [*g.or_nodes.values(), *g.and_nodes.values()]} == {"unknown"}
    assert all(o.best_cost is None and o.bound is None and o.refcount is None
               for o in g.or_nodes.values())
    assert all(a.cost is None for a in g.and_nodes.values())
    assert sorted(a.alt for a in g.and_nodes.values() if a.on_best_plan) == sorted(
        n.alt for n in step.plan.walk())
    assert "unknown" in repr(g)


def test_graph_needs_optimize_first():
    with pytest.raises(ReoptError, match="optimize"):
        Optimizer("tpch:q3", engine="python").graph()


def test_node_ids_and_lookups():
    opt, step, g = optimized("tpch:q5", "io")
    assert g.root == f"or:{g.space.root[0]}:any"
    assert all(i.startswith("or:") for i in g.or_nodes)
    assert all(i.startswith("and:") for i in g.and_nodes)
    ol = g.or_node(["orders", "lineitem"])
    assert ol.relations == ("orders", "lineitem") and ol.label == "{orders,lineitem}"
    alts = g.alternatives(ol)
    assert [a.alt for a in alts] == g.space.alternatives(ol.expr, ol.prop)
    assert [a.position for a in alts] == list(range(len(alts)))
    assert all(ol.id in a.children for a in g.parents(ol))
    with pytest.raises(ReoptError, match="unknown aliases"):
        g.or_node(["nosuch"])
    with pytest.raises(ReoptError, match="no node"):
        g.node("or:0:any")
    # ids are stable: a second optimization gives the same ones
    opt.optimize()
    assert list(opt.graph().and_nodes) == list(g.and_nodes)


def test_pandas_exports_shape():
    opt, step, g = optimized("tpch:q5", "io")
    v, e = g.vertices(), g.edges()
    assert isinstance(v, pd.DataFrame) and isinstance(e, pd.DataFrame)
    assert list(v.columns) == list(VERTEX_COLUMNS)
    assert list(e.columns) == list(EDGE_COLUMNS)
    assert v["id"].is_unique
    assert len(v) == sum(step.metrics["search_space"].values())
    assert (v["kind"] == "or").sum() == step.metrics["search_space"]["or_nodes"]
    assert ((v["kind"] == "and") & (v["state"] == "held")).sum() == step.metrics["held"][
        "and_nodes"]
    assert set(e["src"]) | set(e["dst"]) <= set(v["id"])
    alt_edges = e[e["kind"] == "alternative"]
    assert len(alt_edges) == step.metrics["search_space"]["and_nodes"]
    inputs = e[e["kind"] == "input"]
    assert len(inputs) == sum(len(a.children) for a in g.and_nodes.values())
    assert set(inputs["side"]) == {"left", "right"}
    kinds = dict(zip(v["id"], v["kind"], strict=True))
    assert all(kinds[s] == "or" and kinds[d] == "and" for s, d in zip(
        alt_edges["src"], alt_edges["dst"], strict=True))
    assert all(kinds[s] == "and" and kinds[d] == "or" for s, d in zip(
        inputs["src"], inputs["dst"], strict=True))
    # nullable columns: OR-only attributes are null on AND rows and vice versa
    ands = v[v["kind"] == "and"]
    assert ands["best_cost"].isna().all() and ands["phy_op"].notna().all()
    assert v.loc[v["kind"] == "or", "phy_op"].isna().all()
    assert v["refcount"].dtype.name == "Int64" and v["on_best_plan"].dtype.name == "boolean"
    assert v["on_best_plan"].sum() == 2 * len(list(step.plan.walk()))


def test_networkx_export():
    opt, step, g = optimized("tpch:q3", "io")
    nxg = g.to_networkx()
    assert nxg.number_of_nodes() == len(g.or_nodes) + len(g.and_nodes)
    assert nxg.number_of_edges() == len(g.edges())
    assert nx.is_directed_acyclic_graph(nxg)
    assert nxg.graph["root"] == g.root and nxg.in_degree(g.root) == 0
    assert set(nx.descendants(nxg, g.root)) == set(nxg.nodes) - {g.root}
    assert set(nxg.nodes[g.root]) == set(VERTEX_COLUMNS) - {"id"}
    u, w, d = next(iter(nxg.edges(data=True)))
    assert set(d) == set(EDGE_COLUMNS) - {"src", "dst"}
    # drawing layers: every edge goes strictly down
    layer = g.layers()
    assert all(layer[a] > layer[b] for a, b in nxg.edges)
    # number of plan trees, counted on the exported graph, is the plan space's
    trees: dict[str, float] = {}
    for n in reversed(list(nx.topological_sort(nxg))):
        kids = list(nxg.successors(n))
        if nxg.nodes[n]["kind"] == "or":
            trees[n] = sum(trees[k] for k in kids)
        else:
            trees[n] = math.prod(trees[k] for k in kids)
    assert trees[g.root] == g.space.count_trees()


def test_draw_and_reprs(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    opt, step, g = optimized("tpch:q3", "io")
    ax = g.draw()
    texts = {t.get_text() for t in ax.texts}
    assert {n.op for n in step.plan.walk()} <= texts  # best-plan nodes are labelled
    assert "tpch:q3" in ax.get_title()
    plt.close("all")
    svg = g._repr_svg_()
    assert "<svg" in svg and "</svg>" in svg
    assert plt.get_fignums() == []  # the SVG repr does not leave pyplot figures behind
    assert "held 6 OR / 6 AND" in repr(g) and "<svg" in g._repr_html_()
    with pytest.raises(ReoptError, match="labels"):
        g.draw(labels="bogus")
    plt.close("all")
    html = step.plan._repr_html_()
    assert html.startswith("<pre>") and "hashagg" in html
    out = tmp_path / "g.png"
    assert main(["tpch:q3", "--cost-model", "cout", "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_docs_figure_is_reproducible(tmp_path):
    """docs/and-or-graph.png is what ``python -m reopt.graph tpch:q5 -o …`` draws."""
    from pathlib import Path

    out = tmp_path / "and-or-graph.png"
    assert main(["tpch:q5", "-o", str(out)]) == 0
    docs = Path(__file__).resolve().parents[1] / "docs" / "and-or-graph.png"
    assert docs.is_file()
    from PIL import Image

    with Image.open(out) as a, Image.open(docs) as b:
        assert a.size == b.size
        # same picture up to rendering differences between matplotlib/freetype versions
        diff = sum(x != y for x, y in zip(a.convert("L").tobytes(), b.convert("L").tobytes(),
                                          strict=True))
        assert diff / (a.size[0] * a.size[1]) < 0.02


def test_to_graphframe_without_python_package(monkeypatch):
    opt, step, g = optimized("tpch:q3", "cout")
    monkeypatch.setitem(sys.modules, "graphframes", None)  # import fails
    with pytest.raises(ReoptError, match=r"pip install 'reopt\[graphframes\]'.*--packages "
                                         r"io\.graphframes:graphframes-spark4"):
        g.to_graphframe()


@pytest.mark.spark
def test_spark_exports_and_graphframe_without_jvm(spark, monkeypatch):
    opt, step, g = optimized("tpch:q5", "cout")
    v, e = g.vertices(spark=True), g.edges(spark=True)
    assert [(f.name, f.dataType.simpleString()) for f in v.schema.fields] == [
        (c, {"long": "bigint"}.get(t, t)) for c, t in VERTEX_COLUMNS.items()]
    assert v.columns[0] == "id" and e.columns[:2] == ["src", "dst"]
    pv = g.vertices()
    got = v.toPandas().sort_values("id").reset_index(drop=True)
    want = pv.sort_values("id").reset_index(drop=True)
    assert list(got["id"]) == list(want["id"])
    assert list(got["state"]) == list(want["state"])
    assert e.count() == len(g.edges())
    assert e.where("kind = 'input' and state = 'held'").count() == sum(
        len(a.children) for a in g.and_nodes.values() if a.state == "held")
    # a graphframes Python package without the JVM classes: one clear line
    fake = types.ModuleType("graphframes")
    fake.GraphFrame = object
    fake.__version__ = "0.12.3"
    monkeypatch.setitem(sys.modules, "graphframes", fake)
    with pytest.raises(ReoptError) as err:
        g.to_graphframe()
    msg = str(err.value)
    assert "\n" not in msg and "JVM" in msg
    assert "--packages io.graphframes:graphframes-spark4_2.13:0.12.3" in msg
    assert "spark.jars.packages" in msg


def test_graph_object_from_space_directly():
    """AndOrGraph works on any PlanSpace + plan (no evaluation): the procedural path."""
    opt = Optimizer("tpch:q3", cost_model="cout", optimizer="bottomup")
    step = opt.optimize()
    g = AndOrGraph(opt.space(), step.plan, optimizer="bottomup")
    assert g.counts()["search_space"] == step.metrics["search_space"]
    assert g.counts()["held"] == {"or_nodes": 0, "and_nodes": 0}


@pytest.mark.parametrize("query, model", [("tpch:q5", "io"), ("tpch:q10", "io")])
def test_drawn_labels_do_not_overlap(query, model):
    """The best plan's labels are readable: no two overlap once rendered (Agg), on the figure
    size ``draw()`` picks and on a small one."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    opt, step, g = optimized(query, model)
    for size in (g._figsize(), (7.0, 5.0)):
        fig = Figure(figsize=size)
        FigureCanvasAgg(fig)
        ax = g.draw(fig.subplots())
        fig.tight_layout()
        renderer = fig.canvas.get_renderer()
        boxes = [t.get_window_extent(renderer) for t in ax.texts]
        assert len(boxes) == 2 * len(list(step.plan.walk()))
        clashes = [(a.get_text(), b.get_text())
                   for i, (a, ba) in enumerate(zip(ax.texts, boxes, strict=True))
                   for b, bb in zip(ax.texts[i + 1:], boxes[i + 1:], strict=True)
                   if ba.overlaps(bb)]
        assert not clashes, (size, clashes)


@pytest.mark.parametrize("query, pruning, deltas", [
    ("tpch:q5", "all", ["sel lineitem.l_orderkey=orders.o_orderkey *3",
                        "card {nation,region} *0.125"]),
    ("tpch:q3", "none", ["sel lineitem.l_orderkey=orders.o_orderkey *3", "card orders *2"]),
])
def test_graph_after_update_is_the_updated_state(query, pruning, deltas):
    """After update() (maintained incrementally) the graph shows the new statistics and the
    maintained held state: counts are the step's metrics, the flagged plan is the step's plan,
    costs equal those of a fresh optimizer's graph under the same statistics."""
    opt = Optimizer(query, cost_model="io", engine="python", pruning=pruning)
    before = opt.optimize()
    step = opt.update(deltas)
    assert step.plan.cost != before.plan.cost
    g = opt.graph()
    assert g.counts() == {"search_space": step.metrics["search_space"],
                          "held": step.metrics["held"]}
    assert sorted(a.alt for a in g.and_nodes.values() if a.on_best_plan) == sorted(
        set(n.alt for n in step.plan.walk()))
    assert g.or_nodes[g.root].best_cost == pytest.approx(step.cost, rel=1e-12)
    fresh = Optimizer(query, cost_model="io", engine="python", pruning=pruning)
    fresh.adjustments = fresh.check(deltas)
    fresh.optimize()
    f = fresh.graph()
    assert list(f.or_nodes) == list(g.or_nodes)
    for oid, o in g.or_nodes.items():
        assert o.min_cost == f.or_nodes[oid].min_cost
        assert o.rows == f.or_nodes[oid].rows
        if o.state == "held" and f.or_nodes[oid].state == "held":
            assert o.best_cost == pytest.approx(f.or_nodes[oid].best_cost, rel=1e-9)


@pytest.mark.parametrize("name", ["topdown-inc", "bottomup-inc"])
def test_incremental_procedural_graph(name):
    opt = Optimizer("tpch:q5", cost_model="io", optimizer=name)
    opt.optimize()
    step = opt.update(["sel lineitem.l_orderkey=orders.o_orderkey *3"])
    g = opt.graph()
    assert g.optimizer == name
    assert {o.state for o in g.or_nodes.values()} == {"unknown"}
    assert g.best_plan.cost == pytest.approx(step.cost, rel=1e-12)
    assert g.counts()["search_space"] == step.metrics["search_space"]


@pytest.mark.parametrize("name, message", [
    ("missing/g.png", "g.png: directory .*missing does not exist"),
    ("g.txt", "g.txt: cannot tell the image format from the extension .*\\.png"),
])
def test_drawing_to_a_bad_path_is_one_line(tmp_path, capsys, name, message):
    """``python -m reopt.graph`` checks where it writes before optimizing: one line, exit 2,
    no file."""
    from reopt.graph import main

    assert main(["tpch:q3", "-o", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("reopt: ")
    assert re.search(message, err), err
    assert not list(tmp_path.iterdir())
