"""The lease users read in JupyterLab: time left, the warning, and its agreement with culling."""

from datetime import UTC, datetime
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuspawner.core.culling import decide
from gpuspawner.core.lease import NOTIFICATION_LENGTH, Lease, lease
from gpuspawner.core.limits import Limited

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC).timestamp()
MIN = 60.0
STUDENTS = {
    "max_age": Limited(9 * 3600, "students"),
    "gpu_idle_timeout": Limited(60 * MIN, "students"),
    "idle_timeout": Limited(2 * 3600, "default_limits"),
}


def lease_at(now: float, **given) -> Lease:
    """A 1-GPU server granted at T0, no clock running, warned 15 min ahead, unless `given`."""
    defaults = {
        "gpus": 1,
        "started": T0,
        "idle_since": None,
        "last_activity": None,
        "durations": STUDENTS,
        "warn_before": 15 * MIN,
    }
    return lease(now=now, **{**defaults, **given})


def says(current) -> dict[str, str]:
    return {d.key: d.says for d in current.deadlines}


def test_each_limit_says_when_it_stops_the_server():
    current = lease_at(T0 + 60 * MIN, idle_since=T0 + 20 * MIN, last_activity=T0 + 55 * MIN)
    assert says(current) == {
        "max_age": "This server stops at 18:00 UTC (in 8 h 0 min) unless you stop it sooner: "
        "a GPU server may run 9 h 0 min (max_age of group students).",
        "gpu_idle_timeout": "Your 1 GPU has been idle for 40 min; at 1 h 0 min it goes back to "
        "the pool and this server stops, in 20 min (gpu_idle_timeout of group students).",
        "idle_timeout": "This server stops after 2 h 0 min without activity (idle_timeout from "
        "default_limits). The last the hub knows of was 5 min ago: about 1 h 55 min left if "
        "nothing happens.",
    }
    assert current.summary() == "1 GPU · 20 min left"
    assert current.warning is None and current.warning_says() is None


def test_with_parking_the_gpu_idle_limit_parks_stops_nothing_and_is_never_warned_of():
    current = lease_at(
        T0 + 55 * MIN, idle_since=T0 + 10 * MIN, last_activity=T0 + 55 * MIN, parks=True
    )
    assert says(current)["gpu_idle_timeout"] == (
        "Your 1 GPU has been idle for 45 min; at 1 h 0 min, in 15 min, your GPU work is parked "
        "in host memory and it may run a job (gpu_idle_timeout of group students): nothing "
        "stops, and your work comes back where it was when you run a cell."
    )
    assert current.summary() == "1 GPU · 2 h 0 min left"  # idle_timeout's, the soonest stop
    assert current.warning is None


def test_with_parking_a_gpu_not_measured_yet_says_so_and_parked_work_has_no_idle_line():
    fresh = lease_at(T0 + 5, idle_since=None, last_activity=T0, parks=True, gpu_use_known=False)
    assert says(fresh)["gpu_idle_timeout"].startswith(
        "Your 1 GPU is not measured yet; once idle for 1 h 0 min, your GPU work is parked"
    )
    parked = lease_at(T0 + 90 * MIN, idle_since=T0, last_activity=T0, parks=True, parked=True)
    assert "gpu_idle_timeout" not in says(parked)  # parked already: its residency says so


def test_busy_gpus_stop_the_idle_clock_and_no_limit_means_no_line():
    current = lease_at(
        T0 + 5,
        gpus=2,
        durations={"gpu_idle_timeout": Limited(3600, None), "max_age": Limited(None, "staff")},
    )
    [idle] = current.deadlines
    assert idle.stops_at is None and idle.warn_at is None
    assert idle.says == (
        "Your 2 GPUs are not idle. Once idle for 1 h 0 min, they go back to the pool "
        "and this server stops (gpu_idle_timeout)."
    )
    assert current.summary() == "2 GPUs"


def test_a_mig_instance_or_shared_slot_reads_as_its_share_of_a_gpu():
    """Like the culler's own stop notice: a slice is a part of one GPU, in the singular."""
    current = lease_at(T0 + 60 * MIN, gpus=Fraction(1, 7), idle_since=T0 + 20 * MIN)
    assert says(current)["gpu_idle_timeout"] == (
        "Your 1/7 GPU has been idle for 40 min; at 1 h 0 min it goes back to the pool and "
        "this server stops, in 20 min (gpu_idle_timeout of group students)."
    )
    assert current.summary() == "1/7 GPU · 20 min left"
    warned = lease_at(T0 + 75 * MIN, gpus=Fraction(1, 4), idle_since=T0 + 20 * MIN)
    assert warned.warning_says() == (
        "This server stops at 10:20 UTC (in 5 min): its 1/4 GPU has been idle for 55 min "
        "(gpu_idle_timeout). Use it or save your work."
    )


def test_a_cpu_only_server_has_only_its_idle_timeout():
    current = lease_at(
        T0 + 10 * MIN,
        gpus=0,
        last_activity=T0,
        durations={**STUDENTS, "cpu_idle_timeout": Limited(3600, "students")},
    )
    assert [d.key for d in current.deadlines] == ["cpu_idle_timeout"]
    assert current.summary() == "CPU only · 50 min left"
    assert current.warning is None  # the idle culler's stop is not the hub's to warn of


@pytest.mark.parametrize(
    ("idle_minutes", "warned"),
    [(44, False), (45, True), (59.9, True), (61, True)],
)
def test_the_warning_starts_warn_before_the_gpu_idle_stop(idle_minutes, warned):
    now = T0 + 60 * MIN
    current = lease_at(
        now,
        idle_since=now - idle_minutes * MIN,
        durations={"gpu_idle_timeout": Limited(60 * MIN, "students")},
    )
    assert (current.warning is not None) is warned
    if warned and idle_minutes == 45:
        assert current.warning_says() == (
            "This server stops at 10:15 UTC (in 15 min): its 1 GPU has been idle for 45 min "
            "(gpu_idle_timeout). Use it or save your work."
        )


@pytest.mark.parametrize(
    ("max_age_minutes", "warned_of"), [(70, "gpu_idle_timeout"), (62, "max_age")]
)
def test_the_soonest_stop_is_the_one_warned_of(max_age_minutes, warned_of):
    current = lease_at(
        T0 + 58 * MIN,
        gpus=2,
        idle_since=T0 + 3 * MIN,
        durations={
            "max_age": Limited(max_age_minutes * MIN, "x"),
            "gpu_idle_timeout": Limited(60 * MIN, "y"),
        },
    )
    assert current.warning.key == warned_of
    if warned_of == "max_age":
        assert current.warning_says() == (
            "This server stops at 10:02 UTC (in 4 min): a GPU server may run 1 h 2 min "
            "(max_age). Save your work now."
        )


def test_no_warning_when_warn_before_is_zero():
    current = lease_at(
        T0 + 59, idle_since=T0, durations={"gpu_idle_timeout": Limited(60, None)}, warn_before=0
    )
    assert current.warning is None


def test_overdue_reads_any_moment_now_and_far_dates_carry_the_day():
    overdue = lease_at(T0 + 3601, durations={"max_age": Limited(3600, None)})
    assert "(any moment now)" in overdue.warning_says()
    assert overdue.summary() == "1 GPU · 0 s left"
    week = lease_at(T0, durations={"max_age": Limited(7 * 24 * 3600, None)})
    assert week.deadlines[0].says.startswith("This server stops at 2026-12-07 09:00 UTC")


@pytest.mark.parametrize(
    ("idle_for", "expected"),
    [(0, 30.0), (45 * MIN - 10, 11.0), (45 * MIN - 2, 5.0), (50 * MIN, 30.0)],
)
def test_the_lease_is_read_again_when_the_warning_starts(idle_for, expected):
    now = T0 + 2 * 3600
    current = lease_at(
        now, idle_since=now - idle_for, durations={"gpu_idle_timeout": Limited(60 * MIN, None)}
    )
    assert current.look_again_in() == expected


durations = st.fixed_dictionaries(
    {
        "max_age": st.builds(Limited, st.integers(60, 10**6), st.just("g")),
        "gpu_idle_timeout": st.builds(Limited, st.integers(60, 10**6), st.just("g")),
    }
)


@given(
    durations=durations,
    idle_from=st.integers(0, 10**6),
    warn_before=st.integers(0, 3600),
)
def test_the_stop_comes_when_the_lease_says_never_earlier(durations, idle_from, warn_before):
    """The reclaimer (`decide`) and the lease agree on the moment: a second before it, the
    server runs; at it, the server stops; and a warning, where asked for, came first."""
    started, idle_since = T0, T0 + idle_from

    def at(now):
        return lease_at(
            now,
            started=started,
            idle_since=idle_since if now >= idle_since else None,
            durations=durations,
            warn_before=warn_before,
        )

    first = min(
        started + durations["max_age"].value, idle_since + durations["gpu_idle_timeout"].value
    )
    before, then = at(first - 1), at(first)
    assert before.soonest.stops_at == then.soonest.stops_at == first
    assert decide(1, 1, started, idle_since, durations, first - 1) is None
    assert decide(1, 1, started, idle_since, durations, first) is not None
    if warn_before >= 1:
        assert then.warning is not None and before.warning is not None
        assert at(first - warn_before - 1).warning is None


@given(
    gpus=st.one_of(  # what one server can hold: whole GPUs, or one MIG instance or slot
        st.integers(1, 16),
        st.builds(Fraction, st.integers(1, 7), st.just(7)),  # k/7 of an A100's or H100's slices
        st.builds(Fraction, st.just(1), st.integers(2, 16)),  # a slot of a GPU shared by n
    ),
    limit=st.integers(60, 48 * 3600),
    warn_before=st.integers(1, 12 * 3600),
    key=st.sampled_from(["max_age", "gpu_idle_timeout"]),
)
def test_a_warning_fits_a_jupyterlab_notification(gpus, limit, warn_before, key):
    now = T0 + limit - min(warn_before, limit) + 0.5  # within the warning, before the stop
    durations = {key: Limited(limit, "g" * 40)}
    current = lease_at(now, gpus=gpus, idle_since=T0, durations=durations, warn_before=warn_before)
    assert current.warning is not None
    assert len(current.warning_says()) <= NOTIFICATION_LENGTH


def test_before_the_first_look_the_gpus_use_is_said_to_be_unknown_not_busy():
    """Right after a start the monitor has not sampled the GPU yet: 'not idle' would be
    wrong while the GPUs page shows it at 0 %."""
    current = lease_at(T0 + 5, gpu_use_known=False)
    assert says(current)["gpu_idle_timeout"] == (
        "Your 1 GPU is not measured yet. Once idle for 1 h 0 min, it goes back to the pool "
        "and this server stops (gpu_idle_timeout of group students)."
    )
    assert says(lease_at(T0 + 5))["gpu_idle_timeout"].startswith("Your 1 GPU is not idle.")
