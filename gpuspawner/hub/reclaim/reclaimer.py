"""Acting on the culling policy inside the hub: GPU activity, and stops with a reason.

A monitor listener. For every server holding GPUs, each tick: a busy GPU
counts as activity (the same fields the hub's activity API sets, written
in-process, so jupyterhub-idle-culler spares a training run that prints
nothing), and a server over its `max_age` or `gpu_idle_timeout` (or over its
user's GPU-hour budget, where the admin set `stop_over_budget`) is stopped
through the hub, with a notice its user reads on the next spawn page (their files
are kept, and they may go on without the GPUs).
A stop that fails is tried again on the next tick. Servers are found by the
ids in their grant, so a renamed user's server is found all the same.

Whether a server's GPUs are busy is the monitor's word (`Observation.busy`): a
slot of a shared GPU is busy by its server's own processes only, so one busy
server does not keep its idle neighbours from being culled.

With parking on, a server past its `gpu_idle_timeout` is parked instead (`hub.reclaim.parking`):
its kernel lives, its GPUs may run jobs, and it wakes when its user runs a cell or a
process of it opens its GPU. Parked longer than its group's `max_parked` (or past its
`max_age`), it is stopped as without parking.

A server whose container Docker lists as exited or no longer lists (it crashed, or was
killed, and was removed as it exited) is asked about at once
(`Spawner.poll_and_notify`), rather than at JupyterHub's next poll of it (every
`poll_interval`, 30 s by default): its GPUs go back, and a job on them is ended, within
a tick.

A server on GPUs that a booking or a drain of the calendar opens on is stopped as it opens,
with the notice that says why (a job gives way and waits again), unless the booking lets
running servers finish.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from jupyterhub.utils import utcnow

from ...core.calendar import Window, stop_reason
from ...core.culling import Verdict, decide, parked_too_long
from ...core.pool import Grant
from ...core.usage import UsageRecord
from ...core.words import count_gpus, duration
from ..books import budgets
from ..books.broker import Broker
from ..watch.monitor import Observation, processes_of
from .parking import Parker


@dataclass
class Reclaimer:
    app: Any  # the JupyterHub application
    broker: Broker
    log: logging.Logger
    # Read once a tick, where a budget needs them: the ledger's last week, and groups' members.
    _week: list[UsageRecord] | None = field(default=None, init=False, repr=False)
    _members: dict[str, frozenset[int]] = field(default_factory=dict, init=False, repr=False)
    parker: Parker | None = None  # with parking on: servers at their GPU-idle limit are parked
    park_after: float = 600.0  # seconds idle on a GPU a parked job waits for: then parked
    # The stops under way, by grant key: they run beside the monitor's ticks, not in them.
    _stopping: dict[int, asyncio.Task[None]] = field(default_factory=dict, init=False, repr=False)

    async def __call__(self, observation: Observation) -> None:
        broker = self.broker
        now = broker.clock()
        grants = [g for g in broker.pool.grants() if not g.stopping]
        self._week, self._members = None, {}
        for grant in grants:
            busy = observation.busy.get(grant.key)
            try:
                user = self.app.users[grant.holder.user_id]
            except KeyError:
                continue  # a user deleted while their server ran
            if self._exited(grant, observation):
                self._ask_about(user, grant)
                continue
            job = self._is_job(grant)
            if busy or job:  # a running job is never idle: it ends when its run ends
                self._record_activity(user, grant.holder.server)
            window = self._window_open(grant, now)
            jobs = self.broker.jobs
            if job and window is not None and jobs is not None:
                jobs.leave(grant, stop_reason(window, now))
            if job:
                continue  # its own limit is max_runtime (`hub.jobs`)
            if grant.parked:
                self._while_parked(grant, observation)
            verdict = self._verdict(user, grant, now)
            if window is not None:
                verdict = Verdict(grant.key, stop_reason(window, now))
            if verdict is None and not grant.parked:
                verdict = self._job_waits_on(grant, now)
            if verdict is not None and grant.key not in self._stopping:
                parks = verdict.idle and self.parker is not None
                act = self._park if parks else self._stop
                self._stopping[grant.key] = asyncio.ensure_future(act(user, grant, verdict, now))

    def _window_open(self, grant: Grant, now: float) -> Window | None:
        """A booking or drain open now that this server must leave its GPUs for."""
        window = self.broker.calendar.stop_for(grant)
        return window if window is not None and window.start <= now else None

    def _is_job(self, grant: Grant) -> bool:
        jobs = self.broker.jobs
        return jobs is not None and jobs.is_job(grant.holder.user_id, grant.holder.server)

    def _exited(self, grant: Grant, observation: Observation) -> bool:
        """Whether the server's container has exited, as Docker lists it: stopped, or gone
        (a server's container is removed as it exits). Asked only of a server JupyterHub
        calls ready (`_ask_about`): one starting may have no container yet."""
        if observation.containers is None:
            return False  # Docker did not answer: nothing is known
        hub = self.broker.hub
        return not any(
            seen.running
            for seen in observation.containers
            if seen.server and seen.server.spawner_id == grant.key and seen.of_hub(hub)
        )

    def _ask_about(self, user: Any, grant: Grant) -> None:
        """JupyterHub's own look at a server that Docker says exited, now: it stops the server
        as at its poll (the GPUs go back once Docker confirms the container gone)."""
        spawner = user.spawners.get(grant.holder.server)
        if spawner is None or not spawner.ready or grant.key in self._stopping:
            return
        self.log.info("gpuspawner: %s's container exited: asking JupyterHub", spawner._log_name)
        self._stopping[grant.key] = asyncio.ensure_future(self._polled(spawner, grant.key))

    async def _polled(self, spawner: Any, key: int) -> None:
        try:
            await spawner.poll_and_notify()
        except Exception:
            self.log.exception("gpuspawner: asking about %s failed", spawner._log_name)
        finally:
            self._stopping.pop(key, None)

    def _while_parked(self, grant: Grant, observation: Observation) -> None:
        """A process of a parked server opened its GPU (a terminal's `python train.py`, a
        kernel the driver did not park): the server wakes, as for a cell run. Only a look
        begun after it was parked counts: one begun before still sees the parked work."""
        jobs, parker = self.broker.jobs, self.parker
        parked_since = parker.since(grant.key) if parker is not None else None
        if jobs is None or parked_since is None or parked_since >= observation.at:
            return
        if processes_of(grant, observation, self.broker.hub):
            jobs.wake(grant)

    def _job_waits_on(self, grant: Grant, now: float) -> Verdict | None:
        """A person's GPUs idle for park_after while a job parked for them waits to come back
        on them: their work is parked (never stopped for this), and the job goes on."""
        idle_since = self.broker.idle_since(grant.key)
        if self.parker is None or idle_since is None or now - idle_since < self.park_after:
            return None
        pool = self.broker.pool
        if not any(g.holder.job for u in grant.units for g in pool.bound_to(u.id)):
            return None
        reason = (
            f"its {count_gpus(grant.weight)} {'was' if grant.weight <= 1 else 'were'} idle for "
            f"{duration(now - idle_since)} while a job parked for it waits (park_after)"
        )
        return Verdict(grant.key, reason, idle=True, stops=False)

    def _verdict(self, user: Any, grant: Grant, now: float) -> Verdict | None:
        limits = self.broker.limits_for(user)
        parked_since = self.parker.since(grant.key) if self.parker and grant.parked else None
        if parked_since is not None:
            return parked_too_long(grant, parked_since, limits.durations, now)
        verdict = decide(
            grant.key,
            grant.weight,
            grant.since,
            self.broker.idle_since(grant.key),
            limits.durations,
            now,
        )
        if verdict is None and grant.uuids and limits.budgets.stop:
            db = self.app.db
            if self._week is None:
                self._week = budgets.of_users_now(db, budgets.last_week(self.broker, now))
            groups = limits.budgets.groups
            listed = self.broker.site.limits.groups
            missing = [g for g in groups if g not in self._members]
            self._members.update(budgets.group_members(db, missing, listed))
            members = {g: self._members[g] for g in groups}
            standing = budgets.standing_of(self.broker, db, user.id, limits, self._week, members)
            reason = standing.stop_reason()
            verdict = Verdict(grant.key, reason) if reason else None
        return verdict

    def _record_activity(self, user: Any, server: str) -> None:
        orm_spawner = user.orm_user.orm_spawners.get(server)
        if orm_spawner is None:
            return
        moment = utcnow(with_tz=False)
        orm_spawner.last_activity = moment
        if user.orm_user.last_activity is None or user.orm_user.last_activity < moment:
            user.orm_user.last_activity = moment
        self.app.db.commit()

    async def _park(self, user: Any, grant: Grant, verdict: Verdict, now: float) -> None:
        """Past its GPU-idle limit with parking on: parked, its kernel kept, its GPUs lent to
        jobs until its user comes back; stopped as without parking where it cannot be."""
        assert self.parker is not None
        try:
            refusal = await self.parker.park(grant)
            if refusal and verdict.stops:
                reason = f"{verdict.reason}; it could not be parked: {refusal}"
                await self._stop_server(user, grant, Verdict(grant.key, reason), now)
            else:
                self.log.info("gpuspawner: %s parked: %s", grant.holder.name, verdict.reason)
        finally:
            self._stopping.pop(grant.key, None)

    async def _stop(self, user: Any, grant: Grant, verdict: Verdict, now: float) -> None:
        try:
            await self._stop_server(user, grant, verdict, now)
        finally:
            self._stopping.pop(grant.key, None)

    async def _stop_server(self, user: Any, grant: Grant, verdict: Verdict, now: float) -> None:
        server = grant.holder.server
        spawner = user.spawners.get(server)
        if spawner is None or not spawner.ready:
            return  # starting or already stopping: look again next tick
        if self.broker.pool.grant_of(grant.key) is not grant:
            return  # it stopped, and maybe started again, since the verdict: not this server
        spawner.note_stop(now, verdict.reason)
        self.log.warning("gpuspawner: stopping %s: %s", spawner._log_name, verdict.reason)
        try:
            await self.app.proxy.delete_user(user, server)
            await user.stop(server)
        except Exception:
            self.log.exception("gpuspawner: stopping %s failed; trying again", spawner._log_name)
