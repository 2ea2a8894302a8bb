"""The machines one pool spans, and what each has free.

A machine is a node (a Swarm node's name); a single host is one node named "".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .pool import DeviceState
from .units import Kind, Unit


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
