"""The hub's calendar: bookings and drains made, kept, and read by placement and the culler.

The broker owns one. It turns what an admin or a user asks ("2 GPUs of gpu-1 for group ml,
Thursday 09:00 to 18:00"; "node n2 from 18:00, driver update") into windows on named GPUs
(`core.calendar`), writes each down before it counts (`records.calendar`), and answers
placement: which units a start may not take now, and which it had better avoid because a
window opens on them before the server would end.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

from ...config.site import GPUSite
from ...core.calendar import (
    InvalidWindow,
    Window,
    ahead_of,
    check_own_bookings,
    check_window,
    choose_gpus,
    closed_to,
    drained_now,
    said_to,
    with_drains,
)
from ...core.calendar import stops_at as window_stops
from ...core.placement import NotEnoughGPUs
from ...core.pool import Admission, DeviceState, Grant, Holder, Pool
from ...core.pool_view import PoolView
from ...core.units import Request
from ...core.usage import WEEK
from ...records.calendar import CalendarRecord

GroupsOf = Callable[[str], frozenset[str]]  # a user's groups, by name


@dataclass(frozen=True)
class Kept:
    """Units a start may not take now (`now`), and those it should avoid if it can (`ahead`):
    a window that does not serve its user opens on them before the server would end.
    `theirs`: units booked for its user in a window open now, which it takes first."""

    now: frozenset[str] = frozenset()
    ahead: frozenset[str] = frozenset()
    theirs: frozenset[str] = frozenset()  # booked for its user, open now: taken first


class Calendar:
    def __init__(
        self,
        site: GPUSite,
        clock: Callable[[], float],
        record: CalendarRecord | None = None,
        groups_of: GroupsOf = lambda user: frozenset(),
    ) -> None:
        self.site, self.clock, self.record, self.groups_of = site, clock, record, groups_of
        self._windows: list[Window] = record.since(clock()) if record is not None else []
        self._next_id = 1 + max((w.id for w in self._windows), default=0)

    def windows(self) -> list[Window]:
        """The windows open now or ahead, by start (those ended are history: the record's)."""
        now = self.clock()
        self._windows = [w for w in self._windows if w.end > now]
        return list(self._windows)

    # --- what placement and the culler ask -------------------------------------------------
    def kept_from(self, user: str, lasts: float | None) -> Kept:
        """For a start of `user`'s that may run `lasts` seconds (None: without end)."""
        windows = self.windows()
        if not windows:
            return Kept()
        now, groups = self.clock(), self.groups_of(user)
        until = math.inf if lasts is None else now + lasts
        booked = [w.gpus for w in windows if w.open_at(now) and w.serves(user, groups)]
        return Kept(
            self._units_on(closed_to(windows, user, groups, now)),
            self._units_on(ahead_of(windows, user, groups, now, until)),
            self._units_on(frozenset().union(*booked)),
        )

    def stop_for(self, grant: Grant) -> Window | None:
        """The window a running server stops for, open now or ahead (None: none)."""
        windows = self.windows()
        if not windows or not grant.uuids:
            return None
        user, gpus = grant.holder.user, {u.gpu for u in grant.units}
        return window_stops(windows, gpus, user, self.groups_of(user), grant.since, self.clock())

    def drained(self) -> dict[str, Window]:
        """GPU → the drain that holds it out now."""
        return drained_now(self.windows(), self.clock())

    def states(self, pool: PoolView) -> dict[str, DeviceState]:
        """Each unit's state as the form shows it (the GPUs page, the API and the metrics
        add `with_parked`): the pool's, with free units on drained GPUs drained, as
        placement has them."""
        return with_drains(pool.states(), pool.units, self.drained())

    def said_to(self, user: str, lasts: float | None) -> list[str]:
        """The lines on the calendar for `user`, whose server may run `lasts` seconds (None:
        a week is told; 0: the windows open now, for a start waiting in line)."""
        now = self.clock()
        until = now + (WEEK if lasts is None else max(lasts, 1.0))
        gpus = [g.uuid for g in self.site.gpus]
        return said_to(self.windows(), user, self.groups_of(user), now, until, gpus)

    def _units_on(self, gpus: Collection[str]) -> frozenset[str]:
        return frozenset(u.id for u in self.site.units if u.gpu in gpus)

    # --- what admins and users ask ---------------------------------------------------------
    def book(
        self,
        candidates: Sequence[str],
        count: int,
        start: float,
        end: float,
        *,
        user: str = "",
        group: str = "",
        longest: float | None = None,
        let_finish: bool = False,
        note: str = "",
        by: str = "",
        asked: str = "",
    ) -> Window:
        """Book `count` of `candidates` (GPU UUIDs, placement's order) for the window;
        InvalidWindow with the reason if it cannot be. `longest`: a member's booking for
        themselves, bound by their `max_booking` alone and with the others they made (those
        an admin made for them are an admin's to give, and do not count toward it)."""
        if bool(user) == bool(group):
            raise InvalidWindow("A booking is for one user or one group")
        now, windows = self.clock(), self.windows()
        check_window(start, end, now, longest)
        if longest is not None:
            own = [w for w in windows if w.user == user and w.by == user]  # not an admin's
            check_own_bookings(own, start, end, now, longest)
        gpus = choose_gpus(windows, candidates, count, start, end)
        return self._add(
            Window(0, frozenset(gpus), start, end, user, group, note, let_finish, by, asked)
        )

    def drain(
        self, gpus: Collection[str], start: float, reason: str, by: str, asked: str
    ) -> Window:
        """Take `gpus` out from `start` until `end` is asked."""
        if not gpus:
            raise InvalidWindow(f"No GPU is {asked}")
        check_window(start, math.inf, self.clock())
        return self._add(Window(0, frozenset(gpus), start, reason=reason, by=by, asked=asked))

    def end(self, window_id: int) -> Window:
        """End a window now (undrain; a booking given back), or cancel one not yet open;
        KeyError if there is none open or ahead."""
        window = next((w for w in self.windows() if w.id == window_id), None)
        if window is None:
            raise KeyError(window_id)
        now = self.clock()
        self._windows.remove(window)
        if window.start > now:
            if self.record is not None:
                self.record.remove(window.id)
            return window.cancelled()
        if self.record is not None:
            self.record.end(window.id, now)
        return replace(window, end=now)

    def _add(self, window: Window) -> Window:
        if self.record is not None:
            window = self.record.add(window)
        else:
            window = replace(window, id=self._next_id)
            self._next_id += 1
        self._windows.append(window)
        self._windows.sort(key=lambda w: (w.start, w.id))
        return window


def allocate_around(
    pool: Pool,
    kept: Kept,
    holder: Holder,
    request: Request | int,
    admit: Admission | None,
    borrows: bool,
    keep: frozenset[str],
) -> Grant:
    """`pool.allocate` as the calendar has it: never the units `kept.now`; a booking's
    holder takes its units first; others, units no window opens on soon (`kept.ahead`)
    where any will do, and not in turns (a GPU free elsewhere beats sharing one)."""
    keep = keep | kept.now
    tries = [keep | kept.ahead] if kept.ahead else []
    if kept.theirs:
        tries.insert(0, keep | (frozenset(pool.ids) - kept.theirs))
    alone = replace(request, turns=False) if isinstance(request, Request) else request
    for narrower in tries:
        with contextlib.suppress(NotEnoughGPUs):
            return pool.allocate(holder, alone, admit, borrows, narrower)
    return pool.allocate(holder, request, admit, borrows, keep)
