"""One-off tasks on a chosen node of a swarm, from its manager: the doctor's look at shared
storage on each node, and a home's copy from one node to another.

A node's own engine is not reachable from the hub, so the hub asks the manager for a
service of one task, pinned to the node, never restarted, and reads what became of it:
Swarm gives no event for a task's state, so it is polled. Each service is removed once
its answer is read (or none came in time).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from docker.types import ContainerSpec, EndpointSpec, Mount, Placement, RestartPolicy, TaskTemplate

LABEL = "gpuspawner.task"  # on each such service: what it is for
FINISHED = {"complete", "failed", "rejected", "shutdown", "orphaned"}
POLL = 0.5  # seconds


@contextmanager
def task_on(
    client: Any,
    node_id: str,
    image: str,
    command: Sequence[str],
    mounts: Sequence[Mount],
    purpose: str,
    user: str = "0",
    publish: int | None = None,
) -> Iterator[str]:
    """A service of one task on the node (its ID), removed on leaving. `client`: a docker
    APIClient of the manager; `publish`: a port of the task's, published on its node at a
    port Swarm picks (`published_port`)."""
    ports = {None: (publish, "tcp", "host")} if publish else None
    service = client.create_service(
        TaskTemplate(
            ContainerSpec(image, list(command), user=user, mounts=list(mounts)),
            restart_policy=RestartPolicy("none"),
            placement=Placement(constraints=[f"node.id=={node_id}"]),
        ),
        name=f"gpuspawner-{purpose}-{secrets.token_hex(4)}",
        labels={LABEL: purpose},
        endpoint_spec=EndpointSpec(mode="dnsrr", ports=ports) if ports else None,
    )
    try:
        yield service["ID"]
    finally:
        client.remove_service(service["ID"])


def outcome(client: Any, service_id: str, timeout: float) -> int | str:
    """The task's exit status once it ended (0 when it completed), or why it never ran or
    gave no answer in `timeout` seconds (a missing bind source is "rejected")."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for task in client.tasks(filters={"service": service_id}):
            status, state = task["Status"], task["Status"]["State"]
            code = (status.get("ContainerStatus") or {}).get("ExitCode")
            if state == "complete":
                return 0
            if state == "failed" and isinstance(code, int) and code:
                return code
            if state in FINISHED:
                return str(status.get("Err") or state)
        time.sleep(POLL)
    return f"no answer within {timeout:.0f} s"


def published_port(client: Any, service_id: str, target: int, timeout: float) -> int | str:
    """The port on its node where the running task's `target` port is published, or why
    there is none (it ended, or did not run in `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for task in client.tasks(filters={"service": service_id}):
            status = task["Status"]
            if status["State"] in FINISHED:
                return str(status.get("Err") or status["State"])
            ports = (status.get("PortStatus") or {}).get("Ports") or []
            found = [p["PublishedPort"] for p in ports if p.get("TargetPort") == target]
            if status["State"] == "running" and found:
                return int(found[0])
        time.sleep(POLL)
    return f"not running within {timeout:.0f} s"
