"""Fixtures on the three-node Docker Swarm of scripts/swarm-testbed (tests/swarmbed.py).

`swarm` starts the bed if it is down, and takes it down at the end of the session only then;
a test that changes it (kills a node) leaves it as it found it. It needs root, like the bed;
run it under the Docker lock, as every run on dockerd:
`flock -o /tmp/gpuspawner-docker.lock scripts/test tests/swarm`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import docker
import pytest
from swarmbed import CANNOT_START, NODES, SOCKETS, Services, Swarm, bed


@pytest.fixture(scope="session")
def swarm() -> Iterator[Swarm]:
    if os.geteuid() != 0:
        pytest.skip("the swarm test bed needs root (network namespaces, mounts, dockerd)")
    started = bed("status").returncode != 0
    if started:
        up = bed("up")
        if up.returncode == CANNOT_START:
            pytest.skip(f"no swarm test bed here: {up.stderr.strip().splitlines()[-1]}")
        if up.returncode != 0:
            bed("down")
            pytest.fail(f"scripts/swarm-testbed up failed:\n{up.stderr}")
    clients = {
        n: docker.DockerClient(base_url=f"unix://{SOCKETS}/{n}.sock", timeout=60) for n in NODES
    }
    try:
        yield Swarm(clients)
    finally:
        for client in clients.values():
            client.close()
        if started:
            down = bed("down")
            assert down.returncode == 0, down.stderr


@pytest.fixture
def services(swarm: Swarm) -> Iterator[Services]:
    made = Services(swarm)
    yield made
    made.remove_all()
