"""A job's life: what a submission asks for, its states, and what moves it between them.

A job is a notebook or a script run unattended on GPUs of one of the user's
profiles. It waits among the jobs (behind every person's start), runs in its
own server when GPUs are free, and ends done, failed or cancelled; when a
person's start needs its GPUs it gives way and waits again, or is parked (its GPU work
in host memory) until the person is done.

The states and their transitions are data (as h11's `_state.py` keeps its
own): `TRANSITIONS` says, for each state, what each event leads to; an event
a state does not list changes nothing (a late report from a job already
cancelled), and is counted (`IGNORED`, which the hub's metrics show) and logged, so
that books out of step show. No clock or I/O here.
"""

from __future__ import annotations

import json
import logging
import posixpath
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .ids import as_id
from .words import listed, quoted

NOTEBOOK_SUFFIX = ".ipynb"
MAX_PATH = 1024
MAX_ARGS = 64
# A job's spec reaches its container as one environment variable (GPUSPAWNER_JOB), and Linux
# holds one such string to 128 KiB (MAX_ARG_STRLEN), all of them with the arguments to about
# 2 MiB: a larger spec would hold GPUs only to fail "did not start". Half of 128 KiB leaves
# room for what the runner is told besides (`for_runner`).
MAX_SPEC_BYTES = 64 * 1024
OUTPUTS = "jobs"  # the folder of each job's outputs, in the user's home: jobs/job-7/
SERVER_PREFIX = "job-"
# After its final report, a job's server waits this long for the hub's stop, so that a run
# shorter than the server's start still ends as the hub expects (by its stop).
LINGER = 600  # a job's server is the user's named server "job-<id>"


class JobState(StrEnum):
    WAITING = "waiting"  # for free GPUs, behind people's starts
    STARTING = "starting"  # its GPUs are taken, its server starts
    RUNNING = "running"
    GIVING_WAY = "giving way"  # stopping for a person's start; then it waits again
    PARKED = "parked"  # its GPU work in host memory while a person uses its GPU
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINAL = frozenset({JobState.DONE, JobState.FAILED, JobState.CANCELLED})
HOLDING = frozenset({JobState.STARTING, JobState.RUNNING, JobState.GIVING_WAY, JobState.PARKED})


class Event(StrEnum):
    DISPATCHED = "dispatched"  # GPUs were taken for it
    UP = "up"  # its server answers
    START_FAILED = "start failed"
    FINISHED = "finished"  # it reported its run ended well
    BROKE = "broke"  # it reported its run failed
    GIVE_WAY = "give way"  # a person's start needs its GPUs
    PARK = "park"  # a person's start needs its GPUs, and the driver parked its work
    RESTORED = "restored"  # its work is back on its GPUs
    RESTORE_FAILED = "restore failed"  # the driver could not bring its work back
    OVER_RUNTIME = "over runtime"  # past its group's max_runtime
    CANCEL = "cancel"
    ENDED = "ended"  # its server is gone
    HUB_STOPPED = "hub stopped"  # the hub's shutdown stopped its server (cleanup_servers)


W, S, R, G = JobState.WAITING, JobState.STARTING, JobState.RUNNING, JobState.GIVING_WAY
TRANSITIONS: Mapping[JobState, Mapping[Event, JobState]] = {
    W: {
        Event.DISPATCHED: S,
        Event.START_FAILED: JobState.FAILED,  # the hub could not start it: it fails alone
        Event.CANCEL: JobState.CANCELLED,
    },
    S: {
        Event.UP: R,
        Event.START_FAILED: JobState.FAILED,
        Event.FINISHED: JobState.DONE,  # a short run may end before the hub saw it up
        Event.BROKE: JobState.FAILED,
        Event.CANCEL: JobState.CANCELLED,
        Event.ENDED: JobState.FAILED,
        Event.HUB_STOPPED: W,
    },
    R: {
        Event.FINISHED: JobState.DONE,
        Event.BROKE: JobState.FAILED,
        Event.GIVE_WAY: G,
        Event.PARK: JobState.PARKED,
        Event.OVER_RUNTIME: JobState.FAILED,
        Event.CANCEL: JobState.CANCELLED,
        Event.ENDED: JobState.FAILED,
        Event.HUB_STOPPED: W,  # it runs again from its own checkpoint, as after giving way
    },
    G: {
        Event.FINISHED: JobState.DONE,  # it finished within its grace
        Event.CANCEL: JobState.CANCELLED,
        Event.ENDED: W,  # (a failure report while giving way is its SIGTERM's doing)
    },
    JobState.PARKED: {  # its code off the GPU may still run, and report
        Event.RESTORED: R,
        Event.RESTORE_FAILED: JobState.FAILED,
        Event.FINISHED: JobState.DONE,
        Event.BROKE: JobState.FAILED,
        Event.CANCEL: JobState.CANCELLED,
        Event.ENDED: JobState.FAILED,
        Event.HUB_STOPPED: W,
    },
}


log = logging.getLogger("gpuspawner")
# The events `step` ignored since the process began, by (state, event): a metric of the hub.
IGNORED: Counter[tuple[JobState, Event]] = Counter()


def step(state: JobState, event: Event) -> JobState | None:
    """The state `event` leads to, or None where it changes nothing: counted and logged."""
    moved = TRANSITIONS.get(state, {}).get(event)
    if moved is None:
        IGNORED[state, event] += 1
        log.info(
            "gpuspawner: a job that is %s ignores the event %r: nothing changes", state, event.value
        )
    return moved


class InvalidJob(ValueError):
    """A submission that cannot be a job; the message says what to fix."""


@dataclass(frozen=True)
class JobSpec:
    """What a job runs: a notebook, or a script with its arguments, in the user's home, on
    a profile."""

    profile: str
    notebook: str | None = None
    script: str | None = None
    args: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        return self.notebook or self.script or ""

    def for_runner(self, job_id: int, attempt: int) -> dict[str, Any]:
        """What the container's runner is told (GPUSPAWNER_JOB; images' `gpuspawner-job`)."""
        what: dict[str, Any] = (
            {"notebook": self.notebook}
            if self.notebook
            else {"script": self.script, "args": list(self.args)}
        )
        return {
            "id": server_of(job_id),
            **what,
            "outputs": outputs_of(job_id),
            "attempt": attempt,
            "linger": LINGER,
        }

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"profile": self.profile}
        if self.notebook:
            body["notebook"] = self.notebook
        else:
            body["script"] = self.script
            body["args"] = list(self.args)
        return body


def server_of(job_id: int) -> str:
    return f"{SERVER_PREFIX}{job_id}"


def is_job_name(server: str) -> bool:
    """Whether `server` is named as a job's server ("job-" and digits): the hub's alone to
    start, whether or not such a job exists yet, so that no one's server can take the name
    of a job still to come."""
    number = server.removeprefix(SERVER_PREFIX)
    return server.startswith(SERVER_PREFIX) and number.isascii() and number.isdigit()


def job_id_of(server: str) -> int | None:
    """The job a server's name says it runs, or None where it names none a record could
    hold ("job-" and more digits than SQLite's integers hold: no job has that id)."""
    return as_id(server.removeprefix(SERVER_PREFIX)) if is_job_name(server) else None


def outputs_of(job_id: int) -> str:
    return f"{OUTPUTS}/{server_of(job_id)}"


def parse_submission(body: Any) -> JobSpec:
    """A submission's JSON body, checked: `{"profile": slug, "notebook": "path.ipynb"}` or
    `{"profile": slug, "script": "train.py", "args": ["--epochs", "3"]}`, paths relative to
    the home."""
    if not isinstance(body, dict):
        raise InvalidJob(
            'A job is a JSON object like {"profile": "1gpu", "notebook": "train.ipynb"}'
        )
    unknown = sorted(set(body) - {"profile", "notebook", "script", "args"})
    if unknown:
        keys = listed([quoted(k) for k in unknown])
        raise InvalidJob(
            f"Unknown key{'s' if len(unknown) > 1 else ''} {keys}: a job has a profile, and a "
            "notebook or a script (with args)"
        )
    profile = body.get("profile")
    if not isinstance(profile, str) or not profile:
        raise InvalidJob('"profile" must be the slug of one of your GPU profiles')
    notebook, script = body.get("notebook"), body.get("script")
    if (notebook is None) == (script is None):
        raise InvalidJob('A job runs either a "notebook" or a "script": give exactly one')
    args = body.get("args", [])
    if notebook is not None:
        if "args" in body:
            raise InvalidJob('"args" go with a "script"; a notebook takes none')
        path = _home_path(notebook, "notebook")
        if not path.endswith(NOTEBOOK_SUFFIX):
            raise InvalidJob(f"The notebook {quoted(path)} must be a {NOTEBOOK_SUFFIX} file")
        return _within_bound(JobSpec(profile, notebook=path))
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise InvalidJob('"args" must be a list of strings, such as ["--epochs", "3"]')
    if len(args) > MAX_ARGS:
        raise InvalidJob(f'"args" may hold at most {MAX_ARGS} arguments')
    return _within_bound(JobSpec(profile, script=_home_path(script, "script"), args=tuple(args)))


def _within_bound(spec: JobSpec) -> JobSpec:
    """The spec, if its container's environment can carry it (`MAX_SPEC_BYTES`)."""
    size = len(json.dumps(spec.as_json()))  # as the runner is told it: ASCII, escaped
    if size > MAX_SPEC_BYTES:
        raise InvalidJob(
            f"This job is {-(-size // 1024):,} KiB as JSON (its profile, path and arguments); a "
            f"job may be at most {MAX_SPEC_BYTES // 1024} KiB, for its container is told it in "
            "one environment variable. Put long inputs in a file in your home, and pass its path."
        )
    return spec


def _home_path(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidJob(f'"{what}" must be a path in your home, such as "train.ipynb"')
    if len(value) > MAX_PATH or "\0" in value:
        raise InvalidJob(f'"{what}" is not a usable path')
    path = posixpath.normpath(value)
    if posixpath.isabs(value) or path == ".." or path.startswith("../"):
        raise InvalidJob(
            f"The {what} {quoted(value)} must be a path inside your home, relative to it "
            '(such as "experiments/train.ipynb")'
        )
    return path
