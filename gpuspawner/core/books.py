"""The books under the pool: which unit each grant holds, and what the machine has marked.

`Books` keeps the state and answers every question about it (`pool_view.PoolView`);
`pool.Pool` adds the changes that take and give units: allocation, placement,
adoption, release and layout changes. Thread-safe: every public method is one
atomic step under the one lock.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence

from .grants import Grant, Usage
from .pool_view import DeviceState
from .units import Request, Unit

GONE = "no longer exists: the GPU's MIG layout changed"


class Books:
    def __init__(self, units: Sequence[Unit]) -> None:
        if len({u.id for u in units}) != len(units):
            raise ValueError("a GPU UUID appears twice in the inventory")
        self._units = {u.id: u for u in units}
        place = {u.gpu: (u.node, u.index) for u in units}
        self.gpus = tuple(sorted(place, key=place.__getitem__))  # the physical GPUs, fixed
        self._grants: dict[int, Grant] = {}
        self._holder_of: dict[str, int] = {}  # unit id → grant key
        self._bound: dict[str, list[int]] = {}  # unit id → parked grants' keys, oldest first
        self._unhealthy: dict[str, str] = {}  # GPU or device id → why
        self._external: dict[str, str] = {}  # GPU or device id → who uses it
        self._gone: set[str] = set()  # units a layout change removed while held
        self._unreachable: dict[str, str] = {}  # node → why
        self._lock = threading.RLock()

    # --- what there is ------------------------------------------------------------
    @property
    def units(self) -> tuple[Unit, ...]:
        with self._lock:
            return tuple(self._units.values())

    @property
    def ids(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._units)

    def unit(self, unit_id: str) -> Unit | None:
        with self._lock:
            return self._units.get(unit_id)

    def watched(self) -> tuple[str, ...]:
        """What the monitor samples: each GPU (health, temperature) and each MIG instance
        (its own memory and processes)."""
        with self._lock:
            devices = (u.device for u in self._units.values())
            return tuple(dict.fromkeys([*self.gpus, *devices]))

    # --- who holds what ------------------------------------------------------------
    def grant_of(self, key: int) -> Grant | None:
        with self._lock:
            return self._grants.get(key)

    def grants(self) -> list[Grant]:
        with self._lock:
            return list(self._grants.values())

    def holder_of(self, unit_id: str) -> Grant | None:
        with self._lock:
            key = self._holder_of.get(unit_id)
            return None if key is None else self._grants[key]

    def bound_to(self, unit_id: str) -> list[Grant]:
        """The parked grants whose containers were created with this unit, oldest first."""
        with self._lock:
            return [self._grants[k] for k in self._bound.get(unit_id, ())]

    def holders_on(self, device: str) -> list[Grant]:
        """The grants holding a unit on this GPU, or this MIG instance."""
        with self._lock:
            keys = {
                key
                for unit_id, key in self._holder_of.items()
                if device in (self._units[unit_id].gpu, self._units[unit_id].device)
            }
            return [self._grants[k] for k in sorted(keys)]

    def free_count(self, request: Request | None = None) -> int:
        """Free units (that `request` could take)."""
        with self._lock:
            return sum(
                self._state(u) is DeviceState.FREE and (request is None or request.matches(u))
                for u in self._units.values()
            )

    def on_one_machine(self, request: Request, usable: bool = False) -> int:
        """The most units `request` could take on one machine (a grant's all come from one),
        free or not: fewer than it asks for, and it can never start. `usable`: only those it
        could take once their servers end (not unhealthy, not used outside the hub, not on
        an unreachable machine)."""
        unusable = (DeviceState.UNHEALTHY, DeviceState.EXTERNAL) if usable else ()
        with self._lock:
            on = Counter(
                u.node
                for u in self._units.values()
                if request.matches(u) and self._state(u) not in unusable
            )
        return max(on.values(), default=0)

    def usage(self) -> Usage:
        with self._lock:
            return self._usage()

    def states(self) -> dict[str, DeviceState]:
        """Each unit's state; an unhealthy unit reads unhealthy even while held."""
        with self._lock:
            return {i: self._state(u) for i, u in self._units.items()}

    # --- what the machine has marked ---------------------------------------------------
    def mark_unhealthy(self, device: str, reason: str) -> None:
        """A GPU (all its units) or one MIG instance must not be handed out."""
        with self._lock:
            self._unhealthy[device] = reason

    def mark_healthy(self, device: str) -> None:
        with self._lock:
            self._unhealthy.pop(device, None)

    def marked_unhealthy(self, device: str) -> str | None:
        """Why this GPU or MIG instance itself was marked unhealthy (not its GPU's reason)."""
        with self._lock:
            return self._unhealthy.get(device)

    def unhealthy_reason(self, unit_id: str) -> str | None:
        """Why a unit is not handed out for its health: its own, else its GPU's."""
        with self._lock:
            unit = self._units.get(unit_id)
            if unit is None:
                return self._unhealthy.get(unit_id)
            return self._unhealth(unit)

    def mark_unreachable(self, node: str, reason: str) -> None:
        """A machine whose Docker cannot be reached: its units are neither free nor handed
        out, and grants on it stay held until released."""
        with self._lock:
            self._unreachable[node] = reason

    def mark_reachable(self, node: str) -> None:
        with self._lock:
            self._unreachable.pop(node, None)

    def unreachable(self) -> dict[str, str]:
        """The machines marked unreachable, and why."""
        with self._lock:
            return dict(self._unreachable)

    def set_external(self, users: dict[str, str]) -> None:
        """GPUs or MIG instances busy outside the hub (id → who), replacing the previous
        set. A GPU's UUID covers every unit on it."""
        with self._lock:
            known = {*self.gpus, *(u.device for u in self._units.values())}
            self._external = {i: who for i, who in users.items() if i in known}

    def externals(self) -> dict[str, str]:
        with self._lock:
            return dict(self._external)

    def external_user(self, unit_id: str) -> str | None:
        with self._lock:
            unit = self._units.get(unit_id)
            if unit is None:
                return self._external.get(unit_id)
            return self._external.get(unit.device) or self._external.get(unit.gpu)

    # --- under the lock -----------------------------------------------------------------
    def _unhealth(self, unit: Unit) -> str | None:
        if unit.id in self._gone:
            return GONE
        return (
            self._unreachable.get(unit.node)
            or self._unhealthy.get(unit.device)
            or self._unhealthy.get(unit.gpu)
        )

    def _reachable(self) -> set[str]:
        return {u.node for u in self._units.values()} - set(self._unreachable)

    def _usage(self) -> Usage:
        usage = Usage()
        for grant in self._grants.values():
            if grant.stopping or grant.parked:  # a parked grant holds no GPU
                continue
            usage.by_user[grant.holder.user_id] += grant.weight
            if grant.quota_group is not None:
                usage.by_group[grant.quota_group] += grant.weight
        return usage

    def _state(self, unit: Unit) -> DeviceState:
        if self._unhealth(unit):
            return DeviceState.UNHEALTHY
        key = self._holder_of.get(unit.id)
        if key is not None:
            return DeviceState.STOPPING if self._grants[key].stopping else DeviceState.ALLOCATED
        if unit.device in self._external or unit.gpu in self._external:
            return DeviceState.EXTERNAL
        return DeviceState.FREE

    def _record(self, grant: Grant) -> None:
        self._grants[grant.key] = grant
        for unit in grant.units:
            if grant.parked:
                self._bound.setdefault(unit.id, []).append(grant.key)
            else:
                self._holder_of[unit.id] = grant.key

    def _unrecord(self, grant: Grant) -> None:
        """The grant's units no longer name it; the grant itself stays."""
        for unit in grant.units:
            if not grant.parked:
                del self._holder_of[unit.id]
                continue
            bound = self._bound[unit.id]
            bound.remove(grant.key)
            if not bound:
                del self._bound[unit.id]

    def _forget(self, key: int) -> Grant | None:
        grant = self._grants.pop(key, None)
        if grant is not None:
            self._unrecord(grant)
            for unit in grant.units:
                if unit.id in self._gone and not self._referenced(unit.id):
                    self._gone.discard(unit.id)
                    del self._units[unit.id]
        return grant

    def _referenced(self, unit_id: str) -> bool:
        return unit_id in self._holder_of or unit_id in self._bound
