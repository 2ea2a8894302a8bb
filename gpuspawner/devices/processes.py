"""Which container a process on a GPU belongs to: what tells a shared GPU's servers apart.

NVML lists the processes on a GPU by host PID. Docker runs each container in a
cgroup named after the container's id, and `/proc/<pid>/cgroup` names that
cgroup: `/docker/<id>` (cgroupfs driver) or `/system.slice/docker-<id>.scope`
(systemd driver), on cgroup v1 and v2 alike. The hub must see the host's PIDs
(run it on the host, or with the host's PID namespace); a PID it cannot read
belongs to no container it knows, which never counts as idle.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

CONTAINER_ID = re.compile(r"(?:^|[/-])([0-9a-f]{64})(?:\.scope)?$")


def container_of(pid: int, proc: Path = Path("/proc")) -> str | None:
    """The id of the container running `pid`, or None (not in a container, or unreadable)."""
    try:
        lines = (proc / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        found = CONTAINER_ID.search(line.rpartition(":")[2])
        if found:
            return found.group(1)
    return None


def owners(pids: Iterable[int], proc: Path = Path("/proc")) -> dict[int, str]:
    """Container id by PID, for the PIDs in a container."""
    found = {pid: container_of(pid, proc) for pid in set(pids)}
    return {pid: container for pid, container in found.items() if container}


def container_pids(
    containers: Mapping[str, Iterable[str]], proc: Path = Path("/proc")
) -> dict[str, list[int]]:
    """The host PIDs each container runs (by a key, from its names and ids; only its id is
    read here), from every process the host lists."""
    ids = {name: key for key, names in containers.items() for name in names}
    found: dict[str, list[int]] = {key: [] for key in containers}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            key = ids.get(container_of(int(entry.name), proc) or "")
            if key is not None:
                found[key].append(int(entry.name))
    return found
