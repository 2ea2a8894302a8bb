"""The utilisation simulator's replays: tiny traces whose outcome can be worked out by hand,
through the real pool, limits and culling decisions."""

from datetime import datetime, timedelta

import pytest
from simulation.model import RETRY_MINUTES, replay
from simulation.plot import plot_week
from simulation.policies import Policy, policies
from simulation.report import Result, table, verdict
from simulation.site import site_from
from simulation.trace import Session, parse_pattern

from gpuspawner.core.culling import Busyness

NINE = datetime(2026, 11, 30, 9, 0)
DAY = 24 * 60
NO_CULLING = Policy("pool, no culling")
IDLE_CULLER = Policy("pool + idle culler", culler=True)
SHIPPED = Policy("shipped", culler=True, monitor=Busyness(), shipped=True)  # utilisation only
PROCESSES = Policy("processes count", culler=True, monitor=Busyness(processes_count=True))


def session(user, pattern, then="stop", gpus=1, at=NINE, groups=(), idle_processes=True):
    return Session(user, groups, "", at, gpus, parse_pattern(pattern), then, idle_processes)


def site(gpus=1, **limits):
    return site_from({"gpus": gpus, "default_limits": limits, "culler_timeout": 86400})


def test_a_tiny_trace_replays_to_figures_worked_out_by_hand_and_the_same_each_time():
    trace = [session("alice", "B60"), session("bob", "B60")]
    first = replay(trace, site(), NO_CULLING, minutes=DAY)
    # bob is refused at 9:00, retries every 5 minutes, and gets the GPU when alice stops at 10:00
    assert sorted(first.waits) == [0, 3600]
    assert first.refusals == {"capacity": 60 // RETRY_MINUTES}
    assert first.held_gpu_hours == first.busy_gpu_hours == 2
    assert first.held_busy_share == 1.0
    assert first.machine_busy_share == pytest.approx(120 / DAY)
    assert replay(trace, site(), NO_CULLING, minutes=DAY) == first


def test_a_server_left_open_with_its_kernel_on_the_gpu_goes_back_as_shipped():
    """A kernel holding its CUDA context shows as a process: idle as shipped, busy if the
    admin counts processes (gpu_processes_count_as_busy = True)."""
    trace = [session("alice", "B30", then="open")]
    shipped = replay(trace, site(gpu_idle_timeout=3600), SHIPPED, minutes=DAY)
    assert shipped.culls == {"gpu_idle_timeout": 1}
    assert shipped.held_gpu_hours == pytest.approx(1.5)  # 30 min busy, then 60 idle
    assert shipped.held_busy_share == pytest.approx(1 / 3)
    processes = replay(trace, site(gpu_idle_timeout=3600), PROCESSES, minutes=DAY)
    assert processes.held_gpu_hours == 15  # from 9:00 to the end of the day
    assert not processes.culls


def test_the_idle_culler_alone_stops_an_unattended_run_and_the_person_runs_it_again():
    trace = [session("alice", "B10 A240", then="close", gpus=2)]
    limits = {"idle_timeout": 3600, "max_gpus_per_user": 2}
    culled = replay(trace, site(gpus=2, **limits), IDLE_CULLER, minutes=DAY)
    # stopped an hour after the last minute at the notebook began, and once more an hour
    # after the rerun (at the notebook this time) ended with the tab closed
    assert culled.culls == {"idle_timeout": 2}
    assert (culled.interrupted, culled.runs_killed) == (1, 1)
    assert culled.lost == 2 * 59  # the run's first 59 minutes on two GPUs, thrown away
    # they come back when the run should have finished, and run all of it again
    assert culled.busy_gpu_hours == pytest.approx(2 * (10 + 59 + 240) / 60)
    spared = replay(trace, site(gpus=2, **limits), SHIPPED, minutes=DAY)
    assert (spared.interrupted, spared.culls) == (0, {"idle_timeout": 1})
    assert spared.busy_gpu_hours == pytest.approx(2 * 250 / 60)


def test_a_person_stopped_in_a_long_pause_comes_back_and_finishes_their_work():
    trace = [session("alice", "B20 I90 B30", idle_processes=False)]
    replayed = replay(trace, site(gpu_idle_timeout=3600), SHIPPED, minutes=DAY)
    assert (replayed.interrupted, replayed.runs_killed) == (1, 0)
    assert replayed.busy_gpu_hours == pytest.approx(50 / 60)  # all the work got done
    assert replayed.held_gpu_hours == pytest.approx((20 + 60 + 30) / 60)
    assert replayed.waits == [0, 0]  # the GPU was free when they asked again


def test_group_limits_are_the_hubs_a_student_waits_for_the_groups_quota():
    limits = {"group_limits": {"students": {"max_gpus_group": 1}}}
    hub = site_from({"gpus": 4, **limits})
    trace = [session(f"s{i}", "B30", groups=("students",)) for i in range(2)]
    replayed = replay(trace, hub, NO_CULLING, minutes=DAY)
    assert replayed.refusals == {"limit": 30 // RETRY_MINUTES}
    assert sorted(replayed.waits) == [0, 1800]


def test_the_fixed_split_deals_gpus_round_robin_and_caps_what_one_person_may_use():
    hub = site(gpus=2)
    fixed = next(p for p in policies(hub) if p.fixed)
    trace = [
        session("alice", "B60", gpus=2),  # owns GPU 0 only, shared with carol: capped to 1
        session("bob", "B60"),  # owns GPU 1
        session("carol", "B60", at=NINE + timedelta(minutes=1)),  # waits for alice's GPU 0
    ]
    replayed = replay(trace, hub, fixed, minutes=DAY)
    assert replayed.capped == 1
    assert sorted(replayed.waits) == [0, 0, 3600]  # retries at 9:06, 9:11 … 10:01
    assert replayed.held_gpu_hours == 2 * 24  # dealt out all day, used or not


def test_the_table_and_the_verdict_say_how_far_the_shipped_policy_is_from_the_targets():
    midnight = NINE.replace(hour=0)
    trace = [
        session("alice", "B360 I60", then="open", at=midnight),
        session("bob", "B60", at=midnight),
    ]
    results = [Result(p, replay(trace, site(), p, minutes=DAY)) for p in (NO_CULLING, SHIPPED)]
    # alice's idle kernel keeps the one GPU all day: bob never gets it
    assert "| shipped | 24 | 6 | 25 % | 25 % | 0 | 23 h 59 min (1 never served) | 0 | 0 (0) |" in (
        table(results)
    )
    assert verdict(results) == (
        "Against the targets of #16, shipped: held GPU-hours busy 25 % "
        "(target ≥ 85 %: 60 points short); "
        "p95 wait 23 h 59 min (target < 10 min: 23 h 49 min over)."
    )


def test_the_plot_of_the_week_is_written(tmp_path):
    trace = [session("alice", "B30 I30")]
    results = [Result(p, replay(trace, site(), p, minutes=DAY)) for p in (NO_CULLING, SHIPPED)]
    plot_week(results, 1, NINE.replace(hour=0), tmp_path / "week.png")
    assert (tmp_path / "week.png").read_bytes().startswith(b"\x89PNG")


QUEUE = Policy("queue", culler=True, monitor=Busyness(), queue=True)


def test_with_the_queue_a_waiting_person_starts_the_minute_the_gpus_free():
    trace = [session("alice", "B62"), session("bob", "B60")]
    assert sorted(replay(trace, site(), SHIPPED, minutes=DAY).waits) == [0, 65 * 60]
    assert sorted(replay(trace, site(), QUEUE, minutes=DAY).waits) == [0, 62 * 60]


def test_with_the_queue_freed_gpus_are_kept_for_the_head_of_the_line():
    trace = [
        session("alice", "B120"),
        session("bob", "B60", gpus=2),  # head of the line from 9:00
        session("carol", "B60", at=NINE + timedelta(minutes=30)),  # would fit, one GPU is free
    ]
    refused = replay(trace, site(gpus=2), SHIPPED, minutes=DAY)
    assert sorted(refused.waits) == [0, 0, 120 * 60]  # carol takes the free GPU at once
    queued = replay(trace, site(gpus=2), QUEUE, minutes=DAY)
    # bob has waited past reserve_after (10 min): carol waits behind him, as core.line says
    assert sorted(queued.waits) == [0, 120 * 60, 150 * 60]
    assert not queued.refusals
