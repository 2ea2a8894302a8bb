"""The hub's job board (`hub/jobs/board.py`) played on the simulator's clock, for the jobs row.

Each simulated minute, after the people's line pass, as the hub's board does
after each of its line's passes:
1. jobs whose grace has run out are gone: their GPUs go back (`Pool.release`)
   and they wait again (`jobs.step`: ENDED), their run back to its latest
   checkpoint;
2. owners submit the jobs due (refused while they have `max_jobs` unfinished:
   they submit again RETRY_MINUTES later);
3. for each person's start in line short of GPUs (and allowed to wait,
   `max_wait` > 0), in line order, the jobs `give_way.giving_way` picks, with
   `Pool.fits_if_freed` as its test, get SIGTERM and their group's
   `preempt_grace`: their GPUs are stopping until it has run out;
4. waiting jobs start in the jobs' order (`line.in_order`: job priority, the
   user's recent GPU-hours, submission) where they fit, smaller ones behind a
   larger one that does not (backfill), but none while a person's start that
   could use the same GPUs is short of them (people first).
A running job is busy every minute, writes a checkpoint every `checkpoint`
minutes of its run, is never culled (its limit is `max_runtime`), and ends
when its run is done. Starting and removing its container take no time.

Two bounds, each the worst case the hub allows: a job that gives way holds its
GPUs, idle, for its whole grace (a job that exits sooner frees them sooner),
and it saves nothing on SIGTERM, so what it did since its latest checkpoint is
lost (a job that saves then loses nothing).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from gpuspawner.core.give_way import RunningJob, giving_way
from gpuspawner.core.job_rules import JobRules, job_rules
from gpuspawner.core.jobs import Event, JobState, server_of, step
from gpuspawner.core.limits import LimitExceeded, UserLimits
from gpuspawner.core.line import Waiting, in_order
from gpuspawner.core.pool import Holder, NotEnoughGPUs
from gpuspawner.core.units import Request
from gpuspawner.core.words import DEFAULT_GROUP

from .jobs import TrainingJob
from .model import MINUTE, RETRY_MINUTES, Replay, Work
from .policies import Policy
from .site import Site
from .trace import Session


@dataclass
class Job:
    """One job on the board: where its run stands."""

    run: TrainingJob
    id: int
    key: int  # its server's id
    user_id: int
    limits: UserLimits
    rules: JobRules
    due: float  # when its owner submits it (again)
    state: JobState | None = None  # None: not submitted yet
    submitted: float = 0.0
    done: int = 0  # minutes of its run done
    saved: int = 0  # minutes of its run in its latest checkpoint
    started: float = 0.0  # its latest attempt's start
    preemptions: int = 0
    stopping_until: float = 0.0  # giving way: when its grace runs out
    for_key: int = -1  # giving way: the start it gives way to
    put_off: bool = False  # its submission was refused once (max_jobs reached)
    parked: bool = False  # parked for a person (`parking.ParkingReplay`): its run stands still

    @property
    def request(self) -> Request:
        return Request(gpus=self.run.gpus)


class JobsReplay(Replay):
    def __init__(
        self,
        sessions: list[Session],
        jobs: Sequence[TrainingJob],
        site: Site,
        policy: Policy,
        start: datetime,
        minutes: int,
    ) -> None:
        assert policy.queue and not policy.fixed, "jobs give way to starts waiting in line"
        super().__init__(sessions, site, policy, start, minutes, more_users=[j.user for j in jobs])
        self.pool = self.pools[self.users[0]]
        first = len(self.keys)  # jobs' server ids follow the people's
        self.jobs = [
            Job(
                run,
                i,
                first + i,
                self.users.index(run.user),
                site.limits.for_user(run.groups),
                self._rules(run),
                (run.submitted - start).total_seconds(),
            )
            for i, run in enumerate(jobs, 1)
        ]
        self.asked = {job.id: job.due for job in self.jobs}  # its first submission
        self.unsubmitted = list(self.jobs)  # not submitted yet
        self.live: list[Job] = []  # submitted, and not done or failed yet: by id
        # the live jobs waiting and holding GPUs, and when they were split (`_live_split`)
        self._split: tuple[tuple[int, int], list[Job], list[Job]] = ((-1, -1), [], [])
        self.by_key = {job.key: job for job in self.jobs}
        # a pass → the books and what it saw, the latest time it changed nothing (`unless_seen`)
        self.still: dict[str, tuple[int, object]] = {}

    def _rules(self, run: TrainingJob) -> JobRules:
        rules = job_rules(self.site.limits, run.groups)
        grace = self.policy.grace
        return rules if grace is None else replace(rules, preempt_grace=grace)

    def step(self) -> None:
        self.end_graces()
        self.submit()
        self.ask()
        self.make_way()
        self.dispatch()
        self.over_runtime()
        self.watch()
        self.count()
        self.advance()
        self.advance_jobs()

    def finish(self) -> None:
        super().finish()
        end = self.now + MINUTE
        self.out.unfinished += [
            end - self.asked[j.id] for j in self.jobs if j.state is None or not _final(j)
        ]

    def waiting(self) -> list[Job]:
        """The live jobs waiting to start, by id."""
        return self._live_split()[0]

    def holding(self) -> list[Job]:
        """The live jobs holding GPUs (running, parked, or giving way), by id."""
        return self._live_split()[1]

    def _live_split(self) -> tuple[list[Job], list[Job]]:
        """The live jobs, waiting and holding GPUs: split anew only when the pool's books
        have changed (every start, give way and end of a job, and end of a grace, changes
        them) or a job was submitted, not every time the minute asks."""
        seen = (self.pool.changes, len(self.unsubmitted))
        if self._split[0] != seen:
            waiting = [j for j in self.live if j.state is JobState.WAITING]
            holding = [j for j in self.live if j.state is not JobState.WAITING]
            self._split = (seen, waiting, holding)
        return self._split[1], self._split[2]

    # --- 1. and 2.: jobs gone after their grace, submissions ---------------------------
    def end_graces(self) -> None:
        for job in self.holding():
            if job.state is JobState.GIVING_WAY and job.stopping_until <= self.now:
                self._gone(job)
                job.state = step(job.state, Event.ENDED)
                job.preemptions += 1

    def submit(self) -> None:
        due = [j for j in self.unsubmitted if j.due <= self.now]
        if not due:
            return
        theirs = Counter(j.user_id for j in self.live)  # each owner's unfinished jobs
        for job in due:
            most = job.rules.max_jobs.value
            if most is not None and theirs[job.user_id] >= most:
                self.out.jobs_refused += not job.put_off
                job.put_off = True
                job.due = self.now + RETRY_MINUTES * MINUTE
                continue
            job.state, job.submitted = JobState.WAITING, self.now
            self.unsubmitted.remove(job)
            self.live.append(job)
            theirs[job.user_id] += 1
        self.live.sort(key=lambda j: j.id)

    # --- 3. giving way -----------------------------------------------------------------
    def people_short(self) -> list[Work]:
        """People's starts in line short of free GPUs that may wait, in line order."""
        return [
            w for w in self.in_line if w.key in self.short and w.limits.max_wait.value
        ]  # max_wait 0: refused at once in the hub, so no job gives way to it

    def make_way(self) -> None:
        """As the hub's board makes way: what frees up counts, once, for the first to need it."""
        freed = frozenset(
            u.id for grant in self.pool.grants() if grant.stopping for u in grant.units
        )
        claimed = self.kept_back()
        for work in self.people_short():
            if not job_rules(self.site.limits, work.session.groups).preempts:
                continue
            request = Request(gpus=work.gpus)
            taken = self.pool.would_take(request, freed, claimed)
            if taken is None:
                fits = self._fits_with(request, freed, claimed)
                chosen = giving_way(self.running(), fits, self.now, work.user_id)
                for victim in chosen:
                    self.give_way(self.by_key[victim.key], work)
                    freed |= victim.units
                taken = self.pool.would_take(request, freed, claimed) if chosen else None
            claimed |= taken or frozenset()

    def kept_back(self) -> frozenset[str]:
        """Units no person's start may be given (with parking: parked people's)."""
        return frozenset()

    def _fits_with(
        self, request: Request, freed: frozenset[str], claimed: frozenset[str]
    ) -> Callable[[frozenset[str]], bool]:
        return lambda more: self.pool.fits_if_freed(request, freed | more, claimed)

    def running(self) -> list[RunningJob]:
        running = []
        for job in self.holding():
            grant = self.pool.grant_of(job.key)
            if job.state is not JobState.RUNNING or grant is None or grant.parked:
                continue
            rules = job.rules
            running.append(
                RunningJob(
                    job.key,
                    job.user_id,
                    frozenset(u.id for u in grant.units),
                    rules.priority,
                    job.started,
                    rules.min_runtime,
                    rules.give_way,
                    job.preemptions,
                    rules.max_preemptions,
                )
            )
        return running

    def give_way(self, job: Job, to: Work) -> None:
        """SIGTERM: its GPUs are stopping for its grace; its run goes back to its checkpoint.
        Counted apart: a job made to give way to a start that jobs already giving way to it
        free enough whole GPUs for (`Pool.fits_if_freed` counts only held units, not
        stopping ones, as freed, so the hub's board does not see them freeing up)."""
        already = sum(
            j.run.gpus
            for j in self.holding()
            if j.state is JobState.GIVING_WAY and j.for_key == to.key
        )
        self.out.stopped += 1
        self.out.needless += already >= to.gpus
        job.state, job.for_key = step(JobState.RUNNING, Event.GIVE_WAY), to.key
        self.pool.begin_release(job.key)
        grace = math.ceil(job.rules.preempt_grace / MINUTE) * MINUTE
        job.stopping_until = self.now + grace
        self.out.run_lost += (job.done - job.saved) * job.run.gpus
        job.done = job.saved

    # --- 4. dispatch -------------------------------------------------------------------
    def dispatch(self) -> None:
        free = self.pool.free_count()
        waiting = self.waiting()
        if not waiting or not any(j.run.gpus <= free for j in waiting):
            return  # (a shortcut: the pool would refuse each of them for want of GPUs)
        people = self.people_short()
        seen = self.sight(waiting, people)
        self.unless_seen("dispatch", seen, lambda: self._dispatch(waiting, people, free))

    def _dispatch(self, waiting: list[Job], people: list[Work], free: int) -> None:
        line = [
            Waiting(j.id, j.user_id, DEFAULT_GROUP, j.rules.priority, 0.0, j.submitted)
            for j in waiting
        ]
        order = in_order(line, self.line.recent(line, self.now) if self.line is not None else {})
        by_id = {j.id: j for j in waiting}
        for entry in order:
            job = by_id[entry.key]
            if self.wanted_by(people, job):
                continue  # people first
            if job.run.gpus <= free and self._try_start(job):
                free -= job.run.gpus

    def unless_seen(self, name: str, seen: object, run: Callable[[], None]) -> None:
        """Runs the pass `name`, unless it would see `seen` on the same books as the latest
        time it ran and changed nothing: then it would change nothing again, as the pool's
        answers on the same books are the same (a dispatch that started no job: each would
        be refused again, or held back for the same people, whatever their order)."""
        books = self.pool.changes
        if self.still.get(name) == (books, seen):
            return
        run()
        if self.pool.changes == books:
            self.still[name] = (books, seen)

    def sight(self, waiting: Sequence[Job], people: Sequence[Work]) -> object:
        """What a pass over the `waiting` jobs sees besides the books: which they are, and
        the GPUs that `people`'s starts want (`wanted_by`)."""
        return [j.id for j in waiting], [w.gpus for w in people]

    def wanted_by(self, people: Sequence[Work], job: Job) -> bool:
        """Whether any of these people's starts could use the GPUs `job` would take."""
        return any(self._compete(job.request, Request(gpus=w.gpus)) for w in people)

    def _compete(self, job: Request, person: Request) -> bool:
        return any(job.matches(u) and person.matches(u) for u in self.pool.units)

    def parkable(self, job: Job) -> bool:
        """Whether its GPU work can be parked (with parking: `parking.ParkingReplay`)."""
        return False

    def _try_start(self, job: Job) -> bool:
        holder = Holder(job.key, job.user_id, job.run.user, server_of(job.id), job=True)
        try:
            grant = self.pool.allocate(holder, job.request, job.limits.admit, self.parkable(job))
        except (NotEnoughGPUs, LimitExceeded):
            return False  # later: what is free does not fit it, or its user holds enough
        state = step(JobState.WAITING, Event.DISPATCHED)
        assert state is not None
        job.state = step(state, Event.UP)  # its container starts at once, as servers' do
        job.started = self.now
        if self.line is not None:
            self.line.granted(job.key, job.user_id, job.run.user, len(grant.units), self.now)
        return True

    # --- the monitor's tick, the count, the run ------------------------------------------
    def over_runtime(self) -> None:
        for job in self.holding():
            limit = job.rules.max_runtime.value
            running = job.state is JobState.RUNNING and not job.parked
            if running and limit is not None and self.now - job.started >= limit:
                self._ends(job, Event.OVER_RUNTIME)
                self.out.jobs_failed += 1

    def tally(self) -> tuple[int, int, int]:
        held, busy, wanted = super().tally()
        for job in self.holding():
            if job.parked:
                continue
            if job.state in (JobState.RUNNING, JobState.GIVING_WAY):
                held += job.run.gpus
            if job.state is JobState.RUNNING:
                busy += job.run.gpus
                self.out.run_busy += job.run.gpus
        return held, busy, wanted

    def advance_jobs(self) -> None:
        for job in self.holding():
            if job.state is not JobState.RUNNING or job.parked:
                continue
            job.done += 1
            if job.run.checkpoint and job.done % job.run.checkpoint == 0:
                job.saved = job.done
            if job.done >= job.run.minutes:
                self._ends(job, Event.FINISHED)
                self.out.turnarounds.append(self.now + MINUTE - self.asked[job.id])

    def _ends(self, job: Job, event: Event) -> None:
        """A running job is done or failed: gone, and no longer among the live."""
        job.state = step(JobState.RUNNING, event)
        self._gone(job)
        self.live.remove(job)

    def _gone(self, job: Job) -> None:
        """Its container is gone: its GPUs go back, as in the hub."""
        self.pool.begin_release(job.key)
        self.pool.release(job.key)
        if self.line is not None:
            self.line.released(job.key, self.now)


def _final(job: Job) -> bool:
    return job.state in (JobState.DONE, JobState.FAILED, JobState.CANCELLED)
