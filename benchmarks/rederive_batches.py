"""Re-deriving an update's stale groups set at a time: what the columnar primitives of a
from-scratch evaluation (``evaluator/columnar.py``) would cost on the batches an update runs,
against the tuple-at-a-time variants it runs now.

Run: ``.venv/bin/python benchmarks/rederive_batches.py [SUBJECT ...] [--model cout]``, a
subject being a workload query's path without extension (``benchmarks/workload.py -o DIR``;
its ``.sql``, ``.catalog.json`` and ``.deltas.txt``) or ``tpch:qN`` (the single deltas of
``benchmarks/small_updates.py``). Python engine, pruning ``all``.

Each subject is optimized, then updated delta by delta. Every time the update re-derives a
rank of groups (``MaintainedEngine._rederive_groups``), each rule variant it runs on the
rank's source tuples is run a second time on frames, through
:meth:`~reopt.evaluator.columnar.ColumnarStratum.run_variant` over the same complete layer,
and the two bags of derived tuples are checked equal. Timed (CPU, ``time.process_time``,
garbage collector off), per batch size class (source tuples per call):

* **tuples**: the generated variant, as the update runs it;
* **frames, whole**: the frames of the tuples in (the rank's source tuples made a frame) and
  the derived tuples out, around the columnar run — what a drop-in replacement would pay;
* **frames, ops only**: the columnar run alone, its input frame built beforehand and its
  output left a frame — the floor of a redesign keeping the complete layer on frames.

Not timed: the frame of the complete layer's other relations (``PlanCost``), which a
drop-in replacement would also have to build or keep in step.
"""

from __future__ import annotations

import gc
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from harness import parser, script

from reopt.api import Optimizer
from reopt.costmodel.errors import ReoptError
from reopt.evaluator import maintenance
from reopt.evaluator.columnar import ColumnarStratum, names

CLASSES = ((0, 50), (50, 500), (500, 5_000), (5_000, 10**9))
"""Source tuples per variant call: the classes reported."""


class _OnLayer(ColumnarStratum):
    """Frames of a maintained evaluation's complete layer, to run variants on."""

    def __init__(self, engine: Any, preds: list[str]):
        self._frames_of(engine, engine.complete, preds)


def _steps(subject: str, model: str) -> tuple[Any, Any, list[list[str]]]:
    """The query, its catalog and its delta steps."""
    if subject.startswith("tpch:"):
        from small_updates import workload  # (this directory is on the path)

        return subject, None, workload(subject.split(":")[1], model, 0)["single"]
    if not Path(subject + ".deltas.txt").is_file():
        raise ReoptError(f"{subject}.deltas.txt: no such file (make the workload first: "
                         "benchmarks/workload.py -o DIR)")
    lines = Path(subject + ".deltas.txt").read_text().splitlines()
    return (Path(subject + ".sql").read_text(), subject + ".catalog.json",
            [[s.strip()] for s in lines if s.strip()])


def measure(subject: str, model: str) -> dict[tuple[int, int], dict[str, float]]:
    """Per size class: calls, source tuples, derived tuples and the three timings."""
    out: dict[tuple[int, int], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    engine_cls = maintenance.MaintainedEngine
    plain = engine_cls.run_variant
    active = {"on": False}
    sources = set()

    def run_variant(self: Any, v: Any, full: Any, delta: Any) -> list[tuple]:
        t0 = time.process_time()
        got = plain(self, v, full, delta)
        t1 = time.process_time()
        if not active["on"] or id(v) not in sources:
            return got
        (pred, rel), = delta.items()
        rows = list(rel.rows)
        on = _OnLayer(self, [p for p in self.complete_program.schemas
                             if p in self.complete and p != pred])
        t3 = time.process_time()
        frame = on._frame_of(rows, pred)
        t4 = time.process_time()
        derived = on.run_variant(v, {pred: frame})
        t5 = time.process_time()
        back = derived.rows(names(len(self.program.schemas[v.head_pred])))
        t6 = time.process_time()
        if sorted(back) != sorted(got):
            raise AssertionError(f"{subject}: frames derived other tuples than the variant")
        cls = next(c for c in CLASSES if c[0] <= len(rows) < c[1])
        row = out[cls]
        row["calls"] += 1
        row["source"] += len(rows)
        row["derived"] += len(got)
        row["tuples"] += t1 - t0
        row["whole"] += (t4 - t3) + (t5 - t4) + (t6 - t5)
        row["ops"] += t5 - t4
        return got

    rederive = engine_cls._rederive_groups

    def rederive_groups(self: Any, *args: Any) -> Any:
        sources.update(id(v) for _, _, v in self.plan.sources)
        active["on"] = True
        try:
            return rederive(self, *args)
        finally:
            active["on"] = False

    q, cat, steps = _steps(subject, model)
    engine_cls.run_variant = run_variant  # type: ignore[method-assign]
    engine_cls._rederive_groups = rederive_groups  # type: ignore[method-assign]
    try:
        o = Optimizer(q, cat, cost_model=model, optimizer="declarative", engine="python",
                      pruning="all")
        o.optimize()
        gc.disable()
        try:
            for step in steps:
                o.update(step)
        finally:
            gc.enable()
    finally:
        engine_cls.run_variant = plain  # type: ignore[method-assign]
        engine_cls._rederive_groups = rederive  # type: ignore[method-assign]
    return out


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("subjects", nargs="*", default=["/tmp/wl/clique-14-s0-4",
                                                   "/tmp/wll/large-clique-14", "tpch:q8join"])
    p.add_argument("--model", default="cout")
    args = p.parse_args(argv)
    for s in args.subjects:  # (a missing file: one line before any output)
        if not s.startswith("tpch:"):
            _steps(s, args.model)
    print("| subject | source tuples per call | calls | source tuples | derived | tuples ms "
          "| frames, whole ms | frames, ops only ms | whole / tuples | ops only / tuples |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s in args.subjects:
        for (lo, hi), r in sorted(measure(s, args.model).items()):
            size = f"{lo}–{hi - 1}" if hi < 10**9 else f"≥ {lo}"
            name = s if s.startswith("tpch:") else s.rsplit("/", 1)[-1]
            print(f"| {name} ({args.model}) | {size} | {int(r['calls'])} | {int(r['source'])} "
                  f"| {int(r['derived'])} | {r['tuples'] * 1e3:.1f} | {r['whole'] * 1e3:.1f} "
                  f"| {r['ops'] * 1e3:.1f} | {r['whole'] / r['tuples']:.2f}× "
                  f"| {r['ops'] / r['tuples']:.2f}× |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
