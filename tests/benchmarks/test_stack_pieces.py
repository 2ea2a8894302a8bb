"""The replay's pieces that need no hub: time scaling, a person's script, the load file,
a start's progress read into its times, and a trace's run as the jobs API's body."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from simulation.jobs import TrainingJob, read_jobs
from simulation.site import load_site
from simulation.trace import Session, parse_pattern, read_trace
from stack.jobs import job_request
from stack.load import BUSY_PERCENT, loads
from stack.person import Start
from stack.script import after_stopped, on_arrival, script_of
from stack.timescale import scale, unscaled_table

from gpuspawner.admin.simulate import JOB, PERSON
from gpuspawner.core.pool import Grant, Holder
from gpuspawner.core.units import bare
from gpuspawner.engine.docker import device_requests, labels, seen

SIMULATION = Path(__file__).resolve().parents[2] / "benchmarks" / "simulation"
SITE = json.loads((SIMULATION / "site.json").read_text())
PROFILES = load_site(SIMULATION / "site.json").profiles
MONDAY = datetime(2026, 11, 30, 9, 0)


def session(pattern: str, then: str = "stop", at: str = "09:00", gpus: int = 1) -> Session:
    arrival = datetime.strptime(f"2026-11-30 {at}", "%Y-%m-%d %H:%M")
    return Session("ann", ("students",), "", arrival, gpus, parse_pattern(pattern), then, True)


# --- time scaling -------------------------------------------------------------------------
def test_every_duration_of_the_hubs_limits_and_of_the_trace_is_divided_by_the_factor():
    job = TrainingJob("bob", ("researchers",), datetime(2026, 11, 30, 8, 0), 2, 390, 30)
    scaled = scale(30, SITE, [session("B40 I15", at="09:12")], [job])
    students, researchers = scaled.site["group_limits"].values()
    assert students["gpu_idle_timeout"] == 3600 / 30 and students["max_wait"] == 1800 / 30
    assert researchers["max_runtime"] == 86400 / 30 and researchers["max_age"] == 259200 / 30
    assert students["max_gpus_group"] == 4 and researchers["max_jobs"] == 8  # not durations
    assert scaled.site["default_limits"]["idle_timeout"] == 7200 / 30
    assert scaled.gpuspawner["monitor_interval"] == 10 / 30  # c.GPUSpawner's, from its default
    assert scaled.culler == {"timeout": 86400 // 30, "cull_every": 2}
    assert scaled.jupyterhub["JupyterHub.last_activity_interval"] == 10
    assert scaled.environment == {"JUPYTERHUB_ACTIVITY_INTERVAL": "10"}
    [person], [run] = scaled.sessions, scaled.jobs
    assert person.at == 72 * 60 / 30  # from the trace's first moment, the job's at 08:00
    assert [(p.kind, p.seconds) for p in person.parts] == [("B", 80.0), ("I", 30.0)]
    assert (run.at, run.work_seconds, run.checkpoint_seconds) == (0.0, 780.0, 60.0)


def test_what_cannot_be_scaled_is_listed_and_rounding_to_whole_seconds_is_said():
    scaled = scale(600, SITE, [session("B40")], hub={"monitor_interval": 5})
    names = [u.name for u in scaled.unscaled]
    assert "Spawner.start_timeout" in names and "gpuspawner.core.usage.WEEK" in names
    assert scaled.gpuspawner["monitor_interval"] == 5 / 600
    rounded = {u.name: u.seconds for u in scaled.unscaled if u.why == "whole seconds only"}
    assert rounded["JupyterHub.last_activity_interval"] == 1  # 0.5 s cannot be
    assert rounded["idle culler --cull-every"] == 1
    table = unscaled_table(scaled)
    assert table.startswith("Time runs 600× faster; these do not:")
    assert "| Spawner.start_timeout | 60 |" in table
    with pytest.raises(ValueError, match="factor must be a number > 0"):
        scale(0, SITE, [])


def test_the_documented_week_scales_whole():
    sessions = read_trace(SIMULATION / "team-week.csv")
    jobs = read_jobs(SIMULATION / "team-jobs.csv")
    scaled = scale(30, SITE, sessions, jobs)
    assert len(scaled.sessions) == len(sessions) and len(scaled.jobs) == len(jobs)
    week = max(s.at + sum(p.seconds for p in s.parts) for s in scaled.sessions)
    assert week < 7 * 24 * 3600 / 30  # a week replays in 5.6 hours at 30×


# --- a person's script ---------------------------------------------------------------------
def test_a_persons_acts_follow_the_pattern_from_the_grant_and_busy_work_begins_with_a_cell():
    [s] = scale(30, SITE, [session("I6 B12 A30 I3", then="close")]).sessions
    script = script_of(s, PROFILES)
    assert script.profile == "gpu-1" and script.then == "close"
    acts = [(a.after, a.busy, a.present, a.cell) for a in script.acts]
    assert acts == [
        (0.0, False, True, False),
        (12.0, True, True, True),  # a cell starts the busy work
        (36.0, True, False, False),  # the run goes on while they are away: no new cell
        (96.0, False, True, False),
    ]
    assert script.act_at(40.0).present is False and script.act_at(102.0) is None


def test_a_person_stopped_mid_run_comes_back_when_it_would_have_ended_and_runs_it_again():
    [s] = scale(60, SITE, [session("I2 A10 B1")]).sessions  # 2 s, 10 s, 1 s
    script = script_of(s, PROFILES)
    back, rest = after_stopped(script, 5.0)  # 3 s into the run left going
    assert back == 7.0
    assert [(p.kind, p.seconds) for p in rest.parts] == [("B", 10.0), ("B", 1.0)]
    back, rest = after_stopped(script, 1.0)  # in a pause: goes on from the next part
    assert back == 1.0 and [p.kind for p in rest.parts] == ["A", "B"]
    assert after_stopped(script, 20.0) == (0.0, None)  # their pattern was over
    [last] = scale(60, SITE, [session("B1 I2")]).sessions
    assert after_stopped(script_of(last, PROFILES), 2.0) == (1.0, None)  # in their last pause


def test_a_person_coming_back_uses_a_running_server_of_the_profile_they_want():
    script = script_of(scale(30, SITE, [session("B4", gpus=2)]).sessions[0], PROFILES)
    assert script.profile == "gpu-2"
    assert [on_arrival(script, p) for p in (None, "gpu-2", "gpu-1")] == [
        "start", "use", "restart",
    ]  # fmt: skip


# --- the load file -------------------------------------------------------------------------
def server(user: str, name: str, uuid: str) -> object:
    grant = Grant(Holder(len(user), len(user), user, name), (bare(uuid),), 100.0)
    return seen(
        {
            "Id": f"id-{user}-{name}",
            "Name": f"/hubx-{user}-{name}",
            "Config": {"Labels": labels(grant, "hubx"), "Image": "notebook"},
            "State": {"Running": True, "StartedAt": ""},
            "HostConfig": {"DeviceRequests": device_requests(grant.uuids)},
        }
    )


def test_the_load_file_is_simulates_own_with_busy_kernels_at_the_busy_percent():
    running = [server("ann", "", "GPU-a"), server("bob", "job-7", "GPU-b")]
    idle = loads(running, "hubx", {})
    assert idle["GPU-a"]["processes"][0]["utilization_percent"] == PERSON["utilization_percent"]
    assert idle["GPU-b"]["processes"][0]["utilization_percent"] == JOB["utilization_percent"]
    busy = loads(running, "hubx", {("ann", ""): True})
    assert busy["GPU-a"]["processes"][0]["utilization_percent"] == BUSY_PERCENT
    assert busy["GPU-b"] == idle["GPU-b"]
    assert loads(running, "hubx", {("ann", ""): False}) == idle


# --- a start's times -------------------------------------------------------------------------
def events(*said: dict) -> list[bytes]:
    return [b"", *(b"data: " + json.dumps(e).encode() for e in said)]


def test_a_start_records_when_it_was_granted_and_ready_as_the_progress_stream_says():
    clock = iter([11.0, 12.0, 15.0, 19.0]).__next__
    start = Start("", "gpu-1", requested=10.0).read(
        events(
            {"progress": 0, "message": "Server requested"},
            {"progress": 10, "message": "You are number 1 in line for 1 GPU"},
            {"progress": 30, "message": "Reserved 1 GPU: GPU-a"},
            {"progress": 100, "ready": True, "message": "Server ready at /user/ann/"},
        ),
        clock,
    )
    assert (start.granted, start.ready, start.failed) == (15.0, 19.0, None)
    assert (start.wait_for_gpus, start.wait_for_ready) == (5.0, 9.0)
    assert [m for _, m in start.events][1] == "You are number 1 in line for 1 GPU"


def test_a_failed_start_keeps_the_hubs_reason_and_a_start_seen_ready_has_no_grant_time():
    failed = Start("", "gpu-1", 0.0).read(
        events({"progress": 100, "failed": True, "message": "Spawn failed: no GPU"}), lambda: 1.0
    )
    assert failed.failed == "Spawn failed: no GPU" and failed.ready is None
    late = Start("", "gpu-1", 0.0).read(events({"ready": True, "message": "ready"}), lambda: 2.0)
    assert late.ready == 2.0 and late.granted is None and late.wait_for_gpus is None


# --- a run as a job ---------------------------------------------------------------------------
def test_a_traces_run_is_submitted_as_the_training_script_for_its_scaled_work():
    job = TrainingJob("bob", ("researchers",), MONDAY, 4, 111, 30)
    [run] = scale(30, SITE, [], [job]).jobs
    body = job_request(run, PROFILES, step_seconds=2.0, on_sigterm="drop")
    assert body == {
        "profile": "gpu-4",
        "script": "train.py",
        "args": ["--steps", "111", "--step-seconds", "2", "--checkpoint-every", "60",
                 "--on-sigterm", "drop"],
    }  # fmt: skip
    with pytest.raises(ValueError, match="no profile offers 3 GPU"):
        job_request(scale(30, SITE, [], [TrainingJob("b", (), MONDAY, 3, 1, 0)]).jobs[0], PROFILES)
