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

Start-up failures (a bad master URL, an unreachable standalone master, a JVM that exits) raise
one :class:`ReoptError` line naming the master; :func:`describe_spark_error` turns a Spark or
Py4J exception raised later (a worker Python that cannot import reopt, a stopped context) into
one line for the command line.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from reopt.costmodel.errors import ReoptError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MIN_JAVA = 17
DEFAULT_MASTER = "local[*]"
DEFAULT_DRIVER_MEMORY = "2g"
MASTER_ENV = "REOPT_SPARK_MASTER"
MASTER_CONNECT_TIMEOUT = 5.0
"""Seconds to wait for a TCP connection to a ``spark://`` master before starting the JVM."""

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


def _spark_home() -> str | None:
    """``$SPARK_HOME``, else the installed pyspark package (what ``spark-submit`` then uses)."""
    if os.environ.get("SPARK_HOME"):
        return os.environ["SPARK_HOME"]
    try:
        import pyspark
    except ImportError:
        return None
    return str(Path(pyspark.__file__).parent)


def _user_configured(key: str, *flags: str) -> bool:
    """Whether the user already set ``key`` outside reopt (so reopt must not override it).

    Looks at ``PYSPARK_SUBMIT_ARGS`` (``--conf key=...``, ``--conf=key=...``, ``-c key=...``
    or an equivalent flag such as ``--driver-memory``), a ``--properties-file`` it names, and
    ``spark-defaults.conf`` in ``$SPARK_CONF_DIR`` or the Spark home's ``conf`` directory
    (``$SPARK_HOME``, else the pyspark package).  Needed only for settings that must be known
    when the JVM starts; runtime SQL settings are checked on the session's own configuration.
    """
    args = shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", ""))
    files = []
    for i, a in enumerate(args):
        if a.removeprefix("--conf=").startswith(f"{key}=") or a.split("=", 1)[0] in flags:
            return True
        if a == "--properties-file" and i + 1 < len(args):
            files.append(Path(args[i + 1]))
        elif a.startswith("--properties-file="):
            files.append(Path(a.split("=", 1)[1]))
    home = _spark_home()
    for d in (os.environ.get("SPARK_CONF_DIR"), home and os.path.join(home, "conf")):
        if d:
            files.append(Path(d) / "spark-defaults.conf")
    # Java properties syntax: "key value", "key=value" or "key: value".
    pattern = re.compile(rf"\s*{re.escape(key)}\s*([=:\s]|$)")
    for f in files:
        try:
            lines = f.read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        if any(pattern.match(line) for line in lines):
            return True
    return False


def _cleanup_scratch() -> None:
    global _scratch
    if _scratch is not None:
        shutil.rmtree(_scratch, ignore_errors=True)
        _scratch = None


_SCRATCH_PREFIX = "reopt-spark-"


def _scratch_dir() -> Path:
    """This process's scratch directory (log4j profile, checkpoints), made on first use and
    removed at exit. Its name carries the process id, so the directories of processes that
    were killed (a notebook kernel, a benchmark worker past its time limit: no exit handler
    runs) are removed here, by the next process that starts Spark."""
    global _scratch
    if _scratch is None:
        base = Path(tempfile.gettempdir())
        for old in base.glob(f"{_SCRATCH_PREFIX}*-*"):
            pid = old.name.removeprefix(_SCRATCH_PREFIX).split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)) and old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
        _scratch = Path(tempfile.mkdtemp(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-"))
        atexit.register(_cleanup_scratch)
    return _scratch


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


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
    sc = spark.sparkContext
    if sc.getCheckpointDir() is not None:
        return
    ckpt = _scratch_dir() / "checkpoints"
    ckpt.mkdir(exist_ok=True)
    sc.setCheckpointDir(str(ckpt))


# -- Spark's errors as one line -----------------------------------------------------------------
_JAVA_CLASS = re.compile(r"^(?:[a-z_$][\w$]*\.)+[A-Z][\w$]*: ")
"""A qualified Java exception class before its message (``java.lang.IllegalStateException: ``)."""
_LOG_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (\w+) [\w.$]+: (.*)$")
"""A line of Spark's log in reopt's log4j layout: level and message."""
_NOT_A_REASON = (
    "WARNING: Using incubator modules",  # printed by every JVM start
    "Error initializing SparkContext",  # logged before the exception that says why
)
_MAX_LINE = 300


def first_meaningful_line(text: str) -> str:
    """The line of a Java or Python error text that says what went wrong, without class names.

    A Python traceback gives its exception line (``ModuleNotFoundError: No module named 'x'``),
    a Py4J error its Java exception's message (the line after ``An error occurred while
    calling ...``), JVM output its first exception or ERROR log message.  Stack frames, log
    lines below ERROR and the JVM's start-up warning are skipped; the result is one line of
    at most 300 characters ("" for an empty text).
    """
    lines = text.splitlines()
    tb = [i for i, line in enumerate(lines) if "Traceback (most recent call" in line]
    if tb:  # the exception line: the first unindented line after the last traceback's frames
        for line in lines[tb[-1] + 1:]:
            if line.strip() and not line[0].isspace():
                return _clean(line)
    for raw in lines:
        line = raw.strip()
        m = _LOG_LINE.match(line)
        if m is not None:
            if m.group(1) not in ("ERROR", "FATAL"):
                continue
            line = m.group(2).strip()
        if (not line or raw[:1].isspace() and line.startswith(("at ", "...")) or
                line.startswith(("An error occurred while calling", *_NOT_A_REASON))):
            continue
        line = line.removeprefix(": ")
        line = re.sub(r'^Exception in thread "[^"]*" ', "", line)
        return _clean(line)
    return ""


def _clean(line: str) -> str:
    line = line.strip()
    while _JAVA_CLASS.match(line):
        line = _JAVA_CLASS.sub("", line, count=1)
    line = " ".join(line.split())
    return line if len(line) <= _MAX_LINE else line[: _MAX_LINE - 1] + "…"


def worker_reopt_error(exc: BaseException) -> str | None:
    """The message of a :class:`ReoptError` that a Python worker raised inside a Spark task
    (a rule that fed a built-in what it cannot take, see :mod:`reopt.evaluator.failures`),
    or None: bad input is reported as such, not as a failure of Spark."""
    if not is_spark_error(exc):
        return None
    text = _exception_text(exc)
    m = re.search(r"^(?:[\w.]+\.)?ReoptError: (.+)$", text, re.M)
    return " ".join(m.group(1).split()) if m else None


def is_spark_error(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by PySpark or Py4J (never imports either)."""
    kinds: list[type] = []
    errors = sys.modules.get("pyspark.errors")
    if errors is not None:
        kinds.append(errors.PySparkException)
    protocol = sys.modules.get("py4j.protocol")
    if protocol is not None:
        kinds.append(protocol.Py4JError)
    return bool(kinds) and isinstance(exc, tuple(kinds))


def _exception_text(exc: BaseException) -> str:
    """The message of a Spark/Py4J exception without asking the JVM if it can be avoided."""
    desc = getattr(exc, "_desc", None)  # pyspark's captured exceptions: message, no JVM trace
    if isinstance(desc, str) and desc.strip():
        return desc
    try:
        return str(exc)
    except Exception:  # a Py4JJavaError asks the JVM for its text; the JVM may be gone
        return str(getattr(exc, "errmsg", "") or type(exc).__name__)


def _worker_python() -> tuple[str, str]:
    """(setting, interpreter) Spark starts Python workers with: ``spark.pyspark.python``,
    else ``PYSPARK_PYTHON``, else ``python3``."""
    context = sys.modules.get("pyspark.core.context")
    sc = getattr(getattr(context, "SparkContext", None), "_active_spark_context", None)
    if sc is not None:
        try:
            exe = sc.getConf().get("spark.pyspark.python")
        except Exception:  # the JVM may be gone
            exe = None
        if exe:
            return "spark.pyspark.python", exe
    if os.environ.get("PYSPARK_PYTHON"):
        return "PYSPARK_PYTHON", os.environ["PYSPARK_PYTHON"]
    return "PYSPARK_PYTHON", "python3"


_CONFIGURATION = (
    "[JAVA_GATEWAY_EXITED]",
    "[PYTHON_VERSION_MISMATCH]",
    "[PACKAGE_NOT_INSTALLED]",
    "Cannot call methods on a stopped SparkContext",
    "All masters are unresponsive",
)
"""Spark errors that come from the set-up (master, workers' Python), not from reopt's work."""


def describe_spark_error(exc: BaseException) -> tuple[str, bool] | None:
    """One line for an exception raised by Spark or Py4J, and whether it is a configuration
    problem (the master, the workers' Python) rather than a failure of the work itself.

    Returns None for any other exception, which the caller must let through.
    """
    if not is_spark_error(exc):
        return None
    text = _exception_text(exc)
    missing = re.search(r"^ModuleNotFoundError: No module named '([\w.]+)'", text, re.M)
    if missing is not None and ("Python worker" in text or "PythonException" in text
                                or type(exc).__name__ == "PythonException"):
        setting, exe = _worker_python()
        top = missing.group(1).split(".")[0]
        return (
            f"the Python that Spark starts for its workers ({setting}={exe}) cannot import "
            f"{top} (No module named '{missing.group(1)}'); install reopt with its "
            f"dependencies into that Python (on every worker), or set {setting} to a Python "
            f"that has them (this one is {sys.executable})"
        ), True
    line = first_meaningful_line(text) or type(exc).__name__
    if "stopped SparkContext" in line:
        line = ("the SparkContext was stopped (is the master still running and reachable?): "
                + line)
    return line, any(marker in text for marker in _CONFIGURATION)


def _startup_failure(url: str, exc: BaseException, jvm_output: str) -> str:
    """The one-line ReoptError message for a session that failed to start."""
    line = first_meaningful_line(_exception_text(exc)) or type(exc).__name__
    jvm_line = first_meaningful_line(jvm_output)
    if "All masters are unresponsive" in jvm_output:
        line = ("no master answered (Spark: all masters are unresponsive); check "
                f"--master / ${MASTER_ENV} and that the master is running")
    elif jvm_line and ("[JAVA_GATEWAY_EXITED]" in line or "stopped SparkContext" in line):
        line = jvm_line  # the JVM said why; Python only saw it exit or stop
    return f"Spark failed to start with master '{url}': {line}"


def _check_standalone_master(url: str) -> None:
    """For a ``spark://host:port[,host:port...]`` master, fail at once if no listed master
    accepts a TCP connection: Spark itself retries for a minute before giving up.

    URLs this cannot parse are left to Spark to judge.
    """
    if not url.startswith("spark://"):
        return
    endpoints = []
    for part in url[len("spark://"):].split(","):
        m = re.fullmatch(r"(?:\[([^\]]+)\]|([^:\[\]/]+)):(\d{1,5})/?", part.strip())
        if m is None:
            return
        endpoints.append((m.group(1) or m.group(2), int(m.group(3))))
    errors = []
    for host, port in endpoints:
        try:
            with socket.create_connection((host, port), timeout=MASTER_CONNECT_TIMEOUT):
                return
        except OSError as e:
            errors.append(f"{host}:{port}: {e.strerror or e or type(e).__name__}")
    raise ReoptError(
        f"cannot reach the Spark master at {url} ({'; '.join(errors)}); check --master / "
        f"${MASTER_ENV} and that the master is running"
    )


# -- the JVM's stderr ---------------------------------------------------------------------------
_HOLD_LIMIT = 1 << 20


def _write_stderr(data: bytes) -> None:
    try:
        while data:
            data = data[os.write(2, data):]
    except OSError:  # stderr closed: drop the JVM's output, keep draining its pipe
        pass


class _JvmStderr:
    """The stderr of the JVM reopt started, copied to this process's stderr by a daemon thread.

    While Spark starts the output is held back (up to 1 MiB), so that a failed start-up can be
    reported as one line instead of Java's stack traces; a successful one releases it as is.
    """

    def __init__(self, fd: int):
        self._fd = fd
        self._lock = threading.Lock()
        self._held: bytearray | None = bytearray()
        self._closed = threading.Event()
        threading.Thread(target=self._pump, name="reopt-jvm-stderr", daemon=True).start()

    def _pump(self) -> None:
        try:
            while chunk := os.read(self._fd, 65536):
                with self._lock:
                    if self._held is not None:
                        self._held += chunk
                        if len(self._held) <= _HOLD_LIMIT:
                            continue
                        chunk, self._held = bytes(self._held), None  # too much to hold back
                    _write_stderr(chunk)
        finally:
            os.close(self._fd)
            self._closed.set()

    def hold(self) -> None:
        with self._lock:
            if self._held is None:
                self._held = bytearray()

    def release(self, forward: bool, wait: float = 0.0) -> str:
        """Stop holding back; write what was held if ``forward``; return it as text.

        ``wait``: seconds to wait first for the JVM to close its stderr (after it exited)."""
        if wait:
            self._closed.wait(wait)
        with self._lock:
            held, self._held = bytes(self._held or b""), None
            if forward:
                _write_stderr(held)
        return held.decode(errors="replace")


_jvm_stderr: _JvmStderr | None = None


def _start_gateway(options: dict[str, str]) -> None:
    """Launch Spark's JVM with its stderr through :class:`_JvmStderr`, unless PySpark already
    has a gateway (a stopped session's JVM, or the one ``spark-submit``/``pyspark`` gave us).
    """
    global _jvm_stderr
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        if _jvm_stderr is not None:
            _jvm_stderr.hold()
        return
    read, write = os.pipe()
    _jvm_stderr = _JvmStderr(read)
    try:
        gateway = launch_gateway(SparkConf().setAll(options.items()),
                                 popen_kwargs={"stderr": write})
    finally:
        os.close(write)  # the JVM has its copy; EOF once it exits
    SparkContext._ensure_initialized(gateway=gateway)


# -- sessions -----------------------------------------------------------------------------------
FORCED_SETTINGS = {
    "spark.sql.session.timeZone": "UTC",
}
"""Settings of a session reopt creates that win over the user's (reopt's results depend on them;
see :func:`get_spark`)."""

STARTUP_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.cleaner.referenceTracking.cleanCheckpoints": "true",
}
"""Defaults fixed when the JVM starts, applied unless the user configured them (see
:func:`_user_configured`)."""

SMALL_PLAN_SETTINGS = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.adaptive.enabled": "false",
}
"""Spark SQL settings for many small plans (see :func:`get_spark`), unless the user set them."""

SESSION_DEFAULTS = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.constraintPropagation.enabled": "false",
    **SMALL_PLAN_SETTINGS,
}
"""Runtime SQL defaults, set on the new session unless its configuration (which holds what
``PYSPARK_SUBMIT_ARGS`` and ``spark-defaults.conf`` said) has them."""


def get_spark(
    master: str | None = None,
    app_name: str = "reopt",
    shuffle_partitions: int | None = None,
) -> SparkSession:
    """Return the process's Spark session, creating it with reopt's settings if none is active.

    If a session already exists it is returned as is (never a second one); only an explicit
    ``shuffle_partitions`` is applied to it, and it gets a checkpoint directory if it has none.

    A session that cannot start raises :class:`ReoptError` with one line naming the master and
    what Spark said (``Master must either be yarn or start with spark, k8s, or local``); a
    ``spark://`` master that accepts no TCP connection within :data:`MASTER_CONNECT_TIMEOUT`
    seconds fails before the JVM starts (Spark itself would retry for a minute).  Java's
    output during start-up is held back for that; once the session is up it is passed on.

    Settings of a new session, and why.  Everything below is a default that the user's own
    configuration (``--conf`` in ``PYSPARK_SUBMIT_ARGS``, ``spark-defaults.conf``, the
    variables named) overrides, except the master, the app name and the time zone:

    * ``master``: the argument, else ``$REOPT_SPARK_MASTER``, else ``local[*]`` (all cores of
      this machine; reopt's data sets are laptop-sized).
    * ``spark.sql.session.timeZone=UTC``, **always** (it wins over the user's): ``reopt stats``
      reads timestamps without an offset (CSV, Parquet's ``TIMESTAMP_NTZ``) in the session's
      time zone and writes them to the catalog as UTC, which the catalog reads at day
      granularity; in any other zone a timestamp near midnight would land on another day
      than the one written in the data, and the same files would give different catalogs on
      different machines.  A session you created yourself keeps its own zone.
    * ``spark.ui.enabled=false``: the web UI costs a thread pool and a port per session and is
      of no use in a batch tool or test run; ``spark.ui.showConsoleProgress=false``: progress
      bars would interleave with reopt's output.
    * Log level ERROR (an ERROR-level log4j2 profile passed to the driver JVM via
      ``spark.driver.defaultJavaOptions``, plus ``setLogLevel("ERROR")``): Spark's INFO/WARN
      chatter and start-up banner would bury reopt's own output.  A log4j configuration in
      the user's ``spark.driver.extraJavaOptions`` or ``defaultJavaOptions``, or a
      ``spark.log.level``, is left in charge.
    * ``spark.sql.shuffle.partitions``: Spark's default of 200 makes every join/aggregation
      of a small table schedule 200 tiny tasks; reopt uses ``2 x defaultParallelism`` (at
      least 2) unless ``shuffle_partitions`` is given or the user configured it.
    * ``spark.sql.execution.arrow.pyspark.enabled=true``: ``toPandas``/``createDataFrame``
      from pandas go through Arrow, an order of magnitude faster than row pickling.  Only
      speed: the engines' ``mapInPandas`` calls use Arrow whatever this says.
    * ``spark.driver.memory=2g`` (unless set via ``PYSPARK_SUBMIT_ARGS``,
      ``SPARK_DRIVER_MEMORY`` or ``spark-defaults.conf``): in local mode the driver is also
      the executor; Spark's 1g default is tight, more would crowd small machines.
    * A checkpoint directory under a fresh temp directory (removed by :func:`stop_spark` or
      at exit) unless the session has one: iterative evaluation checkpoints DataFrames to cut
      their lineage, which fails without one.
      ``spark.cleaner.referenceTracking.cleanCheckpoints=true`` deletes checkpoint files once
      their DataFrame is garbage-collected, so long runs don't fill the disk.
    * ``spark.sql.constraintPropagation.enabled=false``: the optimizer otherwise infers the
      constraints (predicates, aliases) of every operator to prune filters; on the ``spark``
      engine's plans (unions, windows and ``inline`` generators over many columns) that
      inference grows exponentially and planning one small frame took up to a minute.  The
      engine filters exactly what it needs; nothing is lost.
    * ``spark.sql.codegen.wholeStage=false`` and ``spark.sql.adaptive.enabled=false``: the
      engines run thousands of Spark plans over relations of thousands of tuples, so
      compiling each plan to Java (whole-stage code generation) and re-planning at every
      stage boundary (adaptive execution) cost more than they save. Measured on TPC-H Q5 with
      pruning ``all``, one process per setting: initial optimization 91 s → 66 s, an
      incremental update 23 s → 17 s. With large relations, set them back.
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

    url = _resolve_master(master)
    _check_standalone_master(url)
    require_java()
    # pyproject deliberately allows pandas 3; PySpark warns about it on every session start.
    warnings.filterwarnings(
        "ignore", message="PySpark does not yet fully support pandas", category=FutureWarning
    )
    from pyspark.sql import SparkSession

    log4j = _scratch_dir() / "log4j2.properties"
    log4j.write_text(_LOG4J2)
    log4j_option = f"-Dlog4j2.configurationFile={log4j.as_uri()}"

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    options = {"spark.master": url, "spark.app.name": app_name, **FORCED_SETTINGS}
    options.update((k, v) for k, v in STARTUP_DEFAULTS.items() if not _user_configured(k))
    if not _user_configured("spark.driver.defaultJavaOptions"):
        options["spark.driver.defaultJavaOptions"] = log4j_option
    if not (
        os.environ.get("SPARK_DRIVER_MEMORY")
        or _user_configured("spark.driver.memory", "--driver-memory")
    ):
        options["spark.driver.memory"] = DEFAULT_DRIVER_MEMORY
    if url.startswith("local") and not url.startswith("local-cluster"):
        for key in ("spark.driver.host", "spark.driver.bindAddress"):
            if not _user_configured(key):
                options[key] = "127.0.0.1"
    if shuffle_partitions is not None:
        options["spark.sql.shuffle.partitions"] = str(int(shuffle_partitions))

    try:
        _start_gateway(options)
        spark = SparkSession.builder.config(map=options).getOrCreate()
    except Exception as e:
        if not (is_spark_error(e) or isinstance(e, OSError)):
            raise
        exited = "[JAVA_GATEWAY_EXITED]" in _exception_text(e)
        held = "" if _jvm_stderr is None else _jvm_stderr.release(False, 5.0 if exited else 0)
        raise ReoptError(_startup_failure(url, e, held)) from None
    if _jvm_stderr is not None:
        _jvm_stderr.release(True)
    sc = spark.sparkContext
    conf = sc.getConf()
    java_options = " ".join(conf.get(k, "") for k in ("spark.driver.defaultJavaOptions",
                                                      "spark.driver.extraJavaOptions"))
    if not conf.contains("spark.log.level") and "log4j" not in java_options.replace(
        log4j_option, ""
    ):
        sc.setLogLevel("ERROR")
    if shuffle_partitions is None and not conf.contains("spark.sql.shuffle.partitions"):
        spark.conf.set("spark.sql.shuffle.partitions", str(max(2, 2 * sc.defaultParallelism)))
    for key, value in SESSION_DEFAULTS.items():
        if not conf.contains(key):
            spark.conf.set(key, value)
    _ensure_checkpoint_dir(spark)
    return spark


EXECUTION_SETTINGS = {
    "spark.sql.cbo.joinReorder.enabled": "false",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.autoBroadcastJoinThreshold": "-1",
    "spark.sql.adaptive.skewJoin.enabled": "false",
    "spark.sql.codegen.wholeStage": "true",
    "spark.sql.constraintPropagation.enabled": "false",
    "spark.sql.optimizer.runtime.bloomFilter.enabled": "false",
    "spark.sql.parquet.filterPushdown": "false",
    "spark.sql.orc.filterPushdown": "false",
    "spark.sql.csv.filterPushdown.enabled": "false",
    "spark.sql.json.filterPushdown.enabled": "false",
}
"""Spark SQL settings while :mod:`reopt.execute` runs a plan, restored after (see
:func:`execution_settings`)."""
REORDER_JOIN = "org.apache.spark.sql.catalyst.optimizer.ReorderJoin"
DYNAMIC_JOIN_SELECTION = "org.apache.spark.sql.execution.adaptive.DynamicJoinSelection"
"""The adaptive optimizer's rule that hints a join side's strategy from its shuffle's sizes."""


@contextlib.contextmanager
def execution_settings(spark: SparkSession) -> Iterator[None]:
    """Run a reopt plan as planned: Spark must not choose its own join order or operators.

    * ``spark.sql.cbo.joinReorder.enabled=false`` and the ``ReorderJoin`` rule excluded
      (``spark.sql.optimizer.excludedRules``, added to the user's list): Spark's cost-based
      and heuristic join reordering would replace the plan's order. (The observation nodes
      between joins block reordering too; this says so explicitly.)
    * ``spark.sql.adaptive.enabled=true``, limited to what keeps the plan's joins: adaptive
      execution re-optimizes the rest of the plan each time a query stage (a shuffle or a
      broadcast) has run, and its ``AQEPropagateEmptyRelation`` replaces a join with an input
      found empty, and every join above it that becomes empty, by an empty relation, so the
      tables those joins would still have read are never scanned (as Spark's own plans
      run). What would change the plan's operators is off:
      ``spark.sql.adaptive.autoBroadcastJoinThreshold=-1`` (no join turned into a broadcast
      join from a stage's runtime size), ``spark.sql.adaptive.skewJoin.enabled=false`` (no
      skewed partition split into several joins) and the adaptive optimizer's
      ``DynamicJoinSelection`` rule excluded
      (``spark.sql.adaptive.optimizer.excludedRules``, added to the user's list: it hints a
      join side without a hint, the left one of every reopt join, not to be broadcast or to
      be the hash join's build side). Partition coalescing and local shuffle readers stay on:
      they change how many tasks read a shuffle, not the join order or operator.
      :mod:`reopt.sparkplan` reads the joins cut off as unobserved.
    * ``spark.sql.codegen.wholeStage=true``: reopt's sessions turn code generation off for
      the optimizer's thousands of tiny plans (:func:`get_spark`), but a plan over tables
      gains from it even at TPC-H SF 0.01 (Q8Join: 19 s -> 11 s on a loaded 2-core machine).
    * What keeps the rows :mod:`reopt.sparkplan` reads off the executed plan the rows of the
      plan's scans and filters: ``spark.sql.constraintPropagation.enabled=false`` (no inferred
      ``IS NOT NULL`` filters on join keys: a scan's filters are the query's),
      ``spark.sql.optimizer.runtime.bloomFilter.enabled=false`` (no runtime Bloom filter
      added to one side of a shuffle join), and filter pushdown into the file formats off
      (``spark.sql.parquet.filterPushdown`` and its ORC, CSV and JSON kin): a scan reads
      every row of its table, so its output is the table's rows, and the relation's filters
      are one ``Filter`` above it. (The ``observe`` node reopt counted with before sat under
      each filter and kept it from being pushed down just the same.)

    Every setting is put back as it was (unset if it was unset) when the block ends.
    """
    conf = spark.conf
    wanted = dict(EXECUTION_SETTINGS)
    for key, rule in (("spark.sql.optimizer.excludedRules", REORDER_JOIN),
                      ("spark.sql.adaptive.optimizer.excludedRules", DYNAMIC_JOIN_SELECTION)):
        excluded = conf.get(key, None) or ""
        if rule not in excluded.split(","):
            wanted[key] = ",".join(r for r in (excluded, rule) if r)
    before = {k: conf.get(k, None) for k in wanted}
    for k, v in wanted.items():
        conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                conf.unset(k)
            else:
                conf.set(k, v)


def jvm_cpu_seconds(spark: SparkSession) -> float:
    """CPU seconds the driver's JVM has used so far (all its threads), from
    ``/proc/PID/stat``. Under a ``local`` master the executors are threads of that JVM, so
    the difference across a query is the query's CPU work, which on a shared machine varies
    far less than its wall time (another process's load stretches wall time, not CPU time);
    on a cluster it is the driver's share only. NaN where it cannot be read (no ``/proc``,
    a JVM on another machine)."""
    import os

    try:
        pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return float("nan")


def stop_spark() -> None:
    """Stop the active session (if any) and delete the temp directory reopt created for it."""
    existing = _existing_session()
    if existing is not None:
        existing.stop()
    _cleanup_scratch()
