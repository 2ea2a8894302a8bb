"""Running what a job asks for: a notebook cell by cell (saved after each cell, an earlier
attempt's output kept), or a script with its output kept line by line.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, DeadKernelError

from .job_parts import (
    REPORT_EVERY_SECONDS,
    Job,
    JobError,
    Log,
    Progress,
    State,
    Stop,
)


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

    # the kernel the notebook names; a cell's prints kept as one output each, as the user
    # printed them, however the kernel's stdout happened to be flushed in pieces
    client = NotebookClient(notebook, timeout=None, coalesce_streams=True)
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
