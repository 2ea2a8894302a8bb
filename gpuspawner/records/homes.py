"""Where each user's home is, on a swarm whose homes are each node's own.

Docker makes a named volume on the node that runs the task, so a home made on n2 lives on
n2 only. The hub writes down the node each user's home was made on (the node Swarm ran
their first server on, Docker's word) and keeps their servers there (`hub.homes.nodes`). A table
in the usage ledger's SQLite file, committed as it changes, so a restart (a kill -9
included) never sends a user to an empty home.
"""

from __future__ import annotations

from pathlib import Path

from ..core.homes import Home
from .sqlite import Table, open_table

SCHEMA = """
CREATE TABLE IF NOT EXISTS homes (
    user TEXT PRIMARY KEY,
    volume TEXT NOT NULL,
    node TEXT NOT NULL,
    made REAL NOT NULL,
    last_used REAL NOT NULL
);
"""
TABLE = Table("homes", SCHEMA)  # version 1: as gpuspawner 0.3 made it


class HomeRecord:
    """The homes table. Used from the hub's event loop only; each call is one transaction."""

    def __init__(self, path: str | Path) -> None:
        self._db = open_table(path, TABLE)

    def close(self) -> None:
        self._db.close()

    def all(self) -> dict[str, Home]:
        rows = self._db.execute("SELECT user, volume, node, made, last_used FROM homes")
        return {row[0]: Home(*row) for row in rows}

    def save(self, home: Home) -> None:
        self._db.execute(
            "INSERT INTO homes (user, volume, node, made, last_used) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(user) DO UPDATE SET volume = excluded.volume, node = excluded.node, "
            "made = excluded.made, last_used = excluded.last_used",
            (home.user, home.volume, home.node, home.made, home.last_used),
        )
