"""Homes on shared storage that every node of a swarm mounts at the same path
(`c.SwarmGPUSpawner.shared_homes`): a user's files are then on whichever node runs their
server, and placement is free.

The hub's host mounts the storage too: the hub makes each user's folder there, owned by the
notebook user, before their first server (as on one host), because a bind whose source is
missing fails the task on its node. At start the hub writes a marker with a token of its own
at the top of the storage; a node that sees the same token there mounts the same storage,
and one that sees an empty folder (its mount lost, or never made) does not, though the
folder exists and is writable. `gpuspawner doctor` asks each node so (`probe_node`).
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docker.errors import DockerException
from docker.types import Mount
from requests.exceptions import RequestException

from ..core.errors import GPUConfigError
from ..core.nodes import Node
from . import node_tasks
from .escapes import clean_path, exposing_host
from .storage import StorageProblem, make_folder

MARKER = ".gpuspawner-shared-homes"
PROBES = ".gpuspawner-probes"  # owned by the notebook user: where a node's probe writes
SETTING = "c.SwarmGPUSpawner.shared_homes"
PROBE_TARGET = "/shared-homes"
log = logging.getLogger("gpuspawner")
# A probe's exit status → what is wrong on its node.
NOT_SHARED, NOT_WRITABLE = 3, 4


def ready(path: str, uid: int, gid: int) -> str:
    """The storage's token, its marker written at the first start, and a folder the notebook
    user (`uid`, `gid`) owns for the doctor's probes; GPUConfigError (which stops the hub
    with one line) where the path cannot hold homes."""
    if not path.startswith("/") or clean_path(path) != path.rstrip("/") or exposing_host([path]):
        raise GPUConfigError(
            f"{SETTING} = {path!r}: give the plain absolute path where every node (and the "
            "hub's host) mounts the shared storage, such as '/mnt/homes'"
        )
    if not Path(path).is_dir():
        raise GPUConfigError(
            f"{SETTING}: {path} is not a folder on the hub's host. Mount the shared storage "
            "there too, at the same path as on every node: the hub makes each user's folder in it"
        )
    marker = Path(path, MARKER)
    try:
        if not marker.is_file():
            marker.write_text(secrets.token_hex(16) + "\n")
        make_folder(str(Path(path, PROBES)), uid, gid)
        return token_of(path)
    except StorageProblem as problem:
        raise GPUConfigError(f"{SETTING}: {problem}") from None
    except OSError as error:
        raise GPUConfigError(
            f"{SETTING}: the hub cannot write in {path} ({error.strerror}). It makes each "
            "user's folder there: run it as root, or give it the folder"
        ) from None


def token_of(path: str) -> str:
    """The token in the storage's marker, as the hub's host sees it ("" without one: then
    no node's storage can match it)."""
    try:
        return Path(path, MARKER).read_text().strip()
    except OSError:
        return ""


def probe_node(
    client: Any, node_id: str, image: str, path: str, token: str, uid: int, timeout: float = 60
) -> int | str:
    """Run a task on the node, as the notebook user (`uid`), that reads the marker and
    writes a file in the folder of `path` that user owns (as in their home): its exit
    status (0, NOT_SHARED or NOT_WRITABLE), or why none came. `client`: a docker APIClient
    of the swarm's manager."""
    check = (
        f'test "$(cat {PROBE_TARGET}/{MARKER} 2>/dev/null)" = "{token}" || exit {NOT_SHARED}; '
        f'f={PROBE_TARGET}/{PROBES}/$(hostname)-$$; touch "$f" 2>/dev/null || exit {NOT_WRITABLE}; '
        'rm -f "$f"'
    )
    mounts = [Mount(PROBE_TARGET, path, type="bind")]
    command = ["sh", "-c", check]
    with node_tasks.task_on(client, node_id, image, command, mounts, "probe", str(uid)) as task:
        return node_tasks.outcome(client, task, timeout)


Probe = Callable[[Node], int | str]  # one node's answer: 0, or what is wrong there


def prober(client: Any, image: str, path: str, uid: int) -> Probe:
    """`probe_node` with the storage's token as the hub's host reads it now; an engine that
    does not answer is an answer too (the hub's monitor and the doctor go on)."""

    def probe(node: Node) -> int | str:
        token = token_of(path)
        if not token:
            return f"the hub's host has no marker in {path}"
        try:
            return probe_node(client, node.id, image, path, token, uid)
        except (DockerException, RequestException) as error:
            return str(error)

    return probe


def ask(probe: Probe, nodes: Sequence[Node]) -> dict[str, int | str]:
    """Each ready node's answer, by hostname, all asked at once."""
    ready = [n for n in nodes if n.ready]
    with ThreadPoolExecutor(max_workers=max(1, len(ready))) as pool:
        answers = list(pool.map(probe, ready))
    return {node.hostname: answer for node, answer in zip(ready, answers, strict=True)}


def why_not_shared(answer: int | str, path: str, uid: int) -> str:
    """A probe's answer other than 0, in words."""
    if answer == NOT_SHARED:
        return f"{path} there is not the hub's shared storage (the hub's marker is missing)"
    if answer == NOT_WRITABLE:
        return f"uid {uid} (the notebook user) cannot write in its own folder of {path} there"
    return f"a task there could not look at {path}: {answer}"


@dataclass
class MountWatch:
    """Which ready nodes do not mount the shared storage for homes, asked of each node
    (`probe`) at most every `every` seconds: a node that lost its mount would give a new
    server an empty home, so it is kept out of new starts (`SwarmEngine.unreachable`);
    its running servers are left alone."""

    probe: Probe
    path: str
    uid: int
    every: float = 300.0
    _asked: float = -math.inf
    _lost: dict[str, str] = field(default_factory=dict)

    def lost(self, nodes: Sequence[Node], now: float) -> dict[str, str]:
        """Node → why it is kept out of new starts, as the latest look found it."""
        if now - self._asked >= self.every:
            self._asked = now
            answers = ask(self.probe, nodes)
            self._lost = {
                node: f"node {node} does not mount the shared homes: "
                + why_not_shared(answer, self.path, self.uid)
                for node, answer in answers.items()
                if answer != 0
            }
            mounted = sorted(set(answers) - set(self._lost))
            log.info("gpuspawner: shared homes %s mounted on %s", self.path, ", ".join(mounted))
            for why in self._lost.values():
                log.warning("gpuspawner: %s: no new server goes there", why)
        return dict(self._lost)
