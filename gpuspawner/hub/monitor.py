"""The broker's eyes on the machine: every few seconds, Docker and NVML, read off the event loop.

Each tick reads, in the broker's worker thread, the containers, one telemetry
sample per GPU and MIG instance, the GPUs' layout (an admin may have changed
a MIG layout) and which container each GPU process belongs to; then, back on
the hub's loop, follows the layout, keeps out of the pool what is unhealthy or
used outside JupyterHub, retries removals Docker has not confirmed, and hands
the observation to listeners (activity and culling). A failing read is logged
and the tick skipped; it never stops the hub or a server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from tornado.ioloop import PeriodicCallback

from ..core.gpus import Telemetry
from ..core.units import Kind, Unit
from ..engine import processes
from ..engine.base import Seen
from .broker import Broker


@dataclass(frozen=True)
class Observation:
    telemetry: dict[str, Telemetry]
    containers: list[Seen] | None  # None: Docker did not answer this time
    docker_error: str | None = None
    owners: dict[int, str] = field(default_factory=dict)  # GPU process → its container
    layout: dict[str, tuple[Unit, ...]] | None = None  # None: not read this time


Listener = Callable[[Observation], Awaitable[None] | None]
Owners = Callable[[Iterable[int]], dict[int, str]]


@dataclass
class Monitor:
    broker: Broker
    log: logging.Logger
    interval_seconds: float = 10.0
    avoid_foreign_processes: bool = False
    listeners: list[Listener] = field(default_factory=list)
    owners: Owners = processes.owners  # which container runs a PID (the host's /proc)

    def __post_init__(self) -> None:
        self._callback: PeriodicCallback | None = None

    def start(self) -> None:
        self._callback = PeriodicCallback(self.tick, self.interval_seconds * 1000)
        self._callback.start()
        self.broker.stoppables.append(self.stop)

    def stop(self) -> None:
        if self._callback is not None:
            self._callback.stop()

    async def tick(self) -> None:
        try:
            loop = asyncio.get_running_loop()
            observation = await loop.run_in_executor(self.broker.executor, self.observe)
            self.apply(observation)
            for listener in self.listeners:
                result = listener(observation)
                if result is not None:
                    await result
        except Exception:
            self.log.exception("gpuspawner: monitor tick failed; trying again next tick")

    def observe(self) -> Observation:
        """Blocking reads, for a worker thread."""
        broker = self.broker
        layout = None
        try:
            layout = broker.site.layout_now()
        except Exception as error:
            self.log.warning("gpuspawner: could not read the GPUs' layout: %s", error)
        try:
            telemetry = broker.site.source.sample(broker.pool.watched())
        except Exception as error:
            self.log.warning("gpuspawner: could not read GPU telemetry: %s", error)
            telemetry = {}
        owners = self.owners(pid for sample in telemetry.values() for pid in sample.processes)
        try:
            containers = broker.engine.containers()
        except Exception as error:
            return Observation(telemetry, None, str(error), owners, layout)
        return Observation(telemetry, containers, None, owners, layout)

    def apply(self, observation: Observation) -> None:
        if observation.layout is not None:
            self.broker.follow_layout(observation.layout)
        self.broker.telemetry = observation.telemetry
        self._follow_health(observation.telemetry)
        if observation.containers is None:
            self.log.warning(
                "gpuspawner: Docker did not answer (%s); GPUs used outside JupyterHub "
                "are as last seen",
                observation.docker_error,
            )
            return
        self.broker.note_containers(
            observation.containers, self._foreign_processes(observation.telemetry)
        )

    def _follow_health(self, telemetry: dict[str, Telemetry]) -> None:
        """Mark GPUs and MIG instances unhealthy and healthy again as NVML says. A MIG
        instance reports its GPU's health too; only its own (it vanished) is its own mark."""
        pool = self.broker.pool
        for device, sample in telemetry.items():
            health = sample.health
            unit = pool.unit(device)
            if unit is not None and unit.kind is Kind.MIG:
                gpu = telemetry.get(unit.gpu)
                health = None if gpu is not None and gpu.health == health else health
            was = pool.marked_unhealthy(device)
            if health == was:
                continue
            if health:
                pool.mark_unhealthy(device, health)
                names = [g.holder.name for g in pool.holders_on(device)]
                verb = "holds it and keeps" if len(names) == 1 else "hold it and keep"
                held = f"; {', '.join(names)} {verb} running" if names else ""
                self.log.warning(
                    "gpuspawner: %s is unhealthy (%s): no new server gets it%s",
                    device,
                    health,
                    held,
                )
            else:
                pool.mark_healthy(device)
                self.log.info("gpuspawner: %s is healthy again (was: %s)", device, was)

    def _foreign_processes(self, telemetry: dict[str, Telemetry]) -> dict[str, str]:
        """Free GPUs and MIG instances with compute processes: no server of ours runs them."""
        if not self.avoid_foreign_processes:
            return {}
        pool = self.broker.pool
        return {
            device: f"processes {', '.join(map(str, sample.processes))} outside JupyterHub"
            for device, sample in telemetry.items()
            if sample.processes and not pool.holders_on(device)
        }
