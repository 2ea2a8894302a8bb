"""What one server holds: its grant, and what all running servers hold, for limits.

Plain data the pool hands out and the limits read. A grant is keyed by the
server's id in the hub's database, which a rename of the user or the server
does not change; the names it carries are for people.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import TypeVar

from .units import Unit
from .words import server_name

K = TypeVar("K")


@dataclass(frozen=True)
class Holder:
    """A server that can hold GPUs: its database ids, and its names when the grant was made."""

    spawner_id: int
    user_id: int
    user: str
    server: str = ""
    job: bool = False  # a job (it gives way to people), not a person's server

    @property
    def name(self) -> str:
        return server_name(self.user, self.server)


@dataclass(frozen=True)
class Grant:
    holder: Holder
    units: tuple[Unit, ...]
    since: float
    quota_group: str | None = None  # the group whose max_gpus_group it counts against
    stopping: bool = False  # the server ended; its container is not yet confirmed gone
    parked: bool = False  # its work parked in host memory: its units are bound, not held
    turns: bool = False  # a person's 1-GPU server that may share its GPU with one other, in turns

    @property
    def key(self) -> int:
        return self.holder.spawner_id

    @property
    def ids(self) -> tuple[str, ...]:
        """The units' ids: what the books and the container's labels know it by."""
        return tuple(u.id for u in self.units)

    @property
    def uuids(self) -> tuple[str, ...]:
        """What Docker is asked for: GPU and MIG UUIDs, each once."""
        return tuple(dict.fromkeys(u.device for u in self.units))

    @property
    def node(self) -> str:
        """The machine its units are on (a grant never spans two); "" on one host."""
        return self.units[0].node if self.units else ""

    @cached_property
    def weight(self) -> Fraction:
        """GPU-equivalents held: what limits count (its units never change: summed once,
        not at each limit check over every grant)."""
        return sum((u.weight for u in self.units), Fraction(0))


class Held(dict[K, Fraction]):
    """GPU-equivalents per user or group; like a Counter, one not listed holds none."""

    def __missing__(self, key: K) -> Fraction:
        return Fraction(0)


@dataclass
class Usage:
    """What running servers hold now, for limit checks: GPU-equivalents per user id and per
    quota group.

    Stopping grants do not count: their servers ended, and while Docker has not
    confirmed the container gone the user should not be held back by it.
    """

    by_user: Held[int] = field(default_factory=lambda: Held[int]())
    by_group: Held[str] = field(default_factory=lambda: Held[str]())


Admission = Callable[[Fraction, int, Usage], str | None]
"""Decides a request of so many GPU-equivalents by a user (their id) against current usage:
raises to refuse, returns the quota group to charge. `limits.UserLimits.admit` is one."""
