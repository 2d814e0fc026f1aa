"""``reopt data tpch``: TPC-H's row counts, and the skew and correlation rewrites against the
statistics their documentation predicts (computed here from the closed forms, not from the
program's output)."""

from __future__ import annotations

import json
from itertools import pairwise

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from reopt.cli import main as cli_main
from reopt.data import MANIFEST, TABLES, generate_tpch

SF = 0.01
# TPC-H clause 4.2.5: rows per table at scale factor SF (nation and region fixed).
EXPECTED_ROWS = {"part": 200_000 * SF, "supplier": 10_000 * SF, "partsupp": 800_000 * SF,
                 "customer": 150_000 * SF, "orders": 1_500_000 * SF, "nation": 25, "region": 5}


def read(d, table: str, columns: list[str]) -> pd.DataFrame:
    return pq.read_table(d / f"{table}.parquet", columns=columns).to_pandas()


def test_row_counts_are_tpch(tpch_dir):
    for table, rows in EXPECTED_ROWS.items():
        assert pq.read_metadata(tpch_dir / f"{table}.parquet").num_rows == rows, table
    # lineitem: 1..7 lines per order, uniform (clause 4.2.3), so 4 per order on average
    lines = read(tpch_dir, "lineitem", ["l_orderkey"])["l_orderkey"].value_counts()
    assert len(lines) == EXPECTED_ROWS["orders"]
    assert lines.min() == 1 and lines.max() == 7
    n = EXPECTED_ROWS["orders"]
    assert abs(lines.sum() - 4 * n) < 4 * 2 * np.sqrt(n)  # 4 standard deviations (sd 2/order)
    assert json.loads((tpch_dir / MANIFEST).read_text())["skew"] is None
    assert sorted(p.name for p in tpch_dir.iterdir()) == sorted(
        [f"{t}.parquet" for t in TABLES] + [MANIFEST])


def test_cli_rejects_bad_input(tmp_path, capsys):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    for argv, says in [
        (["--sf", "0", "-o", str(tmp_path / "a")], "--sf: must be greater than 0"),
        (["--sf", "0.01", "-o", str(tmp_path / "a"), "--skew", "-1"], "--skew: must be from"),
        (["--sf", "0.01", "-o", str(tmp_path / "a"), "--seed", "x"], "--seed: expected"),
        (["--sf", "0.01", "-o", str(tmp_path / "full")], "exists and is not empty"),
        (["--sf", "0.01", "-o", str(tmp_path / "a"), "--drift"], "--drift needs --skew"),
    ]:
        assert cli_main(["data", "tpch", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("reopt: ") and says in err and err.count("\n") == 1, err


def zipf_probabilities(n: int, z: float) -> np.ndarray:
    """P(rank = r), r = 1..n, of the documented law P(rank <= k) = ((k+1)^(1-z) - 1) /
    ((n+1)^(1-z) - 1) (its limit log(k+1) / log(n+1) at z = 1)."""
    k = np.arange(0, n + 1, dtype=float)
    if z == 1:
        cdf = np.log(k + 1) / np.log(n + 1)
    else:
        cdf = ((k + 1) ** (1 - z) - 1) / ((n + 1) ** (1 - z) - 1)
    return np.diff(cdf)


def collision(a: pd.Series, b: pd.Series | None = None) -> float:
    """Unbiased estimate of sum_k p(k)^2 (one sample) or sum_k p(k) q(k) (two samples) from
    the keys drawn: invariant under any relabelling of the keys, so it tests the law of the
    ranks without knowing which key each rank became."""
    ca = a.value_counts()
    if b is None:
        return float((ca * (ca - 1)).sum() / (len(a) * (len(a) - 1)))
    cb = b.value_counts()
    return float((ca * cb.reindex(ca.index, fill_value=0)).sum() / (len(a) * len(b)))


@pytest.mark.spark
def test_skew_and_correlation(spark, tpch_dir, tmp_path):
    out = tmp_path / "skewed"
    z = 0.5
    generate_tpch(SF, out, skew=z, correlate=True, seed=7, spark=spark)
    assert json.loads((out / MANIFEST).read_text())["rewritten"] == ["orders", "lineitem"]
    for table in ("orders", "lineitem"):  # rewriting changes values, never the row count
        assert len(read(out, table, [])) == len(read(tpch_dir, table, []))

    orders = read(out, "orders", ["o_custkey", "o_orderdate"])
    plain = read(tpch_dir, "orders", ["o_custkey", "o_orderdate"])
    customers = int(EXPECTED_ROWS["customer"])
    assert (orders.o_custkey % 3 != 0).all() and orders.o_custkey.between(1, customers).all()
    eligible = customers - customers // 3
    expected = float((zipf_probabilities(eligible, z) ** 2).sum())
    years = pd.to_datetime(orders.o_orderdate).dt.year
    per_year = {y: orders.o_custkey[years == y] for y in sorted(set(years))}
    estimates = [collision(keys) for keys in per_year.values()]
    assert abs(np.mean(estimates) / expected - 1) < 0.15, (estimates, expected)
    # The plain data: dbgen (and tpchgen-cli) draw 1..C and move a multiple of 3 to the next
    # key, so keys = 1 (mod 3) come twice as often as keys = 2: sum p^2 = (5/9) / (eligible/2)
    # instead of the uniform 1/eligible; the skewed law is clearly more concentrated.
    assert abs((plain.o_custkey % 3 == 1).mean() - 2 / 3) < 0.02
    plain_years = pd.to_datetime(plain.o_orderdate).dt.year
    plain_est = np.mean([collision(plain.o_custkey[plain_years == y]) for y in per_year])
    assert abs(plain_est / (5 / 9 / (eligible / 2)) - 1) < 0.1
    assert np.mean(estimates) > 1.4 * plain_est
    # drift: the hot customers of one year are not those of the next. Ranks of the next year
    # are those of this one shifted by a random d, and the mean over d of sum_r p_r p_(r+d) is
    # 1/eligible; without drift, sum p q would be sum p^2 (1.8/eligible at z = 0.5).
    ys = list(per_year)
    cross = np.mean([collision(per_year[a], per_year[b]) for a, b in pairwise(ys)])
    assert abs(cross * eligible - 1) < 0.25 and cross < 0.7 * expected

    parts = int(EXPECTED_ROWS["part"])
    line = read(out, "lineitem", ["l_orderkey", "l_partkey", "l_suppkey", "l_shipdate"])
    ship_years = pd.to_datetime(line.l_shipdate).dt.year
    estimates = [collision(line.l_partkey[ship_years == y]) for y in sorted(set(ship_years))
                 if (ship_years == y).sum() > 1000]
    expected = float((zipf_probabilities(parts, z) ** 2).sum())
    assert abs(np.mean(estimates) / expected - 1) < 0.15, (estimates, expected)

    # correlation: a line's supplier is of its customer's nation whenever that nation has one
    cust = read(tpch_dir, "customer", ["c_custkey", "c_nationkey"])
    supp = read(tpch_dir, "supplier", ["s_suppkey", "s_nationkey"])
    okeys = read(out, "orders", ["o_orderkey", "o_custkey"])

    def same_nation(lines: pd.DataFrame, orders_: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
        m = (lines.merge(orders_, left_on="l_orderkey", right_on="o_orderkey")
             .merge(cust, left_on="o_custkey", right_on="c_custkey")
             .merge(supp, left_on="l_suppkey", right_on="s_suppkey"))
        return m.c_nationkey == m.s_nationkey, m.c_nationkey.isin(set(supp.s_nationkey))

    same, has_supplier = same_nation(line, okeys)
    assert len(same) == len(line)
    assert (same == has_supplier).all() and same.mean() > 0.8
    plain_same, _ = same_nation(read(tpch_dir, "lineitem", ["l_orderkey", "l_suppkey"]),
                                read(tpch_dir, "orders", ["o_orderkey", "o_custkey"]))
    assert abs(plain_same.mean() - 1 / 25) < 0.01  # independent nations: 1/25


def binomial_close(share: float, p: float, n: int) -> bool:
    """``share`` of ``n`` independent draws is within 4 standard deviations of ``p``."""
    return abs(share - p) <= 4 * np.sqrt(p * (1 - p) / n)


def check_hot_group_shares(rows: pd.DataFrame, years: pd.Series, group: str, keys: str,
                           eligible: pd.DataFrame, z: float, seed: int) -> None:
    """Per year, the share of ``rows`` whose ``group`` is the year's hot group (the ((y - 1992
    + seed) mod G)-th of the G groups of ``eligible``, sorted) is P(rank <= that group's keys
    in ``eligible``), and the most frequent key's share is P(rank = 1)."""
    groups = sorted(set(eligible[group]))
    cdf = zipf_probabilities(len(eligible), z).cumsum()
    for y in sorted(set(years)):
        hot = groups[(y - 1992 + seed) % len(groups)]
        these = rows[years == y]
        expected = cdf[int((eligible[group] == hot).sum()) - 1]
        share = float((these[group] == hot).mean())
        assert binomial_close(share, expected, len(these)), (y, group, share, expected)
        top = float(these[keys].value_counts(normalize=True).iloc[0])
        assert binomial_close(top, cdf[0], len(these)), (y, keys, top, cdf[0])


@pytest.mark.spark
def test_drift_puts_each_years_hot_keys_in_one_group(spark, tpch_dir, tmp_path):
    """``--drift``: a year's share of orders from its hot region (and of line items of its
    hot brand) is P(rank <= keys in that group) of the documented law, the hot group of
    year y being the ((y - 1992 + seed) mod G)-th; the top key's share is P(rank = 1)."""
    out, z, seed = tmp_path / "drift", 1.0, 3
    generate_tpch(SF, out, skew=z, seed=seed, spark=spark, drift=True)
    assert json.loads((out / MANIFEST).read_text())["drift"] is True

    cust = read(tpch_dir, "customer", ["c_custkey", "c_nationkey"])
    nation = read(tpch_dir, "nation", ["n_nationkey", "n_regionkey"])
    cust = cust.merge(nation, left_on="c_nationkey", right_on="n_nationkey")
    orders = read(out, "orders", ["o_custkey", "o_orderdate"]).merge(
        cust, left_on="o_custkey", right_on="c_custkey", how="left")
    assert orders.n_regionkey.notna().all() and (orders.o_custkey % 3 != 0).all()
    check_hot_group_shares(orders, pd.to_datetime(orders.o_orderdate).dt.year, "n_regionkey",
                           "o_custkey", cust[cust.c_custkey % 3 != 0], z, seed)

    part = read(tpch_dir, "part", ["p_partkey", "p_brand", "p_retailprice"])
    line = read(out, "lineitem", ["l_partkey", "l_suppkey", "l_shipdate", "l_quantity",
                                  "l_extendedprice"]).merge(
        part, left_on="l_partkey", right_on="p_partkey", how="left")
    assert line.p_brand.notna().all()
    check_hot_group_shares(line, pd.to_datetime(line.l_shipdate).dt.year, "p_brand",
                           "l_partkey", part, z, seed)
    # a redrawn part keeps a supplier of partsupp and its own price (as without --drift)
    ps = read(tpch_dir, "partsupp", ["ps_partkey", "ps_suppkey"])
    pairs = set(zip(ps.ps_partkey.tolist(), ps.ps_suppkey.tolist(), strict=True))
    assert all(p in pairs for p in zip(line.l_partkey.tolist(), line.l_suppkey.tolist(),
                                       strict=True))
    price = line.l_quantity.astype(float) * line.p_retailprice.astype(float)
    assert np.allclose(line.l_extendedprice.astype(float), price)


@pytest.mark.spark
def test_skewed_parts_keep_their_partsupp_suppliers(spark, tpch_dir):
    """The supplier formula of clause 4.2.3 gives exactly partsupp's (part, supplier) pairs of
    the generated data, so a skewed line item still joins partsupp."""
    from pyspark.sql import functions as F

    from reopt.data import partsupp_supplier

    parts = int(EXPECTED_ROWS["part"])
    pairs = spark.range(1, parts + 1).withColumnRenamed("id", "p").crossJoin(
        spark.range(4).withColumnRenamed("id", "i"))
    got = pairs.select("p", partsupp_supplier(F.col("p"), F.col("i"),
                                              int(EXPECTED_ROWS["supplier"])).alias("s"))
    ps = read(tpch_dir, "partsupp", ["ps_partkey", "ps_suppkey"])
    assert set(map(tuple, got.toPandas().to_numpy().tolist())) == set(
        zip(ps.ps_partkey.tolist(), ps.ps_suppkey.tolist(), strict=True))


@pytest.mark.spark
def test_rewrites_are_reproducible_and_seeded(spark, tpch_dir):
    """The same seed gives the same keys (nothing is drawn at random), another seed others."""
    from reopt.data import skew_orders

    orders = spark.read.parquet(str(tpch_dir / "orders.parquet"))
    customers = int(EXPECTED_ROWS["customer"])

    def keys(seed: int) -> list[int]:
        df = skew_orders(orders, customers, 0.5, seed).orderBy("o_orderkey")
        return [r[0] for r in df.select("o_custkey").collect()]

    first = keys(7)
    assert keys(7) == first
    other = keys(8)
    assert other != first and sum(a == b for a, b in zip(first, other, strict=True)) < 0.05 * len(
        first)
