"""Parked work in the pool's books: its GPUs stay bound to it, are lent across kinds (a job's
to people, a person's to jobs) only when nothing else is free, and come back to it."""

import contextlib

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from gpuspawner.core.grants import Holder
from gpuspawner.core.limits import LimitExceeded
from gpuspawner.core.pool import AlreadyHolding, NotEnoughGPUs, NotParkable, Pool, StillLent
from gpuspawner.core.pool_view import DeviceState, with_parked
from gpuspawner.core.units import Request

UUIDS = [f"GPU-{i}" for i in range(4)]


def person(key: int) -> Holder:
    return Holder(key, key, f"user{key}")


def job(key: int) -> Holder:
    return Holder(key, key, f"user{key}", f"job-{key}", job=True)


def test_a_parked_jobs_gpu_is_lent_to_a_person_and_comes_back_to_the_job():
    pool = Pool(UUIDS[:1])
    training = pool.allocate(job(1), 1)
    with pytest.raises(NotEnoughGPUs):
        pool.allocate(person(2), 1)
    parked = pool.park(training.key)
    alice = pool.allocate(person(2), 1)
    assert alice.uuids == training.uuids == parked.uuids
    assert pool.bound_to(UUIDS[0]) == [parked]
    with pytest.raises(StillLent, match="user1/job-1 cannot come back yet"):
        pool.restore(training.key)
    pool.release(alice.key)
    back = pool.restore(training.key)
    assert back.uuids == training.uuids and not back.parked
    assert pool.holder_of(UUIDS[0]) == back and pool.bound_to(UUIDS[0]) == []


def test_admins_read_a_free_gpu_with_parked_work_on_it_as_parked_not_free():
    # a start may take it, but the parked container can still reach it: free is said only
    # where no container can (the GPUs page and API, the metrics)
    pool = Pool(UUIDS[:2])
    parked = pool.park(pool.allocate(job(1), 1).key)
    [unit] = [u.id for u in parked.units]
    shown = with_parked(pool.states(), pool)
    assert shown[unit] is DeviceState.PARKED and pool.states()[unit] is DeviceState.FREE
    assert list(shown.values()).count(DeviceState.FREE) == 1
    alice = pool.allocate(person(2), 1)  # the free one first; then the parked one is taken
    bob = pool.allocate(person(3), 1)
    assert bob.uuids == parked.uuids and alice.uuids != parked.uuids
    assert with_parked(pool.states(), pool)[unit] is DeviceState.ALLOCATED


def test_free_gpus_are_taken_before_parked_work_is_disturbed():
    pool = Pool(UUIDS[:2])
    parked = pool.park(pool.allocate(job(1), 1).key)
    alice = pool.allocate(person(2), 1)
    assert alice.uuids != parked.uuids  # the free GPU, not the parked job's


@pytest.mark.parametrize(
    ("parked", "asker", "lent"),
    [(job, person, True), (person, job, True), (job, job, False), (person, person, False)],
    ids=["job's to a person", "person's to a job", "job's to a job", "person's to a person"],
)
def test_parked_gpus_are_lent_only_across_kinds(parked, asker, lent):
    pool = Pool(UUIDS[:1])
    pool.park(pool.allocate(parked(1), 1).key)
    # the form, which asks for people, offers a parked job's GPU, never a parked person's
    assert (pool.refusal(Request(gpus=1)) is None) == (parked is job)
    if lent:
        assert pool.allocate(asker(2), 1).uuids == (UUIDS[0],)
    else:
        with pytest.raises(NotEnoughGPUs):
            pool.allocate(asker(2), 1)


def test_a_job_that_cannot_be_parked_is_never_lent_a_parked_persons_gpu():
    """It could not give the GPU back at once when the person returns."""
    pool = Pool(UUIDS[:1])
    pool.park(pool.allocate(person(1), 1).key)
    with pytest.raises(NotEnoughGPUs):
        pool.allocate(job(2), 1, borrows=False)  # say, an NCCL program across GPUs
    assert pool.allocate(job(3), 1).uuids == (UUIDS[0],)


def test_a_parked_person_who_woke_is_lent_to_no_job_while_they_wait_to_come_back():
    """Else a job given way to them by SIGTERM would be dispatched onto their GPU again."""
    pool = Pool(UUIDS[:1])
    parked = pool.park(pool.allocate(person(1), 1).key)
    with pytest.raises(NotEnoughGPUs):
        pool.allocate(job(2), 1, keep=frozenset(u.id for u in parked.units))
    assert pool.restore(parked.key).uuids == (UUIDS[0],)


def test_parked_work_counts_against_no_limit_and_coming_back_is_admitted_again():
    pool = Pool(UUIDS[:2])
    grant = pool.allocate(job(1), 1)
    pool.park(grant.key)
    assert pool.usage().by_user[1] == 0

    def full(weight, user_id, usage):
        raise LimitExceeded("You already hold 1 of your 1 GPU", "max_gpus_per_user", None)

    with pytest.raises(LimitExceeded):
        pool.restore(grant.key, full)
    assert pool.grant_of(grant.key).parked  # it stays parked
    assert pool.restore(grant.key).parked is False
    assert pool.usage().by_user[1] == 1


def test_only_held_work_can_be_parked():
    pool = Pool(UUIDS[:1])
    grant = pool.allocate(job(1), 1)
    pool.park(grant.key)
    with pytest.raises(NotParkable, match="is parked"):
        pool.park(grant.key)
    pool.restore(grant.key)
    pool.begin_release(grant.key)
    with pytest.raises(NotParkable, match="is stopping"):
        pool.park(grant.key)


def test_parked_work_is_adopted_back_after_a_restart_beside_whoever_holds_its_gpu():
    pool = Pool(UUIDS[:1])
    alice = pool.adopt(person(2), [UUIDS[0]])
    parked = pool.adopt(job(1), [UUIDS[0]], parked=True)
    assert pool.holder_of(UUIDS[0]) == alice and pool.bound_to(UUIDS[0]) == [parked]
    pool.release(parked.key)  # a parked job cancelled: it leaves the books
    assert pool.bound_to(UUIDS[0]) == []


def test_two_people_who_allow_turns_share_a_gpu_when_no_other_will_do_and_no_third():
    pool = Pool(UUIDS[:1])
    alice = pool.allocate(person(1), Request(1, turns=True))
    with pytest.raises(NotEnoughGPUs):
        pool.allocate(person(2), 1)  # bob's profile has no turns
    bob = pool.allocate(person(3), Request(1, turns=True))
    assert bob.uuids == alice.uuids and bob.parked  # alice is on it: bob's turn comes
    assert pool.holder_of(UUIDS[0]) == alice and pool.bound_to(UUIDS[0]) == [bob]
    assert pool.usage().by_user[3] == 0  # waiting for a turn holds no GPU
    with pytest.raises(NotEnoughGPUs):
        pool.allocate(person(5), Request(1, turns=True))  # two people on a GPU at most
    with pytest.raises(StillLent):
        pool.restore(bob.key)
    pool.park(alice.key)  # alice's turn is over
    assert pool.restore(bob.key).parked is False
    assert pool.bound_to(UUIDS[0]) == [pool.grant_of(alice.key)]


def test_turns_are_for_one_whole_gpu_and_never_taken_while_another_gpu_is_free():
    pool = Pool(UUIDS[:2])
    alice = pool.allocate(person(1), Request(1, turns=True))
    bob = pool.allocate(person(3), Request(1, turns=True))
    assert bob.uuids != alice.uuids and not bob.parked  # the free GPU first
    with pytest.raises(NotEnoughGPUs):
        pool.allocate(person(5), Request(2, turns=True))
    no_turns = Pool(UUIDS[:1])
    no_turns.allocate(person(1), 1)  # alice did not ask for turns: nobody joins her
    with pytest.raises(NotEnoughGPUs):
        no_turns.allocate(person(3), Request(1, turns=True))


def test_a_start_in_turns_goes_first_where_the_other_person_is_parked():
    """Nobody is on that GPU (or a job is, which gives way to people): the start is on it
    at once, and the parked person comes back in turns."""
    pool = Pool(UUIDS[:2])
    pool.allocate(person(1), Request(1, turns=True))
    parked = pool.park(pool.allocate(person(3), Request(1, turns=True)).key)
    carol = pool.allocate(person(5), Request(1, turns=True))
    assert carol.uuids == parked.uuids and not carol.parked
    with pytest.raises(NotEnoughGPUs):  # no job is lent a GPU two people are bound to...
        pool.allocate(job(7), 1)
    pool.park(carol.key)  # ...until both are parked
    assert pool.allocate(job(7), 1).uuids == parked.uuids


def test_a_start_in_turns_shares_a_persons_gpu_rather_than_make_a_running_job_give_way():
    """The people who chose turns share; the job goes on. A start that did not choose
    turns waits in line for the job to give way, as ever."""
    pool = Pool(UUIDS[:2])
    alice = pool.allocate(person(1), Request(1, turns=True))
    pool.allocate(job(3), 1)
    assert pool.refusal(Request(1)) is not None and pool.refusal(Request(1, turns=True)) is None
    bob = pool.allocate(person(5), Request(1, turns=True))
    assert bob.uuids == alice.uuids and bob.parked


def test_people_in_turns_are_adopted_back_on_their_gpu_after_a_restart():
    """Neither parked in the driver: the one adopted second waits for its turn."""
    pool = Pool(UUIDS[:1])
    alice = pool.adopt(person(1), [UUIDS[0]], turns=True)
    bob = pool.adopt(person(3), [UUIDS[0]], turns=True)
    assert bob.parked and bob.turns and pool.holder_of(UUIDS[0]) == alice
    with pytest.raises(AlreadyHolding):  # never a third, nor one without turns
        pool.adopt(person(5), [UUIDS[0]], turns=True)
    single = Pool(UUIDS[:1])
    single.adopt(person(1), [UUIDS[0]])
    with pytest.raises(AlreadyHolding):
        single.adopt(person(3), [UUIDS[0]], turns=True)


class Parking(RuleBasedStateMachine):
    """Any mix of starts, parks, restores and ends keeps the books whole."""

    def __init__(self):
        super().__init__()
        self.pool = Pool(UUIDS)
        self.first: dict[int, tuple[str, ...]] = {}  # key → the units it was created with

    @rule(key=st.integers(1, 8), gpus=st.integers(1, 2), turns=st.booleans())
    def start(self, key, gpus, turns):
        if self.pool.grant_of(key) is not None:
            return
        holder = job(key) if key % 2 else person(key)
        nothing_else = self.pool.refusal(Request(gpus=gpus)) is not None
        borrows = not holder.job or gpus == 1  # as the hub's jobs ask (hub.jobs.board)
        with contextlib.suppress(NotEnoughGPUs):
            grant = self.pool.allocate(holder, Request(gpus, turns=turns), borrows=borrows)
            self.first[key] = grant.ids
            # A person joins another on a GPU only in turns, and only when no other GPU
            # would do (a job may borrow the GPU of people who are all parked: its own rule)
            if not holder.job and self.people_on(grant.ids[0]) > 1:
                assert grant.turns and gpus == 1 and nothing_else

    @rule(key=st.integers(1, 8))
    def park(self, key):
        grant = self.pool.grant_of(key)
        if grant is not None and not grant.parked and not grant.stopping:
            self.pool.park(key)

    @rule(key=st.integers(1, 8))
    def restore(self, key):
        grant = self.pool.grant_of(key)
        if grant is not None and grant.parked:
            with contextlib.suppress(StillLent):
                assert self.pool.restore(key).ids == self.first[key]

    @rule(key=st.integers(1, 8))
    def end(self, key):
        self.pool.release(key)
        self.first.pop(key, None)

    def people_on(self, unit: str) -> int:
        resident = self.pool.holder_of(unit)
        bound = [*self.pool.bound_to(unit), *([resident] if resident else [])]
        return sum(not g.holder.job for g in bound)

    @invariant()
    def two_people_at_most_on_a_gpu_both_in_turns(self):
        for unit in UUIDS:
            if self.people_on(unit) > 1:
                assert self.people_on(unit) == 2
                grants = [*self.pool.bound_to(unit), self.pool.holder_of(unit)]
                assert all(g.turns for g in grants if g is not None and not g.holder.job)

    @invariant()
    def one_holder_per_gpu_and_parked_work_stays_bound_to_its_own(self):
        held = [u for g in self.pool.grants() if not g.parked for u in g.ids]
        assert len(held) == len(set(held))
        for grant in self.pool.grants():
            assert grant.ids == self.first[grant.key]
            for unit in grant.ids:
                assert (grant in self.pool.bound_to(unit)) == grant.parked


TestParking = Parking.TestCase
TestParking.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
