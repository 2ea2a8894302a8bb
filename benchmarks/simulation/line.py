"""gpuspawner's waiting line (`core.line`), run as the hub would run it, for the queue row.

With a line, a start that finds no room is not refused: it waits in line, and
every minute `line.in_order` orders the line (recent GPU-hours from the
grants' `usage.UsageRecord`s, decayed with `usage.decayed_gpu_hours`) and
`line.starting_now` says who starts, with backfill and a reservation for
whoever has waited long. The hub's line (`hub.line.waiting`) runs the same
functions on events instead of every minute. The documented team has no group
priorities, so all wait at priority 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from gpuspawner.core.line import DEFAULT_RESERVE_AFTER, Outcome, Waiting, in_order, starting_now
from gpuspawner.core.usage import UsageRecord, decayed_gpu_hours


class Line:
    def __init__(self, reserve_after: float = DEFAULT_RESERVE_AFTER) -> None:
        self.reserve_after = reserve_after
        self.ended: list[UsageRecord] = []
        self.running: dict[int, UsageRecord] = {}  # by server key (jobs' too: the hub's ledger)
        self.order: list[int] = []  # the keys in line at the latest pass, in line order

    def granted(self, key: int, user_id: int, user: str, gpus: int, now: float) -> None:
        self.running[key] = UsageRecord(user_id, user, "", None, gpus, now)

    def released(self, key: int, now: float) -> None:
        record = self.running.pop(key, None)
        if record is not None:
            self.ended.append(replace(record, end=now))

    def recent(self, waiting: Sequence[Waiting], now: float) -> dict[int, float]:
        """The decayed GPU-hours, servers' and jobs' alike, that `in_order` reads to order
        `waiting`: its users' (each summed over their own records, in the same order), and
        only between two users or more."""
        users = {w.user_id for w in waiting}
        if len(users) < 2:
            return {}
        records = [r for r in [*self.ended, *self.running.values()] if r.user_id in users]
        return decayed_gpu_hours(records, now)

    def starting(
        self,
        waiting: Sequence[Waiting],
        start: Callable[[Waiting], bool | Outcome],
        now: float,
        behind: Callable[[Waiting], None] = lambda w: None,
    ) -> list[Waiting]:
        """Who of `waiting` starts now; `start` tries to give one its GPUs, for real (a limit
        that holds it, `Outcome.HELD`, keeps nothing back for it, as in the hub's line);
        `behind` hears of each that waits behind a start GPUs are kept for (not tried)."""
        ordered = in_order(waiting, self.recent(waiting, now))
        self.order = [w.key for w in ordered]

        def apart(w: Waiting, starting: Sequence[Waiting], heads: Sequence[Waiting]) -> bool:
            behind(w)
            return False

        return starting_now(
            ordered, lambda w, _: start(w), now, self.reserve_after, fits_apart=apart
        ).starting
