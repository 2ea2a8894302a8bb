"""Parking on the real stack, with the checkpoint driver's double on simulated GPUs: a job
whose CUDA process the driver can park gives way to a person's start at once, loses
nothing (no SIGTERM, no second attempt), and goes on on the same GPU when the person
leaves; a job the driver cannot park (no CUDA process, or a refusal) gives way by SIGTERM
as without parking; a refused restore stops the job with the reason, its files kept; a
bad parking config stops the hub with one line.
"""

from __future__ import annotations

import json

import pytest
from jobkit import TRAIN, checkpoints, job, put, read, submit, wait_state
from realhub import LIGHT_SERVER, Hub

CONFIG = """
c.GPUSpawner.simulate_gpus = 1
c.GPUSpawner.simulated_machine = "parking"
c.GPUSpawner.simulated_load_file = {load!r}
c.GPUSpawner.monitor_interval = 0.5
c.GPUSpawner.parking = True
c.GPUSpawner.park_memory_limit = "32G"
c.GPUSpawner.profiles = [
    {{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True}},
    {{"display_name": "1 GPU, light", "slug": "light-1", "gpus": 1,
      "spawner_override": {light!r}}},
]
c.GPUSpawner.default_limits = {{"max_jobs": 0}}
c.GPUSpawner.group_limits = {{
    "people": {{"max_wait": 900}},
    "trainers": {{"max_jobs": 2, "preempt_grace": 5}},
}}
"""
GIB = 2**30


@pytest.fixture(scope="module")
def hub(hub_factory, load_file) -> Hub:
    hub = hub_factory(CONFIG.format(load=str(load_file), light=LIGHT_SERVER))
    hub.add_users("bob", "alice", groups={"trainers": ["bob"], "people": ["alice"]})
    put(hub, "bob", "train.py", TRAIN)
    return hub


def running_on_gpu(hub: Hub, load_file, memory_gib: int = 20, **process) -> tuple[dict, str]:
    """bob's training job, running, with a CUDA process of `memory_gib` that the hub has seen
    (as NVML would list it)."""
    submitted = submit(hub, "bob", profile="gpu-1", script="train.py")
    running = wait_state(hub, "bob", submitted["id"], "running")
    [uuid] = running["gpus"]
    container = hub.container_of("bob", running["server"]).name
    load = {"memory_used_gib": memory_gib, "utilization_percent": 90}
    load["processes"] = [{"container": container, **process}]
    load_file.write_text(json.dumps({uuid: load}))
    hub.wait_for(
        lambda: (
            job(hub, "bob", submitted["id"])["gpu_use"][0]["memory_used_bytes"] == memory_gib * GIB
        ),
        what="the job's GPU memory seen by the hub",
    )
    return running, uuid


def cancel(hub: Hub, running: dict) -> None:
    hub.api("DELETE", f"/users/bob/gpu-jobs/{running['id']}")
    wait_state(hub, "bob", running["id"], "cancelled", "failed")


def test_a_job_is_parked_for_a_persons_start_and_goes_on_when_they_leave(hub, load_file):
    saved = checkpoints(hub)
    running, uuid = running_on_gpu(hub, load_file)

    hub.spawn_ready("alice", profile="light-1")  # she gets the job's GPU at once, no grace
    assert hub.held_uuids("alice") == [uuid]
    parked = wait_state(hub, "bob", running["id"], "parked")
    assert "Parked" in parked["reason"] and "alice" in parked["reason"]
    assert parked["preemptions"] == 1 and parked["attempts"] == 1
    assert hub.container_of("bob", running["server"]).status == "running"  # nothing stopped
    gpu = hub.pool()["gpus"][0]
    assert gpu["telemetry"]["memory_used_bytes"] == 0  # NVML: its memory left the GPU
    assert "parked" in hub.log() and checkpoints(hub) == saved  # no SIGTERM
    assert hub.metrics()[("gpuspawner_parked_bytes", ())] == 20 * GIB

    hub.stop_server("alice")
    back = wait_state(hub, "bob", running["id"], "running")
    assert back["attempts"] == 1 and back["reason"] == ""  # the same run, going on
    assert hub.held_uuids("bob", running["server"]) == [uuid]
    hub.wait_for(
        lambda: job(hub, "bob", running["id"])["gpu_use"][0]["memory_used_bytes"] == 20 * GIB,
        what="its memory back on the GPU",
    )
    assert hub.metrics()[("gpuspawner_parked_bytes", ())] == 0
    cancel(hub, running)
    load_file.write_text("{}")


def test_after_a_hub_kill_9_a_parked_job_is_parked_on_the_drivers_word(hub, load_file):
    running, uuid = running_on_gpu(hub, load_file)
    hub.spawn_ready("alice", profile="light-1")
    wait_state(hub, "bob", running["id"], "parked")
    job_container = hub.container_of("bob", running["server"]).id

    hub.kill()
    hub.start()  # two containers reach the GPU; the driver says which one is on it

    assert job(hub, "bob", running["id"])["state"] == "parked"
    assert hub.gpu_states() == {uuid: "allocated"} and hub.held_by("alice") == [uuid]
    assert "its GPU work parked, as the driver says" in hub.log()
    assert "not adopted" not in hub.log()
    hub.stop_server("alice")
    back = wait_state(hub, "bob", running["id"], "running")
    assert back["attempts"] == 1  # the same run goes on
    assert hub.container_of("bob", running["server"]).id == job_container
    cancel(hub, running)
    load_file.write_text("{}")


@pytest.mark.parametrize(
    ("process", "says"),
    [
        (None, "it has no CUDA process to park"),
        ({"refuse": {"lock": "CUDA_ERROR_TIMEOUT"}}, "CUDA_ERROR_TIMEOUT"),
        ({"memory_gib": 40}, "its 40 GiB of GPU memory would take parked work past"),
    ],
    ids=["no-cuda-process", "lock-refused", "over-park-memory-limit"],
)
def test_a_job_the_driver_cannot_park_gives_way_by_sigterm(hub, load_file, process, says):
    saved = checkpoints(hub)
    memory = (process or {}).pop("memory_gib", 20)
    running, uuid = running_on_gpu(hub, load_file, memory, **(process or {}))
    if process is None:
        load_file.write_text(json.dumps({uuid: {"utilization_percent": 90}}))
        hub.wait_for(
            lambda: not job(hub, "bob", running["id"])["gpu_use"][0]["memory_used_bytes"],
            what="no process on its GPU",
        )

    hub.spawn_ready("alice", profile="light-1")
    waiting = wait_state(hub, "bob", running["id"], "waiting")
    assert "Gave way" in waiting["reason"] and checkpoints(hub) == saved + 1
    assert says in hub.log()
    hub.stop_server("alice")
    wait_state(hub, "bob", running["id"], "running")
    cancel(hub, running)
    load_file.write_text("{}")


def test_a_refused_restore_stops_the_job_with_the_reason_and_keeps_its_files(hub, load_file):
    running, uuid = running_on_gpu(hub, load_file, refuse={"restore": "CUDA_ERROR_UNKNOWN"})
    hub.spawn_ready("alice", profile="light-1")
    wait_state(hub, "bob", running["id"], "parked")
    hub.stop_server("alice")
    failed = wait_state(hub, "bob", running["id"], "failed")
    assert "could not be brought back" in failed["reason"]
    assert "CUDA_ERROR_UNKNOWN" in failed["reason"]
    assert "attempt 1" in read(hub, "bob", f"{running['outputs']}/log.txt")  # files kept
    hub.wait_for(
        lambda: hub.gpu_states() == {uuid: "free"}, timeout=90, what="its GPU back, once gone"
    )
    load_file.write_text("{}")


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ('c.GPUSpawner.park_memory_limit = "lots"', "park_memory_limit must be memory"),
        ('c.GPUSpawner.checkpoint_driver = "cuda"', "needs the NVIDIA driver's checkpoint API"),
    ],
    ids=["memory", "no-driver"],
)
def test_a_bad_parking_config_stops_the_hub_with_one_line(hub_factory, load_file, setting, says):
    config = CONFIG.format(load=str(load_file), light=LIGHT_SERVER) + setting + "\n"
    hub = hub_factory(config, start=False)
    hub.start(wait=False)
    assert hub.process.wait(60) != 0
    [line] = [x for x in hub.log().splitlines() if "gpuspawner:" in x]
    assert says in line
