"""What people see of the waiting line: a start's standing, and the line for admins.

Worded by the core (`core.line`); the estimates of when GPUs free up come from the
servers whose end could let a waiter start (`core.estimates`). The line is read through
the protocol `Line` (what these words need of it), so the line imports this module and
not the other way round.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ...core import line as words
from ...core.culling import IdleClock
from ...core.estimates import Holding, next_freeing
from ...core.limits import UserLimits
from ...core.pool_view import PoolView
from .entry import Entry


class Line(Protocol):
    """What people's words read of the waiting line (`line.Line`, which is one)."""

    @property
    def pool(self) -> PoolView: ...

    @property
    def idle(self) -> IdleClock: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def limits_of(self) -> Callable[[int], UserLimits | None]: ...

    def place(self, entry: Entry) -> int: ...

    def ahead(self, entry: Entry) -> list[int]: ...

    def kept_for(self, key: int) -> bool: ...

    def recent_use_now(self) -> Mapping[int, float]: ...

    def entries(self) -> list[Entry]: ...

    def status(self, key: int) -> str | None: ...

    def next_change(self) -> asyncio.Future[None]: ...


@dataclass(frozen=True)
class Standing:
    """One entry as admins see it."""

    position: int
    key: int
    user: str
    server: str
    profile: str
    asks_for: str  # the request in words: "2 GPUs", "a MIG instance 1g.10gb"
    gpus: float  # in GPU-equivalents
    group: str
    priority: int
    recent_gpu_hours: float
    arrived: float
    gives_up_at: float
    waiting_for: str  # "gpus", or "quota" (its group's max_gpus_group)
    kept_for: bool  # freed units gather for it (it has waited reserve_after and does not fit)


def status(line: Line, entry: Entry) -> str:
    """Where a waiting start stands, for its pending page."""
    now = line.clock()
    freeing = next_freeing(holdings(line, entry), now)
    return words.standing(
        entry.request.what,
        line.place(entry),
        entry.waiting.group,
        now,
        entry.deadline,
        entry.limits.max_wait,
        quota=entry.quota,
        kept_for=line.kept_for(entry.waiting.key),
        kept_ahead=any(line.kept_for(k) for k in line.ahead(entry)),
        freeing=freeing.words if freeing else None,
    )


def standings(line: Line, ordered: list[Entry]) -> list[Standing]:
    """The line in order (`ordered`), for the admin page and its JSON."""
    recent = line.recent_use_now()
    rows = []
    for place, entry in enumerate(ordered, 1):
        w, key = entry.waiting, entry.waiting.key
        rows.append(
            Standing(
                position=place,
                key=key,
                user=entry.holder.user,
                server=entry.holder.server,
                profile=entry.slug,
                asks_for=entry.request.what,
                gpus=w.weight,
                group=w.group,
                priority=w.priority,
                recent_gpu_hours=round(recent.get(w.user_id, 0.0), 2),
                arrived=w.arrived,
                gives_up_at=entry.deadline,
                waiting_for="quota" if entry.quota else "gpus",
                kept_for=line.kept_for(key),
            )
        )
    return rows


def holdings(line: Line, entry: Entry) -> list[Holding]:
    """The running servers whose end could let this waiter start: those holding units it
    could use, or, for a wait on a group's quota, that group's."""
    quota, found = entry.quota, []
    for grant in line.pool.grants():
        if grant.stopping or (quota and grant.quota_group != quota):
            continue
        usable = grant.units if quota else [u for u in grant.units if entry.request.matches(u)]
        limits = line.limits_of(grant.holder.user_id)
        if not usable or limits is None:
            continue
        found.append(
            Holding(
                grant.holder.user,
                grant.holder.server,
                len(usable),
                grant.since,
                line.idle.idle_since.get(grant.key),
                limits.duration("max_age"),
                limits.duration("gpu_idle_timeout"),
                usable[0].kind.facts.noun,
            )
        )
    return found


async def watch(line: Line, key: int, until: asyncio.Event) -> AsyncIterator[str]:
    """A waiting start's status each time it changes, until `until` is set."""
    shown = None
    while not until.is_set():
        changed = line.next_change()  # first: a change while this status is on its way counts
        status = line.status(key)
        if status is not None and status != shown:
            shown = status
            yield status
        reserved = asyncio.ensure_future(until.wait())
        either: list[asyncio.Future[Any]] = [changed, reserved]
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            reserved.cancel()


def place_by_name(line: Line, user: str, server: str) -> int | None:
    """The same, for a start known by its user's and server's names (JupyterHub's logs)."""
    entry = next(
        (e for e in line.entries() if (e.holder.user, e.holder.server) == (user, server)), None
    )
    return line.place(entry) if entry is not None else None


def waiting_by_profile(line: Line) -> Counter[str]:
    return Counter(entry.slug for entry in line.entries())


def waiting_by_group(line: Line) -> Counter[str]:
    return Counter(entry.waiting.group for entry in line.entries())


def progress_in_line(first: int, now: int) -> int:
    """A waiting start's pending-page bar, in percent: 10 on arrival at place `first`, then
    on towards 30 (its GPUs reserved) as it moves up, so the bar shows the line moving."""
    return 10 + (20 * (first - now + 1)) // (first + 1)
