"""What the GPU books must show at every step, checked against Docker's word.

Two rules, read from every running container on the engine (not only one
hub's; under pytest-xdist, every one of this worker's, as the others simulate
machines of their own) and from the hub's own GPU report:

- no GPU is reachable from two running containers;
- every running container of the hub that reaches GPUs has them held in the
  pool (allocated, or stopping while Docker has not confirmed its end), never
  free.

What a container reaches is read here from its device request in `docker
inspect`, independently of gpuspawner's own reading (`engine.docker.reach`),
so the check does not trust the code it checks.
"""

from __future__ import annotations

import docker
from realhub import Hub, of_this_worker

HELD = ("allocated", "stopping")


def reachable(inspected: dict, by_index: dict[str, str]) -> set[str]:
    """The GPU UUIDs a container's device requests (or privileged mode) give it."""
    host = inspected.get("HostConfig") or {}
    every = set(by_index.values())
    if host.get("Privileged"):
        return every
    found: set[str] = set()
    for request in host.get("DeviceRequests") or []:
        capabilities = {c for group in request.get("Capabilities") or [] for c in group}
        if request.get("Driver") != "nvidia" and "gpu" not in capabilities:
            continue
        ids = [part for entry in request.get("DeviceIDs") or [] for part in entry.split(",")]
        count = request.get("Count") or 0
        if "all" in ids or count < 0:
            return every
        found |= {by_index.get(i, i) for i in ids}
        found |= {by_index[str(i)] for i in range(count) if str(i) in by_index}
    return found


def running_with_gpus(client: docker.APIClient, by_index: dict[str, str]) -> dict[str, dict]:
    """Each running container that reaches a GPU: id → its name, hub label and GPUs."""
    found = {}
    for summary in client.containers():
        if not of_this_worker(summary["Names"][0].lstrip("/")):
            continue
        try:
            inspected = client.inspect_container(summary["Id"])
        except docker.errors.NotFound:
            continue
        gpus = reachable(inspected, by_index)
        if gpus and inspected["State"]["Running"]:
            labels = inspected["Config"]["Labels"] or {}
            found[summary["Id"]] = {
                "name": inspected["Name"].lstrip("/"),
                "hub": labels.get("gpuspawner.hub"),
                "gpus": gpus,
            }
    return found


def assert_books_hold(hub: Hub) -> dict[str, set[str]]:
    """Both rules, over the containers that ran before and after the pool was read
    (so ran while it was read); returns each such container's GPUs by name."""
    by_index = {str(g["index"]): g["uuid"] for g in hub.pool()["gpus"]}
    client = hub.docker.api
    before = running_with_gpus(client, by_index)
    states = hub.gpu_states()
    after = running_with_gpus(client, by_index)
    steady = [before[i] for i in before.keys() & after.keys()]
    seen: dict[str, str] = {}
    for container in steady:
        for uuid in container["gpus"]:
            assert uuid not in seen, f"{uuid} reachable from {seen[uuid]} and {container['name']}"
            seen[uuid] = container["name"]
    for container in steady:
        if container["hub"] == hub.prefix:
            loose = {u: states[u] for u in container["gpus"] if states.get(u) not in HELD}
            assert not loose, f"{container['name']} runs with GPUs the pool does not hold: {loose}"
    return {c["name"]: c["gpus"] for c in steady}


def containers_of(hub: Hub, user: str, server: str = "") -> list[str]:
    """Names of a server's containers in any state (created, running, exited, being removed)."""
    found = hub.docker.api.containers(
        all=True,
        filters={"label": [f"gpuspawner.hub={hub.prefix}", f"gpuspawner.user={user}"]},
    )
    return [
        c["Names"][0].lstrip("/")
        for c in found
        if (c["Labels"] or {}).get("gpuspawner.server", "") == server
    ]


def wait_free_only_once_gone(hub: Hub, uuids: list[str], user: str, server: str = "") -> None:
    """Wait for `uuids` to be free again, checking that whenever the pool says so, no
    container of the server is left in any state (removal comes before release)."""

    def free_and_gone() -> bool:
        states = hub.gpu_states()
        if any(states[u] != "free" for u in uuids):
            return False
        left = containers_of(hub, user, server)
        assert not left, f"GPUs {uuids} free while {left} still exist"
        return True

    hub.wait_for(free_and_gone, timeout=60, what=f"{user}/{server}'s GPUs back, container gone")
