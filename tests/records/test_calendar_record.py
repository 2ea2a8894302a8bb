"""Bookings and drains are written down as made, and read back by the next hub."""

import math

from gpuspawner.core.calendar import Window
from gpuspawner.records.calendar import CalendarRecord


def test_windows_outlive_the_hub_that_made_them_and_ended_ones_are_history(tmp_path):
    path = tmp_path / "usage.sqlite"
    record = CalendarRecord(path)
    booked = record.add(Window(0, frozenset({"GPU-1", "GPU-2"}), 100.0, 200.0, group="ml"))
    drained = record.add(Window(0, frozenset({"GPU-3"}), 50.0, reason="driver update", by="admin"))
    gone = record.add(Window(0, frozenset({"GPU-4"}), 300.0, 400.0, user="bob"))
    record.remove(gone.id)
    record.close()

    again = CalendarRecord(path)
    assert again.since(150.0) == [drained, booked]
    assert drained.end == math.inf and booked.id != drained.id
    again.end(drained.id, 160.0)
    assert again.since(170.0) == [booked]
    assert again.since(250.0) == []
