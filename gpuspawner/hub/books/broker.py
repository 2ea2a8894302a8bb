"""The one owner of a hub's GPU books.

One broker per hub process, built with its parts when the hub starts (`parts`) and
shared by every GPUSpawner, as KubeSpawner shares one reflector among all its
spawners. It builds and owns its parts: the pool, the waiting line, the idle
clocks, the telemetry, the usage ledger, the releases that wait for the
engine's word (`removals`), and what the machine says each tick (`machine`).
Others read through its properties (the pool as a read-only `PoolView`) and
change the books only through its methods; the monitor tells it what it saw.

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
from dataclasses import replace
from types import MappingProxyType
from typing import Any, ClassVar

from ...config.adapter import Mover
from ...config.site import GPUSite
from ...core.culling import IdleClock
from ...core.gpus import Telemetry
from ...core.limits import LimitExceeded, UserLimits
from ...core.line import DEFAULT_RESERVE_AFTER
from ...core.placement import NotEnoughGPUs
from ...core.pool import Admission, Grant, Holder
from ...core.pool_view import PoolView
from ...core.profiles import Profile
from ...core.silence import Silence, Silences
from ...core.units import Request, Unit
from ...core.usage import DEFAULT_HALF_LIFE, decayed_gpu_hours
from ...engine.base import Engine, LookPast, Seen
from ...records.calendar import CalendarRecord
from ...records.homes import HomeRecord
from ...records.ledger import Ledger
from ...records.line import LineRecord, Waited
from ..base.counters import ALLOCATION_SECONDS
from ..calendar.windows import Calendar, GroupsOf, allocate_around
from ..homes.nodes import Homes
from ..line.waiting import Line, WaitEnded
from .jobs_part import JobsPart
from .machine import Machine
from .recovery import KnownServers, adopt, recover_ledger
from .refusals import Refused, refused
from .removals import Removals

HOME_MOVING = "Your home is being moved to another node: start again in a few minutes."
RECENT_USE_HALF_LIVES = 10  # use older than this many half-lives counts for less than 0.1 %


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
        limits_of: Callable[[int], UserLimits | None] = lambda user_id: None,
        calendar: CalendarRecord | None = None,
        groups_of: GroupsOf = lambda user: frozenset(),
        homes: HomeRecord | None = None,
        home_mover: Mover | None = None,
    ) -> None:
        """`limits_of`: a user's limits by id, for the line's estimates of when GPUs free up.
        `calendar`: where bookings and drains are written; `groups_of`: a user's groups.
        `homes`: where each user's home node is written, where homes are each node's own
        (a swarm without shared storage); None elsewhere."""
        self.site = site
        self.engine = engine
        self.hub = hub  # DockerSpawner.prefix: which containers on the engine are this hub's
        self.log = log
        self.look_past = LookPast(tuple(ignore_containers), hub)  # what the engine skips
        self.clock = clock
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="gpuspawner-broker")
        self._pool = site.new_pool(clock)
        self._telemetry: Mapping[str, Telemetry] = MappingProxyType({})  # the latest sample
        self._idle = IdleClock()  # since when each grant's GPUs have all been idle
        self._stoppables: list[Callable[[], None]] = []  # the monitor, for shutdown
        self._silences = Silences()  # the engine's unanswered questions (errors, not answers)
        self._ledger = ledger  # the usage ledger: every grant's start, end and busy time
        self._half_life = half_life  # of recent use, which orders the waiting line
        self._jobs: JobsPart | None = None  # the hub's jobs, once read back (`serve_jobs`)
        self.calendar = Calendar(site, clock, calendar, groups_of)  # bookings and drains
        self.homes = Homes(homes, home_mover)  # which node holds each user's home, on a swarm
        self._line = Line(
            self._pool,
            self._idle,
            clock,
            log,
            take_now=self.take_now,
            reserve_after=reserve_after,
            recent_use=self._recent_use if ledger is not None else None,
            record=LineRecord(ledger.path) if ledger is not None else None,
            limits_of=limits_of,
            after_run=self._line_ran,
        )
        self._removals = Removals(
            self._pool, engine, hub, self.executor, log, clock, ledger, self._returned
        )
        self._machine = Machine(site, self._pool, hub, self.look_past, log)

    # --- what others read ------------------------------------------------------------
    @property
    def pool(self) -> PoolView:
        """The books, to read: only the broker and its parts change them."""
        return self._pool

    @property
    def line(self) -> Line:
        """The waiting line, to read (`line.status`); changed through the broker's methods."""
        return self._line

    @property
    def jobs(self) -> JobsPart | None:
        """The hub's jobs, where it serves them."""
        return self._jobs

    def job_awaits_start(self, server_id: int) -> bool:
        """Whether GPUs were taken for a job whose server is about to start."""
        return self._jobs is not None and self._jobs.awaiting_start(server_id)

    def serve_jobs(self, jobs: JobsPart) -> None:
        """At hub start, once the jobs are read back: from now on they hear of the line's
        passes and of releases."""
        self._jobs = jobs

    @property
    def ledger(self) -> Ledger | None:
        return self._ledger

    @property
    def telemetry(self) -> Mapping[str, Telemetry]:
        """The monitor's latest sample, by GPU or MIG UUID."""
        return self._telemetry

    def idle_since(self, key: int) -> float | None:
        """Since when all of a grant's GPUs have been idle; None while any is busy or unknown."""
        return self._idle.idle_since.get(key)

    def gpu_use_known(self, key: int) -> bool:
        """Whether the monitor's latest look said the grant's GPUs are busy or idle."""
        return key in self._idle.known

    # --- one per hub process -------------------------------------------------
    @classmethod
    def current(cls) -> Broker:
        """The running hub's broker, for the spawners: JupyterHub makes each spawner itself
        and passes it nothing of ours (handlers and parts are given the broker instead)."""
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
        change is committed as it happens; the line is closed by `hub.attach`)."""
        for stop in self._stoppables:
            stop()
        self._removals.cancel()
        if Broker._current is self:
            Broker._current = None
        self._line.close()
        if self._ledger is not None:
            self._ledger.close()
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
        adopt(containers, known, self.site, self._pool, self.hub, self._removals, self.log)
        self.note_containers(containers, {})
        if self._ledger is not None:
            now = self.clock()
            recover_ledger(
                self._ledger, self._pool, containers, self.hub, stopped_at or {}, now, self.log
            )

    # --- what the machine says, each monitor tick ---------------------------------
    def note_containers(self, containers: list[Seen], foreign_processes: dict[str, str]) -> None:
        self._machine.note_containers(containers, foreign_processes)

    def follow_layout(self, layout: Mapping[str, tuple[Unit, ...]]) -> None:
        self._machine.follow_layout(layout)

    def note_telemetry(self, telemetry: Mapping[str, Telemetry]) -> None:
        """The monitor's latest sample: what the pages show, and GPUs that fell ill or
        recovered."""
        self._telemetry = MappingProxyType(dict(telemetry))
        self._machine.follow_health(telemetry)

    def follow_reachability(self, unreachable: Mapping[str, str] | None) -> None:
        self._machine.follow_reachability(unreachable)

    def note_busy(self, busy: Mapping[int, bool | None], now: float) -> None:
        """Which running servers' GPUs are busy now (None: unknown): their idle clocks, and
        the usage ledger's busy time."""
        self._idle.forget_all_but(busy)
        for key, verdict in busy.items():
            self._idle.update(key, verdict, now)
        if self._ledger is not None:
            parked = [g.key for g in self._pool.grants() if g.parked]
            self._ledger.seen(now, dict(busy), parked)

    def forget_usage_before(self, moment: float) -> None:
        if self._ledger is not None:
            self._ledger.forget_before(moment)

    def retry_removals(self) -> None:
        self._removals.retry()

    def pass_line(self) -> None:
        """Let the waiting line start whoever now fits (after a monitor tick)."""
        self._line.run()

    def take_out_of_line(self, key: int) -> bool:
        """An admin's decision: the start ends with a message, holding nothing."""
        return self._line.remove(key)

    def line_before_restart(self) -> list[Waited]:
        """At hub start: who waited when the hub before this one ended."""
        return self._line.forget_previous()

    def close_line(self) -> None:
        """The hub shuts down: nobody starts any more, and the written line is kept."""
        self._line.shut_down()

    def on_stop(self, stop: Callable[[], None]) -> None:
        """Call `stop` at shutdown (the monitor's timer, a log filter)."""
        self._stoppables.append(stop)

    # --- spawners ---------------------------------------------------------------
    def limits_for(self, user: Any) -> UserLimits:
        """A user's limits (a JupyterHub user or its database row), kept on their home's
        node where homes are each node's own: every start, wait and judgment reads these."""
        limits = self.site.limits.for_user({g.name for g in user.groups}, bool(user.admin))
        return self.homes.narrow(user.name, limits)

    async def take(self, holder: Holder, profile: Profile, limits: UserLimits) -> Grant:
        """GPUs for a starting server on `profile`, within the user's `limits`: at once for a
        CPU-only profile (a grant of nothing), through the waiting line for a GPU one; or
        `Refused`, in the words its user reads."""
        if self.homes.moving(holder.user):
            raise Refused(HOME_MOVING, "home_moving", 409)
        request = limits.request_for(profile)
        try:
            if request.kind is None:
                return self.take_now(holder, request, limits.admit)
            return await self._line.take(
                holder, profile.slug, profile.display_name, request, limits
            )
        except (LimitExceeded, NotEnoughGPUs, WaitEnded) as error:
            raise refused(profile, error, self.said_to(holder.user, limits)) from None

    def said_to(self, user: str, limits: UserLimits) -> list[str]:
        """What keeps free GPUs from `user` now, in words: windows open now, their home."""
        return [*self.calendar.said_to(user, 0.0), *self.homes.said_to(user, limits)]

    def take_now(
        self,
        holder: Holder,
        request: Request | int,
        admit: Admission | None = None,
        keep: frozenset[str] = frozenset(),
        borrows: bool = True,
        lasts: float | None = None,
    ) -> Grant:
        """GPUs now (NotEnoughGPUs, or what `admit` raises, refuses): the one place the
        pool's units are taken for a server, timed for the allocation histogram. `keep`:
        units not to take (a waking person's, for a job). `borrows`: whether a parked
        person's GPUs may be lent it (a job that could give them back at once). Never GPUs
        the calendar keeps from its user now, and those a window opens on within `lasts`
        (seconds it may run; None: no end) only where no others will do."""
        kept = self.calendar.kept_from(holder.user, lasts)
        if kept.theirs and isinstance(request, Request):  # no one waiting ahead may take them
            request = replace(request, not_on=request.not_on - kept.theirs)
        with ALLOCATION_SECONDS.time():
            grant = allocate_around(self._pool, kept, holder, request, admit, borrows, keep)
        self._idle.forget(grant.key)  # a server stopped and started between two ticks
        if grant.units and self._ledger is not None:
            self._ledger.opened(grant, float(grant.weight))
        return grant

    def grant_of(self, key: int) -> Grant | None:
        return self._pool.grant_of(key)

    def parked(self, key: int) -> Grant:
        """The driver parked a server's GPU work: its GPUs may be lent, and the line runs
        (a person's start waits for them). NotParkable if it is stopping meanwhile."""
        grant = self._pool.park(key)
        self._line.run()
        return grant

    def take_back(self, key: int) -> Grant:
        """A parked server holds its own GPUs again, before the driver restores its work
        (so nobody is given them meanwhile); StillLent while another holds them. Its GPUs'
        idle clock starts again: it was parked, not idle."""
        grant = self._pool.restore(key)
        self._idle.forget(key)
        return grant

    def release_when_gone(
        self, key: int, container_id: str = "", after: Future[object] | None = None
    ) -> asyncio.Future[None] | None:
        """The hub says a server ended: its GPUs go back once Docker confirms its container
        gone (after `after`, a create still in flight, has finished). Safe to repeat.
        Returns the removal under way, for a caller that wants to wait for it."""
        removal = self._removals.start(key, container_id, after)
        if removal is not None:
            self._line.run()  # its group's quota has room now, though its GPUs are not yet free
        return removal

    async def settled(self, key: int) -> bool:
        """Whether a server's earlier GPUs are released, after one more try if still stopping."""
        return await self._removals.settled(key)

    def _returned(self, grant: Grant) -> None:
        """Docker confirmed a container gone and its GPUs are back."""
        if self._jobs is not None:
            self._jobs.released(grant)
        self._line.run()

    def _line_ran(self) -> None:
        if self._jobs is not None:
            self._jobs.line_ran()

    # --- the waiting line's order -------------------------------------------------
    def _recent_use(self, now: float) -> dict[int, float]:
        """Each user's decayed GPU-hours, from the ledger (so it outlives hub restarts)."""
        assert self._ledger is not None
        since = now - RECENT_USE_HALF_LIVES * self._half_life
        return decayed_gpu_hours(self._ledger.records(since), now, self._half_life)
