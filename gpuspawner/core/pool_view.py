"""The pool as everyone but its owner sees it: answers, never changes.

The broker owns the pool (`hub.books.broker`); the form, the pages, the metrics and the
waiting line's estimates read it through this view, so that a change to the books
can only come through the broker's own calls (mypy checks it).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from fractions import Fraction
from typing import Protocol

from .grants import Grant, Usage
from .placement import NotEnoughGPUs
from .units import Request, Unit


class DeviceState(StrEnum):
    FREE = "free"
    ALLOCATED = "allocated"
    STOPPING = "stopping"
    UNHEALTHY = "unhealthy"
    EXTERNAL = "external"
    DRAINED = "drained"  # free, but a drain of the calendar holds it out (never the pool's)
    # free to take, but parked work waits on it: its container can still reach the GPU
    # (never the pool's: what the GPUs page, the API and the metrics say, `with_parked`)
    PARKED = "parked"


class PoolView(Protocol):
    @property
    def units(self) -> tuple[Unit, ...]: ...

    @property
    def gpus(self) -> tuple[str, ...]: ...

    def unit(self, unit_id: str) -> Unit | None: ...

    def watched(self) -> tuple[str, ...]: ...

    def weight_of(self, request: Request) -> Fraction: ...

    def grant_of(self, key: int) -> Grant | None: ...

    def grants(self) -> list[Grant]: ...

    def holder_of(self, unit_id: str) -> Grant | None: ...

    def holders_on(self, device: str) -> list[Grant]: ...

    def bound_to(self, unit_id: str) -> list[Grant]: ...

    def free_count(self, request: Request | None = None) -> int: ...

    def on_one_machine(self, request: Request, usable: bool = False) -> int: ...

    def refusal(
        self, request: Request, keep: frozenset[str] = frozenset()
    ) -> NotEnoughGPUs | None: ...

    def fits_if_freed(
        self, request: Request, freed: frozenset[str], claimed: frozenset[str] = frozenset()
    ) -> bool: ...

    def would_take(
        self, request: Request, freed: frozenset[str], claimed: frozenset[str] = frozenset()
    ) -> frozenset[str] | None: ...

    def usage(self) -> Usage: ...

    def states(self) -> dict[str, DeviceState]: ...

    def unhealthy_reason(self, unit_id: str) -> str | None: ...

    def marked_unhealthy(self, device: str) -> str | None: ...

    def external_user(self, unit_id: str) -> str | None: ...

    def externals(self) -> dict[str, str]: ...

    def unreachable(self) -> dict[str, str]: ...


def with_parked(states: Mapping[str, DeviceState], pool: PoolView) -> dict[str, DeviceState]:
    """`states` as admins read them (the GPUs page and API, the metrics): a free unit with
    parked work waiting on it reads parked. A start may take it, but a container can still
    reach it, and free is said only where none can."""
    return {
        unit: DeviceState.PARKED if state is DeviceState.FREE and pool.bound_to(unit) else state
        for unit, state in states.items()
    }
