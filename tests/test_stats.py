"""`reopt stats`: table discovery, Spark statistics, JSON output, errors; and reopt.spark."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reopt.costmodel import stats
from reopt.costmodel.catalog import Catalog, as_number
from reopt.costmodel.errors import CatalogError, ReoptError

# -- data -------------------------------------------------------------------------------------
N_ORDERS, N_CUST, N_LINE = 3000, 1500, 4000
START = dt.date(1995, 1, 1)


def _orders() -> pd.DataFrame:
    i = np.arange(N_ORDERS)
    rng = np.random.default_rng(1)
    discount = pd.array(i % 50, dtype="Int64")
    discount[i % 10 == 0] = pd.NA
    return pd.DataFrame(
        {
            "o_orderkey": i + 1,
            "o_custkey": i % 150 + 1,
            "o_orderdate": [START + dt.timedelta(days=int(d)) for d in i % 730],
            "o_status": np.array(["F", "O", "P"])[i % 3],
            "o_price": rng.uniform(10.0, 1000.0, N_ORDERS),
            "o_discount": discount,
        }
    )


def _customer() -> pd.DataFrame:
    i = np.arange(N_CUST)
    return pd.DataFrame(
        {
            "C_CustKey": i + 1,
            "C_Nation": i % 25,
            "C_Name": [f"Customer#{k:06d}" for k in i + 1],
        }
    )


def _lineitem() -> pd.DataFrame:
    i = np.arange(N_LINE)
    qty = np.where(i % 5 < 2, 1, i % 50 + 1)  # 40% of rows have quantity 1 (a spike)
    return pd.DataFrame(
        {
            "l_orderkey": i % N_ORDERS + 1,
            "l_quantity": qty,
            "l_shiptime": pd.Timestamp("1996-01-01 06:00") + pd.to_timedelta(i, unit="h"),
        }
    )


@pytest.fixture(scope="module")
def frames() -> dict[str, pd.DataFrame]:
    return {"orders": _orders(), "customer": _customer(), "lineitem": _lineitem()}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, frames) -> Path:
    """orders: one Parquet file; customer: CSV; lineitem: Spark-style folder of part files."""
    d = tmp_path_factory.mktemp("data")
    # microsecond timestamps, as Spark reads them (pandas 2 writes nanoseconds by default,
    # which Spark 4 refuses: "Illegal Parquet type: INT64 (TIMESTAMP(NANOS,false))")
    us = {"index": False, "coerce_timestamps": "us"}
    frames["orders"].to_parquet(d / "orders.parquet", **us)
    frames["customer"].to_csv(d / "customer.csv", index=False)
    li = d / "lineitem"
    li.mkdir()
    half = N_LINE // 2
    frames["lineitem"].iloc[:half].to_parquet(li / "part-00000.parquet", **us)
    frames["lineitem"].iloc[half:].to_parquet(li / "part-00001.parquet", **us)
    (li / "_SUCCESS").write_text("")
    (d / "README.txt").write_text("not data; ignored\n")
    return d


@pytest.fixture(scope="module")
def computed(spark, data_dir):
    return stats.compute_catalog_dict(
        [str(data_dir)], spark, buckets=10, sorted_on={"Orders": "O_OrderKey"}
    )


# -- discovery (no Spark) -------------------------------------------------------------------------
def test_folder_rule(tmp_path, data_dir):
    found = stats.discover_tables([str(data_dir)])
    assert found == {
        "customer": data_dir / "customer.csv",
        "lineitem": data_dir / "lineitem",
        "orders": data_dir / "orders.parquet",
    }
    # A folder with a data suffix is one data set, whatever its files are called.
    ds = tmp_path / "Events.parquet"
    ds.mkdir()
    (ds / "a.parquet").write_bytes(b"")
    (ds / "b.parquet").write_bytes(b"")
    assert stats.discover_tables([str(ds)]) == {"events": ds}
    # Without suffix or part files: a set of tables, one per child file / child folder.
    many = tmp_path / "many"
    (many / "sub").mkdir(parents=True)
    (many / "sub" / "x.csv").write_text("a\n1\n")
    (many / "t1.CSV").write_text("a\n1\n")
    assert stats.discover_tables([str(many)]) == {"sub": many / "sub", "t1": many / "t1.CSV"}


def test_discovery_errors(tmp_path, data_dir):
    missing = tmp_path / "nope.parquet"
    with pytest.raises(CatalogError, match=str(missing)):
        stats.discover_tables([str(missing)])
    bad = tmp_path / "table.txt"
    bad.write_text("x")
    with pytest.raises(CatalogError, match=f"{bad}: unsupported file type"):
        stats.discover_tables([str(bad)])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CatalogError, match=f"{empty}: folder has no Parquet or CSV"):
        stats.discover_tables([str(empty)])
    with pytest.raises(CatalogError, match="table 'orders' is also given by"):
        stats.discover_tables([str(data_dir), str(data_dir / "orders.parquet")])


def test_cli_checks_paths_before_starting_spark(tmp_path, data_dir, monkeypatch):
    """A missing input or output directory is one line before Spark starts (which takes
    seconds), and so are usage errors."""
    import reopt.spark

    def no_spark(*_):
        raise AssertionError("Spark started")

    monkeypatch.setattr(reopt.spark, "get_spark", no_spark)
    with pytest.raises(CatalogError, match="nope.parquet"):
        stats.main([str(tmp_path / "nope.parquet"), "-o", str(tmp_path / "c.json")])
    with pytest.raises(CatalogError, match=r"c.json: cannot write catalog: directory .*/no "
                                           "does not exist"):
        stats.main([str(data_dir), "-o", str(tmp_path / "no" / "c.json")])
    with pytest.raises(ReoptError, match=r"^stats: the following arguments are required: "
                                         r"-o/--output \(see 'reopt stats --help'\)$"):
        stats.main([str(data_dir)])


# -- statistics ---------------------------------------------------------------------------------
@pytest.mark.spark
def test_rows_distinct_min_max(computed, frames):
    t = computed["tables"]
    assert set(t) == {"orders", "customer", "lineitem"}
    for name, df in frames.items():
        assert t[name]["rows"] == len(df)
        assert set(t[name]["columns"]) == {c.lower() for c in df.columns}
        for col in df.columns:
            s, c = df[col].dropna(), t[name]["columns"][col.lower()]
            assert c["distinct"] == s.nunique(), (name, col)
            lo, hi = s.min(), s.max()
            if isinstance(lo, dt.date | pd.Timestamp):
                lo, hi = lo.isoformat(), hi.isoformat()
            assert (c["min"], c["max"]) == (lo, hi), (name, col)
    o = t["orders"]["columns"]
    assert (o["o_orderdate"]["min"], o["o_orderdate"]["max"]) == ("1995-01-01", "1996-12-30")
    assert t["lineitem"]["columns"]["l_shiptime"]["min"] == "1996-01-01T06:00:00"
    assert "histogram" not in o["o_status"]
    assert "histogram" not in t["customer"]["columns"]["c_name"]
    assert t["orders"]["sorted_on"] == "o_orderkey"


@pytest.mark.spark
def test_widths_are_type_sizes_and_mean_text_lengths(computed):
    t = computed["tables"]
    o, c = t["orders"]["columns"], t["customer"]["columns"]
    # text: 12 + the mean UTF-8 length ('F'/'O'/'P'; 'Customer#' and six digits)
    assert o["o_status"]["width"] == 12 + 1
    assert c["c_name"]["width"] == 12 + len("Customer#000001")
    # fixed-size types: Spark's defaultSize (int64 and double 8, date 4, CSV's inferred int 4)
    assert (o["o_orderkey"]["width"], o["o_price"]["width"], o["o_orderdate"]["width"]) == \
        (8, 8, 4)
    assert c["c_custkey"]["width"] == 4
    assert t["lineitem"]["columns"]["l_shiptime"]["width"] == 8


@pytest.mark.spark
def test_histograms_well_formed(computed, frames):
    cat = Catalog.from_dict(computed)
    n_hist = 0
    for name, t in computed["tables"].items():
        for col, c in t["columns"].items():
            if "histogram" not in c:
                continue
            n_hist += 1
            h = c["histogram"]
            nonnull = int(frames[name].rename(columns=str.lower)[col].notna().sum())
            assert len(h["bounds"]) == len(h["counts"]) + 1 and len(h["counts"]) <= 10
            assert sum(h["counts"]) == nonnull, (name, col)
            nums = [as_number(b) for b in h["bounds"]]
            assert nums == sorted(nums)
            assert (h["bounds"][0], h["bounds"][-1]) == (c["min"], c["max"])
            assert cat.tables[name].columns[col].histogram is not None
    # every numeric/date/timestamp column has one (orders 5, customer 2, lineitem 3)
    assert n_hist == 10
    date_bounds = computed["tables"]["orders"]["columns"]["o_orderdate"]["histogram"]["bounds"]
    assert all(dt.date.fromisoformat(b).isoformat() == b for b in date_bounds)


@pytest.mark.spark
def test_histogram_fractions(computed, frames):
    cat = Catalog.from_dict(computed)
    orders = frames["orders"]
    cases = [
        ("orders", "o_orderkey", orders.o_orderkey, [300, 1234, 2999]),
        ("orders", "o_price", orders.o_price, [50.0, 500.0, 900.0]),
        ("orders", "o_orderdate", orders.o_orderdate, [dt.date(1995, 7, 1), dt.date(1996, 3, 1)]),
    ]
    for table, col, series, xs in cases:
        h = cat.tables[table].columns[col].histogram
        for x in xs:
            true = float((series < x).mean())
            axis = as_number(x.isoformat()) if isinstance(x, dt.date) else x
            assert abs(h.fraction_below(axis) - true) < 0.03, (col, x)
    # The frequent value l_quantity = 1 gets its own zero-width bucket with the exact count.
    q = computed["tables"]["lineitem"]["columns"]["l_quantity"]["histogram"]
    assert q["bounds"][:2] == [1, 1]
    assert q["counts"][0] == int((frames["lineitem"].l_quantity == 1).sum())


@pytest.mark.spark
def test_compute_catalog_round_trip(spark, data_dir, computed):
    cat = stats.compute_catalog([str(data_dir / "orders.parquet")], spark, buckets=10)
    assert Catalog.from_dict(cat.to_dict()).tables == cat.tables
    # the same statistics as in the folder run (which also declared sorted_on)
    expected = Catalog.from_dict(computed).tables["orders"]
    assert cat.tables == {"orders": dataclasses.replace(expected, sorted_on=None)}


@pytest.mark.spark
def test_cli_main(spark, data_dir, tmp_path, capsys):
    out = tmp_path / "catalog.json"
    rc = stats.main(
        [
            str(data_dir / "lineitem"),
            str(data_dir / "customer.csv"),
            "-o",
            str(out),
            "--buckets",
            "4",
            "--histogram-columns",
            "l_quantity,customer.c_nation",
        ]
    )
    assert rc == 0
    data = json.loads(out.read_text())
    cat = Catalog.load(out)
    assert set(cat.tables) == {"lineitem", "customer"}
    hist = {
        (t, c)
        for t, tt in data["tables"].items()
        for c, cc in tt["columns"].items()
        if "histogram" in cc
    }
    assert hist == {("lineitem", "l_quantity"), ("customer", "c_nation")}
    assert all(len(data["tables"][t]["columns"][c]["histogram"]["counts"]) <= 4 for t, c in hist)
    lines = capsys.readouterr().out.splitlines()
    assert "lineitem: 4000 rows, 3 columns, 1 histograms" in lines
    assert "customer: 1500 rows, 3 columns, 1 histograms" in lines


@pytest.mark.spark
def test_stats_errors(spark, tmp_path, data_dir):
    missing = tmp_path / "missing.csv"
    with pytest.raises(CatalogError, match=str(missing)):
        stats.compute_catalog([str(missing)], spark)
    bad_ext = tmp_path / "orders.json"
    bad_ext.write_text("{}")
    with pytest.raises(CatalogError, match=str(bad_ext)):
        stats.compute_catalog([str(bad_ext)], spark)
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"this is not parquet")
    with pytest.raises(CatalogError, match=f"{corrupt}: cannot read parquet"):
        stats.compute_catalog([str(corrupt)], spark)
    with pytest.raises(CatalogError, match="histogram column 'nope'"):
        stats.compute_catalog([str(data_dir / "customer.csv")], spark, histogram_columns={"nope"})
    with pytest.raises(CatalogError, match="no column 'x'"):
        stats.compute_catalog([str(data_dir / "customer.csv")], spark, sorted_on={"customer": "x"})


# -- reopt.spark (no Spark needed) ----------------------------------------------------------------
def test_require_java_missing(monkeypatch):
    import reopt.spark as rs

    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(rs.shutil, "which", lambda _name: None)
    with pytest.raises(ReoptError) as e:
        rs.require_java()
    msg = str(e.value)
    assert "\n" not in msg
    assert "Java 17" in msg and "no 'java' found on PATH" in msg and "JAVA_HOME is not set" in msg


def test_require_java_bad_home_and_old_version(monkeypatch, tmp_path):
    import reopt.spark as rs

    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(ReoptError, match=f"JAVA_HOME is set to '{tmp_path}'"):
        rs.require_java()
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "java").write_text("")

    def old_java(*_a, **_k):
        return subprocess.CompletedProcess([], 0, "", 'java version "1.8.0_292"\n')

    monkeypatch.setattr(rs.subprocess, "run", old_java)
    with pytest.raises(ReoptError, match="is Java 8"):
        rs.require_java()
    assert rs._java_major('openjdk version "17.0.15" 2025-04-15') == 17
    assert rs._java_major('openjdk version "21" 2023-09-19') == 21


def test_master_resolution(monkeypatch):
    import reopt.spark as rs

    monkeypatch.delenv(rs.MASTER_ENV, raising=False)
    assert rs._resolve_master(None) == "local[*]"
    monkeypatch.setenv(rs.MASTER_ENV, "local[3]")
    assert rs._resolve_master(None) == "local[3]"
    assert rs._resolve_master("local[1]") == "local[1]"


@pytest.mark.spark
def test_get_spark_settings(spark):
    from reopt.spark import get_spark

    conf = spark.conf
    assert get_spark() is spark  # never a second session
    assert conf.get("spark.ui.enabled") == "false"
    assert conf.get("spark.sql.session.timeZone") == "UTC"
    assert conf.get("spark.sql.execution.arrow.pyspark.enabled") == "true"
    assert conf.get("spark.sql.shuffle.partitions") == "4"  # 2 x local[2]
    assert conf.get("spark.sql.codegen.wholeStage") == "false"
    assert conf.get("spark.sql.adaptive.enabled") == "false"
    assert spark.sparkContext.getCheckpointDir() is not None
    assert spark.sparkContext.master == "local[2]"


def test_scratch_directories_of_killed_processes_are_removed(tmp_path, monkeypatch):
    """A killed process leaves its scratch directory (no exit handler runs); the next process
    that needs one removes those whose process is gone, and only those."""
    import os
    import sys

    import reopt.spark as rs

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(rs, "_scratch", None)
    dead = tmp_path / f"reopt-spark-{gone.pid}-abc"
    live = tmp_path / f"reopt-spark-{os.getppid()}-def"
    unnamed = tmp_path / "reopt-spark-xyz"  # an older layout without a process id: kept
    for d in (dead, live, unnamed):
        (d / "checkpoints").mkdir(parents=True)
    mine = rs._scratch_dir()
    try:
        assert not dead.exists() and live.exists() and unnamed.exists()
        assert mine.parent == tmp_path and mine.name.startswith(f"reopt-spark-{os.getpid()}-")
        assert rs._scratch_dir() == mine
    finally:
        rs._cleanup_scratch()
    assert not mine.exists()
