"""Acting on the culling policy inside the hub: GPU activity, and stops with a reason.

A monitor listener. For every server holding GPUs, each tick: a busy GPU
counts as activity (the same fields the hub's activity API sets, written
in-process, so jupyterhub-idle-culler spares a training run that prints
nothing), and a server over its `max_age` or `gpu_idle_timeout` is stopped
through the hub, with a notice its user reads on the next spawn page.
A stop that fails is tried again on the next tick. Servers are found by the
ids in their grant, so a renamed user's server is found all the same.

A whole GPU or MIG instance is busy by its own sample. A slot of a shared GPU
is busy by its server's own processes on that GPU (NVML lists them by PID; the
monitor finds each one's container), so one busy server does not keep its
idle neighbours from being culled.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from jupyterhub.utils import utcnow

from ..core.culling import Busyness, Verdict, combined, decide, notice
from ..core.pool import Grant
from ..core.units import Kind
from .broker import Broker
from .monitor import Observation


@dataclass
class Reclaimer:
    app: Any  # the JupyterHub application
    broker: Broker
    busyness: Busyness
    log: logging.Logger

    async def __call__(self, observation: Observation) -> None:
        broker = self.broker
        now = broker.clock()
        grants = [g for g in broker.pool.grants() if not g.stopping]
        broker.idle.forget_all_but(g.key for g in grants)
        for grant in grants:
            busy = self._busy(grant, observation)
            broker.idle.update(grant.key, busy, now)
            try:
                user = self.app.users[grant.holder.user_id]
            except KeyError:
                continue  # a user deleted while their server ran
            if busy:
                self._record_activity(user, grant.holder.server)
            verdict = self._verdict(user, grant, now)
            if verdict is not None:
                await self._stop(user, grant.holder.server, verdict, now)

    def _busy(self, grant: Grant, observation: Observation) -> bool | None:
        telemetry = observation.telemetry
        if all(u.kind is not Kind.SHARED for u in grant.units):
            return self.busyness.of(telemetry.get(device) for device in grant.uuids)
        if observation.containers is None:
            return None  # Docker did not answer: whose processes are whose is unknown
        containers = {
            name
            for seen in observation.containers
            if seen.server is not None
            and seen.server.spawner_id == grant.key
            and self.broker.is_ours(seen)
            for name in (seen.id, seen.name)
        }
        verdicts = []
        for unit in grant.units:
            sample = telemetry.get(unit.device)
            if unit.kind is not Kind.SHARED:
                verdicts.append(self.busyness.of([sample]))
                continue
            pids = sample.processes if sample is not None else ()
            mine = {p for p in pids if observation.owners.get(p) in containers}
            unowned = {p for p in pids if p not in observation.owners}
            verdicts.append(self.busyness.of_share(sample, mine, unowned))
        return combined(verdicts)

    def _verdict(self, user: Any, grant: Grant, now: float) -> Verdict | None:
        limits = self.broker.site.limits.for_user({g.name for g in user.groups}, bool(user.admin))
        return decide(
            grant.key,
            grant.weight,
            grant.since,
            self.broker.idle.idle_since.get(grant.key),
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
        self.log.warning("gpuspawner: stopping %s: %s", spawner._log_name, verdict.reason)
        try:
            await self.app.proxy.delete_user(user, server)
            await user.stop(server)
        except Exception:
            self.log.exception("gpuspawner: stopping %s failed; trying again", spawner._log_name)
