"""The machine's calendar: GPUs booked ahead for a user or a group, and GPUs drained for
maintenance.

As in Slurm's reservations, a booking's GPUs are chosen when it is made, from those no
other booking or drain holds at any instant of its window: so never more GPUs are booked
than exist, and a GPU is never promised twice. Inside its window a booked GPU serves only
its holders; outside it, it is an ordinary GPU of the pool. A drain holds its GPUs from its
start until it is ended (`undrain`) and serves nobody: it is how an admin takes GPUs, a
model, a node or the whole machine out for a driver update.

Pure: the hub asks which GPUs a start may not use now (`closed_to`), which it had better
avoid (`ahead_of`), and when a running server must stop (`stops_at`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from .pool_view import DeviceState
from .units import Unit
from .words import at_clock, count_gpus, duration

PAST_SLACK = 60.0  # seconds: "now" typed a moment ago is not a window in the past
YEAR = 366 * 24 * 3600.0  # the furthest ahead a window starts, and the longest a booking
MOST_OWN_BOOKINGS = 20  # a member's bookings not ended, at once (admins' are not counted)
NONE_LEFT = "no other GPU is left for new starts while it lasts."  # a drain of every GPU


class InvalidWindow(ValueError):
    """A booking or drain that cannot be made, with the reason in words."""


@dataclass(frozen=True)
class Window:
    """A booking (it has a holder: a user or a group) or a drain (it has none)."""

    id: int
    gpus: frozenset[str]  # GPU UUIDs
    start: float
    end: float = math.inf  # a drain's is inf until it is ended
    user: str = ""  # a booking's holder: a user ...
    group: str = ""  # ... or a group's members
    reason: str = ""  # a drain's reason; a booking's note
    let_finish: bool = False  # servers running at its start run on (their next start waits)
    by: str = ""  # who made it
    asked: str = ""  # what was asked, in words: "2 GPUs of gpu-1", "node n2"

    @property
    def drain(self) -> bool:
        return not (self.user or self.group)

    @property
    def holder(self) -> str:
        return self.user or (f"group {self.group}" if self.group else "")

    def serves(self, user: str, groups: Collection[str]) -> bool:
        """Whether the user's servers may use its GPUs while it is open."""
        return bool((self.user and self.user == user) or (self.group and self.group in groups))

    def open_at(self, moment: float) -> bool:
        return self.start <= moment < self.end

    def overlaps(self, start: float, end: float) -> bool:
        return self.start < end and start < self.end

    def state(self, now: float) -> str:
        """ "open" or "ahead"; for a window just ended, "ended", and "cancelled" for one
        given back before it opened (`cancelled`): what the command that ended it echoes."""
        if self.start > now:
            return "cancelled" if self.end <= self.start else "ahead"
        return "ended" if self.end <= now else "open"

    def cancelled(self) -> Window:
        """This window given back before it opened: it never covers a moment."""
        return replace(self, end=self.start)

    def title(self) -> str:
        """What it makes of its GPUs, for a sentence that people other than its holders read
        ("its GPU is …"): "booked for group ml", "booked for another user" (who holds GPUs
        is for admins to see), "taken out for maintenance (driver update)"."""
        if self.drain:
            return "taken out for maintenance" + (f" ({self.reason})" if self.reason else "")
        return f"booked for group {self.group}" if self.group else "booked for another user"


def stop_reason(window: Window, now: float) -> str:
    """Why a server on its GPUs was stopped, for the notice its user reads."""
    return f"its GPUs are {window.title()} from {at_clock(window.start, now)} (the calendar)"


def check_window(start: float, end: float, now: float, longest: float | None = None) -> None:
    """InvalidWindow unless [start, end) is a window that can still be booked: it ends after
    it starts, does not start in the past, and is no longer than `longest` (seconds)."""
    if not (math.isfinite(start) and (math.isfinite(end) or end == math.inf)):
        raise InvalidWindow("A window needs a start and an end")
    if end <= start:
        raise InvalidWindow("The window ends before it starts")
    if start < now - PAST_SLACK:
        raise InvalidWindow("The window starts in the past")
    if start > now + YEAR or (math.isfinite(end) and end - start > YEAR):
        raise InvalidWindow("A window starts within a year and lasts at most a year")
    if longest is not None and end - start > longest:
        raise InvalidWindow(
            f"The window is {duration(end - start)} long; your group allows "
            f"{duration(longest)} (max_booking)"
        )


def check_own_bookings(
    own: Iterable[Window], start: float, end: float, now: float, longest: float
) -> None:
    """InvalidWindow unless a member may add [start, end) to `own` (the bookings they made
    for themselves): together, from now on, they cover at most `longest` seconds
    (`max_booking`), and number at most MOST_OWN_BOOKINGS. `max_booking` bounds all a
    member holds booked, not each window: twenty back-to-back windows of the longest each
    held half a machine for 40 days. Time is counted once where their windows overlap
    (`max_gpus_per_user` bounds the GPUs then), and the part of an open window already
    past is not counted."""
    ahead = [w for w in own if w.end > now]
    if len(ahead) >= MOST_OWN_BOOKINGS:
        raise InvalidWindow(
            f"You hold {len(ahead)} bookings not yet ended, the most a member may hold at "
            "once: give one back before booking another"
        )
    held = _covered([(w.start, w.end) for w in ahead], now)
    would = _covered([(w.start, w.end) for w in ahead] + [(start, end)], now)
    if would > longest:
        left = longest - held
        more = f"book at most {duration(left)} more" if left >= 1 else "give one back first"
        raise InvalidWindow(
            f"Your bookings already cover {duration(held)} from now, and your group allows "
            f"{duration(longest)} booked at once (max_booking); this one would make it "
            f"{duration(would)}: {more}"
        )


def _covered(spans: Iterable[tuple[float, float]], now: float) -> float:
    """Seconds from `now` on that at least one of the spans [start, end) covers."""
    total, reached = 0.0, now
    for start, end in sorted(spans):
        if end > reached:
            total += end - max(start, reached)
            reached = end
    return total


def choose_gpus(
    windows: Iterable[Window], candidates: Sequence[str], count: int, start: float, end: float
) -> tuple[str, ...]:
    """`count` of `candidates` (in the order given: placement's preference) that no window
    holds at any instant of [start, end); InvalidWindow saying how many are left if fewer."""
    if count < 1:
        raise InvalidWindow("A booking needs at least 1 GPU")
    taken = {g for w in windows if w.overlaps(start, end) for g in w.gpus}
    free = [g for g in candidates if g not in taken]
    if len(free) < count:
        raise InvalidWindow(
            f"Only {len(free)} of the {len(candidates)} GPUs asked for are neither booked nor "
            f"drained for the whole window; {count} were asked"
        )
    return tuple(free[:count])


def closed_to(
    windows: Iterable[Window], user: str, groups: Collection[str], now: float
) -> dict[str, Window]:
    """GPU → the window that keeps this user's new servers off it now."""
    closed: dict[str, Window] = {}
    for window in sorted(windows, key=lambda w: w.start):
        if window.open_at(now) and not window.serves(user, groups):
            for gpu in window.gpus:
                closed.setdefault(gpu, window)
    return closed


def drained_now(windows: Iterable[Window], now: float) -> dict[str, Window]:
    """GPU → the drain that holds it out now (the first to have opened)."""
    drained: dict[str, Window] = {}
    for window in sorted(windows, key=lambda w: w.start):
        if window.drain and window.open_at(now):
            for gpu in window.gpus:
                drained.setdefault(gpu, window)
    return drained


def with_drains(
    states: Mapping[str, DeviceState], units: Iterable[Unit], drained: Collection[str]
) -> dict[str, DeviceState]:
    """Each unit's state as people are shown it: a free unit on a drained GPU reads drained,
    since placement gives it to nobody (the pool knows nothing of the calendar, and showed
    seven drained GPUs of eight as free); a held one reads held until its server stops."""
    shown = dict(states)
    for unit in units:
        if unit.gpu in drained and shown.get(unit.id) is DeviceState.FREE:
            shown[unit.id] = DeviceState.DRAINED
    return shown


def ahead_of(
    windows: Iterable[Window], user: str, groups: Collection[str], now: float, until: float
) -> dict[str, Window]:
    """GPU → the first window that starts after now and before `until` and does not serve
    this user: a server of theirs started on it now would stop then."""
    ahead: dict[str, Window] = {}
    for window in sorted(windows, key=lambda w: w.start):
        if now < window.start < until and not window.serves(user, groups):
            for gpu in window.gpus:
                ahead.setdefault(gpu, window)
    return ahead


def stops_at(
    windows: Iterable[Window],
    gpus: Collection[str],
    user: str,
    groups: Collection[str],
    since: float,
    now: float,
) -> Window | None:
    """The first window, open now or ahead, that a server on `gpus` running since `since`
    stops for: one that does not serve its user, unless it lets the servers running at its
    start finish; None when none will stop it."""
    for window in sorted(windows, key=lambda w: w.start):
        if window.end <= now or window.serves(user, groups) or not window.gpus & set(gpus):
            continue
        if not (window.let_finish and since < window.start):
            return window
    return None


def said_to(
    windows: Iterable[Window],
    user: str,
    groups: Collection[str],
    now: float,
    until: float,
    gpus: Collection[str],
) -> list[str]:
    """What the spawn form tells a user of the calendar: windows open now or opening before
    `until` on the machine's GPUs (`gpus`: all of them), those that serve them and those that
    keep them off; where no other GPU is left to them then (a drain of every GPU), it says
    so rather than that starts go to the others."""
    windows = sorted(windows, key=lambda w: w.start)
    lines = []
    for window in windows:
        if window.end <= now or window.start >= until:
            continue
        said = f"{count_gpus(len(window.gpus))} {_are(window)}"
        to = f" to {at_clock(window.end, now)}" if math.isfinite(window.end) else ""
        if window.serves(user, groups):
            lines.append(
                f"{said} booked for you{_while(window, now)}{to}: your start takes them first."
            )
            continue
        moment = max(now, window.start)
        left = set(gpus) - closed_to(windows, user, groups, moment).keys()
        if window.open_at(now):
            then = "starts go to the others." if left else NONE_LEFT
            lines.append(f"{said} {window.title()}{to}: {then}")
        else:
            then = "; starts go to other GPUs while any is free." if left else f", and {NONE_LEFT}"
            lines.append(
                f"{said} {window.title()} from {at_clock(window.start, now)}{to}: "
                f"a server on them then stops (files kept){then}"
            )
    return lines


def _are(window: Window) -> str:
    return "is" if len(window.gpus) == 1 else "are"


def _while(window: Window, now: float) -> str:
    return "" if window.open_at(now) else f" from {at_clock(window.start, now)}"
