"""A real hub with SwarmGPUSpawner on the three-node bed: 4 simulated GPUs per node (each
node advertises them), servers spread over the nodes on exactly their UUIDs, a node that
dies, a hub killed with -9, each node's agent telling the hub how its GPUs are, and parking
its containers' GPU work (with the checkpoint driver's double) when the hub asks."""

from __future__ import annotations

import collections
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker.types import EndpointSpec, Mount, ServiceMode
from jobkit import TRAIN, job, submit, wait_state
from realhub import NOTEBOOK_IMAGE, Hub
from swarmbed import NODES, SOCKETS, Swarm, wait_for

import gpuspawner
from gpuspawner.engine.docker import LABEL_JOB
from gpuspawner.engine.swarmspec import DEVICE_MOUNT_ROOT

pytestmark = [pytest.mark.swarm, pytest.mark.docker]

AGENT_PORT = 9401
AGENT_TOKEN = secrets.token_hex(8)
CHECKOUT = Path(gpuspawner.__file__).resolve().parents[1]
LIGHT = {
    "cmd": ["python3", "-m", "http.server", "8888"],
    "mem_limit": "64M",
    "extra_container_spec": {"init": True},  # stops at once on SIGTERM
}
CONFIG = f"""
c.JupyterHub.spawner_class = "gpu-swarm"
c.JupyterHub.hub_ip = "10.250.0.1"  # the bed's host side, which its nodes reach
c.DockerSpawner.pull_policy = "skip"  # the images are loaded into each node
c.GPUSpawner.placement = "spread"
c.GPUSpawner.monitor_interval = 1
c.DockerSpawner.poll_interval = 1  # a dead node's servers: JupyterHub's poll sees them end
c.SwarmGPUSpawner.node_down_grace = 5
c.SwarmGPUSpawner.agent_port = {AGENT_PORT}
c.SwarmGPUSpawner.agent_token = {AGENT_TOKEN!r}
c.GPUSpawner.parking = True  # by each node's agent
c.GPUSpawner.park_memory_limit = "32G"
c.GPUSpawner.profiles = [
    {{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True,
      "spawner_override": {LIGHT!r}}},
    {{"display_name": "Training", "slug": "train", "gpus": 1}},  # a job's: its own server
    {{"display_name": "1 GPU on n3", "slug": "n3", "gpus": 1, "nodes": ["n3"],
      "spawner_override": {LIGHT!r}}},
    {{"display_name": "Training on n3", "slug": "train-n3", "gpus": 1, "nodes": ["n3"]}},
]
c.GPUSpawner.group_limits = {{
    "trainers": {{"max_jobs": 1, "preempt_grace": 7}},
    "people": {{"max_wait": 120}},  # a start that finds no GPU waits: jobs give way to it
}}
"""
USERS = [f"u{n}" for n in range(1, 14)]
TRAINER = "u14"  # submits jobs
ON_N3 = ["v1", "v2", "v3", "v4"]  # fill n3, the last one with a parked job's GPU
GIB = 2**30
MANAGER = f"unix://{SOCKETS}/n1.sock"


@pytest.fixture(scope="module")
def load(swarm: Swarm, tmp_path_factory) -> Iterator[Path]:
    """Each node's agent, a global service run from this checkout on the simulated GPUs'
    load file (keyed by UUID, so one file serves every node)."""
    folder = tmp_path_factory.mktemp("agent")
    file = folder / "load.json"
    file.write_text("{}")
    agents = swarm.manager.services.create(
        NOTEBOOK_IMAGE,
        ["python3", "-m", "gpuspawner.admin.cli", "agent", "--simulated-load", "/load/load.json"],
        name=f"gst-agent-{AGENT_TOKEN[:6]}",
        mode=ServiceMode("global"),
        user="0",  # reads the test's private folders
        env=["PYTHONPATH=/opt/gpuspawner", f"GPUSPAWNER_AGENT_TOKEN={AGENT_TOKEN}"],
        mounts=[
            Mount("/opt/gpuspawner", str(CHECKOUT), type="bind", read_only=True),
            Mount("/load", str(folder), type="bind"),  # and its driver's states beside it
        ],
        endpoint_spec=EndpointSpec(mode="dnsrr", ports={AGENT_PORT: (AGENT_PORT, "tcp", "host")}),
    )
    yield file
    agents.remove()


@pytest.fixture(scope="module")
def hub(swarm: Swarm, hub_factory, load: Path) -> Iterator[Hub]:
    assert all(len(swarm.gpus(n)) == 4 for n in NODES), "the bed runs 4 GPUs per node"
    hub = hub_factory(CONFIG, env={"DOCKER_HOST": MANAGER})
    hub.add_users(*USERS, *ON_N3, TRAINER, groups={"trainers": [TRAINER], "people": ON_N3})
    yield hub
    hub.stop()  # its servers' services go with it (cleanup_servers)
    for service in swarm.manager.services.list(filters={"name": hub.prefix}):
        service.remove()


def placed(hub: Hub) -> dict[str, tuple[str, str]]:
    """user → (node, UUID) of each GPU held, as the hub's books say."""
    return {g["holder"]["user"]: (g["node"], g["uuid"]) for g in hub.pool()["gpus"] if g["holder"]}


def task_of(swarm: Swarm, hub: Hub, user: str) -> dict:
    name = f"{hub.prefix}-{user}"
    (service,) = [s for s in swarm.manager.services.list(filters={"name": name}) if s.name == name]
    (task,) = [t for t in service.tasks() if t["DesiredState"] == "running"]
    return task


def container_on(swarm: Swarm, node: str, task: dict) -> dict:
    """The task's container as its own node's dockerd has it."""
    client = swarm.clients[node].api
    (found,) = client.containers(filters={"label": f"com.docker.swarm.task.id={task['ID']}"})
    return client.inspect_container(found["Id"])


def put_everywhere(swarm: Swarm, hub: Hub, user: str, name: str, text: str) -> None:
    """A file in the user's home on every node: homes are each node's own."""
    for node in NODES:
        swarm.clients[node].containers.run(
            NOTEBOOK_IMAGE,
            ["sh", "-c", f"cat > {name} <<'EOF'\n{text}\nEOF"],
            entrypoint=[],
            volumes={hub.home_of(user): {"bind": "/home/jovyan", "mode": "rw"}},
            remove=True,
        )


def job_task(swarm: Swarm, job_id: int) -> tuple[str, dict]:
    """The job's running task, and the node it runs on."""
    (service,) = swarm.manager.services.list(filters={"label": f"{LABEL_JOB}={job_id}"})
    (task,) = [t for t in service.tasks() if t["DesiredState"] == "running"]
    (node,) = [n for n in NODES if swarm.clients[n].info()["Swarm"]["NodeID"] == task["NodeID"]]
    return node, task


def gpuspawner_cli(hub: Hub, *args: str) -> subprocess.CompletedProcess[str]:
    """`gpuspawner ARGS --config` the hub's config, run as an admin would on the manager (in
    the hub's working directory, where its database and records are)."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "gpuspawner"), *args, "--config", str(hub.config_file)],
        cwd=hub.workdir,
        capture_output=True,
        text=True,
        env={**os.environ, "DOCKER_HOST": MANAGER, "NO_COLOR": "1"},
        timeout=300,
    )


def row(hub: Hub, uuid: str) -> dict:
    (found,) = [g for g in hub.pool()["gpus"] if g["uuid"] == uuid]
    return found


def test_each_nodes_agent_tells_the_hub_how_its_gpus_are(swarm: Swarm, hub: Hub, load: Path):
    busy, failing = swarm.gpus("n2")[3], swarm.gpus("n1")[3]
    load.write_text(
        json.dumps(
            {
                busy: {"utilization_percent": 93, "temperature_celsius": 77},
                failing: {"health": "XID 79: fallen off the bus"},
            }
        )
    )
    wait_for(
        lambda: (row(hub, busy)["telemetry"] or {}).get("utilization_percent") == 93,
        "n2's agent reports its GPU's load",
        90,
    )
    assert row(hub, busy)["telemetry"]["temperature_celsius"] == 77
    wait_for(lambda: row(hub, failing)["state"] == "unhealthy", "n1's failing GPU kept out")
    assert row(hub, failing)["health"] == "XID 79: fallen off the bus"
    load.write_text("{}")
    wait_for(lambda: row(hub, failing)["state"] == "free", "the GPU healthy again")


def test_twelve_servers_spread_over_three_nodes_each_on_exactly_its_gpu(swarm: Swarm, hub: Hub):
    for user in USERS[:3]:  # "spread": each to the emptiest node
        hub.spawn_ready(user)
    assert sorted(node for node, _ in placed(hub).values()) == ["n1", "n2", "n3"]
    for user in USERS[3:12]:
        assert hub.spawn(user).status_code in (201, 202)
    for user in USERS[3:12]:
        hub.wait_ready(user)

    books = placed(hub)
    assert collections.Counter(node for node, _ in books.values()) == {"n1": 4, "n2": 4, "n3": 4}
    assert len({uuid for _, uuid in books.values()}) == 12  # no GPU twice
    for user, (node, uuid) in books.items():
        assert uuid in swarm.gpus(node)
        task = task_of(swarm, hub, user)
        assert task["NodeID"] == swarm.node_id(node)
        container = container_on(swarm, node, task)
        env = dict(e.split("=", 1) for e in container["Config"]["Env"])
        assert env["NVIDIA_VISIBLE_DEVICES"] == uuid
        requests = [m["Destination"] for m in container["Mounts"]]
        assert [r for r in requests if r.startswith(DEVICE_MOUNT_ROOT)] == [
            f"{DEVICE_MOUNT_ROOT}/{uuid}"
        ]

    refused = hub.spawn(USERS[12])
    assert refused.status_code == 409
    assert "Not enough free GPUs" in refused.json()["message"]
    assert hub.server_model(USERS[12]) is None
    assert placed(hub) == books  # the refusal took nothing


def test_a_dead_node_gives_its_gpus_to_nobody_until_it_is_back(swarm: Swarm, hub: Hub):
    books = placed(hub)
    on_n3 = sorted(u for u, (node, _) in books.items() if node == "n3")
    n3_gpus = {uuid for node, uuid in books.values() if node == "n3"}
    others = sorted(set(books) - set(on_n3))
    try:
        swarm.kill("n3")
        wait_for(lambda: "n3" in hub.pool()["unreachable"], "the hub marks n3 unreachable")
        # Its users see their servers gone; their GPUs stay held until Swarm says so.
        for user in on_n3:
            hub.wait_gone(user, timeout=60)
        assert {g["uuid"] for g in hub.pool()["gpus"] if g["node"] == "n3" and g["holder"]} == (
            n3_gpus
        )
        # A GPU freed elsewhere goes to the next start; nothing of n3 does.
        hub.stop_server(others[0])
        hub.spawn_ready(USERS[12])
        assert placed(hub)[USERS[12]] == books[others[0]]
        assert hub.spawn(others[0]).status_code == 409
        for user in others[1:]:
            assert hub.server_model(user)["ready"]
    finally:
        swarm.restart()
    wait_for(lambda: "n3" not in hub.pool()["unreachable"], "the hub marks n3 back")
    wait_for(
        lambda: not any(g["holder"] for g in hub.pool()["gpus"] if g["node"] == "n3"),
        "n3's GPUs freed once Swarm reports its tasks gone",
    )
    assert not swarm.clients["n3"].containers.list(filters={"name": hub.prefix})


def test_after_kill_9_the_restarted_hub_has_the_same_books(swarm: Swarm, hub: Hub):
    before = placed(hub)
    assert before  # servers run on n1 and n2
    hub.kill()
    hub.start()
    assert placed(hub) == before
    for user in before:
        assert hub.server_model(user)["ready"]
    held = [uuid for _, uuid in placed(hub).values()]
    assert len(held) == len(set(held))


def test_doctor_has_a_line_per_node_and_its_agent(swarm: Swarm, hub: Hub):
    for node in NODES:  # every agent answers (n3's came back with its node)
        wait_for(
            lambda n=node: (row(hub, swarm.gpus(n)[0])["telemetry"] or {}).get(
                "temperature_celsius"
            ),
            f"{node}'s agent answers the hub",
            90,
        )
    doctor = gpuspawner_cli(hub, "doctor")
    lines = doctor.stdout.splitlines()
    for node in NODES:
        assert any(f"Node {node}:" in line for line in lines), doctor.stdout
        assert f"PASS  Agent on {node}: answers for 4 GPU(s), all healthy" in lines


def test_a_job_runs_on_a_node_and_has_its_grace_between_sigterm_and_sigkill(swarm: Swarm, hub: Hub):
    """A job on a swarm: its service starts on a node (create_service once refused the
    container's stop_timeout, and every job failed there), its container holds exactly its
    GPU and has the group's preempt_grace (7 s) before SIGKILL; cancelled, its script gets
    SIGTERM and saves its checkpoint. Homes are each node's own, so the script is put in
    the trainer's home on every node."""
    put_everywhere(swarm, hub, TRAINER, "train.py", TRAIN)
    submitted = submit(hub, TRAINER, profile="train", script="train.py")
    running = wait_state(hub, TRAINER, submitted["id"], "running")
    (service,) = swarm.manager.services.list(filters={"label": f"{LABEL_JOB}={submitted['id']}"})
    node, task = job_task(swarm, submitted["id"])
    grace = service.attrs["Spec"]["TaskTemplate"]["ContainerSpec"]["StopGracePeriod"]
    assert grace == 7_000_000_000  # nanoseconds: swarm stops the task with it, not the default 10 s
    container = container_on(swarm, node, task)
    assert container["Config"]["Labels"][LABEL_JOB] == str(submitted["id"])
    assert container["Config"]["Env"].count(f"NVIDIA_VISIBLE_DEVICES={running['gpus'][0]}") == 1

    cancelled = hub.api("DELETE", f"/users/{TRAINER}/gpu-jobs/{submitted['id']}")
    assert cancelled.status_code == 200, cancelled.text
    wait_for(lambda: row(hub, running["gpus"][0])["state"] == "free", "the job's GPU back", 90)
    saved = swarm.clients[node].containers.run(
        NOTEBOOK_IMAGE,
        ["cat", "checkpoint.txt"],
        entrypoint=[],
        volumes={hub.home_of(TRAINER): {"bind": "/home/jovyan", "mode": "ro"}},
        remove=True,
    )
    assert saved.decode() == "saved\n"  # SIGTERM, and time to save: not a SIGKILL


def test_a_job_is_parked_by_its_nodes_agent_for_a_persons_start_and_comes_back_after(
    swarm: Swarm, hub: Hub, load: Path
):
    """Parking on a swarm. The trainer's job runs on n3 with a CUDA process of 20 GiB (in
    the simulated GPUs' load, which n3's agent reads). With n3's other GPUs taken, a
    person's start on n3 needs the job's GPU: the hub has n3's agent park the job's process
    (its driver's double holds it checkpointed, as the state file it keeps shows), and the
    person starts at once. `gpuspawner status` asks the agents and shows the job parked. A
    hub kill -9 reads it back as parked on the agent's word; when the person leaves, the
    agent restores the job on its GPU, the same run going on."""
    put_everywhere(swarm, hub, TRAINER, "train.py", TRAIN)
    submitted = submit(hub, TRAINER, profile="train-n3", script="train.py")
    running = wait_state(hub, TRAINER, submitted["id"], "running")
    [uuid] = running["gpus"]
    node, task = job_task(swarm, submitted["id"])
    assert node == "n3"
    process = {"container": container_on(swarm, node, task)["Id"], "memory_gib": 20}
    load.write_text(json.dumps({uuid: {"utilization_percent": 90, "processes": [process]}}))
    wait_for(
        lambda: job(hub, TRAINER, submitted["id"])["gpu_use"][0]["memory_used_bytes"] == 20 * GIB,
        "n3's agent reports the job's 20 GiB",
    )
    driver_states = load.with_name("load.json.checkpoints")
    for user in ON_N3[:3]:
        hub.spawn_ready(user, profile="n3")

    hub.spawn_ready(ON_N3[3], profile="n3")  # at once: the job is parked, not stopped
    assert placed(hub)[ON_N3[3]] == ("n3", uuid)
    parked = wait_state(hub, TRAINER, submitted["id"], "parked")
    assert parked["attempts"] == 1 and ON_N3[3] in parked["reason"]
    assert [p["state"] for p in json.loads(driver_states.read_text()).values()] == ["CHECKPOINTED"]
    wait_for(lambda: row(hub, uuid)["telemetry"]["memory_used_bytes"] == 0, "its memory freed")
    mine = [{"user": TRAINER, "server": running["server"], "job": True}]
    assert row(hub, uuid)["parked"] == mine
    status = gpuspawner_cli(hub, "status")
    assert f"{TRAINER}/{running['server']} (parked)" in status.stdout, status.stdout + status.stderr

    hub.kill()
    hub.start()
    assert row(hub, uuid)["parked"] == mine  # the agent's word, read back
    assert job(hub, TRAINER, submitted["id"])["state"] == "parked"

    hub.stop_server(ON_N3[3])
    back = wait_state(hub, TRAINER, submitted["id"], "running")
    assert back["attempts"] == 1 and back["gpus"] == [uuid]  # the same run, going on
    assert json.loads(driver_states.read_text()) == {}  # running again, on the driver's word
    wait_for(
        lambda: job(hub, TRAINER, submitted["id"])["gpu_use"][0]["memory_used_bytes"] == 20 * GIB,
        "its memory back on its GPU",
    )
    hub.api("DELETE", f"/users/{TRAINER}/gpu-jobs/{submitted['id']}")
    for user in ON_N3[:3]:
        hub.stop_server(user)
    load.write_text("{}")
