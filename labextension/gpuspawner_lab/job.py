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

import os
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from .job_parts import (
    EXIT_CODES,
    SINGLEUSER_STOP_SECONDS,
    Hub,
    Job,
    JobError,
    Log,
    Progress,
    State,
    Stop,
    attempt_in,
    linger_in,
    now,
    say,
)
from .job_runs import run_notebook, run_script


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
