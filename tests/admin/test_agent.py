"""A GPU node's agent and the hub's side of it, over real HTTP on this machine: the hub's
SwarmSource asks each ready node's agent for its GPUs' telemetry and their processes'
containers, with the token, and reads a node that does not answer as unknown."""

import json
import logging
import socket
import threading
from dataclasses import dataclass, field

import pytest

from gpuspawner.admin.agent import Agent, serve
from gpuspawner.core.gpus import Telemetry
from gpuspawner.devices.simulated import SimulatedSource
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
