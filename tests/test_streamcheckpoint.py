"""``reopt stream --checkpoint``: a run cut into pieces, or killed between writing a batch's
results and its checkpoint, ends with exactly the results file and the plans of one
uninterrupted run (the oracle), and a checkpoint of another run is refused in one line."""

from __future__ import annotations

import json

import pytest
from test_stream import QUERY

from reopt import streamcheckpoint
from reopt.cli import main
from reopt.streamgen import generate_stream

ADAPTIVE = ["--plan-every", "1", "--migration", "moving"]


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    """A drifting nexmark stream (its bids speed up: the plan changes, with migrations),
    the query with short windows, and the uninterrupted run's results file and per-batch
    plans."""
    root = tmp_path_factory.mktemp("ck")
    generate_stream("nexmark", root / "nx", seconds=9, phases="drift")
    whole = root / "whole.jsonl"
    doc = run_json(root, ["--results", str(whole)])
    plans = [b["plan"] for b in doc["batches"]]
    assert len(set(plans)) > 1  # premise: the run switches plans
    return root, whole.read_bytes(), plans


def run_json(root, extra: list[str]) -> dict:
    from contextlib import redirect_stdout
    from io import StringIO

    out = StringIO()
    with redirect_stdout(out):
        code = main(["stream", QUERY, "--data", str(root / "nx"),
                     *ADAPTIVE, "--json", *extra])
    assert code == 0
    return json.loads(out.getvalue())


def test_a_run_in_pieces_equals_one_run(stream, tmp_path):
    root, whole, plans = stream
    results, ck = tmp_path / "r.jsonl", str(tmp_path / "ck")
    pieces = [run_json(root, ["--results", str(results), "--checkpoint", ck,
                              *(["--max-batches", str(n)] if n else [])])
              for n in (4, 3, None)]
    assert [len(p["batches"]) for p in pieces] == [4, 3, len(plans) - 7]
    assert [p["resumed_after"] for p in pieces] == [None, 3, 6]
    assert [b["plan"] for p in pieces for b in p["batches"]] == plans
    assert results.read_bytes() == whole
    # a finished run resumed has nothing left to do
    assert run_json(root, ["--results", str(results), "--checkpoint", ck])["batches"] == []
    assert results.read_bytes() == whole


class Killed(Exception):
    """Stands for the process dying."""


def test_killed_before_its_checkpoint_a_batch_is_redone_once(stream, tmp_path, monkeypatch):
    root, whole, plans = stream
    results, ck = tmp_path / "r.jsonl", str(tmp_path / "ck")
    save = streamcheckpoint.save
    calls = []

    def dies_at_the_sixth(directory, checkpoint):
        calls.append(checkpoint.last.index)
        if len(calls) == 6:  # batch 5's results are in the file, its checkpoint is not
            raise Killed
        save(directory, checkpoint)

    monkeypatch.setattr(streamcheckpoint, "save", dies_at_the_sixth)
    with pytest.raises(Killed):
        run_json(root, ["--results", str(results), "--checkpoint", ck])
    monkeypatch.setattr(streamcheckpoint, "save", save)
    assert len(results.read_bytes()) > whole.index(b'"batch": 5')  # batch 5 was written
    doc = run_json(root, ["--results", str(results), "--checkpoint", ck])
    assert doc["resumed_after"] == 4 and doc["batches"][0]["index"] == 5
    assert [b["plan"] for b in doc["batches"]] == plans[5:]
    assert results.read_bytes() == whole


def test_checkpoints_of_other_runs_are_refused_in_one_line(stream, tmp_path, capsys):
    root, _, _ = stream
    ck, results = str(tmp_path / "ck"), tmp_path / "r.jsonl"
    run_json(root, ["--checkpoint", ck, "--results", str(results), "--max-batches", "2"])
    capsys.readouterr()
    query, data = QUERY, str(root / "nx")
    kept = ["--results", str(results)]
    for extra, word in ((["--plan-every", "2", *kept], "plan_every"),
                        (["--state", "windows", "--plan-every", "1", *kept], "state"),
                        (ADAPTIVE, "results")):
        assert main(["stream", query, "--data", data, "--checkpoint", ck, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("reopt: ") and "\n" not in err and word in err, err
    results.write_text("")  # the results file lost what the checkpoint's batches wrote
    assert main(["stream", query, "--data", data, *ADAPTIVE, "--checkpoint", ck,
                 "--results", str(results)]) == 2
    assert "not this run's results file" in capsys.readouterr().err
    assert main(["stream", query, "--data", data, "--strategy", "static",
                 "--checkpoint", ck]) == 2
    assert "--checkpoint needs --strategy adaptive" in capsys.readouterr().err
    (tmp_path / "ck" / streamcheckpoint.FILE).write_bytes(b"not a pickle")
    assert main(["stream", query, "--data", data, *ADAPTIVE, "--checkpoint", ck]) == 2
    assert "not a reopt stream checkpoint" in capsys.readouterr().err
