"""The waiting line: who starts next when GPUs free up, fairly and without idle GPUs.

Order, as the batch schedulers that do it well order jobs (Slurm's
multifactor priority, Kueue's admission fair sharing): a group's `priority`
first; within one priority, the person who used fewer GPU-hours recently
(decayed with a half-life, `usage.decayed_gpu_hours`); ties by arrival.

Policy — backfill, then a reservation for the head of the line:
- While the head of the line has waited less than `reserve_after`, anyone
  further back whose request fits starts at once: a freed GPU never sits
  idle while someone it fits is waiting.
- Once the head has waited `reserve_after` and still does not fit, nobody
  behind it starts: freed GPUs gather for it. A 4-GPU request therefore
  starts under any steady stream of 1-GPU requests, after at most
  `reserve_after` plus the time for 4 GPUs to free; GPUs sit idle only while
  they gather for it, never more of them than it asked for.
- A request its group's quota holds back (`Outcome.HELD`) is passed over:
  freed GPUs cannot help it, so none gather for it and it never blocks the
  line; it starts when a member of its group gives GPUs back.
Notebooks give no runtime estimates, so the classic "backfill only what ends
before the reservation" (EASY backfill) has nothing to go on; the wait bound
above is what this policy promises instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

DEFAULT_RESERVE_AFTER = 10 * 60.0


class Outcome(Enum):
    """What trying a request now gives (`fits` may also answer True: STARTS, False: SHORT)."""

    STARTS = "starts"
    SHORT = "short"  # too few free GPUs: what frees up may gather for it
    HELD = "held"  # held back by its group's quota: freed GPUs cannot help it


@dataclass(frozen=True)
class Waiting:
    """A start that waits for GPUs: a server (by spawner id), what it asks, since when."""

    key: int
    user_id: int
    group: str  # the group whose priority it has (the user's highest)
    priority: int
    gpus: float
    arrived: float


def in_order(line: Sequence[Waiting], recent_use: Mapping[int, float]) -> list[Waiting]:
    """Priority (higher first), then recent GPU-hours (fewer first), then arrival."""
    return sorted(line, key=lambda w: (-w.priority, recent_use.get(w.user_id, 0.0), w.arrived))


def starting_now(
    ordered: Sequence[Waiting],
    fits: Callable[[Waiting, Sequence[Waiting]], bool | Outcome],
    now: float,
    reserve_after: float = DEFAULT_RESERVE_AFTER,
) -> list[Waiting]:
    """Who of the `ordered` line starts now.

    `fits(waiting, starting)` says whether a request can be served now,
    after the ones already chosen to start (`starting`) have taken theirs.
    It is asked in order, and not at all behind a head whose reservation holds,
    so a `fits` that takes the GPUs as it says yes (the hub's) decides and
    reserves in one pass.
    """
    starting: list[Waiting] = []
    head_blocked = False
    for waiting in ordered:
        outcome = fits(waiting, starting)
        if outcome is True or outcome is Outcome.STARTS:
            starting.append(waiting)
            continue
        if outcome is Outcome.HELD:
            continue
        if not head_blocked and now - waiting.arrived >= reserve_after:
            break  # the head has waited long enough: what frees up is kept for it
        head_blocked = True
    return starting
