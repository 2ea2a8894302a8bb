"""The calendar as written down: every booking and drain, so that they outlive the hub.

A booking made on Monday for Thursday must hold after any restart (a kill -9 included), and
a drain set for 18:00 must still take the GPUs out at 18:00. A table of its own in the usage
ledger's SQLite file, with the ledger's crash safety (each change commits at once).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core.calendar import Window
from .sqlite import Table, open_read_only, open_table

SCHEMA = """
CREATE TABLE IF NOT EXISTS calendar (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    gpus TEXT NOT NULL,
    start REAL NOT NULL,
    end REAL,
    user TEXT NOT NULL DEFAULT '',
    grp TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL DEFAULT '',
    let_finish INTEGER NOT NULL DEFAULT 0,
    made_by TEXT NOT NULL DEFAULT '',
    asked TEXT NOT NULL DEFAULT ''
);
"""
TABLE = Table("calendar", SCHEMA)  # version 1: as gpuspawner 0.3 made it

COLUMNS = "id, gpus, start, end, user, grp, reason, let_finish, made_by, asked"


class CalendarRecord:
    """The calendar table. Used from the hub's event loop only; each call is one transaction."""

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        """The calendar in the ledger's file at `path`, made if missing; `read_only`, for the
        admin tools (`gpuspawner status` shows drains): an existing file, never written."""
        self._db = open_read_only(Path(path), "calendar") if read_only else open_table(path, TABLE)

    def close(self) -> None:
        self._db.close()

    def add(self, window: Window) -> Window:
        """Write a new window down; it is returned with its id."""
        cursor = self._db.execute(
            f"INSERT INTO calendar ({COLUMNS.removeprefix('id, ')}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                json.dumps(sorted(window.gpus)),
                window.start,
                None if window.end == math.inf else window.end,
                window.user,
                window.group,
                window.reason,
                int(window.let_finish),
                window.by,
                window.asked,
            ),
        )
        assert cursor.lastrowid is not None
        return replace(window, id=cursor.lastrowid)

    def end(self, window_id: int, at: float) -> None:
        """It ends at `at` (an undrain, a booking given back early)."""
        self._db.execute("UPDATE calendar SET end = ? WHERE id = ?", (at, window_id))

    def remove(self, window_id: int) -> None:
        """A window that never opened, cancelled."""
        self._db.execute("DELETE FROM calendar WHERE id = ?", (window_id,))

    def since(self, moment: float) -> list[Window]:
        """Every window that ends after `moment` (those before it are history)."""
        rows = self._db.execute(
            f"SELECT {COLUMNS} FROM calendar WHERE end IS NULL OR end > ? ORDER BY start, id",
            (moment,),
        )
        return [_window(row) for row in rows]


def _window(row: tuple[Any, ...]) -> Window:
    wid, gpus, start, end, user, group, reason, let_finish, by, asked = row
    return Window(
        wid,
        frozenset(json.loads(gpus)),
        start,
        math.inf if end is None else end,
        user,
        group,
        reason,
        bool(let_finish),
        by,
        asked,
    )
