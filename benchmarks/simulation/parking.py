"""Parking on the simulator's clock (issue #29), through the real core's `Pool.park` and
`Pool.restore`: the jobs row, with three changes to each minute.

1. A job that must give way to a person's start is parked, not stopped: the driver's lock
   and checkpoint take seconds, so its GPUs are lent to the person in the same minute (a
   second pass of the line), and its run loses nothing: it stands still until it comes
   back on the same GPUs.
2. A person's server whose GPUs have been idle for their group's `gpu_idle_timeout` is
   parked, not stopped: its kernel lives, its GPUs run jobs meanwhile. When its person
   runs something again (a busy segment) the jobs on its GPUs are parked (a person beats a
   job) and it is restored in the same minute; until it is, its person waits, and that
   wait is a resume wait. Parked for MAX_PARKED, it is stopped as today.
3. Parked jobs come back, longest parked first, whenever their GPUs are free, their
   user's limits admit them, and no person's start in line could use those GPUs (people
   first, as for waiting jobs), before waiting jobs are dispatched.

Bounds: parking and restoring take no simulated time (seconds, against minutes: the device
check measures them) and never fail (the team's work runs one CUDA process per GPU, no
MIG); host memory is not limited (`park_memory_limit` unset).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from gpuspawner.core.limits import LimitExceeded
from gpuspawner.core.pool import StillLent
from gpuspawner.core.units import Request

from .board import Job, JobsReplay
from .jobs import TrainingJob
from .model import Server, Work
from .policies import Policy
from .site import Site
from .trace import Session

MAX_PARKED = 12 * 3600.0  # seconds a person's server may stay parked: then stopped
PARK_AFTER = 10 * 60.0  # seconds idle after which a person on a parked job's GPU is parked


class ParkingReplay(JobsReplay):
    def __init__(
        self,
        sessions: list[Session],
        jobs: Sequence[TrainingJob],
        site: Site,
        policy: Policy,
        start: datetime,
        minutes: int,
    ) -> None:
        super().__init__(sessions, jobs, site, policy, start, minutes)
        self.parked_jobs: dict[int, float] = {}  # job key → since
        self.parked_people: dict[int, float] = {}  # server key → since
        self.waking: dict[int, float] = {}  # server key → since when its person waits

    # --- jobs -------------------------------------------------------------------------
    def give_way(self, job: Job, to: Work) -> None:
        self._park_job(job)
        to.due = self.now  # asks again in this minute's second pass

    def _park_job(self, job: Job) -> None:
        self.pool.park(job.key)
        job.parked = True
        self.parked_jobs[job.key] = self.now
        self.out.parked["jobs"] += 1

    def make_way(self) -> None:
        """Jobs park for people's starts; a start that still cannot fit, and would were
        parked people's GPUs free, has them stopped, longest parked first. Those starts
        then ask again in this minute: parking takes seconds, not a grace."""
        super().make_way()
        for work in self.people_short():
            request = Request(gpus=work.gpus)
            if work.due <= self.now or self.pool.would_take(request, frozenset()) is None:
                continue  # asks again at once, or parked people's GPUs would not do
            for key in sorted(self.parked_people, key=self.parked_people.__getitem__):
                if self.pool.would_take(request, frozenset(), self.kept_back()) is not None:
                    break
                self.cull(self.servers[key], "parked, its GPU needed")
            work.due = self.now
        if any(w.due <= self.now for w in self.in_line):
            self.ask()  # a second pass of the line

    def kept_back(self) -> frozenset[str]:
        """Parked people's GPUs: no person's start is given them."""
        return frozenset(
            unit_id
            for key in self.parked_people
            for unit_id in self.pool.grant_of(key).ids  # type: ignore[union-attr]
        )

    def dispatch(self) -> None:
        self.restore_jobs()  # parked jobs first: they come back before new ones start
        super().dispatch()

    def restore_jobs(self) -> None:
        people = self.people_short()
        for key in sorted(self.parked_jobs, key=self.parked_jobs.__getitem__):
            job = self.by_key[key]
            if any(self._compete(job.request, Request(gpus=w.gpus)) for w in people):
                continue
            try:
                self.pool.restore(key, job.limits.admit)
            except (StillLent, LimitExceeded):
                continue
            job.parked = False
            del self.parked_jobs[key]

    # --- people -----------------------------------------------------------------------
    def watch(self) -> None:
        for key in list(self.parked_people):
            server = self.servers[key]
            segment = server.work.segment_now() if server.work else None
            if segment is not None and segment.busy:
                self.waking.setdefault(key, self.now)
                self._wake(server)
        super().watch()
        for server in list(self.servers.values()):
            idle = self.idle.idle_since.get(server.key)
            lunch = idle is not None and self.now - idle >= PARK_AFTER
            if lunch and server.key not in self.parked_people and self._on_parked_job(server):
                self.cull(server, "gpu_idle_timeout")  # parked: the job comes back

    def _on_parked_job(self, server: Server) -> bool:
        grant = self.pool.grant_of(server.key)
        return grant is not None and any(
            g.holder.job for unit_id in grant.ids for g in self.pool.bound_to(unit_id)
        )

    def _wake(self, server: Server) -> None:
        grant = self.pool.grant_of(server.key)
        assert grant is not None
        for unit_id in grant.ids:
            holder = self.pool.holder_of(unit_id)
            if holder is not None and holder.key in self.by_key:
                self._park_job(self.by_key[holder.key])
        try:
            self.pool.restore(server.key)  # a person's wake is not held by their limits
        except StillLent:
            return
        del self.parked_people[server.key]
        self.out.resume_waits.append(self.now - self.waking.pop(server.key))

    def _verdict(self, server: Server) -> str | None:
        if server.key not in self.parked_people:
            return super()._verdict(server)
        server.busy = False  # parked: nothing of it runs on a GPU
        if self.now - self.parked_people[server.key] >= MAX_PARKED:
            return "max_parked"
        why = super()._verdict(server)
        return None if why == "gpu_idle_timeout" else why  # parked already

    def cull(self, server: Server, why: str) -> None:
        if why != "gpu_idle_timeout":
            super().cull(server, why)
            return
        self.pool.park(server.key)
        self.parked_people[server.key] = self.now
        self.out.parked["people"] += 1

    def stop(self, server: Server) -> None:
        self.parked_people.pop(server.key, None)
        self.waking.pop(server.key, None)
        super().stop(server)

    def works(self, server: Server) -> bool:
        return server.key not in self.waking  # its person waits for it to be restored

    def tally(self) -> tuple[int, int, int]:
        held, busy, wanted = super().tally()
        return held - sum(self.servers[k].gpus for k in self.parked_people), busy, wanted
