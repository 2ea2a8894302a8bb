"""The swarm test bed does what tests across GPU servers will lean on: a task pinned to a node
runs there, with the GPUs it was handed, and answers on that node's address; every node takes
GPU device requests as the main engine does; a node that dies is reported down while the
others' tasks run on, and it comes back."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
import requests
from docker.types import DeviceRequest, EndpointSpec
from realhub import NOTEBOOK_IMAGE
from swarmbed import NODES, Services, Swarm, wait_for

pytestmark = [pytest.mark.swarm, pytest.mark.docker]

PORT = 18000  # published in host mode on the task's node only
# Serves the container's hostname (the node's, by the service's template) and its GPUs.
SERVE = (
    'mkdir -p /tmp/www && echo "$(hostname) $NVIDIA_VISIBLE_DEVICES" >/tmp/www/index.html'
    " && exec python3 -m http.server --directory /tmp/www 8000"
)


def answer(url: str) -> str | None:
    try:
        return requests.get(url, timeout=5).text
    except requests.ConnectionError:
        return None


def refuses(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def test_a_pinned_service_runs_on_exactly_its_node_and_answers_on_its_port(
    swarm: Swarm, services: Services
) -> None:
    node = "n2"
    gpu = swarm.gpus(node)[0]
    service = services.create(
        node,
        args=["sh", "-c", SERVE],
        endpoint_spec=EndpointSpec(mode="dnsrr", ports={PORT: (8000, "tcp", "host")}),
        env=[f"NVIDIA_VISIBLE_DEVICES={gpu}"],
        hostname="{{.Node.Hostname}}",
    )
    task = services.wait_running(service)
    assert task["NodeID"] == swarm.node_id(node)
    assert [t["ID"] for t in service.tasks()] == [task["ID"]]
    assert {n for n in NODES if swarm.containers(n, service)} == {node}
    [container] = swarm.containers(node, service)
    assert f"NVIDIA_VISIBLE_DEVICES={gpu}" in container.attrs["Config"]["Env"]

    body = wait_for(lambda: answer(f"http://{swarm.address(node)}:{PORT}/"), "the task answers")
    assert body.split() == [node, gpu]
    assert all(refuses(swarm.address(n), PORT) for n in NODES if n != node)


def test_every_node_takes_gpu_device_requests_as_the_main_engine_does(swarm: Swarm) -> None:
    if shutil.which("nvidia-container-runtime-hook") is None:
        pytest.skip("no NVIDIA hook here: the main engine takes no GPU device requests either")
    for node, client in swarm.clients.items():
        gpus = swarm.gpus(node)
        container = client.containers.run(
            NOTEBOOK_IMAGE,
            ["sleep", "infinity"],
            detach=True,
            device_requests=[DeviceRequest(device_ids=gpus, capabilities=[["gpu"]])],
        )
        try:
            container.reload()
            # Docker hands the GPUs to the init process at start, not in the config; runc's
            # own environment comes first, until the command runs.
            proc = Path(f"/proc/{container.attrs['State']['Pid']}/environ")
            expected = f"NVIDIA_VISIBLE_DEVICES={','.join(gpus)}".encode()
            # (read as the command is exec'd, the environment may come back empty: not yet)
            wait_for(
                lambda p=proc: (env := p.read_bytes()) and b"GOMAXPROCS" not in env,
                "the command running",
            )
            assert expected in proc.read_bytes().split(b"\0")
        finally:
            container.remove(force=True)


def test_a_killed_node_is_reported_down_its_neighbours_run_on_and_it_comes_back(
    swarm: Swarm, services: Services
) -> None:
    sleeper = {"args": ["sleep", "infinity"]}
    neighbours = {n: services.create(n, **sleeper) for n in ("n1", "n3")}
    before = {n: services.wait_running(s)["ID"] for n, s in neighbours.items()}

    def run_on() -> None:
        for n, service in neighbours.items():
            assert [(t["ID"], t["Status"]["State"]) for t in service.tasks()] == [
                (before[n], "running")
            ]
            assert [c.status for c in swarm.containers(n, service)] == ["running"]

    try:
        swarm.kill("n2")
        wait_for(lambda: swarm.state("n2") == "down", "the manager reports n2 down")
        run_on()
    finally:
        swarm.restart()
    assert swarm.state("n2") == "ready"
    back = services.create("n2", **sleeper)
    assert services.wait_running(back)["NodeID"] == swarm.node_id("n2")
    run_on()
