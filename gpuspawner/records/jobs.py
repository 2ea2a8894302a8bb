"""Every job as written down: what it runs, where it stands, what it reported.

Jobs outlive the hub: one waiting for the night must still wait after a
restart, and a finished one's record (state, attempts, times, its last
progress and why it ended) is what `gpuspawner job list`, JupyterLab and
the admin page show. While a job holds GPUs, Docker's labels on its container
are the books, as for every server; this record is what only the hub knows.

A table of its own in the usage ledger's SQLite file, with the ledger's crash
safety (each change commits at once; WAL, synchronous=NORMAL: kill -9 of the
hub loses nothing).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core.jobs import FINAL, JobSpec, JobState, server_of
from .sqlite import Table, open_table

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id INTEGER NOT NULL,
    user TEXT NOT NULL,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    submitted REAL NOT NULL,
    started REAL,
    ended REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    preemptions INTEGER NOT NULL DEFAULT 0,
    gpus TEXT NOT NULL DEFAULT '',
    progress TEXT NOT NULL DEFAULT '{}',
    reason TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS jobs_by_user ON jobs (user_id, id);
"""
FINALS = ", ".join(f"'{state.value}'" for state in sorted(FINAL))
ENDED = "COALESCE(ended, submitted)"  # (a job ended under 0.1 may not say when)
TABLE = Table("jobs", SCHEMA)  # version 1: as gpuspawner 0.3 made it

COLUMNS = (
    "id, user_id, user, spec, state, submitted, started, ended, attempts, preemptions, gpus, "
    "progress, reason"
)


@dataclass(frozen=True)
class Job:
    id: int
    user_id: int
    user: str  # their name when they submitted (renames are followed by id)
    spec: JobSpec
    state: JobState
    submitted: float
    started: float | None = None  # its latest attempt's start
    ended: float | None = None
    attempts: int = 0  # runs started, the one under way included
    preemptions: int = 0  # times it gave way
    gpus: tuple[str, ...] = ()  # what its latest attempt held
    progress: Mapping[str, Any] = field(default_factory=dict)  # its runner's latest report
    reason: str = ""  # why it ended, or why it waits again

    @property
    def server(self) -> str:
        return server_of(self.id)

    @property
    def final(self) -> bool:
        return self.state in FINAL

    def but(self, **changes: Any) -> Job:
        return replace(self, **changes)


class JobRecord:
    """The jobs table. Used from the hub's event loop only; each call is one transaction."""

    def __init__(self, path: str | Path) -> None:
        self._db = open_table(path, TABLE)

    def close(self) -> None:
        self._db.close()

    def add(self, user_id: int, user: str, spec: JobSpec, now: float) -> Job:
        cursor = self._db.execute(
            "INSERT INTO jobs (user_id, user, spec, state, submitted) VALUES (?, ?, ?, ?, ?)",
            (user_id, user, json.dumps(spec.as_json()), JobState.WAITING.value, now),
        )
        assert cursor.lastrowid is not None
        return Job(cursor.lastrowid, user_id, user, spec, JobState.WAITING, now)

    def save(self, job: Job) -> None:
        self._db.execute(
            "UPDATE jobs SET state = ?, started = ?, ended = ?, attempts = ?, preemptions = ?, "
            "gpus = ?, progress = ?, reason = ? WHERE id = ?",
            (
                job.state.value,
                job.started,
                job.ended,
                job.attempts,
                job.preemptions,
                ",".join(job.gpus),
                json.dumps(dict(job.progress)),
                job.reason,
                job.id,
            ),
        )

    def get(self, job_id: int) -> Job | None:
        rows = self._select("WHERE id = ?", job_id)
        return rows[0] if rows else None

    def ended_of(self, user_id: int, limit: int, after: Job | None = None) -> list[Job]:
        """A user's ended jobs, the latest ended first (then the newest); `after`: only those
        that come after that ended job of theirs, the cursor of a page. A cursor, not an
        offset: a job that ends while a user pages on does not shift what comes next."""
        where = f"WHERE user_id = ? AND state IN ({FINALS})"
        args: list[Any] = [user_id]
        if after is not None:
            where += f" AND ({ENDED}, id) < (?, ?)"
            args += [after.ended if after.ended is not None else after.submitted, after.id]
        return self._select(f"{where} ORDER BY {ENDED} DESC, id DESC LIMIT ?", *args, limit)

    def unfinished(self) -> list[Job]:
        """Every job not yet ended, oldest first: the hub's working set."""
        return self._select(f"WHERE state NOT IN ({FINALS}) ORDER BY id")

    def recent(self, limit: int = 50) -> list[Job]:
        return self._select("ORDER BY id DESC LIMIT ?", limit)

    def _select(self, where: str, *args: Any) -> list[Job]:
        rows = self._db.execute(f"SELECT {COLUMNS} FROM jobs {where}", args).fetchall()
        return [_job(row) for row in rows]


def _job(row: tuple[Any, ...]) -> Job:
    job_id, user_id, user, spec, state, submitted, started, ended = row[:8]
    attempts, preemptions, gpus, progress, reason = row[8:]
    body = json.loads(spec)
    return Job(
        job_id,
        user_id,
        user,
        JobSpec(
            body["profile"],
            notebook=body.get("notebook"),
            script=body.get("script"),
            args=tuple(body.get("args", ())),
        ),
        JobState(state),
        submitted,
        started,
        ended,
        attempts,
        preemptions,
        tuple(g for g in gpus.split(",") if g),
        json.loads(progress),
        reason,
    )
