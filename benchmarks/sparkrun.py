"""Initial optimizations on the Spark engine, in a worker process the driver can time out.

The Spark engine costs seconds per fixpoint iteration, and a pruning mode it cannot yet run
well may take far longer; ``run_spark`` therefore runs the tasks in a child process
(``python benchmarks/sparkrun.py``: tasks as JSON on stdin, one JSON line per result on
stdout), kills it (its whole process group, the JVM included) when a task exceeds its time
limit, marks that task, and starts a fresh worker for the rest. A failure is reported with the
first line of its error, never raised.

Not a command to run by hand: ``benchmarks/run.py`` (``make bench``) starts it. Run directly,
it expects the task list as JSON on standard input (a list of objects with ``id``, ``query``,
``model``, ``mode``, ``repeat`` and optionally ``deltas``; see ``run_spark``).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from harness import parser, script

from reopt.costmodel.errors import ReoptError


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:200]


def worker() -> int:
    """Child side: set up Spark, then run each task and print its result as a JSON line."""
    tasks = _tasks(sys.stdin.read())

    def say(obj: dict) -> None:
        print(json.dumps(obj), flush=True)

    from reopt.api import Optimizer

    try:
        from reopt.spark import get_spark

        t0 = time.perf_counter()
        get_spark()
        setup = time.perf_counter() - t0
    except Exception as e:  # Java missing, Spark not starting: every task is unavailable
        say({"fatal": _first_line(e)})
        return 0
    if tasks:
        # JIT warm-up, untimed and before "setup" is said (so under the start-up allowance,
        # not the first task's time limit): a fresh JVM's first optimization runs up to twice
        # as slow as the next ones (Q5 `all`: 57 s against 25-30 s), which would inflate the
        # first task's time and, for a task pushing updates, the baseline they are compared
        # with.
        first = tasks[0]
        with contextlib.suppress(Exception):  # the task itself reports what fails
            Optimizer(first["query"], cost_model=first["model"], engine="spark",
                      pruning=first["mode"]).optimize()
    say({"setup": setup})
    for t in tasks:
        try:
            opt = Optimizer(t["query"], cost_model=t["model"], engine="spark",
                            pruning=t["mode"])
            times, step = [], None
            for _ in range(t["repeat"]):
                step = opt.optimize()
                times.append(step.metrics["seconds"])
            updates = []
            for d in t.get("deltas", ()):  # pushed one after the other to the same session
                up = opt.update([d])
                updates.append({"delta": d, "seconds": up.metrics["seconds"], "cost": up.cost,
                                "update_ratio": up.metrics.get("update_ratio"),
                                "incremental": up.metrics.get("incremental")})
            say({"id": t["id"], "times": times, "cost": step.cost,
                 "pruning_ratio": step.metrics["pruning_ratio"], "updates": updates})
        except Exception as e:
            say({"id": t["id"], "error": _first_line(e)})
    return 0


TASK_KEYS = ("id", "query", "model", "mode", "repeat")


def _tasks(text: str) -> list[dict]:
    """The task list read from stdin, checked: a mistake is one line on stderr (which
    ``run_spark`` reports as the worker's death), not a traceback or a KeyError per task."""
    try:
        tasks = json.loads(text)
    except json.JSONDecodeError as e:
        raise ReoptError(f"sparkrun.py: the tasks on standard input are not JSON ({e})") from None
    if not isinstance(tasks, list) or not all(
            isinstance(t, dict) and all(k in t for k in TASK_KEYS) for t in tasks):
        raise ReoptError("sparkrun.py: standard input must be a JSON list of tasks, each an "
                         f"object with {', '.join(TASK_KEYS)}")
    return tasks


def main(argv: list[str] | None = None) -> int:
    """The worker's command line: only ``--help``. Standard input from a terminal is refused
    at once, where the worker would otherwise wait for JSON that never comes."""
    parser(__doc__, "benchmarks/sparkrun.py").parse_args(argv)
    if sys.stdin.isatty():
        raise ReoptError("sparkrun.py is benchmarks/run.py's Spark worker: it reads its tasks "
                         "as JSON on standard input (see 'benchmarks/sparkrun.py --help')")
    return worker()


def _reader(stream, q: queue.Queue) -> None:
    for line in stream:
        q.put(line)
    q.put(None)


def run_spark(tasks: list[dict], task_timeout: float, budget: float,
              log=lambda msg: None) -> tuple[dict[str, dict], float | None]:
    """Run ``tasks`` (dicts with ``id``, ``query``, ``model``, ``mode``, ``repeat``, and
    optionally ``deltas`` to push one by one with update() after the optimizations) in
    worker processes. Returns ``{id: result}`` — ``times``/``cost``/``pruning_ratio``/
    ``updates`` or ``error`` — and the Spark session start-up seconds of the first worker
    (``None`` if Spark never started). A task over ``task_timeout`` seconds is killed and
    its mode is skipped on the remaining queries (a mode too slow on one query is so on the
    larger ones); once ``budget`` seconds are spent the remaining tasks are not run."""
    results: dict[str, dict] = {}
    setup: float | None = None
    pending = list(tasks)
    slow_modes: dict[str, str] = {}
    started = time.monotonic()
    script = Path(__file__).resolve()
    while pending:
        pending = [t for t in pending if not _skip(t, slow_modes, results)]
        if not pending:
            break
        if time.monotonic() - started > budget:
            for t in pending:
                results[t["id"]] = {"error": f"not run: Spark budget of {budget:.0f} s spent"}
            break
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(
                [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=err, text=True, start_new_session=True, cwd=str(script.parent.parent))
            proc.stdin.write(json.dumps(pending))
            proc.stdin.close()
            lines: queue.Queue = queue.Queue()
            threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
            current = 0
            deadline = time.monotonic() + task_timeout + 120  # start-up allowance
            while current < len(pending):
                try:
                    line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
                except queue.Empty:
                    line = "TIMEOUT"
                if line is None or line == "TIMEOUT":
                    t = pending[current]
                    if line is None:
                        err.seek(0)
                        tail = err.read().decode(errors="replace").strip().splitlines()
                        msg = "worker died: " + (tail[-1][:200] if tail else "no output")
                    else:
                        msg = f"timed out after {task_timeout:.0f} s"
                        slow_modes[t["mode"]] = f"{msg} on {t['query']}"
                    results[t["id"]] = {"error": msg}
                    log(f"spark {t['query']} {t['mode']}: {msg}")
                    current += 1
                    break
                msg = json.loads(line)
                if "fatal" in msg:
                    for t in pending:
                        results[t["id"]] = {"error": msg["fatal"]}
                    current = len(pending)
                    break
                if "setup" in msg:
                    setup = msg["setup"] if setup is None else setup
                else:
                    results[msg.pop("id")] = msg
                    log(f"spark {pending[current]['query']} {pending[current]['mode']}: "
                        f"{msg.get('error') or msg['times']}")
                    current += 1
                    if time.monotonic() - started > budget:
                        break  # the outer loop reports the rest as not run
                deadline = time.monotonic() + task_timeout
            _kill(proc)
            pending = pending[current:]
    return results, setup


def _skip(t: dict, slow_modes: dict[str, str], results: dict) -> bool:
    if t["mode"] in slow_modes:
        results[t["id"]] = {"error": f"skipped: {slow_modes[t['mode']]}"}
        return True
    return False


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def available(result: dict[str, Any] | None) -> bool:
    return bool(result) and "times" in result


if __name__ == "__main__":
    sys.exit(script(main))
