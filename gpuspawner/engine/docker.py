"""This host's Docker engine: device requests and labels going in, containers read back.

`isolate` is applied to every container the spawner creates, whatever the
config that built it, so a server gets exactly its granted GPUs and a CPU-only
server none. `DockerEngine` reads containers back for the broker, because
Docker is the ground truth: which servers run, and which GPUs every running
container can reach, however it asked for them.

The labels (`engine.labels`, their schema, which needs no Docker) are the durable record
of who holds what, with the device requests: the device request says which GPU a
container reaches, the labels which of a shared GPU's slots it holds.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import time
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import docker
import docker.errors

from ..core.errors import UnsafeContainerConfig
from ..core.pool import Grant
from ..core.reach import Reach, from_cdi, from_count, from_ids
from .base import NOTHING, LookPast, Seen
from .escapes import GPU_DEVICE, clean_path, find_escapes, forbidden_source
from .inspects import KeptInspects
from .labels import (  # the label schema, here too for what read it from here
    LABEL_GPUS as LABEL_GPUS,
)
from .labels import (
    LABEL_HUB as LABEL_HUB,
)
from .labels import (
    LABEL_JOB as LABEL_JOB,
)
from .labels import (
    LABEL_PREFIX as LABEL_PREFIX,
)
from .labels import (
    LABEL_QUOTA_GROUP as LABEL_QUOTA_GROUP,
)
from .labels import (
    LABEL_SERVER as LABEL_SERVER,
)
from .labels import (
    LABEL_SINCE as LABEL_SINCE,
)
from .labels import (
    LABEL_SPAWNER_ID as LABEL_SPAWNER_ID,
)
from .labels import (
    LABEL_TURNS as LABEL_TURNS,
)
from .labels import (
    LABEL_UNITS as LABEL_UNITS,
)
from .labels import (
    LABEL_USER as LABEL_USER,
)
from .labels import (
    LABEL_USER_ID as LABEL_USER_ID,
)
from .labels import (
    labels as labels,
)
from .labels import (
    read_labels as read_labels,
)

log = logging.getLogger("gpuspawner")

REMOVAL_WAIT_SECONDS = 30  # a removal Docker has under way: past this, the next tick asks again

NO_GPU = "void"
RUNNING_STATES = ("running", "paused", "restarting")  # what `docker ps` lists without -a
GUARDED_ENV = ("NVIDIA_VISIBLE_DEVICES", "DOCKER_RESOURCE_")
MPS_MEMORY_LIMIT = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"


def device_requests(uuids: Iterable[str]) -> list[dict[str, Any]]:
    """A device request naming each GPU by UUID: never a count, never an index."""
    ids = list(uuids)
    if not ids:
        return []
    return [{"Driver": "nvidia", "DeviceIDs": ids, "Capabilities": [["gpu"]]}]


def mps_environment(grant: Grant) -> dict[str, str]:
    """A shared GPU's per-client memory cap, for sites that run NVIDIA MPS: the CUDA client
    in the container (which sees one GPU, device 0) reads it when it starts."""
    limits = {u.mps_memory_limit for u in grant.units if u.mps_memory_limit}
    if not limits:
        return {}
    return {MPS_MEMORY_LIMIT: f"0={min(limits) // 2**20}MB"}


def isolate(create_kwargs: dict[str, Any], grant: Grant, hub: str) -> dict[str, Any]:
    """The container's create arguments, with exactly the granted GPUs and nothing else.

    UnsafeContainerConfig if the config would reach GPUs (or the host) another way.
    """
    problems = find_escapes(create_kwargs)
    if problems:
        raise UnsafeContainerConfig(
            "Refusing to start: the container config sets " + "; ".join(problems) + ". "
            "Remove it from extra_host_config, extra_create_kwargs, volumes, mounts, "
            "group_overrides or the profile's spawner_override."
        )
    host_config = dict(create_kwargs.get("host_config") or {})
    host_config["DeviceRequests"] = device_requests(grant.uuids)
    return {
        **create_kwargs,
        "host_config": host_config,
        "environment": guarded_environment(create_kwargs.get("environment"), grant),
        "labels": {**(create_kwargs.get("labels") or {}), **labels(grant, hub)},
    }


def guarded_environment(
    environment: Any, grant: Grant, name_devices: bool = False
) -> dict[str, str]:
    """A container's environment with no GPU of its own choosing: the config's
    NVIDIA_VISIBLE_DEVICES and DOCKER_RESOURCE_* dropped, "void" for a CPU-only server
    (without a device request the image's value, often "all", would reach the NVIDIA
    runtime wherever it is the default), the granted UUIDs where `name_devices` (a Swarm
    task has no device request: the runtime reads them here), and the MPS memory cap."""
    guarded = {
        name: value
        for name, value in env_dict(environment).items()
        if not name.startswith(GUARDED_ENV)
    }
    if not grant.uuids:
        guarded["NVIDIA_VISIBLE_DEVICES"] = NO_GPU
    elif name_devices:
        guarded["NVIDIA_VISIBLE_DEVICES"] = ",".join(grant.uuids)
    guarded.update(mps_environment(grant))
    return guarded


def env_dict(environment: Any) -> dict[str, str]:
    """An environment as Docker takes it (a mapping, or a list of "NAME=value") as a dict."""
    if not environment:
        return {}
    if isinstance(environment, Mapping):
        return {str(k): str(v) for k, v in environment.items()}
    return dict(item.split("=", 1) if "=" in item else (item, "") for item in environment)


def reach(inspected: Mapping[str, Any], default_runtime: str = "runc") -> Reach:
    """The GPUs a container can reach, from `docker inspect`, in every form Docker knows."""
    host = inspected.get("HostConfig") or {}
    found = Reach()
    for request in host.get("DeviceRequests") or []:
        ids = request.get("DeviceIDs") or []
        if request.get("Driver") == "cdi":
            found |= from_cdi(ids)
        elif _asks_for_gpus(request):
            found |= from_ids(ids) if ids else from_count(int(request.get("Count") or 0))
    devices = [str(d.get("PathOnHost", "")) for d in host.get("Devices") or []]
    if any(GPU_DEVICE.match(clean_path(d)) for d in devices):
        found |= Reach(every=True)
    found |= from_cdi(d for d in devices if "=" in d)
    mounted = [
        m.get("Source", "") for m in inspected.get("Mounts") or [] if m.get("Type") == "bind"
    ]
    if host.get("Privileged") or any(exposes_devices(path) for path in mounted):
        found |= Reach(every=True)
    runtime = host.get("Runtime") or default_runtime
    if runtime == "nvidia" and not host.get("DeviceRequests"):
        env = env_dict((inspected.get("Config") or {}).get("Env"))
        found |= from_ids([env.get("NVIDIA_VISIBLE_DEVICES", "")])
    return found


def _asks_for_gpus(request: Mapping[str, Any]) -> bool:
    capabilities = {c for group in request.get("Capabilities") or [] for c in group}
    return request.get("Driver") in ("", "nvidia", None) and (
        "gpu" in capabilities or request.get("Driver") == "nvidia"
    )


def exposes_devices(path: str) -> bool:
    """A bind of this host path shows the container device nodes (it is "/" or under /dev)."""
    path = clean_path(path)
    return forbidden_source(path) and (path == "/" or path.startswith("/dev"))


def seen(inspected: Mapping[str, Any], default_runtime: str = "runc") -> Seen:
    """One container from `docker inspect`, as the books need it."""
    config_labels = (inspected.get("Config") or {}).get("Labels") or {}
    server, problem = None, None
    try:
        server = read_labels(config_labels)
    except ValueError as error:
        problem = str(error)
    state = inspected.get("State") or {}
    running = bool(state.get("Running"))
    return Seen(
        id=inspected["Id"],
        name=inspected["Name"].lstrip("/"),
        image=str((inspected.get("Config") or {}).get("Image", "")),
        running=running,
        reach=reach(inspected, default_runtime),
        server=server,
        label_problem=problem,
        finished_at=None if running else moment(state.get("FinishedAt")),
        started_at=moment(state.get("StartedAt")) if running else None,
    )


def _looked_past(summary: Mapping[str, Any], look_past: LookPast) -> bool:
    """Whether `docker ps`'s line for a container already says to look past it."""
    labels = summary.get("Labels") or {}
    server_of = (
        labels.get(LABEL_HUB, "") if any(k.startswith(LABEL_PREFIX) for k in labels) else None
    )
    names = summary.get("Names") or [""]
    return look_past(str(names[0]).lstrip("/"), str(summary.get("Image", "")), server_of)


def moment(text: Any) -> float | None:
    """Docker's "2026-11-30T14:02:03.123456789Z" as seconds; None for its "never" (year 1)."""
    try:
        when = datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return when.timestamp() if when.year > 1 else None


def api_client(
    client_kwargs: Mapping[str, Any], tls_config: Mapping[str, Any] | None = None
) -> docker.APIClient:
    """A client of the engine's own, configured as DockerSpawner configures its client
    (DOCKER_HOST and friends, then `client_kwargs`, `tls_config`)."""
    kwargs: dict[str, Any] = {"version": "auto", **docker.utils.kwargs_from_env()}
    if tls_config:
        kwargs["tls"] = docker.tls.TLSConfig(**tls_config)
    kwargs.update(client_kwargs)
    return docker.APIClient(**kwargs)


class DockerEngine:
    """This host's Docker engine, through docker-py's low-level client (blocking calls)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.inspects = KeptInspects(client)

    @classmethod
    def connect(
        cls, client_kwargs: Mapping[str, Any], tls_config: Mapping[str, Any] | None = None
    ) -> DockerEngine:
        """An engine on its own client (`api_client`)."""
        return cls(api_client(client_kwargs, tls_config))

    def unreachable(self) -> dict[str, str]:
        return {}  # one host: if its Docker is down, nothing starts anywhere

    def cluster_nodes(self) -> None:
        return None  # one host

    def containers(self, look_past: LookPast = NOTHING) -> list[Seen]:
        # Docker writes the runtime into a container's HostConfig when it creates it, so the
        # engine's default runtime is asked (`docker info`, the dearest call of a monitor's
        # tick) only for a container that lacks one.
        default_runtime: str | None = None
        self.inspects.forget_changed()
        # Every running container (any may reach a GPU) and ours in any state, from one
        # `docker ps -a`: one moment's word, where two lists could each miss a container
        # that started or stopped between them.
        summaries = {
            s["Id"]: s
            for s in self.client.containers(all=True)
            if s.get("State") in RUNNING_STATES or LABEL_USER in (s.get("Labels") or {})
        }
        self.inspects.keep_only(summaries)
        found = []
        for summary in summaries.values():
            if _looked_past(summary, look_past):
                continue
            inspected = self.inspects.of(summary)
            if inspected is None:
                continue
            if default_runtime is None and not (inspected.get("HostConfig") or {}).get("Runtime"):
                default_runtime = self.client.info().get("DefaultRuntime") or "runc"
            container = seen(inspected, default_runtime or "runc")
            if look_past.skips(container):
                continue
            if container.server or container.label_problem or container.reach:
                found.append(container)
        return found

    def remove_server(self, hub: str, spawner_id: int, container_ids: tuple[str, ...] = ()) -> bool:
        filters = {"label": [f"{LABEL_HUB}={hub}", f"{LABEL_SPAWNER_ID}={spawner_id}"]}
        try:
            labelled = [c["Id"] for c in self.client.containers(all=True, filters=filters)]
            for container in {*labelled, *container_ids}:
                self._remove(container)
            return not self.client.containers(all=True, filters=filters) and not any(
                map(self._exists, container_ids)
            )
        except Exception as error:  # an API error, or no answer at all: not confirmed
            log.warning(
                "gpuspawner: Docker could not confirm server %s's container gone: %s",
                spawner_id,
                error,
            )
            return False

    def stopped_since(self, hub: str, since: float) -> dict[int, float]:
        """When the hub's servers' containers stopped from `since` until now, by server, as
        Docker's event log says (the only record of a container removed as it exits). The
        log is Docker's memory of recent events: what it no longer holds is not found."""
        filters = {"type": "container", "event": "die", "label": f"{LABEL_HUB}={hub}"}
        found: dict[int, float] = {}
        try:
            events = self.client.events(
                since=int(since), until=int(time.time()) + 1, filters=filters, decode=True
            )
            for event in events:
                attributes = (event.get("Actor") or {}).get("Attributes") or {}
                key = str(attributes.get(LABEL_SPAWNER_ID, ""))
                moment = float(event.get("timeNano") or 0) / 1e9 or float(event.get("time") or 0)
                if key.isdigit() and moment:
                    found[int(key)] = max(found.get(int(key), 0.0), moment)
        except Exception as error:  # no answer: recovery falls back to the hub's last look
            log.warning("gpuspawner: could not read Docker's events: %s", error)
        return found

    def _remove(self, container_id: str) -> None:
        """Removes a container, or waits for the removal already under way (DockerSpawner's
        own, at a stop) to end: Docker answers a second removal 409 meanwhile."""
        try:
            self.client.remove_container(container_id, force=True, v=True)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as error:
            if error.status_code != 409 or "already in progress" not in str(error):
                raise
            with contextlib.suppress(docker.errors.NotFound):  # gone before the wait began
                self.client.wait(container_id, timeout=REMOVAL_WAIT_SECONDS, condition="removed")

    def _exists(self, container_id: str) -> bool:
        try:
            self.client.inspect_container(container_id)
        except docker.errors.NotFound:
            return False
        return True


def bridge_gateway(client: Any) -> str:
    """The host's address on Docker's default bridge: where containers reach the hub."""
    config = client.networks.get("bridge").attrs["IPAM"]["Config"][0]
    # dockerd 20.10 leaves Gateway out of the default bridge's IPAM config; it is the first host.
    return config.get("Gateway") or str(next(ipaddress.ip_network(config["Subnet"]).hosts()))
