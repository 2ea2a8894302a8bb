"""The usage ledger keeps every grant through restarts and crashes, and nothing forever."""

import sqlite3

import pytest

from gpuspawner.core.pool import Grant, Holder
from gpuspawner.core.units import bare
from gpuspawner.core.usage import UsageRecord, decayed_gpu_hours, gpu_hours_between
from gpuspawner.records.ledger import SCHEMA, Ledger

ANN = Holder(1, 10, "ann", "train")
BOB = Holder(2, 11, "bob")


def grant(holder=ANN, since=1000.0, uuids=("GPU-a", "GPU-b"), group="students"):
    return Grant(holder, tuple(map(bare, uuids)), since, group)


@pytest.fixture
def path(tmp_path):
    return tmp_path / "usage.sqlite"


def test_a_grant_is_recorded_from_start_to_end_with_its_busy_time(path):
    ledger = Ledger(path)
    ledger.opened(grant(), gpus=2)
    ledger.seen(1060, {ANN.spawner_id: True})  # busy for the first minute
    ledger.seen(1120, {ANN.spawner_id: False})  # idle for the second
    ledger.seen(1180, {ANN.spawner_id: None})  # unknown: not counted as busy
    ledger.ended(ANN.spawner_id, 1200)
    [record] = ledger.records(since=0)
    assert record == UsageRecord(10, "ann", "train", "students", 2.0, 1000, 1200, 60)


def test_a_crash_loses_nothing_and_a_restart_goes_on_with_the_same_row(path):
    crashed = Ledger(path)  # never closed: as after kill -9
    crashed.opened(grant(), gpus=2)
    crashed.seen(1300, {ANN.spawner_id: True})
    restarted = Ledger(path)
    restarted.opened(grant(), gpus=2)  # adopted again after the restart: no second row
    restarted.seen(1400, {ANN.spawner_id: True})
    [record] = restarted.records(since=0)
    assert record.end is None and record.busy_seconds == 400


def test_recovery_closes_what_no_longer_runs_when_it_was_last_seen(path):
    ledger = Ledger(path)
    ledger.opened(grant(ANN), gpus=2)
    ledger.opened(grant(BOB, uuids=("GPU-c",), group=None), gpus=1)
    ledger.seen(1500, {})
    closed = Ledger(path).close_all_but(running=[ANN.spawner_id])
    assert [(r.user, r.end) for r in closed] == [("bob", 1500)]
    by_user = {r.user: r for r in ledger.records(since=0)}
    assert by_user["bob"].end == 1500 and by_user["ann"].end is None


def test_retention_drops_only_grants_that_ended_before_it(path):
    ledger = Ledger(path)
    ledger.opened(grant(ANN, since=0), gpus=1)
    ledger.ended(ANN.spawner_id, 100)
    ledger.opened(grant(ANN, since=200), gpus=1)  # the same server, started again
    ledger.opened(grant(BOB, since=50), gpus=1)  # still running since before the cut
    assert ledger.forget_before(150) == 1
    assert sorted((r.user, r.start) for r in ledger.records(since=0)) == [
        ("ann", 200),
        ("bob", 50),
    ]


def test_records_are_those_held_at_any_time_in_the_window(path):
    ledger = Ledger(path)
    ledger.opened(grant(ANN, since=0), gpus=1)
    ledger.ended(ANN.spawner_id, 100)
    ledger.opened(grant(BOB, since=50), gpus=1)
    ledger.ended(BOB.spawner_id, 300)
    assert [r.user for r in ledger.records(since=200)] == ["bob"]
    assert [r.user for r in ledger.records(since=0)] == ["ann", "bob"]


def test_a_grant_adopted_from_its_labels_goes_on_in_its_own_row(path):
    """Container labels keep the start to the millisecond: still the same grant."""
    ledger = Ledger(path)
    ledger.opened(grant(since=1000.123456), gpus=2)
    ledger.seen(1100, {ANN.spawner_id: True})
    restarted = Ledger(path)
    restarted.opened(grant(since=1000.123), gpus=2)
    restarted.ended(ANN.spawner_id, 1200)
    [record] = restarted.records(since=0)
    assert (record.start, record.end) == (1000.123456, 1200)
    assert record.busy_seconds == pytest.approx(100 - 0.123456)


def test_a_grant_one_restart_could_not_adopt_is_counted_once_when_the_next_one_does(path):
    """A restart that did not adopt a running server (its GPU was missing at start) closed
    its row; the next restart finds it running still: the same row goes on, held once."""
    ledger = Ledger(path)
    ledger.opened(grant(since=1000.123456), gpus=2)
    ledger.seen(4600, {})
    ledger.close_all_but(running=[])
    again = Ledger(path)
    again.opened(grant(since=1000.123), gpus=2)
    again.seen(8200, {})
    again.ended(ANN.spawner_id, 8200)
    [record] = again.records(since=0)
    assert (record.start, record.end) == (1000.123456, 8200)


def test_recovery_ends_a_grant_when_docker_says_its_container_stopped(path):
    ledger = Ledger(path)
    ledger.opened(grant(ANN), gpus=2)
    ledger.opened(grant(BOB, uuids=("GPU-c",), group=None), gpus=1)
    ledger.seen(1500, {})
    stopped_at = {ANN.spawner_id: 1700.0, BOB.spawner_id: 900.0}  # bob's: an older container
    closed = Ledger(path).close_all_but(running=[], stopped_at=stopped_at)
    assert sorted((r.user, r.end) for r in closed) == [("ann", 1700), ("bob", 1500)]
    assert sorted((r.user, r.end) for r in ledger.records(since=0)) == [
        ("ann", 1700),
        ("bob", 1500),
    ]


def test_recovery_asks_docker_about_stops_since_the_oldest_last_look_at_an_open_grant(path):
    ledger = Ledger(path)
    assert ledger.last_seen_open() is None  # nothing open: nothing to ask
    ledger.opened(grant(ANN, since=1000), gpus=2)
    ledger.seen(1500, {})
    ledger.opened(grant(BOB, since=1600, uuids=("GPU-c",)), gpus=1)
    assert ledger.last_seen_open() == 1500  # ann's last look; bob's (1600) is later
    ledger.ended(ANN.spawner_id, 1700)
    assert ledger.last_seen_open() == 1600


def test_parked_time_is_held_but_budgets_and_the_line_count_only_resident_time(path):
    ledger = Ledger(path)
    ledger.opened(grant(), gpus=2)
    ledger.seen(1600, {ANN.spawner_id: True})  # ten minutes on its GPUs
    ledger.seen(2200, {ANN.spawner_id: False}, parked=[ANN.spawner_id])  # ten parked
    ledger.ended(ANN.spawner_id, 2200)
    [record] = ledger.records(since=0)
    assert (record.held_seconds(2200), record.parked_seconds) == (1200, 600)
    assert gpu_hours_between([record], since=0, now=2200) == pytest.approx(2 * 600 / 3600)
    assert decayed_gpu_hours([record], 2200, half_life=1e12)[10] == pytest.approx(2 / 6)


def test_a_ledger_of_gpuspawner_0_2_gets_the_parked_column_and_old_readers_read_0(path):
    old = sqlite3.connect(path)
    old.executescript(SCHEMA.replace("    parked_seconds REAL NOT NULL DEFAULT 0,\n", ""))
    old.execute(
        "INSERT INTO grants (spawner_id, user_id, user, server, gpus, start, end, last_seen) "
        "VALUES (1, 10, 'ann', 'train', 1, 1000, 2000, 2000)"
    )
    old.commit()
    old.close()
    assert Ledger(path, read_only=True).records(since=0)[0].parked_seconds == 0  # unchanged
    ledger = Ledger(path)  # the hub's: the column is added, the row kept
    [record] = ledger.records(since=0)
    assert (record.user, record.end, record.parked_seconds) == ("ann", 2000, 0)
