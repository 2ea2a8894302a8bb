"""The replay on the real stack (issue 48): a real hub, proxy and dockerd on simulated GPUs
(`tests/realhub.Hub`), its config from `timescale.Scaled` (`hubsetup`), the slice's people
(`life.Life`, a thread each) and jobs (`life.submit_jobs`), the load file kept as Docker
and the people say (`load.LoadBoard`), the invariants sampled every second
(`invariants.Watch`), optionally a `kill -9` of the hub partway and its restart, and at
the end: the books against Docker, every person's files, and the figures (`tally`).
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
from jobkit import in_home, put, read
from realhub import OTHER_WORKERS, PASSWORD, Hub

from gpuspawner.core.profiles import Profile
from gpuspawner.engine.base import LookPast
from gpuspawner.engine.docker import DockerEngine

from .hubsetup import groups_of, hub_config
from .invariants import Sample, Watch, Who, books_differ, gpus_of, row, running_of
from .jobs import TRAIN_SCRIPT
from .life import Clock, Life, Submitted, submit_jobs
from .load import LoadBoard
from .lost_work import read_journal
from .person import Person
from .script import script_of
from .tally import JobEnd, figures
from .timescale import Scaled

MARKER = "replay-marker.txt"  # a file in each person's home, there at the start
SAMPLE_EVERY = 1.0
SETTLE = 30.0  # seconds the books may take to match Docker (a stop under way)


@dataclass
class Options:
    parking: bool = True
    kill_hub_at: float | None = None  # real seconds from the start
    light: bool = True  # people's servers run a tiny HTTP server (hubsetup.LIGHT)


@dataclass
class Record:
    """What the replay saw, for the figures and the report."""

    samples: list[Sample] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    unanswered: int = 0  # samples the hub or Docker did not answer (the restart)
    watch: Watch = field(default_factory=Watch)
    checks: dict[str, Any] = field(default_factory=dict)  # end, restart: what differed


class Stack:
    """One replay: its hub, the people, the Docker side, and what it records."""

    def __init__(self, scaled: Scaled, profiles: Sequence[Profile], options: Options) -> None:
        self.scaled, self.profiles, self.options = scaled, profiles, options
        self.workdir = Path(tempfile.mkdtemp(prefix="gpuspawner-replay-"))
        self.load_file = self.workdir / "load.json"
        self.load_file.write_text("{}")
        config = hub_config(scaled, self.load_file, options.parking, options.light)
        self.hub = Hub(self.workdir / "hub", config)
        self.engine = DockerEngine(docker.from_env().api)
        self.look = LookPast(tuple(OTHER_WORKERS), self.hub.prefix)
        self.board = LoadBoard(self.load_file, self.hub.prefix, self.engine, OTHER_WORKERS)
        self.threshold = float(scaled.site.get("gpu_busy_threshold", 5.0))
        self.record = Record()

    # --- before ------------------------------------------------------------------------
    def set_up(self, users: dict[str, tuple[str, ...]], job_owners: set[str]) -> dict[str, Person]:
        self.hub.start()
        self.hub.add_users(*users, groups=groups_of(users))
        for user in users:
            put(self.hub, user, MARKER, f"{user}'s files")
        for user in job_owners:
            put(self.hub, user, "train.py", TRAIN_SCRIPT.read_text())
        return {u: Person.log_in(self.hub.url, u, PASSWORD, board=self.board) for u in users}

    # --- during ------------------------------------------------------------------------
    def sample(self, origin: float) -> None:
        try:
            before = gpus_of(self.hub.pool(), self.threshold)
            on_docker = running_of(self.engine.containers(self.look), self.hub.prefix)
            after = gpus_of(self.hub.pool(), self.threshold)
        except Exception:  # the hub restarting, Docker slow: no sample this second
            self.record.unanswered += 1
            return
        taken = Sample(time.time(), before, on_docker, after)
        self.record.samples.append(taken)
        self.record.rows.append(row(taken, self.record.watch.check(taken), origin))

    def books_settle(self, what: str) -> None:
        """Whether the books equal Docker's word within SETTLE seconds; what differed."""
        differences: list[str] = ["no answer"]
        deadline = time.monotonic() + SETTLE
        while differences and time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                gpus = gpus_of(self.hub.pool(), self.threshold)
                on_docker = running_of(self.engine.containers(self.look), self.hub.prefix)
                differences = books_differ(gpus, on_docker)
            time.sleep(1.0 if differences else 0)
        self.record.checks[what] = differences

    def restart_hub(self) -> None:
        self.hub.kill()
        self.hub.start()
        self.books_settle("books after the restart")

    # --- after -------------------------------------------------------------------------
    def files_there(self, users: Sequence[str]) -> list[str]:
        missing = []
        for user in users:
            try:
                if read(self.hub, user, MARKER).strip() != f"{user}'s files":
                    missing.append(user)
            except Exception as error:
                missing.append(f"{user}: {error}")
        return missing

    def job_ends(
        self, people: dict[str, Person], submitted: Sequence[Submitted]
    ) -> dict[Who, JobEnd]:
        ends: dict[Who, JobEnd] = {}
        for s in submitted:
            model = people[s.user].job(int(s.job["id"]))
            cat = ["sh", "-c", f"cat {s.journal} 2>/dev/null || true"]
            journal = in_home(self.hub, s.user, cat, "ro")
            ends[(s.user, str(model["server"]))] = JobEnd(
                s.gpus, str(model["state"]), int(model["preemptions"]), read_journal(journal)
            )
        return ends

    def tear_down(self) -> None:
        self.hub.stop()
        self.hub.remove_containers()
        self.hub.remove_volumes()


def every(clock: Clock, seconds: float, action: Callable[[], Any]) -> None:
    while not clock.over():
        with contextlib.suppress(Exception):
            action()
        clock.stopped.wait(seconds)


def replay(
    scaled: Scaled, profiles: Sequence[Profile], options: Options, seconds: float
) -> dict[str, Any]:
    """The whole replay, `seconds` long (real): the stack's figures, its checks, and its
    samples' rows."""
    users = {s.session.user: s.session.groups for s in scaled.sessions}
    users |= {j.job.user: j.job.groups for j in scaled.jobs}
    stack = Stack(scaled, profiles, options)
    try:
        people = stack.set_up(users, {j.job.user for j in scaled.jobs})
        return run(stack, people, users, seconds)
    finally:
        stack.tear_down()


def run(
    stack: Stack, people: dict[str, Person], users: dict[str, tuple[str, ...]], seconds: float
) -> dict[str, Any]:
    scaled = stack.scaled
    clock = Clock(time.time(), seconds)
    stack.record.watch.origin = clock.origin
    touch = float(scaled.environment.get("JUPYTERHUB_ACTIVITY_INTERVAL", 10))
    scripts: dict[str, list[Any]] = {}
    for s in sorted(scaled.sessions, key=lambda s: s.at):
        scripts.setdefault(s.session.user, []).append(script_of(s, stack.profiles))
    lives = [Life(people[u], tuple(sc), clock, touch, scaled.factor) for u, sc in scripts.items()]
    submitted: list[Submitted] = []
    threads = [threading.Thread(target=life.run, daemon=True) for life in lives]
    threads.append(threading.Thread(target=lambda: submitted.extend(
        submit_jobs(people, scaled.jobs, stack.profiles, clock)), daemon=True))  # fmt: skip
    threads.append(threading.Thread(target=every, args=(clock, 1.0, stack.board.refresh)))
    threads.append(threading.Thread(target=every, args=(
        clock, SAMPLE_EVERY, lambda: stack.sample(clock.origin))))  # fmt: skip
    for thread in threads:
        thread.daemon = True
        thread.start()
    if stack.options.kill_hub_at is not None and clock.wait_until(stack.options.kill_hub_at):
        stack.restart_hub()
    clock.wait_until(seconds)
    clock.stopped.set()
    for thread in threads:
        thread.join(timeout=60)
    stack.books_settle("books at the end")
    record = stack.record
    record.checks["files missing"] = stack.files_there(sorted(users))
    starts = [start for life in lives for start in life.person.starts]
    found = figures(
        scaled.factor,
        int(scaled.site["gpus"]),
        clock.origin,
        seconds,
        starts,
        record.samples,
        sum(life.interrupted for life in lives),
        [w for life in lives for w in life.resume_waits],
        stack.job_ends(people, submitted),
    )
    return {
        "figures": found,
        "breaches": dict(record.watch.counts),
        "breaches_said": record.watch.details,
        "hub_log": str(stack.hub.log_file),
        "checks": record.checks,
        "samples": len(record.samples),
        "unanswered_samples": record.unanswered,
        "refusals": [r for life in lives for r in life.refusals],
        "rows": record.rows,
    }
