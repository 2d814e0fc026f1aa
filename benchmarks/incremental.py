"""Incremental re-optimization vs from-scratch: the paper's Figures 6, 8/12, 13 and 14 setups.

Run: ``.venv/bin/python benchmarks/incremental.py [--repeat N] [--quick] [--out FILE]``
(``make bench-incremental``: into ``benchmarks/results/incremental.md``, not committed;
``make bench`` reports the same figures in ``BENCHMARKS.md``). Everything runs in one process,
side by side, cost model ``io``, TPC-H SF1 statistics, pruning ``all`` (and, for Figure 8/12,
each pruning mode):

* For every delta: an optimizer that has optimized under the base statistics applies the
  delta with ``update()`` (timed: ``metrics.seconds``, the maintenance work), then the inverse
  delta (untimed) to return to the base; ``--repeat`` times. From-scratch baselines under the
  same changed statistics: the declarative optimizer on the same engine (``optimize()`` of a
  fresh optimizer) and ``topdown``, ``--repeat`` times each. Times are medians; ratios are
  from-scratch median / incremental median, measured in the same run.
* Update ratios (the paper's Figures 6–9 (b)/(c)): OR and AND nodes whose state the update
  inserted, deleted or changed, over the full search space.
* Every incremental result is checked against ``topdown``'s cost (same statistics).

Deltas: Figure 6 changes the join selectivity of A = region⋈nation, B = customer⋈A,
C = orders⋈B, D = lineitem⋈C, E = supplier⋈D by 1/8…8 — as corrections on those relation sets
(``card {nation,region} *0.125`` …). Figures 8/12 change the Orders (Supplier) scan, Figures 13
and 14 each base relation of Q10 and Q8Join: as ``card TABLE *f`` (reopt has no per-table scan
factor; scaling a table's rows changes its scan cost and every estimate above it).
All of it runs on the ``python`` engine. The Spark engine maintains its state incrementally
too (its update steps report ``incremental: true``), but one of its updates takes seconds (a
few dozen Spark jobs), too long for these hundreds of deltas × rounds: ``make bench``
(``benchmarks/run.py``) measures the Spark engine's updates of Q5 under Figure 6.
"""

from __future__ import annotations

import statistics
import sys

from harness import (
    FACTORS,
    FIG6_SETS,
    MODES,
    QUICK_FACTORS,
    emit,
    machine,
    measure,
    out_file,
    parser,
    script,
    today,
)

from reopt.cliargs import positive_int


def row(label: str, r: dict) -> str:
    return (f"| {label} | {r['inc'] * 1000:.2f} | {r['full'] * 1000:.2f} "
            f"| {r['topdown'] * 1000:.2f} | {r['full'] / r['inc']:.1f}× "
            f"| {r['topdown'] / r['inc']:.1f}× | {r['or']:.2f} | {r['and']:.2f} |")


HEADER = ["| delta | incremental ms | from-scratch ms | topdown ms | from-scratch / inc "
          "| topdown / inc | update ratio OR | update ratio AND |",
          "|---|---|---|---|---|---|---|---|"]


def summary(rs: list[dict]) -> str:
    a = [r["full"] / r["inc"] for r in rs]
    b = [r["topdown"] / r["inc"] for r in rs]
    return (f"Median speed-up over {len(rs)} deltas: {statistics.median(a):.1f}× vs "
            f"from-scratch declarative (min {min(a):.1f}×, max {max(a):.1f}×), "
            f"{statistics.median(b):.1f}× vs topdown (min {min(b):.1f}×, max {max(b):.1f}×).")


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "benchmarks/incremental.py")
    ap.add_argument("--repeat", type=positive_int, default=5, metavar="N",
                    help="rounds per delta (default %(default)s; --quick: 1)")
    ap.add_argument("--out", type=out_file, default=None, metavar="FILE",
                    help="also write the markdown report to FILE (default: standard output "
                    "only)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: factors 1/8 and 8, one round (no timings to read)")
    args = ap.parse_args(argv)
    factors = QUICK_FACTORS if args.quick else FACTORS
    repeat = 1 if args.quick else args.repeat
    lines = [
        f"Command: `{' '.join(['python', 'benchmarks/incremental.py', *(argv or sys.argv[1:])])}`",
        f"Date: {today()}; {machine()}; cost model `io`, TPC-H SF1 statistics, engine "
        f"`python`; medians of {repeat}.", ""]

    lines += ["### Figure 6: Q5, join-set corrections A–E (pruning `all`)", "", *HEADER]
    fig6 = []
    for name, aliases in FIG6_SETS.items():
        for f in factors:
            r = measure("tpch:q5", f"card {{{aliases}}} *{f}", "all", repeat)
            fig6.append(r)
            lines.append(row(f"{name} ×{f:g}", r))
            print(lines[-1], file=sys.stderr)
    lines += ["", summary(fig6), ""]

    lines += ["### Figures 8 / 12: Q5, Orders and Supplier rows, per pruning mode", "",
              "| table | mode | median incremental ms | median from-scratch ms "
              "| from-scratch / inc | median update ratio OR | AND |",
              "|---|---|---|---|---|---|---|"]
    for table in ("orders", "supplier"):
        for mode in MODES:
            rs = [measure("tpch:q5", f"card {table} *{f}", mode, repeat) for f in factors]
            inc = statistics.median(r["inc"] for r in rs)
            full = statistics.median(r["full"] for r in rs)
            lines.append(f"| {table} | {mode} | {inc * 1000:.2f} | {full * 1000:.2f} "
                         f"| {full / inc:.1f}× | {statistics.median(r['or'] for r in rs):.2f} "
                         f"| {statistics.median(r['and'] for r in rs):.2f} |")
            print(lines[-1], file=sys.stderr)
    lines.append("")

    for fig, query, tables in (
        ("13", "tpch:q10", ("customer", "orders", "lineitem", "nation")),
        ("14", "tpch:q8join", ("orders", "lineitem", "customer", "part", "partsupp",
                               "supplier", "nation", "region")),
    ):
        lines += [f"### Figure {fig}: {query}, each base relation's rows (pruning `all`)", "",
                  *HEADER]
        rs_all = []
        for table in tables:
            for f in factors:
                r = measure(query, f"card {table} *{f}", "all", repeat)
                rs_all.append(r)
                lines.append(row(f"{table} ×{f:g}", r))
                print(lines[-1], file=sys.stderr)
        lines += ["", summary(rs_all), ""]

    text = "\n".join(lines) + "\n"
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(script(main))
