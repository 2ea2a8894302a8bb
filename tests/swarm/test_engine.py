"""SwarmEngine and isolate_service on the three-node bed: a service lands on its grant's node
with exactly its GPUs, the engine reads it back there, and its GPUs come back only once Swarm
lists no task of it: never while its node is down."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import docker
import pytest
from realhub import NOTEBOOK_IMAGE
from swarmbed import NODES, Swarm, wait_for

from gpuspawner.core.pool import Grant, Holder
from gpuspawner.core.reach import Reach
from gpuspawner.core.units import bare
from gpuspawner.engine.swarm import SwarmEngine
from gpuspawner.engine.swarmspec import DEVICE_MOUNT_ROOT, isolate_service

pytestmark = [pytest.mark.swarm, pytest.mark.docker]

HUB = "swarmtest"
# Stops at once on SIGTERM, as a notebook server does (a bare `sleep` as PID 1 ignores it).
SLEEPER = ["sh", "-c", "trap 'exit 0' TERM; sleep infinity & wait"]


class Made:
    """Services a test made through the manager's low-level API; removed after it."""

    def __init__(self, swarm: Swarm) -> None:
        self.swarm = swarm
        self.ids: list[str] = []

    def create(self, kwargs: dict[str, Any]) -> str:
        service_id = str(self.swarm.manager.api.create_service(**kwargs)["ID"])
        self.ids.append(service_id)
        return service_id

    def tasks(self, service_id: str) -> list[dict[str, Any]]:
        return [t for t in self.swarm.manager.api.tasks() if t["ServiceID"] == service_id]

    def wait_running(self, service_id: str) -> dict[str, Any]:
        def running() -> dict[str, Any] | None:
            tasks = self.tasks(service_id)
            failed = [t["Status"] for t in tasks if t["Status"]["State"] in ("failed", "rejected")]
            assert not failed, failed
            return next((t for t in tasks if t["Status"]["State"] == "running"), None)

        return wait_for(running, f"service {service_id} running")

    def containers(self, node: str, service_id: str) -> list[dict[str, Any]]:
        label = f"com.docker.swarm.service.id={service_id}"
        api = self.swarm.clients[node].api
        found = []
        for listed in api.containers(all=True, filters={"label": label}):
            with contextlib.suppress(docker.errors.NotFound):  # gone between list and inspect
                found.append(api.inspect_container(listed["Id"]))
        return found

    def remove_all(self) -> None:
        for service_id in self.ids:
            with contextlib.suppress(docker.errors.NotFound):
                self.swarm.manager.api.remove_service(service_id)
        wait_for(
            lambda: not any(self.tasks(s) for s in self.ids),
            "the test's services' tasks gone",
        )


@pytest.fixture
def made(swarm: Swarm) -> Iterator[Made]:
    services = Made(swarm)
    yield services
    services.remove_all()


@pytest.fixture
def engine(swarm: Swarm) -> SwarmEngine:
    return SwarmEngine(swarm.manager.api, removal_timeout=60)


def grant_on(swarm: Swarm, node: str, spawner_id: int) -> Grant:
    units = tuple(replace(bare(u, i), node=node) for i, u in enumerate(swarm.gpus(node)))
    return Grant(Holder(spawner_id, 7, "ann", f"s{spawner_id}"), units, time.time(), "students")


def notebook(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "task_template": {
            "ContainerSpec": {
                "Image": NOTEBOOK_IMAGE,
                "Args": SLEEPER,
                "Env": ["NVIDIA_VISIBLE_DEVICES=all", "JUPYTERHUB_USER=ann"],
            },
        },
    }


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return dict(e.split("=", 1) for e in container["Config"]["Env"])


@pytest.mark.parametrize("volume_mounts", [False, True], ids=["env", "volume-mounts"])
def test_a_service_lands_on_its_node_with_exactly_its_gpus_and_goes_only_when_gone(
    swarm: Swarm, made: Made, engine: SwarmEngine, volume_mounts: bool
) -> None:
    node = "n2"
    grant = grant_on(swarm, node, 41 + volume_mounts)
    uuids = swarm.gpus(node)
    kwargs = isolate_service(
        notebook(f"swarmtest-ann-{grant.key}"), grant, HUB, swarm.node_id(node), volume_mounts
    )
    service_id = made.create(kwargs)
    task = made.wait_running(service_id)
    assert task["NodeID"] == swarm.node_id(node)
    assert {n for n in NODES if made.containers(n, service_id)} == {node}
    [container] = made.containers(node, service_id)
    assert env_of(container)["NVIDIA_VISIBLE_DEVICES"] == ",".join(uuids)  # not the image's
    device_binds = sorted(
        (m["Source"], m["Destination"])
        for m in container["Mounts"]
        if m["Destination"].startswith(DEVICE_MOUNT_ROOT)
    )
    assert device_binds == (
        [("/dev/null", f"{DEVICE_MOUNT_ROOT}/{u}") for u in uuids] if volume_mounts else []
    )
    assert container["HostConfig"]["RestartPolicy"]["Name"] in ("", "no")

    [seen] = [s for s in engine.containers() if s.server and s.server.spawner_id == grant.key]
    assert (seen.id, seen.node, seen.running) == (task["ID"], node, True)
    assert seen.reach == Reach(frozenset(uuids))
    assert seen.server is not None and seen.server.hub == HUB and seen.server.uuids == tuple(uuids)

    t0 = time.monotonic()
    assert engine.remove_server(HUB, grant.key, (service_id,))
    took = time.monotonic() - t0
    assert not made.tasks(service_id)
    assert not [c for c in made.containers(node, service_id) if c["State"]["Running"]]
    assert not [s for s in engine.containers() if s.server and s.server.spawner_id == grant.key]
    print(f"remove_server confirmed in {took:.1f} s")
    assert engine.remove_server(HUB, grant.key, (service_id,))  # again: nothing left, True


def test_foreign_tasks_are_reported_only_when_they_reach_gpus(
    swarm: Swarm, made: Made, engine: SwarmEngine
) -> None:
    gpu = swarm.gpus("n3")[1]
    spec = {"Image": NOTEBOOK_IMAGE, "Args": SLEEPER}
    pin = {"Constraints": [f"node.id=={swarm.node_id('n3')}"]}
    with_gpu = made.create(
        {
            "name": "foreign-gpu",
            "task_template": {
                "ContainerSpec": {**spec, "Env": [f"NVIDIA_VISIBLE_DEVICES={gpu}"]},
                "Placement": pin,
            },
        }
    )
    without = made.create(
        {"name": "foreign-cpu", "task_template": {"ContainerSpec": spec, "Placement": pin}}
    )
    reached = made.wait_running(with_gpu)
    made.wait_running(without)
    foreign = [s for s in engine.containers() if s.name.startswith("foreign-")]
    assert [(s.id, s.name, s.node, s.reach, s.server) for s in foreign] == [
        (reached["ID"], "foreign-gpu", "n3", Reach(frozenset({gpu})), None)
    ]


def test_a_task_on_a_node_that_is_down_holds_its_gpus_until_the_node_confirms_it_gone(
    swarm: Swarm, made: Made, engine: SwarmEngine
) -> None:
    node = "n3"
    grant = grant_on(swarm, node, 43)
    kwargs = isolate_service(
        notebook(f"swarmtest-ann-{grant.key}"), grant, HUB, swarm.node_id(node), True
    )
    service_id = made.create(kwargs)
    task = made.wait_running(service_id)
    quick = SwarmEngine(swarm.manager.api, removal_timeout=5)
    try:
        swarm.kill(node)
        wait_for(lambda: swarm.state(node) == "down", f"the manager reports {node} down")
        for attempt in range(2):
            assert not quick.remove_server(HUB, grant.key, (task["ID"],)), attempt
            [seen] = [s for s in engine.containers() if s.id == task["ID"]]
            assert (seen.node, seen.running) == (node, True)
            assert seen.reach == Reach(frozenset(grant.uuids))
        assert [t["ID"] for t in made.tasks(service_id)] == [task["ID"]]  # nothing elsewhere
    finally:
        swarm.restart()
    t0 = time.monotonic()
    wait_for(lambda: engine.remove_server(HUB, grant.key, (task["ID"],)), "removal confirmed")
    print(f"removal confirmed {time.monotonic() - t0:.1f} s after {node} was back")
    assert not made.tasks(service_id)
    assert not [c for c in made.containers(node, service_id) if c["State"]["Running"]]
