"""Dispatch: each waiting job that fits on GPUs no person waits for starts, in the jobs'
order (`reading.in_order`), as its user's named server, outside any request (`launch`).

A job's dispatch is its own: whatever goes wrong with one (its server already holds GPUs,
its user's record cannot be read) fails that job with a reason its user reads, gives back
any GPUs taken for it, and is logged; the other jobs are dispatched, and the submission or
event that ran the pass is answered as if nothing happened (`JobBoard._guarded`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...core.job_rules import JobRules
from ...core.jobs import Event, InvalidJob, JobState
from ...core.limits import LimitExceeded, UserLimits
from ...core.placement import NotEnoughGPUs
from ...core.pool import Grant, Holder
from ...core.units import Kind, Request
from ...records.jobs import Job
from ..base.counters import JOB_WAIT_SECONDS
from ..line.entry import Entry
from . import reading, words
from .launch import Launch
from .servers import JobServers

Budget = Callable[[int, UserLimits], str | None]  # why a user may not use GPUs now


class Dispatching(JobServers):
    budget_refusal: Budget
    _launching: dict[int, Launch]  # by server id, until its spawner takes it
    _waiting_since: dict[int, float]  # by job id, since giving way (else submitted)
    _open: bool  # jobs start only once the hub runs (its proxy routes to them)

    def dispatch(self) -> None:
        """Start every waiting job that fits on GPUs no person waits for, in the jobs' order.
        A job that cannot be started for a fault of its own (its server already holds GPUs,
        say) fails with the reason, alone: the others are still dispatched."""
        waiting = [j for j in self._jobs.values() if j.state is JobState.WAITING]
        if not waiting or not self._open:
            return
        people = reading.people_short_of_gpus(self.broker.line)
        for job in self._in_order(waiting):
            try:
                self._dispatch(job, people)
            except Exception as error:
                self._not_started(job, error)

    def _dispatch(self, job: Job, people: list[Entry]) -> None:
        found = self.rules_of(job.user_id)
        if found is None:
            self._event(job, Event.CANCEL, reason=words.user_gone(), ended=self.broker.clock())
            return
        limits, rules = found
        try:
            profile = reading.job_profile(self.broker.site.profiles, job.spec.profile, limits)
        except InvalidJob as invalid:
            self._event(job, Event.CANCEL, reason=str(invalid), ended=self.broker.clock())
            return
        request = limits.request_for(profile)
        if any(reading.competes(self.broker.pool.units, request, person) for person in people):
            return  # people first
        self._try_start(job, request, limits, rules)

    def _not_started(self, job: Job, error: Exception) -> None:
        """A job the hub could not start fails with the reason its user reads (and logs the
        fault for the admin); if that too fails, it is logged and the job is left waiting."""
        self.log.exception("gpuspawner: %s could not be started; it fails", job.server)
        try:
            now = self.broker.clock()
            current = self._jobs.get(job.id, job)
            self._event(current, Event.START_FAILED, reason=words.not_started(error), ended=now)
        except Exception:
            self.log.exception("gpuspawner: %s could not be marked failed", job.server)

    def _try_start(self, job: Job, request: Request, limits: UserLimits, rules: JobRules) -> None:
        if self.budget_refusal(job.user_id, limits) is not None:
            return  # it waits for the budget's window to move on
        if self.broker.homes.moving(job.user):
            return  # it runs once its user's home is on its new node
        server_id = self.launcher.server_id(job.user_id, job.server)
        holder = Holder(server_id, job.user_id, job.user, job.server, job=True)
        # A parked person's GPU is lent only to a job the driver could park when they come
        # back: a run on one whole GPU (one on several is an NCCL program, which it cannot
        # checkpoint today; MIG instances and slots are never parked). Others would make
        # the person wait for their grace.
        parkable = request.count == 1 and request.kind is Kind.GPU
        try:
            grant = self.broker.take_now(
                holder,
                request,
                limits.admit,
                self.kept_from_jobs(),
                borrows=parkable,
                lasts=rules.max_runtime.value,  # backfill: off GPUs a window opens on before
            )
        except (NotEnoughGPUs, LimitExceeded):
            return  # later: what is free now does not fit it, or its user holds enough
        try:
            self._launch(job, grant, server_id, rules)
        except Exception:
            self._spawn(self._give_back(server_id))  # after this pass: a release runs the line
            raise

    def _launch(self, job: Job, grant: Grant, server_id: int, rules: JobRules) -> None:
        now = self.broker.clock()
        started = self._event(
            job,
            Event.DISPATCHED,
            started=now,
            attempts=job.attempts + 1,
            gpus=tuple(grant.uuids),
            reason="",
        )
        waited = now - self._waiting_since.pop(job.id, job.submitted)
        JOB_WAIT_SECONDS.observe(max(0.0, waited))
        self._launching[server_id] = Launch(started, grant, rules.preempt_grace)
        self.log.info("gpuspawner: %s starts on %s", job.server, ", ".join(grant.ids))
        self._spawn(self._start(started, server_id, {"profile": job.spec.profile}))

    async def _give_back(self, server_id: int) -> None:
        """GPUs taken for a job whose start then failed before its server was asked to start:
        back to the pool once the engine confirms no container holds them."""
        self._launching.pop(server_id, None)
        removal = self.broker.release_when_gone(server_id)
        if removal is not None:
            await removal

    async def _start(self, job: Job, server_id: int, options: dict[str, Any]) -> None:
        try:
            await self.launcher.start(job.user_id, job.server, options)
        except Exception as error:
            self.log.warning("gpuspawner: %s did not start: %s", job.server, error)
            if self._launching.pop(server_id, None) is not None:  # its spawner never took it
                self.broker.release_when_gone(server_id)
            now = self.broker.clock()
            self._event(job, Event.START_FAILED, reason=words.start_failed(error), ended=now)
            return
        current = self._jobs.get(job.id)
        if current is None or current.state is not JobState.STARTING:
            await self.launcher.stop(job.user_id, job.server)  # cancelled or ended meanwhile
            return
        self._event(current, Event.UP)

    def _in_order(self, jobs: list[Job]) -> list[Job]:
        return reading.in_order(jobs, self.broker.line.recent_use_now(), self._priority)

    def _priority(self, user_id: int) -> int:
        found = self.rules_of(user_id)
        return found[1].priority if found is not None else 0
