"""The seam between the books and where containers run: this host's Docker engine today.

The broker sees containers only through an `Engine`: what each running
container is (one of our servers, from its labels, or something else) and
which GPUs it can reach, and whether a server's containers are gone. Nothing
on the broker's side of this seam imports `docker`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..core.reach import Reach


@dataclass(frozen=True)
class ServerLabels:
    """What a gpuspawner container's labels say about its server.

    The ids are None on containers made by gpuspawner 0.1, which labelled
    only names; those are matched by user and server name.
    """

    hub: str  # the hub's DockerSpawner.prefix: several hubs can share one engine
    spawner_id: int | None
    user_id: int | None
    user: str
    server: str
    uuids: tuple[str, ...]
    since: float | None
    quota_group: str | None
    units: tuple[str, ...] = ()  # the units held, by id (absent before gpuspawner 0.2)


@dataclass(frozen=True)
class Seen:
    """A container as the engine reports it, reduced to what the books need."""

    id: str
    name: str
    image: str
    running: bool
    reach: Reach  # the GPUs it can reach, however it asked for them
    server: ServerLabels | None = None  # gpuspawner's labels, when present and readable
    label_problem: str | None = None  # gpuspawner's labels present but unreadable: why
    finished_at: float | None = None  # a stopped container: when it stopped, as Docker says
    node: str = ""  # the machine it runs on (GPU.node: a Swarm node's hostname); "" on one host
    container_id: str = ""  # a Swarm task's container on its node (`id` is the task's)


class Engine(Protocol):
    """Where notebook containers run. Its calls block: the broker runs them in a worker thread."""

    def containers(self) -> list[Seen]:
        """Every container that is a gpuspawner server (in any state) or runs reaching a GPU."""
        ...

    def stopped_since(self, hub: str, since: float) -> dict[int, float]:
        """When the hub's servers' containers stopped (died) from `since` until now, by
        spawner id, as far as the engine remembers; {} where it cannot say."""
        ...

    def unreachable(self) -> dict[str, str]:
        """The machines (by `Seen.node`) where no new server may go now, and why in words:
        a node that is down, or that an admin drained; {} on one host."""
        ...

    def remove_server(self, hub: str, spawner_id: int, container_ids: tuple[str, ...] = ()) -> bool:
        """Force-remove every container of one of our servers (by its labels, and the
        `container_ids` known to be its); True once Docker confirms none is left."""
        ...
