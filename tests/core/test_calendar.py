"""The calendar's rules: a GPU is never promised twice, a booked GPU serves only its holders
inside its window, and a running server stops for a window unless it may finish."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuspawner.core.calendar import (
    MOST_OWN_BOOKINGS,
    InvalidWindow,
    Window,
    ahead_of,
    check_own_bookings,
    check_window,
    choose_gpus,
    closed_to,
    drained_now,
    stops_at,
    with_drains,
)
from gpuspawner.core.pool import DeviceState
from gpuspawner.core.units import whole
from gpuspawner.devices.simulated import SimulatedSource

GPUS = [f"GPU-{i}" for i in range(4)]
HOUR = 3600.0
asks = st.lists(
    st.tuples(
        st.integers(1, 5),  # GPUs asked
        st.integers(0, 20),  # start, in hours
        st.integers(1, 10),  # length, in hours
        st.sampled_from(["alice", "bob", ""]),
    ),
    max_size=25,
)


def book_all(asked) -> list[Window]:
    windows: list[Window] = []
    for n, (count, start, length, user) in enumerate(asked):
        begin, end = start * HOUR, (start + length) * HOUR
        try:
            gpus = choose_gpus(windows, GPUS, count, begin, end)
        except InvalidWindow:
            continue
        windows.append(
            Window(n, frozenset(gpus), begin, end, user=user, group="" if user else "ml")
        )
    return windows


@given(asks)
def test_never_more_gpus_are_booked_than_exist_at_any_instant(asked):
    windows = book_all(asked)
    for moment in {w.start for w in windows}:
        open_now = [w for w in windows if w.open_at(moment)]
        held = [g for w in open_now for g in w.gpus]
        assert len(held) == len(set(held)) <= len(GPUS)


@given(asks, st.integers(0, 30))
def test_a_booked_gpu_is_closed_to_everyone_but_its_holders_inside_its_window(asked, hour):
    windows, now = book_all(asked), hour * HOUR
    for window in windows:
        if not window.open_at(now):
            continue
        for user, groups in (("alice", ()), ("bob", ()), ("carol", ("ml",))):
            closed = closed_to(windows, user, groups, now)
            if window.serves(user, groups):
                assert not window.gpus & closed.keys()
            else:
                assert window.gpus <= closed.keys()


@given(asks, st.integers(0, 30), st.integers(1, 12))
def test_what_a_start_is_steered_off_never_opens_after_it_would_end(asked, hour, lasts):
    """Backfill: a start that avoids `ahead_of` never runs into a window by its max_age."""
    windows, now = book_all(asked), hour * HOUR
    until = now + lasts * HOUR
    ahead = ahead_of(windows, "dave", (), now, until)
    usable = set(GPUS) - closed_to(windows, "dave", (), now).keys() - ahead.keys()
    for gpu in usable:
        stop = stops_at(windows, [gpu], "dave", (), now, now)
        assert stop is None or stop.start >= until


def test_a_booking_that_does_not_fit_says_how_many_gpus_are_left():
    first = Window(1, frozenset(GPUS[:3]), 0, 10 * HOUR, user="alice")
    with pytest.raises(InvalidWindow, match="Only 1 of the 4 GPUs"):
        choose_gpus([first], GPUS, 2, 5 * HOUR, 6 * HOUR)
    assert choose_gpus([first], GPUS, 3, 10 * HOUR, 11 * HOUR) == tuple(GPUS[:3])


@pytest.mark.parametrize(
    ("start", "end", "longest", "says"),
    [
        (2 * HOUR, HOUR, None, "ends before it starts"),
        (-HOUR, HOUR, None, "starts in the past"),
        (HOUR, 60 * HOUR, 48 * HOUR, "long; your group allows .* \\(max_booking\\)"),
        (400 * 24 * HOUR, 401 * 24 * HOUR, None, "starts within a year"),
    ],
)
def test_windows_that_cannot_be_booked_are_refused_with_the_reason(start, end, longest, says):
    with pytest.raises(InvalidWindow, match=says):
        check_window(start, end, 0.0, longest)


def test_a_server_stops_when_a_window_opens_unless_the_booking_lets_it_finish():
    booked = Window(1, frozenset(GPUS[:1]), 10 * HOUR, 20 * HOUR, user="alice")
    running_since = 5 * HOUR
    assert stops_at([booked], GPUS[:1], "bob", (), running_since, 6 * HOUR) == booked
    assert stops_at([booked], GPUS[:1], "alice", (), running_since, 6 * HOUR) is None
    finishing = Window(2, booked.gpus, booked.start, booked.end, user="alice", let_finish=True)
    assert stops_at([finishing], GPUS[:1], "bob", (), running_since, 11 * HOUR) is None
    drain = Window(3, frozenset(GPUS), 10 * HOUR, math.inf, reason="driver update")
    assert stops_at([drain], GPUS[:1], "alice", (), running_since, 11 * HOUR) == drain
    assert "maintenance (driver update)" in drain.title()


def hours(*spans: tuple[float, float]) -> list[Window]:
    """A member's bookings, [start, end) in hours."""
    return [
        Window(n, frozenset(GPUS[:1]), a * HOUR, b * HOUR, user="dave")
        for n, (a, b) in enumerate(spans)
    ]


@pytest.mark.parametrize(
    ("own", "asked", "now", "says"),
    [
        # max_booking is 48 h; the hours count from `now` on
        ([], (0, 48), 0, None),
        (hours((0, 48)), (48, 96), 0, "already cover 48 h 0 min from now.*give one back first"),
        (hours((0, 40)), (100, 110), 0, "already cover 40 h 0 min.*make it 50 h 0 min"),
        (hours((0, 40)), (100, 108), 0, None),  # exactly 48 h in all
        (hours((0, 40), (20, 44)), (100, 104), 0, None),  # overlapping hours count once
        (hours((0, 40)), (30, 48), 0, None),  # 0 to 48 covered: within the bound
        (hours((0, 40)), (50, 60), 10, None),  # the 10 h already past do not count
        (hours((0, 10), (10, 20)), (200, 230), 20, None),  # both ended at 20 h
        (hours(*((i, i + 1) for i in range(MOST_OWN_BOOKINGS))), (90, 91), 0, "hold 20 bookings"),
    ],
)
def test_all_of_a_members_own_bookings_together_are_bound_by_max_booking(own, asked, now, says):
    """Twenty back-to-back windows of the longest each were booked in the attack run."""
    start, end = asked[0] * HOUR, asked[1] * HOUR
    if says is None:
        check_own_bookings(own, start, end, now * HOUR, 48 * HOUR)
    else:
        with pytest.raises(InvalidWindow, match=says):
            check_own_bookings(own, start, end, now * HOUR, 48 * HOUR)


@given(st.lists(st.tuples(st.integers(0, 200), st.integers(1, 60)), max_size=30))
def test_what_a_member_books_one_by_one_never_covers_more_than_max_booking(asked):
    longest, held = 48 * HOUR, []
    for n, (start, length) in enumerate(asked):
        begin, end = start * HOUR, (start + length) * HOUR
        try:
            check_own_bookings(held, begin, end, 0.0, longest)
        except InvalidWindow:
            continue
        held.append(Window(n, frozenset(GPUS[:1]), begin, end, user="dave"))
    covered = {h for w in held for h in range(int(w.start // HOUR), int(w.end // HOUR))}
    assert len(covered) * HOUR <= longest and len(held) <= MOST_OWN_BOOKINGS


@pytest.mark.parametrize(
    ("start", "end", "now", "state"),
    [
        (HOUR, 2 * HOUR, 0, "ahead"),
        (0, 2 * HOUR, HOUR, "open"),
        (0, math.inf, HOUR, "open"),  # a drain not ended
        (0, HOUR, HOUR, "ended"),  # ended now (undrain): not "ahead"
        (HOUR, HOUR, HOUR, "ended"),  # ended as it opened
        (2 * HOUR, 2 * HOUR, HOUR, "cancelled"),  # given back before it opened
    ],
)
def test_a_window_says_whether_it_is_ahead_open_ended_or_cancelled(start, end, now, state):
    assert Window(1, frozenset(GPUS), start, end).state(now) == state


@pytest.mark.parametrize(
    ("state", "on_drained", "shown"),
    [
        (DeviceState.FREE, True, DeviceState.DRAINED),  # placement gives it to nobody
        (DeviceState.FREE, False, DeviceState.FREE),
        (DeviceState.ALLOCATED, True, DeviceState.ALLOCATED),  # held until its server stops
        (DeviceState.STOPPING, True, DeviceState.STOPPING),
        (DeviceState.UNHEALTHY, True, DeviceState.UNHEALTHY),
        (DeviceState.EXTERNAL, True, DeviceState.EXTERNAL),
    ],
)
def test_a_free_unit_on_a_drained_gpu_is_shown_drained(state, on_drained, shown):
    [unit] = [whole(g) for g in SimulatedSource(1).list_gpus()]
    drained = {unit.gpu} if on_drained else set()
    assert with_drains({unit.id: state}, [unit], drained) == {unit.id: shown}


def test_only_drains_open_now_drain_gpus():
    drain = Window(1, frozenset(GPUS[:2]), 10 * HOUR, reason="driver update")
    later = Window(2, frozenset(GPUS[1:3]), 20 * HOUR, reason="fans")
    booked = Window(3, frozenset(GPUS[3:]), 0, 30 * HOUR, user="alice")
    windows = [later, drain, booked]
    assert drained_now(windows, 5 * HOUR) == {}
    assert drained_now(windows, 10 * HOUR) == {GPUS[0]: drain, GPUS[1]: drain}
    assert drained_now(windows, 25 * HOUR) == {GPUS[0]: drain, GPUS[1]: drain, GPUS[2]: later}
