"""A training team's runs: the backlog of jobs a week brings, and how a week's sessions map
onto jobs.

A job trace is CSV, one row per training run, after optional `#` comment lines:

    user,groups,submitted,gpus,minutes,checkpoint
    researcher2,researchers,2026-11-30 11:20,2,390,30

`minutes` is the work the run needs on its GPUs (they are busy all of it);
`checkpoint` the minutes between the checkpoints it writes (0: none, a stopped
run starts over). A run stopped to give way loses what it did since its latest
checkpoint, and runs again from there.

Under today's policies a run is a notebook server (`as_servers`); with jobs, a
week's own unattended runs and its 2- and 4-GPU starts are jobs (`as_jobs`).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from .trace import TIME_FORMAT, Segment, Session, TraceError, read_rows

COLUMNS = ("user", "groups", "submitted", "gpus", "minutes", "checkpoint")
CHECKPOINT_MINUTES = 30  # assumption: how often a run writes a checkpoint (every 30 min)
SMALLEST_TRAINING_START = 2  # a session on this many GPUs or more is a training start


@dataclass(frozen=True)
class TrainingJob:
    user: str
    groups: tuple[str, ...]
    submitted: datetime
    gpus: int
    minutes: int  # the work it needs, in minutes on its GPUs
    checkpoint: int = CHECKPOINT_MINUTES  # minutes between checkpoints; 0: none


def as_jobs(sessions: Sequence[Session]) -> tuple[list[Session], list[TrainingJob]]:
    """The week with jobs: what stays a notebook session, and what is submitted as a job.

    - A session on 2 GPUs or more is a training start: it becomes a job on as many
      GPUs, submitted at its arrival, whose run is the session's busy minutes (at the
      notebook and away) back to back; its idle minutes, the person's pauses, go.
    - A session on one GPU that ends with a run left going (its last segment `A`)
      keeps its notebook part as it was, and the run becomes a 1-GPU job, submitted
      when the notebook part would end had the session started at once.
    Everything else stays as it is.
    """
    people: list[Session] = []
    jobs: list[TrainingJob] = []
    for s in sessions:
        busy = sum(seg.minutes for seg in s.pattern if seg.busy)
        if s.gpus >= SMALLEST_TRAINING_START:
            jobs.append(TrainingJob(s.user, s.groups, s.arrival, s.gpus, busy))
            continue
        last = s.pattern[-1]
        if last.kind == "A" and len(s.pattern) > 1 and s.gpus:
            notebook = s.pattern[:-1]
            at = s.arrival + timedelta(minutes=sum(seg.minutes for seg in notebook))
            jobs.append(TrainingJob(s.user, s.groups, at, s.gpus, last.minutes))
            s = Session(
                s.user, s.groups, s.server, s.arrival, s.gpus, notebook, s.then, s.idle_processes
            )
        people.append(s)
    return people, sorted(jobs, key=lambda j: j.submitted)


def as_servers(jobs: Sequence[TrainingJob]) -> list[Session]:
    """Today's way to run them: each run its own named notebook server (`run-<n>`), started
    when submitted, busy with nobody at it for its whole run, left with its tab closed."""
    return [
        Session(
            j.user,
            j.groups,
            f"run-{n}",
            j.submitted,
            j.gpus,
            (Segment("A", j.minutes),),
            "close",
            True,
        )
        for n, j in enumerate(jobs, 1)
    ]


def read_jobs(path: Path) -> list[TrainingJob]:
    """Every run of a job trace, in submission order; TraceError on the first bad row."""
    jobs = [_job(row, path, line) for row, line in read_rows(path, COLUMNS, "a job trace")]
    return sorted(jobs, key=lambda j: j.submitted)


def _job(row: dict[str, str | None], path: Path, line: int) -> TrainingJob:
    if None in row or any(row.get(c) is None for c in COLUMNS):
        raise TraceError(f"{path}, line {line}: expected {len(COLUMNS)} values, one per column")
    value = {c: (row[c] or "").strip() for c in COLUMNS}

    def whole(column: str, least: int) -> int:
        if not value[column].isdigit() or int(value[column]) < least:
            raise TraceError(
                f"{path}, line {line}, column {column}: {value[column]!r} is not a whole "
                f"number ≥ {least}"
            )
        return int(value[column])

    if not value["user"]:
        raise TraceError(f"{path}, line {line}, column user: empty; name the person")
    try:
        submitted = datetime.strptime(value["submitted"], TIME_FORMAT)
    except ValueError:
        raise TraceError(
            f"{path}, line {line}, column submitted: {value['submitted']!r} is not a time "
            "such as 2026-11-30 09:12"
        ) from None
    return TrainingJob(
        value["user"],
        tuple(g for g in value["groups"].split(";") if g),
        submitted,
        whole("gpus", 1),
        whole("minutes", 1),
        whole("checkpoint", 0),
    )


def write_jobs(path: Path, jobs: Sequence[TrainingJob], header: str = "") -> None:
    """A job trace `read_jobs` reads back; `header` lines go first, as # comments."""
    with path.open("w", newline="", encoding="utf-8") as file:
        for line in header.splitlines():
            file.write(f"# {line}".rstrip() + "\n")
        writer = csv.writer(file, lineterminator="\n")
        writer.writerow(COLUMNS)
        for j in jobs:
            when = j.submitted.strftime(TIME_FORMAT)
            writer.writerow([j.user, ";".join(j.groups), when, j.gpus, j.minutes, j.checkpoint])
