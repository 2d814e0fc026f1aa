"""Checkpoints of a continuous query (``reopt stream --checkpoint DIR``): a run that stops —
killed, crashed, or cut short by ``--max-batches`` — resumes at the batch after the last one
checkpointed, with the same window buffers, join states, plan and optimizer, so the batches
it runs from there are the ones an uninterrupted run would have run, with the same results.

What a checkpoint holds (:class:`StreamCheckpoint`, written after every micro-batch): the
executor's state (:meth:`reopt.stream.ContinuousQuery.snapshot`: the next batch's index, each
stream's window buffer, every running plan's intermediate join states — pandas frames, the
same on both executors), the re-planner with its optimizer (the statistics the observations
have set so far, the plan, the observations not yet planned on), the last batch as the
re-planner will read it (its rows dropped: they were already emitted), and how long the
``--results`` file was after that batch's results. The run's settings that decide what a
batch computes are kept too: resuming under other settings is refused.

Order within a batch: the batch runs, its results are written and flushed to the results
file, then the checkpoint is written (to a temporary file, then renamed over the old one, so
a crash leaves the previous checkpoint whole). A run that stops after the results but before
the checkpoint repeats that batch when resumed, and the results file is first cut back to the
length the checkpoint recorded: every result is in the file exactly once.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reopt.costmodel.errors import ReoptError
from reopt.stream import MicroBatch

FORMAT = 2
"""The checkpoint format this reopt writes and reads (2: the re-planner has a change trigger)."""
FILE = "stream-checkpoint.pkl"


@dataclass
class StreamCheckpoint:
    """A continuous query's run after one micro-batch (module doc)."""

    settings: dict[str, Any]
    """The run's settings that decide what a batch computes (names as the CLI's)."""
    executor: dict[str, Any]
    """:meth:`reopt.stream.ContinuousQuery.snapshot`."""
    replanner: Any
    """The :class:`reopt.streamcli.Replanner`, its optimizer included."""
    last: MicroBatch
    """The batch just run, without its rows: the re-planner reads it before the next one."""
    results_bytes: int | None
    """Length of the ``--results`` file after ``last``'s results (None without one)."""


def save(directory: str | Path, checkpoint: StreamCheckpoint) -> None:
    """Write ``checkpoint`` to ``directory`` atomically (module doc)."""
    out = Path(directory)
    light = dataclasses.replace(checkpoint, last=dataclasses.replace(checkpoint.last, rows=[]))
    data = pickle.dumps({"format": FORMAT, "checkpoint": light},
                        protocol=pickle.HIGHEST_PROTOCOL)
    try:
        out.mkdir(parents=True, exist_ok=True)
        part = out / f".{FILE}.part"
        with open(part, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, out / FILE)
    except OSError as e:
        raise ReoptError(f"{out}: cannot write the stream checkpoint: {e.strerror}") from None


def load(directory: str | Path, expected: dict[str, Any]) -> StreamCheckpoint | None:
    """The checkpoint in ``directory``, or None when there is none yet (a new run); a
    one-line error for an unreadable one, another format, or one of a run with other
    settings than ``expected`` (naming the first that differs)."""
    f = Path(directory) / FILE
    if not f.exists():
        return None
    try:
        saved = pickle.loads(f.read_bytes())
    except OSError as e:
        raise ReoptError(f"{f}: cannot read the stream checkpoint: {e.strerror}") from None
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, IndexError) as e:
        raise ReoptError(f"{f}: not a reopt stream checkpoint ({e})") from None
    if not isinstance(saved, dict) or saved.get("format") != FORMAT:
        got = saved.get("format") if isinstance(saved, dict) else None
        raise ReoptError(f"{f}: stream checkpoint format {got!r}; this reopt reads format "
                         f"{FORMAT}")
    cp = saved["checkpoint"]
    for key in sorted(set(expected) | set(cp.settings)):
        if expected.get(key) != cp.settings.get(key):
            raise ReoptError(f"{f}: checkpoint of another run: {key} was "
                             f"{cp.settings.get(key)!r}, now {expected.get(key)!r} (resume "
                             "with the same settings, or use another --checkpoint folder)")
    return cp


def cut_results(path: str | Path, length: int | None) -> None:
    """Cut the results file back to ``length`` bytes, what the checkpoint's batches wrote;
    a one-line error when it is shorter (it was not this run's, or was cut by hand)."""
    if length is None:
        return
    p = Path(path)
    size = p.stat().st_size if p.exists() else 0
    if size < length:
        raise ReoptError(f"{p}: the results file has {size} bytes, the checkpoint's batches "
                         f"wrote {length}: not this run's results file")
    with open(p, "r+b") as f:
        f.truncate(length)
