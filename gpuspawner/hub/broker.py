"""The one owner of a hub's GPU books.

One broker per hub process, started once when the hub starts (`startup`) and
shared by every GPUSpawner, as KubeSpawner shares one reflector among all its
spawners. It owns the pool, the one adoption path (at start, from Docker), the
monitor and the reclaimer, the telemetry and the idle clocks, and the releases
that wait for Docker's word.

The durable record of who holds what is the containers' own labels and device
requests (see `engine.docker`): Docker is the ground truth. A GPU goes back to
the pool only once Docker confirms that the container holding it is gone;
until then it stays held, shown as "stopping", and the monitor keeps asking.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import ClassVar

from ..config.site import GPUSite
from ..core.culling import IdleClock
from ..core.gpus import Telemetry
from ..core.limits import LimitExceeded, UserLimits
from ..core.placement import NotEnoughGPUs
from ..core.pool import GONE, Admission, AlreadyHolding, Grant, Holder
from ..core.profiles import Profile
from ..core.queue import DEFAULT_RESERVE_AFTER
from ..core.silence import Silence, Silences
from ..core.units import Kind, Request, Unit
from ..core.usage import DEFAULT_HALF_LIFE, decayed_gpu_hours
from ..core.words import at_clock
from ..engine.base import Engine, LookPast, Seen
from ..records.ledger import Ledger
from ..records.waiting import LineRecord
from .counters import ALLOCATION_SECONDS
from .refusals import refused
from .waiting import Line, WaitEnded

RECENT_USE_HALF_LIVES = 10  # use older than this many half-lives counts for less than 0.1 %


@dataclass(frozen=True)
class KnownServers:
    """The servers the hub's database says run: by (spawner id, user id), and by
    (user name, server name) for containers gpuspawner 0.1 labelled with names only."""

    ids: frozenset[tuple[int, int]] = frozenset()
    by_name: Mapping[tuple[str, str], tuple[int, int]] = field(default_factory=dict)

    def ids_of(self, seen: Seen) -> tuple[int, int] | None:
        labels = seen.server
        if labels is None:
            return None
        if labels.spawner_id is not None and labels.user_id is not None:
            ids = (labels.spawner_id, labels.user_id)
            return ids if ids in self.ids else None
        return self.by_name.get((labels.user, labels.server))


class BrokerNotRunning(RuntimeError):
    """A GPUSpawner was used in a process whose hub did not start the broker."""


class Broker:
    """The books of one hub: reserve, adopt, and release on Docker's word."""

    _current: ClassVar[Broker | None] = None

    def __init__(
        self,
        site: GPUSite,
        engine: Engine,
        hub: str,
        log: logging.Logger,
        *,
        ignore_containers: Iterable[str] = (),
        clock: Callable[[], float] = time.time,
        ledger: Ledger | None = None,
        reserve_after: float = DEFAULT_RESERVE_AFTER,
        half_life: float = DEFAULT_HALF_LIFE,
    ) -> None:
        self.site = site
        self.pool = site.new_pool(clock)
        self.engine = engine
        self.hub = hub  # DockerSpawner.prefix: which containers on the engine are this hub's
        self.log = log
        self.look_past = LookPast(tuple(ignore_containers), hub)  # what the engine skips
        self.clock = clock
        self.telemetry: dict[str, Telemetry] = {}  # the monitor's latest sample
        self.idle = IdleClock()  # since when each grant's GPUs have all been idle
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="gpuspawner-broker")
        self._containers: dict[int, set[str]] = {}  # grant key → container ids known to hold it
        self._removing: dict[int, asyncio.Task[None]] = {}
        self.stoppables: list[Callable[[], None]] = []  # the monitor and friends, for shutdown
        self._silences = Silences()  # the engine's unanswered questions (errors, not answers)
        self.ledger = ledger  # the usage ledger: every grant's start, end and busy time
        self.half_life = half_life  # of recent use, which orders the waiting line
        self.line = Line(
            self.pool,
            self.idle,
            clock,
            log,
            reserve=self.reserve,
            reserve_after=reserve_after,
            recent_use=self._recent_use if ledger is not None else None,
            record=LineRecord(ledger.path) if ledger is not None else None,
        )

    # --- one per hub process -------------------------------------------------
    @classmethod
    def current(cls) -> Broker:
        if cls._current is None:
            raise BrokerNotRunning(
                "gpuspawner's broker is not running: the hub starts it when "
                "c.JupyterHub.spawner_class is a GPUSpawner"
            )
        return cls._current

    def install(self) -> None:
        if Broker._current is not None and Broker._current is not self:
            raise RuntimeError("this hub process already has a gpuspawner broker")
        Broker._current = self

    async def shutdown(self) -> None:
        """Stop the monitor and pending removals, and forget this broker: for tests, which
        start several hubs in one process. A hub's exit needs none of it (each ledger
        change is committed as it happens; the line is closed by `hub.startup`)."""
        for stop in self.stoppables:
            stop()
        for task in list(self._removing.values()):
            task.cancel()
        if Broker._current is self:
            Broker._current = None
        self.line.close()
        if self.ledger is not None:
            self.ledger.close()
        self.executor.shutdown(wait=False, cancel_futures=True)

    # --- when the engine does not answer ------------------------------------------
    def unanswered(self, key: Hashable, question: str, error: BaseException | str) -> Silence:
        """The engine failed to answer `question` (an error, not a word about the server):
        whatever asked goes on as it last knew."""
        return self._silences.unanswered(key, self.clock(), question, str(error) or repr(error))

    def answered(self, key: Hashable) -> None:
        self._silences.answered(key)

    def silence_of(self, key: Hashable) -> Silence | None:
        return self._silences.of(key)

    def longest_silence(self) -> Silence | None:
        """Since when the engine has not answered all of the hub's questions, if it has not."""
        return self._silences.longest()

    # --- recovery -------------------------------------------------------------
    def recover(
        self,
        containers: list[Seen],
        known: KnownServers,
        stopped_at: Mapping[int, float] | None = None,
    ) -> None:
        """At hub start: adopt the GPUs of our running servers, and keep everyone else's out.

        A container whose labels do not parse, another hub's, and a second
        server claiming a GPU another holds are not adopted: one log line each
        names the container, and its GPUs stay out of the pool as used outside
        JupyterHub for as long as it runs. A server of ours that the database
        says ended (its removal was never confirmed before the hub stopped) is
        ended now: its GPUs stay held, stopping, and the monitor removes it.
        Adoption happens only here: later, a periodic adoption could
        resurrect a server that just stopped. `stopped_at`: when Docker says
        servers' containers stopped while the hub was away (its event log), for
        the usage ledger.
        """
        for container in containers:
            if container.label_problem:
                self.log.error(
                    "gpuspawner: container %s has unreadable labels (%s): not adopted; "
                    "the GPUs it can reach stay out of the pool while it runs",
                    container.name,
                    container.label_problem,
                )
                continue
            if not (container.running and container.of_hub(self.hub)):
                continue
            labels = container.server
            assert labels is not None
            ids = known.ids_of(container)
            ending = ids is None  # JupyterHub says it ended: a removal Docker never confirmed
            if ids is None:  # (or a start the hub before this one forgot)
                if labels.spawner_id is None or labels.user_id is None:
                    continue  # labelled by gpuspawner 0.1: kept out while it runs
                ids = (labels.spawner_id, labels.user_id)
            holder = Holder(ids[0], ids[1], labels.user, labels.server)
            try:
                held = container.units_held(
                    self.site.inventory.reached(container.reach, container.node), self.pool.units
                )
                grant = self.pool.adopt(holder, held, labels.since, labels.quota_group)
            except AlreadyHolding as conflict:
                self.log.error(
                    "gpuspawner: container %s not adopted: %s; those GPUs stay out of the "
                    "pool while it runs",
                    container.name,
                    conflict,
                )
                continue
            self._containers.setdefault(grant.key, set()).add(container.id)
            if ending:
                self.pool.begin_release(grant.key)
                self.log.warning(
                    "gpuspawner: container %s runs, but JupyterHub says %s ended: it is "
                    "removed, and GPU(s) %s stay held (stopping) until Docker confirms it gone",
                    container.name,
                    holder.name,
                    ", ".join(grant.ids) or "none",
                )
                continue
            self.log.info(
                "gpuspawner: %s keeps GPU(s) %s (running container %s)",
                holder.name,
                ", ".join(grant.ids) or "none",
                container.name,
            )
        self.note_containers(containers, {})
        if self.ledger is not None:
            self._recover_ledger(self.ledger, containers, stopped_at or {})

    def _recover_ledger(
        self, ledger: Ledger, containers: list[Seen], stopped_at: Mapping[int, float]
    ) -> None:
        """Grants that ended while the hub was away end when Docker says their container
        stopped (else when the hub last saw them); those that go on keep their row, and the
        time away counts as held, not as busy: nobody watched it."""
        for grant in self.pool.grants():
            ledger.opened(grant, float(grant.weight))
        stopped = dict(stopped_at)
        for container in containers:
            labels = container.server
            if container.finished_at is None or labels is None or not labels.spawner_id:
                continue
            if container.of_hub(self.hub):
                key = labels.spawner_id
                stopped[key] = max(stopped.get(key, 0.0), container.finished_at)
        running = [g.key for g in self.pool.grants()]
        for record in ledger.close_all_but(running, stopped):
            self.log.info(
                "gpuspawner: %s's grant of %s GPU(s) ended while the hub was away; recorded as "
                "ending at %s",
                record.user,
                f"{record.gpus:g}",
                at_clock(record.end or 0.0, self.clock()),
            )
        ledger.seen(self.clock(), {})

    # --- what runs, each monitor tick -----------------------------------------
    def note_containers(self, containers: list[Seen], foreign_processes: dict[str, str]) -> None:
        """Keep GPUs and MIG instances that running containers reach out of the pool, unless
        the pool gave them to that container's server; and free ones with
        `foreign_processes` (id → who). Reaching a GPU reaches everything on it: its MIG
        instances, and every slot of a shared GPU for a container that holds none."""
        external = dict(foreign_processes)
        for container in containers:
            if not container.running or self.look_past.skips(container):
                continue
            grant = None
            if container.server and container.server.spawner_id and container.of_hub(self.hub):
                grant = self.pool.grant_of(container.server.spawner_id)
            for device in self.site.inventory.reached(container.reach, container.node):
                if grant is None or device not in grant.uuids:
                    external[device] = f"container {container.name}"
        before = self.pool.externals()
        self.pool.set_external(external)
        now = self.pool.externals()
        for device in sorted({*before, *now}):
            if now.get(device) == before.get(device):
                continue
            if now.get(device):
                self.log.warning(
                    "gpuspawner: %s is used outside JupyterHub (%s)", device, now[device]
                )
            else:
                self.log.info("gpuspawner: %s is no longer used outside JupyterHub", device)

    def retry_removals(self) -> None:
        """Ask Docker again to remove every ended server's container it has not confirmed
        gone. Each monitor tick, whether or not Docker could list the containers: one it
        cannot inspect (a 500) may still be removed, and that confirmed by a listing."""
        for grant in self.pool.grants():
            if grant.stopping and grant.key not in self._removing:
                self._start_removal(grant.key)

    # --- spawners ---------------------------------------------------------------
    async def take(self, holder: Holder, profile: Profile, limits: UserLimits) -> Grant:
        """GPUs for a starting server on `profile`, within the user's `limits`: at once for a
        CPU-only profile (a grant of nothing), through the waiting line for a GPU one; or
        `Refused`, in the words its user reads."""
        request = limits.request_for(profile)
        try:
            if request.kind is None:
                return self.reserve(holder, request, limits.admit)
            return await self.line.take(holder, profile.slug, profile.display_name, request, limits)
        except (LimitExceeded, NotEnoughGPUs, WaitEnded) as error:
            raise refused(profile, error) from None

    def reserve(
        self, holder: Holder, request: Request | int, admit: Admission | None = None
    ) -> Grant:
        """GPUs now (NotEnoughGPUs, or what `admit` raises, refuses): the one place the
        pool's units are taken for a server, timed for the allocation histogram."""
        with ALLOCATION_SECONDS.time():
            grant = self.pool.allocate(holder, request, admit)
        self.idle.forget(grant.key)  # a server stopped and started between two ticks
        if grant.units and self.ledger is not None:
            self.ledger.opened(grant, float(grant.weight))
        return grant

    # --- the machine, each monitor tick -----------------------------------------
    def follow_layout(self, layout: Mapping[str, tuple[Unit, ...]]) -> None:
        """What each GPU gives now (`GPUSite.layout_now`): a MIG layout an admin changed is
        followed, GPU by GPU, without touching the servers on other GPUs."""
        for gpu, units in layout.items():
            if not self.pool.follow_layout(gpu, units):
                continue
            index = next((u.index for u in self.pool.units if u.gpu == gpu), "")
            profiles = [u.profile for u in units if u.kind is Kind.MIG]
            now = ", ".join(f"{profiles.count(p)} × {p}" for p in dict.fromkeys(profiles))
            gone = [
                f"{u.id} ({g.holder.name})"
                for g in self.pool.holders_on(gpu)
                for u in g.units
                if self.pool.unhealthy_reason(u.id) == GONE
            ]
            self.log.warning(
                "gpuspawner: GPU %s (%s) changed: it now gives %s%s",
                index,
                gpu,
                now or ("itself, whole" if units else "nothing (MIG mode, no instance)"),
                f"; gone but still held until their servers stop: {', '.join(gone)}"
                if gone
                else "",
            )

    def grant_of(self, key: int) -> Grant | None:
        return self.pool.grant_of(key)

    def release_when_gone(
        self, key: int, container_id: str = "", after: Future[object] | None = None
    ) -> asyncio.Future[None] | None:
        """The hub says a server ended: its GPUs go back once Docker confirms its container
        gone (after `after`, a create still in flight, has finished). Safe to repeat.
        Returns the removal under way, for a caller that wants to wait for it."""
        if container_id:
            self._containers.setdefault(key, set()).add(container_id)
        grant = self.pool.begin_release(key)
        if grant is None:
            self._containers.pop(key, None)
            return None
        if key not in self._removing:
            self._start_removal(key, after)
        self.line.run()  # its group's quota has room now, though its GPUs are not yet free
        return self._removing[key]

    async def settled(self, key: int) -> bool:
        """Whether a server's earlier GPUs are released, after one more try if still stopping."""
        grant = self.pool.grant_of(key)
        if grant is None:
            return True
        if not grant.stopping:
            return False
        if key not in self._removing:
            self._start_removal(key)
        await asyncio.wait([self._removing[key]])
        return self.pool.grant_of(key) is None

    def _start_removal(self, key: int, after: Future[object] | None = None) -> None:
        self._removing[key] = asyncio.ensure_future(self._remove(key, after))

    async def _remove(self, key: int, after: Future[object] | None) -> None:
        try:
            if after is not None and not after.done():
                await asyncio.wait([asyncio.wrap_future(after)])
            loop = asyncio.get_running_loop()
            ids = tuple(self._containers.get(key, ()))
            gone = await loop.run_in_executor(
                self.executor, self.engine.remove_server, self.hub, key, ids
            )
            grant = self.pool.grant_of(key)
            if not gone:
                if grant is not None:
                    self.log.warning(
                        "gpuspawner: %s ended, but Docker has not confirmed its container gone: "
                        "GPU(s) %s stay held (stopping); asking again at the next monitor tick",
                        grant.holder.name,
                        ", ".join(grant.uuids),
                    )
                return
            released = self.pool.release(key)
            if released is not None and self.ledger is not None:
                self.ledger.ended(key, self.clock())
            self._containers.pop(key, None)
            if released is not None:
                self.log.info(
                    "gpuspawner: %s returned %s", released.holder.name, ", ".join(released.uuids)
                )
                self.line.run()  # the next in line starts now, not at the next monitor tick
        finally:
            self._removing.pop(key, None)

    # --- the waiting line's order -------------------------------------------------
    def _recent_use(self, now: float) -> dict[int, float]:
        """Each user's decayed GPU-hours, from the ledger (so it outlives hub restarts)."""
        assert self.ledger is not None
        since = now - RECENT_USE_HALF_LIVES * self.half_life
        return decayed_gpu_hours(self.ledger.records(since), now, self.half_life)
