"""The waiting line as written down: who waited for what when the hub last ran.

JupyterHub forgets pending spawns when it restarts, and with them everyone's
place in line: a restarted hub cannot give a place back, since the person may
have gone, given up or started something else. What it can do is tell each of
them, on their next spawn page, that their start ended and why. So each
entry is written here as it joins and deleted as it leaves, and a hub that
starts reads what is left (the line of a hub that ended while people waited)
and clears it.

A table of its own in the usage ledger's SQLite file: one file for the admin to
keep, and the same crash safety (each change commits at once; WAL with
synchronous=NORMAL survives kill -9 of the hub, not a power cut, which also
ends every spawn).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .sqlite import Table, open_table

SCHEMA = """
CREATE TABLE IF NOT EXISTS waiting (
    spawner_id INTEGER PRIMARY KEY,
    user_id INTEGER NOT NULL,
    user TEXT NOT NULL,
    server TEXT NOT NULL,
    profile TEXT NOT NULL,
    asks_for TEXT NOT NULL,
    arrived REAL NOT NULL
);
"""
TABLE = Table("waiting", SCHEMA)  # version 1: as gpuspawner 0.3 made it

COLUMNS = "spawner_id, user_id, user, server, profile, asks_for, arrived"


@dataclass(frozen=True)
class Waited:
    """One entry of the line: a server's start, the profile (display name) it asked for."""

    spawner_id: int
    user_id: int
    user: str
    server: str
    profile: str
    asks_for: str  # the request in words: "2 GPUs", "a MIG instance 1g.10gb"
    arrived: float


class LineRecord:
    """The line's table. Used from the hub's event loop only; each call is one transaction."""

    def __init__(self, path: str | Path) -> None:
        self._db = open_table(path, TABLE)

    def close(self) -> None:
        self._db.close()

    def joined(self, entry: Waited) -> None:
        self._db.execute(
            f"INSERT OR REPLACE INTO waiting ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                entry.spawner_id,
                entry.user_id,
                entry.user,
                entry.server,
                entry.profile,
                entry.asks_for,
                entry.arrived,
            ),
        )

    def left(self, spawner_id: int) -> None:
        self._db.execute("DELETE FROM waiting WHERE spawner_id = ?", (spawner_id,))

    def take_all(self) -> list[Waited]:
        """Every entry left (the line of a hub that ended), oldest first; the table is emptied."""
        with self._db:
            self._db.execute("BEGIN")
            rows = self._db.execute(f"SELECT {COLUMNS} FROM waiting ORDER BY arrived").fetchall()
            self._db.execute("DELETE FROM waiting")
        return [Waited(*row) for row in rows]
