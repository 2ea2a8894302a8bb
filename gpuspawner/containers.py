"""Everything Docker-specific about GPUs: device requests, labels, env, and reading them back.

`isolate` is applied to every container the spawner creates, whatever the
config that built it, so a server gets exactly its granted GPUs and a
CPU-only server none. `scan` reads running containers back, because Docker
is the ground truth after a hub restart.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import docker.errors

from .pool import Grant, Holder

LABEL_PREFIX = "gpuspawner."
LABEL_USER = LABEL_PREFIX + "user"
LABEL_SERVER = LABEL_PREFIX + "server"
LABEL_GPUS = LABEL_PREFIX + "gpus"
LABEL_QUOTA_GROUP = LABEL_PREFIX + "quota-group"
LABEL_SINCE = LABEL_PREFIX + "since"

NO_GPU = "void"
GUARDED_ENV = re.compile(r"^(NVIDIA_VISIBLE_DEVICES|DOCKER_RESOURCE_\w*)$")
GPU_DEVICE_NODE = re.compile(r"(^|[:/])(nvidia|dri)")


class UnsafeContainerConfig(ValueError):
    """The admin's config would expose GPUs outside the grant."""


def device_requests(uuids: Iterable[str]) -> list[dict[str, Any]]:
    """A device request naming each GPU by UUID: never a count, never an index."""
    ids = list(uuids)
    if not ids:
        return []
    return [{"Driver": "nvidia", "DeviceIDs": ids, "Capabilities": [["gpu"]]}]


def labels(grant: Grant) -> dict[str, str]:
    holder = grant.holder
    return {
        LABEL_USER: holder.user,
        LABEL_SERVER: holder.server,
        LABEL_GPUS: ",".join(grant.uuids),
        LABEL_QUOTA_GROUP: holder.quota_group or "",
        LABEL_SINCE: f"{grant.since:.3f}",
    }


def isolate(create_kwargs: dict[str, Any], grant: Grant) -> dict[str, Any]:
    """The container's create arguments, with exactly the granted GPUs and nothing else."""
    host_config = dict(create_kwargs.get("host_config") or {})
    _refuse_gpu_escapes(host_config)
    host_config["DeviceRequests"] = device_requests(grant.uuids)
    environment = {
        name: value
        for name, value in _env_dict(create_kwargs.get("environment")).items()
        if not GUARDED_ENV.match(name)
    }
    if not grant.uuids:
        # Without a device request the image's NVIDIA_VISIBLE_DEVICES (often "all")
        # would reach the NVIDIA runtime wherever it is Docker's default.
        environment["NVIDIA_VISIBLE_DEVICES"] = NO_GPU
    return {
        **create_kwargs,
        "host_config": host_config,
        "environment": environment,
        "labels": {**(create_kwargs.get("labels") or {}), **labels(grant)},
    }


def _refuse_gpu_escapes(host_config: Mapping[str, Any]) -> None:
    problems = []
    if host_config.get("Privileged"):
        problems.append("privileged=True (a privileged container sees every GPU)")
    if host_config.get("Runtime") not in (None, "", "runc"):
        problems.append(f"runtime={host_config['Runtime']!r} (GPUs are given by device requests)")
    if host_config.get("DeviceRequests"):
        problems.append("device_requests (gpuspawner sets them from the pool)")
    devices = [d for d in host_config.get("Devices") or [] if GPU_DEVICE_NODE.search(str(d))]
    if devices:
        problems.append(f"devices {devices} (GPU device nodes)")
    if host_config.get("DeviceCgroupRules"):
        problems.append("device_cgroup_rules")
    sources = [str(b).split(":", 1)[0] for b in host_config.get("Binds") or []]
    sources += [str(m.get("Source", "")) for m in host_config.get("Mounts") or []]
    dev_mounts = sorted({s for s in sources if s == "/dev" or s.startswith("/dev/")})
    if dev_mounts:
        problems.append(f"mounts of {', '.join(dev_mounts)}")
    if problems:
        raise UnsafeContainerConfig(
            "Refusing to start: the container config sets " + "; ".join(problems) + ". "
            "Remove it from extra_host_config, group_overrides or the profile's spawner_override."
        )


def _env_dict(environment: Any) -> dict[str, str]:
    if not environment:
        return {}
    if isinstance(environment, Mapping):
        return dict(environment)
    return dict(item.split("=", 1) if "=" in item else (item, "") for item in environment)


@dataclass(frozen=True)
class RunningServer:
    """A running container of ours, read back from its labels and device request."""

    holder: Holder
    uuids: tuple[str, ...]
    since: float | None
    container: str


def requested_devices(inspected: Mapping[str, Any]) -> list[str]:
    """The device IDs (UUIDs or indices) a container's device requests name."""
    requests = (inspected.get("HostConfig") or {}).get("DeviceRequests") or []
    return [str(i) for request in requests for i in request.get("DeviceIDs") or []]


def read_server(inspected: Mapping[str, Any], by_index: Mapping[str, str]) -> RunningServer | None:
    """Our server in `inspected`, or None for a container that is not ours."""
    container_labels = (inspected.get("Config") or {}).get("Labels") or {}
    if LABEL_USER not in container_labels:
        return None
    since = container_labels.get(LABEL_SINCE)
    holder = Holder(
        user=container_labels[LABEL_USER],
        server=container_labels.get(LABEL_SERVER, ""),
        quota_group=container_labels.get(LABEL_QUOTA_GROUP) or None,
    )
    uuids = tuple(by_index.get(d, d) for d in requested_devices(inspected))
    name = inspected["Name"].lstrip("/")
    return RunningServer(holder, uuids, float(since) if since else None, name)


def running_gpu_containers(client: Any) -> list[dict[str, Any]]:
    """Every running container that holds GPUs or is ours, inspected (blocking)."""
    found = []
    for summary in client.containers():
        try:
            inspected = client.inspect_container(summary["Id"])
        except docker.errors.NotFound:
            continue  # gone between the list and the inspect
        labels = inspected["Config"].get("Labels") or {}
        if requested_devices(inspected) or LABEL_USER in labels:
            found.append(inspected)
    return found


def bridge_gateway(client: Any) -> str:
    """The host's address on Docker's default bridge: where containers reach the hub."""
    config = client.networks.get("bridge").attrs["IPAM"]["Config"][0]
    # dockerd 20.10 leaves Gateway out of the default bridge's IPAM config; it is the first host.
    return config.get("Gateway") or str(next(ipaddress.ip_network(config["Subnet"]).hosts()))
