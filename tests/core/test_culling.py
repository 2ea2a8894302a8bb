from datetime import timedelta
from fractions import Fraction

import pytest

from gpuspawner.core.culling import (
    Busyness,
    IdleClock,
    combined,
    decide,
    idle_arbiter,
    notice,
)
from gpuspawner.core.gpus import Telemetry
from gpuspawner.core.limits import Limited
from gpuspawner.core.words import duration
from gpuspawner.hub.culler import idle_culler_service

IDLE = Telemetry(utilization_percent=0.0)
BUSY = Telemetry(utilization_percent=80.0)
HOLDING_A_CONTEXT = Telemetry(utilization_percent=0.0, processes=(42,))


@pytest.mark.parametrize(
    ("samples", "busyness", "expected"),
    [
        ([IDLE, IDLE], Busyness(), False),
        ([IDLE, BUSY], Busyness(), True),
        ([Telemetry(utilization_percent=4.9)], Busyness(threshold_percent=5), False),
        ([Telemetry(utilization_percent=5.0)], Busyness(threshold_percent=5), True),
        # an idle kernel holding a CUDA context is idle, unless the admin says otherwise
        ([HOLDING_A_CONTEXT], Busyness(), False),
        ([HOLDING_A_CONTEXT], Busyness(processes_count=True), True),
        # unknown is never idle: no sample, no utilisation reading, an unhealthy GPU
        ([IDLE, None], Busyness(), None),
        ([Telemetry()], Busyness(), None),
        ([Telemetry(0.0, health="lost")], Busyness(), None),
        # ... but a busy GPU beside an unknown one is busy
        ([None, BUSY], Busyness(), True),
    ],
)
def test_busyness(samples, busyness, expected):
    assert busyness.of(samples) is expected


def test_the_idle_clock_starts_at_the_first_idle_sample_and_stops_on_busy_or_unknown():
    clock = IdleClock()
    clock.update("a/", False, 100)
    clock.update("a/", False, 160)
    assert clock.idle_since == {"a/": 100}
    clock.update("a/", None, 170)
    assert clock.idle_since == {}
    clock.update("a/", False, 180)
    clock.update("b/", False, 180)
    clock.forget_all_but(["b/"])
    assert clock.idle_since == {"b/": 180}


STUDENT = {
    "gpu_idle_timeout": Limited(3600, "students"),
    "max_age": Limited(8 * 3600, "students"),
}


def test_decide_gpu_idle_timeout():
    assert decide("a/", 2, 0, 1000, STUDENT, 1000 + 3599) is None
    verdict = decide("a/", 2, 0, 1000, STUDENT, 1000 + 3600)
    assert verdict.reason == (
        "its 2 GPUs were idle for 1 h 0 min (gpu_idle_timeout of group students)"
    )
    assert "its 1 GPU was idle" in decide("a/", 1, 0, 0, STUDENT, 4000).reason


def test_decide_max_age_even_when_busy():
    verdict = decide("a/", 1, 0, None, STUDENT, 8 * 3600)
    assert verdict.reason == (
        "it ran for 8 h 0 min, the longest a GPU server may run (max_age of group students)"
    )


def test_unset_limits_and_cpu_servers_are_never_culled_here():
    assert decide("a/", 1, 0, 0, {}, 10**9) is None
    assert decide("a/", 0, 0, 0, STUDENT, 10**9) is None


def test_notice_says_which_server_when_and_why():
    assert notice("train", 1_800_000_000, "its 1 GPU was idle for 2 h 0 min") == (
        "Your server 'train' was stopped at 2027-01-15 08:00 UTC: its 1 GPU was idle for 2 h 0 min."
    )
    assert notice("", 0, "x").startswith("Your default server was stopped at 1970-01-01 00:00 UTC")


def test_notice_says_the_files_are_kept_only_where_a_home_keeps_them():
    assert notice("", 0, "x", kept_in="/home/jovyan").endswith(
        ": x. Your files in /home/jovyan are kept."
    )
    assert "kept" not in notice("", 0, "x")


def test_the_culler_arbiter_prefers_the_servers_group_timeout():
    hour = timedelta(hours=1)
    with_group = {"state": {"idle_timeout": 600}}
    assert idle_arbiter(inactive=hour, inactive_limit=7200, server=with_group)
    assert not idle_arbiter(inactive=hour, inactive_limit=7200, server={"state": {}})
    assert idle_arbiter(inactive=2 * hour, inactive_limit=7200, server={})


def test_the_culler_service_runs_with_our_arbiter_and_a_least_privilege_role():
    service, role = idle_culler_service(timeout=1800, cull_every=30)
    assert "--timeout=1800" in service["command"]
    config = next(a for a in service["command"] if a.startswith("--config="))
    assert config.endswith("idle_culler_config.py")
    assert role["services"] == ["idle-culler"]
    assert "admin:server_state" in role["scopes"] and "admin:users" not in role["scopes"]


@pytest.mark.parametrize(
    ("seconds", "text"), [(5, "5 s"), (59.9, "59 s"), (60, "1 min"), (3660, "1 h 1 min")]
)
def test_duration(seconds, text):
    assert duration(seconds) == text


def shared(gpu: float | None, *processes: int, per_process=None) -> Telemetry:
    return Telemetry(utilization_percent=gpu, processes=processes, process_utilization=per_process)


@pytest.mark.parametrize(
    ("sample", "mine", "unowned", "busyness", "expected"),
    [
        # NVML says how busy each process is: only this server's processes count
        (shared(90, 1, 2, per_process=((1, 85.0), (2, 0.0))), {1}, (), Busyness(), True),
        (shared(90, 1, 2, per_process=((1, 85.0), (2, 0.0))), {2}, (), Busyness(), False),
        (shared(90, 1, per_process=((1, 85.0),)), set(), (), Busyness(), False),
        # ... unless some busy process belongs to no container we could find: unknown
        (shared(90, 1, 9, per_process=((9, 85.0),)), {1}, {9}, Busyness(), None),
        # the GPU is idle: every slot on it is idle
        (shared(0, 1, 2), {1}, (), Busyness(), False),
        (shared(0, 1), {1}, (), Busyness(processes_count=True), True),
        # no figure per process: a busy GPU counts for each server running something on it
        (shared(90, 1, 2), {1}, (), Busyness(), True),
        (shared(90, 2), set(), (), Busyness(), False),
        (shared(90, 9), set(), {9}, Busyness(), None),
        # nothing known, or the GPU is sick: unknown, never idle
        (None, {1}, (), Busyness(), None),
        (Telemetry(0.0, health="lost"), {1}, (), Busyness(), None),
        (shared(None, 1), {1}, (), Busyness(), None),
    ],
)
def test_a_slot_is_busy_when_its_own_processes_are(sample, mine, unowned, busyness, expected):
    assert busyness.of_share(sample, mine, unowned) is expected


def test_a_grant_is_busy_if_any_part_is_and_idle_only_if_all_are():
    assert combined([False, True, None]) is True
    assert combined([False, None]) is None
    assert combined([False, False]) is False


def test_a_slice_that_sat_idle_is_named_as_a_share():
    limits = {"gpu_idle_timeout": Limited(600, "students")}
    verdict = decide(1, Fraction(1, 7), 0, 100, limits, 800)
    assert verdict.reason == "its 1/7 GPU was idle for 11 min (gpu_idle_timeout of group students)"
