"""Smoke test of ``make bench`` / ``reopt bench``: the ``--quick`` variant runs and writes a
well-formed report — every section, table and PNG. Never a timing assertion: speed goals live
in ``benchmarks/`` and ``BENCHMARKS.md``. Also: where a run writes (only the full run may
replace the committed BENCHMARKS.md), and that bad options of the benchmark scripts are one
line, before anything runs."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reopt.cli import main

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"

SECTIONS = {
    "Figures 5 / 11: initial optimization": ["fig5.png"],
    "Table 3: optimizer state size": ["table3.png"],
    "Figure 6: Q5, join-selectivity changes A–E": ["fig6.png"],
    "Figure 8: Q5, Orders cardinality, per pruning mode": ["fig8.png"],
    "Figure 12: Q5, Supplier cardinality, per pruning mode": ["fig12.png"],
    "Figure 9: incremental vs non-incremental procedural optimizers": ["fig9.png"],
    "Figure 13: Q10, each base relation's cardinality": ["fig13.png"],
    "Figure 14: Q8Join, each base relation's cardinality": ["fig14.png"],
}
# columns every section's main table must have (besides its label columns)
COLUMNS = {
    "Figures 5 / 11": ["query", "topdown ms", "bottomup ×", "python:all ×", "python:evita ×"],
    "Table 3": ["query", "none KB", "aggsel KB", "all KB"],
    "Figure 6": ["set", "factor", "incremental ms", "topdown ms", "incremental / topdown",
                 "update ratio OR", "update ratio AND", "same cost"],
    "Figure 8": ["mode", "factor", "incremental / topdown", "pruning ratio OR",
                 "pruning ratio AND"],
    "Figure 12": ["mode", "factor", "incremental / topdown", "pruning ratio AND"],
    "Figure 9": ["set", "factor", "TD inc / non-inc", "BU inc / non-inc", "TD update AND",
                 "BU update AND", "same cost"],
    "Figure 13": ["relation", "factor", "incremental / topdown", "update ratio AND"],
    "Figure 14": ["relation", "factor", "incremental / topdown", "update ratio AND"],
}
LABELS = {"query", "set", "mode", "relation", "factor", "optimizer", "OR / AND nodes",
          "same cost"}
NUM = r"\d[\d,]*(?:\.\d+)?"
CELL = re.compile(rf"^(?:{NUM}(?: \({NUM}–{NUM}\))?|(?:{NUM}|DNC)(?: / (?:{NUM}|DNC))+|n/a"
                  r"|not run.*|–)$")
"""A number, ``median (min–max)``, ``a / b`` pairs, or an explained absence."""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    assert main(["bench", "--quick", "--out", str(out)]) == 0
    return out, (out / "BENCHMARKS.md").read_text()


def tables(text: str) -> dict[str, list[list[list[str]]]]:
    """Markdown tables per ``## `` section: lists of rows of cells, header first."""
    out: dict[str, list] = {}
    section, current = None, None
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].split(":")[0]
            out[section] = []
            current = None
        elif line.startswith("|") and section:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if current is None:
                current = [cells]
                out[section].append(current)
            elif not set("".join(cells)) <= set("-"):
                current.append(cells)
        else:
            current = None
    return out


def test_sections_plots_and_json(report):
    out, text = report
    for title, pngs in SECTIONS.items():
        assert f"## {title}\n" in text, title
        body = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
        assert "Command: `" in body and "machine: " in body and "date: " in body
        assert "Reading:" in body
        for png in pngs:
            assert f"![{title}](./{png})" in body
            data = (out / png).read_bytes()
            assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, png
    assert "### Headline: reopt vs the paper" in text
    doc = json.loads((out / "bench.json").read_text())
    assert set(doc["sections"]) >= {"fig5", "table3", "fig6", "fig8", "fig12", "fig9", "fig13",
                                    "fig14"}


def test_tables_well_formed(report):
    _, text = report
    found = tables(text)
    for section, cols in COLUMNS.items():
        assert found.get(section), f"no table in {section}"
        header, *rows = found[section][0]
        assert set(cols) <= set(header), (section, header)
        assert rows, section
        for row in rows:
            assert len(row) == len(header), (section, row)
            for name, cell in zip(header, row, strict=True):
                if name == "same cost":
                    assert cell in ("yes", "NO")
                elif name not in LABELS:
                    assert CELL.match(cell), (section, name, cell)
    # every table of the document, the folded per-run ones included, is rectangular
    for section, tabs in found.items():
        for header, *rows in tabs:
            assert all(len(r) == len(header) for r in rows), section


def test_quick_is_python_only(report):
    _, text = report
    header = tables(text)["Figures 5 / 11"][0][0]
    assert not [c for c in header if c.startswith("spark")]
    assert "Spark engine not measured in this run" in text


# -- where a run writes, and its options ----------------------------------------------------

@pytest.fixture(scope="module")
def bench_run():
    """``benchmarks/run.py`` as a module (as ``reopt bench`` loads it), to redirect its paths."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("bench_run_under_test", BENCH / "run.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


@pytest.fixture
def checkout(bench_run, tmp_path, monkeypatch):
    """A stand-in source checkout: run.py's committed report and results directory (and the
    quick and partial ones under it) point into ``tmp_path``; the report holds a sentinel."""
    results = tmp_path / "benchmarks" / "results"
    monkeypatch.setattr(bench_run, "DEFAULT_OUT", results)
    monkeypatch.setattr(bench_run, "FULL_MARKDOWN", tmp_path / "BENCHMARKS.md")
    monkeypatch.setattr(bench_run, "QUICK_OUT", results / "quick")
    monkeypatch.setattr(bench_run, "PARTIAL_OUT", results / "partial")
    (tmp_path / "BENCHMARKS.md").write_text("committed report\n")
    return tmp_path


def test_partial_run_leaves_the_committed_report_alone(bench_run, checkout):
    """The audit's case (``--only table3 --engines python`` replaced BENCHMARKS.md with a
    partial report headed "make bench … rounds: 5"), really run: Table 3 takes seconds."""
    argv = ["--only", "table3", "--engines", "python", "--repeat", "1"]
    assert bench_run.main(argv) == 0
    assert (checkout / "BENCHMARKS.md").read_text() == "committed report\n"
    results = checkout / "benchmarks" / "results"
    assert not (results / "table3.png").exists() and not (results / "bench.json").exists()
    partial = results / "partial"
    text = (partial / "BENCHMARKS.md").read_text()
    assert (partial / "table3.png").is_file()
    command = "Command: `reopt bench --only table3 --engines python --repeat 1` · "
    assert command in text
    assert "(`make bench`)" not in text and "Command: `make bench" not in text
    assert "This is a partial run" in text and "sections table3 only" in text
    assert json.loads((partial / "bench.json").read_text())["command"] == command[10:-4]


def test_only_the_full_run_targets_the_committed_report(bench_run, checkout):
    results = checkout / "benchmarks" / "results"
    for argv in ([], ["--repeat", "5"], ["--only", ",".join(reversed(bench_run.FIGURES))]):
        cfg = bench_run.configure(argv)
        assert (cfg.markdown, cfg.out) == (checkout / "BENCHMARKS.md", results), argv
        assert cfg.full
    assert bench_run.configure(["--repeat", "5"]).alias == "make bench"
    assert bench_run.configure(["--repeat", "5"]).command == "reopt bench --repeat 5"
    quick = bench_run.configure(["--quick"])
    assert (quick.markdown, quick.out) == (results / "quick" / "BENCHMARKS.md",
                                           results / "quick")
    assert quick.alias == "make bench-quick"
    for argv in (["--only", "table3"], ["--engines", "python"], ["--repeat", "3"],
                 ["--spark-repeat", "2"], ["--spark-timeout", "10"], ["--spark-budget", "60"]):
        cfg = bench_run.configure(argv)
        assert not cfg.full and cfg.alias is None, argv
        assert (cfg.markdown, cfg.out) == (results / "partial" / "BENCHMARKS.md",
                                           results / "partial"), argv
        assert cfg.command == "reopt bench " + " ".join(argv)
    # an explicit --out DIR of a partial run: the report goes into DIR, not the root's
    cfg = bench_run.configure(["--only", "fig5", "--out", str(results)])
    assert cfg.markdown == results / "BENCHMARKS.md"
    cfg = bench_run.configure(["--quick", "--markdown", str(checkout / "BENCHMARKS.md")])
    assert cfg.markdown == checkout / "BENCHMARKS.md" and cfg.alias is None


@pytest.mark.parametrize("argv", [
    ["--repeat", "0"], ["--repeat", "x"], ["--engines", "foo"], ["--engines", "spark"],
    ["--engines", ""], ["--engines", "python,python"], ["--spark-repeat", "0"],
    ["--spark-timeout", "-1"], ["--spark-timeout", "nan"], ["--spark-budget", "0"],
    ["--only", "fig7"], ["--only", ","], ["--out", str(ROOT / "README.md")],
    ["--markdown", str(BENCH)],
])
def test_bad_options_are_one_line(bench_run, monkeypatch, capsys, argv):
    """Rejected before anything runs (``run`` must not be reached): ``reopt: bench: …``."""
    def never(cfg):
        raise AssertionError(f"ran with {cfg}")

    monkeypatch.setattr(bench_run, "run", never)
    assert bench_run.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("reopt: ") and err.count("\n") == 1, err


def test_help_shows_defaults(bench_run, capsys):
    with pytest.raises(SystemExit) as e:
        bench_run.main(["--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split("\noptions:\n", 1)[1].split())
    for option, default in (("--repeat N", "default 5"), ("--spark-repeat N", "default 1"),
                            ("--spark-timeout SECONDS", "default 400"),
                            ("--spark-budget SECONDS", "default 1800")):
        assert default in text.split(option, 1)[1].split(" --", 1)[0], option
    assert "benchmarks/results/partial" in text


# -- the per-topic scripts ------------------------------------------------------------------

def _script(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / name), *args], cwd=ROOT, text=True,
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=60)


@pytest.mark.parametrize("name,args", [  # --engines python: never Spark, should one pass
    ("initial.py", ["--engines", "foo"]), ("initial.py", ["--repeat", "0", "--engines", "python"]),
    ("initial.py", ["--out", str(BENCH), "--engines", "python"]),
    ("pruning.py", ["--repeat", "0"]),
    ("pruning.py", ["--engines", "python,nope"]), ("incremental.py", ["--repeat", "0"]),
    ("profile_python.py", ["--repeat", "0"]), ("profile_python.py", ["--queries", "tpch:q99"]),
    ("engine.py", ["--repeat", "0"]), ("engine.py", ["--out", str(BENCH)]),
    ("bounds.py", ["--repeat", "0"]), ("bounds.py", ["--models", "cout,nope"]),
    ("small_updates.py", ["--repeat", "0"]), ("small_updates.py", ["--models", "cout,nope"]),
    ("sparkrun.py", []),  # stdin is not JSON
])
def test_script_bad_options_are_one_line(name, args):
    """Rejected before any measuring (the old ``--repeat 0`` failed on an AssertionError,
    ``--engines foo`` on a ReoptError traceback, ``sparkrun.py`` on a JSONDecodeError)."""
    r = _script(name, *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("reopt: ") and r.stderr.count("\n") == 1, r.stderr
    assert not r.stdout


@pytest.mark.parametrize("name", ["initial.py", "pruning.py", "incremental.py",
                                  "profile_python.py", "sparkrun.py", "engine.py", "bounds.py",
                                  "small_updates.py"])
def test_script_help(name):
    """Every option is explained; the docstrings (the description) are not stale."""
    r = _script(name, "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: "), r.stderr
    options = r.stdout.split("\noptions:\n", 1)[1]
    for line in options.splitlines():
        if line.lstrip().startswith("--"):
            option = line.split()[0]
            rest = options.split(line, 1)[1].split("\n  -", 1)[0]
            assert len(line.split()) > 2 or rest.strip(), f"{name} {option}: no help"
    assert "until the pruning issue" not in r.stdout
    assert "re-evaluates from scratch" not in r.stdout


# -- the engine benchmark (benchmarks/engine.py --quick) ------------------------------------

@pytest.fixture(scope="module")
def engine_quick(bench_run):
    """One ``--quick`` run of benchmarks/engine.py (small queries, one round: seconds), its
    raw numbers and its tables. ``bench_run`` puts benchmarks/ on sys.path."""
    import engine

    data = engine.run(engine.Config(quick=True, repeat=1, log=lambda _: None))
    return engine, data, engine.tables(data)


def test_engine_quick_tables_have_their_rows(engine_quick):
    engine, data, found = engine_quick
    names = sorted(wq.name for wq in engine.workload(engine.Config(quick=True)))
    assert len(names) == 4
    captions = [c for c, *_ in found]
    assert len(found) == 8
    assert all(c.startswith("Goal: ") for c in captions[:-1])
    assert captions[-1].startswith("The floor on the largest query")
    for caption, header, rows, _ in found:
        assert rows, caption
        assert all(len(r) == len(header) for r in rows), caption
    # from scratch: every workload query under cout and io, then TPC-H Q5
    assert sorted((r[0], r[1]) for r in found[0][2]) == sorted(
        (n, m) for n in names for m in ("cout", "io"))
    assert [r[0] for r in found[1][2]] == ["tpch:q5"]
    assert len(found[2][2]) == 2 * len(names) + 1  # bounds: cout, io, TPC-H
    assert sorted(r[0] for r in found[3][2]) == names  # --quick: every query's deltas
    assert [r[0] for r in found[4][2]] == ["A", "E",
                                           "all, one CLI call (wall ms it reports)"]
    assert sorted(r[0] for r in found[5][2]) == names
    text = engine.render(data, "python benchmarks/engine.py --quick")
    assert text.count("Goal: ") == 7 and "Reading:" in text


def test_engine_quick_every_plan_is_exact(engine_quick):
    """Every measured plan costs what a fresh topdown finds (the harness's own checks), and
    the floor's Polars pass and pure-Python DPccp reach topdown's C_out optimum."""
    engine, data, found = engine_quick
    for caption, header, rows, _ in found[:-1]:
        for name in ("exact", "every round exact"):
            if name in header:
                col = header.index(name)
                assert {r[col] for r in rows} <= {"yes", "–"}, (caption, rows)
                assert any(r[col] == "yes" for r in rows), caption
    for r in data["loop"]:
        assert r["ended"] and r["rounds"] >= 1, r  # small queries: the loop ends
    f = data["floor"]
    largest = max(engine.workload(engine.Config(quick=True)), key=lambda s: s.pairs)
    assert f["query"] == largest.name and f["pairs"] == largest.pairs
    want = engine._topdown_cost(largest, "cout")
    assert f["optimum"] == pytest.approx(want, rel=1e-9)
    assert f["polars"] is not None, "polars is in the dev extra"
    assert f["polars_optimum"] == pytest.approx(want, rel=1e-9)


def test_engine_quick_plancost_shrinks_with_pruning(engine_quick):
    """Pruning only removes PlanCost tuples: none ≥ aggsel ≥ aggsel+bound ≥ all > 0."""
    _, data, _ = engine_quick
    for r in data["scratch_cout"] + data["scratch_tpch"]:
        got = [r["modes"][m]["plancost"] for m in ("none", "aggsel", "aggsel+bound", "all")
               if m in r["modes"]]
        assert len(got) >= 3 and got == sorted(got, reverse=True) and got[-1] > 0, (
            r["query"], got)
