"""Shared fixtures.

``spark`` is ONE local Spark session for the whole test run (starting a JVM takes seconds and
the machine has 2 cores); tests that use it are marked ``@pytest.mark.spark``.  Without a
usable Java they fail with the one-line reason from ``require_java``.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from reopt.costmodel.errors import ReoptError
    from reopt.spark import get_spark, stop_spark

    try:
        session = get_spark("local[2]", app_name="reopt-tests")
    except ReoptError as e:
        pytest.fail(f"Spark tests need Java: {e}")
    yield session
    stop_spark()


@pytest.fixture(scope="session")
def tpch_dir(tmp_path_factory):
    """TPC-H at SF 0.01 as ``reopt data tpch`` writes it (tpchgen-cli only, no Spark; ~1 s),
    shared by the data and execution tests."""
    from reopt.data import generate_tpch

    out = tmp_path_factory.mktemp("tpch") / "sf001"
    generate_tpch(0.01, out)
    return out


@pytest.fixture(scope="session")
def skew_dir(tmp_path_factory, spark):
    """TPC-H SF 0.01 with skewed, drifting keys and correlated columns, made once (Spark),
    shared by the loop tests."""
    from reopt.data import generate_tpch

    out = tmp_path_factory.mktemp("tpch") / "skew"
    generate_tpch(0.01, out, skew=0.5, correlate=True, spark=spark)
    return out

