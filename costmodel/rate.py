"""The rate-based cost model for continuous queries over windowed streams (Viglas and
Naughton, *Rate-based query optimization for streaming information sources*, SIGMOD 2002:
seed 000).

Streams arrive at ``λ`` tuples/s and are joined over time-based sliding windows of ``W``
seconds (CQL semantics: at every instant the result is the join of the windows' contents). A
stream's filters pass ``r = f·λ`` tuples/s (seed §3.2, assuming the selection keeps up), and
its window holds ``n = r·W`` of them — what the estimator calls its rows after filters, so
``card(E)`` of a set ``E`` of relations is the number of results alive at a time (a stored
table is a stream with no arrivals whose tuples never expire: ``λ = 0``, ``W = ∞``).

**Rates are plan-independent.** A new tuple of stream ``s`` joins the other windows' contents,
so ``E``'s results are produced at ``rate(E) = Σ_s r_s·f_E·Π_{s'≠s} n_{s'} = card(E)·Σ_{s∈E}
1/W_s``. For two base streams that is ``f·r_l·r_r·(W_l + W_r)``: Equation 2's numerator
``f·r_l·r_r·t`` with the time since the start, ``t``, replaced by the windows (each arrival
meets one window of the other side). Whatever the join tree, ``L ⋈ R`` yields ``f·(rate(L)·
card(R) + rate(R)·card(L)) = rate(L ∪ R)``; only the work differs between plans.

**Costs are work.** Each join handles every arrival from either input (seed §3.4, Table 3)
and transmits every result:

* symmetric hash join ``shj``: ``C_l = C_r = move + hash + probe``;
* symmetric nested loops ``nlj`` (also the only join for cross products): ``C_l = move +
  |R|·comp``, ``C_r = move + |L|·comp``, with the other side's *window state* as ``|S|``
  (the seed's ``r_S·t`` before windows bound it);
* a scan applies the stream's filters to every arrival: ``λ·C_σ``.

The per-tuple costs (``move``, ``hash``, ``probe``, ``comp``, ``out``, ``C_σ``) are a profile,
:class:`RateConstants`, one per executor (:data:`PROFILES`: ``spark``, the default, and
``local``, calibrated for the in-process executor); the counts they price are
:class:`Work`, the same for every profile.

Two objectives (seed §4), each a cost to minimize:

* ``rate`` — CPU seconds of work per second of stream (the load ``U``): ``shj`` costs
  ``(rate(L) + rate(R))·(move+hash+probe) + rate(E)·out`` per second, ``nlj``
  ``(rate(L)+rate(R))·move + (rate(L)·card(R) + rate(R)·card(L))·comp + rate(E)·out``.
  Equation 2's denominator: the plan delivers ``rate(root) / max(1, U)`` results per second,
  so the plan with the least ``U`` has the highest output rate (all plans with ``U <= 1``
  keep up and deliver ``rate(root)``; the least ``U`` has the most headroom).
* ``time-to:N`` — time to the first N results from an empty start. The windows fill first
  (a stream's state is ``n·min(t/W, 1)``), so results appear at a rate that grows with
  time, as in Equation 2; ``t_N`` is when the root has produced N results
  (``∫ rate_root = N``, plan-independent), and the cost is the work of processing
  everything that arrived by ``t_N`` — the same per-operator counts as above, integrated
  over ``[0, t_N]`` (exactly: the integrands are piecewise polynomials between window
  lengths, integrated by Gauss–Legendre). The N-th result is out at ``max(t_N, cost)``.

Both are sums of local costs that read only expressions' estimates (and, for
``time-to:N``, ``t_N``, read off the whole query's estimate), so the principle of optimality
holds and dynamic programming finds the optimum of either (tests check it against
exhaustive search). Two views of the seed are *not* what is minimized: its per-operator
Equation 2, where each join is throttled by its own denominator (:func:`eq2_rate`: reported
for the chosen plan; not a sum, so the rules cannot minimize it; tests measure how far the
chosen plan is from the best plan under it), and its §4.2.2 local time minimization, which
pushes a target count down the tree (``√`` of the parent's per input), so a subtree's best
plan depends on the parent's split — the principle of optimality fails there, and it is not
implemented.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from reopt.costmodel.errors import ReoptError
from reopt.costmodel.numeric import MAX_ROWS, parse_number
from reopt.costmodel.profiles import pick
from reopt.costmodel.space import ANY, Alt

if TYPE_CHECKING:
    from reopt.costmodel.catalog import Catalog
    from reopt.costmodel.query import Query
    from reopt.costmodel.space import PlanSpace
    from reopt.plan import PlanNode

# --- per-tuple costs in seconds (README, "Cost models") ----------------------------------------
# The ``spark`` profile's values (the default profile, :data:`PROFILES`).
MOVE = 1e-6
"""Moving an arriving tuple from the input buffer into memory."""
HASH = 1e-6
"""Hashing a tuple into its side's hash table (and removing it when it expires)."""
PROBE = 1e-6
"""Probing the other side's hash table."""
COMP = 1e-8
"""One in-memory comparison of two tuples (nested loops)."""
OUT = 5e-7
"""Transmitting one result tuple to the parent (the seed's ``T``)."""
SELECT = 2e-7
"""Applying a stream's filters to one arriving tuple (``C_σ``)."""


@dataclass(frozen=True)
class Work:
    """What an operator does per second of stream (or by ``t_N``), counted per kind of
    per-tuple operation: the model's counts, before any constant prices them. The costs are
    :meth:`RateConstants.price` of these; ``benchmarks/rate_calibrate.py`` fits the constants
    against an executor's CPU time from them."""

    move: float = 0.0
    hash: float = 0.0
    probe: float = 0.0
    comp: float = 0.0
    out: float = 0.0
    select: float = 0.0


@dataclass(frozen=True)
class RateConstants:
    """The rate model's per-tuple costs in seconds, one profile per executor (the module
    doc's ``move``, ``hash``, ``probe``, ``comp``, ``out`` and ``C_σ``). The formulas are
    seed 000's for every profile; only these numbers differ, because executors differ in
    what a hashed tuple costs against a compared pair — and the plan choice turns on that
    ratio (README, "Rate profiles")."""

    name: str
    move: float
    hash: float
    probe: float
    comp: float
    out: float
    select: float

    def price(self, work: Work) -> float:
        """Seconds of CPU for ``work``."""
        return (work.move * self.move + work.hash * self.hash + work.probe * self.probe
                + work.comp * self.comp + work.out * self.out + work.select * self.select)


SPARK = RateConstants("spark", move=MOVE, hash=HASH, probe=PROBE, comp=COMP, out=OUT,
                      select=SELECT)
"""The model's original constants (seed 000's orders of magnitude: µs per hashed tuple, 10 ns
per comparison), kept for the Spark executor and as the default."""
LOCAL = RateConstants("local", move=0.0, hash=4e-7, probe=4e-7, comp=8e-9, out=8e-8,
                      select=1.2e-5)
"""Calibrated for the in-process executor (:mod:`reopt.streamlocal`, pandas) by
``benchmarks/rate_calibrate.py`` from the CPU time of many plans run on the same streams
(BENCHMARKS.md, "Calibrating the rate model"): the ratios are the ones whose cheapest plan is
the executor's cheapest most often (a hashed tuple ``hash + probe`` = 100 compared pairs = 10
results; moving a tuple is free beside them), their scale and ``select`` the least-squares
fit of CPU seconds. A plain least-squares fit of all six constants was tried and picks worse
plans than the ``spark`` profile on nexmark (it prices a result 28× a pair and hashing at 0,
so it always hashes, where pandas' nested loops over a small state beat a merge): the
executor's per-call overheads are not in the model's formulas, so the constants that predict
CPU best are not those that rank plans best, and the profile is for ranking plans."""
PROFILES = {p.name: p for p in (SPARK, LOCAL)}
"""``--rate-profile`` / ``Optimizer(rate_profile=...)``; ``reopt stream`` plans with its
executor's (``local`` or ``spark``)."""
DEFAULT_PROFILE = "spark"


def rate_profile(name: str | None) -> RateConstants:
    """The profile ``name`` (None: :data:`DEFAULT_PROFILE`); a one-line error otherwise."""
    return pick(PROFILES, DEFAULT_PROFILE, name, "rate")


_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(24)
"""Gauss–Legendre: exact for polynomials up to degree 47, i.e. integrands over up to 48
relations (each factor is linear in time between window lengths)."""

OBJECTIVES = ("rate", "time-to:N")


def parse_objective(text: str) -> tuple[str, float]:
    """``rate`` or ``time-to:N`` (N results, a number > 0) → ``(kind, N)``."""
    t = text.strip().lower()
    if t == "rate":
        return "rate", 0.0
    if t.startswith("time-to:"):
        raw = t.split(":", 1)[1]
        try:
            n = parse_number(raw)
        except (ValueError, ArithmeticError):
            n = math.nan
        if math.isfinite(n) and 0 < n <= MAX_ROWS:
            return "time-to", n
        raise ReoptError(f"objective '{text}': N in time-to:N must be a number of results "
                         f"above 0 and at most {MAX_ROWS:g}, got '{raw}'")
    raise ReoptError(f"unknown objective '{text}' (choose from rate, time-to:N)")


class _Streams:
    """One plan space's stream inputs: each relation's filtered arrival rate and window, and
    the functions of time built on them (memoized per estimator: a space derived by
    ``with_adjustments`` has its own)."""

    def __init__(self, space: PlanSpace):
        est = space.estimator
        self.space = space
        self.estimator = est
        q = space.query
        self.window = np.array([est.window(a) for a in q.aliases])
        self.stream = np.isfinite(self.window)
        check_streams(q, space.catalog)
        with np.errstate(divide="ignore"):
            self.inv_window = np.where(self.stream, 1.0 / self.window, 0.0)
        self._inv = self.inv_window.tolist()  # (Python floats: costs stay plain floats)
        self.arrivals = [est.arrival_rate(a) for a in q.aliases]
        self._t_n: dict[float, float] = {}
        self._produced: dict[tuple[int, float], float] = {}
        """Results of an expression produced by ``t_N`` (:meth:`produced_by_t_n`)."""

    # -- steady state ------------------------------------------------------------------------
    def inv_w(self, expr: int) -> float:
        """``Σ_{s∈expr} 1/W_s`` (0 for stored tables)."""
        total, inv = 0.0, self._inv
        while expr:
            low = expr & -expr
            total += inv[low.bit_length() - 1]
            expr ^= low
        return total

    def rate(self, expr: int) -> float:
        """Results per second of ``expr`` once its windows are full: ``card·Σ 1/W``."""
        return self.space.summary(expr) * self.inv_w(expr)

    # -- from an empty start -----------------------------------------------------------------
    def _members(self, expr: int) -> np.ndarray:
        return np.array([i for i in range(len(self.window)) if expr >> i & 1])

    def _pieces(self, members: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Gauss–Legendre points and weights over ``[0, t]``, split at the members' window
        lengths (between them every factor is linear in time)."""
        w = self.window[members]
        cuts = np.unique(np.concatenate(([0.0, t], w[(w > 0) & (w < t)])))
        a, b = cuts[:-1, None], cuts[1:, None]
        points = (b - a) / 2 * _NODES + (a + b) / 2
        weights = (b - a) / 2 * _WEIGHTS
        return points.ravel(), np.broadcast_to(weights, points.shape).ravel()

    def presence(self, members: np.ndarray, tau: np.ndarray) -> np.ndarray:
        """``p_s(τ) = min(τ/W_s, 1)`` per member (rows) and time (columns); 1 for tables."""
        w = self.window[members][:, None]
        return np.where(np.isfinite(w), np.minimum(tau[None, :] / w, 1.0), 1.0)

    def alive(self, expr: int, members: np.ndarray, tau: np.ndarray) -> np.ndarray:
        """``card(expr)·Π p_s(τ)``: results of ``expr`` alive at each time."""
        return self.space.summary(expr) * self.presence(members, tau).prod(axis=0)

    def inserted_rate(self, expr: int, members: np.ndarray, tau: np.ndarray) -> np.ndarray:
        """``card(expr)·Σ_s (1/W_s)·Π_{s'≠s} p_{s'}(τ)``: results of ``expr`` produced per
        second at each time (a stream's arrivals meet the others' states)."""
        p = self.presence(members, tau)
        inv = self.inv_window[members]
        total = np.zeros(len(tau))
        for k in range(len(members)):
            if inv[k]:
                total += inv[k] * np.delete(p, k, axis=0).prod(axis=0)
        return self.space.summary(expr) * total

    def produced(self, expr: int, t: float) -> float:
        """Results of ``expr`` produced by time ``t`` (a stored table's arrive at 0)."""
        members = self._members(expr)
        if not self.stream[members].any():
            return self.space.summary(expr)
        if t <= 0:
            return 0.0
        tau, wts = self._pieces(members, t)
        return float(wts @ self.inserted_rate(expr, members, tau))

    def produced_by_t_n(self, expr: int, n: float) -> float:
        """:meth:`produced` by ``t_N`` (memoized: every join alternative asks for its inputs
        and its own)."""
        hit = self._produced.get((expr, n))
        if hit is None:
            hit = self._produced[(expr, n)] = self.produced(expr, self.time_to(n))
        return hit

    def comparisons(self, left: int, right: int, t: float) -> float:
        """``∫_0^t rate_L·|R| + rate_R·|L| dτ``: a nested-loops join's comparisons by ``t``."""
        ml, mr = self._members(left), self._members(right)
        tau, wts = self._pieces(np.concatenate((ml, mr)), t)
        f = (self.inserted_rate(left, ml, tau) * self.alive(right, mr, tau)
             + self.inserted_rate(right, mr, tau) * self.alive(left, ml, tau))
        return float(wts @ f)

    def time_to(self, n: float) -> float:
        """``t_N``: when the whole query has produced ``n`` results (memoized)."""
        hit = self._t_n.get(n)
        if hit is not None:
            return hit
        root = self.space.all
        full = float(self.window[self.stream].max())
        got = self.produced(root, full)
        if got < n:
            t = full + (n - got) / self.rate(root)  # windows full: a constant rate
        else:
            lo, hi = 0.0, full
            for _ in range(200):  # bisection to the last bit: deterministic, monotone
                mid = (lo + hi) / 2
                if mid in (lo, hi):
                    break
                if self.produced(root, mid) >= n:
                    hi = mid
                else:
                    lo = mid
            t = hi
        self._t_n[n] = t
        return t


def check_streams(query: Query, catalog: Catalog) -> None:
    """The rate model plans continuous queries: a query reading no stream is refused."""
    if not any(catalog.table(r.table).is_stream for r in query.relations):
        raise ReoptError(f"query {query.name}: the rate cost model needs a stream in the "
                         "query (a catalog entry with a 'rate'), and it reads only tables")


def streams(space: PlanSpace) -> _Streams:
    """The space's :class:`_Streams`, built once per estimator (``with_adjustments`` copies a
    space's attributes, so the memo is keyed by the estimator it was built on)."""
    hit = space.__dict__.get("_rate_streams")
    if hit is None or hit.estimator is not space.estimator:
        hit = _Streams(space)
        space.__dict__["_rate_streams"] = hit
    return hit


def eq2_rate(space: PlanSpace, plan: PlanNode) -> float:
    """The plan's output rate in the seed's per-operator view (§3.3, Equation 2 with its
    denominator): every join is its own processor. A join whose inputs deliver the shares
    ``φ_l``, ``φ_r`` of their expressions' rates (and keep those shares of their states)
    produces ``φ_l·φ_r·rate(E)`` results per second, spends ``r_l·C_l + r_r·C_r`` (plus ``out``
    per result) seconds per second on them, and delivers what it produces divided by
    ``max(1, that)``; a scan delivers its filtered rate. The delivered rate grows with the
    children's shares, so a max-composition would optimize it exactly, but it is not a sum
    of local costs: the optimizers minimize the load ``U`` instead, and this is reported
    (tests compare the two optima by exhaustive search)."""
    s = streams(space)
    c = constants_of(space)

    def delivered(node: PlanNode) -> float:
        """The share of its expression's rate the node delivers."""
        if not node.children:
            return 1.0
        left, right = node.children
        fl, fr = delivered(left), delivered(right)
        full = s.rate(node.alt.expr) * fl * fr
        rl, rr = fl * s.rate(left.alt.expr), fr * s.rate(right.alt.expr)
        if node.op == "nlj":
            nl, nr = fl * space.summary(left.alt.expr), fr * space.summary(right.alt.expr)
            work = rl * (c.move + nr * c.comp) + rr * (c.move + nl * c.comp)
        else:
            work = (rl + rr) * (c.move + c.hash + c.probe)
        factor = space.adjustments.op_factors.get(node.op, 1.0)  # ``cost shj *F``
        return fl * fr / max(1.0, (work + full * c.out) * factor)

    return s.rate(space.all) * delivered(plan)


def constants_of(space: PlanSpace) -> RateConstants:
    """The per-tuple costs the space's model prices work with (a model without a profile:
    the default's)."""
    return getattr(space.model, "constants", None) or rate_profile(None)


def plan_estimates(space: PlanSpace, plan: PlanNode, cost: float) -> dict[str, float]:
    """What a rate-model plan promises: its output rate (Equation 2 over the whole plan, and
    per operator, :func:`eq2_rate`), the load ``U`` or the time to N results, and its state —
    the windows' tuples and the intermediate results its joins keep."""
    s = streams(space)
    model = space.model
    joins = [n for n in plan.walk() if n.children]
    windows = sum(space.summary(n.alt.expr) for n in plan.walk() if not n.children)
    inner = sum(space.summary(c.alt.expr) for n in joins for c in n.children if c.children)
    out: dict[str, float] = {"rate": s.rate(space.all)}
    if getattr(model, "kind", "rate") == "rate":
        out["load"] = cost
        out["output_rate"] = out["rate"] / max(1.0, cost)
    else:
        t_n = s.time_to(model.results)
        out["results"] = model.results
        out["t_n"] = t_n
        out["time_to_n"] = max(t_n, cost)
    out["eq2_output_rate"] = eq2_rate(space, plan)
    out["state_windows"] = windows
    out["state_intermediate"] = inner
    out["state_tuples"] = windows + inner
    return out


class RateModel:
    """Seed 000's rate-based model (module doc): ``scan`` per stream, joins ``shj`` and
    ``nlj``, symmetric (both handle either input alike), no physical properties, no final
    operator. ``objective`` is ``rate`` or ``time-to:N``; ``constants`` the per-tuple costs,
    a profile of :data:`PROFILES` (default ``spark``, the original constants)."""

    name = "rate"
    symmetric = True
    join_methods = ("shj", "nlj")
    operators = ("scan", "shj", "nlj")

    def __init__(self, objective: str = "rate", constants: RateConstants | None = None):
        self.kind, self.results = parse_objective(objective)
        self.objective = "rate" if self.kind == "rate" else f"time-to:{self.results:g}"
        self.constants = constants or rate_profile(None)

    def reads_root(self, space: PlanSpace) -> bool:
        """Whether every local cost reads the whole query's estimate (``time-to:N``: through
        ``t_N``), so a delta that moves anything moves every cost."""
        return self.kind == "time-to"

    def scan_alternatives(self, space: PlanSpace, expr: int, prop: str) -> list[Alt]:
        return [Alt(expr, prop, 0, "scan", "scan")] if prop == ANY else []

    def join_alternatives(self, space, expr, prop, left, right, method):
        if prop != ANY or not left & expr & -expr:
            return []  # symmetric: one order per split, the lowest relation on the left
        if method == "shj" and not space.crossing(left, right):
            return []  # a hash join needs an equi-join predicate
        return [Alt(expr, prop, left, "join", method, left, ANY, right, ANY)]

    def local_cost(self, space: PlanSpace, alt: Alt) -> float:
        return self.constants.price(self.work(space, alt))

    def work(self, space: PlanSpace, alt: Alt) -> Work:
        """The alternative's operations per second (``rate``) or by ``t_N`` (``time-to:N``),
        by kind (module doc: "Costs are work")."""
        s = streams(space)
        timed = self.kind == "time-to"
        t = s.time_to(self.results) if timed else 1.0
        if alt.log_op == "scan":
            return Work(select=s.arrivals[alt.expr.bit_length() - 1] * t)
        left, right = alt.left, alt.right
        if timed:
            n = self.results
            ins_l, ins_r = s.produced_by_t_n(left, n), s.produced_by_t_n(right, n)
            out = s.produced_by_t_n(alt.expr, n)
        else:
            ins_l, ins_r, out = s.rate(left), s.rate(right), s.rate(alt.expr)
        ins = ins_l + ins_r
        if alt.phy_op == "shj":
            return Work(move=ins, hash=ins, probe=ins, out=out)
        if timed:
            comps = s.comparisons(left, right, t)
        else:
            comps = ins_l * space.summary(right) + ins_r * space.summary(left)
        return Work(move=ins, comp=comps, out=out)
