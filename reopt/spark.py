"""The one place Spark is configured.

Every part of reopt that needs Spark calls :func:`get_spark`; nothing else builds a
``SparkSession`` or sets Spark options, so the settings below (and the reasons for them) are the
whole story.  :func:`require_java` turns a missing or too-old Java into one clear
:class:`~reopt.costmodel.errors.ReoptError` line instead of a Py4J stack trace.

Environment:

``REOPT_SPARK_MASTER``
    master URL used when :func:`get_spark` is called without one (default ``local[*]``).
``JAVA_HOME`` / ``PATH``
    where ``java`` is looked up, in that order (the same order PySpark's launcher uses).
"""

from __future__ import annotations

import atexit
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from reopt.costmodel.errors import ReoptError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MIN_JAVA = 17
DEFAULT_MASTER = "local[*]"
DEFAULT_DRIVER_MEMORY = "2g"
MASTER_ENV = "REOPT_SPARK_MASTER"

_INSTALL_HINT = "install OpenJDK 17 (Debian: apt-get install openjdk-17-jre-headless)"

# Log4j 2 configuration handed to the driver JVM at start-up.  Spark only prints its
# "Setting default log level to WARN ..." banner when it falls back to its *built-in* profile,
# and JVM warnings such as NativeCodeLoader's are logged before Python could call
# setLogLevel; giving the JVM its own ERROR-level profile silences both.
_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
# PySpark's gateway initializes logging "as an interpreter": Spark prints its log-level banner
# unless the gateway's own logger is configured explicitly.
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
# A failing task is logged (with a stack trace) by the executor and the scheduler, then
# re-raised to the driver and thus to Python, where reopt reports it as one line.
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = fatal
logger.tasksetmanager.name = org.apache.spark.scheduler.TaskSetManager
logger.tasksetmanager.level = fatal
"""

# Scratch directory (log4j profile + checkpoints) of the session this module created.
_scratch: Path | None = None


# -- Java ---------------------------------------------------------------------------------------
def _java_executable() -> str:
    """Path of the ``java`` Spark will launch: ``$JAVA_HOME/bin/java`` if set, else PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        exe = Path(java_home) / "bin" / ("java.exe" if os.name == "nt" else "java")
        if not exe.is_file():
            raise ReoptError(
                f"Spark needs Java {MIN_JAVA} or newer: JAVA_HOME is set to '{java_home}' "
                f"but '{exe}' does not exist; fix JAVA_HOME or {_INSTALL_HINT}"
            )
        return str(exe)
    exe = shutil.which("java")
    if exe is None:
        raise ReoptError(
            f"Spark needs Java {MIN_JAVA} or newer: no 'java' found on PATH and JAVA_HOME "
            f"is not set; {_INSTALL_HINT}"
        )
    return exe


def _java_major(version_output: str) -> int | None:
    """Major version from ``java -version`` output (``"1.8.0_292"`` -> 8, ``"17.0.15"`` -> 17)."""
    m = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if m is None:
        return None
    major = int(m.group(1))
    if major == 1 and m.group(2) is not None:  # pre-Java-9 scheme: 1.<major>
        major = int(m.group(2))
    return major


def require_java() -> None:
    """Check that a ``java`` of version >= 17 is available, as PySpark 4 requires.

    Raises :class:`ReoptError` with one line saying exactly what is missing; otherwise Spark
    would fail later with a long Py4J/launcher trace ("Java gateway process exited ...").
    """
    exe = _java_executable()
    try:
        proc = subprocess.run(
            [exe, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ReoptError(
            f"Spark needs Java {MIN_JAVA} or newer: cannot run '{exe} -version' ({e}); "
            f"{_INSTALL_HINT}"
        ) from None
    out = (proc.stderr or "") + (proc.stdout or "")
    major = _java_major(out)
    if major is None:
        first = out.strip().splitlines()[0] if out.strip() else f"exit code {proc.returncode}"
        raise ReoptError(
            f"Spark needs Java {MIN_JAVA} or newer: cannot tell the version of '{exe}' "
            f"('{exe} -version' said: {first}); {_INSTALL_HINT}"
        )
    if major < MIN_JAVA:
        raise ReoptError(
            f"Spark needs Java {MIN_JAVA} or newer: '{exe}' is Java {major}; {_INSTALL_HINT} "
            "and point JAVA_HOME at it"
        )


# -- configuration helpers ----------------------------------------------------------------------
def _resolve_master(master: str | None) -> str:
    """Explicit argument, else ``$REOPT_SPARK_MASTER``, else ``local[*]``."""
    return master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER


def _user_configured(key: str, *flags: str) -> bool:
    """Whether the user already set ``key`` outside reopt (so reopt must not override it).

    Looks at ``PYSPARK_SUBMIT_ARGS`` (``--conf key=...`` or an equivalent flag such as
    ``--driver-memory``) and ``spark-defaults.conf`` in ``$SPARK_CONF_DIR`` or
    ``$SPARK_HOME/conf``.
    """
    args = shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", ""))
    if any(a.startswith(f"{key}=") or a in flags for a in args):
        return True
    dirs = [os.environ.get("SPARK_CONF_DIR")]
    if os.environ.get("SPARK_HOME"):
        dirs.append(os.path.join(os.environ["SPARK_HOME"], "conf"))
    for d in dirs:
        if not d:
            continue
        f = Path(d) / "spark-defaults.conf"
        try:
            lines = f.read_text().splitlines()
        except OSError:
            continue
        if any(line.split(None, 1)[:1] == [key] for line in lines):
            return True
    return False


def _cleanup_scratch() -> None:
    global _scratch
    if _scratch is not None:
        shutil.rmtree(_scratch, ignore_errors=True)
        _scratch = None


def _existing_session() -> SparkSession | None:
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    inst = SparkSession._instantiatedSession
    if inst is not None and inst._sc._jsc is not None:
        return inst
    return None


def _ensure_checkpoint_dir(spark: SparkSession) -> None:
    """Give the session a checkpoint directory unless it has one (needed to cut lineage)."""
    global _scratch
    sc = spark.sparkContext
    if sc.getCheckpointDir() is not None:
        return
    if _scratch is None:
        _scratch = Path(tempfile.mkdtemp(prefix="reopt-spark-"))
        atexit.register(_cleanup_scratch)
    ckpt = _scratch / "checkpoints"
    ckpt.mkdir(exist_ok=True)
    sc.setCheckpointDir(str(ckpt))


# -- sessions -----------------------------------------------------------------------------------
SMALL_PLAN_SETTINGS = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.adaptive.enabled": "false",
}
"""Spark SQL settings for many small plans (see :func:`get_spark`), unless the user set them."""


def get_spark(
    master: str | None = None,
    app_name: str = "reopt",
    shuffle_partitions: int | None = None,
) -> SparkSession:
    """Return the process's Spark session, creating it with reopt's settings if none is active.

    If a session already exists it is returned as is (never a second one); only an explicit
    ``shuffle_partitions`` is applied to it, and it gets a checkpoint directory if it has none.

    Settings of a new session, and why:

    * ``master``: the argument, else ``$REOPT_SPARK_MASTER``, else ``local[*]`` (all cores of
      this machine; reopt's data sets are laptop-sized).
    * ``spark.ui.enabled=false``: the web UI costs a thread pool and a port per session and is
      of no use in a batch tool or test run.
    * Log level ERROR (``setLogLevel("ERROR")`` plus an ERROR-level log4j2 profile passed to
      the driver JVM via ``spark.driver.defaultJavaOptions``): Spark's INFO/WARN chatter and
      start-up banner would bury reopt's own output.  A user's ``extraJavaOptions`` still
      apply and can point log4j elsewhere.
    * ``spark.sql.shuffle.partitions``: Spark's default of 200 makes every join/aggregation
      of a small table schedule 200 tiny tasks; reopt uses ``2 x defaultParallelism`` (at
      least 2) unless ``shuffle_partitions`` is given or the user configured it.
    * ``spark.sql.execution.arrow.pyspark.enabled=true``: ``toPandas``/``createDataFrame``
      from pandas go through Arrow, an order of magnitude faster than row pickling.
    * ``spark.driver.memory=2g`` (unless set via ``PYSPARK_SUBMIT_ARGS``,
      ``SPARK_DRIVER_MEMORY`` or ``spark-defaults.conf``): in local mode the driver is also
      the executor; Spark's 1g default is tight, more would crowd small machines.
    * A checkpoint directory under a fresh temp directory (removed by :func:`stop_spark` or
      at exit): iterative evaluation checkpoints DataFrames to cut their lineage, which
      fails without one.  ``spark.cleaner.referenceTracking.cleanCheckpoints=true`` deletes
      checkpoint files once their DataFrame is garbage-collected, so long runs don't fill
      the disk.
    * ``spark.sql.session.timeZone=UTC``: dates/timestamps in statistics and results do not
      depend on the machine's time zone.
    * ``spark.sql.constraintPropagation.enabled=false``: the optimizer otherwise infers the
      constraints (predicates, aliases) of every operator to prune filters; on the ``spark``
      engine's plans (unions, windows and ``inline`` generators over many columns) that
      inference grows exponentially and planning one small frame took up to a minute.  The
      engine filters exactly what it needs; nothing is lost.
    * ``spark.sql.codegen.wholeStage=false`` and ``spark.sql.adaptive.enabled=false`` (unless
      configured): the engines run thousands of Spark plans over relations of thousands of
      tuples, so compiling each plan to Java (whole-stage code generation) and re-planning at
      every stage boundary (adaptive execution) cost more than they save. Measured on TPC-H
      Q5 with pruning ``all``, one process per setting: initial optimization 91 s → 66 s,
      an incremental update 23 s → 17 s. With large relations, set them back.
    * For ``local`` masters, ``spark.driver.host``/``bindAddress=127.0.0.1``: avoids
      hostname-resolution warnings and firewall prompts; nothing outside this machine talks
      to a local driver.
    * PySpark's FutureWarning about pandas >= 3 is filtered (reopt supports pandas 3 on
      purpose).  The JVM's own "Using incubator modules" line cannot be silenced from here.
    * ``PYSPARK_PYTHON`` defaults to this interpreter (``sys.executable``): PySpark otherwise
      starts workers with whatever ``python3`` is on PATH, which may lack pyspark or be a
      different Python version.
    """
    existing = _existing_session()
    if existing is not None:
        if shuffle_partitions is not None:
            existing.conf.set("spark.sql.shuffle.partitions", str(int(shuffle_partitions)))
        _ensure_checkpoint_dir(existing)
        return existing

    require_java()
    # pyproject deliberately allows pandas 3; PySpark warns about it on every session start.
    warnings.filterwarnings(
        "ignore", message="PySpark does not yet fully support pandas", category=FutureWarning
    )
    from pyspark.sql import SparkSession

    global _scratch
    if _scratch is None:
        _scratch = Path(tempfile.mkdtemp(prefix="reopt-spark-"))
        atexit.register(_cleanup_scratch)
    log4j = _scratch / "log4j2.properties"
    log4j.write_text(_LOG4J2)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    url = _resolve_master(master)
    builder = (
        SparkSession.builder.master(url)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.constraintPropagation.enabled", "false")
        .config("spark.cleaner.referenceTracking.cleanCheckpoints", "true")
    )
    if not _user_configured("spark.driver.defaultJavaOptions"):
        builder = builder.config(
            "spark.driver.defaultJavaOptions", f"-Dlog4j2.configurationFile={log4j.as_uri()}"
        )
    if not (
        os.environ.get("SPARK_DRIVER_MEMORY")
        or _user_configured("spark.driver.memory", "--driver-memory")
    ):
        builder = builder.config("spark.driver.memory", DEFAULT_DRIVER_MEMORY)
    if url.startswith("local") and not url.startswith("local-cluster"):
        if not _user_configured("spark.driver.host"):
            builder = builder.config("spark.driver.host", "127.0.0.1")
        if not _user_configured("spark.driver.bindAddress"):
            builder = builder.config("spark.driver.bindAddress", "127.0.0.1")
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(int(shuffle_partitions)))

    spark = builder.getOrCreate()
    sc = spark.sparkContext
    sc.setLogLevel("ERROR")
    if shuffle_partitions is None and not sc.getConf().contains("spark.sql.shuffle.partitions"):
        spark.conf.set("spark.sql.shuffle.partitions", str(max(2, 2 * sc.defaultParallelism)))
    for key, value in SMALL_PLAN_SETTINGS.items():
        if not sc.getConf().contains(key):
            spark.conf.set(key, value)
    _ensure_checkpoint_dir(spark)
    return spark


def stop_spark() -> None:
    """Stop the active session (if any) and delete the temp directory reopt created for it."""
    existing = _existing_session()
    if existing is not None:
        existing.stop()
    _cleanup_scratch()
