"""The optimizer's search space as an and-or graph, for interactive exploration.

:meth:`reopt.api.Optimizer.graph` builds an :class:`AndOrGraph`: the FULL search space of the
query (every OR node and AND node of :class:`~reopt.costmodel.space.PlanSpace`, reachable
from the root) with the declarative optimizer's held state at the fixpoint laid over it:

* an **OR node** is an (expression, property) pair, id ``or:<expr>:<prop>``. ``state`` is
  ``held`` when the held SearchSpace has a plan of it, else ``pruned``; ``best_cost`` is its
  BestCost and ``bound`` its Bound (``None`` when the relation has no tuple for it);
  ``refcount`` is the number of held AND nodes that use it as an input (the root: 1, the
  query's own reference).
* an **AND node** is a plan alternative (a SearchSpace tuple), id
  ``and:<expr>:<prop>:<position>`` (its position in :meth:`PlanSpace.alternatives`; the
  SearchSpace attribute ``index`` alone is not unique: a split joined by ``sortmerge`` has
  one alternative per sort class), with its operators, ``local_cost``
  (:meth:`PlanSpace.local_cost`), ``cost`` (its PlanCost when held — the cheapest one under
  ``pruning="none"``, which keeps one per distinct plan-tree cost — else ``None``) and its
  input OR nodes.
* ``on_best_plan`` flags the nodes of the query's best plan (the plan ``optimize()``
  returned); ``min_cost`` is the cheapest cost a node can have, by recursion over the full
  plan space with the shared cost functions (independent of the evaluation: it is what a
  pruned node would have cost, and equals ``best_cost`` / ``cost`` on held nodes).

For a procedural optimizer (``topdown``, ``bottomup``, ``exhaustive``), which keeps no
relations, the graph is the same full space with ``state="unknown"`` and ``best_cost``,
``bound``, ``refcount``, ``cost`` all ``None``; ``on_best_plan`` and ``min_cost`` are filled.

Exports: :meth:`AndOrGraph.to_networkx` (a ``networkx.DiGraph``), :meth:`~AndOrGraph.vertices`
/ :meth:`~AndOrGraph.edges` (GraphFrames-shaped DataFrames: pandas, or Spark with
``spark=True``), :meth:`~AndOrGraph.to_graphframe`, :meth:`~AndOrGraph.draw` (matplotlib).
Edges go from parents to children: OR → AND (``kind="alternative"``) and AND → OR
(``kind="input"``, ``side`` ``left``/``right``).
"""

from __future__ import annotations

import html
import io
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reopt.cliargs import UsageParser
from reopt.costmodel.errors import ReoptError
from reopt.costmodel.space import ANY, Alt, PlanSpace, plan_cost
from reopt.plan import PlanNode, build_plan

if TYPE_CHECKING:
    from reopt.evaluator.driver import Evaluation

HELD, PRUNED, UNKNOWN = "held", "pruned", "unknown"
GRAPHFRAMES_FALLBACK_VERSION = "0.12.3"

# Vertex and edge columns with their Spark SQL types (one vertex table holds both kinds of
# node, as GraphFrames wants; columns that do not apply to a kind are null).
VERTEX_COLUMNS: dict[str, str] = {
    "id": "string",
    "kind": "string",  # "or" | "and"
    "label": "string",
    "expr": "long",
    "prop": "string",
    "relations": "string",  # aliases of the expression, comma-separated
    "rank": "long",  # PlanSpace.rank of the OR node (of an AND node's OR node)
    "rows": "double",
    "state": "string",  # held | pruned | unknown
    "on_best_plan": "boolean",
    "min_cost": "double",
    "best_cost": "double",  # OR: BestCost
    "bound": "double",  # OR: Bound
    "refcount": "long",  # OR: held parent AND nodes (root: 1)
    "or_id": "string",  # AND: its OR node
    "position": "long",  # AND: place in PlanSpace.alternatives (the id's suffix)
    "index": "long",  # AND: SearchSpace's index (not unique within an OR node)
    "log_op": "string",  # AND
    "phy_op": "string",  # AND
    "local_cost": "double",  # AND
    "cost": "double",  # AND: PlanCost when held
}
EDGE_COLUMNS: dict[str, str] = {
    "src": "string",
    "dst": "string",
    "kind": "string",  # "alternative" (OR -> AND) | "input" (AND -> OR)
    "side": "string",  # input edges: "left" | "right"
    "state": "string",  # the AND node's state
    "on_best_plan": "boolean",
}


def or_id(expr: int, prop: str) -> str:
    return f"or:{expr}:{prop}"


def and_id(alt: Alt, position: int) -> str:
    return f"and:{alt.expr}:{alt.prop}:{position}"


@dataclass(frozen=True)
class OrNode:
    """An (expression, property) pair; see the module docstring for the attributes."""

    id: str
    expr: int
    prop: str
    relations: tuple[str, ...]
    label: str
    rank: int
    rows: float
    state: str
    on_best_plan: bool
    min_cost: float
    best_cost: float | None
    bound: float | None
    refcount: int | None


@dataclass(frozen=True)
class AndNode:
    """A plan alternative of an OR node; ``children`` are the ids of its input OR nodes."""

    id: str
    or_id: str
    alt: Alt
    position: int
    label: str
    rank: int
    state: str
    on_best_plan: bool
    min_cost: float
    local_cost: float
    cost: float | None
    children: tuple[str, ...]

    @property
    def log_op(self) -> str:
        return self.alt.log_op

    @property
    def phy_op(self) -> str:
        return self.alt.phy_op

    @property
    def index(self) -> int:
        return self.alt.index


class AndOrGraph:
    """The full and-or graph of one query with the held state overlaid (module docstring)."""

    def __init__(
        self,
        space: PlanSpace,
        best_plan: PlanNode,
        *,
        evaluation: Evaluation | None = None,
        q: int = 0,
        optimizer: str = "declarative",
        engine: str = "python",
        pruning: str | None = None,
    ):
        self.space = space
        self.best_plan = best_plan
        self.optimizer = optimizer
        self.engine = engine
        self.pruning = pruning
        self.query = space.query.name
        self.cost_model = space.model.name
        self.root = or_id(*space.root)
        self.or_nodes: dict[str, OrNode] = {}
        self.and_nodes: dict[str, AndNode] = {}
        self._build(evaluation, q)

    # -- construction ---------------------------------------------------------------------------
    def _build(self, ev: Evaluation | None, q: int) -> None:
        space = self.space
        nodes = list(space.or_nodes())
        alts = {node: space.alternatives(*node) for node in nodes}
        # cheapest cost of every OR node and AND node, children (lower rank) first
        best: dict[tuple[int, str], float] = {}
        alt_min: dict[Alt, float] = {}
        for node in sorted(nodes, key=lambda n: space.rank(*n)):
            low = math.inf
            for a in alts[node]:
                c = plan_cost(space.local_cost(a), *(best[ch] for ch in a.children))
                alt_min[a] = c
                low = min(low, c)
            best[node] = low
        on_best = {n.alt for n in self.best_plan.walk()}
        best_ors = {(a.expr, a.prop) for a in on_best}

        known = ev is not None
        held_alts: set[Alt] = set()
        plan_cost_of: dict[Alt, float] = {}
        best_cost: dict[tuple[int, str], float] = {}
        bound: dict[tuple[int, str], float] = {}
        if known:
            held_alts = {Alt(*r[1:10]) for r in ev.query_rows("SearchSpace", q)}
            full = {a for node in nodes for a in alts[node]}
            extra = held_alts - full
            if extra:
                raise ReoptError(f"graph(): {len(extra)} held SearchSpace tuple(s) are not in "
                                 f"the plan space of {self.query}, e.g. {min(extra)}")
            for r in ev.query_rows("PlanCost", q):
                a = Alt(*r[1:10])
                if a in held_alts:
                    plan_cost_of[a] = min(r[11], plan_cost_of.get(a, math.inf))
            best_cost = {(r[1], r[2]): r[3] for r in ev.query_rows("BestCost", q)}
            if "Bound" in ev.relations:
                bound = {(r[1], r[2]): r[3] for r in ev.query_rows("Bound", q)}
        refs: dict[tuple[int, str], int] = {space.root: 1}
        for a in held_alts:
            for ch in a.children:
                refs[ch] = refs.get(ch, 0) + 1
        held_ors = {(a.expr, a.prop) for a in held_alts}

        for node in nodes:
            expr, prop = node
            rels = space.relations(expr)
            state = (HELD if node in held_ors else PRUNED) if known else UNKNOWN
            oid = or_id(expr, prop)
            self.or_nodes[oid] = OrNode(
                id=oid, expr=expr, prop=prop, relations=rels,
                label=self._or_label(expr, prop, rels), rank=space.rank(expr, prop),
                rows=space.summary(expr), state=state, on_best_plan=node in best_ors,
                min_cost=best[node], best_cost=best_cost.get(node),
                bound=bound.get(node), refcount=refs.get(node, 0) if known else None,
            )
            for position, a in enumerate(alts[node]):
                aid = and_id(a, position)
                held = a in held_alts
                self.and_nodes[aid] = AndNode(
                    id=aid, or_id=oid, alt=a, position=position, label=a.phy_op,
                    rank=space.rank(expr, prop),
                    state=(HELD if held else PRUNED) if known else UNKNOWN,
                    on_best_plan=a in on_best, min_cost=alt_min[a],
                    local_cost=space.local_cost(a), cost=plan_cost_of.get(a),
                    children=tuple(or_id(*ch) for ch in a.children),
                )

    def _or_label(self, expr: int, prop: str, rels: tuple[str, ...]) -> str:
        text = "{" + ",".join(rels) + "}"
        if expr == self.space.top:
            text = "final " + text
        return text if prop == ANY else f"{text} {prop}"

    # -- lookups --------------------------------------------------------------------------------
    def node(self, node_id: str) -> OrNode | AndNode:
        hit = self.or_nodes.get(node_id) or self.and_nodes.get(node_id)
        if hit is None:
            raise ReoptError(f"no node '{node_id}' in the graph of {self.query}")
        return hit

    def or_node(self, expr: int | Iterable[str], prop: str = ANY) -> OrNode:
        """An OR node by expression bitmask or by its aliases (``["o", "l"]``)."""
        if not isinstance(expr, int):
            wanted = set(expr)
            mask = sum(1 << i for i, a in enumerate(self.space.query.aliases) if a in wanted)
            unknown = wanted - set(self.space.query.aliases)
            if unknown:
                raise ReoptError(f"unknown aliases {sorted(unknown)} in {self.query}")
            expr = mask
        return self.node(or_id(expr, prop))  # type: ignore[return-value]

    def alternatives(self, node: str | OrNode) -> list[AndNode]:
        """The AND nodes (plan alternatives) of an OR node, in PlanSpace order."""
        oid = node if isinstance(node, str) else node.id
        return [a for a in self.and_nodes.values() if a.or_id == oid]

    def parents(self, node: str | OrNode) -> list[AndNode]:
        """The AND nodes that use an OR node as an input."""
        oid = node if isinstance(node, str) else node.id
        return [a for a in self.and_nodes.values() if oid in a.children]

    def subplan(self, node: str | OrNode) -> PlanNode:
        """The cheapest plan of any OR node (pruned or not), from the full plan space."""
        o = self.node(node) if isinstance(node, str) else node
        if not isinstance(o, OrNode):
            raise ReoptError(f"subplan(): '{o.id}' is not an OR node")

        def choose(n: tuple[int, str]) -> Alt:
            return min(self.alternatives(or_id(*n)), key=lambda a: (a.min_cost, a.position)).alt

        return build_plan(self.space, choose, (o.expr, o.prop))

    def counts(self) -> dict[str, dict[str, int]]:
        """``search_space`` (all nodes) and ``held`` (nodes in state ``held``), shaped like the
        optimizer's metrics of the same names."""
        return {
            "search_space": {"or_nodes": len(self.or_nodes), "and_nodes": len(self.and_nodes)},
            "held": {"or_nodes": sum(o.state == HELD for o in self.or_nodes.values()),
                     "and_nodes": sum(a.state == HELD for a in self.and_nodes.values())},
        }

    # -- exports --------------------------------------------------------------------------------
    def vertex_rows(self) -> list[dict[str, Any]]:
        """One dict per node with the :data:`VERTEX_COLUMNS` (OR nodes first)."""
        out: list[dict[str, Any]] = []
        blank = dict.fromkeys(VERTEX_COLUMNS)
        for o in self.or_nodes.values():
            row = dict(blank)
            row.update(asdict(o))
            row.update(kind="or", relations=",".join(o.relations))
            out.append(row)
        for a in self.and_nodes.values():
            o = self.or_nodes[a.or_id]
            row = dict(blank)
            row.update(id=a.id, kind="and", label=a.label, expr=o.expr, prop=o.prop,
                       relations=",".join(o.relations), rank=a.rank, rows=o.rows,
                       state=a.state, on_best_plan=a.on_best_plan, min_cost=a.min_cost,
                       or_id=a.or_id, position=a.position, index=a.index,
                       log_op=a.log_op, phy_op=a.phy_op,
                       local_cost=a.local_cost, cost=a.cost)
            out.append(row)
        return out

    def edge_rows(self) -> list[dict[str, Any]]:
        """One dict per edge with the :data:`EDGE_COLUMNS`: OR → AND, then AND → inputs."""
        out: list[dict[str, Any]] = []
        for a in self.and_nodes.values():
            out.append({"src": a.or_id, "dst": a.id, "kind": "alternative", "side": None,
                        "state": a.state, "on_best_plan": a.on_best_plan})
        for a in self.and_nodes.values():
            for side, child in zip(("left", "right"), a.children, strict=False):
                out.append({"src": a.id, "dst": child, "kind": "input", "side": side,
                            "state": a.state, "on_best_plan": a.on_best_plan})
        return out

    def to_networkx(self):
        """A ``networkx.DiGraph``: node attributes are the vertex columns (without ``id``),
        edge attributes the edge columns (without ``src``/``dst``)."""
        import networkx as nx

        g = nx.DiGraph(query=self.query, cost_model=self.cost_model, optimizer=self.optimizer,
                       engine=self.engine, pruning=self.pruning, root=self.root)
        for row in self.vertex_rows():
            g.add_node(row["id"], **{k: v for k, v in row.items() if k != "id"})
        for row in self.edge_rows():
            g.add_edge(row["src"], row["dst"],
                       **{k: v for k, v in row.items() if k not in ("src", "dst")})
        return g

    def _use_spark(self, spark: bool | None) -> bool:
        return self.engine == "spark" if spark is None else bool(spark)

    def vertices(self, spark: bool | None = None):
        """Vertices as a DataFrame with an ``id`` column: pandas, or Spark when ``spark`` is
        true (default: when the optimizer ran on the ``spark`` engine)."""
        return self._frame(self.vertex_rows(), VERTEX_COLUMNS, self._use_spark(spark))

    def edges(self, spark: bool | None = None):
        """Edges as a DataFrame with ``src`` and ``dst`` columns (see :meth:`vertices`)."""
        return self._frame(self.edge_rows(), EDGE_COLUMNS, self._use_spark(spark))

    @staticmethod
    def _frame(rows: list[dict[str, Any]], columns: dict[str, str], spark: bool):
        if spark:
            from reopt.spark import get_spark

            schema = ", ".join(f"`{c}` {t}" for c, t in columns.items())
            data = [tuple(r[c] for c in columns) for r in rows]
            return get_spark().createDataFrame(data, schema=schema)
        import pandas as pd

        dtypes = {"long": "Int64", "double": "float64", "boolean": "boolean",
                  "string": "object"}
        frame = pd.DataFrame(rows, columns=list(columns))
        return frame.astype({c: dtypes[t] for c, t in columns.items()})

    def to_graphframe(self):
        """A ``graphframes.GraphFrame`` over :meth:`vertices` and :meth:`edges` as Spark
        DataFrames. Needs the ``graphframes`` Python package (``pip install
        'reopt[graphframes]'``) AND the GraphFrames JVM package on the Spark session's class
        path; raises :class:`ReoptError` with one line saying what is missing otherwise."""
        coord = graphframes_package()
        how = (f"start Spark with --packages {coord} (e.g. PYSPARK_SUBMIT_ARGS='--packages "
               f"{coord} pyspark-shell') or set spark.jars.packages={coord}")
        try:
            from graphframes import GraphFrame
        except ImportError:
            raise ReoptError("to_graphframe() needs the graphframes Python package "
                             f"(pip install 'reopt[graphframes]') and its JVM package: {how}"
                             ) from None
        from reopt.spark import get_spark

        spark = get_spark()
        if not graphframes_jvm_available(spark):
            raise ReoptError(f"to_graphframe(): the GraphFrames JVM classes are not on the "
                             f"Spark session's class path; {how}")
        return GraphFrame(self.vertices(spark=True), self.edges(spark=True))

    # -- drawing --------------------------------------------------------------------------------
    def layers(self) -> dict[str, int]:
        """Drawing layer of every node: an OR node at ``2·rank``, its AND nodes at
        ``2·rank − 1`` (every input ranks strictly lower, so edges always point down)."""
        out = {o.id: 2 * o.rank for o in self.or_nodes.values()}
        out.update({a.id: 2 * a.rank - 1 for a in self.and_nodes.values()})
        return out

    def positions(self) -> dict[str, tuple[float, float]]:
        """Layered layout: y = layer (root on top), each layer spread over the full width; OR
        nodes are ordered by the mean x of their parent AND nodes, AND nodes follow their OR
        node."""
        layer = self.layers()
        by_layer: dict[int, list[str]] = {}
        for nid, ly in layer.items():
            by_layer.setdefault(ly, []).append(nid)
        parents: dict[str, list[str]] = {}
        for a in self.and_nodes.values():
            for ch in a.children:
                parents.setdefault(ch, []).append(a.id)
        pos: dict[str, tuple[float, float]] = {}
        for ly in sorted(by_layer, reverse=True):
            ids = by_layer[ly]
            if ly % 2 == 0:  # OR nodes

                def key(nid: str) -> tuple:
                    xs = [pos[p][0] for p in parents.get(nid, ()) if p in pos]
                    o = self.or_nodes[nid]
                    return (sum(xs) / len(xs) if xs else 0.0, o.expr, o.prop)
            else:

                def key(nid: str) -> tuple:
                    a = self.and_nodes[nid]
                    return (pos[a.or_id][0], a.position)

            ids.sort(key=key)
            n = len(ids)
            for i, nid in enumerate(ids):  # spread over the full width
                pos[nid] = ((i + 0.5) / n - 0.5, float(ly))
        return pos

    def draw(self, ax=None, *, labels: str = "best", figsize: tuple[float, float] | None = None,
             title: bool = True):
        """Draw the graph with matplotlib: layered by rank (root on top), OR nodes as squares,
        AND nodes as dots, the best plan in red, pruned nodes and edges grey. ``labels``:
        ``"best"`` (best-plan nodes), ``"or"`` (also every OR node), ``"all"`` or ``"none"``.
        Returns the axes."""
        import networkx as nx

        if labels not in LABEL_MODES:
            raise ReoptError(f"draw(): labels must be one of {', '.join(LABEL_MODES)}")
        _need_matplotlib()
        if ax is None:
            import matplotlib.pyplot as plt

            _, ax = plt.subplots(figsize=figsize or self._figsize())
        g = self.to_networkx()
        pos = self.positions()
        colors = {HELD: "#4c72b0", PRUNED: "#d0d0d0", UNKNOWN: "#c8a96e"}
        best = "#d62728"

        def edge_group(pred):
            return [(u, v) for u, v, d in g.edges(data=True) if pred(d)]

        for pred, color, width, z in (
            (lambda d: d["state"] == PRUNED, "#e3e3e3", 0.5, 1),
            (lambda d: d["state"] != PRUNED and not d["on_best_plan"], "#8fa8cf", 0.8, 2),
            (lambda d: d["on_best_plan"], best, 2.2, 3),
        ):
            coll = nx.draw_networkx_edges(g, pos, edgelist=edge_group(pred), ax=ax,
                                          edge_color=color, width=width, arrows=False)
            if coll is not None and hasattr(coll, "set_zorder"):
                coll.set_zorder(z)
        small = len(g) > 300
        for kind, shape, size in (("or", "s", 40 if small else 110), ("and", "o", 14 if small
                                                                       else 45)):
            for state in (PRUNED, UNKNOWN, HELD):
                ids = [n for n, d in g.nodes(data=True) if d["kind"] == kind
                       and d["state"] == state and not d["on_best_plan"]]
                if ids:
                    coll = nx.draw_networkx_nodes(g, pos, nodelist=ids, ax=ax, node_shape=shape,
                                                  node_size=size, node_color=colors[state],
                                                  linewidths=0)
                    coll.set_zorder(4 if state != PRUNED else 2)
            ids = [n for n, d in g.nodes(data=True) if d["kind"] == kind and d["on_best_plan"]]
            if ids:
                coll = nx.draw_networkx_nodes(g, pos, nodelist=ids, ax=ax, node_shape=shape,
                                              node_size=size * 1.6, node_color=best,
                                              linewidths=0)
                coll.set_zorder(5)
        from matplotlib.lines import Line2D

        handles = [
            Line2D([], [], marker="s", ls="", color=colors[HELD], label="OR node (held)"),
            Line2D([], [], marker="o", ls="", color=colors[HELD], label="AND node (held)"),
            Line2D([], [], marker="o", ls="", color=colors[PRUNED], label="pruned"),
            Line2D([], [], marker="o", ls="-", color=best, label="best plan"),
        ]
        if self.optimizer != "declarative":
            handles[0:3] = [Line2D([], [], marker="o", ls="", color=colors[UNKNOWN],
                                   label="state unknown (procedural)")]
        # below the drawing: the root's label runs to the right at the top, leaves at the bottom
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                  ncol=len(handles), fontsize=7, frameon=False)
        if title:
            c = self.counts()
            text = (f"{self.query} · {self.cost_model} · {self.optimizer}"
                    f"{'' if self.pruning is None else ' · pruning=' + self.pruning}: "
                    f"{c['search_space']['or_nodes']} OR / {c['search_space']['and_nodes']} AND")
            if self.optimizer == "declarative":
                text += f", held {c['held']['or_nodes']} / {c['held']['and_nodes']}"
            ax.set_title(text, fontsize=9)
        ax.set_yticks(sorted({2 * o.rank for o in self.or_nodes.values()}))
        ax.set_yticklabels([f"rank {y // 2}" for y in ax.get_yticks().astype(int)], fontsize=7)
        ax.tick_params(left=False, bottom=False, labelbottom=False)
        for side in ("top", "right", "bottom", "left"):
            ax.spines[side].set_visible(False)
        ax.margins(x=0.08, y=0.05)
        ax.autoscale_view()
        shown = {
            "none": set(),
            "best": {n for n, d in g.nodes(data=True) if d["on_best_plan"]},
            "or": {n for n, d in g.nodes(data=True) if d["on_best_plan"] or d["kind"] == "or"},
            "all": set(g.nodes),
        }[labels]
        items = [(pos[n], g.nodes[n]["label"], g.nodes[n]["on_best_plan"]) for n in sorted(shown)]
        for ((x, y), text, on_best), (dx, dy, ha) in zip(items, _label_offsets(ax, items),
                                                          strict=True):
            ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", ha=ha,
                        fontsize=LABEL_SIZE, color=best if on_best else "#333333", zorder=6)
        return ax

    def _figsize(self) -> tuple[float, float]:
        layers = len(set(self.layers().values()))
        return (12.0 if len(self.and_nodes) > 60 else 8.0, max(4.0, 0.5 * layers + 1))

    def to_svg(self, **kw) -> str:
        """The drawing as SVG text (no pyplot figure is created)."""
        _need_matplotlib()
        from matplotlib.figure import Figure

        fig = Figure(figsize=self._figsize())
        self.draw(fig.subplots(), **kw)
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg")
        return buf.getvalue()

    def _repr_svg_(self) -> str:
        return self.to_svg()

    def __repr__(self) -> str:
        c = self.counts()
        held = (f", held {c['held']['or_nodes']} OR / {c['held']['and_nodes']} AND"
                if self.optimizer == "declarative" else ", held state unknown")
        return (f"AndOrGraph({self.query}, {self.cost_model}, {self.optimizer}"
                f"{'' if self.pruning is None else ', pruning=' + self.pruning}: "
                f"{c['search_space']['or_nodes']} OR / {c['search_space']['and_nodes']} AND"
                f"{held}; best cost {self.best_plan.cost:.6g})")

    def _repr_html_(self) -> str:
        return f"<p><code>{html.escape(repr(self))}</code></p>{self.to_svg()}"


LABEL_MODES = ("best", "or", "all", "none")
LABEL_SIZE = 7  # points

# Where a label may go relative to its node, in order of preference: (dx, dy) in points and the
# horizontal alignment. Right-above first; then below, then to the left; then a line further
# up or down (layers are rarely closer than that).
_LABEL_SLOTS: tuple[tuple[float, float, str], ...] = (
    (5, 3, "left"), (5, -10, "left"), (-5, 3, "right"), (-5, -10, "right"),
    (5, 11, "left"), (5, -18, "left"), (-5, 11, "right"), (-5, -18, "right"),
)


def _label_offsets(ax, items: list[tuple[tuple[float, float], str, bool]]
                   ) -> list[tuple[float, float, str]]:
    """A slot of :data:`_LABEL_SLOTS` per label so that labels in one layer do not overlap:
    nodes of a layer share a y, and on big graphs neighbours on the best plan are often
    closer than a label is long. Widths come from the font's glyph outlines (no renderer
    needed), positions from the axes' current size and limits; greedy, left to right, the
    first free slot wins (the first slot when none is free)."""
    from matplotlib.textpath import TextPath

    fig = ax.get_figure()
    box = ax.get_position()
    x0, x1 = ax.get_xlim()
    y0, y1 = ax.get_ylim()
    per_x = box.width * fig.get_figwidth() * 72 / (x1 - x0)  # points per data unit
    per_y = box.height * fig.get_figheight() * 72 / (y1 - y0)
    height = LABEL_SIZE * 1.2
    placed: list[tuple[float, float, float, float]] = []  # boxes in points: x0, x1, y0, y1
    out: dict[int, tuple[float, float, str]] = {}
    order = sorted(range(len(items)), key=lambda i: (items[i][0][0], -items[i][0][1]))
    for i in order:
        (x, y), text, _ = items[i]
        width = TextPath((0, 0), text, size=LABEL_SIZE).get_extents().width
        px, py = x * per_x, y * per_y
        chosen = _LABEL_SLOTS[0]
        for slot in _LABEL_SLOTS:
            dx, dy, ha = slot
            lx0 = px + dx if ha == "left" else px + dx - width
            cand = (lx0, lx0 + width, py + dy, py + dy + height)
            if not any(cand[0] < b[1] and b[0] < cand[1] and cand[2] < b[3] and b[2] < cand[3]
                       for b in placed):
                chosen = slot
                break
        dx, dy, ha = chosen
        lx0 = px + dx if ha == "left" else px + dx - width
        placed.append((lx0, lx0 + width, py + dy, py + dy + height))
        out[i] = chosen
    return [out[i] for i in range(len(items))]


def _need_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ReoptError("drawing the graph needs matplotlib: pip install 'reopt[notebooks]'"
                         ) from None


def graphframes_package() -> str:
    """Maven coordinates of the GraphFrames JVM package matching the installed Python one."""
    try:
        import graphframes

        version = getattr(graphframes, "__version__", GRAPHFRAMES_FALLBACK_VERSION)
    except ImportError:
        version = GRAPHFRAMES_FALLBACK_VERSION
    return f"io.graphframes:graphframes-spark4_2.13:{version}"


def graphframes_jvm_available(spark) -> bool:
    """Whether the Spark session's JVM can load GraphFrames' Python API class."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: the server decides; let GraphFrame itself try
        return True
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        loader.loadClass("org.graphframes.GraphFramePythonAPI")
    except Exception:  # py4j's Py4JJavaError wraps ClassNotFoundException
        return False
    return True


def build_graph(opt: Any) -> AndOrGraph:
    """The graph of an :class:`~reopt.api.Optimizer` (see :meth:`reopt.api.Optimizer.graph`)."""
    if opt.optimizer != "declarative":
        # procedural optimizers keep no plan between calls (the -inc ones keep a memo, and
        # answer from it without re-costing when nothing changed): ask for the current one
        space = opt.space()
        return AndOrGraph(space, opt.optimize().plan, optimizer=opt.optimizer,
                          engine=opt.engine)
    ev = opt._evaluation
    if ev is None:
        raise ReoptError("graph(): optimize() a declarative optimizer first")
    q = opt._qid  # its place in the batch it was optimized in (update() keeps it)
    return AndOrGraph(ev.spaces[q], ev.best_plan(q), evaluation=ev, q=q,
                      optimizer=opt.optimizer, engine=opt.engine, pruning=opt.pruning)


def save_figure(opt: Any, path: str, *, labels: str = "best", dpi: int = 90) -> None:
    """Optimize ``opt`` if it has not run yet and save the drawing of its graph (PNG/SVG by
    the extension); no pyplot state is touched."""
    _need_matplotlib()
    from matplotlib.figure import Figure

    kinds = Figure().canvas.get_supported_filetypes()
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in kinds:
        raise ReoptError(f"{path}: cannot tell the image format from the extension "
                         f"(use one of .{', .'.join(sorted(kinds))})")
    if not Path(path).resolve().parent.is_dir():
        raise ReoptError(f"{path}: directory {Path(path).parent} does not exist")
    if opt.optimizer == "declarative" and opt._evaluation is None:
        opt.optimize()
    g = opt.graph()
    fig = Figure(figsize=g._figsize())
    g.draw(fig.subplots(), labels=labels)
    fig.tight_layout()
    try:
        _write(fig, path, suffix, dpi)
    except OSError as e:
        raise ReoptError(f"{path}: cannot write the figure: {e.strerror}") from None


def _write(fig: Any, path: str, suffix: str, dpi: int) -> None:
    if suffix == "png":  # a 128-colour palette, no version stamp: small, reproducible
        from PIL import Image

        buf = io.BytesIO()
        fig.savefig(buf, dpi=dpi, format="png")
        buf.seek(0)
        with Image.open(buf) as img:
            img.convert("RGB").quantize(colors=128, method=Image.Quantize.FASTOCTREE).save(
                path, optimize=True)
    else:
        fig.savefig(path, dpi=dpi)


def main(argv: list[str] | None = None) -> int:
    """``python -m reopt.graph QUERY -o FILE``: draw a query's and-or graph (python engine).
    ``docs/and-or-graph.png`` is ``python -m reopt.graph tpch:q5 -o docs/and-or-graph.png``."""
    from reopt.api import Optimizer

    ap = UsageParser(prog="python -m reopt.graph", description=main.__doc__)
    ap.add_argument("query", nargs="?", default="tpch:q5")
    ap.add_argument("-o", "--output", required=True, help="a .png or .svg file")
    ap.add_argument("--cost-model", default="io")
    ap.add_argument("--optimizer", default="declarative")
    ap.add_argument("--pruning", default="all")
    ap.add_argument("--labels", default="best", choices=LABEL_MODES)
    try:
        args = ap.parse_args(argv)
        opt = Optimizer(args.query, cost_model=args.cost_model, optimizer=args.optimizer,
                        engine="python", pruning=args.pruning)
        save_figure(opt, args.output, labels=args.labels)
    except ReoptError as e:
        print(f"reopt: {e}", file=__import__("sys").stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
