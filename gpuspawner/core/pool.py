"""Who holds which GPU: the books of one hub's shared pool.

Every change happens under one lock and in one step, so a GPU is never held by
two servers and an allocation takes all the GPUs it asked for or none.

A grant is keyed by the server's id in the hub's database, which a rename of
the user or the server does not change; the names it carries are for people.
A grant ends in two steps: `begin_release` when the hub says the server ended
(its GPUs stay held, "stopping"), `release` only once the container is known
to be gone. Between the two, nobody else can be given those GPUs.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from .placement import NotEnoughGPUs, Placer, Topology
from .words import server_name

__all__ = ["NotEnoughGPUs"]


@dataclass(frozen=True)
class Holder:
    """A server that can hold GPUs: its database ids, and its names when the grant was made."""

    spawner_id: int
    user_id: int
    user: str
    server: str = ""

    @property
    def name(self) -> str:
        return server_name(self.user, self.server)


@dataclass(frozen=True)
class Grant:
    holder: Holder
    uuids: tuple[str, ...]
    since: float
    quota_group: str | None = None  # the group whose max_gpus_group it counts against
    stopping: bool = False  # the server ended; its container is not yet confirmed gone

    @property
    def key(self) -> int:
        return self.holder.spawner_id


class DeviceState(StrEnum):
    FREE = "free"
    ALLOCATED = "allocated"
    STOPPING = "stopping"
    UNHEALTHY = "unhealthy"
    EXTERNAL = "external"


class AlreadyHolding(Exception):
    """A server asked for GPUs while its earlier grant was never released."""


@dataclass
class Usage:
    """What running servers hold now, for limit checks: GPUs per user id and per quota group.

    Stopping grants do not count: their servers ended, and while Docker has not
    confirmed the container gone the user should not be held back by it.
    """

    by_user: Counter[int] = field(default_factory=Counter)
    by_group: Counter[str] = field(default_factory=Counter)


Admission = Callable[[Usage], str | None]
"""Decides a request against current usage: raises to refuse, returns the quota group to charge."""


class Pool:
    """The shared pool. Thread-safe; every public method is one atomic step."""

    def __init__(
        self,
        uuids: Sequence[str],
        policy: str = "packed",
        clock: Callable[[], float] = time.time,
        topology: Topology | None = None,
    ) -> None:
        if len(set(uuids)) != len(uuids):
            raise ValueError("a GPU UUID appears twice in the inventory")
        self.uuids = tuple(uuids)
        self.policy = policy
        if topology is None:
            topology = Topology.by_index({u: i for i, u in enumerate(self.uuids)})
        self._placer = Placer(topology.restricted_to(self.uuids), policy)
        self._clock = clock
        self._known = set(self.uuids)
        self._grants: dict[int, Grant] = {}
        self._holder_of: dict[str, int] = {}
        self._unhealthy: dict[str, str] = {}
        self._external: dict[str, str] = {}
        self._lock = threading.RLock()

    def allocate(self, holder: Holder, count: int, admit: Admission | None = None) -> Grant:
        """Take `count` free GPUs for a server, after `admit` (which may raise) agrees."""
        with self._lock:
            if holder.spawner_id in self._grants:
                held = self._grants[holder.spawner_id]
                raise AlreadyHolding(f"{held.holder.name} already holds {held.uuids}")
            quota_group = admit(self._usage()) if admit else None
            chosen = tuple(self._placer.place(self._free_uuids(), count))
            grant = Grant(holder, chosen, self._clock(), quota_group)
            if chosen:  # a CPU-only server holds nothing to keep books of
                self._record(grant)
            return grant

    def adopt(
        self,
        holder: Holder,
        uuids: Iterable[str],
        since: float | None = None,
        quota_group: str | None = None,
    ) -> Grant:
        """Record GPUs a running server already holds (recovery after a hub restart).

        Unlike `allocate`, adopting takes unhealthy or externally used GPUs too:
        the container has them whatever the books say. GPUs held by another
        server are refused: AlreadyHolding names them.
        """
        with self._lock:
            wanted = tuple(u for u in uuids if u in self._known)
            taken = {
                u: self._grants[self._holder_of[u]].holder.name
                for u in wanted
                if self._holder_of.get(u, holder.spawner_id) != holder.spawner_id
            }
            if taken:
                raise AlreadyHolding(f"{holder.name} claims GPUs held by others: {taken}")
            self._forget(holder.spawner_id)
            grant = Grant(holder, wanted, self._clock() if since is None else since, quota_group)
            if wanted:
                self._record(grant)
            return grant

    def begin_release(self, key: int) -> Grant | None:
        """The server ended: its GPUs stay held, as stopping, until `release`."""
        with self._lock:
            grant = self._grants.get(key)
            if grant is None or grant.stopping:
                return grant
            stopping = replace(grant, stopping=True)
            self._grants[key] = stopping
            return stopping

    def release(self, key: int) -> Grant | None:
        """Give back what a server holds, once its container is gone. Safe to repeat."""
        with self._lock:
            return self._forget(key)

    def mark_unhealthy(self, uuid: str, reason: str) -> None:
        with self._lock:
            self._unhealthy[uuid] = reason

    def mark_healthy(self, uuid: str) -> None:
        with self._lock:
            self._unhealthy.pop(uuid, None)

    def set_external(self, users: dict[str, str]) -> None:
        """GPUs busy outside the hub (uuid → who), replacing the previous set."""
        with self._lock:
            self._external = {u: who for u, who in users.items() if u in self._known}

    def grant_of(self, key: int) -> Grant | None:
        with self._lock:
            return self._grants.get(key)

    def grants(self) -> list[Grant]:
        with self._lock:
            return list(self._grants.values())

    def holder_of(self, uuid: str) -> Grant | None:
        with self._lock:
            key = self._holder_of.get(uuid)
            return None if key is None else self._grants[key]

    def free_count(self) -> int:
        with self._lock:
            return len(self._free_uuids())

    def usage(self) -> Usage:
        with self._lock:
            return self._usage()

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

    def _usage(self) -> Usage:
        usage = Usage()
        for grant in self._grants.values():
            if grant.stopping:
                continue
            usage.by_user[grant.holder.user_id] += len(grant.uuids)
            if grant.quota_group is not None:
                usage.by_group[grant.quota_group] += len(grant.uuids)
        return usage

    def _state(self, uuid: str) -> DeviceState:
        if uuid in self._unhealthy:
            return DeviceState.UNHEALTHY
        key = self._holder_of.get(uuid)
        if key is not None:
            return DeviceState.STOPPING if self._grants[key].stopping else DeviceState.ALLOCATED
        if uuid in self._external:
            return DeviceState.EXTERNAL
        return DeviceState.FREE

    def _free_uuids(self) -> list[str]:
        return [u for u in self.uuids if self._state(u) is DeviceState.FREE]

    def _record(self, grant: Grant) -> None:
        self._grants[grant.key] = grant
        for uuid in grant.uuids:
            self._holder_of[uuid] = grant.key

    def _forget(self, key: int) -> Grant | None:
        grant = self._grants.pop(key, None)
        if grant is not None:
            for uuid in grant.uuids:
                del self._holder_of[uuid]
        return grant
