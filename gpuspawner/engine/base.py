"""The seam between the books and where containers run: this host's Docker engine today.

The broker sees containers only through an `Engine`: what each running
container is (one of our servers, from its labels, or something else) and
which GPUs it can reach, and whether a server's containers are gone. Nothing
on the broker's side of this seam imports `docker`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

from ..core.nodes import Node
from ..core.reach import Reach
from ..core.units import Unit


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
    turns: bool = False  # a person's server that shares its GPU in turns with one other


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
    started_at: float | None = None  # a running one: when this run of it began (a restart
    # begins another, with other processes)
    node: str = ""  # the machine it runs on (GPU.node: a Swarm node's hostname); "" on one host
    container_id: str = ""  # a Swarm task's container on its node (`id` is the task's)

    @property
    def names(self) -> tuple[str, ...]:
        """What the load file or the host may call it: its id, name and node container's id."""
        return tuple(n for n in (self.id, self.name, self.container_id) if n)

    # --- the durable record: who holds what, read alike by the hub and the CLI ---------------
    def of_hub(self, hub: str) -> bool:
        """One of `hub`'s servers (hub: its DockerSpawner.prefix; several hubs may share one
        engine). "" means any hub's. Containers labelled by gpuspawner 0.1 name no hub: those
        are told by their name, which starts with the prefix."""
        if self.server is None:
            return False
        if not hub:
            return True
        if self.server.hub:
            return self.server.hub == hub
        return self.name.startswith(f"{hub}-")

    def units_held(self, reached: Collection[str], by_id: Mapping[str, Unit]) -> list[str]:
        """The units (by id) a running server holds, of `by_id`'s: those its labels name that
        its device request reaches (`reached`). Containers labelled before units were
        (gpuspawner 0.1) name none: theirs are the whole GPUs and MIG instances they reach.
        A shared GPU's slot is never guessed: a container reaching a shared GPU without
        naming its slot holds none, and the GPU stays out of the pool while it runs.
        `by_id`: the units by id, made once for all the containers a look reads."""
        if self.server is None:
            return []
        if self.server.units:
            return [i for i in self.server.units if i in by_id and by_id[i].device in reached]
        return sorted(i for i, u in by_id.items() if u.device in reached and u.kind.held_by_reach)


@dataclass(frozen=True)
class LookPast:
    """The containers a hub looks past (c.GPUSpawner.ignore_gpu_containers): shell patterns
    on a container's name or image, such as a monitoring exporter's. Never one of `hub`'s
    own servers, nor a gpuspawner server whose labels do not say its hub. An engine does
    not even inspect the ones it can tell from its listing."""

    patterns: tuple[str, ...] = ()
    hub: str = ""  # DockerSpawner.prefix of the hub that looks

    def __call__(self, name: str, image: str, server_of: str | None) -> bool:
        """`server_of`: the hub a gpuspawner server's labels name ("" where they name none
        or cannot be read); None for a container that is no gpuspawner server."""
        if server_of is not None and server_of in ("", self.hub):
            return False
        return any(fnmatch.fnmatch(n, p) for n in (name, image) for p in self.patterns)

    def skips(self, container: Seen) -> bool:
        server_of = container.server.hub if container.server else None
        return self(container.name, container.image, "" if container.label_problem else server_of)


NOTHING = LookPast()


class Engine(Protocol):
    """Where notebook containers run. Its calls block: the broker runs them in a worker thread."""

    def containers(self, look_past: LookPast = NOTHING) -> list[Seen]:
        """Every container that is a gpuspawner server (in any state) or runs reaching a GPU,
        but those it is told to look past."""
        ...

    def stopped_since(self, hub: str, since: float) -> dict[int, float]:
        """When the hub's servers' containers stopped (died) from `since` until now, by
        spawner id, as far as the engine remembers; {} where it cannot say."""
        ...

    def unreachable(self) -> dict[str, str]:
        """The machines (by `Seen.node`) where no new server may go now, and why in words:
        a node that is down, or that an admin drained; {} on one host."""
        ...

    def cluster_nodes(self) -> list[Node] | None:
        """The nodes of an engine that spans several machines (a swarm); None on one host."""
        ...

    def remove_server(self, hub: str, spawner_id: int, container_ids: tuple[str, ...] = ()) -> bool:
        """Force-remove every container of one of our servers (by its labels, and the
        `container_ids` known to be its); True once Docker confirms none is left."""
        ...
