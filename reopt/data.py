"""``reopt data tpch``: TPC-H as Parquet, optionally with what breaks textbook estimates
(``reopt data stream``, stream workloads, is :mod:`reopt.streamgen`).

The tables come from ``tpchgen-cli`` (a PyPI package: a Rust port of dbgen that needs no
network), one file per table, ``DIR/<table>.parquet``, in the TPC-H schema (keys ``bigint``,
money ``decimal(15,2)``, dates ``date``, text ``string``).  Estimators assume uniform,
independent values; two seeded rewrites, done with Spark, make that assumption wrong:

``--skew Z`` — Zipf-skewed foreign keys that drift over time
    ``o_custkey`` (per order year) and ``l_partkey`` (per ship year) are redrawn from a
    bounded power law of exponent ``Z`` over the eligible keys (``Z = 0`` is uniform; the
    paper used 0.5). With ``N`` eligible keys and a uniform ``u`` in [0, 1) hashed from the
    row's key and the seed, the *rank* is ``r = floor((((N+1)^(1-Z) - 1) u + 1)^(1/(1-Z)))``
    (``floor((N+1)^u)`` for ``Z = 1``), so ``P(r <= k) = ((k+1)^(1-Z) - 1) / ((N+1)^(1-Z) - 1)``
    for ``k = 1..N`` (``log(k+1) / log(N+1)`` for ``Z = 1``).
    Ranks become keys through an affine permutation whose offset depends on the year:
    ``index = ((r - 1) * A + B_year) mod N`` (``A`` the first odd number from 7919 up that is
    coprime with ``N``; ``B_year`` hashed from the seed and the year), so each year has other
    hot customers and parts and a plan chosen for one date range is wrong for another.
    Orders keep TPC-H's rule that customers whose key is a multiple of 3 have no orders
    (index ``i`` is key ``i + i // 2 + 1``). A redrawn ``l_partkey`` gets the supplier the
    specification gives its ``i``-th partsupp row (clause 4.2.3, ``i = (l_linenumber - 1) mod
    4``) and ``l_extendedprice = l_quantity * p_retailprice`` of the new part, so lineitem
    still joins partsupp and part as in TPC-H.

``--drift`` (with ``--skew``) — the hot keys of a year come from one group that moves
    The ranks are mapped to keys by each year's own order instead of the affine permutation:
    first the keys of the year's *hot group*, then all others, each block in the order of a
    hash of the seed, the year and the key. Customers are grouped by the region of their
    nation, parts by ``p_brand``; the hot group of year ``y`` is the ``((y - 1992 + seed) mod
    G)``-th of the ``G`` groups in ascending order (region key, brand name), so consecutive
    years have different hot groups. With ``n_y`` eligible keys in the hot group, a year's
    share of rows whose key is in its hot group is ``P(r <= n_y)`` of the law above: at ``Z =
    1`` on SF 1, ``log(20001) / log(100001) = 0.86`` of a year's orders come from one region
    (0.2 without skew) and ``0.74`` of its line items from one brand (0.04); at ``Z = 0.5``,
    0.45 and 0.20. A filter on region or brand then keeps most rows in some years and few in
    others, so plans chosen for one date range are wrong for another (the estimates assume
    every year is alike).

``--correlate`` — suppliers of the customer's nation
    Each line item's ``l_suppkey`` becomes a supplier (picked by a hash of the line's key and
    the seed) of the nation of the customer who placed the order, where that nation has
    suppliers; TPC-H Q5's ``c_nationkey = s_nationkey`` then keeps nearly every row instead
    of the 1/25 an independence assumption predicts. The link from lineitem to partsupp on
    both keys is given up for this (no query of the workload joins on it).

Everything is seeded (``--seed``, default 0): the same arguments give the same rows in the
same order (tpchgen-cli is deterministic; the rewrites hash, they draw no random numbers, and
write rows sorted by primary key). A rewritten
table is a Spark folder ``DIR/<table>.parquet/`` instead of a file; ``reopt stats DIR`` and
``reopt execute`` read either. ``DIR/reopt-data.json`` records the arguments.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from reopt.cliargs import UsageParser, number_from_to, positive_int, scale_factor
from reopt.costmodel.errors import ReoptError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")
FIRST_YEAR = 1992
"""The first year of TPC-H's dates (clause 4.2.3: STARTDATE is 1992-01-01)."""
LAST_YEAR = 1998
"""The last year of TPC-H's dates (clause 4.2.3: ENDDATE is 1998-12-31)."""
MANIFEST = "reopt-data.json"
KEY = {"orders": ("o_orderkey",), "lineitem": ("l_orderkey", "l_linenumber")}
"""The primary keys of the tables a rewrite changes: rewritten tables are written sorted."""
_STRIDE_START = 7919
_HASH_RANGE = float(2**53)


def tpchgen_executable() -> str:
    """``tpchgen-cli`` of this interpreter's environment (installed with reopt), else PATH."""
    beside = Path(sys.executable).parent / "tpchgen-cli"
    if beside.is_file():
        return str(beside)
    found = shutil.which("tpchgen-cli")
    if found is None:
        raise ReoptError("tpchgen-cli not found (it is a dependency of reopt: "
                         "pip install 'tpchgen-cli>=4,<5')")
    return found


def run_tpchgen(sf: float, out: Path) -> None:
    """Write the eight tables at scale factor ``sf`` to ``out/<table>.parquet``."""
    cmd = [tpchgen_executable(), "parquet", "-s", repr(sf), "-o", str(out), "--quiet"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as e:
        raise ReoptError(f"cannot run tpchgen-cli: {e}") from None
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip().splitlines()
        raise ReoptError(f"tpchgen-cli failed (exit {proc.returncode}): "
                         f"{said[-1] if said else 'no output'}")
    missing = [t for t in TABLES if not (out / f"{t}.parquet").exists()]
    if missing:
        raise ReoptError(f"tpchgen-cli wrote no {', '.join(missing)} in {out}")


# -- the rewrites, as Spark expressions ---------------------------------------------------------
def uniform(seed: int, tag: str, *cols: Column) -> Column:
    """A uniform number in [0, 1) per row, hashed from the seed, a tag and the row's key."""
    from pyspark.sql import functions as F

    h = F.xxhash64(F.lit(seed), F.lit(tag), *cols)
    return F.pmod(h, F.lit(2**53)).cast("double") / F.lit(_HASH_RANGE)


def zipf_rank(u: Column, n: int, z: float) -> Column:
    """Rank 1..n of a bounded power law of exponent ``z`` at uniform ``u`` (its inverse CDF:
    ``raw`` is a continuous power law on [1, n+1), whose floor is the rank)."""
    from pyspark.sql import functions as F

    if z == 1.0:
        raw = F.pow(F.lit(float(n + 1)), u)
    else:
        e = 1.0 - z
        raw = F.pow((F.lit((n + 1) ** e - 1.0) * u + F.lit(1.0)), F.lit(1.0 / e))
    return F.least(F.greatest(F.floor(raw), F.lit(1)), F.lit(n)).cast("long")


def stride(n: int) -> int:
    """The multiplier of the rank permutation: the first odd number >= 7919 coprime with n."""
    a = _STRIDE_START
    while math.gcd(a, n) != 1:
        a += 2
    return a


def drifting_index(u: Column, year: Column, n: int, z: float, seed: int, tag: str) -> Column:
    """Index 0..n-1 of the Zipf rank under the permutation of ``year``."""
    from pyspark.sql import functions as F

    rank = zipf_rank(u, n, z)
    offset = F.pmod(F.xxhash64(F.lit(seed), F.lit(tag + ":year"), year), F.lit(n))
    return F.pmod((rank - 1) * F.lit(stride(n)) + offset, F.lit(n))


def yearly_key_order(spark: SparkSession, keys: DataFrame, seed: int, tag: str) -> DataFrame:
    """``(year, rank, key)``: per year from ``FIRST_YEAR`` to ``LAST_YEAR``, ranks 1..n given
    first to the keys of the year's hot group, then to the others (``keys`` has columns
    ``key`` and ``group``; the hot group of year ``y`` is the ``(y - FIRST_YEAR + seed) mod
    G``-th distinct group in ascending order), each block in an order hashed from the seed,
    the year and the key, so the hot keys move within the group too."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    groups = sorted(r[0] for r in keys.select("group").distinct().collect())
    hot = spark.createDataFrame(
        [(y, groups[(y - FIRST_YEAR + seed) % len(groups)])
         for y in range(FIRST_YEAR, LAST_YEAR + 1)], ["year", "hot"])
    hot = hot.withColumn("hot", F.col("hot").cast(keys.schema["group"].dataType))
    by_year = keys.crossJoin(F.broadcast(hot))
    order = Window.partitionBy("year").orderBy(
        (F.col("group") != F.col("hot")).cast("int"),
        F.xxhash64(F.lit(seed), F.lit(tag + ":order"), F.col("year"), F.col("key")),
        F.col("key"))
    return by_year.select("year", F.row_number().over(order).cast("long").alias("rank"), "key")


def redraw_by_year(df: DataFrame, column: str, year: Column, rank: Column,
                   order: DataFrame) -> DataFrame:
    """``df`` with ``column`` := the key of ``rank`` in ``order`` (from
    :func:`yearly_key_order`) for the row's ``year``."""
    from pyspark.sql import functions as F

    cols = df.columns
    ranked = df.withColumn("_year", year).withColumn("_rank", rank)
    joined = ranked.join(order, (F.col("_year") == F.col("year"))
                         & (F.col("_rank") == F.col("rank")), "left")
    return joined.withColumn(column, F.col("key")).select(*cols)


def customer_groups(customer: DataFrame, nation: DataFrame) -> DataFrame:
    """``(key, group)``: the customers that may have orders (key not a multiple of 3) and the
    region of their nation."""
    from pyspark.sql import functions as F

    regions = nation.select(F.col("n_nationkey"), F.col("n_regionkey").alias("group"))
    eligible = customer.where(F.pmod(F.col("c_custkey"), F.lit(3)) != 0)
    return eligible.join(F.broadcast(regions), F.col("c_nationkey") == F.col("n_nationkey")) \
        .select(F.col("c_custkey").alias("key"), "group")


def part_groups(part: DataFrame) -> DataFrame:
    """``(key, group)``: every part and its brand."""
    from pyspark.sql import functions as F

    return part.select(F.col("p_partkey").alias("key"), F.col("p_brand").alias("group"))


def skew_orders(orders: DataFrame, customers: int, z: float, seed: int,
                grouped: DataFrame | None = None) -> DataFrame:
    """``o_custkey`` redrawn: Zipf over the customers with orders, drifting by order year
    (by the affine permutation, or, given ``grouped`` from :func:`customer_groups`, with each
    year's hot customers from one region)."""
    from pyspark.sql import functions as F

    eligible = customers - customers // 3
    if eligible < 1:
        return orders
    u = uniform(seed, "o_custkey", F.col("o_orderkey"))
    if grouped is not None:
        order = yearly_key_order(orders.sparkSession, grouped, seed, "o_custkey")
        return redraw_by_year(orders, "o_custkey", F.year("o_orderdate"),
                              zipf_rank(u, eligible, z), order)
    i = drifting_index(u, F.year("o_orderdate"), eligible, z, seed, "o_custkey")
    return orders.withColumn("o_custkey", i + F.floor(i / 2).cast("long") + F.lit(1))


def partsupp_supplier(partkey: Column, i: Column, suppliers: int) -> Column:
    """Clause 4.2.3: ``(ps_partkey + i * (S/4 + (ps_partkey - 1)/S)) mod S + 1`` (integer
    divisions), the ``i``-th (0..3) supplier of a part."""
    from pyspark.sql import functions as F

    s = F.lit(suppliers)
    step = F.lit(suppliers // 4) + F.floor((partkey - 1) / s).cast("long")
    return F.pmod(partkey + i * step, s) + F.lit(1)


def skew_lineitem(lineitem: DataFrame, part: DataFrame, parts: int, suppliers: int, z: float,
                  seed: int, drift: bool = False) -> DataFrame:
    """``l_partkey`` redrawn (Zipf drifting by ship year; with ``drift``, each year's hot
    parts of one brand), its supplier and price to match."""
    from pyspark.sql import functions as F

    if parts < 1 or suppliers < 1:
        return lineitem
    cols = lineitem.columns
    u = uniform(seed, "l_partkey", F.col("l_orderkey"), F.col("l_linenumber"))
    if drift:
        order = yearly_key_order(lineitem.sparkSession, part_groups(part), seed, "l_partkey")
        out = redraw_by_year(lineitem, "l_partkey", F.year("l_shipdate"),
                             zipf_rank(u, parts, z), order)
    else:
        i = drifting_index(u, F.year("l_shipdate"), parts, z, seed, "l_partkey")
        out = lineitem.withColumn("l_partkey", i + F.lit(1))
    out = out.withColumn("l_suppkey", partsupp_supplier(
        F.col("l_partkey"), F.pmod(F.col("l_linenumber") - 1, F.lit(4)), suppliers))
    prices = part.select(F.col("p_partkey"), F.col("p_retailprice"))
    out = out.join(F.broadcast(prices), out.l_partkey == prices.p_partkey, "left")
    price_type = dict(lineitem.dtypes)["l_extendedprice"]
    out = out.withColumn("l_extendedprice",
                         (F.col("l_quantity") * F.col("p_retailprice")).cast(price_type))
    return out.select(*cols)


def correlate_lineitem(lineitem: DataFrame, orders: DataFrame, customer: DataFrame,
                       supplier: DataFrame, seed: int) -> DataFrame:
    """``l_suppkey`` := a supplier of the ordering customer's nation (where it has any)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    cols = lineitem.columns
    nation_of_order = orders.select("o_orderkey", "o_custkey").join(
        customer.select("c_custkey", "c_nationkey"), F.col("o_custkey") == F.col("c_custkey"))
    numbered = supplier.select(
        F.col("s_suppkey").alias("_supp"), F.col("s_nationkey").alias("_nation"),
        (F.row_number().over(Window.partitionBy("s_nationkey").orderBy("s_suppkey")) - 1)
        .alias("_j"),
        F.count(F.lit(1)).over(Window.partitionBy("s_nationkey")).alias("_k"),
    )
    counts = numbered.select("_nation", "_k").distinct()
    out = lineitem.join(nation_of_order.select("o_orderkey", "c_nationkey"),
                        F.col("l_orderkey") == F.col("o_orderkey"), "left")
    out = out.join(F.broadcast(counts), F.col("c_nationkey") == F.col("_nation"), "left")
    h = F.xxhash64(F.lit(seed), F.lit("l_suppkey:nation"), "l_orderkey", "l_linenumber")
    out = out.withColumn("_pick", F.pmod(h, F.col("_k"))).drop("_nation", "_k")
    out = out.join(F.broadcast(numbered.drop("_k")),
                   (F.col("c_nationkey") == F.col("_nation")) & (F.col("_pick") == F.col("_j")),
                   "left")
    out = out.withColumn("l_suppkey", F.coalesce(F.col("_supp"), F.col("l_suppkey")))
    return out.select(*cols)


def rewrite(out: Path, spark: SparkSession, skew: float | None, correlate: bool,
            seed: int, drift: bool = False) -> list[str]:
    """Apply the rewrites to the tables in ``out``; returns the tables rewritten."""
    import pyarrow.parquet as pq

    read = {t: spark.read.parquet(str(out / f"{t}.parquet")) for t in TABLES}
    sizes = {t: pq.ParquetFile(out / f"{t}.parquet").metadata.num_rows  # no Spark job
             for t in ("customer", "part", "supplier")}
    new: dict[str, DataFrame] = {}
    if skew is not None:
        grouped = customer_groups(read["customer"], read["nation"]) if drift else None
        new["orders"] = skew_orders(read["orders"], sizes["customer"], skew, seed, grouped)
        new["lineitem"] = skew_lineitem(read["lineitem"], read["part"], sizes["part"],
                                        sizes["supplier"], skew, seed, drift)
    if correlate:
        new["lineitem"] = correlate_lineitem(new.get("lineitem", read["lineitem"]),
                                             new.get("orders", read["orders"]),
                                             read["customer"], read["supplier"], seed)
    staging = out / "_rewriting"
    for table, df in new.items():  # in key order, as tpchgen-cli writes them
        df.orderBy(*KEY[table]).write.mode("overwrite").parquet(
            str(staging / f"{table}.parquet"))
    for table in new:
        (out / f"{table}.parquet").unlink()
        (staging / f"{table}.parquet").rename(out / f"{table}.parquet")
    shutil.rmtree(staging, ignore_errors=True)
    return list(new)


def generate_tpch(sf: float, out: Path | str, skew: float | None = None,
                  correlate: bool = False, seed: int = 0,
                  spark: SparkSession | None = None, master: str | None = None,
                  drift: bool = False) -> dict:
    """Write TPC-H at scale factor ``sf`` to ``out`` (which must be empty or absent), apply
    the rewrites asked for, and return the manifest (also written to ``out/reopt-data.json``).
    Spark (``spark``, else :func:`~reopt.spark.get_spark` with ``master``) is started only
    when a rewrite is asked for."""
    out = Path(out)
    check_arguments(sf, skew, seed)
    if drift and skew is None:
        raise ReoptError("--drift needs --skew (it decides which keys the skew makes hot)")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ReoptError(f"{out}: output folder exists and is not empty "
                         "(reopt data writes a fresh folder)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ReoptError(f"{out}: cannot create output folder: {e.strerror}") from None
    run_tpchgen(sf, out)
    rewritten: list[str] = []
    if skew is not None or correlate:
        if spark is None:
            from reopt.spark import get_spark

            spark = get_spark(master)
        rewritten = rewrite(out, spark, skew, correlate, seed, drift)
    manifest = {"generator": "tpchgen-cli", "sf": sf, "skew": skew, "drift": drift,
                "correlate": correlate, "seed": seed, "rewritten": rewritten}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def check_arguments(sf: float, skew: float | None, seed: int) -> None:
    if not (math.isfinite(sf) and sf > 0):
        raise ReoptError(f"--sf must be a number greater than 0, got {sf}")
    if skew is not None and not (math.isfinite(skew) and 0 <= skew <= 10):
        raise ReoptError(f"--skew must be a number from 0 to 10, got {skew}")
    if not 0 <= seed < 2**63:
        raise ReoptError(f"--seed must be a whole number from 0 to 2^63-1, got {seed}")


# -- command line -------------------------------------------------------------------------------
_skew = number_from_to(0, 10)


def _seed(text: str) -> int:
    t = text.strip()
    if not t.isascii() or not t.isdigit() or len(t) > 18:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to 10^18, got '{text}'")
    return int(t)


def _parser() -> argparse.ArgumentParser:
    ap = UsageParser(prog="reopt data", description="Generate benchmark data as Parquet.")
    sub = ap.add_subparsers(dest="benchmark", required=True)
    t = sub.add_parser("tpch", help="TPC-H with tpchgen-cli, optionally skewed and correlated")
    t.add_argument("--sf", type=scale_factor, required=True, help="scale factor (1 = 1 GB)")
    t.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="output folder (created; must be empty)")
    t.add_argument("--skew", type=_skew, metavar="Z", help="Zipf exponent of o_custkey and "
                   "l_partkey, hot keys drifting by year (the paper: 0.5)")
    t.add_argument("--drift", action="store_true", help="with --skew: each year's hot "
                   "customers from one region and hot parts of one brand, moving by year")
    t.add_argument("--correlate", action="store_true",
                   help="line items' suppliers from the ordering customer's nation")
    t.add_argument("--seed", type=_seed, default=0, help="seed of the rewrites (default 0)")
    t.add_argument("--master", metavar="URL",
                   help="Spark master for the rewrites (default $REOPT_SPARK_MASTER or local[*])")
    st = sub.add_parser("stream", help="seeded stream workloads for continuous queries, "
                        "rates and selectivities drifting in phases (reopt/streamgen.py)")
    st.add_argument("--workload", required=True, choices=("nexmark", "linearroad", "segtolls"))
    st.add_argument("-o", "--output", required=True, metavar="DIR",
                    help="output folder (created; must be empty)")
    st.add_argument("--seconds", type=positive_int, metavar="S",
                    help="stream seconds (default 30: three default phases of S/3)")
    st.add_argument("--seed", type=_seed, default=0, help="random seed (default 0)")
    st.add_argument("--phases", metavar="P", help="phases 'SECONDS[:NAME=VALUE,...];...', "
                    "NAME a stream (its rate, tuples/s) or keys (the join keys' domain)")
    return ap


def main(argv: list[str]) -> int:
    """``reopt data tpch --sf F -o DIR [--skew Z [--drift]] [--correlate] [--seed S]`` and
    ``reopt data stream --workload W -o DIR [--seconds S] [--seed N] [--phases P]``."""
    args = _parser().parse_args(argv)
    if args.benchmark == "stream":
        from reopt.streamgen import generate_stream

        m = generate_stream(args.workload, args.output, args.seconds, args.seed, args.phases)
        counts = ", ".join(f"{s} {n}" for s, n in m["records"].items())
        print(f"wrote {m['workload']} streams, {m['seconds']} s of stream time (phases "
              f"{m['phases']}, seed {m['seed']}) to {args.output}: {counts} records; "
              "catalog.json, query.sql, stream.json")
        return 0
    if args.master is not None and args.skew is None and not args.correlate:
        raise ReoptError("--master applies to --skew/--correlate (nothing else uses Spark)")
    m = generate_tpch(args.sf, args.output, args.skew, args.correlate, args.seed,
                      master=args.master, drift=args.drift)
    how = [f"skew {m['skew']:g}" if m["skew"] is not None else "",
           "drifting by region and brand" if m["drift"] else "",
           "correlated" if m["correlate"] else ""]
    extra = ", ".join(h for h in how if h)
    print(f"wrote TPC-H SF {args.sf:g} to {args.output}" + (f" ({extra}, seed {m['seed']})"
                                                             if extra else ""))
    return 0
