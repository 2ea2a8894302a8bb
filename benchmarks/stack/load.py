"""The simulated GPUs' load file, as `gpuspawner simulate` writes it, with each person's
kernel busy or idle as the trace says.

The hub's monitor reads c.GPUSpawner.simulated_load_file for its simulated GPUs' use, and
the checkpoint driver's double for their CUDA processes. `gpuspawner simulate` writes one
process per running server on each of its GPUs (`admin.simulate.work`): a person's kernel
with a model loaded, idle (6 GiB, 0 %); a job's training run (20 GiB, 95 %). The replay
writes exactly that, from the containers Docker runs, and sets a person's kernel to
`BUSY_PERCENT` while their trace says its GPUs are busy. One board per hub: people share it.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gpuspawner.admin.simulate import work, write
from gpuspawner.engine.base import LookPast, Seen

BUSY_PERCENT = 90.0  # a cell that trains: well over the hub's gpu_busy_threshold (5 %)


def loads(
    containers: Iterable[Seen], hub: str, busy: Mapping[tuple[str, str], bool]
) -> dict[str, Any]:
    """The load file's content: `gpuspawner simulate`'s, with the kernels of the servers
    (user, server) that `busy` marks True at BUSY_PERCENT."""
    seen = list(containers)
    load = copy.deepcopy(work(seen, hub))
    busy_ids = {
        c.id
        for c in seen
        if c.server is not None and busy.get((c.server.user, c.server.server), False)
    }
    for device in load.values():
        for process in device["processes"]:
            if process["container"] in busy_ids:
                process["utilization_percent"] = BUSY_PERCENT
    return load


class LoadBoard:
    """The hub's load file, rewritten (whole, by a rename) whenever what it says changes:
    on a person's busy or idle, and on each `refresh` (a server or job started or ended).
    `engine` is gpuspawner's Docker engine adapter (`engine.docker.DockerEngine`)."""

    def __init__(self, path: Path, hub: str, engine: Any, ignore: Iterable[str] = ()) -> None:
        self.path, self.hub, self.engine = path, hub, engine
        self.look = LookPast(tuple(ignore), hub)
        self.busy: dict[tuple[str, str], bool] = {}
        self.written: dict[str, Any] | None = None
        self._lock = threading.Lock()  # people act from threads of their own

    def kernel(self, user: str, server: str, busy: bool) -> None:
        with self._lock:
            self.busy[(user, server)] = busy
        self.refresh()

    def refresh(self) -> dict[str, Any]:
        with self._lock:
            load = loads(self.engine.containers(self.look), self.hub, self.busy)
            if load != self.written:
                write(self.path, load)
                self.written = load
            return load
