"""How jobs give way to people: for each person's start short of GPUs, the jobs the core's
rule picks (`core.give_way`) are parked where parking is on and the driver can park them
(`hub.parking`: the person is lent their GPUs at once, and each job is restored there
when they are free again), else stopped with SIGTERM and their group's grace, to wait
again."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ...core.give_way import RunningJob, giving_way
from ...core.job_rules import JobRules
from ...core.jobs import Event, JobState
from ...core.limits import UserLimits
from ...core.pool import Grant, Holder
from ...core.units import Request
from ...core.words import server_name
from ...records.jobs import Job, JobRecord
from ..broker import Broker
from ..counters import JOB_PREEMPTIONS
from ..parking import Parker
from . import reading, words
from .books import JobBooks
from .launch import Launcher

Rules = Callable[[int], tuple[UserLimits, JobRules] | None]  # a user's, by id (None: gone)


class GivingWay(JobBooks):
    def __init__(
        self,
        broker: Broker,
        launcher: Launcher,
        record: JobRecord,
        log: logging.Logger,
        rules_of: Rules,
        parker: Parker | None,
    ) -> None:
        super().__init__(broker, launcher, record, log)
        self.rules_of, self.parker = rules_of, parker
        self._parking: dict[int, frozenset[str]] = {}  # job id → its units, while parking

    def parked_bytes(self) -> int:
        """Host memory that parked jobs' GPU work holds now."""
        return self.parker.parked_bytes() if self.parker is not None else 0

    def _make_way(self) -> None:
        """For each person's start short of GPUs, in line order, the jobs that give way. What
        already frees up counts, and what a start ahead will take is not counted twice."""
        pool = self.broker.pool
        freed = frozenset(u.id for g in pool.grants() if g.stopping for u in g.units)
        freed |= frozenset().union(*self._parking.values())
        claimed: frozenset[str] = frozenset()
        for entry in reading.people_short_of_gpus(self.broker.line):
            found = self.rules_of(entry.holder.user_id)
            if found is None or not found[1].preempts:
                continue
            request = entry.request
            taken = pool.would_take(request, freed, claimed)
            if taken is None:
                chosen = giving_way(
                    self._running_jobs(),
                    self._fits_with(request, freed, claimed),
                    self.broker.clock(),
                    entry.holder.user_id,
                )
                for victim in chosen:
                    self._give_way(self._jobs[victim.key], entry.holder)
                    freed |= victim.units
                taken = pool.would_take(request, freed, claimed) if chosen else None
            claimed |= taken or frozenset()

    def _fits_with(
        self, request: Request, freed: frozenset[str], claimed: frozenset[str]
    ) -> Callable[[frozenset[str]], bool]:
        return lambda more: self.broker.pool.fits_if_freed(request, freed | more, claimed)

    def _give_way(self, job: Job, to: Holder, why: str = "start") -> None:
        grant = self._grant_of(job)
        if self.parker is not None and grant is not None:
            why_not = self.parker.why_not(grant)
            if not why_not:
                self._parking[job.id] = frozenset(u.id for u in grant.units)
                self._spawn(self._park(job, to, grant, why))
                return
            self.log.info("gpuspawner: %s is not parked: %s", job.server, why_not)
        self._stop_for(job, to)

    def _stop_for(self, job: Job, to: Holder) -> None:
        now = self.broker.clock()
        reason = words.gave_way(server_name(to.user, to.server), now)
        stopping = self._event(job, Event.GIVE_WAY, reason=reason)
        self.log.warning(
            "gpuspawner: %s gives way to %s", job.server, server_name(to.user, to.server)
        )
        self._spawn(self._stop(stopping))

    async def _park(self, job: Job, to: Holder, grant: Grant, why: str) -> None:
        assert self.parker is not None
        try:
            refusal = await self.parker.park(grant)
        finally:
            self._parking.pop(job.id, None)
        current = self._jobs.get(job.id)
        if current is None or current.state is not JobState.RUNNING:
            return  # it ended meanwhile: its stop frees its GPUs
        if refusal:
            self.log.warning("gpuspawner: %s could not be parked: %s", job.server, refusal)
            self._stop_for(current, to)
            return
        reason = words.parked_for(server_name(to.user, to.server), why, self.broker.clock())
        self._event(current, Event.PARK, reason=reason, preemptions=current.preemptions + 1)
        JOB_PREEMPTIONS.inc()

    def _running_jobs(self) -> list[RunningJob]:
        running = []
        for job in self._jobs.values():
            grant = self._grant_of(job)
            found = self.rules_of(job.user_id)
            parking = job.id in self._parking
            if job.state is JobState.RUNNING and grant and found and not parking:
                running.append(reading.as_running(job, grant, found[1]))
        return running
