"""Parking on the simulator's clock (issue #29): the jobs row, with jobs parked for people
and people parked at their GPU-idle limit, through the real core's `Pool.park` and
`Pool.restore`, each GPU's moves those of the parking arbiter (`core.parking.decide`).

1. A job that must give way to a person's start is parked, not stopped, if the driver can
   park it: a run on one GPU (a multi-GPU run is an NCCL program, which it cannot today;
   that one gives way by SIGTERM and its grace, unless the policy says `parks_nccl`).
   Parking takes seconds, so its GPUs go to the person in the same minute (a second
   pass of the line), and its run loses nothing: it stands still until it comes back on
   the same GPUs. A person's start held by their own GPU limit parks their own jobs.
2. A person's server whose GPUs have been idle for their group's `gpu_idle_timeout` is
   parked, not stopped: its kernel lives, its GPUs run parkable jobs meanwhile. When its
   person runs something again (a busy segment) the arbiter parks the job on its GPUs (a
   person beats a job) and restores it in the same minute; until it is restored its
   person waits, a resume wait. A job that cannot park may have people parked at that
   limit stopped, as the hub stops them today. Parked for MAX_PARKED, it is stopped.
3. Parked jobs come back whenever their GPUs are free, their user's limits admit them,
   and no person's start in line could use those GPUs (people first), before waiting
   jobs are dispatched.
4. With turns (`Policy.turns`), a person's 1-GPU start that nothing else can serve shares
   a GPU with one other person (`Pool.allocate` with `turns`): it starts at once, parked
   if the other is on the GPU. While both want the GPU they take turns of
   `turn_quantum`; an idle one makes way at once. A person held back meanwhile waits
   (a resume wait), and their busy work is slowed by as much.

Bounds: parking and restoring take no simulated time (seconds, against minutes: the device
check measures them) and never fail; host memory is not limited (`park_memory_limit`).
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from typing import Any

from gpuspawner.core.jobs import JobState
from gpuspawner.core.limits import LimitExceeded
from gpuspawner.core.parking import Bound, R, Step, decide
from gpuspawner.core.pool import StillLent
from gpuspawner.core.units import Request

from .board import Job, JobsReplay
from .model import Server, Work

MAX_PARKED = 12 * 3600.0  # seconds a person's server may stay parked: then stopped
PARK_AFTER = 10 * 60.0  # seconds idle after which a person on a parked job's GPU is parked
MOVES_PER_MINUTE = 2  # on one GPU: a park and the restore it makes room for
ROOM = 2**62  # the GPUs' free memory: not modelled, so never what holds a restore back


class ParkingReplay(JobsReplay):
    def __init__(self, *args: Any, **kwargs: Any) -> None:  # JobsReplay's
        super().__init__(*args, **kwargs)
        self.parked_jobs: dict[int, float] = {}  # job key → since
        self.parked_people: dict[int, float] = {}  # server key → since
        self.waking: dict[int, float] = {}  # server key → since when its person waits
        self.at_limit: set[int] = set()  # people parked at their GPU-idle limit (not for a job)
        self.on_gpu: dict[int, float] = {}  # person's server key → since when it is resident

    # --- jobs -------------------------------------------------------------------------
    def grant(self, work: Work) -> bool:
        if not self._grant(work):
            return False
        if not self.is_run(work):
            grant = self.pool.grant_of(work.key)
            if grant is not None and grant.parked:  # in turns: the other person is on it
                self.parked_people[work.key] = self.now
            else:
                self.on_gpu[work.key] = self.now
        return True

    def in_turns(self, work: Work) -> bool:
        return self.policy.turns and work.gpus == 1 and not self.is_run(work)

    def _grant(self, work: Work) -> bool:
        """A person's start held by their own GPU limit parks their own running jobs, the
        most recently started first, until it fits: parking loses nothing, so nobody waits
        for their own jobs."""
        if super().grant(work):
            return True
        if self.is_run(work) or work.refused_by != "max_gpus_per_user":
            return False
        own = [
            j
            for j in self.holding()
            if j.user_id == work.user_id
            and j.state is JobState.RUNNING
            and not j.parked
            and self.parkable(j)
        ]
        for job in sorted(own, key=lambda j: -j.started):
            self._park_job(job)
            if super().grant(work):
                return True
        return False

    def parkable(self, job: Job) -> bool:
        """A run on one GPU; one on several is an NCCL program, which the driver cannot
        checkpoint today (NVIDIA/cuda-checkpoint #27, #28, #45), unless the policy says
        what a driver that could would give."""
        return job.run.gpus == 1 or self.policy.parks_nccl

    def give_way(self, job: Job, to: Work) -> None:
        if not self.parkable(job):
            super().give_way(job, to)  # SIGTERM and its grace, as without parking
            return
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
        return self._units_of(self.parked_people)

    def dispatch(self) -> None:
        self.arbitrate()  # parked jobs come back before new ones start
        self._reclaim_for_jobs()
        super().dispatch()

    def _reclaim_for_jobs(self) -> None:
        """A job that cannot be parked is never lent a parked person's GPUs (it could not
        give them back at once). Where it would fit on the GPUs of people parked at their
        GPU-idle limit, those are stopped, longest parked first, as the hub stops them
        today at that limit: parking never keeps a GPU from a job longer than that."""
        if not self.at_limit:
            return
        people = self.people_short()
        waiting = [j for j in self.waiting() if not self.parkable(j)]
        seen = self.sight(waiting, people)
        self.unless_seen("reclaim", seen, lambda: self._reclaim(waiting, people))

    def _reclaim(self, waiting: list[Job], people: list[Work]) -> None:
        for job in sorted(waiting, key=lambda j: j.submitted):
            if self.wanted_by(people, job):
                continue
            reclaimable = self._units_of(self.at_limit)
            taken = self.pool.would_take(
                job.request, frozenset(), self.pool.parked_units() - reclaimable
            )
            if taken is None or not taken & reclaimable:
                continue
            try:
                job.limits.admit(Fraction(job.run.gpus), job.user_id, self.pool.usage())
            except LimitExceeded:
                continue
            for key in sorted(self.at_limit, key=self.parked_people.__getitem__):
                if taken & self._units_of({key}):
                    self.cull(self.servers[key], "parked, its GPU needed")

    def _units_of(self, keys: Iterable[int]) -> frozenset[str]:
        return frozenset(u for k in keys for u in self.pool.grant_of(k).ids)  # type: ignore[union-attr]

    # --- the arbiter, GPU by GPU --------------------------------------------------------
    def watch(self) -> None:
        for key in self.parked_people:
            work = self.servers[key].work
            if work is not None and work.segment_now().busy:  # a cell runs: wake up
                self.waking.setdefault(key, self.now)
        self.arbitrate()
        super().watch()
        self.arbitrate()  # people idle for PARK_AFTER on a parked job's GPU

    def arbitrate(self) -> None:
        """On each GPU parked work is bound to, the moves `core.parking.decide` says: not
        looked at again while the arbiter sees what it saw when it last moved nothing (it
        looks three times a minute, and the GPUs rarely change in between)."""
        units = sorted(self.pool.parked_units())
        if units:
            self.unless_seen("arbitrate", self._look(), lambda: self._arbitrate(units))

    def _arbitrate(self, units: list[str]) -> None:
        for unit_id in units:
            for _ in range(MOVES_PER_MINUTE):
                bound = self._bound(unit_id)
                step = decide(bound, ROOM, self.now, PARK_AFTER, self.policy.turn_quantum)
                if step is None or not self._move(step, bound):
                    break

    def _look(self) -> object:
        """What the arbiter sees besides the books (who is bound to each GPU, parked or
        resident, and since when): the clock, the idle clock, who waits to be restored, and
        the GPUs that people's starts short of them want (`_may_come_back`)."""
        people = [w.gpus for w in self.people_short()]
        return self.now, dict(self.idle.idle_since), set(self.waking), people

    def _bound(self, unit_id: str) -> list[Bound]:
        bound = []
        resident = self.pool.holder_of(unit_id)
        if resident is not None and not resident.stopping:
            job = resident.holder.job
            idle = None if job else self.idle.idle_since.get(resident.key)
            since = self.on_gpu.get(resident.key, 0.0)
            bound.append(Bound(str(resident.key), not job, R.RESIDENT, since, idle_since=idle))
        for grant in self.pool.bound_to(unit_id):
            key, job = grant.key, grant.holder.job
            since = (self.parked_jobs if job else self.parked_people)[key]
            wants = self._may_come_back(key) if job else key in self.waking
            bound.append(Bound(str(key), not job, R.PARKED, since, wants=wants))
        return bound

    def _may_come_back(self, key: int) -> bool:
        """People first: not while a start in line could use the job's GPUs."""
        return not self.wanted_by(self.people_short(), self.by_key[key])

    def _move(self, step: Step, bound: list[Bound]) -> bool:
        """Parks or restores the grant `step` names; False if the pool refused."""
        key = int(step.holder)
        job = self.by_key.get(key)
        if step.action == "park" and job is not None:
            self._park_job(job)
        elif step.action == "park":
            turn = any(b.person and b.wants and b.residency is R.PARKED for b in bound)
            self._park_person(key, why="turns" if turn else "people")
        elif step.action == "restore" and job is not None:
            try:
                self.pool.restore(key, job.limits.admit)
            except (StillLent, LimitExceeded):
                return False
            job.parked = False
            del self.parked_jobs[key]
        elif step.action == "restore":
            try:
                self.pool.restore(key)  # a person's return is not held by their limits
            except StillLent:
                return False
            del self.parked_people[key]
            self.at_limit.discard(key)
            self.idle.forget(key)  # back because a cell runs: its GPU is not idle
            self.on_gpu[key] = self.now
            self.out.resume_waits.append(self.now - self.waking.pop(key))
        else:
            return False  # "give way", "start": nothing here is unparkable or starting
        return True

    def _park_person(self, key: int, at_limit: bool = False, why: str = "people") -> None:
        """`why`: "people" (its GPU idle, for a job), or "turns" (for another person)."""
        self.pool.park(key)
        self.parked_people[key] = self.now
        self.on_gpu.pop(key, None)
        if at_limit:
            self.at_limit.add(key)
        self.out.parked[why] += 1

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
        self._park_person(server.key, at_limit=True)

    def stop(self, server: Server) -> None:
        self.parked_people.pop(server.key, None)
        self.on_gpu.pop(server.key, None)
        self.waking.pop(server.key, None)
        self.at_limit.discard(server.key)
        super().stop(server)

    def works(self, server: Server) -> bool:
        return server.key not in self.waking  # its person waits for it to be restored

    def advance(self) -> None:
        """Busy minutes of people, and of those, the ones spent waiting to be restored."""
        for server in self.servers.values():
            work = server.work
            if work is not None and not self.is_run(work) and work.segment_now().busy:
                self.out.people_busy += 1
                self.out.held_back += server.key in self.waking
        super().advance()

    def tally(self) -> tuple[int, int, int]:
        held, busy, wanted = super().tally()
        return held - sum(self.servers[k].gpus for k in self.parked_people), busy, wanted
