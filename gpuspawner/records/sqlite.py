"""How every table of the hub's record is opened: one SQLite file, changes committed as made.

WAL with synchronous=NORMAL: a kill -9 of the hub loses no change (a power cut may lose the
last ones, and ends every server too).
"""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path


def open_table(path: str | Path, schema: str) -> sqlite3.Connection:
    db = sqlite3.connect(Path(path), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(schema)
    return db


def open_read_only(path: Path, table: str) -> sqlite3.Connection:
    """The hub's file at `path` for the admin tools: an existing file (else
    FileNotFoundError), never written, whether or not the hub runs; `table` is read to see
    that it can be."""
    if not path.is_file():
        raise FileNotFoundError(errno.ENOENT, "no usage ledger", str(path))
    uri = path.resolve().as_uri()
    db = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None)
    try:
        db.execute(f"SELECT count(*) FROM {table}").fetchone()
    except sqlite3.OperationalError:  # the hub is down and left no shared-memory file,
        # which a reader who may not write the folder cannot make: nothing changes it now
        db.close()
        db = sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None)
    return db
