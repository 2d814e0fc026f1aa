"""Seeded stream workloads for continuous queries: ``reopt data stream``.

Three workloads, each a few streams of timestamped records whose arrival rates and join
selectivities drift in phases:

* ``nexmark`` (shaped like NEXMark's auction site): ``persons(id, state, ts)``,
  ``auctions(id, seller, category, reserve, ts)``, ``bids(auction, bidder, price, ts)``; the
  query joins each bid to its auction and the auction to its seller.
* ``linearroad`` (shaped like Linear Road's expressway): ``positions(vid, xway, seg, speed,
  ts)`` position reports, ``segstats(xway, seg, cars, avgspeed, ts)`` segment statistics and
  ``accidents(xway, seg, vid, ts)``; the query joins slow cars' reports to their segment's
  statistics and to accidents on that segment.
* ``segtolls``: linearroad's streams (the same files for the same ``--phases``; its default
  phases keep the key domain in the third, where linearroad's shrinks it) with a 5-way
  windowed join shaped like the SegTollS query of the paper's Figure 10: slow cars' reports
  joined to their segment's statistics, the accidents there, fast cars passing on the same
  segment and expressway in the last 2 s (``positions`` again), and the busy statistics of
  the accident's segment over 30 s (``segstats`` again).

Every record has ``ts``, its event time in seconds of stream time (a double, milliseconds).
The output folder holds one Parquet file per stream per second, ``STREAM/SSSSSS.parquet``
(the records with ``ts`` in ``[S, S+1)``, in ``ts`` order; an empty second has an empty file),
the stream catalog ``catalog.json`` (the first phase's rates, the windows, the join columns'
distinct counts), the continuous query ``query.sql`` with its window clauses, and
``stream.json`` (workload, seed, phases, seconds).

A phase is ``SECONDS[:NAME=VALUE,...]`` where NAME is a stream (its rate in tuples/s) or
``keys`` (the join keys' domain: each key column draws uniformly from ``keys`` values, so an
equi-join's selectivity is about ``1/keys``); phases are separated by ``;``, e.g.
``10;10:bids=500;10:keys=20``. A phase starts from the workload's base rates and keys. The
same seed, workload and phases always give the same files.

Presets (``--phases drift`` or ``--phases steady``, nexmark and segtolls; thirds of
``--seconds`` as the default phases). The default phases drift in rates and keys, but hardly
in which plan is best, so no re-planner can win much on them. ``drift`` makes one stream's
rate jump 10× twice, from a base chosen offline by ``benchmarks/stream_drift.py --search
--fixed 0.0083`` (base rates ×0.2/×1/×5, key domains and which stream jumps, ranked by the
rate model's load of the first phase's best plan over each phase's best, priced with the
in-process executor's calibrated ``local`` profile plus its plan-independent cost per
second) so that the best plan changes and the first one becomes a bad one: nexmark ``bids``
8 → 80 → 800/s (``persons`` 4/s, ``auctions`` 40/s, 10 keys; the first phase's plan's load
is 1.55× and 1.8× the best in phases 2 and 3), segtolls ``segstats`` 1 → 10 → 100/s
(``positions`` 250/s, ``accidents`` 5/s, 40 keys; 1.4× and 8×). ``steady`` is ``drift``'s
middle phase throughout: stationary, so re-planning has nothing to win
(``benchmarks/stream_drift.py`` prints these ratios for any phases; BENCHMARKS.md).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reopt.costmodel.errors import ReoptError


@dataclass(frozen=True)
class Workload:
    """A stream workload: its streams' base rates, key domain, windows and query."""

    name: str
    rates: dict[str, float]
    keys: int
    windows: dict[str, float]
    sql: str
    default_phases: str
    """The phases of ``reopt data stream`` without ``--phases``, ``{s}`` a third of
    ``--seconds``."""
    streams_of: str | None = None
    """The workload whose streams this one draws (same records for the same arguments);
    None: its own."""
    presets: dict[str, str] = field(default_factory=dict)
    """Named phases for ``--phases NAME`` (``{s}`` a third of ``--seconds``): ``drift``, where
    the best plan changes between phases by a wide margin, and ``steady``, its middle phase
    throughout (module doc, "Presets")."""

    @property
    def generator(self) -> str:
        """The workload name the record generator and column tables are keyed by."""
        return self.streams_of or self.name


WORKLOADS = {
    "nexmark": Workload(
        "nexmark", {"persons": 4.0, "auctions": 8.0, "bids": 40.0}, 50,
        {"persons": 20.0, "auctions": 10.0, "bids": 5.0},
        "SELECT p.id AS person, p.state, a.id AS auction, a.category, b.bidder, b.price\n"
        "FROM persons [RANGE 20 SECONDS] p, auctions [RANGE 10 SECONDS] a,\n"
        "     bids [RANGE 5 SECONDS] b\n"
        "WHERE p.id = a.seller AND a.id = b.auction AND b.price > 100\n",
        "{s};{s}:bids=400;{s}:keys=10",
        presets={"drift": "{s}:persons=4,auctions=40,bids=8,keys=10;"
                          "{s}:persons=4,auctions=40,bids=80,keys=10;"
                          "{s}:persons=4,auctions=40,bids=800,keys=10",
                 "steady": "{s}:persons=4,auctions=40,bids=80,keys=10;"
                           "{s}:persons=4,auctions=40,bids=80,keys=10;"
                           "{s}:persons=4,auctions=40,bids=80,keys=10"}),
    "linearroad": Workload(
        "linearroad", {"positions": 50.0, "segstats": 5.0, "accidents": 1.0}, 40,
        {"positions": 5.0, "segstats": 10.0, "accidents": 30.0},
        "SELECT p.vid, p.xway, p.seg, p.speed, s.avgspeed, s.cars, x.vid AS crashed\n"
        "FROM positions [RANGE 5 SECONDS] p, segstats [RANGE 10 SECONDS] s,\n"
        "     accidents [RANGE 30 SECONDS] x\n"
        "WHERE p.seg = s.seg AND s.seg = x.seg AND p.speed < 40\n",
        "{s};{s}:accidents=10;{s}:positions=400,keys=10"),
    "segtolls": Workload(
        "segtolls", {"positions": 50.0, "segstats": 5.0, "accidents": 1.0}, 40,
        {"positions": 5.0, "segstats": 10.0, "accidents": 30.0},
        "SELECT p.vid, p.xway, p.seg, p.speed, s.avgspeed, s.cars, x.vid AS crashed,\n"
        "       q.vid AS passing, t.avgspeed AS upstream\n"
        "FROM positions [RANGE 5 SECONDS] p, segstats [RANGE 10 SECONDS] s,\n"
        "     accidents [RANGE 30 SECONDS] x, positions [RANGE 2 SECONDS] q,\n"
        "     segstats [RANGE 30 SECONDS] t\n"
        "WHERE p.seg = s.seg AND s.seg = x.seg AND p.seg = q.seg AND p.xway = q.xway\n"
        "  AND x.seg = t.seg AND x.xway = t.xway\n"
        "  AND p.speed < 40 AND q.speed > 80 AND t.cars > 150\n",
        "{s};{s}:accidents=10;{s}:positions=400", streams_of="linearroad",
        presets={"drift": "{s}:positions=250,segstats=1,accidents=5,keys=40;"
                          "{s}:positions=250,segstats=10,accidents=5,keys=40;"
                          "{s}:positions=250,segstats=100,accidents=5,keys=40",
                 "steady": "{s}:positions=250,segstats=10,accidents=5,keys=40;"
                           "{s}:positions=250,segstats=10,accidents=5,keys=40;"
                           "{s}:positions=250,segstats=10,accidents=5,keys=40"}),
}


@dataclass(frozen=True)
class Phase:
    """A stretch of stream time with fixed rates and key domain."""

    seconds: int
    rates: dict[str, float]
    keys: int
    changes: dict[str, float] = field(default_factory=dict)
    """What the phase's text changed from the base (for ``stream.json``)."""


def parse_phases(text: str, workload: Workload) -> list[Phase]:
    """The phases of ``--phases`` (see the module doc); one-line errors naming the part."""
    phases = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            raise ReoptError(f"--phases {text!r}: an empty phase (phases are separated by ';')")
        head, _, rest = part.partition(":")
        if not head.strip().isdigit() or int(head) < 1:
            raise ReoptError(f"--phases: phase {part!r} must start with its length in whole "
                             "seconds >= 1")
        rates, keys, changes = dict(workload.rates), workload.keys, {}
        for item in (i.strip() for i in rest.split(",") if i.strip()):
            name, eq, value = item.partition("=")
            name = name.strip()
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not eq or not math.isfinite(number) or number < 0:
                raise ReoptError(f"--phases: {item!r} in phase {part!r} must be NAME=VALUE with "
                                 "a finite VALUE >= 0")
            if name == "keys":
                if number < 1 or number != int(number):
                    raise ReoptError(f"--phases: keys in phase {part!r} must be a whole "
                                     "number >= 1")
                keys = int(number)
            elif name in rates:
                rates[name] = number
            else:
                raise ReoptError(f"--phases: {name!r} in phase {part!r} is neither 'keys' nor a "
                                 f"stream of {workload.name} ({', '.join(workload.rates)})")
            changes[name] = number
        phases.append(Phase(int(head), rates, keys, changes))
    return phases


def _records(workload: str, stream: str, n: int, second: int, keys: int,
             rng: np.random.Generator) -> pd.DataFrame:
    """``n`` records of ``stream`` in stream second ``second``, sorted by ``ts``."""
    ts = np.sort(np.round(second + rng.random(n), 3))
    ts = np.minimum(ts, second + 0.999)  # rounding must not move a record to the next second

    def key() -> np.ndarray:
        return rng.integers(0, keys, n, dtype=np.int64)

    if workload == "nexmark":
        if stream == "persons":
            cols = {"id": key(), "state": rng.choice(np.array(["OR", "ID", "CA", "WA"]), n)}
        elif stream == "auctions":
            cols = {"id": key(), "seller": key(), "category": rng.integers(0, 10, n),
                    "reserve": rng.integers(50, 500, n)}
        else:
            cols = {"auction": key(), "bidder": key(), "price": rng.integers(1, 300, n)}
    else:
        if stream == "positions":
            cols = {"vid": rng.integers(0, 10_000, n), "xway": rng.integers(0, 2, n),
                    "seg": key(), "speed": rng.integers(0, 100, n)}
        elif stream == "segstats":
            cols = {"xway": rng.integers(0, 2, n), "seg": key(), "cars": rng.integers(0, 200, n),
                    "avgspeed": np.round(rng.random(n) * 80, 1)}
        else:
            cols = {"xway": rng.integers(0, 2, n), "seg": key(), "vid": rng.integers(0, 10_000, n)}
    return pd.DataFrame({**{c: np.asarray(v) for c, v in cols.items()}, "ts": ts})


KEY_COLUMNS = {"nexmark": {"persons": ["id"], "auctions": ["id", "seller"],
                           "bids": ["auction", "bidder"]},
               "linearroad": {"positions": ["seg"], "segstats": ["seg"], "accidents": ["seg"]}}
"""The columns drawn from the phase's key domain (their catalog ``distinct`` is ``keys``)."""


COLUMNS = {"nexmark": {"persons": ["id", "state"],
                       "auctions": ["id", "seller", "category", "reserve"],
                       "bids": ["auction", "bidder", "price"]},
           "linearroad": {"positions": ["vid", "xway", "seg", "speed"],
                          "segstats": ["xway", "seg", "cars", "avgspeed"],
                          "accidents": ["xway", "seg", "vid"]}}
"""Each stream's columns besides ``ts``, in file order."""
RANGES = {"price": (1, 299), "speed": (0, 99), "category": (0, 9), "reserve": (50, 499),
          "cars": (0, 199), "avgspeed": (0, 80), "xway": (0, 1), "vid": (0, 9_999)}
"""The value ranges of the non-key columns (the catalog's ``min``/``max``)."""


def stream_catalog(workload: Workload, first: Phase) -> dict[str, Any]:
    """The catalog a continuous query starts from: the first phase's rates and keys."""
    tables = {}
    for stream, rate in first.rates.items():
        columns: dict[str, Any] = {}
        for c in COLUMNS[workload.generator][stream]:
            if c in KEY_COLUMNS[workload.generator][stream]:
                columns[c] = {"distinct": first.keys}
            elif c in RANGES:
                lo, hi = RANGES[c]
                columns[c] = {"min": lo, "max": hi}
            else:
                columns[c] = {}
        columns["ts"] = {}
        tables[stream] = {"rate": max(rate, 1e-3), "window": workload.windows[stream],
                          "columns": columns}
    return {"tables": tables}


def generate_stream(workload: str, out: str | Path, seconds: int | None = None,
                    seed: int = 0, phases: str | None = None) -> dict[str, Any]:
    """Write ``workload``'s streams to ``out`` (created; must be empty or absent) and return
    the manifest (what ``stream.json`` holds). Without ``phases``, the workload's three
    default phases of ``seconds / 3`` each (``seconds`` default 30)."""
    if workload not in WORKLOADS:
        raise ReoptError(f"unknown stream workload {workload!r} (choose from "
                         f"{', '.join(WORKLOADS)})")
    w = WORKLOADS[workload]
    template = w.default_phases if phases is None else w.presets.get(phases)
    if template is None and phases is not None and phases.isidentifier():
        raise ReoptError(f"--phases {phases}: {workload} has no such preset (presets: "
                         f"{', '.join(w.presets) or 'none'}; or phases SECONDS[:NAME=VALUE,...])")
    if template is not None:
        total = 30 if seconds is None else seconds
        if total < 3:
            raise ReoptError(f"--seconds {total}: the {phases or 'default'} phases need at "
                             "least 3 seconds")
        third = total // 3
        phases = template.format(s=third)
        if total - 3 * third:  # the last phase takes the rest
            head, _, rest = phases.rpartition(";")
            length, colon, changes = rest.partition(":")
            phases = f"{head};{int(length) + total - 3 * third}{colon}{changes}"
    plan = parse_phases(phases, w)
    total = sum(p.seconds for p in plan)
    if seconds is not None and seconds != total:
        raise ReoptError(f"--seconds {seconds} disagrees with --phases, which last {total} s")
    root = Path(out)
    if root.exists() and any(root.iterdir()):
        raise ReoptError(f"{root}: the output folder must be empty")
    rng = np.random.default_rng(seed)
    counts = {s: 0 for s in w.rates}
    second = 0
    for stream in w.rates:
        (root / stream).mkdir(parents=True, exist_ok=True)
    for phase in plan:
        for _ in range(phase.seconds):
            for stream, rate in phase.rates.items():
                frame = _records(w.generator, stream, int(rng.poisson(rate)), second, phase.keys,
                                 rng)
                frame.to_parquet(root / stream / f"{second:06d}.parquet", index=False)
                counts[stream] += len(frame)
            second += 1
    manifest = {"workload": workload, "seed": seed, "seconds": total, "phases": phases,
                "streams": list(w.rates), "time_column": "ts", "records": counts,
                "phase_list": [{"seconds": p.seconds, "rates": p.rates, "keys": p.keys}
                               for p in plan]}
    (root / "catalog.json").write_text(json.dumps(stream_catalog(w, plan[0]), indent=2) + "\n")
    (root / "query.sql").write_text(w.sql)
    (root / "stream.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
