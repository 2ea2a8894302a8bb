"""The waiting line's order and its two promises: nobody starves, no GPU idles for nothing."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuspawner.core.line import LinePass, Outcome, Waiting, in_order, starting_now
from gpuspawner.core.usage import HOUR, UsageRecord, decayed_gpu_hours

DAY = 24 * HOUR


def waiting(key, gpus=1, arrived=0.0, priority=0, user_id=None, group="g", patient=True):
    user = key if user_id is None else user_id
    return Waiting(key, user, group, priority, gpus, arrived, patient)


def starts(line, fits, now, **policy):
    return [w.key for w in starting_now(line, fits, now, **policy).starting]


@pytest.mark.parametrize(
    ("line", "recent", "expected"),
    [
        # arrival decides between equals
        ([waiting(1, arrived=5), waiting(2, arrived=3)], {}, [2, 1]),
        # who used less recently goes first
        ([waiting(1, arrived=0), waiting(2, arrived=9)], {1: 40.0, 2: 2.0}, [2, 1]),
        # priority beats recent use
        ([waiting(1, priority=0), waiting(2, priority=5)], {2: 500.0}, [2, 1]),
        # a user who never used a GPU goes before one who did
        ([waiting(1, arrived=0), waiting(2, arrived=1)], {1: 0.5}, [2, 1]),
    ],
)
def test_order(line, recent, expected):
    assert [w.key for w in in_order(line, recent)] == expected


def capacity(free: int):
    """`fits` for a pool with `free` GPUs (placement always finds n free GPUs)."""
    return lambda w, starting: w.weight + sum(s.weight for s in starting) <= free


@pytest.mark.parametrize(
    ("free", "now", "line", "starts_now"),
    [
        # backfill: the 4-GPU head does not fit yet, the 1-GPU request behind it starts
        (2, 60, [waiting(1, 4), waiting(2, 1)], [2]),
        # the head has waited its 10 minutes: nothing behind it takes what frees up
        (2, 600, [waiting(1, 4), waiting(2, 1)], []),
        # everyone who fits, in order
        (3, 0, [waiting(1, 1), waiting(2, 2), waiting(3, 1)], [1, 2]),
        # the head fits and starts; the next one, over its wait, then reserves
        (2, 900, [waiting(1, 1), waiting(2, 4), waiting(3, 1)], [1]),
        # a CPU-sized request (0 GPUs) always fits
        (0, 0, [waiting(1, 0)], [1]),
        # a newcomer sorted ahead of a long waiter does not switch its reservation off
        (2, 600, [waiting(1, 4, arrived=590), waiting(2, 4), waiting(3, 1)], []),
        # a start that may not wait never reserves, however long the policy's wait
        (2, 600, [waiting(1, 4, patient=False), waiting(2, 1)], [2]),
    ],
)
def test_who_starts_now(free, now, line, starts_now):
    assert starts(line, capacity(free), now) == starts_now


def test_recent_use_decays_with_its_half_life():
    week = 7 * DAY
    record = UsageRecord(1, "ann", "", None, gpus=2, start=0, end=10 * HOUR)
    now_used = decayed_gpu_hours([record], now=10 * HOUR, half_life=week)[1]
    week_later = decayed_gpu_hours([record], now=10 * HOUR + week, half_life=week)[1]
    # 20 GPU-hours, each weighted by its age: between the weight of the oldest and 1
    assert 20 * 2 ** (-10 * HOUR / week) < now_used < 20
    assert week_later == pytest.approx(now_used / 2)
    still_running = UsageRecord(1, "ann", "", None, gpus=1, start=0)
    assert decayed_gpu_hours([still_running], now=HOUR)[1] == pytest.approx(1.0, rel=5e-3)


def simulate(total: int, big: int, stream: list[tuple[float, float]], reserve_after: float):
    """A pool of `total` GPUs; a `big`-GPU request at time 0 behind a stream of 1-GPU
    requests (arrival, duration); a step each minute. When the big one started (or None),
    and every minute a GPU sat free while a request that fits it was waiting, unreserved."""
    running: list[tuple[float, float]] = []  # (end, gpus)
    line = [waiting(0, big, arrived=0.0)]
    arrivals = sorted(stream)
    started_big, idle_while_waiting = None, []
    for minute in range(0, 24 * 60):
        now = minute * 60.0
        running = [(end, gpus) for end, gpus in running if end > now]
        while arrivals and arrivals[0][0] <= now:
            arrived, duration = arrivals.pop(0)
            line.append(waiting(len(line) + 1000, 1, arrived=arrived, user_id=-int(duration)))
        free = total - sum(gpus for _, gpus in running)
        ordered = in_order(line, {})
        chosen = starting_now(ordered, capacity(free), now, reserve_after)
        for start in chosen.starting:
            line.remove(start)
            duration = 600.0 if start.key == 0 else float(-start.user_id)
            running.append((now + duration, start.weight))
            if start.key == 0:
                started_big = now
        free = total - sum(gpus for _, gpus in running)
        if not chosen.held_for and any(w.weight <= free for w in line):
            idle_while_waiting.append(now)
        if started_big is not None and not line:
            break
    return started_big, idle_while_waiting


@settings(max_examples=60, deadline=None)
@given(
    durations=st.lists(st.integers(5, 60), min_size=30, max_size=120),
    gap=st.integers(1, 6),
)
def test_a_big_request_never_starves_and_no_gpu_idles_for_nothing(durations, gap):
    """8 GPUs, a 4-GPU request, and a steady stream of 1-GPU requests that alone would
    keep every GPU busy: the 4-GPU one starts within its reservation wait plus the longest
    session, and until then no GPU sits free while a request it fits waits unreserved."""
    stream = [(i * gap * 60.0, d * 60.0) for i, d in enumerate(durations)]
    reserve_after = 10 * 60.0
    started, idle = simulate(8, 4, stream, reserve_after)
    assert started is not None
    assert started <= reserve_after + max(durations) * 60.0 + 60.0
    assert idle == []


def capacity_with_quota(free: int, held: set[int]):
    """`fits` for a pool with `free` GPUs where the requests in `held` are over their quota."""
    fits = capacity(free)
    return lambda w, starting: Outcome.HELD if w.key in held else fits(w, starting)


@pytest.mark.parametrize(
    ("free", "now", "line", "held", "starts_now"),
    [
        # a quota-held head that has waited long reserves nothing: the one behind it starts
        (2, 900, [waiting(1, 1), waiting(2, 1)], {1}, [2]),
        # behind a held one, a capacity-short head still reserves what frees up
        (1, 900, [waiting(1, 1), waiting(2, 4), waiting(3, 1)], {1}, []),
        # held ones never start, however much is free
        (4, 0, [waiting(1, 1), waiting(2, 2)], {1, 2}, []),
    ],
)
def test_a_request_over_its_groups_quota_is_passed_over(free, now, line, held, starts_now):
    assert starts(line, capacity_with_quota(free, held), now) == starts_now


@settings(max_examples=200, deadline=None)
@given(
    requests=st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 1200), st.booleans()), min_size=1, max_size=12
    ),
    free=st.integers(0, 8),
    now=st.integers(0, 1800),
)
def test_held_requests_change_nothing_for_the_others(requests, free, now):
    """Whatever waits over its quota, the rest of the line starts exactly as if it were not there:
    a quota can never make GPUs gather for nobody."""
    line = [waiting(i, gpus, arrived=arrived) for i, (gpus, arrived, _) in enumerate(requests)]
    held = {i for i, (_, _, is_held) in enumerate(requests) if is_held}
    ordered = in_order(line, {})
    with_held = starts(ordered, capacity_with_quota(free, held), now)
    without = starts([w for w in ordered if w.key not in held], capacity(free), now)
    assert with_held == without


def test_a_reservation_holds_back_only_what_competes_with_it():
    """Odd keys ask for MIG instances, even keys for whole GPUs (one unit of each is free):
    a MIG head that has waited long keeps MIG instances for itself, not whole GPUs."""
    free = {"mig": 1, "gpu": 1}
    kind = {1: "mig", 2: "gpu", 3: "mig", 4: "gpu"}

    def fits(w, starting):
        taken = sum(s.weight for s in starting if kind[s.key] == kind[w.key])
        return w.weight + taken <= free[kind[w.key]]

    line = [waiting(1, 2), waiting(2, 1), waiting(3, 1), waiting(4, 1)]
    same_kind = lambda a, b: kind[a.key] == kind[b.key]  # noqa: E731
    chosen = starting_now(line, fits, 600, competes=same_kind)
    assert [w.key for w in chosen.starting] == [2]  # the whole GPU goes; MIG 3 waits behind 1
    assert [w.key for w in chosen.held_for] == [1, 4]  # 4 keeps the next whole GPU
    # where everything competes (one kind of unit), nothing behind the head starts
    assert starts(line, fits, 600) == []


def test_behind_a_reservation_a_request_may_start_on_units_its_head_could_not_use():
    """The head (key 1) waits for 2 H100s, one free; an L40S is free too. A plain 1-GPU
    request behind it may take the L40S, never the H100 that gathers for the head."""
    free = {"H100": 1, "L40S": 1}
    wants = {1: {"H100"}, 2: {"H100", "L40S"}, 3: {"H100"}}
    taken: dict[str, int] = {}

    def fits_on(w, models):
        for model in sorted(models):
            if free[model] - taken.get(model, 0) >= w.weight:
                taken[model] = taken.get(model, 0) + w.weight
                return True
        return False

    def fits_apart(w, starting, heads):
        return fits_on(w, wants[w.key] - set().union(*(wants[h.key] for h in heads)))

    line = [waiting(1, 2), waiting(2, 1), waiting(3, 1)]
    competes = lambda a, b: bool(wants[a.key] & wants[b.key])  # noqa: E731
    chosen = starting_now(line, lambda w, _: fits_on(w, wants[w.key]), 600, 0, competes, fits_apart)
    assert [w.key for w in chosen.starting] == [2]
    assert taken == {"L40S": 1}  # the H100 stays free, kept for the head
    assert [w.key for w in chosen.held_for] == [1]  # 3 neither starts nor reserves


@pytest.mark.parametrize(
    ("outcome", "behind", "arrived", "patient", "reserves"),
    [
        (Outcome.SHORT, False, 0.0, True, True),  # waited reserve_after: freed units gather
        (Outcome.SHORT, False, 500.0, True, False),  # not long enough yet
        (Outcome.SHORT, True, 0.0, True, False),  # behind a head: it never reserves itself
        (Outcome.HELD, False, 0.0, True, False),  # its quota holds it: GPUs cannot help
        (Outcome.SHORT, False, 0.0, False, False),  # may not wait (max_wait 0)
        (Outcome.STARTS, False, 0.0, True, False),  # it starts instead
    ],
)
def test_a_pass_step_by_step_reserves_only_for_a_long_wait_that_fits_nowhere(
    outcome, behind, arrived, patient, reserves
):
    line = LinePass(now=1000.0, reserve_after=600.0)
    start = waiting(1, arrived=arrived, patient=patient)
    line.tried(start, outcome, behind=behind)
    assert (start in line.held_for) is reserves
    assert (start in line.starting) is (outcome is Outcome.STARTS)
