"""The replay's pieces on the real stack: its training script run as a job gives way to a
person's start on the only GPU and resumes from the checkpoint it saved on SIGTERM, which
its own journal shows; and a scripted person's start records when it asked, when the hub
granted its GPU and when the server was ready, in that order, and their busy kernel
reaches the hub through the load file."""

from __future__ import annotations

import docker
from jobkit import job, put, read, submit, wait_state
from realhub import LIGHT_SERVER, OTHER_WORKERS, PASSWORD
from stack.jobs import TRAIN_SCRIPT
from stack.load import BUSY_PERCENT, LoadBoard
from stack.lost_work import read_journal
from stack.person import Person

from gpuspawner.engine.docker import DockerEngine

CONFIG = """
c.GPUSpawner.simulate_gpus = 1
c.GPUSpawner.simulated_load_file = {load!r}
c.GPUSpawner.monitor_interval = 0.5
c.GPUSpawner.profiles = [
    {{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True}},
    {{"display_name": "1 GPU, light", "slug": "light-1", "gpus": 1,
      "spawner_override": {light!r}}},
]
c.GPUSpawner.default_limits = {{"max_jobs": 0}}
c.GPUSpawner.group_limits = {{
    "people": {{"max_wait": 900}},
    "trainers": {{"max_jobs": 1, "preempt_grace": 20}},
}}
"""
STEPS = ["--steps", "300", "--step-seconds", "0.1", "--checkpoint-every", "1"]


def test_a_training_job_gives_way_to_a_scripted_persons_start_and_resumes_from_its_save(
    hub_factory, load_file
):
    hub = hub_factory(CONFIG.format(load=str(load_file), light=LIGHT_SERVER))
    hub.add_users("bob", "alice", groups={"trainers": ["bob"], "people": ["alice"]})
    put(hub, "bob", "train.py", TRAIN_SCRIPT.read_text())
    board = LoadBoard(load_file, hub.prefix, DockerEngine(docker.from_env().api), OTHER_WORKERS)
    alice = Person.log_in(hub.url, "alice", PASSWORD, board=board)

    submitted = submit(hub, "bob", profile="gpu-1", script="train.py", args=STEPS)
    wait_state(hub, "bob", submitted["id"], "running")
    hub.wait_for(  # its first checkpoint: it has trained a while
        lambda: any(
            "checkpoint at step" in line
            for line in job(hub, "bob", submitted["id"])["progress"].get("tail", [])
        ),
        timeout=60,
        what="the job's first checkpoint",
    )

    start = alice.start(profile="light-1")  # only one GPU: she waits, the job gives way
    assert start.failed is None, start.events
    assert start.requested < start.granted < start.ready, start
    assert any("in line" in said for _, said in start.events)  # she did wait for it
    gave_way = wait_state(hub, "bob", submitted["id"], "waiting")
    assert gave_way["preemptions"] == 1 and "alice" in gave_way["reason"]

    alice.kernel("", busy=True)  # her cell trains: the hub's telemetry says so
    hub.wait_for(
        lambda: hub.pool()["gpus"][0]["telemetry"]["utilization_percent"] == BUSY_PERCENT,
        what="alice's busy kernel seen by the hub",
    )
    alice.kernel("", busy=False)
    alice.stop()
    wait_state(hub, "bob", submitted["id"], "done", timeout=120)

    work = read_journal(read(hub, "bob", "train-journal.jsonl"))
    first, second = work.attempts
    assert first.ended == "sigterm" and second.ended == "done"
    assert second.resumed_from == first.furthest > 0  # saved on SIGTERM, resumed there
    assert work.steps_redone == 0 and work.steps_done == 300
    assert work.waited_seconds > 0  # the time it gave way for
