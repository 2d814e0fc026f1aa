"""Spark start-up and run failures end in one ``reopt:`` line; reopt's Spark settings are
defaults the user's configuration overrides (except the time zone).

The tests marked ``spark`` start Spark in a subprocess (``python -m reopt.cli`` or a short
script): a JVM or SparkContext already running in the test process would change what
``getOrCreate`` does.  Each takes 5-20 s.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import reopt.cli
import reopt.spark as rs
from reopt.costmodel.errors import ReoptError

GATEWAY_OUTPUT = """\
WARNING: Using incubator modules: jdk.incubator.vector
Exception in thread "main" org.apache.spark.SparkException: Master must either be yarn or \
start with spark, k8s, or local
\tat org.apache.spark.deploy.SparkSubmit.error(SparkSubmit.scala:1068)
\tat org.apache.spark.deploy.SparkSubmit.prepareSubmitEnvironment(SparkSubmit.scala:263)
"""

STOPPED_CONTEXT = """\
An error occurred while calling None.org.apache.spark.sql.classic.SparkSession.
: java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext.
This stopped SparkContext was created at:

org.apache.spark.api.java.JavaSparkContext.<init>(JavaSparkContext.scala:59)
"""

UNRESPONSIVE_LOG = """\
WARNING: Using incubator modules: jdk.incubator.vector
26/11/23 03:31:29 WARN StandaloneAppClient$ClientEndpoint: Failed to connect to master
26/11/23 03:31:49 ERROR StandaloneSchedulerBackend: Application has been killed. Reason: \
All masters are unresponsive! Giving up.
"""

WORKER_TRACEBACK = """\
An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/x/pyspark.zip/pyspark/worker.py", line 598, in read_single_udf
    f, return_type = read_command(pickleSer, udf)
                     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/x/pyspark.zip/pyspark/serializers.py", line 483, in loads
    return cloudpickle.loads(obj, encoding=encoding)
ModuleNotFoundError: No module named 'reopt'
"""


def _spark_exception(text: str) -> Exception:
    """An exception of PySpark's hierarchy carrying ``text`` like a captured Spark error."""
    from pyspark.errors import PySparkException

    class PythonException(PySparkException):
        pass

    e = PythonException(message=text)
    e._desc = text
    return e


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("REOPT_SPARK_MASTER", "PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR",
                        "PYSPARK_PYTHON", "PYSPARK_GATEWAY_PORT")}
    env.update(extra)
    return env


def _cli(tmp_path: Path, *argv: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reopt.cli", *argv], cwd=tmp_path,
                          env=_clean_env(**env), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300)


def _reopt_lines(stderr: str) -> list[str]:
    """stderr without the JVM's start-up warning, which Spark prints on every start."""
    return [line for line in stderr.splitlines()
            if line.strip() and not line.startswith("WARNING: Using incubator modules")]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- one line from Java's and Python's error texts ----------------------------------------------
def test_first_meaningful_line():
    assert rs.first_meaningful_line(GATEWAY_OUTPUT) == (
        "Master must either be yarn or start with spark, k8s, or local")
    assert rs.first_meaningful_line(STOPPED_CONTEXT) == (
        "Cannot call methods on a stopped SparkContext.")
    assert rs.first_meaningful_line(UNRESPONSIVE_LOG) == (
        "Application has been killed. Reason: All masters are unresponsive! Giving up.")
    assert rs.first_meaningful_line(WORKER_TRACEBACK) == (
        "ModuleNotFoundError: No module named 'reopt'")
    assert rs.first_meaningful_line("") == ""
    long = rs.first_meaningful_line("java.lang.RuntimeException: " + "x" * 1000)
    assert len(long) <= 300 and long.startswith("xxx") and "\n" not in long


def test_startup_failure_message():
    exited = RuntimeError("[JAVA_GATEWAY_EXITED] Java gateway process exited before sending "
                          "its port number.")
    assert rs._startup_failure("bogus://x", exited, GATEWAY_OUTPUT) == (
        "Spark failed to start with master 'bogus://x': Master must either be yarn or start "
        "with spark, k8s, or local")
    # without the JVM's output, PySpark's own line
    assert "Java gateway process exited" in rs._startup_failure("local", exited, "")
    stopped = RuntimeError(STOPPED_CONTEXT)
    msg = rs._startup_failure("spark://h:7077", stopped, UNRESPONSIVE_LOG)
    assert msg.startswith("Spark failed to start with master 'spark://h:7077': no master "
                          "answered") and "\n" not in msg


def test_describe_spark_error(monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/other/python3")
    line, configuration = rs.describe_spark_error(_spark_exception(WORKER_TRACEBACK))
    assert configuration
    assert "(PYSPARK_PYTHON=/opt/other/python3) cannot import reopt" in line
    assert sys.executable in line and "\n" not in line

    line, configuration = rs.describe_spark_error(_spark_exception(STOPPED_CONTEXT))
    assert configuration and "stopped SparkContext" in line and "\n" not in line

    from py4j.protocol import Py4JNetworkError

    assert rs.describe_spark_error(Py4JNetworkError("Answer from Java side is empty")) == (
        "Answer from Java side is empty", False)
    assert rs.describe_spark_error(ValueError("a bug")) is None
    assert rs.describe_spark_error(KeyError("x")) is None


def test_cli_turns_spark_errors_into_one_line(monkeypatch, capsys):
    def fail_with(exc):
        def optimize_main(args):
            raise exc
        monkeypatch.setattr(reopt.cli, "optimize_main", optimize_main)

    fail_with(_spark_exception(WORKER_TRACEBACK))
    assert reopt.cli.main(["optimize", "tpch:q3"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("reopt: Spark failed: the Python that Spark starts for its workers")

    fail_with(_spark_exception("[DIVIDE_BY_ZERO] Division by zero. SQLSTATE: 22012\n== SQL =="))
    assert reopt.cli.main(["optimize", "tpch:q3"]) == 1  # the work failed, not the set-up
    _, err = capsys.readouterr()
    assert err == "reopt: Spark failed: [DIVIDE_BY_ZERO] Division by zero. SQLSTATE: 22012\n"

    fail_with(ValueError("a bug in reopt"))  # anything else keeps its traceback
    with pytest.raises(ValueError, match="a bug in reopt"):
        reopt.cli.main(["optimize", "tpch:q3"])


# -- what counts as configured by the user ------------------------------------------------------
def test_user_configured(monkeypatch, tmp_path):
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "no-spark-home"))
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "pyspark-shell")
    assert not rs._user_configured("spark.ui.enabled")

    for args in ("--conf spark.ui.enabled=true pyspark-shell",
                 "--conf=spark.ui.enabled=true pyspark-shell",
                 "-c spark.ui.enabled=true pyspark-shell"):
        monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", args)
        assert rs._user_configured("spark.ui.enabled"), args
        assert not rs._user_configured("spark.ui")  # a prefix is another key

    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--driver-memory=4g pyspark-shell")
    assert rs._user_configured("spark.driver.memory", "--driver-memory")

    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(
        "# comment\nspark.ui.enabled true\nspark.cleaner.referenceTracking.cleanCheckpoints="
        "false\nspark.sql.session.timeZone: Europe/Paris\nspark.ui.showConsoleProgressX 1\n")
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "pyspark-shell")
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    assert rs._user_configured("spark.ui.enabled")
    assert rs._user_configured("spark.cleaner.referenceTracking.cleanCheckpoints")
    assert rs._user_configured("spark.sql.session.timeZone")
    assert not rs._user_configured("spark.ui.showConsoleProgress")

    monkeypatch.delenv("SPARK_CONF_DIR")
    props = tmp_path / "my.properties"
    props.write_text("spark.ui.showConsoleProgress=true\n")
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", f"--properties-file {props} pyspark-shell")
    assert rs._user_configured("spark.ui.showConsoleProgress")


# -- an unreachable standalone master fails before the JVM starts ---------------------------------
def test_unreachable_standalone_master(monkeypatch):
    port = _closed_port()
    with pytest.raises(ReoptError, match=rf"cannot reach the Spark master at "
                       rf"spark://127\.0\.0\.1:{port} \(127\.0\.0\.1:{port}: "):
        rs._check_standalone_master(f"spark://127.0.0.1:{port}")
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        up = listening.getsockname()[1]
        rs._check_standalone_master(f"spark://127.0.0.1:{port},127.0.0.1:{up}")  # one is up
    for left_to_spark in ("local[2]", "yarn", "spark://no-port", "k8s://https://h:443"):
        rs._check_standalone_master(left_to_spark)


def test_cli_unreachable_master_one_line(tmp_path):
    port = _closed_port()
    proc = _cli(tmp_path, "optimize", "tpch:q3", "--engine", "spark", "--master",
                f"spark://127.0.0.1:{port}")
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith(f"reopt: cannot reach the Spark master at "
                                  f"spark://127.0.0.1:{port}")
    assert proc.stderr.count("\n") == 1


# -- start-up and worker failures, for real ---------------------------------------------------
@pytest.mark.spark
def test_bad_master_one_line(tmp_path):
    proc = _cli(tmp_path, "optimize", "tpch:q3", "--engine", "spark",
                REOPT_SPARK_MASTER="bogus://x")
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert _reopt_lines(proc.stderr) == [
        "reopt: Spark failed to start with master 'bogus://x': Master must either be yarn or "
        "start with spark, k8s, or local"], proc.stderr


def _python_without_reopt(tmp_path: Path) -> str:
    """A Python of this version that cannot import reopt (from a directory without it)."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for exe in dict.fromkeys([getattr(sys, "_base_executable", None), "/usr/bin/python3",
                              f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"]):
        if not exe or not os.path.isfile(exe):
            continue
        probe = subprocess.run(
            [exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2]); import reopt"],
            cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=60)
        if probe.stdout.strip() == version and "No module named 'reopt'" in probe.stderr:
            return exe
    # none installed: a bare virtual environment of this interpreter has no reopt either
    venv = tmp_path / "bare-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   env=_clean_env(), capture_output=True, timeout=120)
    return str(venv / "bin" / "python")


@pytest.mark.spark
def test_worker_python_without_reopt_one_line(tmp_path):
    exe = _python_without_reopt(tmp_path)
    proc = _cli(tmp_path, "optimize", "tpch:q3", "--engine", "spark", "--master", "local[1]",
                PYSPARK_PYTHON=exe)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = _reopt_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(
        f"reopt: Spark failed: the Python that Spark starts for its workers "
        f"(PYSPARK_PYTHON={exe}) cannot import reopt"), lines[0]


# -- the user's configuration wins over reopt's defaults (not over the time zone) ---------------
SETTINGS_SCRIPT = """
import json
from reopt.spark import get_spark
spark = get_spark("local[1]")
conf = spark.sparkContext.getConf()
keys = ["spark.ui.enabled", "spark.ui.showConsoleProgress",
        "spark.cleaner.referenceTracking.cleanCheckpoints"]
sql = ["spark.sql.session.timeZone", "spark.sql.execution.arrow.pyspark.enabled",
       "spark.sql.constraintPropagation.enabled", "spark.sql.adaptive.enabled",
       "spark.sql.codegen.wholeStage", "spark.sql.shuffle.partitions"]
print(json.dumps({**{k: conf.get(k) for k in keys}, **{k: spark.conf.get(k) for k in sql}}))
"""


@pytest.mark.spark
def test_user_settings_win_except_time_zone(tmp_path):
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(
        "spark.ui.showConsoleProgress true\nspark.sql.adaptive.enabled=true\n")
    submit = ("--conf spark.sql.session.timeZone=Europe/Paris "
              "--conf spark.sql.execution.arrow.pyspark.enabled=false "
              "--conf spark.ui.enabled=true --conf spark.sql.constraintPropagation.enabled=true "
              "--conf spark.cleaner.referenceTracking.cleanCheckpoints=false pyspark-shell")
    proc = subprocess.run([sys.executable, "-c", SETTINGS_SCRIPT], cwd=tmp_path,
                          env=_clean_env(PYSPARK_SUBMIT_ARGS=submit, SPARK_CONF_DIR=str(conf)),
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        # the user's (PYSPARK_SUBMIT_ARGS)
        "spark.ui.enabled": "true",
        "spark.cleaner.referenceTracking.cleanCheckpoints": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "false",
        "spark.sql.constraintPropagation.enabled": "true",
        # the user's (spark-defaults.conf)
        "spark.ui.showConsoleProgress": "true",
        "spark.sql.adaptive.enabled": "true",
        # reopt's: forced, and defaults nobody overrode
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.shuffle.partitions": "2",
    }
