"""Parked work back on its GPUs: people who woke first, then jobs.

A parked person's server wakes (`wake`: a cell run in it, a process of it on its GPU):
from then on each pass of the line makes the running jobs lent its GPUs give way
(parked, else SIGTERM: `giving_way`), or the person on a GPU it shares in turns end
their turn (`turns`), and it is restored once they are free with room for its memory.
A parked job is restored whenever its GPUs are free again, after the people who woke,
and never onto GPUs a person's waiting start will take (`kept_from_jobs`): people first.
A restore the driver refuses stops that server or job, files kept.
"""

from __future__ import annotations

from ...core.jobs import Event, JobState
from ...core.pool import Grant
from ..base.counters import RESTORE_WAIT_SECONDS
from ..reclaim.parking import RestoreFailed
from . import words
from .turns import Turns


class Restoring(Turns):
    def wake(self, grant: Grant) -> str:
        """A parked person wants their GPUs back. Where their server is now: "resident",
        "restoring", or "parked" (its GPUs are still lent, or hold too little memory)."""
        state = self.residency(grant.key)
        if state != "parked":
            return state
        if grant.key not in self._waking:  # (while being parked: restored once it is)
            self._waking[grant.key] = self.broker.clock()
            self.log.info("gpuspawner: %s wakes", grant.holder.name)
        self._restore_parked()
        return self.residency(grant.key)

    def residency(self, key: int) -> str:
        """ "parked" from the moment the driver starts parking it: a cell run then must wake
        it (its GPU calls would wait), "restoring" until it is back, else "resident"."""
        grant = self.broker.grant_of(key)
        if key in self._restoring or (self.parker is not None and self.parker.unsure(key)):
            return "restoring"
        parking = self.parker is not None and self.parker.parking_now(key)
        return "parked" if parking or (grant is not None and grant.parked) else "resident"

    def work_lost(self, key: int) -> bool:
        """Whether the server's parked work was lost with its processes (its container was
        restarted while parked): it has its GPUs back with nothing restored."""
        return self.parker is not None and self.parker.lost(key)

    def _restore_parked(self) -> None:
        if self.parker is None:
            return
        grants = self.broker.pool.grants()
        for grant in grants:  # restores whose host did not answer, asked again
            if self.parker.unsure(grant.key) and grant.key not in self._restoring:
                self._restoring.add(grant.key)
                self._spawn(self._restore(grant))
        parked = [g for g in grants if g.parked and not g.stopping]
        people = [g for g in parked if g.key in self._waking]
        self._make_way_for(people)
        jobs = [
            g
            for g in parked
            if g.holder.job
            and (job := self._by_server(g.holder.user_id, g.holder.server)) is not None
            and job.state is JobState.PARKED
        ]
        taken: set[str] = set()
        kept = self.kept_from_jobs()
        for grant in (*people, *jobs):
            units = {u.id for u in grant.units}
            if grant.key in self._restoring or units & taken or self.parker.waits_for(grant):
                continue
            if grant.holder.job and units & kept:
                continue  # a person's start takes them (the line wins), or a woken person
            taken |= units
            self._restoring.add(grant.key)
            self._spawn(self._restore(grant))

    def _make_way_for(self, people: list[Grant]) -> None:
        """The running jobs lent a waking person's GPUs give way to them; a person on a GPU
        they share in turns ends their turn."""
        pool = self.broker.pool
        for person in people:
            for unit in person.units:
                lent = pool.holder_of(unit.id)
                if lent is not None and not lent.holder.job:
                    self._end_turn(lent, person)
                    continue
                job = lent and self._by_server(lent.holder.user_id, lent.holder.server)
                if job and job.state is JobState.RUNNING and job.id not in self._parking:
                    self._give_way(job, person.holder, "return")

    async def _restore(self, grant: Grant) -> None:
        assert self.parker is not None
        parked_since = self.parker.since(grant.key)
        try:
            back = await self.parker.restore(grant)
        except RestoreFailed as failure:
            self._waking.pop(grant.key, None)
            self._restore_failed(grant, failure)
            return
        finally:
            self._restoring.discard(grant.key)
        if not back:
            return
        woke = self._waking.pop(grant.key, None)
        if woke is not None:  # a person who ran a cell, waiting for it since
            RESTORE_WAIT_SECONDS.observe(self.broker.clock() - woke)
        self._on_gpu(grant.key)
        job = self._by_server(grant.holder.user_id, grant.holder.server)
        if job is not None and job.state is JobState.PARKED:
            # its max_runtime counts the time it ran, not the time it was parked
            parked = self.broker.clock() - (parked_since or self.broker.clock())
            started = job.started + parked if job.started is not None else None
            self._event(job, Event.RESTORED, reason="", started=started)

    def _restore_failed(self, grant: Grant, failure: RestoreFailed) -> None:
        holder = grant.holder
        self.log.error("gpuspawner: %s: %s", holder.name, failure)
        job = self._by_server(holder.user_id, holder.server)
        if job is not None:
            self._finish(job, Event.RESTORE_FAILED, words.restore_failed(failure))
            return
        self._spawn(self._stop_person(grant, f"{failure}"))

    def forget_server(self, key: int) -> None:
        """Its container is gone: it neither wakes nor is stopped any more."""
        self._waking.pop(key, None)
        self._evicting.discard(key)
        self._forget_turns(key)
