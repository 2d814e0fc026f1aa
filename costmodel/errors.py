"""Errors that reach the user as one clear line (the CLI prints ``reopt: <message>``, exits 2)."""

from __future__ import annotations

import argparse


class ReoptError(Exception):
    """Base class: bad input named precisely; never a corrupted state."""


class CatalogError(ReoptError):
    """A catalog file or statistic is malformed (names the file, table and column)."""


class QueryError(ReoptError):
    """A query uses an unsupported construct or an unknown/ambiguous name (names the position)."""


class DeltaError(ReoptError):
    """A cost delta is malformed or names nothing in the query; the state is left unchanged."""


class OptimizerError(ReoptError):
    """An optimizer cannot handle the request (e.g. exhaustive search over too many trees)."""


class UsageParser(argparse.ArgumentParser):
    """argparse whose usage errors are a :class:`ReoptError` — one line, ``reopt: …``, exit 2,
    like every other bad input — instead of the usage text followed by the error; ``--help``
    still prints the usage. Every command line of reopt (``reopt optimize``, ``reopt stats``,
    ``python -m reopt.graph``) parses with it."""

    def error(self, message: str):  # type: ignore[override]
        where = self.prog.removeprefix("reopt").strip()  # the caller prints "reopt: " first
        raise ReoptError(f"{where + ': ' if where else ''}{message} (see '{self.prog} --help')")
