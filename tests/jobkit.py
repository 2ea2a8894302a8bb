"""What the jobs' stack tests share: a script and notebooks to run, files in a user's home
volume, and the jobs REST API."""

from __future__ import annotations

import json
import textwrap
from typing import Any

from realhub import NOTEBOOK_IMAGE, Hub

SEES_ITS_GPUS = "import os\nprint('sees', os.environ.get('NVIDIA_VISIBLE_DEVICES'))"
ADDS_UP = "print('total', sum(range(10)))"

# Runs until SIGTERM, then saves its "checkpoint" and ends: the documented contract.
TRAIN = textwrap.dedent(
    """
    import os, signal, sys, time
    def save(signum, frame):
        with open('checkpoint.txt', 'a') as f:
            f.write('saved\\n')
        sys.exit(0)
    signal.signal(signal.SIGTERM, save)
    print('training', flush=True)
    while True:
        time.sleep(0.2)
    """
)


def notebook(*sources: str) -> str:
    """A Python notebook of code cells, as JSON."""
    cells = [
        {"cell_type": "code", "metadata": {}, "source": source, "outputs": [],
         "execution_count": None, "id": f"c{i}"}
        for i, source in enumerate(sources)
    ]  # fmt: skip
    kernel = {"kernelspec": {"name": "python3", "display_name": "Python 3"}}
    body: dict[str, Any] = {"nbformat": 4, "nbformat_minor": 5, "metadata": kernel}
    return json.dumps({**body, "cells": cells})


def put(hub: Hub, user: str, path: str, text: str) -> None:
    """A file in the user's home, written as the notebook user (uid 1000)."""
    in_home(hub, user, ["sh", "-c", f"cat > {path} <<'EOF'\n{text}\nEOF"], "rw")


def read(hub: Hub, user: str, path: str) -> str:
    return in_home(hub, user, ["cat", path], "ro")


def in_home(hub: Hub, user: str, command: list[str], mode: str) -> str:
    output = hub.docker.containers.run(
        NOTEBOOK_IMAGE,
        command,
        entrypoint=[],
        volumes={hub.home_of(user): {"bind": "/home/jovyan", "mode": mode}},
        remove=True,
    )
    return output.decode()


def checkpoints(hub: Hub, user: str = "bob") -> int:
    """How often the user's TRAIN script saved its checkpoint on SIGTERM."""
    saved = in_home(hub, user, ["sh", "-c", "cat checkpoint.txt 2>/dev/null || true"], "ro")
    return saved.count("saved")


def submit(hub: Hub, user: str, **body) -> dict:
    response = hub.api("POST", f"/users/{user}/gpu-jobs", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def job(hub: Hub, user: str, job_id: int) -> dict:
    response = hub.api("GET", f"/users/{user}/gpu-jobs/{job_id}")
    response.raise_for_status()
    return response.json()


def wait_state(hub: Hub, user: str, job_id: int, *states: str, timeout: float = 120) -> dict:
    try:
        return hub.wait_for(
            lambda: (found := job(hub, user, job_id))["state"] in states and found,
            timeout=timeout,
            what=f"job {job_id} {' or '.join(states)}",
        )
    except TimeoutError:
        ours = [line for line in hub.log().splitlines() if "gpuspawner" in line or "[E" in line]
        raise AssertionError(
            f"job {job_id} is {job(hub, user, job_id)}, not {states}; the hub said:\n"
            + "\n".join(ours[-40:])
        ) from None
