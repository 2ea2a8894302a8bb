"""The usage ledger: every grant, from its start to its end, and how busy its GPUs were.

One SQLite file (the standard library's sqlite3, beside the hub's own
database). Each change is committed as it happens, so a hub killed with
`kill -9` loses nothing: a grant still open when the hub comes back is either
adopted again (its server still runs: the same row goes on) or closed by
recovery at the last moment the hub saw it held. The monitor marks each open
grant seen, and busy or not, every tick. Closed grants older than the
retention are dropped, so the file stays small.

The queue orders people by their recent use from here, budgets count their
GPU-hours from here, and `gpuspawner usage` reports from here.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from ..core.pool import Grant
from ..core.usage import UsageRecord
from .sqlite import Table, columns_of, open_read_only, open_table

SCHEMA = """
CREATE TABLE IF NOT EXISTS grants (
    spawner_id INTEGER NOT NULL,
    user_id INTEGER NOT NULL,
    user TEXT NOT NULL,
    server TEXT NOT NULL,
    quota_group TEXT,
    gpus REAL NOT NULL,
    start REAL NOT NULL,
    end REAL,
    last_seen REAL NOT NULL,
    busy_seconds REAL NOT NULL DEFAULT 0,
    parked_seconds REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (spawner_id, start)
);
CREATE INDEX IF NOT EXISTS grants_by_end ON grants (end);
"""
COLUMNS = "user_id, user, server, quota_group, gpus, start, end, busy_seconds, parked_seconds"


def _add_parked_seconds(db: sqlite3.Connection) -> None:
    """Version 1 (gpuspawner 0.2) had no parked time; a read-only reader of such a file
    reads 0. (0.3 added the column without writing versions down: it may be there.)"""
    if "parked_seconds" not in columns_of(db, "grants"):
        db.execute("ALTER TABLE grants ADD COLUMN parked_seconds REAL NOT NULL DEFAULT 0")


TABLE = Table("grants", SCHEMA, 2, {1: _add_parked_seconds})
SAME_START = 1.0  # seconds: container labels keep a grant's start to the millisecond


class Ledger:
    """The ledger file. Used from the hub's event loop only; each call is one transaction."""

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        """The hub's ledger at `path`, made if missing; `read_only`, for the admin tools: an
        existing file (else FileNotFoundError), never written, whether or not the hub runs."""
        self.path = Path(path)
        if read_only:
            self._db = open_read_only(self.path, "grants")
            return
        self._db = open_table(self.path, TABLE)

    def close(self) -> None:
        self._db.close()

    def opened(self, grant: Grant, gpus: float) -> None:
        """A grant began, or after a restart goes on: one row per server and start.

        An adopted grant's start is read back from its container's labels, to the
        millisecond, so the row of the same server and (within a second) the same start
        is that grant's: it goes on, open again if a restart that could not adopt it had
        closed it. An open row of another start is a grant that ended unseen.
        """
        holder = grant.holder
        with self._db:
            self._db.execute("BEGIN")
            rows = self._db.execute(
                "SELECT start FROM grants WHERE spawner_id = ? AND start BETWEEN ? AND ?",
                (holder.spawner_id, grant.since - SAME_START, grant.since + SAME_START),
            ).fetchall()
            self._db.execute(
                "UPDATE grants SET end = last_seen WHERE spawner_id = ? AND end IS NULL "
                "AND start NOT BETWEEN ? AND ?",
                (holder.spawner_id, grant.since - SAME_START, grant.since + SAME_START),
            )
            if rows:
                self._db.execute(
                    "UPDATE grants SET end = NULL WHERE spawner_id = ? AND start = ?",
                    (holder.spawner_id, rows[0][0]),
                )
                return
            self._db.execute(
                "INSERT OR IGNORE INTO grants "
                "(spawner_id, user_id, user, server, quota_group, gpus, start, last_seen) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    holder.spawner_id,
                    holder.user_id,
                    holder.user,
                    holder.server,
                    grant.quota_group,
                    gpus,
                    grant.since,
                    grant.since,
                ),
            )

    def ended(self, spawner_id: int, at: float) -> None:
        """A grant's GPUs went back to the pool at `at`."""
        self._db.execute(
            "UPDATE grants SET end = ?, last_seen = ? WHERE spawner_id = ? AND end IS NULL",
            (at, at, spawner_id),
        )

    def seen(self, now: float, busy: Mapping[int, bool | None], parked: Iterable[int] = ()) -> None:
        """A monitor tick: every open grant held until `now`; the time since its last tick
        counts as busy where its GPUs were busy now (unknown counts as not busy), and as
        parked where its work is parked now."""
        with self._db:
            self._db.execute("BEGIN")
            busy_keys = [key for key, is_busy in busy.items() if is_busy]
            self._db.executemany(
                "UPDATE grants SET busy_seconds = busy_seconds + max(0, ? - last_seen) "
                "WHERE spawner_id = ? AND end IS NULL",
                [(now, key) for key in busy_keys],
            )
            self._db.executemany(
                "UPDATE grants SET parked_seconds = parked_seconds + max(0, ? - last_seen) "
                "WHERE spawner_id = ? AND end IS NULL",
                [(now, key) for key in parked],
            )
            self._db.execute("UPDATE grants SET last_seen = ? WHERE end IS NULL", (now,))

    def close_all_but(
        self, running: Iterable[int], stopped_at: Mapping[int, float] | None = None
    ) -> list[UsageRecord]:
        """At hub start: grants whose server no longer runs end when Docker says its container
        stopped (`stopped_at`, by server), else when the hub last saw them. Returns them, as
        closed."""
        keep, stopped_at = set(running), stopped_at or {}
        with self._db:
            self._db.execute("BEGIN")
            rows = self._db.execute(
                f"SELECT spawner_id, {COLUMNS}, last_seen FROM grants WHERE end IS NULL"
            ).fetchall()
            gone = []
            for key, *columns, last_seen in rows:
                if key in keep:
                    continue
                found = UsageRecord(*columns)
                end = stopped_at.get(key, last_seen)
                end = end if end >= found.start else last_seen  # a stop before it began
                record = replace(found, end=end)
                gone.append((key, record))
            self._db.executemany(
                "UPDATE grants SET end = ?, last_seen = ? WHERE spawner_id = ? AND end IS NULL",
                [(record.end, record.end, key) for key, record in gone],
            )
        return [record for _, record in gone]

    def last_seen_open(self) -> float | None:
        """The earliest moment an open grant was last seen: since when, at hub start, grants
        may have ended unseen. None when no grant is open."""
        query = "SELECT min(last_seen) FROM grants WHERE end IS NULL"
        (found,) = self._db.execute(query).fetchone()
        return None if found is None else float(found)

    def records(self, since: float) -> list[UsageRecord]:
        """Every grant held at any time since `since` (open ones included)."""
        return self._select("end IS NULL OR end >= ?", (since,))

    def forget_before(self, moment: float) -> int:
        """Drop grants that ended before `moment` (the retention); how many went."""
        return self._db.execute("DELETE FROM grants WHERE end < ?", (moment,)).rowcount

    def _select(self, where: str, params: tuple[object, ...]) -> list[UsageRecord]:
        have = columns_of(self._db, "grants")
        columns = ", ".join(c if c in have else "0" for c in COLUMNS.split(", "))
        rows = self._db.execute(
            f"SELECT {columns} FROM grants WHERE {where} ORDER BY start", params
        ).fetchall()
        return [UsageRecord(*row) for row in rows]
