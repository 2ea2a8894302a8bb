"""What the jobs' stack tests share: notebooks to run, and files in a user's home volume."""

from __future__ import annotations

import json
from typing import Any

from realhub import NOTEBOOK_IMAGE, Hub

SEES_ITS_GPUS = "import os\nprint('sees', os.environ.get('NVIDIA_VISIBLE_DEVICES'))"
ADDS_UP = "print('total', sum(range(10)))"


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
