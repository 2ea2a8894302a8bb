"""The calendar's rules: a GPU is never promised twice, a booked GPU serves only its holders
inside its window, and a running server stops for a window unless it may finish."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuspawner.core.calendar import (
    InvalidWindow,
    Window,
    ahead_of,
    check_window,
    choose_gpus,
    closed_to,
    stops_at,
)

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
