"""Acting on the culling policy inside the hub: GPU activity, and stops with a reason.

A monitor listener. For every server holding GPUs, each tick: a busy GPU
counts as activity (the same fields the hub's activity API sets, written
in-process, so jupyterhub-idle-culler spares a training run that prints
nothing), and a server over its `max_age` or `gpu_idle_timeout` is stopped
through the hub, with a notice its user reads on the next spawn page.
A stop that fails is tried again on the next tick.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jupyterhub.utils import utcnow

from .culling import Busyness, IdleClock, Verdict, decide, notice
from .hubgpus import HubGPUs
from .monitor import Observation
from .pool import Grant


@dataclass
class Reclaimer:
    app: Any  # the JupyterHub application
    hub: HubGPUs
    busyness: Busyness
    log: logging.Logger
    clock: Callable[[], float] = time.time
    idle: IdleClock = field(default_factory=IdleClock)

    async def __call__(self, observation: Observation) -> None:
        now = self.clock()
        grants = self.hub.pool.grants()
        self.idle.forget_all_but(g.holder.key for g in grants)
        for grant in grants:
            busy = self.busyness.of(observation.telemetry.get(u) for u in grant.uuids)
            self.idle.update(grant.holder.key, busy, now)
            try:
                user = self.app.users[grant.holder.user]
            except KeyError:
                continue  # a user deleted while their server ran
            if busy:
                self._record_activity(user, grant.holder.server)
            verdict = self._verdict(user, grant, now)
            if verdict is not None:
                await self._stop(user, grant.holder.server, verdict, now)

    def _verdict(self, user: Any, grant: Grant, now: float) -> Verdict | None:
        limits = self.hub.limits.for_user({g.name for g in user.groups}, bool(user.admin))
        return decide(
            grant.holder.key,
            len(grant.uuids),
            grant.since,
            self.idle.idle_since.get(grant.holder.key),
            limits.durations,
            now,
        )

    def _record_activity(self, user: Any, server: str) -> None:
        orm_spawner = user.orm_user.orm_spawners.get(server)
        if orm_spawner is None:
            return
        moment = utcnow(with_tz=False)
        orm_spawner.last_activity = moment
        if user.orm_user.last_activity is None or user.orm_user.last_activity < moment:
            user.orm_user.last_activity = moment
        self.app.db.commit()

    async def _stop(self, user: Any, server: str, verdict: Verdict, now: float) -> None:
        spawner = user.spawners.get(server)
        if spawner is None or not spawner.ready:
            return  # starting or already stopping: look again next tick
        spawner.stop_notice = notice(server, now, verdict.reason)
        self.log.warning("gpuspawner: stopping %s: %s", verdict.key, verdict.reason)
        try:
            await self.app.proxy.delete_user(user, server)
            await user.stop(server)
        except Exception:
            self.log.exception("gpuspawner: stopping %s failed; trying again", verdict.key)
