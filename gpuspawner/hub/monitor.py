"""The broker's eyes on the machine: every few seconds, Docker and NVML, read off the event loop.

Each tick reads the containers and one telemetry sample per GPU in the
broker's worker thread, then, back on the hub's loop, keeps out of the pool
the GPUs that are unhealthy or used outside JupyterHub, retries removals
Docker has not confirmed, and hands the observation to listeners (activity
and culling). A failing read is logged and the tick skipped; it never stops
the hub or a server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from tornado.ioloop import PeriodicCallback

from ..core.culling import Busyness
from ..core.gpus import Telemetry
from ..engine.base import Seen
from .broker import Broker


@dataclass(frozen=True)
class Observation:
    telemetry: dict[str, Telemetry]
    containers: list[Seen] | None  # None: Docker did not answer this time
    docker_error: str | None = None
    busy: dict[int, bool | None] = field(default_factory=dict)  # by grant key, from `apply`


Listener = Callable[[Observation], Awaitable[None] | None]
PRUNE_EVERY = 3600.0  # seconds between two drops of ledger rows past the retention


@dataclass
class Monitor:
    broker: Broker
    log: logging.Logger
    interval_seconds: float = 10.0
    avoid_foreign_processes: bool = False
    busyness: Busyness = field(default_factory=Busyness)
    usage_retention_seconds: float = 180 * 24 * 3600.0
    listeners: list[Listener] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._callback: PeriodicCallback | None = None
        self._pruned = float("-inf")

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
        try:
            telemetry = broker.site.source.sample(broker.pool.uuids)
        except Exception as error:
            self.log.warning("gpuspawner: could not read GPU telemetry: %s", error)
            telemetry = {}
        try:
            containers = broker.engine.containers()
        except Exception as error:
            return Observation(telemetry, None, str(error))
        return Observation(telemetry, containers)

    def apply(self, observation: Observation) -> None:
        broker = self.broker
        broker.telemetry = observation.telemetry
        self._follow_health(observation.telemetry)
        for grant in broker.pool.grants():
            if not grant.stopping:
                samples = (observation.telemetry.get(u) for u in grant.uuids)
                observation.busy[grant.key] = self.busyness.of(samples)
        if broker.ledger is not None:
            now = broker.clock()
            broker.ledger.seen(now, observation.busy)
            if now - self._pruned >= PRUNE_EVERY:
                broker.ledger.forget_before(now - self.usage_retention_seconds)
                self._pruned = now
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
        pool = self.broker.pool
        for uuid, sample in telemetry.items():
            was = pool.unhealthy_reason(uuid)
            if sample.health == was:
                continue
            if sample.health:
                pool.mark_unhealthy(uuid, sample.health)
                grant = pool.holder_of(uuid)
                held = f"; {grant.holder.name} holds it and keeps running" if grant else ""
                self.log.warning(
                    "gpuspawner: %s is unhealthy (%s): no new server gets it%s",
                    uuid,
                    sample.health,
                    held,
                )
            else:
                pool.mark_healthy(uuid)
                self.log.info("gpuspawner: %s is healthy again (was: %s)", uuid, was)

    def _foreign_processes(self, telemetry: dict[str, Telemetry]) -> dict[str, str]:
        """Free GPUs with compute processes: no server of ours runs them."""
        if not self.avoid_foreign_processes:
            return {}
        pool = self.broker.pool
        return {
            uuid: f"processes {', '.join(map(str, sample.processes))} outside JupyterHub"
            for uuid, sample in telemetry.items()
            if sample.processes and pool.holder_of(uuid) is None
        }
