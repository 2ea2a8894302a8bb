"""The interface every GPU source offers, and the inventory the pool is built from.

A source's abilities beyond the inventory are stated on the seam too, so that the hub and
the admin tools ask the source instead of asking which source it is: who runs each GPU
process, the processes of each container, where the checkpoint driver's calls are made,
and whether its GPUs are on several machines (a swarm's nodes, each with an agent).
NVML, the simulated GPUs and a swarm's nodes each answer all of them
(tests/architecture/conformance.py holds every source and test double to it)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from ..core.errors import InventoryConfigError
from ..core.gpus import GPU, Telemetry
from ..core.nodes import Node
from ..core.placement import Topology
from ..core.reach import Reach
from ..core.units import Sharing, Unit, all_units, parse_shared
from .agent_host import AgentAccess
from .checkpoint import HostOf
from .wire import AgentAnswer

log = logging.getLogger("gpuspawner")


class GPUSource(Protocol):
    """Where the inventory, the wiring and the telemetry come from."""

    # Whether a container reaches this source's GPUs only by the names the source gives
    # them (a simulated machine: its GPUs exist nowhere else). On real GPUs a device name
    # the driver does not know may still reach a GPU (a MIG instance made again, say), so
    # a container naming one is taken as reaching them all.
    names_only: bool

    def list_gpus(self) -> list[GPU]:
        """The GPUs as they are now, each with its MIG instances if in MIG mode."""
        ...

    def topology(self, gpus: Sequence[GPU]) -> Topology: ...

    def sample(self, uuids: Sequence[str]) -> dict[str, Telemetry]: ...

    def process_owners(self, pids: Iterable[int]) -> dict[int, str]:
        """The container (id or name) running each of these GPU processes, where it knows."""
        ...

    def container_pids(self, containers: Mapping[str, Iterable[str]]) -> dict[str, list[int]]:
        """The PIDs each container runs on the hub's host (by a key, from its names and
        ids): what the checkpoint driver parks here."""
        ...

    def checkpoint_hosts(self, driver: str) -> HostOf:
        """Where parked work's driver calls are made, by node, with the driver
        `c.GPUSpawner.checkpoint_driver` names ("auto", "cuda" or "simulated");
        GPUConfigError in one line where that cannot be."""
        ...

    def on_nodes(self) -> NodeAgents | None:
        """Where its GPUs are on several machines, each with an agent (a swarm's nodes):
        those agents, to ask; None where the GPUs are this host's."""
        ...


class NodeAgents(Protocol):
    """The agents of a source whose GPUs are on several machines (`devices.swarm`)."""

    agents: AgentAccess

    def ask(self, node: Node, uuids: Sequence[str]) -> AgentAnswer:
        """One node's agent's answer (blocking); OSError or ValueError where it has none."""
        ...


@dataclass(frozen=True)
class Inventory:
    """The GPUs for the pool, those the admin excluded, and those left out because they are
    ambiguous (a UUID the driver reports twice cannot be handed out safely)."""

    gpus: list[GPU]
    excluded: list[GPU]
    ambiguous: list[GPU]
    shared: Mapping[str, Sharing] = field(default_factory=dict)  # by GPU UUID
    names_only: bool = False  # its source's: see GPUSource

    @property
    def units(self) -> list[Unit]:
        """What the pool hands out: whole GPUs, MIG instances, shared GPUs' slots."""
        return all_units(self.gpus, self.shared)

    def uuid_by_index(self, node: str = "") -> dict[str, str]:
        """NVML index (as text, as Docker device requests may name GPUs) → UUID, on `node`."""
        return {str(g.index): g.uuid for g in self._on(node)}

    def machine(self, node: str | None = "") -> list[str]:
        """Every GPU and MIG UUID of a machine (None: of every machine), excluded ones too:
        what a container may reach."""
        gpus = self._on(node)
        return [*(g.uuid for g in gpus), *(m.uuid for g in gpus for m in g.mig)]

    def reached(self, reach: Reach, node: str) -> frozenset[str]:
        """The GPU and MIG UUIDs a container on `node` reaches (indices are the node's own);
        one on no machine yet (node "" in a swarm: a task not yet placed) reaches whatever
        it could on any, and one on a machine without GPUs reaches none."""
        machines = self._machines
        where = sorted(machines) if node == "" and node not in machines else [node]
        return frozenset().union(
            *(reach.uuids(*machines.get(n, ({}, frozenset())), self.names_only) for n in where)
        )

    @cached_property
    def _machines(self) -> dict[str, tuple[dict[str, str], frozenset[str]]]:
        """Each machine's `uuid_by_index` and `machine`, made once: `reached` is asked for
        every container at every look, and making them each time made a look at 1,000 GPUs
        take 2 s (benchmarks/restart_recovery.py). An inventory does not change once
        discovered."""
        nodes = {g.node for g in (*self.gpus, *self.excluded)}
        return {n: (self.uuid_by_index(n), frozenset(self.machine(n))) for n in nodes}

    def _on(self, node: str | None) -> list[GPU]:
        return [g for g in (*self.gpus, *self.excluded) if node is None or g.node == node]


def discover(
    source: GPUSource, exclude: Iterable[str | int] = (), shared: Mapping[Any, Any] | None = None
) -> Inventory:
    """The machine's GPUs, split by the admin's `exclude_gpus` (UUIDs or indices), with the
    admin's `shared_gpus` checked against them."""
    found = source.list_gpus()
    twice = {uuid for uuid, n in Counter(g.uuid for g in found).items() if n > 1}
    for uuid in sorted(twice):
        log.error(
            "gpuspawner: the driver reports GPU %s more than once (indices %s): "
            "kept out of the pool",
            uuid,
            ", ".join(str(g.index) for g in found if g.uuid == uuid),
        )
    excluded_keys = {str(key) for key in exclude}
    unknown = excluded_keys - {g.uuid for g in found} - {str(g.index) for g in found}
    if unknown:
        raise InventoryConfigError(
            f"c.GPUSpawner.exclude_gpus names GPUs this machine does not have: "
            f"{', '.join(sorted(unknown))}. Known: "
            f"{', '.join(f'{g.index}={g.uuid}' for g in found) or 'none'}"
        )

    def is_excluded(gpu: GPU) -> bool:
        return gpu.uuid in excluded_keys or str(gpu.index) in excluded_keys

    sharing = parse_shared(shared or {}, [g for g in found if g.uuid not in twice])
    for gpu in found:
        if gpu.uuid in sharing and is_excluded(gpu):
            raise InventoryConfigError(
                f"GPU {gpu.index} is both in c.GPUSpawner.exclude_gpus and in "
                "c.GPUSpawner.shared_gpus: remove it from one"
            )
    return Inventory(
        gpus=[g for g in found if g.uuid not in twice and not is_excluded(g)],
        excluded=[g for g in found if g.uuid not in twice and is_excluded(g)],
        ambiguous=[g for g in found if g.uuid in twice],
        shared=sharing,
        names_only=source.names_only,
    )
