"""How every table of the hub's record is opened: one SQLite file, changes committed as made.

WAL with synchronous=NORMAL: a kill -9 of the hub loses no change (a power cut may lose the
last ones, and ends every server too).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path


def open_table(path: str | Path, schema: str) -> sqlite3.Connection:
    db = sqlite3.connect(Path(path), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(schema)
    return db
