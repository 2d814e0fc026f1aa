"""Smoke test of ``make bench`` / ``reopt bench``: the ``--quick`` variant runs and writes a
well-formed report — every section, table and PNG. Never a timing assertion: speed goals live
in ``benchmarks/`` and ``BENCHMARKS.md``."""

from __future__ import annotations

import json
import re

import pytest

from reopt.cli import main

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
