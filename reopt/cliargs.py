"""What reopt's command lines share: usage errors as one line, and the argument types they check.

``reopt optimize``, ``reopt stats``, ``python -m reopt.graph`` and the benchmark scripts parse
with :class:`UsageParser`, so a usage error is a :class:`ReoptError` like any other bad input:
one line ``reopt: …``, exit 2 (the usage text would bury it).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable

from reopt.costmodel.errors import ReoptError
from reopt.costmodel.numeric import NumberError, is_integer_text, parse_number


class UsageParser(argparse.ArgumentParser):
    """argparse whose usage errors are a :class:`ReoptError` instead of the usage text followed
    by the error; ``--help`` still prints the usage."""

    def error(self, message: str):  # type: ignore[override]
        where = self.prog.removeprefix("reopt").strip()  # the caller prints "reopt: " first
        raise ReoptError(f"{where + ': ' if where else ''}{message} (see '{self.prog} --help')")


def positive_int(text: str) -> int:
    """``type=`` of a count (``--repeat``, ``--buckets``): a whole number ≥ 1, in ASCII digits
    (``int()`` would also take ``1_000`` and ``١٠``)."""
    if not is_integer_text(text):
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'")
    if len(text.strip()) > 18:
        raise argparse.ArgumentTypeError(f"too large: '{text.strip()[:20]}…'")
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def number_from_to(low: float, high: float, unit: str = "") -> Callable[[str], float]:
    """``type=`` of a finite number from ``low`` to ``high`` in strict syntax (``--skew``, the
    benchmarks' spreads); ``unit`` names what it counts in the error."""
    def check(text: str) -> float:
        try:
            x = parse_number(text)
        except NumberError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        if not low <= x <= high:
            raise argparse.ArgumentTypeError(
                f"must be from {low:g} to {high:g}{' ' + unit if unit else ''}, "
                f"got {text.strip()}")
        return x
    return check


def scale_factor(text: str) -> float:
    """``type=`` of ``--sf``: a finite number > 0 in strict syntax
    (:func:`~reopt.costmodel.numeric.parse_number`; ``float()`` would take ``nan``, ``inf``
    and ``1_000``). Whether the tables it scales stay within the row limit is
    :func:`~reopt.costmodel.tpch.tpch_catalog`'s to say."""
    try:
        sf = parse_number(text)
    except NumberError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if sf <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text.strip()}")
    return sf


def name_list(what: str, choices: Iterable[str]) -> Callable[[str], tuple[str, ...]]:
    """``type=`` of a comma-separated list of ``what`` names (``--engines``, ``--only``): at
    least one, each among ``choices`` and named once; in the order of ``choices``. An unknown
    name would otherwise fail only when it is first used, possibly minutes into a run."""
    known = tuple(choices)

    def names(text: str) -> tuple[str, ...]:
        got = [s.strip() for s in text.split(",") if s.strip()]
        if not got:
            raise argparse.ArgumentTypeError(
                f"'{text}' names no {what} (choose from {', '.join(known)})")
        for n in got:
            if n not in known:
                raise argparse.ArgumentTypeError(
                    f"unknown {what} '{n}' (choose from {', '.join(known)})")
        if len(set(got)) < len(got):
            raise argparse.ArgumentTypeError(f"'{text}' names the same {what} twice")
        return tuple(k for k in known if k in got)

    return names
