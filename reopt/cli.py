"""Command line: ``reopt optimize``, ``execute``, ``run``, ``stats``, ``data`` and ``bench``.

Bad input of any kind ends with one line ``reopt: <what is wrong>`` on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

from reopt.api import (
    DECLARATIVE,
    ENGINES,
    MAX_PAIRS,
    OPTIMIZERS,
    OVER_BUDGET,
    PRUNING_MODES,
    Optimizer,
    Step,
    load_catalog,
    load_query,
    optimize_batch,
    update_steps,
)
from reopt.cliargs import UsageParser, positive_int, scale_factor
from reopt.costmodel.cardinality import (
    DEFAULT_OBSERVED_SUPERSETS,
    OBSERVED_SUPERSETS,
    Adjustments,
)
from reopt.costmodel.deltas import DeltaNotApplicable, apply_delta, parse_deltas
from reopt.costmodel.dist import PROFILES as DIST_PROFILES
from reopt.costmodel.errors import DeltaError, ReoptError
from reopt.costmodel.models import MODELS
from reopt.costmodel.numeric import dumps_strict
from reopt.costmodel.rate import PROFILES
from reopt.evaluator.budget import MAX_ITERATIONS, MAX_TUPLES, Budget


def _optimizer_list(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise ReoptError(f"--optimizer {text!r} names no optimizer "
                         f"(choose from {', '.join(OPTIMIZERS)})")
    for n in names:
        if n not in OPTIMIZERS:
            raise ReoptError(f"unknown optimizer '{n}' (choose from {', '.join(OPTIMIZERS)})")
    return names


def _parser() -> argparse.ArgumentParser:
    p = UsageParser(prog="reopt", description="Incremental query re-optimizer")
    sub = p.add_subparsers(dest="command", required=True)
    o = sub.add_parser("optimize", help="optimize queries; optionally push cost deltas")
    o.add_argument("queries", nargs="+", metavar="QUERY", help="a .sql file or tpch:q1…q8joins")
    o.add_argument("--catalog", help="catalog JSON (default: built-in TPC-H statistics)")
    o.add_argument("--sf", type=scale_factor, help="TPC-H scale factor of the built-in "
                   "catalog (default 1; not with --catalog)")
    o.add_argument("--cost-model", default="io", choices=sorted(MODELS))
    o.add_argument("--objective", metavar="rate|time-to:N",
                   help="what the rate cost model optimizes: the output rate (rate, the "
                   "default) or the time to the first N results (time-to:N)")
    o.add_argument("--rate-profile", choices=sorted(PROFILES), metavar="spark|local",
                   help="the rate cost model's per-tuple costs: measured for the in-process "
                   "stream executor (local) or the original constants (spark, the default)")
    _dist_profile_argument(o)
    o.add_argument(
        "--optimizer", default=DECLARATIVE,
        help=f"one or a comma-separated list of: {', '.join(OPTIMIZERS)} (default: declarative)",
    )
    o.add_argument("--engine", default="spark", choices=ENGINES,
                   help="engine of the declarative optimizer (default: spark)")
    o.add_argument("--pruning", choices=PRUNING_MODES,
                   help="pruning inside the datalog evaluation of the declarative optimizer "
                   "(default: all)")
    o.add_argument("--rules", metavar="DIR", help="the declarative optimizer loads the *.dl "
                   "rule files of DIR instead of the installed ones")
    o.add_argument("--master", help="Spark master URL (default: local[*], or "
                   "$REOPT_SPARK_MASTER)")
    o.add_argument(
        "--delta", action="append", default=[], metavar="D",
        help="a delta step (repeatable), e.g. 'card orders *2'; ';' joins a batch in one step",
    )
    o.add_argument("--max-pairs", type=positive_int, default=MAX_PAIRS, metavar="N",
                   help="refuse a query whose join graph has more than N csg-cmp pairs, before "
                   f"any search (default {MAX_PAIRS:,})")
    o.add_argument("--observed-supersets", default=DEFAULT_OBSERVED_SUPERSETS,
                   choices=OBSERVED_SUPERSETS,
                   help="how sets no 'card {…} := N' observed use their observed subsets: keep "
                   "their estimates, or propagate the observed/estimated ratio of the largest "
                   f"disjoint ones (default: {DEFAULT_OBSERVED_SUPERSETS})")
    o.add_argument("--over-budget", choices=OVER_BUDGET, default="error",
                   help="a query above --max-pairs is refused (error, the default) or gets a "
                   "greedy plan flagged not exact (greedy)")
    o.add_argument("--max-tuples", type=positive_int, metavar="N",
                   help="stop the declarative optimizer's evaluation with an error when a "
                   f"relation holds more than N tuples (default {MAX_TUPLES:,})")
    o.add_argument("--max-iterations", type=positive_int, metavar="N",
                   help="stop the declarative optimizer's evaluation with an error after N "
                   f"fixpoint iterations (default {MAX_ITERATIONS:,})")
    o.add_argument("--json", action="store_true", help="print JSON instead of plan trees")
    e = sub.add_parser("execute", help="optimize a query, run its plan on Spark over a data "
                       "folder, compare estimated and observed rows")
    _data_arguments(e)
    e.add_argument("--optimizer", default="topdown", choices=OPTIMIZERS,
                   help="the optimizer whose plan runs (default topdown: every optimizer finds "
                   "the same optimum, topdown quickly)")
    _spark_run_arguments(e)
    e.add_argument("--delta", action="append", default=[], metavar="D",
                   help="a delta step applied before the run (repeatable), to run another plan")
    r = sub.add_parser("run", help="run a query split by split on Spark, re-optimizing "
                       "between splits from what each observed; compare strategies")
    _data_arguments(r)
    r.add_argument("--splits", type=positive_int, default=4, metavar="K",
                   help="split the largest input into K hash splits (default 4)")
    r.add_argument("--split", metavar="ALIAS", help="the relation to split (default: the "
                   "largest input on disk among tables the query names once)")
    r.add_argument("--split-by", choices=("hash", "range"),
                   help="hash splits (default) or ranges at the column's quantiles, in order")
    r.add_argument("--split-column", metavar="COL", help="the column splits are cut by "
                   "(default: the split table's first column)")
    r.add_argument("--per-subset", metavar="KEY", help="a plan per subset (Query Mesh): cut "
                   "the split input's column KEY into --subsets ranges; the K splits take the "
                   "ranges in turn, and adaptive keeps one optimizer session per range")
    r.add_argument("--subsets", type=positive_int, metavar="M", help="with --per-subset: the "
                   "number of ranges of KEY (default 2; at most --splits)")
    r.add_argument("--strategy", default="adaptive", type=_strategy_list,
                   help="one or a comma-separated list of: static, adaptive, hindsight, spark, "
                   "or all (default adaptive); each runs over the same splits")
    r.add_argument("--optimizer", default="topdown-inc", choices=OPTIMIZERS,
                   help="the optimizer that plans and re-plans (default topdown-inc)")
    _spark_run_arguments(r)
    r.add_argument("--delta", action="append", default=[], metavar="D",
                   help="a delta applied to the catalog before the first plan (repeatable), "
                   "e.g. a wrong statistic the observations must correct")
    s = sub.add_parser("stats", help="compute a catalog from Parquet/CSV tables with Spark")
    s.add_argument("args", nargs=argparse.REMAINDER)
    d = sub.add_parser("data", help="generate TPC-H data as Parquet (reopt data tpch --help)")
    d.add_argument("args", nargs=argparse.REMAINDER)
    f = sub.add_parser("fleet", help="optimize many standing queries on Spark, then rounds "
                       "of deltas (reopt fleet --help)")
    f.add_argument("args", nargs=argparse.REMAINDER)
    c = sub.add_parser("stream", help="run a continuous windowed join over stream files on "
                       "Spark in micro-batches (reopt stream --help)")
    c.add_argument("args", nargs=argparse.REMAINDER)
    b = sub.add_parser("bench", help="the paper's evaluation: BENCHMARKS.md and PNG plots "
                       "(source checkout only; see benchmarks/run.py)")
    b.add_argument("args", nargs=argparse.REMAINDER)
    return p


def bench_main(argv: list[str]) -> int:
    """``reopt bench``: ``benchmarks/run.py`` of the source checkout reopt is installed from
    (editable install); it is not part of the installed package."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"
    if not path.is_file():
        raise ReoptError(f"bench: {path} not found (reopt bench runs from a source checkout)")
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))  # its helpers: harness, sparkrun
    spec = importlib.util.spec_from_file_location("reopt_bench_run", path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv)


def _plan_steps(opts: list[Optimizer], steps: list[list]) -> list[list[Adjustments]]:
    """Apply every delta step to every session's statistics before optimizing anything;
    returns, per step, each session's statistics after it.

    A delta naming something a query does not contain (a table, an alias, a member of a
    relation set, a join predicate: :class:`DeltaNotApplicable`) is a no-op for that query,
    since the queries of one run differ; a delta that applies to no query at all is an error
    giving each query's reason, since then it can only be a mistake.
    """
    adjs = [o.adjustments for o in opts]
    out = []
    for batch in steps:
        for d in batch:
            applied = False
            reasons: dict[str, None] = {}  # ordered, once each (a query runs per optimizer)
            for i, o in enumerate(opts):
                try:
                    adjs[i] = apply_delta(d, o.query, o.catalog, adjs[i], o.model.operators)
                    applied = True
                except DeltaNotApplicable as e:
                    reasons[e.reason] = None
            if not applied:
                raise DeltaError(
                    f"delta '{d}': no query uses the {d.subject} it names "
                    f"({'; '.join(reasons)})"
                )
        out.append(list(adjs))
    return out


def _declarative_only(args: argparse.Namespace, names: list[str]) -> None:
    """``--pruning``, ``--rules`` and the evaluation budgets (``--max-tuples``,
    ``--max-iterations``) configure the datalog evaluation: given to a run of
    procedural optimizers only they would change nothing, so they are an error (as
    ``--master`` is without the spark engine), not silently ignored."""
    if DECLARATIVE in names:
        return
    for flag, value in (("--pruning", args.pruning), ("--rules", args.rules),
                        ("--max-tuples", args.max_tuples),
                        ("--max-iterations", args.max_iterations)):
        if value is not None:
            raise ReoptError(
                f"{flag} applies to the declarative optimizer; this run uses only "
                f"{', '.join(names)} (add declarative to --optimizer, or drop {flag})"
            )


def _print_stream(step: Step) -> None:
    """The rate model's promise for a plan (``metrics["stream"]``), one line."""
    m = step.metrics.get("stream")
    if m is None:
        return
    if "time_to_n" in m:
        what = (f"first {m['results']:g} results after {m['time_to_n']:.6g} s "
                f"(t_N={m['t_n']:.6g} s)")
    else:
        what = f"output {m['output_rate']:.6g} tuples/s at load {m['load']:.4g}"
    print(f"   {what}; Eq. 2 per operator {m['eq2_output_rate']:.6g} tuples/s; state "
          f"{m['state_tuples']:.6g} tuples ({m['state_windows']:.6g} in windows, "
          f"{m['state_intermediate']:.6g} intermediate)")


def optimize_main(args: argparse.Namespace) -> int:
    if args.catalog is not None and args.sf is not None:
        raise ReoptError("--sf scales the built-in TPC-H catalog; a --catalog file has its own "
                         "row counts (use 'card TABLE *F' deltas to scale them)")
    catalog = load_catalog(args.catalog, 1.0 if args.sf is None else args.sf)
    names = _optimizer_list(args.optimizer)
    if args.master is not None and not (DECLARATIVE in names and args.engine == "spark"):
        raise ReoptError("--master applies to the spark engine of the declarative optimizer; "
                         "nothing in this run uses Spark")
    _declarative_only(args, names)
    _model_options(args, "rate", "--objective", "--rate-profile")
    _model_options(args, "dist", "--dist-profile")
    args.pruning = args.pruning or "all"
    queries = [load_query(q, catalog) for q in args.queries]
    steps = [parse_deltas(d) for d in args.delta]
    program = None
    if DECLARATIVE in names:
        from reopt.evaluator.driver import load_program

        program = load_program(args.rules, args.pruning,
                               Budget(args.max_tuples or MAX_TUPLES,
                                      args.max_iterations or MAX_ITERATIONS))
    sessions = [
        Optimizer(query, catalog, cost_model=args.cost_model, optimizer=name,
                  engine=args.engine, pruning=args.pruning, rules=args.rules, program=program,
                  max_pairs=args.max_pairs, observed_supersets=args.observed_supersets,
                  over_budget=args.over_budget, objective=args.objective,
                  rate_profile=args.rate_profile, dist_profile=args.dist_profile)
        for query in queries
        for name in names
    ]
    planned = _plan_steps(sessions, steps)  # all input is checked before Spark starts
    setup_seconds = 0.0
    if DECLARATIVE in names and args.engine == "spark":
        from reopt.spark import get_spark

        t0 = time.perf_counter()
        get_spark(args.master)
        setup_seconds = time.perf_counter() - t0
    initial = optimize_batch(sessions)
    for step, s in zip(initial, sessions, strict=True):
        if s.optimizer == DECLARATIVE and s.engine == "spark":
            step.metrics["setup_seconds"] = setup_seconds
    history: list[list] = []
    for batch, adjs in zip(steps, planned, strict=True):
        texts = [str(d) for d in batch]
        results = update_steps(sessions, adjs, texts)  # declarative: incremental maintenance
        for r in results:
            r.deltas = texts
        history.append(results)
    out = [
        {"query": s.query.name, "optimizer": s.optimizer, "cost_model": args.cost_model,
         **({"engine": s.engine, "pruning": s.pruning} if s.optimizer == DECLARATIVE else {}),
         "initial": initial[i], "steps": [h[i] for h in history]}
        for i, s in enumerate(sessions)
    ]
    if args.json:
        doc = {
            "queries": [
                {**e, "initial": e["initial"].to_json(), "steps": [s.to_json() for s in e["steps"]]}
                for e in out
            ]
        }
        try:
            text = dumps_strict(doc, indent=2)
        except ValueError as e:  # a bug: every cost and estimate is checked finite before
            raise ReoptError(f"cannot write the result as JSON: {e}") from None
        sys.stdout.write(text + "\n")
        return 0
    for e in out:
        init = e["initial"]
        how = e["optimizer"] + (f" ({e['engine']}, pruning {e['pruning']})"
                                if "engine" in e else "")
        print(
            f"== {e['query']} · {e['cost_model']} · {how}: cost={init.cost:.6g} "
            f"({init.metrics['seconds'] * 1000:.1f} ms)"
        )
        m = init.metrics
        kept = m.get("held") or m.get("explored") or {}
        if not init.exact:
            print(f"   NOT EXACT: {init.reason}")
        elif "trees" in kept:  # exhaustive: every plan tree, hence every node
            print(f"   costed {kept['trees']:,} plan trees")
        elif "or_nodes" in kept and "and_nodes" in kept:
            full = m["search_space"]
            print(f"   {'held' if 'held' in m else 'explored'} {kept['or_nodes']}/"
                  f"{full['or_nodes']} OR nodes, {kept['and_nodes']}/{full['and_nodes']} "
                  f"AND nodes (pruned {m['pruning_ratio']['or']:.0%}, "
                  f"{m['pruning_ratio']['and']:.0%})")
        _print_stream(init)
        print(init.plan.explain())
        for step in e["steps"]:
            m = step.metrics
            how = f"{m['seconds'] * 1000:.1f} ms"
            if "updated" in m:
                u, full = m["updated"], m["search_space"]
                how += (f", incremental: updated {u['or_nodes']}/{full['or_nodes']} OR nodes, "
                        f"{u['and_nodes']}/{full['and_nodes']} AND nodes")
            if not step.exact:
                how += ", greedy, not exact"
            print(f"-- after {'; '.join(step.deltas)}: cost={step.cost:.6g} ({how})")
            _print_stream(step)
            print(step.plan.explain())
        print()
    return 0


def _data_scale_factor(data: str) -> float:
    """The scale factor ``reopt data tpch`` recorded in DIR/reopt-data.json, else 1."""
    import json
    from pathlib import Path

    from reopt.data import MANIFEST

    try:
        sf = json.loads((Path(data) / MANIFEST).read_text()).get("sf", 1.0)
    except (OSError, ValueError, AttributeError):
        return 1.0
    return float(sf) if isinstance(sf, (int, float)) and sf > 0 else 1.0


def execute_main(args: argparse.Namespace) -> int:
    """``reopt execute``: optimize, apply the delta steps, run the plan, report."""
    from reopt.execute import execute, find_tables
    from reopt.spark import get_spark

    if args.catalog is not None and args.sf is not None:
        raise ReoptError("--sf scales the built-in TPC-H catalog; a --catalog file has its own "
                         "row counts")
    sf = args.sf if args.sf is not None else _data_scale_factor(args.data)
    catalog = load_catalog(args.catalog, sf)
    _model_options(args, "dist", "--dist-profile")
    o = Optimizer(load_query(args.query, catalog), catalog, cost_model=args.cost_model,
                  optimizer=args.optimizer, engine=args.engine, dist_profile=args.dist_profile)
    steps = [parse_deltas(d) for d in args.delta]
    find_tables(o.query, args.data)  # a missing table fails before Spark starts
    step = o.optimize()
    for batch in steps:
        step = o.update(batch)
    run = execute(step.plan, o.query, args.data, get_spark(args.master))
    if args.json:
        doc = {"query": o.query.name, "optimizer": args.optimizer, "cost_model": args.cost_model,
               "data": args.data, "deltas": [str(d) for b in steps for d in b],
               "plan_cost": step.cost, **run.to_json()}
        sys.stdout.write(dumps_strict(doc, indent=2) + "\n")
        return 0
    print(f"== {o.query.name} · {args.cost_model} · {args.optimizer} on {args.data}: "
          f"{len(run.rows)} rows, digest {run.digest[:16]}…, {run.seconds:.2f} s")
    depths = _depths(step.plan)
    for n, d in zip(run.nodes, depths, strict=True):
        label = n.op + (f" {{{', '.join(n.relations)}}}" if n.logical == "join" else
                        f" {n.relations[0]}" if n.logical == "scan" else "")
        if n.observed is None:  # cut off above an empty input (reopt.sparkplan)
            print(f"{'  ' * d}{label}  estimated={n.estimated:.6g} not run")
            continue
        ratio = max(n.estimated, 1) / max(n.observed, 1)
        scanned = f" (of {n.scanned} scanned)" if n.scanned is not None else ""
        print(f"{'  ' * d}{label}  estimated={n.estimated:.6g} observed={n.observed}"
              f"{scanned}  est/obs={ratio:.3g}")
    print("deltas: " + "; ".join(run.deltas()))
    return 0


def _data_arguments(p: argparse.ArgumentParser) -> None:
    """The query, its data folder and its catalog: what ``execute`` and ``run`` share."""
    p.add_argument("query", metavar="QUERY", help="a .sql file or tpch:q1…q8joins")
    p.add_argument("--data", required=True, metavar="DIR",
                   help="folder of the query's tables (as written by reopt data tpch)")
    p.add_argument("--catalog", help="catalog JSON (default: built-in TPC-H statistics at "
                   "the data's scale factor)")
    p.add_argument("--sf", type=scale_factor, help="scale factor of the built-in catalog "
                   "(default: the one DIR/reopt-data.json records, else 1)")
    p.add_argument("--cost-model", default="io", choices=sorted(m for m in MODELS if m != "rate"),
                   help="(the rate model plans continuous queries, which run on no executor yet)")
    _dist_profile_argument(p)


def _dist_profile_argument(p: argparse.ArgumentParser) -> None:
    """``--dist-profile``: the dist model's constants (:data:`reopt.costmodel.dist.PROFILES`)."""
    p.add_argument("--dist-profile", choices=sorted(DIST_PROFILES),
                   metavar="|".join(sorted(DIST_PROFILES)),
                   help="the dist cost model's constants: set by reasoning for a cluster "
                   "(default) or fitted to Spark's times under a local[*] master (local)")


def _model_options(args: argparse.Namespace, model: str, *flags: str) -> None:
    """A one-line error for any of ``flags`` given with another cost model than ``model``
    (they set that model's constants or objective)."""
    for flag in flags:
        if getattr(args, flag[2:].replace("-", "_")) is not None and args.cost_model != model:
            raise ReoptError(f"{flag} applies to --cost-model {model}; this run uses "
                             f"{args.cost_model}")


def _spark_run_arguments(p: argparse.ArgumentParser) -> None:
    """The engine, the Spark master and the output form of a command that runs on Spark."""
    p.add_argument("--engine", default="python", choices=ENGINES,
                   help="engine of the declarative optimizer (default python)")
    p.add_argument("--master", help="Spark master URL (default: local[*], or "
                   "$REOPT_SPARK_MASTER)")
    p.add_argument("--json", action="store_true", help="print JSON")


def _strategy_list(text: str) -> list[str]:
    from reopt.adaptive import STRATEGIES

    names = [s.strip() for s in text.split(",") if s.strip()]
    if names == ["all"]:
        return list(STRATEGIES)
    for n in names or [""]:
        if n not in STRATEGIES:
            raise argparse.ArgumentTypeError(
                f"unknown strategy '{n}' (choose from {', '.join(STRATEGIES)}, or all)")
    return list(dict.fromkeys(names))


def run_main(args: argparse.Namespace) -> int:
    """``reopt run``: the adaptive loop over the splits of the query's largest input, one run
    per strategy, each split reported as it ends, then whether the answers agree."""
    from tqdm import tqdm

    from reopt.adaptive import Loop
    from reopt.combine import combiner
    from reopt.execute import find_tables
    from reopt.spark import get_spark

    if args.catalog is not None and args.sf is not None:
        raise ReoptError("--sf scales the built-in TPC-H catalog; a --catalog file has its own "
                         "row counts")
    sf = args.sf if args.sf is not None else _data_scale_factor(args.data)
    catalog = load_catalog(args.catalog, sf)
    query = load_query(args.query, catalog)

    _model_options(args, "dist", "--dist-profile")

    def make_optimizer() -> Optimizer:
        return Optimizer(query, catalog, cost_model=args.cost_model, optimizer=args.optimizer,
                         engine=args.engine, dist_profile=args.dist_profile)

    deltas = [str(d) for text in args.delta for d in parse_deltas(text)]
    if deltas:  # bad input fails before Spark starts
        make_optimizer().check(deltas)
    find_tables(query, args.data)
    if args.splits > 1:
        combiner(query.sql, query.name)
    if args.split is not None and args.split not in query.aliases:
        raise ReoptError(f"--split {args.split}: query {query.name} has no such relation (it "
                         f"has {', '.join(query.aliases)})")
    by, column, subsets = _split_layout(args)
    loop = Loop(make_optimizer, args.data, args.splits, get_spark(args.master), deltas,
                args.split, by, column, subsets)
    s = loop.splits
    if not args.json:
        print(f"== {query.name} on {args.data}: {s.alias} ({s.table}) in {s.k} {s.by} splits "
              f"of {s.column}: {', '.join(map(str, s.rows))} rows")
        for j, condition in enumerate(s.subset_conditions):
            print(f"   subset {j}: {condition}, splits "
                  f"{', '.join(str(i) for i in range(s.k) if s.subset(i) == j)}")
    runs = []
    with tqdm(total=s.k * len(args.strategy), desc="splits", unit="split", leave=False,
              file=sys.stderr, disable=None) as bar:
        for strategy in args.strategy:
            def report(split, strategy=strategy) -> None:
                bar.update(1)
                if args.json:
                    return
                changed = "changed" if split.plan_changed else "same"
                stats = ("" if split.statistics_seconds is None
                         else f" analyze {split.statistics_seconds:.2f} s")
                where = "" if split.subset is None else f" (subset {split.subset})"
                bar.write(f"{strategy:9} split {split.index}{where}: {split.split_rows} rows, plan "
                          f"{changed}, reopt {split.reopt_seconds:.3f} s, exec "
                          f"{split.execution_seconds:.2f} s{stats}, {split.result_rows} "
                          f"result rows\n          {split.plan}")
                for n in split.nodes:
                    if n.logical in ("scan", "join"):
                        bar.write(f"            {{{', '.join(n.relations)}}} estimated="
                                  f"{n.estimated:.6g} observed="
                                  f"{'not run' if n.observed is None else n.observed}")

            runs.append(loop.run(strategy, report))
    digests = {r.answer_digest for r in runs}
    if args.json:
        doc = {"query": query.name, "data": args.data, "optimizer": args.optimizer,
               "cost_model": args.cost_model, "deltas": deltas,
               "split": s.to_json(),
               "same_answer": len(digests) == 1,
               "strategies": [r.to_json() for r in runs]}
        sys.stdout.write(dumps_strict(doc, indent=2) + "\n")
    else:
        for r in runs:
            doc = r.to_json()
            print(f"{r.strategy:9} total: reopt {doc['reopt_seconds']:.3f} s, exec "
                  f"{doc['execution_seconds']:.2f} s, {doc['plan_changes']} plan changes, "
                  f"{r.result_rows} result rows, answer_digest {r.answer_digest[:16]}…")
        print("same answer: " + ("yes" if len(digests) == 1 else "NO"))
        first = runs[0].answer
        if first.head:
            more = first.result_rows - len(first.head)
            print(f"first rows ({runs[0].strategy}; {first.result_rows} in all"
                  f"{f', {more} not shown' if more > 0 else ''}):")
            print("  " + " | ".join(first.columns))
            for row in first.head:
                print("  " + " | ".join("NULL" if v is None else str(v) for v in row))
    return 0 if len(digests) == 1 else 1


def _split_layout(args: argparse.Namespace) -> tuple[str, str | None, int]:
    """``reopt run``'s split kind, column and subsets from ``--split-by``, ``--split-column``,
    ``--per-subset`` and ``--subsets``: per-subset splits are their own kind, cut by KEY."""
    if args.per_subset is None:
        if args.subsets is not None:
            raise ReoptError("--subsets needs --per-subset KEY (the column whose ranges are "
                             "the subsets)")
        return args.split_by or "hash", args.split_column, 2
    for flag, value in (("--split-by", args.split_by), ("--split-column", args.split_column)):
        if value is not None:
            raise ReoptError(f"{flag} cannot be combined with --per-subset: the splits are the "
                             "ranges of KEY, each cut by hash")
    subsets = 2 if args.subsets is None else args.subsets
    if subsets > args.splits:
        raise ReoptError(f"--subsets {subsets} is more than --splits {args.splits}: every "
                         "subset needs at least one split")
    return "subset", args.per_subset, subsets


def _depths(plan) -> list[int]:
    out: list[int] = []

    def walk(node, depth: int) -> None:
        out.append(depth)
        for c in node.children:
            walk(c, depth + 1)

    walk(plan, 0)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["stats"]:  # its own parser, so `reopt stats --help` shows its options
            from reopt.costmodel.stats import main as stats_main

            return stats_main(argv[1:])
        if argv[:1] == ["data"]:  # likewise: `reopt data tpch --help`
            from reopt.data import main as data_main

            return data_main(argv[1:])
        if argv[:1] == ["fleet"]:  # likewise: `reopt fleet --help` shows its options
            from reopt.fleetcli import main as fleet_main

            return fleet_main(argv[1:])
        if argv[:1] == ["stream"]:  # likewise: `reopt stream --help` shows its options
            from reopt.streamcli import main as stream_main

            return stream_main(argv[1:])
        if argv[:1] == ["bench"]:  # likewise: `reopt bench --help` shows benchmarks/run.py's
            return bench_main(argv[1:])
        args = _parser().parse_args(argv)
        if args.command == "execute":
            return execute_main(args)
        if args.command == "run":
            return run_main(args)
        return optimize_main(args)
    except ReoptError as e:
        print(f"reopt: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # pragma: no cover
        return 130
    except BrokenPipeError:
        # The reader went away (`reopt … --json | head`): stop quietly, as other Unix tools
        # do, and point stdout at /dev/null so the interpreter's last flush cannot fail again.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            out = sys.stdout.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, out)
            os.close(devnull)
        return 141  # 128 + SIGPIPE, what a shell reports for a command killed by it
    except Exception as e:
        # A Spark or Py4J error that escaped the run (the workers' Python cannot import reopt,
        # the master went away, ...): one line; exit 2 when the set-up is at fault, 1 when
        # the work failed.  Every other exception is a bug and keeps its traceback.
        from reopt.spark import describe_spark_error

        described = describe_spark_error(e)
        if described is None:
            raise
        line, configuration = described
        print(f"reopt: Spark failed: {line}", file=sys.stderr)
        return 2 if configuration else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
