"""Settings of the fuzz tests (issue 22): bounded and derandomized in ``make test``, longer on
request.

``REOPT_FUZZ_EXAMPLES=N`` runs every fuzz test with ``N`` examples instead of its bounded
default (``make fuzz`` sets it; README, "Development"), and fails any example that takes more
than :data:`HANG_SECONDS` — the long run's definition of a hang. Derandomized either way, so a
failure reproduces with the same ``N``.
"""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import HealthCheck, settings

ENV = "REOPT_FUZZ_EXAMPLES"
HANG_SECONDS = 60

BASE = settings(derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


def long_examples() -> int | None:
    """The example count ``REOPT_FUZZ_EXAMPLES`` asks for, or None (bounded run)."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{ENV} must be a positive whole number, not {text!r}")
    return int(text)


def fuzz(default: int) -> settings:
    """Settings of one fuzz test: ``default`` examples, or the long run's."""
    n = long_examples()
    if n is None:
        return settings(BASE, max_examples=default)
    return settings(BASE, max_examples=n, deadline=timedelta(seconds=HANG_SECONDS))
