"""`gpuspawner status`: the GPU pool on a terminal — each GPU, who holds it, and its load.

It asks the hub nothing: Docker's container labels say who holds which GPU
(as they tell the hub itself after a restart) and NVML, or the simulated
GPUs, give the load. So it works while the hub is down.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import docker
from docker.errors import DockerException

from ..core.errors import GPUConfigError
from ..core.gpus import GPU, Telemetry
from ..core.words import server_name
from ..devices.source import GPUSource, discover
from ..engine.base import Seen, ServerLabels
from ..engine.docker import DockerEngine
from . import hubconfig

HEADERS = ("GPU", "HOLDER", "SINCE", "UTIL", "MEMORY", "TEMP", "UUID", "HEALTH")


@dataclass(frozen=True)
class Server:
    """One of gpuspawner's running servers, and the GPUs its container reaches."""

    labels: ServerLabels
    uuids: frozenset[str]

    @property
    def name(self) -> str:
        return server_name(self.labels.user, self.labels.server)


@dataclass
class Holdings:
    """Who holds what, as running containers say."""

    servers: list[Server] = field(default_factory=list)
    external: dict[str, list[str]] = field(default_factory=dict)  # UUID → containers not ours
    unknown: set[str] = field(default_factory=set)  # devices this host does not have


@dataclass(frozen=True)
class PoolRow:
    gpu: GPU
    sample: Telemetry
    holders: tuple[str, ...]
    since: float | None
    excluded: bool


def main(args: argparse.Namespace) -> int:
    try:
        source, exclude = _gpu_source(args.config, args.simulate, args.simulated_load)
        inventory = discover(source, exclude)
        engine = DockerEngine(docker.from_env().api)
        seen = engine.containers()
    except (hubconfig.ConfigError, GPUConfigError, DockerException) as error:
        print(f"gpuspawner status: {error}", file=sys.stderr)
        return 1
    excluded = inventory.excluded
    everything = sorted([*inventory.gpus, *excluded], key=lambda g: g.index)
    holdings = scan(seen, inventory.uuid_by_index(), [g.uuid for g in everything], args.prefix)
    rows = pool_rows(everything, excluded, source.sample([g.uuid for g in everything]), holdings)
    print(render(rows, holdings, time.time()))
    return 0


def _gpu_source(
    config_path: Path | None, simulate: int | None, simulated_load: str
) -> tuple[GPUSource, list[str | int]]:
    """The GPUs as the hub sees them: with its config's simulation and exclusions, if it has one."""
    path = config_path or hubconfig.DEFAULT_PATH
    site = hubconfig.load(path, simulate) if config_path or path.is_file() else None
    exclude = list(site.spawner.exclude_gpus) if site else []
    return hubconfig.gpu_source(site, simulate, simulated_load), exclude


def scan(
    seen: Iterable[Seen], by_index: Mapping[str, str], machine: Sequence[str], prefix: str = ""
) -> Holdings:
    """Our running servers (those whose container names start with `prefix`) and every other
    running container that reaches a GPU, however it asked for it."""
    holdings = Holdings()
    for container in seen:
        if not container.running:
            continue
        uuids = container.reach.uuids(by_index, machine)
        holdings.unknown |= {
            d for d in container.reach.ids if d not in by_index and d not in machine
        }
        if container.server is None:
            for uuid in uuids:
                holdings.external.setdefault(uuid, []).append(container.name)
        elif container.name.startswith(prefix):
            holdings.servers.append(Server(container.server, uuids))
    return holdings


def pool_rows(
    gpus: Sequence[GPU],
    excluded: Sequence[GPU],
    samples: Mapping[str, Telemetry],
    holdings: Holdings,
) -> list[PoolRow]:
    rows = []
    for gpu in gpus:
        servers = [s for s in holdings.servers if gpu.uuid in s.uuids]
        holders = [s.name for s in servers]
        holders += [f"{name} (not gpuspawner)" for name in holdings.external.get(gpu.uuid, [])]
        since = min((s.labels.since for s in servers if s.labels.since is not None), default=None)
        rows.append(PoolRow(gpu, samples[gpu.uuid], tuple(holders), since, gpu in excluded))
    return rows


def render(rows: Sequence[PoolRow], holdings: Holdings, now: float) -> str:
    table = [HEADERS, *(_cells(row, now) for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADERS))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in table
    ]
    return "\n".join([*lines, "", *_summary(rows, holdings)])


def _cells(row: PoolRow, now: float) -> tuple[str, ...]:
    sample, gpu = row.sample, row.gpu
    idle = "excluded" if row.excluded else "unhealthy" if sample.health else "free"
    holder = ", ".join(row.holders) or idle
    memory = (
        f"{sample.memory_used_bytes / 2**30:.0f}/{gpu.memory_gib} GiB"
        if sample.memory_used_bytes is not None
        else "–"
    )
    return (
        str(gpu.index),
        holder,
        _since(row.since, now) if row.since is not None else "",
        _unit(sample.utilization_percent, "%"),
        memory,
        _unit(sample.temperature_celsius, "°C"),
        gpu.uuid,
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
    free = [r for r in rows if not r.holders and not r.excluded and not r.sample.health]
    pool = [r for r in rows if not r.excluded]
    lines = [f"{len(free)} of {len(pool)} GPU(s) free."]
    unhealthy = [f"GPU {r.gpu.index} ({r.sample.health})" for r in rows if r.sample.health]
    if unhealthy:
        lines.append(f"Unhealthy, not handed out: {', '.join(unhealthy)}.")
    cpu_only = sorted(s.name for s in holdings.servers if not s.uuids)
    if cpu_only:
        lines.append(f"CPU-only servers: {', '.join(cpu_only)}.")
    if holdings.unknown:
        lines.append(
            "Containers ask for devices this host does not have: "
            f"{', '.join(sorted(holdings.unknown))}."
        )
    return lines
