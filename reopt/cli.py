"""Command line: ``reopt optimize …`` and ``reopt stats …``.

Bad input of any kind ends with one line ``reopt: <what is wrong>`` on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from reopt.api import OPTIMIZERS, Optimizer, load_catalog, load_query
from reopt.costmodel.deltas import DeltaNotApplicable, apply_delta, parse_deltas
from reopt.costmodel.errors import DeltaError, ReoptError
from reopt.costmodel.models import MODELS, cost_model


def _optimizer_list(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    for n in names:
        if n not in OPTIMIZERS:
            raise ReoptError(f"unknown optimizer '{n}' (choose from {', '.join(OPTIMIZERS)})")
    return names


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="reopt", description="Incremental query re-optimizer")
    sub = p.add_subparsers(dest="command", required=True)
    o = sub.add_parser("optimize", help="optimize queries; optionally push cost deltas")
    o.add_argument("queries", nargs="+", metavar="QUERY", help="a .sql file or tpch:q1…q8joins")
    o.add_argument("--catalog", help="catalog JSON (default: built-in TPC-H statistics)")
    o.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor (built-in catalog)")
    o.add_argument("--cost-model", default="io", choices=sorted(MODELS))
    o.add_argument(
        "--optimizer", default="topdown",
        help=f"one or a comma-separated list of: {', '.join(OPTIMIZERS)}",
    )
    o.add_argument(
        "--delta", action="append", default=[], metavar="D",
        help="a delta step (repeatable), e.g. 'card orders *2'; ';' joins a batch in one step",
    )
    o.add_argument("--json", action="store_true", help="print JSON instead of plan trees")
    s = sub.add_parser("stats", help="compute a catalog from Parquet/CSV tables with Spark")
    s.add_argument("args", nargs=argparse.REMAINDER)
    return p


def _validate_steps(opts: list[Optimizer], steps: list[list]) -> None:
    """Check every delta against every query before optimizing anything.

    A delta naming a catalog table that a query does not use is a no-op for that query; a
    delta that applies to no query at all is an error.
    """
    adjs = [o.adjustments for o in opts]
    for batch in steps:
        for d in batch:
            applied = False
            for i, o in enumerate(opts):
                try:
                    adjs[i] = apply_delta(d, o.query, o.catalog, adjs[i], o.model.operators)
                    applied = True
                except DeltaNotApplicable:
                    continue
            if not applied:
                raise DeltaError(f"delta '{d}': no query uses the table it names")


def _applicable(o: Optimizer, batch: list) -> list:
    out = []
    for d in batch:
        try:
            o.check([d])
            out.append(d)
        except DeltaNotApplicable:
            pass
    return out


def optimize_main(args: argparse.Namespace) -> int:
    catalog = load_catalog(args.catalog, args.sf)
    cost_model(args.cost_model)
    names = _optimizer_list(args.optimizer)
    queries = [load_query(q, catalog) for q in args.queries]
    steps = [parse_deltas(d) for d in args.delta]
    out: list[dict[str, Any]] = []
    for query in queries:
        for name in names:
            opts = Optimizer(query, catalog, cost_model=args.cost_model, optimizer=name)
            out.append({"query": query.name, "optimizer": name, "session": opts})
    _validate_steps([e["session"] for e in out], steps)
    for e in out:
        session: Optimizer = e.pop("session")
        initial = session.optimize()
        e["cost_model"] = args.cost_model
        e["initial"] = initial
        e["steps"] = []
        for batch in steps:
            mine = _applicable(session, batch)
            step = session.update(mine) if mine else session.update([])
            step.deltas = [str(d) for d in batch]
            e["steps"].append(step)
    if args.json:
        doc = {
            "queries": [
                {**e, "initial": e["initial"].to_json(), "steps": [s.to_json() for s in e["steps"]]}
                for e in out
            ]
        }
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    for e in out:
        init = e["initial"]
        print(
            f"== {e['query']} · {e['cost_model']} · {e['optimizer']}: cost={init.cost:.6g} "
            f"({init.metrics['seconds'] * 1000:.1f} ms)"
        )
        print(init.plan.explain())
        for step in e["steps"]:
            print(f"-- after {'; '.join(step.deltas)}: cost={step.cost:.6g}")
            print(step.plan.explain())
        print()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["stats"]:  # its own parser, so `reopt stats --help` shows its options
            from reopt.costmodel.stats import main as stats_main

            return stats_main(argv[1:])
        return optimize_main(_parser().parse_args(argv))
    except ReoptError as e:
        print(f"reopt: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # pragma: no cover
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
