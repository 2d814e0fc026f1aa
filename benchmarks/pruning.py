"""Pruning inside the datalog evaluation: state held, pruning ratios and time per mode.

Run: ``.venv/bin/python benchmarks/pruning.py [--repeat N] [--engines python,spark]
[--out FILE]`` (``make bench-pruning``). For each query of the paper's workload under ``io``,
in one process, one after the other: ``topdown`` (what its branch-and-bound explores) and the
declarative optimizer under every pruning mode but ``none`` (what it holds at the fixpoint),
``--repeat`` times each; times are medians (min–max) and ratios to ``topdown``'s median in the
same run. Pruning ratios are ``1 − held/full`` (declarative) and ``1 − explored/full``
(topdown), for OR nodes (plan-table entries) and AND nodes (plan alternatives) — the paper's
Figure 5(b)/(c).
The per-mode table is the contribution of each technique (the paper's Figure 11). The Spark
engine, when asked for, runs pruning ``all`` only (seconds to minutes per optimization).
"""

from __future__ import annotations

import statistics
import sys

from harness import (
    MODES,
    emit,
    engine_list,
    machine,
    ms,
    out_file,
    parser,
    script,
    timed,
    today,
)

from reopt.api import Optimizer
from reopt.cliargs import positive_int

QUERIES = ("tpch:q5", "tpch:q5s", "tpch:q10", "tpch:q8join", "tpch:q8joins")


def bar(x: float, width: int = 30) -> str:
    return "█" * round(max(0.0, x) * width)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "benchmarks/pruning.py")
    ap.add_argument("--repeat", type=positive_int, default=5, metavar="N",
                    help="runs of each optimizer and mode per query (default %(default)s)")
    ap.add_argument("--engines", type=engine_list, default=engine_list("python"),
                    metavar="ENGINES", help="comma-separated engines of the declarative "
                    "optimizer: python (every pruning mode), spark (`all` only) (default "
                    "python)")
    ap.add_argument("--out", type=out_file, default=None, metavar="FILE",
                    help="also write the markdown report to FILE (default: standard output "
                    "only)")
    args = ap.parse_args(argv)
    engines = list(args.engines)
    lines = [
        f"Command: `{' '.join(['python', 'benchmarks/pruning.py', *(argv or sys.argv[1:])])}`",
        f"Date: {today()}; {machine()}; cost model `io`, TPC-H SF1 statistics.", "",
        "| query | optimizer | mode | ms (median, min–max) | × topdown | OR held/full "
        "| AND held/full | OR ratio | AND ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    plot = ["", "AND-node pruning ratio per mode (the paper's Figure 5(c) / 11):", "", "```"]
    for query in QUERIES:
        td = Optimizer(query, cost_model="io", optimizer="topdown")
        ref, t_td, m = timed(td, args.repeat)
        base = statistics.median(t_td)
        full = m["search_space"]
        ex = m["explored"]
        lines.append(
            f"| {query} | topdown | – | {ms(t_td)} | 1.00 | {ex['or_nodes']}/{full['or_nodes']} "
            f"| {ex['and_nodes']}/{full['and_nodes']} | {m['pruning_ratio']['or']:.2f} "
            f"| {m['pruning_ratio']['and']:.2f} |")
        plot.append(f"{query:13} topdown          {bar(m['pruning_ratio']['and'])} "
                    f"{m['pruning_ratio']['and']:.2f}")
        for engine in engines:
            for mode in MODES if engine == "python" else ["all"]:
                opt = Optimizer(query, cost_model="io", engine=engine, pruning=mode)
                cost, ts, m = timed(opt, args.repeat)
                if cost != ref:
                    raise SystemExit(f"{query} {engine} {mode}: cost {cost} != topdown {ref}")
                h, r = m["held"], m["pruning_ratio"]
                lines.append(
                    f"| {query} | declarative-{engine} | {mode} | {ms(ts)} "
                    f"| {statistics.median(ts) / base:.2f} | {h['or_nodes']}/{full['or_nodes']} "
                    f"| {h['and_nodes']}/{full['and_nodes']} | {r['or']:.2f} | {r['and']:.2f} |")
                if engine == "python":
                    plot.append(f"{'':13} {mode:16} {bar(r['and'])} {r['and']:.2f}")
        print(lines[-1], file=sys.stderr)
    plot.append("```")
    text = "\n".join(lines + plot) + "\n"
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(script(main))
