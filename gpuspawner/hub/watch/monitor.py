"""The broker's eyes on the machine: every few seconds, Docker and NVML, read off the event loop.

Each tick reads, in the broker's worker thread, the containers, one telemetry
sample per GPU and MIG instance, the GPUs' layout (an admin may have changed
a MIG layout) and which container each GPU process belongs to; then, back on
the hub's loop, follows the layout, decides which servers' GPUs are busy
(recorded in the usage ledger), retries the removals Docker has not confirmed
(even when it could not list the containers), keeps out of the pool what is
unhealthy or used outside JupyterHub, lets the waiting line start whoever now
fits, and hands the observation to listeners (activity and culling). A failing
read is logged and the rest of the tick skipped; it never stops the hub or a
server.

A whole GPU or MIG instance is busy by its own sample. A slot of a shared GPU
is busy by its server's own processes on that GPU (NVML lists them by PID; the
observation says which container runs each), so one busy server does not keep
its idle neighbours from being culled, nor count as their busy time.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from tornado.ioloop import PeriodicCallback

from ...core.culling import Busyness, combined
from ...core.gpus import Telemetry
from ...core.pool import Grant
from ...core.units import Unit
from ...core.words import duration
from ...devices import processes
from ...engine.base import Seen
from ..books.broker import Broker


@dataclass(frozen=True)
class Observation:
    telemetry: dict[str, Telemetry]
    containers: list[Seen] | None  # None: Docker did not answer this time
    docker_error: str | None = None
    owners: dict[int, str] = field(default_factory=dict)  # GPU process → its container
    layout: dict[str, tuple[Unit, ...]] | None = None  # None: not read this time
    busy: Mapping[int, bool | None] = field(default_factory=dict)  # by grant key, from `apply`
    unreachable: dict[str, str] | None = None  # machines no server may go to, and why
    at: float = math.inf  # the broker's clock when the reads began (inf: after all it knows)


Listener = Callable[[Observation], Awaitable[None] | None]
Owners = Callable[[Iterable[int]], dict[int, str]]
LIST = "list"  # the monitor's question to the engine, among those it may leave unanswered
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
    owners: Owners = processes.owners  # which container runs a PID (the host's /proc)

    def __post_init__(self) -> None:
        self._callback: PeriodicCallback | None = None
        self._pruned = float("-inf")

    def start(self) -> None:
        self._callback = PeriodicCallback(self.tick, self.interval_seconds * 1000)
        self._callback.start()
        self.broker.on_stop(self.stop)

    def stop(self) -> None:
        if self._callback is not None:
            self._callback.stop()

    async def tick(self) -> None:
        try:
            loop = asyncio.get_running_loop()
            seen = await loop.run_in_executor(self.broker.executor, self.observe)
            observation = self.apply(seen)
            self.broker.pass_line()  # a GPU back from ill health or outside use; new estimates
            for listener in self.listeners:
                result = listener(observation)
                if result is not None:
                    await result
        except Exception:
            self.log.exception("gpuspawner: monitor tick failed; trying again next tick")

    def observe(self) -> Observation:
        """Blocking reads, for a worker thread."""
        broker = self.broker
        at = broker.clock()
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
            containers = broker.engine.containers(broker.look_past)
            unreachable = broker.engine.unreachable()
        except Exception as error:
            return Observation(telemetry, None, str(error), owners, layout, at=at)
        return Observation(
            telemetry, containers, None, owners, layout, unreachable=unreachable, at=at
        )

    def apply(self, observation: Observation) -> Observation:
        """What was seen, onto the broker's books; the observation with its servers' busy
        verdicts, for the listeners. Each step on its own: one that fails (a full disk
        under the ledger) is logged and costs only itself, never the removals or the watch
        for outside use."""
        busy: dict[int, bool | None] = {}
        steps = (self._follow_machines, self._follow_gpus, self._record_use)
        for step in (*steps, self._follow_containers):
            try:
                step(observation, busy)
            except Exception:
                self.log.exception("gpuspawner: monitor step %s failed", step.__name__)
        return replace(observation, busy=busy)

    def _follow_machines(self, observation: Observation, busy: dict[int, bool | None]) -> None:
        self.broker.follow_reachability(observation.unreachable)

    def _follow_gpus(self, observation: Observation, busy: dict[int, bool | None]) -> None:
        broker = self.broker
        if observation.layout is not None:
            broker.follow_layout(observation.layout)
        broker.note_telemetry(observation.telemetry)
        for grant in broker.pool.grants():
            if not grant.stopping:  # parked work is idle, whoever uses its GPU meanwhile
                busy[grant.key] = False if grant.parked else self._busy(grant, observation)

    def _record_use(self, observation: Observation, busy: dict[int, bool | None]) -> None:
        broker = self.broker
        now = broker.clock()
        broker.note_busy(busy, now)
        if now - self._pruned >= PRUNE_EVERY:
            broker.forget_usage_before(now - self.usage_retention_seconds)
            self._pruned = now

    def _follow_containers(self, observation: Observation, busy: dict[int, bool | None]) -> None:
        broker = self.broker
        broker.retry_removals()
        if observation.containers is None:
            error = observation.docker_error or "no answer"
            silence = broker.unanswered(LIST, "which containers run?", error)
            self.log.warning(
                "gpuspawner: Docker has not answered for %s (%s); every server runs on, and "
                "GPUs used outside JupyterHub are as last seen",
                duration(silence.lasted(broker.clock())),
                silence.error,
            )
            return
        broker.answered(LIST)
        broker.note_containers(
            observation.containers, self._foreign_processes(observation.telemetry)
        )

    def _busy(self, grant: Grant, observation: Observation) -> bool | None:
        """Whether a server's GPUs are busy: True, False, or None (unknown)."""
        telemetry = observation.telemetry
        if not any(u.kind.facts.shares_gpu for u in grant.units):
            return self.busyness.of(telemetry.get(device) for device in grant.uuids)
        containers = containers_of(grant, observation, self.broker.hub)
        if containers is None:
            return None  # Docker did not answer: whose processes are whose is unknown
        verdicts = []
        for unit in grant.units:
            sample = telemetry.get(unit.device)
            if not unit.kind.facts.shares_gpu:
                verdicts.append(self.busyness.of([sample]))
                continue
            pids = sample.processes if sample is not None else ()
            mine = {p for p in pids if observation.owners.get(p) in containers}
            unowned = {p for p in pids if p not in observation.owners}
            verdicts.append(self.busyness.of_share(sample, mine, unowned))
        return combined(verdicts)

    def _foreign_processes(self, telemetry: dict[str, Telemetry]) -> dict[str, str]:
        """Free GPUs and MIG instances with compute processes: no server of ours runs them."""
        if not self.avoid_foreign_processes:
            return {}
        pool = self.broker.pool
        parked_on = {u.device for u in pool.units if pool.bound_to(u.id)}  # a new process of
        # parked work is that server's: it wakes it (`reclaimer`), it is not outside use
        return {
            device: f"processes {', '.join(map(str, sample.processes))} outside JupyterHub"
            for device, sample in telemetry.items()
            if sample.processes and not pool.holders_on(device) and device not in parked_on
        }


def containers_of(grant: Grant, observation: Observation, hub: str) -> set[str] | None:
    """The names and ids of a server's container, as the observation's owners name them;
    None where Docker did not answer."""
    if observation.containers is None:
        return None
    return {
        name
        for seen in observation.containers
        if seen.server is not None and seen.server.spawner_id == grant.key and seen.of_hub(hub)
        for name in (seen.id, seen.name, seen.container_id)
        if name
    }


def processes_of(grant: Grant, observation: Observation, hub: str) -> tuple[int, ...] | None:
    """The GPU processes a server's container runs on its GPUs (host PIDs, each once); None
    where Docker did not answer."""
    containers = containers_of(grant, observation, hub)
    if containers is None:
        return None
    pids = (
        pid
        for device in grant.uuids
        for pid in getattr(observation.telemetry.get(device), "processes", ())
        if observation.owners.get(pid) in containers
    )
    return tuple(dict.fromkeys(pids))
