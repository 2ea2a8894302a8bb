"""What an engine adapter provides: the seam between gpuspawner's engine-neutral spawner and
one engine's spawner class (docs/architecture.md, "Adding an engine").

An adapter (`hub.engines`: `GPUSpawner` on one host's Docker, `SwarmGPUSpawner` on a
swarm) puts the engine-neutral `GPUServer` before its engine's spawner class. Beside the
settings every adapter has (`settings.GPUSettings`), this is all that `GPUServer`, the
hub's start-up and the admin tools (`gpuspawner doctor`, `status`) use of it: they call
these, and never ask which adapter they have. tests/architecture/conformance.py holds
every adapter to it, as k8s-device-plugin's `var _ ResourceManager = …` does.
"""

from __future__ import annotations

from typing import Protocol

from ..devices.source import GPUSource
from ..engine.base import Engine


class Mover(Protocol):
    """An adapter's hands for a home's move between nodes (`home_mover`); each blocks, each
    answers 0 or why not."""

    def copy(self, volume: str, source: str, target: str) -> int | str:
        """Copy the volume from node `source` to node `target` and check the copy."""
        ...

    def empty(self, volume: str, node: str) -> int | str:
        """Delete everything in the volume on `node`."""
        ...


class EngineAdapter(Protocol):
    """An engine adapter, as the server, the start-up and the admin tools use it."""

    runs_on_nodes: bool  # its engine spans several machines (a swarm's nodes)
    shared_homes: str  # the folder homes are kept in on storage every node mounts; "": none
    prefix: str  # which containers on the engine are this hub's (DockerSpawner.prefix)
    object_id: str  # its server's container (a task on a swarm); "" while there is none

    @property
    def homes_on_nodes(self) -> bool:
        """Whether each machine keeps its own copy of a user's home (a swarm's named
        volumes): then a user's servers go where their home is."""
        ...

    # --- at hub start and in the admin tools ----------------------------------------------
    def make_engine(self) -> Engine:
        """The books' view of where notebooks run, on a client of its own."""
        ...

    def make_gpu_source(self, engine: Engine) -> GPUSource | None:
        """Where the GPUs are listed; None for the config's (NVML, or simulated GPUs)."""
        ...

    def check_storage(self) -> None:
        """GPUConfigError where the storage the config names cannot serve homes."""
        ...

    def home_mover(self, engine: Engine) -> Mover | None:
        """How the hub moves a home between nodes, where homes are each node's own."""
        ...

    # --- for each start (GPUServer) -----------------------------------------------------
    def images_offered(self) -> list[str]:
        """The images users may pick; ["*"] for any."""
        ...

    def home(self) -> str | None:
        """Where the user's home is mounted, if a volume keeps one."""
        ...

    async def prepare_storage(self) -> None:
        """Homes and shared folders ready before the engine sees them."""
        ...

    async def prepare_image(self) -> None:
        """The image there before the GPUs are taken (else the start is refused)."""
        ...
