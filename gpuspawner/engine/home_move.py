"""A user's home copied from one swarm node to another, checked, and only then the old copy
emptied: `gpuspawner move-home` (through the hub, which keeps the record of where each
home is).

Two one-off tasks (`node_tasks`) run `home_copy`, both as root so that owners and modes
come across: one on the old node serves a list of the home's entries and a tar stream of
it, at a port published on its node; one on the new node, where Swarm makes the volume,
unpacks the stream and lists what it unpacked. The copy counts only when the lists agree.
The home on the new node must be empty (a copy from a start there "away from home" is
not merged over). The old copy is emptied only after, and only when asked.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from docker.types import Mount

from ..core.nodes import Node
from . import node_tasks

PORT = 9000  # the serving task's own port
PROGRAM = Path(__file__).with_name("home_copy.py").read_text()  # run by `python3 -c`


def copy_home(
    client: Any,
    image: str,
    volume: str,
    source: Node,
    target: Node,
    timeout: float = 3600,
) -> int | str:
    """Copy `volume` from `source` to `target` and check the copy: 0, `home_copy`'s
    DIFFERENT or NOT_EMPTY, or why the tasks gave no answer. `client`: a docker APIClient
    of the manager; `image`: one with python3 (the notebooks')."""
    secret = secrets.token_hex(16)  # the port is open on the node: only the copy may read
    serve = ["python3", "-c", PROGRAM, "serve", "/from", str(PORT), secret]
    read = [Mount("/from", volume, type="volume", read_only=True)]
    with node_tasks.task_on(client, source.id, image, serve, read, "home-copy", publish=PORT) as up:
        port = node_tasks.published_port(client, up, PORT, timeout=120)
        if isinstance(port, str):
            return f"the task on {source.hostname} that reads the home did not run: {port}"
        fetch = ["python3", "-c", PROGRAM, "fetch", "/to", source.address, str(port), secret]
        write = [Mount("/to", volume, type="volume")]
        with node_tasks.task_on(client, target.id, image, fetch, write, "home-copy") as down:
            return node_tasks.outcome(client, down, timeout)


def empty_home(client: Any, image: str, volume: str, node: Node) -> int | str:
    """Delete everything in `volume` on `node` (its copy elsewhere checked first): 0, or
    why not. The empty volume stays, for `docker volume rm` on that node."""
    command = ["find", "/old", "-mindepth", "1", "-delete"]
    mounts = [Mount("/old", volume, type="volume")]
    with node_tasks.task_on(client, node.id, image, command, mounts, "home-empty") as task:
        return node_tasks.outcome(client, task, timeout=600)
