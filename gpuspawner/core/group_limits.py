"""The admin's limits as written, checked: one `Limits` per group of `group_limits`, and
one for `default_limits`.

Parsed once, at hub start, so that a typo stops the hub with its place named rather than
refusing starts later. A group's value for a key it leaves out comes from
`default_limits`, and the group remembers which keys those are (`Limits.inherited`):
every message that names where a limit came from must name `default_limits` for them,
not the group (`limits.LimitsTable.for_user`). Every key is a row of `limit_keys.KEYS`:
how it is read, its unit, its merge and whether it inherits are said there.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields
from fractions import Fraction
from typing import Any

from .errors import LimitsConfigError
from .limit_keys import GPU_HOURS, KEYS, LIMIT_KEYS, parse
from .schema import known_keys_only
from .usage import WEEK


@dataclass(frozen=True)
class Limits:
    """One group's limits. None means unlimited (for durations: never)."""

    max_gpus_per_server: Fraction | None = None
    max_gpus_per_user: Fraction | None = None
    max_gpus_group: Fraction | None = None
    profiles: frozenset[str] | None = None
    gpu_idle_timeout: float | None = None
    idle_timeout: float | None = None
    cpu_idle_timeout: float | None = None
    max_age: float | None = None
    max_parked: float | None = None  # seconds a parked server stays parked; then it is stopped
    max_booking: float | None = None  # the longest window a member books for themselves
    max_wait: float | None = None  # seconds a start may wait in line for GPUs; 0: refuse at once
    priority: int | None = None  # higher goes first in the waiting line
    gpu_hours_per_week: float | None = None
    gpu_hours_per_week_group: float | None = None
    stop_over_budget: bool = False
    nodes: frozenset[str] | None = None  # the machines its members' servers may run on
    max_waiting_per_user: int | None = None  # places in the line; None: 1 per GPU left to take
    max_jobs: int | None = None  # jobs a member may have waiting or running; 0: none
    max_runtime: float | None = None  # seconds a job may run; then it is stopped
    min_runtime: float | None = None  # seconds a job runs before it may be made to give way
    preempt_grace: float | None = None  # seconds between a job's SIGTERM and its SIGKILL
    job_priority: int | None = None  # higher goes first among waiting jobs
    jobs_give_way: bool = True  # its members' jobs give way to people's starts
    preempts_jobs: bool = True  # its members' starts may make jobs give way
    max_preemptions: int | None = None  # times a job gives way before it is left to run
    # The keys this group leaves to default_limits: a message names default_limits for them.
    inherited: frozenset[str] = frozenset()


if tuple(f.name for f in fields(Limits) if f.name != "inherited") != LIMIT_KEYS:
    raise ImportError("limit_keys.KEYS and the fields of Limits must name the same keys")


def check_retention(sources: Mapping[str, Limits], retention: float) -> None:
    budgeted = [
        f"{where}[{key!r}]"
        for where, limits in sources.items()
        for key in (k.name for k in KEYS if k.unit == GPU_HOURS)
        if getattr(limits, key) is not None
    ]
    if budgeted and retention < WEEK:
        raise LimitsConfigError(
            f"c.GPUSpawner.{budgeted[0]} counts GPU-hours over the last 7 days, but the usage "
            f"ledger keeps grants only {retention / 86400:g} days "
            "(c.GPUSpawner.usage_retention_days): set it to 7 or more"
        )


def parse_limits(
    raw: Any, where: str, default: Limits | None, profile_slugs: Collection[str]
) -> Limits:
    """One group's limits (`where`: "group_limits['ml']"), or default_limits' (`default`
    None), each key read as its row of `limit_keys.KEYS` says."""
    raw = known_keys_only(raw, f"c.GPUSpawner.{where}", LIMIT_KEYS, LimitsConfigError)
    values = {key: parse(key, value, where, profile_slugs) for key, value in raw.items()}
    if default is not None:
        # A group's quota and group budget are its own; every other key falls back to the default.
        inherited = {
            k.name: getattr(default, k.name) for k in KEYS if k.name not in raw and k.inherits
        }
        values = {**inherited, **values, "inherited": frozenset(inherited)}
    return Limits(**values)
