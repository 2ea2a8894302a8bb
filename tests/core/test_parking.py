"""The parking arbiter's rules, over any mix of people and jobs bound to one GPU."""

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuspawner.core.parking import ON_THE_GPU, Bound, IllegalMove, R, Step, after, decide

GIB = 2**30
PARK_AFTER = 600.0
TURN = 300.0

bounds = st.builds(
    Bound,
    holder=st.sampled_from(["alice", "bob", "job-1", "job-2", "job-3"]),
    person=st.booleans(),
    residency=st.sampled_from(list(R)),
    since=st.floats(0, 1000),
    wants=st.booleans(),
    idle_since=st.none() | st.floats(0, 1000),
    parked_bytes=st.integers(0, 80).map(lambda g: g * GIB),
    unparkable=st.sampled_from(["", "on a MIG instance"]),
)


def gpu(draw_bounds):
    """Books a GPU can have: distinct holders, at most one of them on the GPU."""
    seen, kept = set(), []
    for b in draw_bounds:
        if b.holder in seen or (
            b.residency in ON_THE_GPU and any(k.residency in ON_THE_GPU for k in kept)
        ):
            continue
        seen.add(b.holder)
        kept.append(b)
    return kept


books = st.lists(bounds, max_size=6).map(gpu)


def holder(bound, name):
    return next(b for b in bound if b.holder == name)


@given(books, st.integers(0, 80).map(lambda g: g * GIB), st.floats(0, 2000))
def test_a_step_never_puts_two_on_the_gpu_nor_restores_without_room(bound, free, now):
    step = decide(bound, free, now, PARK_AFTER)
    if step is None:
        return
    moved = holder(bound, step.holder)
    if step.action in ("restore", "start"):
        assert not any(b.residency in ON_THE_GPU for b in bound)
        assert step.action == "start" or moved.parked_bytes <= free
    else:  # park or give way: the one resident leaves
        assert moved.residency is R.RESIDENT and not any(
            b.residency in (R.PARKING, R.RESTORING) for b in bound
        )


@given(books, st.floats(0, 2000))
def test_a_person_who_wants_the_gpu_always_beats_a_resident_job(bound, now):
    resident = next((b for b in bound if b.residency is R.RESIDENT), None)
    in_transit = any(b.residency in (R.PARKING, R.RESTORING) for b in bound)
    person_waits = any(b.person and b.wants and b.residency in (R.PARKED, R.WAITING) for b in bound)
    step = decide(bound, 80 * GIB, now, PARK_AFTER)
    if resident is not None and not resident.person and person_waits and not in_transit:
        assert step is not None and step.holder == resident.holder
        assert step.action == ("give way" if resident.unparkable else "park")


@given(books, st.floats(0, 2000))
def test_a_person_is_parked_only_when_their_gpu_idled_or_their_turn_is_over(bound, now):
    """For a job: idle for park_after. For another person (turns): idle, or on the GPU for
    a whole turn. And only where the driver can park them."""
    step = decide(bound, 80 * GIB, now, PARK_AFTER, TURN)
    if step is not None and step.action == "park" and holder(bound, step.holder).person:
        parked = holder(bound, step.holder)
        assert not parked.unparkable
        person_waits = any(
            b.person and b.wants and b.residency in (R.PARKED, R.WAITING) for b in bound
        )
        if person_waits:
            assert parked.idle_since is not None or now - parked.since >= TURN
        else:
            assert parked.idle_since is not None and now - parked.idle_since >= PARK_AFTER
    if step is not None and step.action == "give way":
        assert not holder(bound, step.holder).person  # people are never stopped to make room


@given(books, st.floats(0, 2000))
def test_whoever_waits_comes_in_people_first_then_the_longest_waiting(bound, now):
    step = decide(bound, 80 * GIB, now, PARK_AFTER)
    if step is None or step.action not in ("restore", "start"):
        return
    waiting = [b for b in bound if b.wants and b.residency in (R.PARKED, R.WAITING)]
    first = min(waiting, key=lambda b: (not b.person, b.since))
    assert step.holder == first.holder


@given(books, st.floats(0, 2000))
def test_a_person_waiting_for_another_persons_gpu_waits_at_most_one_turn(bound, now):
    resident = next((b for b in bound if b.residency is R.RESIDENT), None)
    in_transit = any(b.residency in (R.PARKING, R.RESTORING) for b in bound)
    person_waits = any(b.person and b.wants and b.residency in (R.PARKED, R.WAITING) for b in bound)
    if resident is None or not resident.person or resident.unparkable or in_transit:
        return
    over = resident.idle_since is not None or now - resident.since >= TURN
    if person_waits and over:
        assert decide(bound, 80 * GIB, now, PARK_AFTER, TURN) == Step(
            "park",
            resident.holder,
            "its turn is over"
            if resident.idle_since is None
            else "its GPU idle; the other person's turn",
        )


def job(name, residency, since=0.0, **more):
    return Bound(name, False, residency, since, **more)


def person(name, residency, since=0.0, **more):
    return Bound(name, True, residency, since, **more)


def test_a_job_parked_for_a_person_comes_back_once_the_person_has_gone():
    books = [job("job-1", R.RESIDENT), person("alice", R.WAITING, 100)]
    assert decide(books, 0, 100, PARK_AFTER) == Step("park", "job-1", "for a person")
    books = [job("job-1", R.PARKED, 101, parked_bytes=30 * GIB), person("alice", R.WAITING, 100)]
    assert decide(books, 80 * GIB, 101, PARK_AFTER) == Step("start", "alice", "the GPU is free")
    books = [books[0]]  # alice's server ended
    assert decide(books, 80 * GIB, 5000, PARK_AFTER) == Step("restore", "job-1", "the GPU is free")


def test_a_parked_job_waits_while_the_gpu_lacks_the_memory_it_parked():
    books = [job("job-1", R.PARKED, parked_bytes=50 * GIB)]
    assert decide(books, 40 * GIB, 0, PARK_AFTER) is None  # something outside still holds 40
    assert decide(books, 50 * GIB, 0, PARK_AFTER) == Step("restore", "job-1", "the GPU is free")


def test_a_person_at_lunch_lends_the_gpu_to_a_job_and_has_it_back_when_a_cell_runs():
    lunch = person("alice", R.RESIDENT, idle_since=0.0)
    books = [lunch, job("job-1", R.PARKED, 50)]
    assert decide(books, 0, PARK_AFTER - 1, PARK_AFTER) is None
    assert decide(books, 0, PARK_AFTER, PARK_AFTER) == Step(
        "park", "alice", "its GPU idle; a job runs meanwhile"
    )
    back = [
        person("alice", R.PARKED, 700, parked_bytes=GIB, wants=False),
        job("job-1", R.RESIDENT, 701),
    ]
    assert decide(back, 0, 2000, PARK_AFTER) is None  # alice has not run anything yet
    back[0] = replace(back[0], wants=True)
    assert decide(back, 0, 2000, PARK_AFTER) == Step("park", "job-1", "for a person")


def test_two_people_take_turns_while_both_want_the_gpu_and_an_idle_one_makes_way_at_once():
    busy = person("alice", R.RESIDENT, since=100)
    bob = person("bob", R.WAITING, since=150)
    assert decide([busy, bob], 0, 100 + TURN - 1, PARK_AFTER, TURN) is None  # alice's turn
    assert decide([busy, bob], 0, 100 + TURN, PARK_AFTER, TURN) == Step(
        "park", "alice", "its turn is over"
    )
    books = [person("alice", R.PARKED, 400, parked_bytes=GIB), bob]
    assert decide(books, 80 * GIB, 400, PARK_AFTER, TURN) == Step("start", "bob", "the GPU is free")
    # bob, on the GPU since 401, stops working: alice, who wants it back, has it at once
    books = [person("alice", R.PARKED, 400, parked_bytes=GIB), person("bob", R.RESIDENT, 401)]
    assert decide(books, 0, 402, PARK_AFTER, TURN) is None
    books[1] = replace(books[1], idle_since=402.0)
    assert decide(books, 0, 403, PARK_AFTER, TURN) == Step(
        "park", "bob", "its GPU idle; the other person's turn"
    )
    # nobody else wants it: a busy person keeps the GPU past a turn
    assert decide([busy, replace(bob, wants=False)], 0, 5000, PARK_AFTER, TURN) is None


def test_work_the_driver_cannot_park_gives_way_or_stays():
    mig_job = job("job-1", R.RESIDENT, unparkable="on a MIG instance")
    assert decide([mig_job, person("alice", R.WAITING)], 0, 0, PARK_AFTER) == Step(
        "give way", "job-1", "for a person; on a MIG instance"
    )
    nccl = person("alice", R.RESIDENT, idle_since=0.0, unparkable="4 CUDA processes")
    assert decide([nccl, job("job-1", R.PARKED)], 0, 5000, PARK_AFTER) is None
    assert decide([nccl, person("bob", R.WAITING)], 0, 5000, PARK_AFTER, TURN) is None


def test_moves_the_table_does_not_allow_are_refused():
    assert after(R.RESIDENT, "park") is R.PARKING
    assert after(R.PARKING, "park refused") is R.RESIDENT
    with pytest.raises(IllegalMove, match="'restore' cannot happen to a holder that is resident"):
        after(R.RESIDENT, "restore")
