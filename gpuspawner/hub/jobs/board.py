"""The hub's jobs: submitted, dispatched onto free GPUs, made to give way, ended.

People come first. A job starts only on GPUs that no person's waiting start
could use, in its own order (its group's `job_priority`, then its user's
recent GPU-hours, then submission: the waiting line's rule); a smaller job
behind a larger one that does not fit starts (backfill). When a person's
start waits for want of GPUs and jobs hold GPUs it could use, jobs give way
(`giving_way`: parked, or stopped with their grace); the person's start then
gets the GPUs from the line, once lent or once Docker confirms the jobs'
containers gone. Each job's state is written down as it changes (`books`).

The board acts on events, never on a timer of its own: a submission, the
line's pass (after every release, start and monitor tick), a job's
report, its server's end, and the monitor's tick (max_runtime).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from ...core.job_hints import GPUUse
from ...core.job_rules import JobRules
from ...core.jobs import (
    HOLDING,
    Event,
    InvalidJob,
    JobSpec,
    JobState,
    server_of,
)
from ...core.limits import UserLimits
from ...core.pool import Grant
from ...records.jobs import Job, JobRecord
from ..base.counters import JOB_PREEMPTIONS
from ..books.broker import Broker
from ..reclaim.parking import Parker
from . import reading, words
from .dispatching import Budget, Dispatching
from .giving_way import Rules
from .launch import Launch, Launcher


class JobBoard(Dispatching):
    def __init__(
        self,
        broker: Broker,
        launcher: Launcher,
        record: JobRecord,
        rules_of: Rules,
        budget_refusal: Budget,
        log: logging.Logger,
        parker: Parker | None = None,
    ) -> None:
        super().__init__(broker, launcher, record, log, rules_of, parker)
        self.budget_refusal = budget_refusal
        self._launching: dict[int, Launch] = {}  # by server id, until its spawner takes it
        self._waiting_since: dict[int, float] = {}  # by job id, since giving way (else submitted)
        self._open = False  # jobs start only once the hub runs (its proxy routes to them)
        self._shutting_down = False

    def open(self) -> None:
        """The hub runs: start what waits."""
        self._open = True
        self.line_ran()

    def close(self) -> None:
        """The hub shuts down: nothing starts any more, and a job whose server its shutdown
        stops (cleanup_servers) waits for the next hub rather than failing."""
        self._open = False
        self._shutting_down = True

    # --- what others read ---------------------------------------------------------------
    def gpu_use(self, job: Job) -> list[GPUUse]:
        """What a running job's GPUs do now, as the monitor last sampled them."""
        grant = self._grant_of(job)
        return reading.gpu_use(grant, self.broker.telemetry) if grant is not None else []

    def launching(self, server_id: int) -> Launch | None:
        """The job a starting server runs, for its spawner; None for a person's server."""
        return self._launching.pop(server_id, None)

    def awaiting_start(self, server_id: int) -> bool:
        """Whether a job's GPUs wait for this server's start to take them."""
        return server_id in self._launching

    def places(self) -> dict[int, int]:
        """Each waiting job's place among the waiting jobs (1: next), by id: one order for
        a whole list of jobs (asked once per job, the GPUs API took over a second for 100
        waiting jobs)."""
        waiting = self._in_order([j for j in self._jobs.values() if j.state is JobState.WAITING])
        return {j.id: place for place, j in enumerate(waiting, 1)}

    # --- a user's acts --------------------------------------------------------------------
    def submit(self, user_id: int, user: str, spec: JobSpec) -> Job:
        """Write a job down and start it if GPUs are free; InvalidJob (what to fix) where
        it cannot be, holding nothing."""
        limits, rules = self._rules(user_id)
        profile = reading.job_profile(self.broker.site.profiles, spec.profile, limits)
        theirs = [j for j in self._jobs.values() if j.user_id == user_id]
        most = rules.max_jobs
        if most.value is not None and len(theirs) >= most.value:
            raise InvalidJob(words.too_many(len(theirs), most))
        refusal = self.budget_refusal(user_id, limits)
        if refusal is not None:
            raise InvalidJob(refusal)
        request = limits.request_for(profile)
        if self.broker.pool.on_one_machine(request) < request.count:
            raise InvalidJob(words.never_fits(profile, request))
        job = self.record.add(user_id, user, spec, self.broker.clock())
        self._jobs[job.id] = job
        self.log.info("gpuspawner: %s submitted %s (%s)", user, job.server, spec.path)
        self._guarded(self.dispatch)
        return self.job(job.id) or job

    def cancel(self, job: Job) -> Job:
        now = self.broker.clock()
        reason = words.cancelled(now, ran=job.attempts > 0)
        ended = self._event(job, Event.CANCEL, reason=reason, ended=now)
        if job.state in HOLDING - {JobState.STARTING}:
            self._spawn(self._stop(ended))
        return ended

    def report(self, job: Job, progress: Mapping[str, Any]) -> Job:
        """The runner's word from inside the job's container."""
        job = self._save(job.but(progress=dict(progress)))
        state = progress.get("state")
        if state == "done":
            return self._finish(job, Event.FINISHED, words.finished())
        if state == "failed":
            return self._finish(job, Event.BROKE, words.broke(progress.get("error"), job.spec))
        return job

    # --- events from the broker and the monitor -------------------------------------------
    def line_ran(self) -> None:
        """The line moved (a release, a start, a monitor tick): make jobs give way to people
        who wait, then fill what is free, then bring parked jobs back."""
        if not self._open:
            return
        for step in (self._make_way, self.dispatch, self._restore_parked):
            self._guarded(step)

    def _guarded(self, step: Callable[[], None]) -> None:
        """One step of the jobs' pass: a fault in it is logged, and never reaches the
        request or the event that ran the pass, nor keeps the other steps from running."""
        try:
            step()
        except Exception:
            self.log.exception("gpuspawner: the jobs' pass failed (%s)", step.__name__)

    def released(self, grant: Grant) -> None:
        """Docker confirmed a server's container gone: if a job's, its run ended (it gave
        way, or ended as it said, or without a word)."""
        where = (grant.holder.user_id, grant.holder.server)
        now = self.broker.clock()
        job = self._by_server(*where)
        if self.parker is not None:
            self.parker.forget(grant.key)
        self.forget_server(grant.key)
        if job is not None and job.state is JobState.GIVING_WAY:
            self._event(job, Event.ENDED, ended=None, preemptions=job.preemptions + 1)
            self._waiting_since[job.id] = now
            JOB_PREEMPTIONS.inc()
            self._count_run(job, grant, now, "gave way")
            self.log.info("gpuspawner: %s gave way and waits again", job.server)
            return
        if job is not None and self._shutting_down:
            self._event(job, Event.HUB_STOPPED, reason=words.hub_stopped())
            self._waiting_since[job.id] = now
            self._count_run(job, grant, now, "hub stopped")
            self.log.info("gpuspawner: %s was stopped with the hub and waits again", job.server)
            return
        if job is not None:
            self._event(job, Event.ENDED, reason=words.ended_unreported(), ended=now)
        ended = self._ending.pop(where, None)
        if ended is not None:
            self._count_run(ended, grant, now, str(ended.state))

    def tick(self, now: float) -> None:
        """Each monitor tick: a job past its max_runtime is stopped, its outputs kept; ended
        jobs' stopped servers are removed."""
        self._remove_ended_servers_later()
        for job in list(self._jobs.values()):
            if job.state is not JobState.RUNNING or job.started is None:
                continue
            limits_rules = self.rules_of(job.user_id)
            limit = limits_rules[1].max_runtime if limits_rules else None
            if limit is None or limit.value is None or now - job.started < limit.value:
                continue
            self._finish(job, Event.OVER_RUNTIME, words.over_runtime(limit))

    def _rules(self, user_id: int) -> tuple[UserLimits, JobRules]:
        found = self.rules_of(user_id)
        if found is None:
            raise InvalidJob("No such user")
        return found

    # --- at hub start -------------------------------------------------------------------------
    def recover(self) -> None:
        """After a restart: a job whose server runs on (Docker's books) runs on, parked or
        not as the driver says; one that ended while the hub was away ended (or, giving
        way, waits again)."""
        now = time.time()
        for job in list(self._jobs.values()):
            if job.state is JobState.WAITING:
                continue
            grant = self._grant_of(job)
            if grant is not None:
                if job.state is JobState.STARTING:
                    self._event(job, Event.UP)
                elif job.state is JobState.GIVING_WAY:
                    self._spawn(self._stop(job))
                elif job.state is JobState.PARKED and not grant.parked:
                    self._event(job, Event.RESTORED, reason="")  # the driver's word
                elif job.state is JobState.RUNNING and grant.parked:
                    self._event(job, Event.PARK, reason=words.parked_while_away())
                continue
            if job.state is JobState.GIVING_WAY:
                self._event(job, Event.ENDED, preemptions=job.preemptions + 1)
            else:
                self._event(job, Event.ENDED, reason=words.ended_while_away(), ended=now)
        self.log.info(
            "gpuspawner: %d job(s) waiting, %d running",
            sum(j.state is JobState.WAITING for j in self._jobs.values()),
            sum(j.state is JobState.RUNNING for j in self._jobs.values()),
        )


__all__ = ["JobBoard", "Launch", "server_of"]
