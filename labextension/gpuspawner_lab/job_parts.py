"""The pieces of a job's run that the notebook and the script share: what GPUSPAWNER_JOB
says (`Job`), the reports to the hub (`Hub`, `Progress`), the log, and Docker's stop passed
on once to the user's code (`Stop`). `job` runs them; `job_runs` runs a notebook or a script.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import sys
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from types import FrameType
from typing import Any, Literal
from urllib.parse import quote

State = Literal["running", "done", "failed", "stopped"]
EXIT_CODES: dict[State, int] = {"done": 0, "failed": 1, "stopped": 128 + signal.SIGTERM}
TAIL_LINES = 20
REPORT_EVERY_SECONDS = 5  # a script's progress; a notebook reports after each cell
HUB_TIMEOUT_SECONDS = 5
SINGLEUSER_STOP_SECONDS = 10


class JobError(Exception):
    """A job that cannot run as asked: the message is what the user reads."""


def say(message: str) -> None:
    """The runner's own notes go to stderr, into the container's log."""
    print(f"gpuspawner-job: {message}", file=sys.stderr, flush=True)


def now() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")  # with its offset


def in_home(path: object, what: str) -> str:
    """`path` as given, once it is known to stay inside the home folder.

    Checked by name, not by resolving links: the job runs as the user, with the user's
    rights, so this is about clear errors for a wrong spec, not about a boundary.
    """
    if not isinstance(path, str) or not path:
        raise JobError(f"the job's {what} must be a path in the home folder")
    pure = PurePosixPath(os.path.normpath(path))
    if pure.is_absolute() or pure.parts[:1] == ("..",):
        raise JobError(f"the job's {what} {path!r} is not inside the home folder")
    return str(pure)


@dataclass(frozen=True)
class Job:
    """GPUSPAWNER_JOB, checked: a notebook or a script, where its outputs go, which attempt."""

    id: str
    kind: Literal["notebook", "script"]
    path: str
    args: tuple[str, ...]
    outputs: str
    attempt: int

    @classmethod
    def parse(cls, text: str) -> Job:
        try:
            spec = json.loads(text)
        except ValueError:
            raise JobError("GPUSPAWNER_JOB is not JSON") from None
        if not isinstance(spec, dict):
            raise JobError("GPUSPAWNER_JOB is not a JSON object")
        kind: Literal["notebook", "script"] = "notebook" if "notebook" in spec else "script"
        args = spec.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise JobError("the job's args must be a list of strings")
        attempt = spec.get("attempt", 1)
        if not isinstance(attempt, int) or attempt < 1:
            raise JobError("the job's attempt must be a number from 1")
        return cls(
            id=str(spec.get("id", "")),
            kind=kind,
            path=in_home(spec.get(kind), kind),
            args=tuple(args),
            outputs=in_home(spec.get("outputs"), "outputs folder"),
            attempt=attempt,
        )

    @property
    def output(self) -> str:
        """What the user opens afterwards: the executed notebook, or the script's log."""
        name = PurePosixPath(self.path).name if self.kind == "notebook" else "log.txt"
        return str(PurePosixPath(self.outputs, name))


def linger_in(text: str) -> float:
    """How long the server stays up after a final report the hub took, waiting for the
    hub's stop (the spec's "linger", seconds; 0 or none: it ends at once)."""
    try:
        linger = json.loads(text).get("linger", 0)
    except (ValueError, AttributeError):
        return 0.0
    return float(linger) if isinstance(linger, int | float) and linger > 0 else 0.0


def attempt_in(text: str) -> int:
    """The attempt a spec that does not parse still names, for its failure's report."""
    try:
        attempt = json.loads(text).get("attempt")
    except (ValueError, AttributeError):
        return 1
    return attempt if isinstance(attempt, int) else 1


class Hub:
    """Reports to `POST {api}/users/:user/servers/:name/gpu-job`, with the server's token.

    A report that fails is noted and dropped: the run matters more than its progress bar.
    Proxy variables are ignored, as the singleuser server's own calls to the hub ignore
    them: the hub's API is on the container's network, not behind a proxy.
    """

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Hub | None:
        api, token = environ.get("JUPYTERHUB_API_URL"), environ.get("JUPYTERHUB_API_TOKEN")
        user, server = environ.get("JUPYTERHUB_USER"), environ.get("JUPYTERHUB_SERVER_NAME")
        if not (api and token and user and server):
            say("not started by a JupyterHub as a named server: no progress reports")
            return None
        path = f"users/{quote(user, safe='')}/servers/{quote(server, safe='')}/gpu-job"
        return cls(f"{api.rstrip('/')}/{path}", token)

    def tell(self, report: dict[str, Any]) -> bool:
        """Whether the hub took the report."""
        request = urllib.request.Request(
            self.url,
            data=json.dumps(report).encode(),
            method="POST",
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with self.opener.open(request, timeout=HUB_TIMEOUT_SECONDS):
                return True
        except (OSError, http.client.HTTPException) as error:
            say(f"the hub did not take the {report['state']!r} report: {error}")
            return False


class CpuMeter:
    """The share of the container's CPUs its processes used since the last reading, from
    the container's own cgroup (v2's cpu.stat and cpu.max, or v1's cpuacct); None where
    the kernel does not say. With the GPUs' use, the hub tells a GPU that waits for data."""

    def __init__(self, cgroup: Path = Path("/sys/fs/cgroup")) -> None:
        self.cgroup = cgroup
        self.last = self._sample()

    def busy(self) -> float | None:
        now, before = self._sample(), self.last
        self.last = now
        if now is None or before is None or now[1] <= before[1]:
            return None
        share = (now[0] - before[0]) / ((now[1] - before[1]) * self._cpus())
        return round(min(max(share, 0.0), 1.0), 3)

    def _sample(self) -> tuple[float, float] | None:
        """(CPU seconds used, monotonic seconds)."""
        try:
            stat = (self.cgroup / "cpu.stat").read_text()
            fields = dict(line.split() for line in stat.splitlines())
            used = int(fields["usage_usec"]) / 1e6
        except (OSError, KeyError, ValueError):
            try:
                used = int((self.cgroup / "cpuacct" / "cpuacct.usage").read_text()) / 1e9
            except (OSError, ValueError):
                return None
        return used, time.monotonic()

    def _cpus(self) -> float:
        try:
            quota, period = (self.cgroup / "cpu.max").read_text().split()
            if quota != "max":
                return max(int(quota) / int(period), 0.01)
        except (OSError, ValueError):
            pass
        return float(len(os.sched_getaffinity(0)))


@dataclass
class Progress:
    """What the next report says, kept up to date by the run."""

    hub: Hub | None
    attempt: int
    output: str | None
    cells: dict[str, int] | None = None
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    cpu: CpuMeter = field(default_factory=CpuMeter)

    def report(self, state: State, error: str | None = None) -> bool:
        """Whether the hub took it (False without a hub)."""
        return self.hub is not None and self.hub.tell(
            {
                "state": state,
                "attempt": self.attempt,
                "cells": dict(self.cells) if self.cells is not None else None,
                "tail": list(self.tail),
                "error": error,
                "output": self.output,
                "cpu_busy": self.cpu.busy(),
            }
        )


class Log:
    """`<outputs>/log.txt`, appended to by every attempt, each line written at once."""

    def __init__(self, path: Path) -> None:
        self.file = path.open("a", encoding="utf-8")

    def write(self, line: str) -> None:
        self.file.write(line + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class Stop:
    """Docker's stop, passed on once to the process group running the user's code.

    The script and the kernel each run in a session of their own, so tini's SIGTERM to this
    process's group does not reach them: they get it from here, once, with their children
    (a bash script's python, a cell's subprocess), and this process waits for them to save.
    """

    def __init__(self) -> None:
        self.came = threading.Event()
        self.requested = False
        self.group: int | None = None
        self.forwarded = False

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if not self.requested:
            say("SIGTERM: passing it on to the job, then saving what ran")
        self.requested = True
        self.came.set()
        self._forward()

    def watch(self, group: int | None) -> None:
        """From now on, SIGTERM goes to `group` (None: nowhere); at once if it came already.

        The group is set before `requested` is read: a SIGTERM whose handler runs in between
        finds it, forwards, and this call then does not.
        """
        self.group = group
        if self.requested:
            self._forward()

    def _forward(self) -> None:
        if self.group is None or self.forwarded:
            return
        self.forwarded = True
        with contextlib.suppress(ProcessLookupError):  # it ended already
            os.killpg(self.group, signal.SIGTERM)
