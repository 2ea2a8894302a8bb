"""A Docker Swarm whose nodes are GPU servers: services made and read back through its manager.

Each notebook is a service of one task, pinned to the node its GPUs are on
(`swarmspec.isolate_service`). `SwarmEngine` gives the broker what
`DockerEngine` gives on one host, from the manager's view of the swarm: every
task that is one of our servers or reaches GPUs, on which node; and a server's
removal, confirmed only once Swarm lists no task of it. A task's state is what
its node last told the manager: a task on a node that is down may still run
there, so it still holds its GPUs, and its removal cannot be confirmed until
the node is back.

A node is known to the books by its hostname (`GPU.node`, as admins list
machines in `nodes`), as the node reports it (`Description.Hostname`), not by
`docker node update --name`, which few set. IDs stay inside this module and
the spawner's `node.id` constraint.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import docker
import docker.errors

from ..core.nodes import Node
from .base import NOTHING, LookPast, Seen
from .docker import api_client, moment
from .labels import LABEL_HUB, LABEL_SPAWNER_ID, read_labels
from .swarmspec import GPU_NAME, isolate_service, pinned_node, spec_reach

__all__ = ["Node", "SwarmEngine", "SwarmNode", "isolate_service", "task_seen"]

log = logging.getLogger("gpuspawner")

# A task in these states runs, or may yet run: its GPUs are held. The others are final.
HOLDING = frozenset(
    {
        "new",
        "allocated",
        "pending",
        "assigned",
        "accepted",
        "preparing",
        "ready",
        "starting",
        "running",
    }
)
# Swarm's word for a task whose node has been down for too long (24 h): it may still run there.
ORPHANED = "orphaned"


SwarmNode = Node  # its name here before it moved to the core, where the seam names it


def read_node(node: Mapping[str, Any]) -> Node:
    """One node from `docker node inspect`."""
    description = node.get("Description") or {}
    status = node.get("Status") or {}
    return Node(
        id=str(node.get("ID", "")),
        hostname=str(description.get("Hostname", "")),
        state=str(status.get("State", "unknown")),
        availability=str((node.get("Spec") or {}).get("Availability", "")),
        engine_version=str((description.get("Engine") or {}).get("EngineVersion", "")),
        manager=bool(node.get("ManagerStatus")),
        address=_address(status, node.get("ManagerStatus") or {}),
        gpus=advertised_gpus(description),
        labels=dict((node.get("Spec") or {}).get("Labels") or {}),
    )


def _address(status: Mapping[str, Any], manager: Mapping[str, Any]) -> str:
    """Where the node's host-mode ports are: its address, which a manager may report as
    0.0.0.0 (then its manager address, without the port, says)."""
    address = str(status.get("Addr", ""))
    if address in ("", "0.0.0.0") and manager.get("Addr"):
        return str(manager["Addr"]).rpartition(":")[0]
    return address


def advertised_gpus(description: Mapping[str, Any]) -> tuple[str, ...]:
    """The GPUs a node advertises as named generic resources (daemon.json's
    `node-generic-resources`, e.g. "NVIDIA-GPU=GPU-…", as NVIDIA's Swarm guide sets it up):
    the only inventory of a node the manager can read. Kinds naming GPUs, values that are
    GPU or MIG UUIDs."""
    resources = (description.get("Resources") or {}).get("GenericResources") or []
    found = []
    for resource in resources:
        named = resource.get("NamedResourceSpec") or {}
        kind, value = str(named.get("Kind", "")), str(named.get("Value", "")).strip()
        if "GPU" in kind.upper() and GPU_NAME.match(value):
            found.append(value)
    return tuple(dict.fromkeys(found))


def holds(task: Mapping[str, Any], node: Node | None) -> bool:
    """Whether a task runs or may run, as far as the manager can tell."""
    state = str((task.get("Status") or {}).get("State", ""))
    if state in HOLDING:
        return True
    return state == ORPHANED and not (node and node.ready)


def task_labels(task: Mapping[str, Any], service: Mapping[str, Any] | None) -> dict[str, str]:
    """A task's labels: its service's, overridden by its container's (gpuspawner sets both)."""
    spec = task.get("Spec") or {}
    service_labels = ((service or {}).get("Spec") or {}).get("Labels") or {}
    return {**service_labels, **((spec.get("ContainerSpec") or {}).get("Labels") or {})}


def task_seen(
    task: Mapping[str, Any], service: Mapping[str, Any] | None, nodes: Mapping[str, Node]
) -> Seen:
    """One task, from `docker inspect` of it, its service's and the nodes', as the books
    need it. A task not yet given a node is on the node its constraint pins it to."""
    spec = task.get("Spec") or {}
    server, problem = None, None
    try:
        server = read_labels(task_labels(task, service))
    except ValueError as error:
        problem = str(error)
    node = nodes.get(str(task.get("NodeID") or "") or pinned_node(spec))
    running = holds(task, node)
    return Seen(
        id=str(task["ID"]),
        name=str(((service or {}).get("Spec") or {}).get("Name") or task.get("ServiceID", "")),
        image=str((spec.get("ContainerSpec") or {}).get("Image", "")),
        running=running,
        reach=spec_reach(spec, task.get("AssignedGenericResources") or ()),
        server=server,
        label_problem=problem,
        finished_at=None if running else moment((task.get("Status") or {}).get("Timestamp")),
        node=node.hostname if node else "",
        container_id=str(
            ((task.get("Status") or {}).get("ContainerStatus") or {}).get("ContainerID") or ""
        ),
    )


class SwarmEngine:
    """A swarm, through a manager's docker-py low-level client (blocking calls)."""

    def __init__(
        self,
        client: Any,
        removal_timeout: float = 30.0,
        poll: float = 0.25,
        also_unreachable: Callable[[list[Node], float], dict[str, str]] | None = None,
    ) -> None:
        """`also_unreachable`: nodes not to start on for want of something only a look on
        them finds (the shared homes' mount: `shared_homes.MountWatch.lost`), given the
        nodes and the monotonic clock."""
        self.client = client
        self.removal_timeout = removal_timeout  # how long remove_server waits for Swarm
        self.poll = poll
        self.also_unreachable = also_unreachable

    @classmethod
    def connect(
        cls, client_kwargs: Mapping[str, Any], tls_config: Mapping[str, Any] | None = None
    ) -> SwarmEngine:
        """An engine on a client of its own, to a manager of the swarm."""
        return cls(api_client(client_kwargs, tls_config))

    def nodes(self) -> list[Node]:
        """One per hostname: a machine that left the swarm and joined again is listed twice
        (its old entry down until `docker node rm`); the ready one is the machine."""
        found: dict[str, Node] = {}
        for node in map(read_node, self.client.nodes()):
            if node.hostname not in found or (node.ready and not found[node.hostname].ready):
                found[node.hostname] = node
        return list(found.values())

    def cluster_nodes(self) -> list[Node]:
        return self.nodes()

    def _by_id(self) -> dict[str, Node]:
        """Every entry, stale ones too: where a task is, by its NodeID."""
        return {node.id: node for node in map(read_node, self.client.nodes())}

    def unreachable(self) -> dict[str, str]:
        """Nodes that are not ready (down: the manager has not heard from them), and nodes an
        admin set to drain or pause: Swarm would not start a task there."""
        found = {}
        nodes = self.nodes()
        for node in nodes:
            if not node.ready:
                found[node.hostname] = f"node {node.hostname} is {node.state}"
            elif node.availability not in ("", "active"):
                found[node.hostname] = f"node {node.hostname} is set to {node.availability}"
        if self.also_unreachable is not None:
            found = {**self.also_unreachable(nodes, time.monotonic()), **found}
        return found

    def containers(self, look_past: LookPast = NOTHING) -> list[Seen]:
        """Every task that is one of our servers (in any state), or holds GPUs."""
        nodes = self._by_id()
        services = {s["ID"]: s for s in self.client.services()}
        found = []
        for task in self.client.tasks():
            seen = task_seen(task, services.get(task.get("ServiceID")), nodes)
            if look_past.skips(seen):
                continue
            if seen.server or seen.label_problem or (seen.running and seen.reach):
                found.append(seen)
        return found

    def stopped_since(self, hub: str, since: float) -> dict[int, float]:
        """When the hub's servers' tasks ended from `since` until now, by server, as their
        final states' times say; a removed service's tasks are forgotten."""
        found: dict[int, float] = {}
        try:
            for seen in self.containers():
                labels = seen.server
                if seen.running or not labels or labels.hub != hub or not labels.spawner_id:
                    continue
                if seen.finished_at and seen.finished_at >= since:
                    key = labels.spawner_id
                    found[key] = max(found.get(key, 0.0), seen.finished_at)
        except Exception as error:  # no answer: recovery falls back to the hub's last look
            log.warning("gpuspawner: could not read the swarm's tasks: %s", error)
        return found

    def remove_server(self, hub: str, spawner_id: int, container_ids: tuple[str, ...] = ()) -> bool:
        """Remove one of our servers' services (by labels, and `container_ids`: service or
        task IDs known to be its); True once Swarm lists no task of them, waiting for that
        at most `removal_timeout` seconds.

        After `docker service rm`, Swarm lists the task (desired state "remove") until its
        node reports the container exited, then drops it (dockerd 20.10: ~1.5 s for a
        task that stops on SIGTERM). A task on a node that is down stays listed as
        running, and its container may still run there: its service is only scaled to 0
        (so nothing starts when the node returns, and the record of it stays), and the
        removal is not confirmed (False) until the node is back."""
        try:
            return self._remove(hub, spawner_id, container_ids)
        except Exception as error:  # an API error, or no answer at all: not confirmed
            log.warning(
                "gpuspawner: Swarm could not confirm server %s's service gone: %s",
                spawner_id,
                error,
            )
            return False

    def _remove(self, hub: str, spawner_id: int, container_ids: tuple[str, ...]) -> bool:
        labels = {LABEL_HUB: hub, LABEL_SPAWNER_ID: str(spawner_id)}
        services = set(self._service_ids(container_ids))
        deadline = time.monotonic() + self.removal_timeout
        while True:
            listed = self.client.services(
                filters={"label": [f"{k}={v}" for k, v in labels.items()]}
            )
            services |= {s["ID"] for s in listed}
            nodes = self._by_id()
            tasks = [
                t
                for t in self.client.tasks()
                if t.get("ServiceID") in services or _labelled(t, labels)
            ]
            services |= {str(t["ServiceID"]) for t in tasks if t.get("ServiceID")}
            existing = self._existing(services)
            if not tasks and not existing:
                return True
            # A task not yet on a node runs nowhere: its service's removal keeps it off all.
            live = [t for t in tasks if t.get("NodeID") and holds(t, nodes.get(t["NodeID"]))]
            stranded = [t for t in live if not _on_ready_node(t, nodes)]
            for service in existing:
                if any(t["ServiceID"] == service for t in stranded):
                    self._scale_to_zero(service)
                else:
                    with contextlib.suppress(docker.errors.NotFound):  # gone meanwhile
                        self.client.remove_service(service)
            if stranded:
                where = sorted(
                    f"{nodes[n].hostname} ({nodes[n].state})" if n in nodes else f"{n} (unlisted)"
                    for n in {str(t.get("NodeID")) for t in stranded}
                )
                log.warning(
                    "gpuspawner: server %s has a task on %s: its removal waits for the node",
                    spawner_id,
                    ", ".join(where),
                )
                return False
            if time.monotonic() >= deadline:
                return False
            time.sleep(self.poll)

    def _service_ids(self, ids: Iterable[str]) -> Iterable[str]:
        """The services that IDs (a service's, or one of its tasks') name."""
        for known in ids:
            try:
                yield str(self.client.inspect_service(known)["ID"])
                continue
            except docker.errors.NotFound:
                pass
            with contextlib.suppress(docker.errors.NotFound):
                yield str(self.client.inspect_task(known)["ServiceID"])

    def _existing(self, services: Iterable[str]) -> list[str]:
        found = []
        for service in services:
            try:
                self.client.inspect_service(service)
            except docker.errors.NotFound:
                continue
            found.append(service)
        return found

    def _scale_to_zero(self, service: str) -> None:
        """Stop the service's task when its node can: it is kept, and its task's record."""
        with contextlib.suppress(docker.errors.NotFound):  # gone meanwhile
            current = self.client.inspect_service(service)
            mode = current["Spec"].get("Mode") or {}
            if (mode.get("Replicated") or {}).get("Replicas") == 0:
                return
            self.client.update_service(
                service,
                current["Version"]["Index"],
                mode={"Replicated": {"Replicas": 0}},
                fetch_current_spec=True,
            )


def _labelled(task: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    found = task_labels(task, None)
    return all(found.get(k) == v for k, v in labels.items())


def _on_ready_node(task: Mapping[str, Any], nodes: Mapping[str, Node]) -> bool:
    node = nodes.get(str(task.get("NodeID")))
    return node is not None and node.ready  # a node the manager no longer lists: not confirmed
