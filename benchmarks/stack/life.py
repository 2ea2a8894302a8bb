"""A person of the trace living their sessions against the hub, in a thread of their own;
and the jobs submitted at their times, in another.

The person does what `script` says, at the replay's clock: asks for their server when
the trace says they arrive (or uses the one of theirs still running with the profile
they want), plays their pattern from the moment it is ready (busy or idle kernel, at the
notebook or away, a cell where busy work begins: on a parked server, the wake), and
stops, closes or leaves it open. While they work they look every `LOOK_EVERY` seconds
whether their server still runs: one the hub stopped under them is an interruption, and
they come back as `script.after_stopped` says. A start the hub refuses is asked again
`RETRY_MINUTES` later (in the trace's time), as the simulator's people do.

The hub may be gone for a while (the replay's `kill -9`): a request that fails is tried
again until the replay ends, and a look that fails says nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import requests

from .jobs import job_request
from .person import Person, Start
from .script import Script, after_stopped, on_arrival
from .timescale import ScaledJob

LOOK_EVERY = 2.0  # real seconds between a working person's looks at their server
RETRY_MINUTES = 5  # the simulator's (simulation.model.RETRY_MINUTES)
T = TypeVar("T")


class Clock:
    """The replay's clock: real seconds from its start, and a stop for every thread."""

    def __init__(self, origin: float, end: float) -> None:
        self.origin, self.end = origin, end  # Unix seconds; seconds from origin
        self.stopped = threading.Event()

    def now(self) -> float:
        return time.time() - self.origin

    def wait_until(self, at: float) -> bool:
        """Until `at` seconds from the start; False once the replay is over."""
        while not self.stopped.is_set():
            left = min(at, self.end) - self.now()
            if left <= 0:
                return self.now() < self.end
            self.stopped.wait(min(left, 1.0))
        return False

    def over(self) -> bool:
        return self.stopped.is_set() or self.now() >= self.end


def patiently(clock: Clock, call: Callable[[], T]) -> T | None:
    """`call()`, tried again while the hub does not answer; None once the replay is over."""
    while not clock.over():
        try:
            return call()
        except (requests.RequestException, RuntimeError, TimeoutError):
            clock.stopped.wait(1.0)
    return None


@dataclass
class Life:
    person: Person
    scripts: Sequence[Script]  # their sessions, in order of arrival
    clock: Clock
    touch_every: float  # the servers' activity interval (real seconds)
    factor: float
    interrupted: int = 0
    resume_waits: list[float] = field(default_factory=list)  # real seconds, parked → back
    refusals: list[str] = field(default_factory=list)
    first_ask: float | None = None  # of a start refused and asked again

    def run(self) -> None:
        for script in self.scripts:
            if not self.clock.wait_until(script.at):
                return
            self.session(script)

    def session(self, script: Script) -> None:
        current: Script | None = script
        while current is not None and not self.clock.over():
            if not self.arrive(current):
                return
            began = time.time()
            if self.play(current, began):
                self.leave(current)
                return
            self.interrupted += 1
            back, current = after_stopped(current, time.time() - began)
            if not self.clock.wait_until(self.clock.now() + back):
                return

    def arrive(self, script: Script) -> bool:
        """Until their server is ready; False if it never was within the replay."""
        while not self.clock.over():
            model = patiently(self.clock, lambda: self.person.model(script.server))
            running = (model or {}).get("user_options", {}).get("profile") if model else None
            action = on_arrival(script, running if model and model.get("ready") else None)
            if action == "use":
                return True
            if action == "restart":
                patiently(self.clock, lambda: self.person.stop(script.server))
            start = patiently(self.clock, lambda: self.start(script))
            if start is not None and start.ready is not None:
                start.requested = self.first_ask or start.requested
                self.first_ask = None
                return True
            self.refused(start)
            self.clock.wait_until(self.clock.now() + RETRY_MINUTES * 60 / self.factor)
        return False

    def start(self, script: Script) -> Start:
        """Their start; one the hub's restart cut short is asked again, its wait running
        from this first ask."""
        asked = len(self.person.starts)
        try:
            return self.person.start(script.server, script.profile)
        except BaseException:
            for orphan in self.person.starts[asked:]:
                self.first_ask = self.first_ask or orphan.requested
            del self.person.starts[asked:]
            raise

    def refused(self, start: Start | None) -> None:
        """A start that did not come: asked again later, its wait runs from this first ask."""
        if start is None:
            return
        self.refusals.append(start.failed or "no answer")
        if self.person.starts and self.person.starts[-1] is start:
            self.person.starts.pop()
            self.first_ask = self.first_ask or start.requested

    def play(self, script: Script, began: float) -> bool:
        """The pattern, act by act; False where the hub stopped the server under them."""
        acts = script.acts
        for act, following in zip(acts, [*acts[1:], None], strict=True):
            if act.cell:
                self.run_cell(script.server)
            self.kernel(script.server, act.busy)
            until = began + (following.after if following else script.seconds)
            if not self.meanwhile(script.server, until, act.present):
                return False
        return True

    def meanwhile(self, server: str, until: float, present: bool) -> bool:
        """Until `until` (Unix seconds): their activity while present, and their looks."""
        touched = looked = 0.0
        while (now := time.time()) < until and not self.clock.over():
            if present and now - touched >= self.touch_every:
                patiently(self.clock, lambda: self.person.touch(server))
                touched = now
            if now - looked >= LOOK_EVERY:
                looked = now
                if not self.still_there(server):
                    return False
            self.clock.stopped.wait(min(0.5, max(0.0, until - now)))
        return True

    def still_there(self, server: str) -> bool:
        try:
            return self.person.model(server) is not None
        except requests.RequestException:
            return True  # the hub does not answer: nothing said

    def run_cell(self, server: str) -> None:
        state = patiently(self.clock, lambda: self.person.residency(server))
        waited = patiently(self.clock, lambda: self.person.run_cell(server, busy=False))
        if state not in (None, "resident") and waited is not None:
            self.resume_waits.append(waited)

    def kernel(self, server: str, busy: bool) -> None:
        assert self.person.board is not None
        self.person.board.kernel(self.person.name, server, busy)

    def leave(self, script: Script) -> None:
        self.kernel(script.server, False)
        if script.then == "stop":
            patiently(self.clock, lambda: self.person.stop(script.server))
        elif script.then == "open":  # the tab stays open: its activity goes on
            self.meanwhile(script.server, self.clock.origin + self.clock.end, present=True)


@dataclass
class Submitted:
    user: str
    job: dict[str, Any]  # the API's answer
    gpus: int
    journal: str


def submit_jobs(
    people: dict[str, Person], jobs: Sequence[ScaledJob], profiles: Any, clock: Clock
) -> list[Submitted]:
    """Each job by its owner, at its time: train.py with a journal of its own."""
    done: list[Submitted] = []
    for n, job in enumerate(jobs, 1):
        if not clock.wait_until(job.at):
            break
        journal = f"train-journal-{n}.jsonl"
        body = job_request(job, profiles, journal=journal)
        owner = people[job.job.user]
        answer = patiently(clock, partial(owner.submit, body))
        if answer is not None:
            done.append(Submitted(job.job.user, answer, job.job.gpus, journal))
    return done
