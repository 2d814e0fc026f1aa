"""Numbers from outside — SQL literals, catalog values, deltas, command-line flags — read
strictly, in one place, and the limits that keep every estimate and cost finite.

Python's own readers are generous in ways that turn a typo into a plausible number:
``float("1_000")`` is 1000.0, ``float("١٠")`` (Arabic-Indic digits) is 10.0, ``float("nan")``
and ``float("inf")`` are numbers, ``float("1e400")`` is infinite, ``int()`` of more than 4,300
digits raises a ValueError about Python's int-string limit and ``float(10**400)`` an
OverflowError. Every number reopt reads therefore passes :func:`parse_number` (text) or
:func:`finite_value` (a value from JSON or Python): plain decimal or exponent syntax in ASCII
digits (``2``, ``-0.5``, ``.5``, ``1e6``, ``1.5E-3``), and a finite float. JSON text goes through
:func:`load_json`, which hands numbers no float can hold (``1e400``, 400 digits, ``NaN``,
``Infinity``) to the caller as :class:`Unrepresentable`, so the caller's error names the table,
column or delta they stand in.

Limits (README, "Cardinality estimation"): a table has at most :data:`MAX_ROWS` rows and no
estimate exceeds it; the product of a physical operator's ``cost`` factors is at most
:data:`MAX_COST_FACTOR`. With both, the largest local cost (a block nested-loop join of two
``MAX_ROWS`` inputs, about ``MAX_ROWS²``, times the factor) stays near 1e300, so plan costs
(sums of a few hundred such terms) are finite whatever deltas are in force.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
import sys
from decimal import Decimal
from typing import Any

MAX_ROWS = 1e100
"""The most rows a table may have (catalog, ``card`` deltas, ``--sf``) and the ceiling of every
cardinality estimate: far beyond any real table, small enough that costs stay finite."""
MAX_COST_FACTOR = 1e100
"""The largest product of ``cost OPERATOR *F`` factors on one operator."""

_SYNTAX = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_SHORT = 24
"""Longer number texts are shown shortened in messages (a 5,000-digit literal stays one line)."""


class NumberError(ValueError):
    """Why a text or value is not a finite number (the caller adds where it came from)."""


class OutOfRange(NumberError):
    """Well-formed, but no float holds it (``1e400``, a 400-digit integer, ``-1e999``)."""


class Unrepresentable:
    """A JSON number (or ``NaN``/``Infinity``) that no finite float holds, as written: what
    :func:`load_json` puts in its place, so a catalog or delta check can say where it is."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return short_text(self.text)

    def reason(self) -> str:
        """Why it is not a finite number, for messages."""
        if self.text in ("NaN", "Infinity", "-Infinity"):
            return f"{self.text} is not a finite number"
        return f"{short_text(self.text)} is out of range (beyond ±{compact(sys.float_info.max)})"


def short_text(text: str, limit: int = _SHORT) -> str:
    """``text`` on one line, at most about ``limit`` characters: a long digit string as
    ``123456789012…456789 (5000 digits)``, other long text cut with its length."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    unit = "digits" if text.isascii() and text.lstrip("+-").isdigit() else "characters"
    head = max(limit // 2, 12)
    return f"{text[:head]}…{text[-6:]} ({len(text)} {unit})"


def compact(x: float) -> str:
    """A number for a message, short: ``1e100``, ``1.5e306``, ``0.25``, ``inf``."""
    return f"{x:.4g}".replace("e+", "e")


def shown(v: Any) -> str:
    """Any value for a one-line message: shortened, never failing (a deeply nested list, an
    integer past Python's int-string limit)."""
    if isinstance(v, Unrepresentable):
        return repr(v)
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 256:
        digits = int(v.bit_length() * math.log10(2)) + 1
        return f"{'-' if v < 0 else ''}an integer of about {digits} digits"
    if isinstance(v, str):
        return repr(short_text(v))
    try:
        return short_text(reprlib.repr(v), 80)
    except Exception:  # a repr that fails is no reason to lose the message
        return f"a {type(v).__name__}"


def parse_number(text: str) -> float:
    """``text`` (surrounding blanks aside) as a finite float: ASCII decimal or exponent syntax.

    Raises :class:`OutOfRange` when the syntax is right but no float holds the value, else
    :class:`NumberError` for anything that is not a number (``1_000``, ``nan``, ``0x10``,
    ``١٠``). A value that underflows (``1e-400``) rounds to 0, as any float computation would.
    """
    if not isinstance(text, str):
        raise NumberError(f"expected a number, got {shown(text)}")
    s = text.strip()
    if not _SYNTAX.fullmatch(s):
        raise NumberError(f"{shown(s)} is not a number (expected digits, e.g. 2, 0.5 or 1e6)")
    v = float(s)  # float() reads any length of digits; only int() has a limit
    if not math.isfinite(v):
        raise OutOfRange(f"{short_text(s)} is out of range (beyond ±{compact(sys.float_info.max)})")
    return v


def is_integer_text(text: str) -> bool:
    """Whether ``text`` (blanks aside) is an integer in plain syntax (no point, no exponent)."""
    return isinstance(text, str) and _INTEGER.fullmatch(text.strip()) is not None


def exact_number(text: str) -> int | Decimal:
    """A number text checked by :func:`parse_number`, exactly: an int (integer syntax) or a
    Decimal, for constant folding that must not round (``0.06 - 0.01``)."""
    parse_number(text)
    s = text.strip()
    d = Decimal(s)  # no digit limit, unlike int(str)
    return int(d) if _INTEGER.fullmatch(s) else d


def finite_value(v: Any) -> float:
    """A number given as a value (JSON, or Python through the API) as a finite float: an int of
    any size, a float, or a numeric string (:func:`parse_number`); booleans are not numbers."""
    if isinstance(v, Unrepresentable):
        raise OutOfRange(v.reason())
    if isinstance(v, bool) or v is None:
        raise NumberError(f"{shown(v) if v is not None else 'null'} is not a number")
    if isinstance(v, int):
        if abs(v) > sys.float_info.max:  # exact int/float comparison, no conversion
            raise OutOfRange(f"{shown(v)} is out of range (beyond ±{compact(sys.float_info.max)})")
        return float(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise OutOfRange(f"{v} is not a finite number")
        return v
    if isinstance(v, str):
        return parse_number(v)
    raise NumberError(f"{shown(v)} is not a number")


def is_finite_number(v: Any) -> bool:
    """Whether ``v`` is an int or float (not a bool) that a finite float holds."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    if isinstance(v, int):
        return abs(v) <= sys.float_info.max
    return math.isfinite(v)


def _json_int(text: str) -> int | Unrepresentable:
    digits = text.lstrip("-").lstrip("0")
    if len(digits) > 309:  # above 1.8e308 for certain; int() would also hit its digit limit
        return Unrepresentable(text)
    v = int(text)
    return v if abs(v) <= sys.float_info.max else Unrepresentable(text)


def _json_float(text: str) -> float | Unrepresentable:
    v = float(text)
    return v if math.isfinite(v) else Unrepresentable(text)


class JsonDepthError(ValueError):
    """JSON nested deeper than the parser's recursion allows."""


def load_json(text: str) -> Any:
    """``json.loads`` for input from outside: numbers no finite float holds (and ``NaN``,
    ``Infinity``, which Python's json accepts) become :class:`Unrepresentable`; nesting too
    deep for the parser is a :class:`JsonDepthError` instead of a RecursionError. Raises
    ``json.JSONDecodeError`` for malformed text, as ``json.loads`` does."""
    try:
        return json.loads(
            text, parse_int=_json_int, parse_float=_json_float, parse_constant=Unrepresentable
        )
    except RecursionError:
        raise JsonDepthError("JSON nested too deeply") from None


def dumps_strict(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` that never writes ``NaN`` or ``Infinity`` (not JSON): a non-finite number
    is a ValueError naming the problem instead."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError as e:
        raise ValueError(f"refusing to write a non-finite number as JSON ({e})") from None
