"""Running the CLI in-process from tests: exit code, stdout, stderr."""

from __future__ import annotations

import json

from reopt.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv: str) -> dict:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def one_line_error(capsys, *argv: str) -> str:
    """Run a command that must fail: exit 2, nothing on stdout, one ``reopt:`` line."""
    code, out, err = run(capsys, *argv)
    assert code == 2, err
    assert out == ""
    assert err.startswith("reopt: ") and err.count("\n") == 1
    return err
