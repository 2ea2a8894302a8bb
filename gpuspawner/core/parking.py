"""Who is on a GPU: the parking arbiter, pure (no I/O, no clock: time comes in).

Holders are *bound* to a GPU when their containers were created with it: one person's
server and any number of jobs. At most one of them is *resident* (its work on the GPU);
the others are *parked* (their CUDA processes checkpointed to host RAM: no GPU memory,
no context) or *waiting* (a start that has not begun). The rules, in the order applied:

1. Never two on the GPU: a holder restores or starts only when no other is resident,
   parking or restoring; one move at a time per GPU.
2. A person beats a job: a person who wants the GPU (a cell run on a parked server, a
   start) makes a resident job park at once; a job never makes a busy person park.
3. A resident person whose GPU has been idle for `park_after` is parked when a job waits.
4. A restore never starts without the memory it needs: the GPU's free bytes must hold
   what the holder parked (a restore that runs out of memory leaves it stuck for good).
5. Turns, where an admin allows them (two people bound to one GPU): a resident person
   whose GPU is idle is parked at once when the other person wants it; a busy one at the
   end of its turn, `turn_quantum` seconds after it came on the GPU.
6. Work the driver cannot park (MIG, several CUDA processes: its reason given) is never
   asked to: a job gives way by SIGTERM instead, as jobs do without parking; a person
   stays resident.
7. Among those waiting: people first, then whoever has waited longest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Literal


class Residency(Enum):
    RESIDENT = "resident"
    PARKING = "parking"
    PARKED = "parked"
    RESTORING = "restoring"
    WAITING = "waiting"


R = Residency
# (where it is, what happened) → where it is now. A refused restore is not here: the holder
# is stopped (files and outputs kept) and leaves the GPU's books.
TRANSITIONS: Mapping[tuple[Residency, str], Residency] = {
    (R.RESIDENT, "park"): R.PARKING,
    (R.PARKING, "parked"): R.PARKED,
    (R.PARKING, "park refused"): R.RESIDENT,
    (R.PARKED, "restore"): R.RESTORING,
    (R.RESTORING, "restored"): R.RESIDENT,
    (R.WAITING, "start"): R.RESIDENT,
}
ON_THE_GPU = frozenset({R.RESIDENT, R.PARKING, R.RESTORING})


class IllegalMove(Exception):
    """A move the table does not allow: a bug of the caller, or books out of date."""


def after(residency: Residency, event: str) -> Residency:
    try:
        return TRANSITIONS[residency, event]
    except KeyError:
        raise IllegalMove(
            f"{event!r} cannot happen to a holder that is {residency.value}"
        ) from None


@dataclass(frozen=True)
class Bound:
    """One holder bound to the GPU, as the books and the driver say it is now."""

    holder: str  # the server's or the job's key
    person: bool  # a person's server; else a job
    residency: Residency
    since: float  # seconds: when it last changed residency
    wants: bool = True  # parked or waiting: it has work for the GPU (a wake, a runnable job)
    idle_since: float | None = None  # resident: its GPU idle since then (None: busy)
    parked_bytes: int = 0  # host memory its parked state holds
    unparkable: str = ""  # why the driver cannot park it; "" if it can


@dataclass(frozen=True)
class Step:
    action: Literal["park", "restore", "start", "give way"]
    holder: str
    reason: str


TURN_QUANTUM = 300.0  # seconds: a person's turn on a GPU they share in turns


def decide(
    bound: Sequence[Bound],
    free_bytes: int,
    now: float,
    park_after: float,
    turn_quantum: float = TURN_QUANTUM,
) -> Step | None:
    """The next move on one GPU, or None: nothing to do, or something must finish first."""
    if any(b.residency in (R.PARKING, R.RESTORING) for b in bound):
        return None
    waiting = sorted(
        (b for b in bound if b.wants and b.residency in (R.PARKED, R.WAITING)),
        key=lambda b: (not b.person, b.since),
    )
    if not waiting:
        return None
    first = waiting[0]
    resident = next((b for b in bound if b.residency is R.RESIDENT), None)
    if resident is None:
        return _come_in(first, free_bytes)
    if first.person and not resident.person:
        if resident.unparkable:
            return Step("give way", resident.holder, f"for a person; {resident.unparkable}")
        return Step("park", resident.holder, "for a person")
    idle = resident.idle_since
    if first.person and resident.person and not resident.unparkable:
        return _turn(resident, now, turn_quantum)
    lunch = resident.person and idle is not None and now - idle >= park_after
    if lunch and not first.person and not resident.unparkable:
        return Step("park", resident.holder, "its GPU idle; a job runs meanwhile")
    return None


def _turn(resident: Bound, now: float, turn_quantum: float) -> Step | None:
    """Another person wants the GPU a person is on (rule 5)."""
    if resident.idle_since is not None:
        return Step("park", resident.holder, "its GPU idle; the other person's turn")
    if now - resident.since >= turn_quantum:
        return Step("park", resident.holder, "its turn is over")
    return None


def _come_in(holder: Bound, free_bytes: int) -> Step | None:
    if holder.residency is R.WAITING:
        return Step("start", holder.holder, "the GPU is free")
    if holder.parked_bytes > free_bytes:
        return None  # rule 4: wait until something else leaves the GPU's memory
    return Step("restore", holder.holder, "the GPU is free")
