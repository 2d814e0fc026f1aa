"""``reopt fleet``: optimize many standing queries on Spark, then rounds of deltas.

    reopt fleet QUERIES [--round DELTAS.jsonl ...] [--save DIR]
    reopt fleet --resume DIR [--round DELTAS.jsonl ...] [--save DIR]

QUERIES is a directory or glob of ``.sql`` files (``<name>.catalog.json`` beside a file is
its catalog) or a JSON lines file of ``{"name", "sql"[, "catalog"]}``. Each ``--round`` file
is one round of deltas, JSON lines ``{"query": name, "delta": text}``. Results go to stdout
(or ``-o``) as JSON lines, one per query and round; a summary line per round goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from reopt.cliargs import UsageParser, positive_int
from reopt.costmodel.errors import ReoptError
from reopt.costmodel.models import MODELS
from reopt.evaluator.driver import PRUNING_MODES


def parser() -> argparse.ArgumentParser:
    p = UsageParser(prog="reopt fleet", description=__doc__.split("\n\n")[0])
    p.add_argument("queries", nargs="?", metavar="QUERIES",
                   help="directory or glob of .sql files, or a .jsonl file of "
                   "{\"name\", \"sql\"[, \"catalog\"]} lines (not with --resume)")
    p.add_argument("--catalog", help="catalog JSON for queries without their own "
                   "(default: the built-in TPC-H statistics)")
    p.add_argument("--cost-model", default="io", choices=sorted(MODELS))
    p.add_argument("--pruning", default="all", choices=list(PRUNING_MODES))
    p.add_argument("--rules", metavar="DIR", help="a rules directory (default: the shipped "
                   "rules/); it must be decomposable by query id")
    p.add_argument("--round", action="append", default=[], metavar="DELTAS",
                   help="a JSON lines file of {\"query\": name, \"delta\": text}: one round "
                   "of deltas (repeatable, applied in order)")
    p.add_argument("--master", help="Spark master (default $REOPT_SPARK_MASTER or local[*]; "
                   "e.g. spark://host:7077 or local-cluster[2,1,1024])")
    p.add_argument("--partitions", type=positive_int, metavar="P",
                   help="partitions of the fleet's state (default: 4 per core, at most one "
                   "per query)")
    p.add_argument("--checkpoint", metavar="DIR", help="directory for each round's reliable "
                   "checkpoint (default: the Spark session's checkpoint directory)")
    p.add_argument("--save", metavar="DIR", help="save the fleet after the last round, for "
                   "--resume in another run")
    p.add_argument("--resume", metavar="DIR", help="continue a fleet saved with --save "
                   "instead of optimizing QUERIES")
    p.add_argument("-o", "--output", metavar="FILE", help="write the JSON lines here "
                   "(default: stdout)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return p


def main(argv: list[str]) -> int:
    from reopt.fleet import Fleet, read_deltas, read_queries
    from reopt.spark import get_spark

    args = parser().parse_args(argv)
    if (args.queries is None) == (args.resume is None):
        raise ReoptError("fleet: give QUERIES or --resume DIR (one of them)")
    rounds = [read_deltas(f) for f in args.round]  # bad files fail before Spark starts
    progress = not args.no_progress and sys.stderr.isatty()
    if args.resume:
        for flag in ("catalog", "rules"):
            if getattr(args, flag):
                raise ReoptError(f"fleet: --{flag} is saved with the fleet; not with --resume")
        spark = get_spark(args.master)
        fleet = Fleet.load(args.resume, spark=spark, checkpoint=args.checkpoint,
                           progress=progress)
        done = []
    else:
        queries = read_queries(args.queries)
        fleet = Fleet(queries, args.catalog, cost_model=args.cost_model, pruning=args.pruning,
                      rules=args.rules, partitions=args.partitions,
                      checkpoint=args.checkpoint, progress=progress)
        fleet.spark = get_spark(args.master)
        done = [fleet.optimize()]
    out: TextIO = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        for rnd in done:
            _emit(rnd, out)
        for deltas in rounds:
            _emit(fleet.update(deltas), out)
    finally:
        if args.output:
            out.close()
    if args.save:
        fleet.save(Path(args.save))
    return 0


def _emit(rnd: Any, out: TextIO) -> None:
    changed = sum(bool(r.get("changed")) for r in rnd.results)
    for r in rnd.results:
        line = {"round": rnd.number, "query": r["name"], "cost": r.get("cost"),
                "plan": json.loads(r["plan"]) if r.get("plan") else None,
                "changed": bool(r.get("changed")), "error": r.get("error")}
        out.write(json.dumps(line) + "\n")
    out.flush()
    print(f"reopt fleet: round {rnd.number}: {len(rnd.results)} queries, {changed} plans "
          f"changed, {len(rnd.errors)} rejected, {rnd.jobs} Spark jobs, "
          f"{rnd.seconds:.2f} s", file=sys.stderr)
    for e in rnd.errors[:20]:
        print(f"reopt: {e}", file=sys.stderr)
    if len(rnd.errors) > 20:
        print(f"reopt: ... and {len(rnd.errors) - 20} more rejected", file=sys.stderr)
