"""GPU use over time: what each grant held, for how long, and how busy — as records.

A `UsageRecord` is one grant: who held how many GPU-equivalents from when to
when (None while it runs), charged to which group, and how many of its held
seconds the GPUs were busy. From records come the figures the queue, budgets
and reports need:

Parked time (a grant's work in host memory while its GPUs run a job) is held but not
charged: recent use and budgets count resident GPU-time, reports show what was held.

- recent use with a half-life (`decayed_gpu_hours`), as Slurm's fair-share
  factor decays past usage (`PriorityDecayHalfLife`, 7 days by default): a
  GPU-hour used a half-life ago counts half;
- GPU-hours in a rolling window (`gpu_hours_between`), for budgets;
- held and busy hours per user or group in a window (`totals`, `report`), for reports.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .words import NO_GROUP

HOUR = 3600.0
WEEK = 7 * 24 * HOUR  # the window of GPU-hour budgets and of the admin page's report
DEFAULT_HALF_LIFE = WEEK


@dataclass(frozen=True)
class UsageRecord:
    user_id: int
    user: str
    server: str
    group: str | None  # the quota group charged, if any
    gpus: float  # GPU-equivalents held
    start: float
    end: float | None = None  # None: still held
    busy_seconds: float = 0.0  # of the held time, seconds the GPUs were busy
    parked_seconds: float = 0.0  # of the held time, seconds its work was parked (docs/parking.md)

    def held_seconds(self, now: float) -> float:
        return max(0.0, (self.end if self.end is not None else now) - self.start)

    def resident_gpus(self, now: float) -> float:
        """The GPU-equivalents it is charged for: what it held, times the share of the held
        time its work was on them, not parked (while parked, its GPUs may run a job, which
        is charged for them). The ledger keeps one parked figure per grant, so that share
        is spread evenly over its time."""
        held = self.held_seconds(now)
        if not held or not self.parked_seconds:
            return self.gpus
        return self.gpus * max(0.0, 1.0 - self.parked_seconds / held)


def decayed_gpu_hours(
    records: Iterable[UsageRecord], now: float, half_life: float = DEFAULT_HALF_LIFE
) -> dict[int, float]:
    """Each user's GPU-hours, each moment of use weighted by 2^-(age / half_life)."""
    rate = math.log(2) / half_life
    used: dict[int, float] = {}
    for record in records:
        end = min(record.end if record.end is not None else now, now)
        if end <= record.start:
            continue
        # ∫ gpus · e^(-rate·(now - t)) dt over [start, end], in hours
        weight = (math.exp(-rate * (now - end)) - math.exp(-rate * (now - record.start))) / rate
        used[record.user_id] = used.get(record.user_id, 0.0) + (
            record.resident_gpus(now) * weight / HOUR
        )
    return used


def gpu_hours_between(records: Iterable[UsageRecord], since: float, now: float) -> float:
    """GPU-hours the records held between `since` and `now`, their parked time left out."""
    total = 0.0
    for record in records:
        start = max(record.start, since)
        end = min(record.end if record.end is not None else now, now)
        if end > start:
            total += record.resident_gpus(now) * (end - start) / HOUR
    return total


@dataclass(frozen=True)
class Totals:
    held_gpu_hours: float = 0.0
    busy_gpu_hours: float = 0.0

    @property
    def busy_share(self) -> float | None:
        """Busy over held; None when nothing was held."""
        return self.busy_gpu_hours / self.held_gpu_hours if self.held_gpu_hours else None

    def __add__(self, other: Totals) -> Totals:
        return Totals(
            self.held_gpu_hours + other.held_gpu_hours, self.busy_gpu_hours + other.busy_gpu_hours
        )


def totals(
    records: Iterable[UsageRecord],
    now: float,
    by: Callable[[UsageRecord], str],
    since: float | None = None,
) -> dict[str, Totals]:
    """Held and busy GPU-hours per key (`by`: a record's user, or its group), of the time
    from `since` (None: each record's start) to `now`.

    The ledger keeps one busy figure per grant, not a busy moment by moment, so a grant
    only partly in the window counts the same share of its busy time.
    """
    found: dict[str, Totals] = {}
    for record in records:
        whole = record.held_seconds(now)
        start = record.start if since is None else max(record.start, since)
        end = min(record.end if record.end is not None else now, now)
        inside = max(0.0, end - start)
        if not inside:
            continue
        busy = min(record.busy_seconds, whole) * inside / whole
        key = by(record)
        found[key] = found.get(key, Totals()) + Totals(
            record.gpus * inside / HOUR, record.gpus * busy / HOUR
        )
    return found


REPORT_BY = ("user", "group")


def report(
    records: Sequence[UsageRecord], since: float, now: float, by: str
) -> list[tuple[str, Totals]]:
    """What `gpuspawner usage` and the admin page show: held and busy GPU-hours from `since`
    to `now` per user (by id, under the name of their latest grant: a renamed user is one
    row) or per quota group charged (NO_GROUP for none), most held first."""
    if by not in REPORT_BY:
        raise ValueError(f"a usage report is by {' or '.join(REPORT_BY)}, not {by!r}")
    if by == "user":
        names = {r.user_id: r.user for r in sorted(records, key=lambda r: r.start)}
        per_id = totals(records, now, lambda r: str(r.user_id), since)
        rows = [(names[int(key)], found) for key, found in per_id.items()]
    else:
        rows = list(totals(records, now, lambda r: r.group or NO_GROUP, since).items())
    return sorted(rows, key=lambda row: (-row[1].held_gpu_hours, row[0]))


REPORT_COLUMNS = ("held_gpu_hours", "busy_gpu_hours", "busy_ratio")


def report_rows(
    records: Sequence[UsageRecord], since: float, now: float, by: str
) -> list[dict[str, str | float | None]]:
    """`report` as rows of named columns, for CSV, JSON and the admin page alike: `by`'s name
    ("user" or "group"), then REPORT_COLUMNS (busy_ratio None where nothing was held)."""
    return [
        {
            by: name,
            "held_gpu_hours": round(found.held_gpu_hours, 6),
            "busy_gpu_hours": round(found.busy_gpu_hours, 6),
            "busy_ratio": None if found.busy_share is None else round(found.busy_share, 4),
        }
        for name, found in report(records, since, now, by)
    ]
