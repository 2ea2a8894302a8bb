"""The machines one pool spans: what each is, how an admin names them, and what each has free.

A machine is a node (a Swarm node's name); a single host is one node named "".
Admins list machines by name in a profile's or a group's `nodes`; a name the
pool does not know now is no error, as machines come and go. `Node` is a machine as an
engine that spans several reports it: the engine's seam (`engine.base.Engine.cluster_nodes`)
and the GPU source that reads a swarm's nodes (`devices.swarm`) both name it from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .pool import DeviceState
from .units import Kind, Unit


@dataclass(frozen=True)
class Node:
    """One machine of a pool that spans several (a swarm's node), as its manager sees it."""

    id: str
    hostname: str  # the books' name for it (GPU.node)
    state: str  # "ready", "down", "unknown" or "disconnected"
    availability: str  # "active", "pause" or "drain"
    engine_version: str
    manager: bool
    address: str
    gpus: tuple[str, ...] = ()  # the GPU UUIDs it advertises, in its daemon.json's order
    labels: Mapping[str, str] = field(default_factory=dict)  # the admin's node labels

    @property
    def ready(self) -> bool:
        return self.state == "ready"


@dataclass(frozen=True)
class Count:
    free: int
    total: int


def counts_by_node(
    units: Iterable[Unit], states: Mapping[str, DeviceState]
) -> dict[str, dict[Kind, Count]]:
    """Free and total units of each kind on each machine (`Pool.states()`: each unit's
    state), for the form and the admin page; machines and kinds in the units' order."""
    counts: dict[str, dict[Kind, Count]] = {}
    for unit in units:
        kinds = counts.setdefault(unit.node, {})
        was = kinds.get(unit.kind, Count(0, 0))
        free = states.get(unit.id) is DeviceState.FREE
        kinds[unit.kind] = Count(was.free + free, was.total + 1)
    return counts


def parse_nodes(value: Any, where: str, error: type[ValueError]) -> frozenset[str]:
    """The machines a profile's or group's `nodes` lists (`where` names it): one or more."""
    names = value if isinstance(value, list | tuple | set | frozenset) else ()
    if not names or not all(isinstance(n, str) and n and n == n.strip() for n in names):
        raise error(
            f"{where} must be a list of one or more machine names (Swarm node names or "
            f"hostnames), such as ['gpu-old-1'], got {value!r}"
        )
    return frozenset(names)
