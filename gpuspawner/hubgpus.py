"""The one GPU pool of a hub process, with the config it was built from.

JupyterHub discards Spawner instances after a stop, so the pool lives here,
built once per process from the spawner's config and then brought in line
with Docker, the ground truth: a GPU named in a running container's device
request is never handed out again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import containers
from .devices import GPU, GPUSource, NvmlSource, SimulatedSource, Telemetry, discover
from .limits import LimitsTable
from .pool import Pool
from .profiles import Profile, parse_profiles


class GPUConfig(Protocol):
    """The GPUSpawner traits the pool is built from."""

    simulate_gpus: int
    simulated_load_file: str
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
    recovered: bool = False
    telemetry: dict[str, Telemetry] = field(default_factory=dict)  # the monitor's latest

    @classmethod
    def from_config(cls, config: GPUConfig, source: GPUSource | None = None) -> HubGPUs:
        """Check the whole GPU config; any error here must stop the hub."""
        if source is None:
            source = (
                SimulatedSource(config.simulate_gpus, load_file=config.simulated_load_file)
                if config.simulate_gpus
                else NvmlSource()
            )
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

    def recover(
        self, running: list[dict[str, Any]], known: set[tuple[str, str]], log: logging.Logger
    ) -> None:
        """At hub start: adopt the GPUs of our running servers, and note everyone else's.

        `known` are the (user, server) pairs the hub's database has running; a
        labelled container it does not know (another hub's, or a leftover) is
        kept out of the pool as used outside, not adopted. Adoption happens
        only here: later, the hub's own polls and stops keep the books, and a
        periodic adoption could resurrect a server that just stopped.
        """
        by_index = self.uuid_by_index()
        for inspected in running:
            server = containers.read_server(inspected, by_index)
            if server is None or (server.holder.user, server.holder.server) not in known:
                continue
            grant = self.pool.adopt(server.holder, server.uuids, server.since)
            log.info(
                "gpuspawner: %s keeps GPU(s) %s (running container %s)",
                server.holder.key,
                ", ".join(grant.uuids) or "none",
                server.container,
            )
        self.note_external(running, {}, log)
        self.recovered = True

    def note_external(
        self, running: list[dict[str, Any]], foreign_processes: dict[str, str], log: logging.Logger
    ) -> None:
        """Keep GPUs used outside this hub out of the pool: in any container whose device
        request (by UUID or index) names them, unless it is the server the pool gave
        them to; and in `foreign_processes` (uuid → who)."""
        by_index = self.uuid_by_index()
        external = dict(foreign_processes)
        for inspected in running:
            name = inspected["Name"].lstrip("/")
            server = containers.read_server(inspected, by_index)
            grant = self.pool.grant_of(server.holder.key) if server else None
            for device in containers.requested_devices(inspected):
                uuid = by_index.get(device, device)
                if grant is None or uuid not in grant.uuids:
                    external[uuid] = f"container {name}"
        before = {u: self.pool.external_user(u) for u in self.pool.uuids}
        self.pool.set_external(external)
        for uuid in self.pool.uuids:
            now = self.pool.external_user(uuid)
            if now != before[uuid]:
                if now:
                    log.warning("gpuspawner: %s is used outside JupyterHub (%s)", uuid, now)
                else:
                    log.info("gpuspawner: %s is no longer used outside JupyterHub", uuid)


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
