"""A GPU node's agent and the hub's side of it, over real HTTP on this machine: the hub's
SwarmSource asks each ready node's agent for its GPUs' telemetry and their processes'
containers, with the token, and reads a node that does not answer as unknown; with parking,
the hub's AgentHost has the agent park and restore its containers' processes with the
checkpoint driver's double, and the driver's refusals come back with their CUresult."""

import json
import logging
import socket
import threading
from dataclasses import dataclass, field

import pytest

from gpuspawner.admin.agent import Agent, serve
from gpuspawner.core.gpus import Telemetry
from gpuspawner.devices.agent_host import AgentHost
from gpuspawner.devices.checkpoint import (
    CheckpointError,
    HostUnreachable,
    OnThisHost,
    ProcessState,
)
from gpuspawner.devices.simulated import SimulatedSource
from gpuspawner.devices.simulated_checkpoint import SimulatedCheckpointDriver
from gpuspawner.devices.swarm import AgentAccess, SwarmSource

BUSY, FAILING, FREE = "GPU-n1-0", "GPU-n1-1", "GPU-n2-0"


@dataclass(frozen=True)
class Node:
    hostname: str
    gpus: tuple[str, ...]
    address: str = "127.0.0.1"
    ready: bool = True
    labels: dict[str, str] = field(default_factory=dict)


@pytest.fixture
def agent(tmp_path):
    """One node's agent on simulated GPUs: one busy with a notebook's process, one failing."""
    load = tmp_path / "load.json"
    load.write_text(
        json.dumps(
            {
                BUSY: {
                    "utilization_percent": 87,
                    "temperature_celsius": 71,
                    "processes": [{"container": "jupyter-ann", "utilization_percent": 87}],
                },
                FAILING: {"health": "XID 79: fallen off the bus"},
            }
        )
    )
    simulated = SimulatedSource(load_file=str(load))
    server = serve(Agent(simulated, simulated.process_owners, "s3cret"), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_the_hub_reads_each_nodes_gpus_from_its_agent(agent):
    source = SwarmSource(lambda: [Node("n1", (BUSY, FAILING))], AgentAccess(agent, "s3cret"))
    samples = source.sample([BUSY, FAILING])
    assert (samples[BUSY].utilization_percent, samples[BUSY].temperature_celsius) == (87, 71)
    assert samples[FAILING].health == "XID 79: fallen off the bus"
    (pid,) = samples[BUSY].processes
    assert source.process_owners([pid]) == {pid: "jupyter-ann"}


def test_without_the_token_the_agent_answers_nothing_and_the_hub_learns_nothing(agent, caplog):
    source = SwarmSource(lambda: [Node("n1", (BUSY,))], AgentAccess(agent, "wrong"))
    with caplog.at_level(logging.WARNING, "gpuspawner"):
        assert source.sample([BUSY]) == {}  # no word: a failing GPU's mark stands
        source.sample([BUSY])
    (warning,) = caplog.messages  # once, not every tick
    assert "agent on node n1 does not answer (HTTP Error 401" in warning


def test_a_node_that_is_down_or_silent_gives_no_sample(agent):
    nodes = [Node("n1", (BUSY,), ready=False), Node("n2", (FREE,), address="192.0.2.1")]
    source = SwarmSource(lambda: nodes, AgentAccess(agent, "s3cret", timeout=0.2))
    assert source.sample([BUSY, FREE]) == {}


def test_without_agents_the_gpus_are_unknown():
    source = SwarmSource(lambda: [Node("n1", (BUSY,))])
    assert source.sample([BUSY]) == {BUSY: Telemetry()}


@pytest.mark.parametrize(
    "answer",
    [
        {"not": "an agent"},
        {"gpus": {BUSY: {"utilization_percent": "lots"}}},
        {"gpus": {BUSY: {"processes": [True]}}},
        {"gpus": {}, "owners": {"pid-1": "x"}},
    ],
)
def test_an_answer_that_is_not_an_agents_is_refused_whole(answer):
    from gpuspawner.devices.swarm import AgentAnswer

    with pytest.raises(ValueError):
        AgentAnswer.read(answer)


def test_something_else_on_the_agents_port_is_a_silent_node_not_a_failed_tick():
    with socket.create_server(("127.0.0.1", 0)) as other:
        port = other.getsockname()[1]

        def reply_garbage():
            connection, _ = other.accept()
            with connection:
                connection.recv(1024)
                connection.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")

        threading.Thread(target=reply_garbage, daemon=True).start()
        source = SwarmSource(lambda: [Node("n1", (BUSY,))], AgentAccess(port))
        assert source.sample([BUSY]) == {}


def test_a_pid_two_nodes_report_belongs_to_nobody(tmp_path):
    """PIDs are each node's own: the same number on two nodes names two processes."""
    servers: list = []
    pid = None  # ann's simulated PID on n1, then the same number in no container on n2
    for address, gpu in (("127.0.0.1", BUSY), ("127.0.0.2", FREE)):
        load = tmp_path / f"{address}.json"
        process = {"container": "jupyter-ann"} if pid is None else pid
        load.write_text(json.dumps({gpu: {"processes": [process]}}))
        simulated = SimulatedSource(load_file=str(load))
        [pid] = simulated.sample([gpu])[gpu].processes
        port = servers[0].server_address[1] if servers else 0
        servers.append(serve(Agent(simulated, simulated.process_owners, ""), address, port))
        threading.Thread(target=servers[-1].serve_forever, daemon=True).start()
    nodes = [Node("n1", (BUSY,)), Node("n2", (FREE,), address="127.0.0.2")]
    source = SwarmSource(lambda: nodes, AgentAccess(servers[0].server_address[1]))
    try:
        samples = source.sample([BUSY, FREE])
        assert samples[BUSY].processes == samples[FREE].processes == (pid,)
        assert source.process_owners([pid]) == {}
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


JOB_MEMORY = 20 * 2**30


@pytest.fixture
def parking(tmp_path):
    """One node's agent that parks: a job's CUDA process of 20 GiB on BUSY, and another
    the driver cannot lock (a program of several processes); the hub's way to it."""
    load = tmp_path / "load.json"
    load.write_text(
        json.dumps(
            {
                BUSY: {"processes": [{"container": "jupyter-job", "memory_gib": 20}]},
                FAILING: {
                    "processes": [
                        {
                            "container": "jupyter-nccl",
                            "memory_gib": 10,
                            "refuse": {"lock": "CUDA_ERROR_NOT_SUPPORTED"},
                        }
                    ]
                },
            }
        )
    )
    simulated = SimulatedSource(load_file=str(load))
    stand_in = SimulatedCheckpointDriver(host=simulated)
    on_node = OnThisHost(stand_in, simulated.container_pids)
    agent = Agent(simulated, simulated.process_owners, "s3cret", lambda: on_node)
    server = serve(agent, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    access = AgentAccess(server.server_address[1], "s3cret")
    source = SwarmSource(lambda: [Node("n1", (BUSY, FAILING))], access)
    yield source, AgentHost("n1", lambda: "127.0.0.1", access), stand_in
    server.shutdown()
    server.server_close()


def test_the_nodes_agent_parks_its_containers_work_and_brings_it_back(parking):
    source, host, stand_in = parking
    [pid] = source.sample([BUSY])[BUSY].processes
    assert source.sample([BUSY])[BUSY].memory_used_bytes == JOB_MEMORY

    host.park([pid], 30_000)
    assert stand_in.state(pid) is ProcessState.CHECKPOINTED
    parked = source.sample([BUSY])[BUSY]  # what the hub's monitor sees of the node now
    assert parked.processes == () and parked.memory_used_bytes == 0
    assert host.parked({"7": ["jupyter-job"], "8": ["jupyter-nccl"]}, settle=False) == {"7": [pid]}

    host.unpark([pid])
    assert stand_in.state(pid) is ProcessState.RUNNING
    assert source.sample([BUSY])[BUSY].memory_used_bytes == JOB_MEMORY
    assert host.parked({"7": ["jupyter-job"]}, settle=False) == {}


def test_the_drivers_refusal_reaches_the_hub_with_its_curesult_and_the_work_runs_on(parking):
    source, host, stand_in = parking
    [pid] = source.sample([FAILING])[FAILING].processes
    with pytest.raises(CheckpointError) as refused:
        host.park([pid], 30_000)
    assert (refused.value.action, refused.value.pid) == ("lock", pid)
    assert refused.value.name == "CUDA_ERROR_NOT_SUPPORTED"
    assert stand_in.state(pid) is ProcessState.RUNNING


def test_after_a_restart_what_was_left_locked_is_unlocked_only_when_asked_to_settle(parking):
    source, host, stand_in = parking
    [pid] = source.sample([BUSY])[BUSY].processes
    stand_in.lock(pid, 0)  # a park the last hub never finished
    assert host.parked({"7": ["jupyter-job"]}, settle=False) == {}  # gpuspawner status
    assert stand_in.state(pid) is ProcessState.LOCKED
    assert host.parked({"7": ["jupyter-job"]}, settle=True) == {}  # the hub's read-back
    assert stand_in.state(pid) is ProcessState.RUNNING


@pytest.mark.parametrize(
    ("token", "pids", "says"),
    [
        ("wrong", None, "refused: a valid agent token is needed"),
        ("s3cret", [1], "refused: process 1 runs in no container"),
        ("s3cret", [0], "refused: pids must be a list of process IDs"),
    ],
)
def test_the_agent_parks_nothing_for_a_stranger_or_outside_a_container(parking, token, pids, says):
    source, host, stand_in = parking
    [pid] = source.sample([BUSY])[BUSY].processes
    stranger = AgentHost("n1", host.address, AgentAccess(host.agents.port, token))
    with pytest.raises(HostUnreachable, match=f"the agent on node n1 {says}"):
        stranger.park([pid] if pids is None else pids, 30_000)
    assert stand_in.state(pid) is ProcessState.RUNNING


def test_an_agent_without_a_token_parks_nothing(tmp_path):
    simulated = SimulatedSource(load_file=str(tmp_path / "load.json"))
    server = serve(Agent(simulated, simulated.process_owners, "", lambda: None), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = AgentHost("n1", lambda: "127.0.0.1", AgentAccess(server.server_address[1]))
    try:
        with pytest.raises(HostUnreachable, match="parks work only with a token"):
            host.unpark([4_000_001])
    finally:
        server.shutdown()
        server.server_close()


def test_an_agent_that_does_not_answer_is_unreachable_not_a_refusal():
    host = AgentHost("n2", lambda: "192.0.2.1", AgentAccess(9401, "s3cret", timeout=0.2))
    with pytest.raises(HostUnreachable, match="the agent on node n2 did not answer"):
        host.unpark([4_000_001])


def test_a_person_in_turns_with_no_cuda_process_is_parked_and_restored_without_a_call(parking):
    """Nothing of theirs is on the GPU: there is nothing to ask the agent (which refuses an
    empty list), as there is nothing for the driver to do on one host."""
    _, host, _ = parking
    host.park([], 30_000)
    host.unpark([])
