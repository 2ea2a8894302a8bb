"""How every table of the hub's record is opened: one SQLite file, changes committed as made,
each table at a version of its own.

WAL with synchronous=NORMAL: a kill -9 of the hub loses no change (a power cut may lose the
last ones, and ends every server too).

Each table says its version (`Table`), written down in the file's `schema_versions` table,
and how a table of each older version becomes the next (`upgrades`), so that a hub upgraded
in place reads every record an older one wrote, and loses none of it. A table that an older
gpuspawner made before versions were written down is version 1. A table written by a newer
gpuspawner than this one is refused (`NewerRecord`): a downgrade must not half-read it.
"""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import GPUConfigError

VERSIONS = "CREATE TABLE IF NOT EXISTS schema_versions (name TEXT PRIMARY KEY, version INTEGER)"
Upgrade = Callable[[sqlite3.Connection], None]


class NewerRecord(GPUConfigError):
    """The file holds a table of a newer layout than this gpuspawner reads: the hub stops
    with one line, as for a setting it cannot use."""


@dataclass(frozen=True)
class Table:
    """One table of the record: its name, its layout now (CREATE … IF NOT EXISTS), its
    version, and for each older version n the step that makes it version n + 1."""

    name: str
    schema: str
    version: int = 1
    upgrades: Mapping[int, Upgrade] = field(default_factory=dict)


def open_table(path: str | Path, table: Table) -> sqlite3.Connection:
    db = sqlite3.connect(Path(path), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    try:
        _upgrade(db, table, path)
    except BaseException:
        db.close()
        raise
    return db


def version_of(db: sqlite3.Connection, name: str) -> int | None:
    """The version the file says its table `name` is; None where it says nothing."""
    db.execute(VERSIONS)
    row = db.execute("SELECT version FROM schema_versions WHERE name = ?", (name,)).fetchone()
    return int(row[0]) if row else None


def columns_of(db: sqlite3.Connection, name: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({name})")}


def _upgrade(db: sqlite3.Connection, table: Table, path: str | Path) -> None:
    with db:  # one transaction: an upgrade is made whole, or not at all
        db.execute("BEGIN IMMEDIATE")
        exists = bool(columns_of(db, table.name))
        found = version_of(db, table.name) or (1 if exists else table.version)
        if found > table.version:
            raise NewerRecord(
                f"{path}: its {table.name} table was written by a newer gpuspawner (version "
                f"{found}; this one reads up to {table.version}): upgrade gpuspawner again, or "
                "restore the file's backup from before the upgrade"
            )
        if exists:
            for version in range(found, table.version):
                table.upgrades[version](db)
        db.execute(
            "INSERT INTO schema_versions (name, version) VALUES (?, ?) "
            "ON CONFLICT(name) DO UPDATE SET version = excluded.version",
            (table.name, table.version),
        )
    db.executescript(table.schema)  # (its tables and indexes IF NOT EXISTS)


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
