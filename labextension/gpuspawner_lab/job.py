"""gpuspawner-job: runs a batch job inside a notebook server's container, and tells the hub.

A job is a JupyterHub named server whose container runs `gpuspawner-job <singleuser args>`
instead of `jupyterhub-singleuser`. The server still starts, so the hub sees it come up and
the user can open it to watch, but the run is the point: a notebook executed cell by cell,
saved after each cell, or a script whose output is kept line by line. Whatever happens,
what ran stays in the job's outputs folder, and the hub hears how it goes (`POST
.../gpu-job`). Docker's stop (SIGTERM) reaches the user's code once, so that code which
traps it can save a checkpoint before the container goes.

GPUSPAWNER_JOB (JSON) says what to run; its paths are relative to the home folder, which
stays the working directory of the run.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import traceback
import urllib.request
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from types import FrameType
from typing import IO, Any, Literal
from urllib.parse import quote

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, DeadKernelError

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


@dataclass
class Progress:
    """What the next report says, kept up to date by the run."""

    hub: Hub | None
    attempt: int
    output: str | None
    cells: dict[str, int] | None = None
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))

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


def keep_earlier(target: Path, attempt: int) -> None:
    """Renames an earlier attempt's executed notebook to `<stem>.attempt-<n>.ipynb`, so no
    attempt's output is lost; n is the attempt the notebook records, else the one before."""
    if not target.exists():
        return
    try:
        recorded = nbformat.read(target, as_version=4)  # type: ignore[no-untyped-call]
        earlier = recorded.metadata["gpuspawner_job"]["attempt"]
    except Exception:  # unreadable, or not written by this runner: it is still kept
        earlier = attempt - 1
    kept = target.with_name(f"{target.stem}.attempt-{earlier}{target.suffix}")
    again = 1
    while kept.exists():  # the same attempt run twice (a restarted container)
        again += 1
        kept = target.with_name(f"{target.stem}.attempt-{earlier}-{again}{target.suffix}")
    target.rename(kept)


def save(notebook: nbformat.NotebookNode, target: Path) -> None:
    """Writes the notebook whole or not at all: a stop mid-write leaves the previous save."""
    partial = target.with_name(f".{target.name}.partial")
    nbformat.write(notebook, partial)  # type: ignore[no-untyped-call]
    os.replace(partial, target)


def output_lines(cell: nbformat.NotebookNode) -> list[str]:
    """A cell's outputs as a user would read them in the tail: text, and errors' one line."""
    lines: list[str] = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            text = output.get("text", "")
        elif output.get("output_type") == "error":
            text = f"{output.get('ename', '')}: {output.get('evalue', '')}"
        else:
            text = output.get("data", {}).get("text/plain", "")
        lines.extend(("".join(text) if isinstance(text, list) else text).splitlines())
    return lines


def kernel_group(client: NotebookClient) -> int | None:
    """The kernel's process group, from its provisioner. jupyter_client starts local kernels
    in a session of their own; one that shares this process's group got tini's SIGTERM."""
    group = getattr(getattr(client.km, "provisioner", None), "pgid", None)
    return group if isinstance(group, int) and group != os.getpgrp() else None


def run_notebook(job: Job, log: Log, progress: Progress, stop: Stop) -> tuple[State, str | None]:
    """Runs the notebook's code cells in order on its own kernel, saving after each, and
    stops at the first error (kept in its cell) or at Docker's stop."""
    source = Path(job.path)
    if not source.is_file():
        raise JobError(f"no notebook {job.path} in the home folder")
    try:
        notebook = nbformat.read(source, as_version=4)  # type: ignore[no-untyped-call]
    except Exception as unreadable:
        raise JobError(f"{job.path} is not a notebook: {unreadable}") from None
    code = [i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"]
    for index in code:  # a cell the run does not reach must not show a past run's outputs
        notebook.cells[index].outputs, notebook.cells[index].execution_count = [], None
    notebook.metadata["gpuspawner_job"] = {"id": job.id, "attempt": job.attempt}
    target = Path(job.output)
    keep_earlier(target, job.attempt)
    save(notebook, target)
    progress.cells = cells = {"done": 0, "total": len(code)}
    progress.report("running")

    client = NotebookClient(notebook, timeout=None)  # the kernel the notebook names
    error: str | None = None
    with client.setup_kernel():
        stop.watch(kernel_group(client))
        for number, index in enumerate(code, 1):
            if stop.requested:
                break
            cell, which = notebook.cells[index], f"cell {number} of {len(code)}"
            started = time.monotonic()
            log.write(f"{which} started")
            try:
                client.execute_cell(cell, index, execution_count=number)
            except CellExecutionError as failed:
                error = f"{which} failed: {failed.ename}: {failed.evalue}"
            except DeadKernelError:
                error = f"the kernel died in {which}"
            save(notebook, target)
            progress.tail.extend(output_lines(cell))
            if error is not None:
                log.write(f"{which} ended on SIGTERM ({error})" if stop.requested else error)
                break
            log.write(f"{which} finished in {time.monotonic() - started:.1f} s")
            cells["done"] = number
            progress.report("running")
        stopped = stop.requested
        if stopped:
            client.shutdown_kernel = "immediate"  # its code had its SIGTERM
    if stopped:
        return "stopped", None
    return ("failed", error) if error is not None else ("done", None)


def run_script(job: Job, log: Log, progress: Progress, stop: Stop) -> tuple[State, str | None]:
    """Runs a .py script with this environment's python, anything else with bash, and
    keeps its output (stdout and stderr, as they come) in the log and the tail."""
    if not Path(job.path).is_file():
        raise JobError(f"no script {job.path} in the home folder")
    runner = [sys.executable] if job.path.endswith(".py") else ["bash"]
    if stop.requested:
        return "stopped", None
    progress.report("running")
    process = subprocess.Popen(
        [*runner, job.path, *job.args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,  # Docker's stop reaches it from Stop, once
        env={**os.environ, "PYTHONUNBUFFERED": "1"},  # lines as they are printed, not at exit
    )
    stop.watch(process.pid)
    assert process.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=pump, args=(process.stdout, lines), daemon=True).start()
    reported, fresh = time.monotonic(), False
    while True:
        wait = max(0.0, reported + REPORT_EVERY_SECONDS - time.monotonic()) if fresh else None
        try:
            line = lines.get(timeout=wait)
        except queue.Empty:
            pass  # quiet for a while: time to report what came before
        else:
            if line is None:
                break
            log.write(line)
            print(line, flush=True)  # and into the container's log
            progress.tail.append(line)
            fresh = True
        if fresh and time.monotonic() - reported >= REPORT_EVERY_SECONDS:
            progress.report("running")
            reported, fresh = time.monotonic(), False
    code = process.wait()
    if stop.requested:
        return "stopped", None
    if code == 0:
        return "done", None
    how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    return "failed", f"{job.path} {how}"


def pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    """Moves a script's output lines to the run as they come; None at its end."""
    for line in stream:
        lines.put(line.rstrip("\n"))
    lines.put(None)


def run(spec: str, hub: Hub | None, stop: Stop) -> tuple[State, bool]:
    """The whole job: check it, make its outputs folder, run it, keep what ran, report; and
    whether the hub took the last report."""
    try:
        job = Job.parse(spec)
    except JobError as refused:
        say(str(refused))
        return "failed", Progress(hub, attempt_in(spec), None).report("failed", str(refused))
    progress = Progress(hub, job.attempt, job.output)
    try:
        Path(job.outputs).mkdir(parents=True, exist_ok=True)
        log = Log(Path(job.outputs, "log.txt"))
    except OSError as unwritable:
        say(f"cannot write to {job.outputs}: {unwritable}")
        progress.output = None
        why = f"cannot write to {job.outputs}: {unwritable.strerror}"
        return "failed", progress.report("failed", why)
    log.write(f"attempt {job.attempt} started at {now()}")
    error: str | None
    try:
        runner = run_notebook if job.kind == "notebook" else run_script
        state, error = runner(job, log, progress, stop)
    except JobError as refused:  # before it ran: the log says why, no notebook was written
        state, error = "failed", str(refused)
        progress.output = str(PurePosixPath(job.outputs, "log.txt"))
    except Exception as crashed:  # the runner's own fault: still reported, and logged whole
        state, error = "failed", f"{type(crashed).__name__}: {crashed}"
        traceback.print_exc()
    stop.watch(None)  # its processes are gone: a later SIGTERM has no one to reach
    log.write(f"attempt {job.attempt} {state} at {now()}" + (f": {error}" if error else ""))
    log.close()
    say(f"job {job.id} {state}" + (f": {error}" if error else ""))
    return state, progress.report(state, error)


class Singleuser:
    """The notebook server beside the run, so the user can open the job and watch.

    Its failure is noted and the run goes on. It runs in a session of its own, so Docker's
    stop reaches it from here, after the run has saved, and the user can watch until then.
    """

    def __init__(self, args: Iterable[str]) -> None:
        self.ending = threading.Event()
        self.process: subprocess.Popen[bytes] | None = None
        try:
            self.process = subprocess.Popen(
                ["jupyterhub-singleuser", *args], start_new_session=True
            )
        except OSError as error:
            say(f"jupyterhub-singleuser did not start ({error}); the job runs without it")
            return
        threading.Thread(target=self._watch, args=(self.process,), daemon=True).start()

    def _watch(self, process: subprocess.Popen[bytes]) -> None:
        code = process.wait()
        if not self.ending.is_set():
            say(f"jupyterhub-singleuser exited with code {code}; the job goes on without it")

    def stop(self) -> None:
        self.ending.set()
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(SINGLEUSER_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def main(argv: list[str] | None = None) -> None:
    """`gpuspawner-job <jupyterhub-singleuser args...>`: exits 0 (done), 1 (failed) or 143
    (stopped by SIGTERM, as a process killed by it would)."""
    stop = Stop()
    signal.signal(signal.SIGTERM, stop.on_sigterm)
    server = Singleuser(sys.argv[1:] if argv is None else argv)
    state, told = run(os.environ.get("GPUSPAWNER_JOB", ""), Hub.from_environ(os.environ), stop)
    linger = linger_in(os.environ.get("GPUSPAWNER_JOB", ""))
    if told and linger:  # the hub ends the server (a run shorter than the server's start
        stop.came.wait(linger)  # is seen all the same); this long at most, then it ends here
    server.stop()
    sys.exit(EXIT_CODES[state])


if __name__ == "__main__":
    main()
