"""The jobs as the board keeps them: each change of state written down at once, counted,
and carried out (a final job's server stopped); the board's tasks kept until
done."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from ...core.jobs import HOLDING, Event, step
from ...core.pool import Grant
from ...records.jobs import Job, JobRecord
from ..base.counters import JOB_GPU_SECONDS, JOB_RUN_SECONDS, JOBS_ENDED
from ..books.broker import Broker
from .launch import Launcher


@dataclass(frozen=True)
class JobsPage:
    """A page of a user's jobs, and where the next page of their ended jobs begins."""

    jobs: list[Job]
    next_after: int | None  # the last ended job listed, where more ended ones follow


class JobBooks:
    def __init__(
        self, broker: Broker, launcher: Launcher, record: JobRecord, log: logging.Logger
    ) -> None:
        self.broker, self.launcher, self.record, self.log = broker, launcher, record, log
        self._jobs: dict[int, Job] = {job.id: job for job in record.unfinished()}
        self._ending: dict[tuple[int, str], Job] = {}  # ended jobs whose container is not gone
        self._tasks: set[asyncio.Task[None]] = set()

    def jobs_of(self, user_id: int, limit: int, after: Job | None = None) -> JobsPage:
        """One page of a user's list: the first (no `after`) has every job of theirs that has
        not ended, newest first, then the `limit` that ended latest; each next one the
        `limit` that ended before `after`. Unfinished jobs are never left off for ended ones:
        they are what the user acts on."""
        unfinished = [j for j in self._jobs.values() if j.user_id == user_id]
        first = sorted(unfinished, key=lambda j: j.id, reverse=True) if after is None else []
        ended = self.record.ended_of(user_id, limit + 1, after)
        more = len(ended) > limit
        return JobsPage([*first, *ended[:limit]], ended[limit - 1].id if more else None)

    def job(self, job_id: int) -> Job | None:
        return self._jobs.get(job_id) or self.record.get(job_id)

    def unfinished(self) -> list[Job]:
        return sorted(self._jobs.values(), key=lambda j: j.id)

    def ended_since(self, since: float, limit: int = 50) -> list[Job]:
        """The jobs that ended after `since`, the latest first: for the admin's page."""
        return [j for j in self.record.recent(limit) if j.final and (j.ended or 0) >= since]

    def _finish(self, job: Job, event: Event, reason: str) -> Job:
        ended = self._event(job, event, reason=reason, ended=self.broker.clock())
        if ended.final and ended is not job:
            self.log.info("gpuspawner: %s %s: %s", job.server, ended.state, reason)
            self._spawn(self._stop(ended))
        return ended

    async def _stop(self, job: Job) -> None:
        try:
            await self.launcher.stop(job.user_id, job.server)
        except Exception:
            self.log.exception("gpuspawner: stopping %s failed", job.server)

    def _event(self, job: Job, event: Event, **changes: Any) -> Job:
        """Apply `event` (and `changes`, only where it moves the job) and write it down."""
        state = step(job.state, event)
        if state is None:
            return job
        moved = self._save(job.but(state=state, **changes))
        if moved.final:
            JOBS_ENDED.labels(str(state)).inc()
            if job.state in HOLDING:
                self._ending[(job.user_id, job.server)] = moved  # its run ends when it is gone
        return moved

    def _count_run(self, job: Job, grant: Grant, now: float, end: str) -> None:
        if job.started is not None:
            ran = max(0.0, now - job.started)
            JOB_RUN_SECONDS.labels(end).observe(ran)
            JOB_GPU_SECONDS.inc(float(grant.weight) * ran)

    def _save(self, job: Job) -> Job:
        self.record.save(job)
        if job.final:
            self._jobs.pop(job.id, None)
        else:
            self._jobs[job.id] = job
        return job

    def _by_server(self, user_id: int, server: str) -> Job | None:
        return next(
            (j for j in self._jobs.values() if j.user_id == user_id and j.server == server),
            None,
        )

    def _grant_of(self, job: Job) -> Grant | None:
        for grant in self.broker.pool.grants():
            holder = grant.holder
            if holder.user_id == job.user_id and holder.server == job.server and not grant.stopping:
                return grant
        return None

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        self.record.close()
