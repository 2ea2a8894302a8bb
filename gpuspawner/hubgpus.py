"""The one GPU pool of a hub process, with the config it was built from.

JupyterHub discards Spawner instances after a stop, so the pool lives here,
built once per process from the spawner's config and then brought in line
with Docker, the ground truth: a GPU named in a running container's device
request is never handed out again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import containers
from .devices import GPU, GPUSource, NvmlSource, SimulatedSource, discover
from .limits import LimitsTable
from .pool import Pool
from .profiles import Profile, parse_profiles


class GPUConfig(Protocol):
    """The GPUSpawner traits the pool is built from."""

    simulate_gpus: int
    exclude_gpus: list[Any]
    placement: str
    profiles: list[Any]
    group_limits: dict[str, Any]
    default_limits: dict[str, Any]
    limit_admins: bool


@dataclass
class HubGPUs:
    gpus: list[GPU]
    excluded: list[GPU]
    pool: Pool
    profiles: list[Profile]
    limits: LimitsTable
    source: GPUSource
    recovered: bool = field(default=False)

    @classmethod
    def from_config(cls, config: GPUConfig, source: GPUSource | None = None) -> HubGPUs:
        """Check the whole GPU config; any error here must stop the hub."""
        if source is None:
            source = SimulatedSource(config.simulate_gpus) if config.simulate_gpus else NvmlSource()
        gpus, excluded = discover(source, config.exclude_gpus)
        profiles = parse_profiles(config.profiles, len(gpus))
        limits = LimitsTable.parse(
            config.group_limits,
            config.default_limits,
            [p.slug for p in profiles],
            config.limit_admins,
        )
        pool = Pool([g.uuid for g in gpus], policy=config.placement)
        return cls(gpus, excluded, pool, profiles, limits, source)

    def uuid_by_index(self) -> dict[str, str]:
        return {str(g.index): g.uuid for g in (*self.gpus, *self.excluded)}

    def recover(self, inspected_containers: Iterable[dict[str, Any]], log: logging.Logger) -> None:
        """Adopt the GPUs of our running servers; mark GPUs used by other containers busy."""
        by_index = self.uuid_by_index()
        external: dict[str, str] = {}
        for inspected in inspected_containers:
            server = containers.read_server(inspected, by_index)
            if server is None:
                name = inspected["Name"].lstrip("/")
                for device in containers.requested_devices(inspected):
                    external[by_index.get(device, device)] = f"container {name}"
                continue
            grant = self.pool.adopt(server.holder, server.uuids, server.since)
            log.info(
                "gpuspawner: %s keeps GPU(s) %s (running container %s)",
                server.holder.key,
                ", ".join(grant.uuids) or "none",
                server.container,
            )
        self.pool.set_external(external)
        if external:
            log.warning(
                "gpuspawner: GPU(s) used outside JupyterHub, kept out of the pool: %s",
                ", ".join(f"{u} ({who})" for u, who in sorted(external.items())),
            )
        self.recovered = True


_current: HubGPUs | None = None


def current(config: GPUConfig | None = None) -> HubGPUs:
    """This process's HubGPUs, built on first use (which needs the config)."""
    global _current
    if _current is None:
        if config is None:
            raise RuntimeError("the GPU pool is built by the first GPUSpawner, not here")
        _current = HubGPUs.from_config(config)
    return _current


def forget() -> None:
    """Drop this process's pool (tests that build several hubs in one process)."""
    global _current
    _current = None
