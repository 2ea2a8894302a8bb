"""The parking row (issue #29): jobs park for people and people park at their GPU-idle
limit, through the real pool's park and restore. Small traces worked out by hand."""

from dataclasses import replace
from datetime import timedelta

from simulation.parking import MAX_PARKED
from simulation.policies import with_jobs, with_parking, with_turns
from simulation.week import replay_week
from test_utilisation_jobs import DAY, EIGHT, person, run, site

from gpuspawner.core.words import duration

MINUTE = 60.0


def test_a_job_parked_for_a_person_loses_nothing_and_comes_back_when_they_leave():
    """A 90-minute run from 8:00; at 8:50 alice asks for the only GPU for 30 minutes."""
    alice = person("alice", "B30", EIGHT + timedelta(minutes=50))
    hub = site()
    replayed = replay_week([alice], [run(90)], hub, with_parking(hub), minutes=DAY)
    assert replayed.waits == [0]  # the job is parked within the minute, not after a grace
    assert replayed.parked["jobs"] == 1 and replayed.stopped == 0 and replayed.run_lost == 0
    assert replayed.turnarounds == [(90 + 30) * MINUTE]  # it stood still while alice worked
    stopped = replay_week([alice], [run(90)], hub, with_jobs(hub), minutes=DAY)
    assert (stopped.waits, stopped.run_lost) == ([120], 20)  # the same week, giving way by SIGTERM


def test_a_person_at_lunch_lends_their_gpu_to_a_job_and_has_it_back_at_their_first_cell():
    """Alice works 30 min, lunches 90 (her group's gpu_idle_timeout: 30 min), works 30 and
    stops. A 120-minute job submitted at 8:10 waits for her GPU, runs from 9:01 (her GPU
    idle 30 min at 9:00: she is parked by that minute's monitor, after its dispatch) to
    10:00, is parked when she is back, and runs its last 61 minutes once she has gone,
    from 10:30."""
    hub = site(gpu_idle_timeout=1800)
    alice = person("alice", "B30 I90 B30", EIGHT)
    job = run(120, at=EIGHT + timedelta(minutes=10))
    replayed = replay_week([alice], [job], hub, with_parking(hub), minutes=DAY)
    assert replayed.parked == {"people": 1, "jobs": 1}
    assert replayed.resume_waits == [0] and replayed.interrupted == 0
    assert replayed.run_lost == 0
    assert replayed.turnarounds == [(11 * 60 + 31 - (8 * 60 + 10)) * MINUTE]
    culled = replay_week([alice], [job], hub, with_jobs(hub), minutes=DAY)
    assert culled.interrupted == 1  # without parking her kernel is stopped at lunch


def test_a_parked_server_nobody_comes_back_to_is_stopped_after_max_parked():
    hub = site(gpu_idle_timeout=1800)
    left_open = person("alice", "B30", EIGHT, then="open")  # the tab stays open, all day
    replayed = replay_week([left_open], [], hub, with_parking(hub), minutes=DAY)
    assert replayed.parked["people"] == 1
    assert replayed.culls == {"max_parked": 1}, duration(MAX_PARKED)


def test_a_persons_start_held_by_their_own_limit_parks_their_own_job():
    """The trainer may hold one GPU of two, and their job holds it: without parking their
    start waits 40 min for the job's end; with it, the job parks and comes back after."""
    hub = site(gpus=2, max_gpus_per_user=1)
    trainer = person("trainer", "B30", EIGHT + timedelta(minutes=50))
    waited = replay_week([trainer], [run(90)], hub, with_jobs(hub), minutes=DAY)
    assert waited.waits == [40 * MINUTE]
    parked = replay_week([trainer], [run(90)], hub, with_parking(hub), minutes=DAY)
    assert parked.waits == [0] and parked.parked["jobs"] == 1 and parked.run_lost == 0
    assert parked.turnarounds == [(90 + 30) * MINUTE]  # it stood still while they worked


def test_a_multi_gpu_job_gives_way_by_sigterm_as_the_driver_cannot_park_nccl():
    hub = site(gpus=2)
    alice = person("alice", "B30", EIGHT + timedelta(minutes=50))
    nccl = [run(90, gpus=2)]
    replayed = replay_week([alice], nccl, hub, with_parking(hub), minutes=DAY)
    assert replayed.waits == [120] and (replayed.stopped, replayed.run_lost) == (1, 2 * 20)
    could = replace(with_parking(hub), parks_nccl=True)  # what a driver that could would give
    replayed = replay_week([alice], nccl, hub, could, minutes=DAY)
    assert replayed.waits == [0] and replayed.parked["jobs"] == 1 and replayed.run_lost == 0


def test_a_job_that_cannot_park_takes_the_gpus_of_people_parked_at_their_gpu_idle_limit():
    """Two servers left open from 8:00 are parked at 9:00 (gpu_idle_timeout 30 min); a
    2-GPU job waiting since 8:10 may not borrow their GPUs, so they are stopped, as the
    hub stops them today at that limit, and it runs from 9:01."""
    hub = site(gpus=2, gpu_idle_timeout=1800)
    left_open = [person(name, "B30", EIGHT, then="open") for name in ("alice", "bob")]
    job = run(60, at=EIGHT + timedelta(minutes=10), gpus=2)
    replayed = replay_week(left_open, [job], hub, with_parking(hub), minutes=DAY)
    assert replayed.culls["parked, its GPU needed"] == 2 and replayed.interrupted == 0
    assert replayed.turnarounds == [(10 * 60 + 1 - (8 * 60 + 10)) * MINUTE]


def test_with_turns_a_second_person_starts_at_once_and_both_take_turns_of_five_minutes():
    """One GPU; alice works 30 min from 8:00, bob 30 min from 8:10. Without turns bob waits
    20 min for alice's end. With turns he starts at once: alice, on the GPU for 10 min, is
    parked for him, and from then on they swap every 5 min while both work (8 handovers:
    8:10, 8:15, ... 8:45), each waiting a turn (4 min for the first, who asks a minute
    after being parked). Alice's last turn ends her work at 8:50, bob's at 9:00: the time
    both spend on the GPU is the same; who waits is shared."""
    hub = site()
    alice = person("alice", "B30", EIGHT)
    bob = person("bob", "B30", EIGHT + timedelta(minutes=10))
    alone = replay_week([alice, bob], [], hub, with_parking(hub), minutes=DAY)
    assert alone.waits == [0, 20 * MINUTE] and alone.resume_waits == []
    turns = replay_week([alice, bob], [], hub, with_turns(hub), minutes=DAY)
    assert turns.waits == [0, 0]
    assert turns.parked == {"turns": 8} and turns.interrupted == 0
    assert turns.resume_waits == [0, 4 * MINUTE, *[5 * MINUTE] * 6, 4 * MINUTE]
    # 38 of their 98 busy minutes were spent waiting for a turn (60 minutes of work)
    assert (turns.held_back, turns.people_busy) == (38, 98)


def test_with_turns_an_idle_person_makes_way_at_once_and_has_the_gpu_back_when_free():
    """Alice works 10 min, is idle an hour (her server stays), works 10 more; bob asks at
    8:20 for 30 min. Without turns he waits until her server ends at 9:20; with turns her
    idle kernel is parked as he starts, and when she runs a cell at 9:10 bob has gone."""
    hub = site()
    alice = person("alice", "B10 I60 B10", EIGHT)
    bob = person("bob", "B30", EIGHT + timedelta(minutes=20))
    alone = replay_week([alice, bob], [], hub, with_parking(hub), minutes=DAY)
    assert alone.waits == [0, 60 * MINUTE]
    turns = replay_week([alice, bob], [], hub, with_turns(hub), minutes=DAY)
    assert turns.waits == [0, 0] and turns.resume_waits == [0, 0]
    assert turns.parked == {"turns": 1} and turns.held_back == 0
