"""The doctor's lines for a Swarm's nodes, from literal nodes (no Docker needed)."""

import io
from dataclasses import replace

import pytest
from docker.errors import APIError, DockerException
from doubles import Adapter as Spawner

from gpuspawner.admin import doctor
from gpuspawner.admin.checks import Status
from gpuspawner.admin.swarmchecks import (
    docker_version,
    judge_agent,
    judge_nodes,
    judge_swarm_unreachable,
)
from gpuspawner.core.gpus import Telemetry
from gpuspawner.devices.swarm import AgentAnswer
from gpuspawner.engine.docker import DockerEngine
from gpuspawner.engine.swarm import SwarmEngine, SwarmNode

GPUS = tuple(f"GPU-{n}a2b3c4d-0000-0000-0000-00000000000{n}" for n in range(4))
NODE = SwarmNode(
    id="n1",
    hostname="gpu-1",
    state="ready",
    availability="active",
    engine_version="24.0.7",
    manager=False,
    address="10.0.0.11",
    gpus=GPUS,
)


def judged(node: SwarmNode):
    [finding] = judge_nodes([node])
    return finding


@pytest.mark.parametrize(
    ("node", "status", "said", "fix"),
    [
        (NODE, Status.PASS, "ready, active, Docker 24.0.7, 4 GPUs advertised (GPU-0", ""),
        (
            replace(NODE, state="down"),
            Status.FAIL,
            "down, active, Docker 24.0.7, 4 GPUs advertised",
            "start gpu-1, or Docker on it",
        ),
        (
            replace(NODE, engine_version="20.10.24"),
            Status.WARN,
            "moby#44378, fixed in 23.0.2",
            "upgrade Docker on gpu-1 to 23.0.2 or newer",
        ),
        (
            replace(NODE, availability="drain"),
            Status.WARN,
            "drained: Swarm stops the servers on it",
            "docker node update --availability active gpu-1",
        ),
        (
            replace(NODE, availability="pause"),
            Status.WARN,
            "paused: its servers run on",
            "docker node update --availability active gpu-1",
        ),
        (
            replace(NODE, gpus=()),
            Status.WARN,
            "no GPU advertised: no GPU server is placed there",
            '"node-generic-resources": ["NVIDIA-GPU=<UUID>", …]',
        ),
        (
            replace(NODE, engine_version="master-dockerproject-2024-01-01"),
            Status.WARN,
            "its Docker version is unknown, so it was not checked for moby#44378",
            "check `docker version` on gpu-1",
        ),
        (
            replace(NODE, engine_version=""),
            Status.WARN,
            "Docker ?, 4 GPUs",
            "check `docker version` on gpu-1",
        ),
    ],
    ids=["ready", "down", "docker-20", "drain", "pause", "no-gpus", "odd-version", "no-version"],
)
def test_each_node_is_judged_on_its_own_line(node, status, said, fix):
    finding = judged(node)
    assert (finding.status, finding.subject) == (status, "Node gpu-1")
    assert said in finding.detail
    assert fix in finding.fix
    assert bool(finding.fix) is (status is not Status.PASS)  # every FAIL and WARN has a fix


def test_the_worst_problem_sets_the_status_and_every_one_is_named():
    finding = judged(replace(NODE, state="down", availability="drain", engine_version="20.10.24"))
    assert finding.status is Status.FAIL
    assert finding.detail.count("moby#44378") == 1 and "drained" in finding.detail
    assert finding.fix.count("docker node update") == 1


@pytest.mark.parametrize("node", [NODE, replace(NODE, state="down")], ids=["pass", "fail"])
def test_every_node_says_once_what_only_a_look_on_it_shows(node):
    finding = judged(node)
    text = f"{finding.detail}\n{finding.fix}"
    assert text.count("The manager cannot see its runtime or toolkit settings") == 1
    assert "check on gpu-1" in text
    assert "Default Runtime: nvidia" in text
    assert "accept-nvidia-visible-devices-as-volume-mounts = true" in text
    assert "swarm-resource unset" in text
    assert "jit-cdi" in text


def test_a_manager_and_a_single_gpu_are_named():
    finding = judged(replace(NODE, manager=True, gpus=GPUS[:1]))
    assert finding.detail.startswith(f"ready, active, Docker 24.0.7, 1 GPU advertised ({GPUS[0]})")
    assert ", manager. " in finding.detail


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("20.10.24", (20, 10, 24)),
        ("24.0.7", (24, 0, 7)),
        ("23.0.2-ce", (23, 0, 2)),
        ("23.0", (23, 0, 0)),
        ("", None),
        ("master-dockerproject-2024-01-01", None),
    ],
)
def test_docker_versions(text, version):
    assert docker_version(text) == version


def test_an_unreachable_manager_fails_with_its_error():
    finding = judge_swarm_unreachable("This node is not a swarm manager.")
    assert (finding.status, finding.subject) == (Status.FAIL, "Swarm manager")
    assert finding.detail.endswith("This node is not a swarm manager.")
    assert "docker node ls" in finding.fix


def test_the_report_prints_one_line_per_node():
    nodes = [NODE, replace(NODE, id="n2", hostname="gpu-2", state="down")]
    out = io.StringIO()
    doctor.report(judge_nodes(nodes), out)
    lines = out.getvalue().splitlines()
    assert [x[:16] for x in lines if x[6:].startswith("Node ")] == [
        "PASS  Node gpu-1",
        "FAIL  Node gpu-2",
    ]
    assert lines[-1] == "1 passed, 0 warning(s), 1 failed"


class Manager:
    """docker-py's low-level client, as far as listing nodes goes."""

    def __init__(self, nodes=(), error=None):
        self._nodes, self.error = list(nodes), error

    def nodes(self):
        if self.error:
            raise self.error
        return self._nodes


def inspected(hostname: str) -> dict:
    """A node as `docker node inspect` shows it."""
    return {
        "ID": hostname,
        "Spec": {"Availability": "active"},
        "Description": {
            "Hostname": hostname,
            "Engine": {"EngineVersion": "24.0.7"},
            "Resources": {
                "GenericResources": [
                    {"NamedResourceSpec": {"Kind": "NVIDIA-GPU", "Value": uuid}} for uuid in GPUS
                ]
            },
        },
        "Status": {"State": "ready", "Addr": "10.0.0.11"},
    }


def test_doctor_judges_each_node_a_swarm_spawner_reaches():
    engine = SwarmEngine(Manager([inspected("gpu-1"), inspected("gpu-2")]))
    nodes, findings = doctor._swarm(Spawner(engine))
    assert [n.hostname for n in nodes or ()] == ["gpu-1", "gpu-2"]
    assert [(f.status, f.subject) for f in findings] == [
        (Status.PASS, "Node gpu-1"),
        (Status.PASS, "Node gpu-2"),
    ]


def test_a_manager_that_does_not_answer_fails_the_swarm():
    engine = SwarmEngine(Manager(error=APIError("This node is not a swarm manager.")))
    nodes, [finding] = doctor._swarm(Spawner(engine))
    assert nodes is None
    assert (finding.status, finding.subject) == (Status.FAIL, "Swarm manager")


@pytest.mark.parametrize(
    "spawner",
    [
        Spawner(engine=DockerEngine(client=None)),
        Spawner(error=DockerException("Connection refused")),
    ],
    ids=["one-host-engine", "one-host-engine-unreachable"],
)
def test_one_host_gets_no_swarm_lines(spawner):
    assert doctor._swarm(spawner) == (None, [])


def test_a_swarm_spawner_whose_manager_cannot_be_reached_fails_the_swarm():
    spawner = Spawner(error=DockerException("Connection refused"), runs_on_nodes=True)
    nodes, [finding] = doctor._swarm(spawner)
    assert nodes is None
    assert (finding.status, finding.subject) == (Status.FAIL, "Swarm manager")
    assert "Connection refused" in finding.detail


def test_an_agent_that_answers_passes_names_unhealthy_gpus_and_a_silent_one_warns():
    healthy = AgentAnswer({"GPU-0": Telemetry(temperature_celsius=40.0)}, {})
    sick = AgentAnswer({"GPU-0": Telemetry(health="XID 79")}, {})
    assert judge_agent(NODE, healthy).status is Status.PASS
    failing = judge_agent(NODE, sick)
    assert (failing.status, failing.subject) == (Status.FAIL, "Agent on gpu-1")
    assert "GPU-0 (XID 79)" in failing.detail
    silent = judge_agent(NODE, None, "Connection refused")
    assert silent.status is Status.WARN and "Connection refused" in silent.detail
    assert "gpuspawner agent" in silent.fix
