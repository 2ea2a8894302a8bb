"""Who holds which GPU: the books of one hub's shared pool.

Pure standard library, no JupyterHub or Docker. Every change happens under
one lock and in one step, so a GPU is never held by two servers and an
allocation either takes all the GPUs it asked for or none.

Placement policy: devices are ordered by index and grouped into aligned
blocks of 1, 2, 4, 8 … (on DGX/HGX boards, neighbours in index order share
a PCIe switch or NVLink pairing). A request for n GPUs is served from one
aligned block of the smallest power of two ≥ n when one has room, so a
2-GPU server gets a pair, a 4-GPU one a quad.
- "packed" (default) picks the block whose surroundings are most used,
  which keeps whole free blocks for later multi-GPU requests;
- "spread" picks the block whose surroundings are least used, which keeps
  servers apart (cooler, less shared PCIe bandwidth) at the cost of
  fragmenting the pool.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum


@dataclass(frozen=True)
class Holder:
    """A server that can hold GPUs. `quota_group` is the group charged for them."""

    user: str
    server: str = ""
    quota_group: str | None = None

    @property
    def key(self) -> str:
        return f"{self.user}/{self.server}"


@dataclass(frozen=True)
class Grant:
    holder: Holder
    uuids: tuple[str, ...]
    since: float


class DeviceState(StrEnum):
    FREE = "free"
    ALLOCATED = "allocated"
    UNHEALTHY = "unhealthy"
    EXTERNAL = "external"


class NotEnoughGPUs(Exception):
    def __init__(self, requested: int, free: int, total: int) -> None:
        self.requested, self.free, self.total = requested, free, total
        super().__init__(f"{requested} GPU(s) requested, {free} of {total} free")


class AlreadyHolding(Exception):
    """A server asked for GPUs while its earlier grant was never released."""


@dataclass
class Usage:
    """What is held now, for limit checks: GPUs per user and per quota group."""

    by_user: Counter[str] = field(default_factory=Counter)
    by_group: Counter[str] = field(default_factory=Counter)


Admission = Callable[[Usage], str | None]
"""Decides a request against current usage: raises to refuse, returns the quota group to charge."""


def _block_key(free_before: list[int], size: int, start: int, block: int) -> tuple[int, ...]:
    """Free devices in the block at `start` and in each enclosing aligned block."""
    key = []
    while True:
        begin = start - start % block
        key.append(free_before[min(begin + block, size)] - free_before[begin])
        if block >= size:
            return tuple(key)
        block *= 2


PLACEMENT_POLICIES: dict[str, Callable[[tuple[int, ...]], tuple[int, ...]]] = {
    "packed": lambda key: key,
    "spread": lambda key: tuple(-n for n in key),
}


def place(free: set[int], size: int, count: int, policy: str = "packed") -> list[int]:
    """Positions (0 … size-1) for `count` devices out of `free`, by `policy`."""
    if count > len(free):
        raise NotEnoughGPUs(count, len(free), size)
    if count == 0:
        return []
    rank = PLACEMENT_POLICIES[policy]
    block = 1
    while block < count:
        block *= 2
    free_before = [0]  # free_before[i]: free devices among positions < i
    for position in range(size):
        free_before.append(free_before[-1] + (position in free))
    best = None
    for start in range(0, size, block):
        if free_before[min(start + block, size)] - free_before[start] >= count:
            candidate = (rank(_block_key(free_before, size, start, block)), start)
            best = candidate if best is None else min(best, candidate)
    if best is None:
        return sorted(free)[:count]
    start = best[1]
    return [p for p in range(start, min(start + block, size)) if p in free][:count]


class Pool:
    """The shared pool. Thread-safe; every public method is one atomic step."""

    def __init__(
        self,
        uuids: Sequence[str],
        policy: str = "packed",
        clock: Callable[[], float] = time.time,
    ) -> None:
        if policy not in PLACEMENT_POLICIES:
            raise ValueError(f"unknown placement policy {policy!r}: {sorted(PLACEMENT_POLICIES)}")
        if len(set(uuids)) != len(uuids):
            raise ValueError("a GPU UUID appears twice in the inventory")
        self.uuids = tuple(uuids)
        self.policy = policy
        self._clock = clock
        self._position = {uuid: i for i, uuid in enumerate(self.uuids)}
        self._grants: dict[str, Grant] = {}
        self._holder_of: dict[str, str] = {}
        self._unhealthy: dict[str, str] = {}
        self._external: dict[str, str] = {}
        self._lock = threading.RLock()

    def allocate(self, user: str, server: str, count: int, admit: Admission | None = None) -> Grant:
        """Take `count` free GPUs for a server, after `admit` (which may raise) agrees."""
        with self._lock:
            key = Holder(user, server).key
            if key in self._grants:
                raise AlreadyHolding(f"{key} already holds {self._grants[key].uuids}")
            holder = Holder(user, server, admit(self.usage()) if admit else None)
            free = {self._position[u] for u in self._free_uuids()}
            chosen = tuple(self.uuids[p] for p in place(free, len(self.uuids), count, self.policy))
            grant = Grant(holder, chosen, self._clock())
            if chosen:
                self._record(grant)
            return grant

    def adopt(self, holder: Holder, uuids: Iterable[str], since: float | None = None) -> Grant:
        """Record GPUs a running server already holds (recovery after a hub restart).

        Unlike `allocate`, adopting takes unhealthy or externally used GPUs too:
        the container has them whatever the books say.
        """
        with self._lock:
            wanted = tuple(u for u in uuids if u in self._position)
            taken = {
                u: self._holder_of[u]
                for u in wanted
                if self._holder_of.get(u, holder.key) != holder.key
            }
            if taken:
                raise AlreadyHolding(f"{holder.key} claims GPUs held by others: {taken}")
            self.release(holder.key)
            grant = Grant(holder, wanted, self._clock() if since is None else since)
            if wanted:
                self._record(grant)
            return grant

    def release(self, holder_key: str) -> Grant | None:
        """Give back what a server holds. Safe to call any number of times."""
        with self._lock:
            grant = self._grants.pop(holder_key, None)
            if grant is not None:
                for uuid in grant.uuids:
                    del self._holder_of[uuid]
            return grant

    def mark_unhealthy(self, uuid: str, reason: str) -> None:
        with self._lock:
            self._unhealthy[uuid] = reason

    def mark_healthy(self, uuid: str) -> None:
        with self._lock:
            self._unhealthy.pop(uuid, None)

    def set_external(self, users: dict[str, str]) -> None:
        """GPUs busy outside the hub (uuid → who), replacing the previous set."""
        with self._lock:
            self._external = {u: who for u, who in users.items() if u in self._position}

    def grant_of(self, holder_key: str) -> Grant | None:
        with self._lock:
            return self._grants.get(holder_key)

    def grants(self) -> list[Grant]:
        with self._lock:
            return list(self._grants.values())

    def free_count(self) -> int:
        with self._lock:
            return len(self._free_uuids())

    def usage(self) -> Usage:
        with self._lock:
            usage = Usage()
            for grant in self._grants.values():
                usage.by_user[grant.holder.user] += len(grant.uuids)
                if grant.holder.quota_group is not None:
                    usage.by_group[grant.holder.quota_group] += len(grant.uuids)
            return usage

    def states(self) -> dict[str, DeviceState]:
        """Each GPU's state; an unhealthy GPU reads unhealthy even while held."""
        with self._lock:
            return {uuid: self._state(uuid) for uuid in self.uuids}

    def unhealthy_reason(self, uuid: str) -> str | None:
        with self._lock:
            return self._unhealthy.get(uuid)

    def external_user(self, uuid: str) -> str | None:
        with self._lock:
            return self._external.get(uuid)

    def _state(self, uuid: str) -> DeviceState:
        if uuid in self._unhealthy:
            return DeviceState.UNHEALTHY
        if uuid in self._holder_of:
            return DeviceState.ALLOCATED
        if uuid in self._external:
            return DeviceState.EXTERNAL
        return DeviceState.FREE

    def _free_uuids(self) -> list[str]:
        return [u for u in self.uuids if self._state(u) is DeviceState.FREE]

    def _record(self, grant: Grant) -> None:
        self._grants[grant.holder.key] = grant
        for uuid in grant.uuids:
            self._holder_of[uuid] = grant.holder.key
