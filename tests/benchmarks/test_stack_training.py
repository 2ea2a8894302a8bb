"""The replay's training script, run here as a process: it checkpoints, saves on SIGTERM and
exits 0, resumes from its latest checkpoint; and its journal read into what giving way cost."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from stack.lost_work import lost_work, read_file, read_journal
from stack.train import parse

TRAIN = Path(__file__).resolve().parents[2] / "benchmarks" / "stack" / "train.py"


def training(folder: Path, *args: str) -> subprocess.Popen[str]:
    """train.py in `folder`, as a job runs it (its home the working folder)."""
    return subprocess.Popen(
        [sys.executable, str(TRAIN), *args],
        cwd=folder,
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONUNBUFFERED": "1"},
    )


def until_said(process: subprocess.Popen[str], words: str) -> str:
    """Its output up to the first line holding `words` (the line the job's log shows)."""
    assert process.stdout is not None
    for line in process.stdout:
        if words in line:
            return line
    raise AssertionError(f"it ended ({process.wait()}) without saying {words!r}")


def given_way(folder: Path, on_sigterm: str) -> int:
    """A run sent SIGTERM two steps past its first checkpoint (its next is 50 steps later):
    the step it had reached."""
    run = training(folder, "--steps", "1000", "--step-seconds", "0.01", "--say-every", "1",
                   "--checkpoint-every", "0.5", "--on-sigterm", on_sigterm)  # fmt: skip
    saved = int(until_said(run, "checkpoint at step").split()[3])
    until_said(run, f"step {saved + 2}\n")
    run.send_signal(signal.SIGTERM)
    assert run.wait(10) == 0  # the documented contract: save, then exit 0
    return int(json.loads((folder / "train-journal.jsonl").read_text().splitlines()[-1])["step"])


def test_on_sigterm_it_saves_and_the_next_attempt_resumes_there_redoing_nothing(tmp_path):
    reached = given_way(tmp_path, "save")
    again = training(tmp_path, "--steps", str(reached + 3), "--step-seconds", "0.02")
    assert until_said(again, "resumes") == f"attempt 2 resumes at step {reached} of {reached + 3}\n"
    assert again.wait(10) == 0

    work = read_file(tmp_path / "train-journal.jsonl")
    assert work.finished and len(work.attempts) == 2
    assert work.steps_done == reached + 3 and work.steps_redone == 0
    assert [a.ended for a in work.attempts] == ["sigterm", "done"]


def test_with_drop_a_run_that_gives_way_redoes_the_steps_since_its_checkpoint(tmp_path):
    reached = given_way(tmp_path, "drop")
    lines = parse((tmp_path / "train-journal.jsonl").read_text())
    saved = [line["step"] for line in lines if line["event"] == "checkpoint"][-1]
    assert saved < reached  # the SIGTERM saved nothing

    again = training(tmp_path, "--steps", str(reached + 2), "--step-seconds", "0.02")
    assert f"resumes at step {saved} " in until_said(again, "resumes")
    assert again.wait(10) == 0
    work = read_file(tmp_path / "train-journal.jsonl")
    assert work.steps_redone == reached - saved and work.steps_done == reached + 2
    assert work.seconds_redone == pytest.approx((reached - saved) * 0.01)


def test_bad_arguments_are_refused_with_what_they_must_be(tmp_path):
    refused = subprocess.run(
        [sys.executable, str(TRAIN), "--steps", "0"], cwd=tmp_path, capture_output=True, text=True
    )
    assert refused.returncode == 2 and "--steps ≥ 1" in refused.stderr
    assert not (tmp_path / "train-journal.jsonl").exists()


def line(event: str, time: float, **fields) -> dict:
    return {"event": event, "time": time, **fields}


def test_a_killed_attempt_counts_its_steps_past_the_checkpoint_as_redone():
    """SIGKILL past the grace: no end line, but its steps say how far it got."""
    journal = [
        line("start", 0.0, step=0, trained_seconds=0, step_seconds=2.0),
        *(line("step", float(n), step=n) for n in range(1, 5)),
        line("checkpoint", 4.0, step=4, trained_seconds=8.0, why="every"),
        *(line("step", float(n), step=n) for n in range(5, 8)),
        line("start", 30.0, step=4, trained_seconds=8.0, step_seconds=2.0),
        *(line("step", 30.0 + n, step=n) for n in range(5, 11)),
        line("checkpoint", 40.0, step=10, trained_seconds=20.0, why="done"),
        line("end", 40.0, step=10, why="done"),
    ]
    work = lost_work(journal)
    assert [a.ended for a in work.attempts] == [None, "done"]
    assert (work.steps_done, work.steps_run, work.steps_redone) == (10, 13, 3)
    assert work.seconds_redone == 6.0 and work.waited_seconds == 30.0 - 7.0
    assert work.figures() == {
        "attempts": 2, "finished": True, "steps_done": 10, "steps_redone": 3,
        "seconds_redone": 6.0, "waited_seconds": 23.0,
    }  # fmt: skip


def test_a_torn_last_line_and_a_journal_still_running_are_read_as_far_as_they_go():
    text = "\n".join(
        [
            json.dumps(line("start", 1.0, step=0, trained_seconds=0, step_seconds=1.0)),
            json.dumps(line("step", 2.0, step=1)),
            '{"event": "step", "st',  # SIGKILL mid-write
        ]
    )
    work = read_journal(text)
    assert not work.finished and work.steps_done == 1 and work.steps_redone == 0
    assert read_journal("").figures()["attempts"] == 0
