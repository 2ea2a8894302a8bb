"""Placement reads the calendar: booked GPUs serve their holders in the window, drained GPUs
nobody, and a GPU a window opens on soon is taken only when no other will do."""

import pytest
from brokers import a_broker

from gpuspawner.config.settings import GPUSettings
from gpuspawner.core.calendar import InvalidWindow
from gpuspawner.core.placement import NotEnoughGPUs
from gpuspawner.core.pool import Holder
from gpuspawner.core.units import Request
from gpuspawner.records.calendar import CalendarRecord

HOUR = 3600.0
ALICE, BOB, CAROL = Holder(1, 10, "alice"), Holder(2, 11, "bob"), Holder(3, 12, "carol")


def broker_at(now, tmp_path, gpus=2):
    groups = {"carol": frozenset({"ml"})}
    return a_broker(
        gpus=gpus,
        clock=lambda: now[0],
        calendar=CalendarRecord(tmp_path / "usage.sqlite"),
        groups_of=lambda user: groups.get(user, frozenset()),
    )


def test_inside_its_window_a_booked_gpu_serves_only_its_holders(tmp_path):
    now = [1000.0]
    broker = broker_at(now, tmp_path)
    gpus = [g.uuid for g in broker.site.gpus]
    booking = broker.calendar.book(gpus, 1, now[0], now[0] + HOUR, group="ml")
    [booked] = booking.gpus

    alice = broker.take_now(ALICE, 1)
    assert alice.uuids != (booked,)
    with pytest.raises(NotEnoughGPUs):
        broker.take_now(BOB, 1)  # the one GPU left is booked for group ml
    assert broker.take_now(CAROL, 1).uuids == (booked,)  # a member starts at once


def test_a_gpu_booked_soon_is_taken_only_when_no_other_will_do(tmp_path):
    now = [1000.0]
    broker = broker_at(now, tmp_path)
    gpus = [g.uuid for g in broker.site.gpus]
    [soon] = broker.calendar.book(gpus, 1, now[0] + HOUR, now[0] + 2 * HOUR, user="carol").gpus

    first = broker.take_now(ALICE, 1, lasts=8 * HOUR)
    assert first.uuids != (soon,)  # steered off the booked GPU
    second = broker.take_now(BOB, 1, lasts=8 * HOUR)
    assert second.uuids == (soon,)  # nothing else was free: it stops when the window opens
    assert broker.calendar.stop_for(second).start == now[0] + HOUR
    assert broker.calendar.stop_for(first) is None


def test_a_drain_keeps_every_start_off_its_gpus_until_it_ends_and_holds_across_restarts(
    tmp_path,
):
    now = [1000.0]
    broker = broker_at(now, tmp_path, gpus=1)
    gpus = [g.uuid for g in broker.site.gpus]
    drain = broker.calendar.drain(gpus, now[0], "driver update", "admin", "all GPUs")
    with pytest.raises(NotEnoughGPUs):
        broker.take_now(CAROL, 1)

    restarted = broker_at(now, tmp_path, gpus=1)  # the next hub reads the drain back
    assert [w.id for w in restarted.calendar.windows()] == [drain.id]
    with pytest.raises(NotEnoughGPUs):
        restarted.take_now(CAROL, 1)
    assert restarted.calendar.end(drain.id).state(now[0]) == "ended"  # not "ahead"
    assert restarted.take_now(CAROL, 1).uuids == tuple(gpus)
    later = restarted.calendar.drain(gpus, now[0] + HOUR, "fan", "admin", "all GPUs")
    assert restarted.calendar.end(later.id).state(now[0]) == "cancelled"


def test_a_booking_beyond_what_the_machine_has_is_refused_and_books_nothing(tmp_path):
    now = [1000.0]
    broker = broker_at(now, tmp_path)
    gpus = [g.uuid for g in broker.site.gpus]
    broker.calendar.book(gpus, 2, now[0], now[0] + HOUR, user="alice")
    with pytest.raises(InvalidWindow, match="Only 0 of the 2 GPUs"):
        broker.calendar.book(gpus, 1, now[0] + 0.5 * HOUR, now[0] + 3 * HOUR, user="bob")
    with pytest.raises(InvalidWindow, match="one user or one group"):
        broker.calendar.book(gpus, 1, now[0] + 2 * HOUR, now[0] + 3 * HOUR)
    assert len(broker.calendar.windows()) == 1


def test_a_holder_in_their_window_takes_their_booked_gpus_first(tmp_path):
    now = [1000.0]
    broker = broker_at(now, tmp_path, gpus=3)
    gpus = [g.uuid for g in broker.site.gpus]
    [booked] = broker.calendar.book(gpus[1:], 1, now[0], now[0] + HOUR, user="carol").gpus
    assert broker.take_now(CAROL, 1).uuids == (booked,)  # others stay free for others
    assert booked not in broker.take_now(ALICE, 2).uuids


def test_a_drain_of_a_mig_gpu_closes_its_instances(tmp_path):
    now = [1000.0]
    broker = a_broker(
        GPUSettings(simulated_host=[{"mig": ["3g.40gb", "3g.40gb"]}]),
        clock=lambda: now[0],
        calendar=CalendarRecord(tmp_path / "usage.sqlite"),
    )
    [gpu] = broker.site.gpus
    running = broker.take_now(ALICE, Request(mig_profile="3g.40gb"))
    broker.calendar.drain([gpu.uuid], now[0], "driver update", "admin", "all GPUs")
    with pytest.raises(NotEnoughGPUs):
        broker.take_now(BOB, Request(mig_profile="3g.40gb"))
    assert broker.calendar.stop_for(running).reason == "driver update"


def test_a_start_that_allows_turns_takes_a_free_gpu_booked_later_rather_than_share(tmp_path):
    now = [1000.0]
    broker = broker_at(now, tmp_path)
    gpus = [g.uuid for g in broker.site.gpus]
    alice = broker.take_now(ALICE, Request(1, turns=True))
    free = [g for g in gpus if g not in alice.uuids]
    month = now[0] + 30 * 24 * HOUR
    [later] = broker.calendar.book(free, 1, month, month + HOUR, user="carol").gpus
    bob = broker.take_now(BOB, Request(1, turns=True))
    assert bob.uuids == (later,) and not bob.parked  # not parked in turns on alice's GPU


def test_a_members_bookings_together_stay_within_max_booking_and_an_admins_do_not(tmp_path):
    """The attack run's twenty back-to-back windows of 48 h: the second is refused."""
    now = [1000.0]
    broker = broker_at(now, tmp_path)
    gpus = [g.uuid for g in broker.site.gpus]
    longest, day = 48 * HOUR, 24 * HOUR

    def own(start, end):
        return broker.calendar.book(gpus, 1, start, end, user="dave", longest=longest, by="dave")

    own(now[0], now[0] + longest)
    with pytest.raises(InvalidWindow, match=r"already cover 48 h 0 min .* allows 48 h 0 min"):
        own(now[0] + longest, now[0] + 2 * longest)
    assert len(broker.calendar.windows()) == 1  # nothing booked
    admins = broker.calendar.book(
        gpus, 1, now[0] + 3 * day, now[0] + 6 * day, user="dave", by="root"
    )
    assert admins.end - admins.start > longest  # an admin's booking is bound by neither
    now[0] += day  # half of it is past: a day may be booked again, then no more
    own(now[0] + 9 * day, now[0] + 10 * day)
    with pytest.raises(InvalidWindow, match="max_booking"):
        own(now[0] + 11 * day, now[0] + 11 * day + HOUR)
