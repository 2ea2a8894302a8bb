"""A hub upgraded in place reads every record the last release wrote, and loses nothing.

`data/gpuspawner-0.3.sqlite` is the hub's record file as gpuspawner 0.3 (c9b594e) wrote it,
through its own record classes: two grants in the usage ledger (one ended, busy for a while;
one open, parked for a while), one start waiting in line, two jobs (one done with its
progress, one waiting), a booking and a drain on the calendar, and one home on a swarm
node. It was written before the tables carried versions.
"""

import shutil
import sqlite3
from pathlib import Path

import pytest

from gpuspawner.core.errors import GPUConfigError
from gpuspawner.core.jobs import JobState
from gpuspawner.hub.parts import open_ledger
from gpuspawner.records import sqlite as tables
from gpuspawner.records.calendar import CalendarRecord
from gpuspawner.records.homes import HomeRecord
from gpuspawner.records.jobs import JobRecord
from gpuspawner.records.ledger import Ledger
from gpuspawner.records.line import LineRecord

RELEASED = Path(__file__).with_name("data") / "gpuspawner-0.3.sqlite"
T = 1_796_000_000.0  # when that hub made its first record
RECORDS = (Ledger, LineRecord, JobRecord, CalendarRecord, HomeRecord)


@pytest.fixture
def upgraded(tmp_path) -> Path:
    path = tmp_path / "usage.sqlite"
    shutil.copy(RELEASED, path)
    return path


def everything(path: Path) -> dict:
    """All that the records hold, as this gpuspawner reads them."""
    ledger, jobs, calendar, homes = (
        Ledger(path),
        JobRecord(path),
        CalendarRecord(path),
        HomeRecord(path),
    )
    line = LineRecord(path)
    try:
        return {
            "usage": ledger.records(since=0),
            "line": line.take_all(),
            "jobs": jobs.ended_of(10, limit=10) + jobs.unfinished(),
            "calendar": calendar.since(0),
            "homes": homes.all(),
        }
    finally:
        for record in (ledger, jobs, calendar, homes, line):
            record.close()


def test_the_last_releases_records_are_read_whole(upgraded):
    found = everything(upgraded)
    ann, bob = found["usage"]
    assert (ann.user, ann.gpus, ann.start, ann.end, ann.busy_seconds) == (
        "ann",
        2,
        T,
        T + 3600,
        600,
    )
    assert (bob.user, bob.server, bob.end, bob.parked_seconds) == ("bob", "train", None, 540)
    [waiting] = found["line"]
    assert (waiting.user, waiting.asks_for, waiting.arrived) == ("cat", "2 GPUs", T + 100)
    done, queued = found["jobs"]
    assert (done.state, done.attempts, done.preemptions, done.gpus) == (
        JobState.DONE, 2, 1, ("GPU-a",)
    )  # fmt: skip
    assert done.progress["cells"] == {"done": 3, "total": 3} and done.spec.notebook == "train.ipynb"
    assert (queued.state, queued.spec.script, queued.spec.args) == (
        JobState.WAITING, "train.py", ("--epochs", "30")
    )  # fmt: skip
    booking, drain = sorted(found["calendar"], key=lambda w: w.drain)
    assert (booking.group, booking.reason, booking.gpus) == ("ml", "paper deadline", {"GPU-a"})
    assert drain.drain and drain.reason == "driver update" and drain.end == float("inf")
    assert found["homes"]["ann"].node == "n2"


def test_each_table_says_its_version_once_read_and_a_second_opening_changes_nothing(upgraded):
    first = everything(upgraded)
    db = sqlite3.connect(upgraded)
    versions = dict(db.execute("SELECT name, version FROM schema_versions").fetchall())
    db.close()
    assert versions == {"grants": 2, "waiting": 1, "jobs": 1, "calendar": 1, "homes": 1}
    again = everything(upgraded)
    assert again.pop("line") == []  # a restarted hub takes the line it finds, once
    assert again == {k: v for k, v in first.items() if k != "line"}


def test_a_record_written_by_a_newer_gpuspawner_is_refused_not_half_read(upgraded):
    everything(upgraded)
    db = sqlite3.connect(upgraded)
    db.execute("UPDATE schema_versions SET version = 9 WHERE name = 'jobs'")
    db.commit()
    db.close()
    with pytest.raises(tables.NewerRecord, match="its jobs table was written by a newer"):
        JobRecord(upgraded)


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
def test_a_new_file_gets_every_table_at_its_version(tmp_path, record):
    path = tmp_path / "usage.sqlite"
    record(path).close()
    db = sqlite3.connect(path)
    [(name, version)] = db.execute("SELECT name, version FROM schema_versions").fetchall()
    db.close()
    assert version == {"grants": 2}.get(name, 1)


def test_a_hub_meeting_a_newer_record_stops_with_one_line_naming_it(upgraded):
    """Before it serves: every table of the file is upgraded, or refused as newer, at start."""
    everything(upgraded)
    db = sqlite3.connect(upgraded)
    db.execute("UPDATE schema_versions SET version = 9 WHERE name = 'calendar'")
    db.commit()
    db.close()
    with pytest.raises(GPUConfigError, match="its calendar table was written by a newer"):
        open_ledger(str(upgraded))
