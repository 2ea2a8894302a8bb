"""How jobs give way to people: for each person's start short of GPUs, the jobs the core's
rule picks (`core.give_way`) are parked where parking is on and the driver can park them
(`hub.reclaim.parking`: the person is lent their GPUs at once, and each job is restored there
when they are free again), else stopped with SIGTERM and their group's grace, to wait
again."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from ...core.give_way import RunningJob, giving_way
from ...core.job_rules import JobRules
from ...core.jobs import Event, JobState
from ...core.limits import UserLimits
from ...core.pool import Grant, Holder
from ...core.units import Request
from ...core.words import server_name
from ...records.jobs import Job, JobRecord
from ..base.counters import JOB_PREEMPTIONS
from ..books.broker import Broker
from ..reclaim.parking import Parker
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
        self._evicting: set[int] = set()  # parked people's grant keys, stopped for a start
        self._waking: dict[int, float] = {}  # parked people who want their GPUs: since when
        self._restoring: set[int] = set()  # grant keys whose restore is under way (`restoring`)
        self._for_people: frozenset[str] = frozenset()  # units people's waiting starts take
        # Turns (`turns`): people being parked for the other's turn, when each person's work
        # last came onto its GPU, and why the one on it cannot be parked for a waiting one.
        self._turning: set[int] = set()
        self._on_gpu_since: dict[int, float] = {}
        self._turn_blocked: dict[int, str] = {}

    def parked_bytes(self) -> int:
        """Host memory that parked jobs' GPU work holds now."""
        return self.parker.parked_bytes() if self.parker is not None else 0

    def _make_way(self) -> None:
        """For each person's start short of GPUs, in line order, the jobs that give way; and
        where that is not enough, the parked people whose GPUs it needs are stopped (their
        files kept), those parked longest first, and the jobs lent their GPUs give way. What
        already frees up counts, and what a start ahead will take is not counted twice. A
        parked person's GPUs are never another person's otherwise: they are claimed from
        the start. The units the starts will take are kept from jobs (`kept_from_jobs`); GPUs the
        calendar keeps from a person count for nothing to their start."""
        pool = self.broker.pool
        freed = frozenset(u.id for g in pool.grants() if g.stopping for u in g.units)
        freed |= frozenset().union(*self._parking.values())
        freed |= self._giving_way_units()
        parked = self._parked_people()
        claimed = frozenset(
            u.id
            for g in pool.grants()
            if g.parked and not g.holder.job and not g.stopping and g.key not in self._evicting
            for u in g.units
        )
        for_people: frozenset[str] = frozenset()
        for entry in reading.people_short_of_gpus(self.broker.line):
            found = self.rules_of(entry.holder.user_id)
            closed = self.broker.calendar.kept_from(entry.holder.user, None).now
            request = replace(entry.request, not_on=entry.request.not_on | closed)
            taken = pool.would_take(request, freed, claimed)
            if taken is None and found is not None and found[1].preempts:
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
            if taken is None and parked:
                claimed, taken = self._stop_parked_for(
                    entry.holder, request, freed, claimed, parked
                )
            claimed |= taken or frozenset()
            for_people |= taken or frozenset()
        self._for_people = for_people

    def _giving_way_units(self) -> frozenset[str]:
        """The units of jobs told to give way whose stop has not yet reached their grant
        (`stopping`): they free up as surely, and a pass in that gap must not stop a parked
        person for a start they will serve."""
        return frozenset(
            u.id
            for job in self._jobs.values()
            if job.state is JobState.GIVING_WAY and (grant := self._grant_of(job)) is not None
            for u in grant.units
        )

    def kept_from_jobs(self) -> frozenset[str]:
        """Units no job is given or restored onto now: those of parked people who woke, and
        those people's waiting starts will take once what is being freed is free (the last
        pass of `_make_way`): the line wins over a job."""
        return self._for_people | frozenset(
            u.id
            for g in self.broker.pool.grants()
            if g.key in self._waking and g.parked
            for u in g.units
        )

    def _parked_people(self) -> list[Grant]:
        """People's parked servers that may be stopped for another person's start, parked
        longest first: not those who woke, nor those already being stopped."""
        pool, parker = self.broker.pool, self.parker
        if parker is None:
            return []
        people = [
            g
            for g in pool.grants()
            if g.parked
            and not g.holder.job
            and not g.stopping
            and g.key not in self._evicting | self._waking.keys()
        ]
        return sorted(people, key=lambda g: parker.since(g.key) or 0.0)

    def _lent_to(self, grant: Grant) -> list[Job] | None:
        """The running jobs lent a parked person's GPUs (they give way with them); None where
        one of them cannot give way now (it starts, or is being parked already)."""
        lent = []
        for unit in grant.units:
            holder = self.broker.pool.holder_of(unit.id)
            if holder is None:
                continue
            job = self._by_server(holder.holder.user_id, holder.holder.server)
            if job is None or job.state is not JobState.RUNNING or job.id in self._parking:
                return None
            lent.append(job)
        return lent

    def _stop_parked_for(
        self,
        to: Holder,
        request: Request,
        freed: frozenset[str],
        claimed: frozenset[str],
        parked: list[Grant],
    ) -> tuple[frozenset[str], frozenset[str] | None]:
        """The fewest of `parked`, longest parked first, whose GPUs let `request` start: they
        are stopped and leave `parked`, and the jobs lent their GPUs give way. The claimed
        units without theirs, and what the start will take."""
        pool, opened, chosen, jobs = self.broker.pool, frozenset[str](), [], []
        for grant in parked:
            lent = self._lent_to(grant)
            if lent is None:
                continue
            chosen.append(grant)
            jobs += lent
            opened |= {u.id for u in grant.units}
            taken = pool.would_take(request, freed | opened, claimed - opened)
            if taken is not None:
                reason = words.parked_and_needed(server_name(to.user, to.server))
                for job in jobs:  # the jobs lent their GPUs give way with them
                    self._give_way(job, to)
                for person in chosen:
                    self.log.warning(
                        "gpuspawner: stopping parked %s: %s", person.holder.name, reason
                    )
                    self._evicting.add(person.key)
                    self._spawn(self._stop_person(person, reason))
                    parked.remove(person)
                return claimed - opened, taken
        return claimed, None

    async def _stop_person(self, grant: Grant, reason: str) -> None:
        """Stop a person's server with the reason its user reads on their next spawn page."""
        holder = grant.holder
        try:
            spawner = self.launcher.user(holder.user_id).spawners.get(holder.server)
            if spawner is not None:
                spawner.note_stop(self.broker.clock(), reason)
            await self.launcher.stop(holder.user_id, holder.server)
        except Exception:
            self.log.exception("gpuspawner: stopping %s failed", holder.name)
        now = self.broker.grant_of(grant.key)
        if now is None or not now.stopping:  # not stopping after all: it may be chosen again
            self._evicting.discard(grant.key)

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

    def leave(self, grant: Grant, reason: str) -> None:
        """A window of the calendar opened on a running job's GPUs: it gives way (SIGTERM,
        its grace) and waits again; dispatch keeps it off those GPUs meanwhile."""
        job = self._by_server(grant.holder.user_id, grant.holder.server)
        if job is None or job.state is not JobState.RUNNING or job.id in self._parking:
            return
        stopping = self._event(job, Event.GIVE_WAY, reason=f"It gave way: {reason}.")
        self.log.warning("gpuspawner: %s gives way: %s", job.server, reason)
        self._spawn(self._stop(stopping))

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
