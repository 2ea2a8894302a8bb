"""A server's container confirmed gone on Docker's word, against the real dockerd."""

import threading

import docker
import pytest
from admintools import unique_prefix
from dockerfaults import DockerFaults
from realhub import CPU_IMAGE

from gpuspawner.engine.docker import LABEL_HUB, LABEL_SPAWNER_ID, DockerEngine

pytestmark = pytest.mark.docker


def test_a_removal_already_under_way_is_waited_for_not_taken_for_a_failure():
    """At a stop DockerSpawner removes the container while the books ask Docker to remove
    it too: Docker answers the second removal 409 until the first ends. That container is
    going, not stuck: the books wait for it instead of keeping its GPUs held a tick longer."""
    hub = unique_prefix("rm")
    client = docker.from_env()
    box = client.containers.run(
        CPU_IMAGE,
        ["sleep", "infinity"],
        detach=True,
        labels={LABEL_HUB: hub, LABEL_SPAWNER_ID: "7"},
        name=hub,
    )
    with DockerFaults() as faults:
        second = faults.fail(
            "DELETE",
            "/containers/[0-9a-f]+",
            409,
            f"removal of container {box.id} is already in progress",
        )
        first = threading.Thread(target=lambda: (second.wait_arrived(), box.remove(force=True)))
        first.start()
        try:
            engine = DockerEngine(docker.APIClient(base_url=faults.docker_host, version="auto"))
            assert engine.remove_server(hub, 7, (box.id,))
        finally:
            first.join()
    with pytest.raises(docker.errors.NotFound):
        client.containers.get(box.id)
