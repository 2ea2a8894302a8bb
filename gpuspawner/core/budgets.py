"""GPU-hour budgets: what a user or group used in the last week, whether a GPU server may
start, and from when it may again.

Standard library only: the hub hands over the usage ledger's records and the groups'
members. The rules (README, "Budgets"):

- **Used** is the GPU-hours held in the last 7 days (`WEEK`, rolling): every grant in the
  ledger, a running one up to now, at the GPU-equivalents it holds, busy or idle alike
  (a held GPU is one nobody else could use).
- **A start is refused when the budget is already used up** (used ≥ budget). How long a
  server will run is unknown when it starts, so refusing a start that *might* exceed would
  mean guessing a length; with this rule anyone with budget left may start, and the
  overrun is bounded by how long that one server runs (or stopped at once, where the
  admin sets `stop_over_budget`). A budget of 0 means no GPU server.
- A **user's budget** (`gpu_hours_per_week`) counts all their grants. A **group's budget**
  (`gpu_hours_per_week_group`) counts the grants of everyone who is a member now,
  whichever quota group a grant was charged to: a grant has no quota group when one of its
  user's groups sets no `max_gpus_group`, and a group budget must not depend on quotas. A
  user in several budgeted groups may start while any of them has room, as with quotas.
- **Enough frees up** at the first moment the budget is no longer used up, as older use
  leaves the window while what runs now goes on (`frees_at`). Where what runs keeps it
  used up by itself, it frees up only after that stops: the refusal says when it would.
- CPU-only starts are never refused by a budget (the hub does not ask).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .limits import Budgets, LimitExceeded
from .usage import HOUR, WEEK, UsageRecord, gpu_hours_between
from .words import at_clock, from_group, gpu_hours, members

IN_THE_WINDOW = "in the last 7 days"
PER_USER, PER_GROUP = "gpu_hours_per_week", "gpu_hours_per_week_group"
CPU_STAYS_OPEN = "CPU-only profiles stay open."


class BudgetExceeded(LimitExceeded):
    """A GPU start refused because a GPU-hour budget is used up."""


def used(records: Sequence[UsageRecord], now: float) -> float:
    """GPU-hours the records held in the week up to `now`."""
    return gpu_hours_between(records, now - WEEK, now)


def frees_at(records: Sequence[UsageRecord], now: float, budget: float) -> float | None:
    """The first moment ≥ `now` at which `records` used less than `budget` in the week before
    it, if the running ones run on and nothing else starts; None if never.

    Between two moments where a record's start or end leaves the window, use changes at a
    constant rate (GPUs of running records not yet a week old, less GPUs of records the
    window's tail is cutting into): one sweep over those moments finds the crossing.
    """
    left = used(records, now)
    if left < budget:
        return now
    slope = 0.0  # GPUs: how fast use in the window grows now (per hour of time, in GPU-hours)
    changes: list[tuple[float, float]] = []
    for record in records:
        tail_in = record.start + WEEK  # from then on, the window's tail cuts into it
        if record.end is None:
            if tail_in > now:
                slope += record.gpus
                changes.append((tail_in, -record.gpus))
            continue
        tail_out = record.end + WEEK  # from then on, it is out of the window
        if tail_out <= now:
            continue
        if tail_in <= now:
            slope -= record.gpus
        else:
            changes.append((tail_in, -record.gpus))
        changes.append((tail_out, record.gpus))
    at = now
    for when, change in sorted(changes):
        then = left + slope * (when - at) / HOUR
        if then < budget:
            return at + (left - budget) * HOUR / -slope
        at, left, slope = when, then, slope + change
    return None


@dataclass(frozen=True)
class Spent:
    """One budget in the week up to now: how much of it is used, and when it frees up."""

    key: str  # PER_USER or PER_GROUP
    group: str | None  # where the budget comes from (a group, or default_limits)
    used: float  # GPU-hours
    budget: float  # GPU-hours
    frees_at: float | None  # when it is no longer used up, if what runs goes on running
    frees_once_stopped: float | None  # the same, were what runs stopped now

    @property
    def used_up(self) -> bool:
        return self.used >= self.budget

    @property
    def source(self) -> str:
        return f"{self.key}{from_group(self.group)}"

    def words(self) -> str:
        """What the form says: "You used 12.5 of your 40 GPU-hours in the last 7 days
        (gpu_hours_per_week of group students)."."""
        phrase = self.phrase()
        return f"{phrase[0].upper()}{phrase[1:]}."

    def phrase(self) -> str:
        used = gpu_hours(self.used, against=self.budget)
        if self.key == PER_USER:
            who = f"you used {used} of your"
        else:
            who = f"{members(self.group or '').lower()} used {used} of their"
        return f"{who} {self.budget:g} GPU-hours {IN_THE_WINDOW} ({self.source})"


@dataclass(frozen=True)
class Standing:
    """Every budget that applies to one user, now."""

    user: Spent | None = None
    groups: tuple[Spent, ...] = ()

    def words(self) -> list[str]:
        return [spent.words() for spent in (self.user, *self.groups) if spent is not None]

    def blocking(self) -> list[Spent]:
        """The budgets that keep a GPU start from going ahead now (none: it may)."""
        found = [self.user] if self.user is not None and self.user.used_up else []
        if self.groups and all(g.used_up for g in self.groups):
            found.append(min(self.groups, key=lambda g: _later(g.frees_at)))
        return found

    def stop_reason(self) -> str | None:
        """Why a running GPU server stops, where the admin set `stop_over_budget`; None if its
        user is not over budget (a start would not be refused)."""
        blocking = self.blocking()
        if not blocking:
            return None
        return (
            f"{' and '.join(spent.phrase() for spent in blocking)}, and GPU servers over "
            "budget stop (stop_over_budget)"
        )

    def refusal(self, now: float) -> BudgetExceeded | None:
        """Why a GPU start is refused at `now`, in words a user can act on; None if it is not."""
        blocking = self.blocking()
        if not blocking:
            return None
        first = blocking[0]
        if first.budget == 0:
            text = (
                f"Your GPU-hour budget is 0 ({first.source}): GPU profiles are not available "
                f"to you. {CPU_STAYS_OPEN}"
            )
            return BudgetExceeded(text, first.key, first.group)
        text = " ".join(spent.words() for spent in blocking)
        until = _latest(spent.frees_at for spent in blocking)
        if until is not None:
            again = at_clock(_minute_up(until), now)
            text += (
                f" GPU profiles can start again from {again}, as older use leaves the 7-day window."
            )
        else:
            once_stopped = _latest(spent.frees_once_stopped for spent in blocking)
            endless = [spent for spent in blocking if spent.frees_at is None]
            running = "your" if all(spent.key == PER_USER for spent in endless) else "the group's"
            text += f" While {running} GPU servers run, it stays used up"
            if once_stopped is not None:
                text += (
                    f"; once they stop, GPU profiles can start again from "
                    f"{at_clock(_minute_up(once_stopped), now)}"
                )
            text += "."
        return BudgetExceeded(f"{text} {CPU_STAYS_OPEN}", first.key, first.group)


def standing(
    budgets: Budgets,
    user_id: int,
    group_members: Mapping[str, Collection[int]],
    records: Sequence[UsageRecord],
    now: float,
) -> Standing:
    """Each of the user's budgets (`budgets`, from their limits) against the ledger's
    `records` of the last week; `group_members`: user ids of each budgeted group now."""
    user = None
    if budgets.per_user.value is not None:
        mine = [r for r in records if r.user_id == user_id]
        user = _spent(PER_USER, budgets.per_user.group, budgets.per_user.value, mine, now)
    groups = []
    for group, budget in budgets.groups.items():
        ids = {*group_members.get(group, ()), user_id}
        theirs = [r for r in records if r.user_id in ids]
        groups.append(_spent(PER_GROUP, group, budget, theirs, now))
    return Standing(user, tuple(groups))


def _spent(
    key: str, group: str | None, budget: float, records: Sequence[UsageRecord], now: float
) -> Spent:
    stopped = [r if r.end is not None else dataclasses.replace(r, end=now) for r in records]
    return Spent(
        key,
        group,
        used(records, now),
        budget,
        frees_at(records, now, budget),
        frees_at(stopped, now, budget),
    )


def _later(moment: float | None) -> float:
    return float("inf") if moment is None else moment


def _latest(moments: Iterable[float | None]) -> float | None:
    """The last of some moments; None (never) if any is never."""
    found = list(moments)
    known = [m for m in found if m is not None]
    return max(known) if len(known) == len(found) else None


def _minute_up(seconds: float) -> float:
    """The next whole minute: a moment shown to the minute must not come too early."""
    return -(-seconds // 60) * 60
