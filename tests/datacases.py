"""The data-driven cases of ``tests/testdata/`` (README, "Development"): reading them, and
compiling one case, or all valid cases merged into one program, for the engines.

A case ``NAME`` is up to three files:

* ``NAME.dl`` — the program (rules, directives, and facts written in it, if any);
* ``NAME.facts`` (optional) — the input relations, in the relation format below, each header
  giving the column types: ``Edge(long, long):`` (``long``, ``double``, ``string``,
  ``boolean``); a header with no tuples is an empty input;
* ``NAME.expected`` — every relation the program's rules define, in the relation format
  (``Path:`` then its tuples; no tuples means empty), worked out by hand; or, for a program
  the parser or compiler must reject, one line ``error: <fragment of the one-line message>``.

The relation format: a header line ``Name:`` (or ``Name(types):``) followed by one tuple per
line as a Python literal — ``(1, "a", -0.5, True)``, ``(3,)``, ``()`` — in an expectation
sorted and without repeats; blank lines and lines starting with ``%`` are comments. Values are
read with :func:`ast.literal_eval`, not with reopt's parser, so the expectations do not go
through the code under test.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from reopt.costmodel.builtins import BOOLEAN, BUILTINS, DOUBLE, LONG, STRING, Builtin
from reopt.evaluator.ast import Atom, Directive, Program, Rule
from reopt.evaluator.compiler import CompiledProgram, compile_program
from reopt.evaluator.parser import parse

DIR = Path(__file__).parent / "testdata"
TYPES = (LONG, DOUBLE, STRING, BOOLEAN)
FEATURES = frozenset({"aggsel", "bound"})
"""Pruning features switched on for every case: a case's ``.aggsel`` and ``.bound`` directives
take effect."""

_HEADER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\(([^()]*)\))?:")


TEST_BUILTINS: dict[str, Builtin] = {
    **BUILTINS,
    # a lambda: Spark's workers receive it by value (they cannot import this module)
    "Fn_level": Builtin("Fn_level", (LONG,), (LONG,), lambda ctx, x: [(-(x // 10),)],
                        doc="Fn_level(x, rank): rank = -(x // 10), for the .schedule cases"),
}
"""The optimizer's built-ins (those without a query context: ``Fn_sum``) and one of the tests'
own, a rank for ``.schedule`` that needs no plan space."""


@dataclass
class Relations:
    """Relations read from a ``.facts`` or ``.expected`` file."""

    rows: dict[str, list[tuple]] = field(default_factory=dict)
    types: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Column types, for relations whose header gives them."""


@dataclass
class Case:
    name: str
    text: str
    inputs: Relations
    expected: Relations | None
    """None for a case that must be rejected."""
    error: str | None

    @property
    def file(self) -> str:
        return f"{self.name}.dl"


def read_relations(path: Path, ordered: bool = False) -> Relations:
    """Parse the relation format (module doc); a malformed line fails naming file and line.
    ``ordered`` (expectations): each relation's tuples must be sorted, without repeats."""
    out = Relations()
    current: str | None = None
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        where = f"{path.name}:{n}"
        if not line or line.startswith("%"):
            continue
        header = _HEADER.fullmatch(line)
        if header:
            current = header.group(1)
            if current in out.rows:
                raise ValueError(f"{where}: {current} listed twice")
            out.rows[current] = []
            if header.group(2) is not None:
                types = tuple(t.strip() for t in header.group(2).split(",") if t.strip())
                if not set(types) <= set(TYPES):
                    raise ValueError(f"{where}: column types are {', '.join(TYPES)}")
                out.types[current] = types
            continue
        if current is None:
            raise ValueError(f"{where}: a tuple before any 'Relation:' header")
        row = ast.literal_eval(line)
        if not isinstance(row, tuple):
            raise ValueError(f"{where}: not a tuple: {line}")
        out.rows[current].append(row)
    for rel, rows in out.rows.items():
        if ordered and rows != sorted(set(rows)):
            raise ValueError(f"{path.name}: {rel}'s tuples must be sorted, without repeats")
        if len({len(r) for r in rows}) > 1:
            raise ValueError(f"{path.name}: {rel}'s tuples differ in length")
    return out


def load(name: str) -> Case:
    dl = DIR / f"{name}.dl"
    facts, expected = dl.with_suffix(".facts"), dl.with_suffix(".expected")
    inputs = read_relations(facts) if facts.exists() else Relations()
    program, text = dl.read_text(encoding="utf-8"), expected.read_text(encoding="utf-8")
    if text.startswith("error:"):
        return Case(name, program, inputs, None, text[len("error:"):].strip())
    return Case(name, program, inputs, read_relations(expected, ordered=True), None)


def names() -> list[str]:
    return sorted(p.stem for p in DIR.glob("*.dl"))


def compile_case(case: Case) -> CompiledProgram:
    return compile_program(parse(case.text, case.file), TEST_BUILTINS, case.inputs.types,
                           FEATURES)


def defined(program: Program | CompiledProgram) -> set[str]:
    """The relations the program's rules define: what an ``.expected`` file must list."""
    return {r.head.pred for r in program.rules}


# -- all cases in one program (one Spark evaluation) -----------------------------------------
def _renamed_atom(a: Atom, prefix: str) -> Atom:
    return a if a.is_builtin else Atom(prefix + a.pred, a.args, a.pos, a.negated)


def renamed(prog: Program, prefix: str, relations: set[str]) -> Program:
    """``prog`` with every relation name prefixed (built-ins and directive words kept), so
    that programs of different cases can share one evaluation without sharing a relation."""
    out = Program()
    for r in prog.rules:
        body = tuple(_renamed_atom(lit, prefix) if isinstance(lit, Atom) else lit
                     for lit in r.body)
        out.rules.append(Rule(_renamed_atom(r.head, prefix), body, r.label))
    out.facts = {prefix + p: rows for p, rows in prog.facts.items()}
    out.fact_pos = {prefix + p: pos for p, pos in prog.fact_pos.items()}
    out.directives = [Directive(d.name, tuple(prefix + a if a in relations else a
                                              for a in d.args), d.pos)
                      for d in prog.directives]
    return out


def merged(cases: list[Case]) -> tuple[CompiledProgram, dict[str, list[tuple]], list[str]]:
    """One compiled program holding every case's relations as ``C<i>_<name>``, its inputs,
    and each case's prefix (in ``cases`` order)."""
    whole = Program()
    types: dict[str, tuple[str, ...]] = {}
    rows: dict[str, list[tuple]] = {}
    prefixes = []
    for i, case in enumerate(cases):
        prefix = f"C{i}_"
        prefixes.append(prefix)
        prog = parse(case.text, case.file)
        relations = (defined(prog) | set(prog.facts) | set(case.inputs.rows)
                     | {lit.pred for r in prog.rules for lit in r.body if isinstance(lit, Atom)})
        whole.extend(renamed(prog, prefix, relations))
        types.update({prefix + p: t for p, t in case.inputs.types.items()})
        rows.update({prefix + p: r for p, r in case.inputs.rows.items()})
    return compile_program(whole, TEST_BUILTINS, types, FEATURES), rows, prefixes
