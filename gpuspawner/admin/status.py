"""`gpuspawner status`: the GPU pool on a terminal — each GPU (each MIG instance, each
shared GPU's slot), who holds it, and its load.

It asks the hub nothing: Docker's container labels say who holds which GPU
(as they tell the hub itself after a restart) and NVML, or the simulated
GPUs, give the load; the calendar in the hub's usage ledger file (read-only) says which
GPUs a drain holds out. So it works while the hub is down. For SwarmGPUSpawner it
reads the swarm's manager and the nodes' agents, as the hub does. With parking on, a GPU
may have two holders: the checkpoint driver says whose work is parked, by their
processes, as it tells the hub after a restart.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import docker
from docker.errors import DockerException

from ..core.calendar import drained_now
from ..core.errors import GPUConfigError
from ..core.gpus import GPU, Telemetry
from ..core.units import Kind, Sharing, Unit, units_of
from ..core.words import gib, server_name
from ..devices.checkpoint import CheckpointError, HostUnreachable
from ..devices.source import GPUSource, Inventory, discover
from ..engine.base import Engine, LookPast, Seen, ServerLabels
from ..engine.docker import DockerEngine
from ..records.calendar import CalendarRecord
from . import hubconfig
from .usage import DEFAULT_LEDGER

HEADERS = ("GPU", "HOLDER", "SINCE", "UTIL", "MEMORY", "TEMP", "UUID", "HEALTH")


@dataclass(frozen=True)
class Server:
    """One of gpuspawner's running servers, and the GPUs its container reaches."""

    labels: ServerLabels
    units: frozenset[str]  # the units it holds, by id (Seen.units_held, as the hub reads it)
    names: tuple[str, ...] = ()  # its container's (Seen.names)
    node: str = ""  # the machine it runs on (a swarm node's hostname); "" on one host
    parked: bool = False  # its GPU work checkpointed in host memory, as the driver says

    @property
    def name(self) -> str:
        return server_name(self.labels.user, self.labels.server)

    @property
    def shown(self) -> str:
        return f"{self.name} (parked)" if self.parked else self.name


@dataclass
class Holdings:
    """Who holds what, as running containers say."""

    servers: list[Server] = field(default_factory=list)
    external: dict[str, list[str]] = field(default_factory=dict)  # UUID → holders not ours
    unknown: set[str] = field(default_factory=set)  # devices this host does not have
    unparked: str = ""  # why parked servers cannot be told apart (the driver could not say)


@dataclass(frozen=True)
class PoolRow:
    gpu: GPU
    unit: Unit  # the GPU itself, one of its MIG instances, or one of its slots
    sample: Telemetry
    holders: tuple[str, ...]
    since: float | None
    excluded: bool
    empty: bool = False  # a GPU in MIG mode without instances: nothing to hand out
    drained: str = ""  # why a drain of the calendar holds its GPU out now


def main(args: argparse.Namespace) -> int:
    try:
        site = _site(args.config, args.simulate)
        where = _where(site, args.simulate, args.simulated_load)
        engine, source, exclude, shared, ignored = where
        inventory = discover(source, exclude, shared)
        seen = engine.containers(LookPast(ignored, args.prefix))
    except (hubconfig.ConfigError, GPUConfigError, DockerException) as error:
        print(f"gpuspawner status: {error}", file=sys.stderr)
        return 1
    excluded = inventory.excluded
    everything = sorted([*inventory.gpus, *excluded], key=lambda g: (g.node, g.index))
    holdings = scan(seen, inventory, args.prefix)
    if site is not None and site.spawner.parking:
        holdings = parked(holdings, site.spawner.checkpoint_driver, source)
    samples = source.sample(inventory.machine(node=None))
    now = time.time()
    ledger = Path(site.spawner.usage_ledger_file) if site is not None else Path(DEFAULT_LEDGER)
    drains, unread = drained_in(ledger, now)
    rows = pool_rows(everything, excluded, samples, holdings, inventory.shared, drains)
    print(render(rows, holdings, now))
    if unread:
        print(f"Drains are not shown: {unread}.")
    return 0


def drained_in(ledger: Path, now: float) -> tuple[dict[str, str], str]:
    """GPU UUID → why a drain holds it out now, from the calendar in the hub's usage ledger
    file (as the hub placed: a drained GPU is no free GPU); with why it could not be read,
    if so. No file there: no drain known, and nothing to say (the hub never ran here)."""
    try:
        record = CalendarRecord(ledger, read_only=True)
    except FileNotFoundError:
        return {}, ""
    except sqlite3.Error as error:
        return {}, f"cannot read {ledger.resolve()}: {error}"
    try:
        windows = record.since(now)
    except sqlite3.Error as error:
        return {}, f"cannot read the calendar in {ledger.resolve()}: {error}"
    finally:
        record.close()
    return {gpu: window.reason for gpu, window in drained_now(windows, now).items()}, ""


def _site(config_path: Path | None, simulate: int | None) -> hubconfig.HubConfig | None:
    """The hub's config: the one named, else ./jupyterhub_config.py where there is one."""
    path = config_path or hubconfig.DEFAULT_PATH
    return hubconfig.load(path, simulate) if config_path or path.is_file() else None


def _where(
    site: hubconfig.HubConfig | None, simulate: int | None, simulated_load: str
) -> tuple[Engine, GPUSource, list[str | int], dict[Any, Any], tuple[str, ...]]:
    """Where the servers run and the GPUs as the hub sees them: with its config's engine (a
    swarm's, for SwarmGPUSpawner), simulation, exclusions, shared GPUs and the containers it
    looks past (`ignore_gpu_containers`), if it has one."""
    if site is None:
        engine: Engine = DockerEngine(docker.from_env().api)
        return engine, hubconfig.gpu_source(site, simulate, simulated_load), [], {}, ()
    spawner = site.spawner
    engine = spawner.make_engine()
    source = spawner.make_gpu_source(engine) or hubconfig.gpu_source(site, simulate, simulated_load)
    ignored = tuple(spawner.ignore_gpu_containers)
    return engine, source, list(spawner.exclude_gpus), dict(spawner.shared_gpus), ignored


def scan(seen: Iterable[Seen], inventory: Inventory, hub: str = "") -> Holdings:
    """The running servers of `hub` (its c.DockerSpawner.prefix; "": of any hub), and every
    other running container that reaches a GPU, however it asked for it (indices are its
    node's). Who holds what is read as the hub reads it (`Seen.of_hub`, `Seen.units_held`):
    another hub's server is a holder from outside, as it is to this hub."""
    holdings = Holdings()
    units = {u.id: u for u in inventory.units}
    for container in seen:
        if not container.running:
            continue
        uuids = inventory.reached(container.reach, container.node)
        by_index, machine = (
            inventory.uuid_by_index(container.node),
            inventory.machine(container.node),
        )
        holdings.unknown |= {
            d for d in container.reach.ids if d not in by_index and d not in machine
        }
        if container.server is not None and container.of_hub(hub):
            held = frozenset(container.units_held(uuids, units))
            holdings.servers.append(Server(container.server, held, container.names, container.node))
        else:
            whose = "another hub" if container.server is not None else "not gpuspawner"
            for uuid in uuids:
                holdings.external.setdefault(uuid, []).append(f"{container.name} ({whose})")
    return holdings


def parked(holdings: Holdings, setting: str, source: GPUSource) -> Holdings:
    """The servers whose CUDA processes the checkpoint driver (`setting`, the hub's
    c.GPUSpawner.checkpoint_driver; on a swarm, each node's agent) holds checkpointed are
    marked parked; nothing is changed. Where a driver cannot be asked (on a swarm, a node's
    whose agent does not answer), its servers are not marked and `unparked` says why."""
    try:
        hosts = source.checkpoint_hosts(setting)
    except GPUConfigError as error:
        return replace(holdings, unparked=str(error))
    held: set[str] = set()
    unknown: list[str] = []  # why some hosts could not say (a node's agent down)
    for node in sorted({server.node for server in holdings.servers}):
        theirs = {str(n): list(s.names) for n, s in enumerate(holdings.servers) if s.node == node}
        try:
            held |= set(hosts(node).parked(theirs, settle=False))
        except (CheckpointError, HostUnreachable) as error:
            unknown.append(str(error))
    servers = [replace(s, parked=str(n) in held) for n, s in enumerate(holdings.servers)]
    return replace(holdings, servers=servers, unparked="; ".join(unknown))


def pool_rows(
    gpus: Sequence[GPU],
    excluded: Sequence[GPU],
    samples: Mapping[str, Telemetry],
    holdings: Holdings,
    shared: Mapping[str, Sharing] | None = None,
    drained: Mapping[str, str] | None = None,
) -> list[PoolRow]:
    """One row per unit: each whole GPU, MIG instance and shared GPU's slot; `drained`: GPU
    UUID → why a drain holds it out now."""
    rows = []
    for gpu in gpus:
        units = units_of(gpu, (shared or {}).get(gpu.uuid))
        for unit in units or (_mig_mode_empty(gpu),):
            # the one on the GPU first, then those parked (one host: parking lends a GPU)
            servers = [s for s in holdings.servers if unit.id in s.units]
            servers.sort(key=lambda server: server.parked)
            holders = [s.shown for s in servers]
            outside = holdings.external.get(unit.device, [])
            if unit.gpu != unit.device:
                outside = [*outside, *holdings.external.get(unit.gpu, [])]
            holders += list(dict.fromkeys(outside))
            since = min(
                (s.labels.since for s in servers if s.labels.since is not None), default=None
            )
            sample = samples.get(unit.device) or Telemetry()
            if unit.device != gpu.uuid:  # a MIG instance: its GPU's temperature and health
                of_gpu = samples.get(gpu.uuid) or Telemetry()
                sample = replace(
                    sample,
                    temperature_celsius=of_gpu.temperature_celsius,
                    health=sample.health or of_gpu.health,
                )
            excluded_here = gpu in excluded
            why = (drained or {}).get(gpu.uuid, "")
            rows.append(
                PoolRow(gpu, unit, sample, tuple(holders), since, excluded_here, not units, why)
            )
    return rows


def _mig_mode_empty(gpu: GPU) -> Unit:
    """A GPU in MIG mode with no instance yet: one row, holding nothing to hand out."""
    return Unit(gpu.uuid, gpu.uuid, gpu.uuid, gpu.index, gpu.model, 0, Kind.MIG, profile="none")


def render(rows: Sequence[PoolRow], holdings: Holdings, now: float) -> str:
    table = [HEADERS, *(_cells(row, now) for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADERS))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in table
    ]
    return "\n".join([*lines, "", *_summary(rows, holdings)])


def _cells(row: PoolRow, now: float) -> tuple[str, ...]:
    sample, gpu, unit = row.sample, row.gpu, row.unit
    idle = "excluded" if row.excluded else "unhealthy" if sample.health else "free"
    if idle == "free" and row.drained:
        idle = f"drained ({row.drained})"
    holder = ", ".join(row.holders) or idle
    total = gib(unit.memory_bytes) if unit.kind.facts.own_memory else gpu.memory_gib
    memory = (
        f"{sample.memory_used_bytes / 2**30:.0f}/{total} GiB"
        if sample.memory_used_bytes is not None
        else "–"
    )
    return (
        unit.column(f"{unit.node}:{unit.index}" if unit.node else str(unit.index)),
        holder,
        _since(row.since, now) if row.since is not None else "",
        _unit(sample.utilization_percent, "%"),
        memory,
        _unit(sample.temperature_celsius, "°C"),
        unit.device,
        sample.health or "ok",
    )


def _unit(value: float | None, unit: str) -> str:
    return "–" if value is None else f"{value:.0f} {unit}"


def _since(since: float, now: float) -> str:
    minutes = max(0, int(now - since) // 60)
    days, hours, minutes = minutes // 1440, minutes // 60 % 24, minutes % 60
    age = f"{days}d {hours}h" if days else f"{hours}h {minutes:02d}m" if hours else f"{minutes}m"
    return f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(since))} ({age})"


def _summary(rows: Sequence[PoolRow], holdings: Holdings) -> list[str]:
    pool = [r for r in rows if not r.excluded and not r.empty]
    free = [r for r in pool if not r.holders and not r.sample.health and not r.drained]
    kinds = {r.unit.kind for r in pool}
    if all(kind.facts.whole for kind in kinds):
        lines = [f"{len(free)} of {len(pool)} GPU(s) free."]
    else:
        parts = [
            f"{sum(r.unit.kind is kind for r in free)} of {sum(r.unit.kind is kind for r in pool)}"
            f" {kind.facts.plural}"
            for kind in Kind
            if kind in kinds
        ]
        lines = [f"{len(free)} of {len(pool)} free: {', '.join(parts)}."]
    sick = {(r.gpu.index, r.sample.health) for r in rows if r.sample.health}
    unhealthy = [f"GPU {index} ({health})" for index, health in sorted(sick)]
    if unhealthy:
        lines.append(f"Unhealthy, not handed out: {', '.join(unhealthy)}.")
    out = sorted({(r.gpu.index, r.drained) for r in pool if r.drained})
    if out:
        drained = ", ".join(f"GPU {index} ({why})" for index, why in out)
        lines.append(f"Drained by the calendar, not handed out: {drained}.")
    cpu_only = sorted(s.name for s in holdings.servers if not s.units)
    if cpu_only:
        lines.append(f"CPU-only servers: {', '.join(cpu_only)}.")
    if holdings.unparked:
        lines.append(f"Parked servers are not told apart here: {holdings.unparked}.")
    if holdings.unknown:
        lines.append(
            "Containers ask for devices this host does not have: "
            f"{', '.join(sorted(holdings.unknown))}."
        )
    return lines
