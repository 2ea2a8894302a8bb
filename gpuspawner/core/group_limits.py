"""The admin's limits as written, checked: one `Limits` per group of `group_limits`, and
one for `default_limits`.

Parsed once, at hub start, so that a typo stops the hub with its place named rather than
refusing starts later. A group's value for a key it leaves out comes from
`default_limits`, and the group remembers which keys those are (`Limits.inherited`):
every message that names where a limit came from must name `default_limits` for them,
not the group (`limits.LimitsTable.for_user`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, fields
from fractions import Fraction
from typing import Any

from .errors import LimitsConfigError
from .nodes import parse_nodes
from .schema import known_keys_only
from .usage import WEEK

COUNT_KEYS = ("max_gpus_per_server", "max_gpus_per_user", "max_gpus_group")
DURATION_KEYS = (
    "gpu_idle_timeout",
    "idle_timeout",
    "cpu_idle_timeout",
    "max_age",
    "max_parked",
    "max_booking",
)
# The waiting line's keys. Unset (None) is 0 for both: no waiting, no precedence.
LINE_KEYS = ("max_wait", "priority")
HOURS_KEYS = ("gpu_hours_per_week", "gpu_hours_per_week_group")
FLAG_KEYS = ("stop_over_budget",)
# Jobs' rules (core.job_rules resolves them per user). Unset job flags are True.
JOB_COUNT_KEYS = ("max_jobs", "max_preemptions")
JOB_SECONDS_KEYS = ("max_runtime", "min_runtime", "preempt_grace")
JOB_FLAG_KEYS = ("jobs_give_way", "preempts_jobs")
GROUP_OWN_KEYS = ("max_gpus_group", "gpu_hours_per_week_group")  # never from default_limits
A_DECADE = 10 * 365 * 24 * 3600  # the longest time limit: past it, clocks overflow dates


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


LIMIT_KEYS = tuple(f.name for f in fields(Limits) if f.name != "inherited")


def check_retention(sources: Mapping[str, Limits], retention: float) -> None:
    budgeted = [
        f"{where}[{key!r}]"
        for where, limits in sources.items()
        for key in HOURS_KEYS
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
    raw = known_keys_only(raw, f"c.GPUSpawner.{where}", LIMIT_KEYS, LimitsConfigError)
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None:
            values[key] = (key in JOB_FLAG_KEYS) if key in FLAG_KEYS + JOB_FLAG_KEYS else None
        elif key in COUNT_KEYS:
            values[key] = _count(value, f"{where}[{key!r}]")
        elif key in DURATION_KEYS:
            values[key] = _seconds(value, f"{where}[{key!r}]")
        elif key == "max_wait":
            values[key] = _wait(value, f"{where}[{key!r}]")
        elif key == "priority":
            values[key] = _priority(value, f"{where}[{key!r}]")
        elif key == "max_waiting_per_user":
            values[key] = _places(value, f"{where}[{key!r}]")
        elif key in HOURS_KEYS:
            values[key] = _hours(value, f"{where}[{key!r}]")
        elif key in FLAG_KEYS + JOB_FLAG_KEYS:
            values[key] = _flag(value, f"{where}[{key!r}]")
        elif key in JOB_COUNT_KEYS:
            values[key] = _whole(value, f"{where}[{key!r}]")
        elif key in JOB_SECONDS_KEYS:
            values[key] = _wait(value, f"{where}[{key!r}]", zero="")
        elif key == "job_priority":
            values[key] = _priority(value, f"{where}[{key!r}]")
        elif key == "nodes":
            values[key] = parse_nodes(value, f"c.GPUSpawner.{where}[{key!r}]", LimitsConfigError)
        else:
            values[key] = _profiles(value, f"{where}[{key!r}]", profile_slugs)
    if default is not None:
        # A group's quota and group budget are its own; every other key falls back to the default.
        inherited = {
            k: getattr(default, k) for k in LIMIT_KEYS if k not in raw and k not in GROUP_OWN_KEYS
        }
        values = {**inherited, **values, "inherited": frozenset(inherited)}
    return Limits(**values)


def _count(value: Any, where: str) -> Fraction:
    """GPU-equivalents: a number ≥ 0 (0.5 is two slots of a GPU shared by 4)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not 0 <= value < math.inf:
        raise LimitsConfigError(
            f"c.GPUSpawner.{where} must be a number of GPU-equivalents ≥ 0 (such as 1, 2 "
            f"or 0.5) or None, got {value!r}"
        )
    return Fraction(str(value)) if isinstance(value, float) else Fraction(value)


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= A_DECADE:
        raise LimitsConfigError(
            f"c.GPUSpawner.{where} must be a number of seconds > 0 (at most ten years) or None "
            f"for no limit, got {value!r}"
        )
    return float(value)


def _wait(value: Any, where: str, zero: str = "0: no waiting; ") -> float:
    """Seconds ≥ 0; `zero` says what 0 means for this key."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= A_DECADE:
        raise LimitsConfigError(
            f"c.GPUSpawner.{where} must be a number of seconds ≥ 0 ({zero}at most ten "
            f"years), got {value!r}"
        )
    return float(value)


def _hours(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise LimitsConfigError(
            f"c.GPUSpawner.{where} must be a number of GPU-hours ≥ 0 (such as 40 or 12.5) "
            f"or None, got {value!r}"
        )
    return float(value)


def _priority(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LimitsConfigError(
            f"c.GPUSpawner.{where} must be a whole number (higher goes first), got {value!r}"
        )
    return value


def _places(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LimitsConfigError(
            f"c.GPUSpawner.{where} must be a whole number of servers ≥ 1 that one user may "
            f"have waiting in line at once (max_wait 0 is how to let none wait), or None for "
            f"1 per GPU they may still take, got {value!r}"
        )
    return value


def _whole(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LimitsConfigError(
            f"c.GPUSpawner.{where} must be a whole number ≥ 0 or None, got {value!r}"
        )
    return value


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise LimitsConfigError(f"c.GPUSpawner.{where} must be True or False, got {value!r}")
    return value


def _profiles(value: Any, where: str, known: Collection[str]) -> frozenset[str]:
    if (
        isinstance(value, str)
        or not isinstance(value, Iterable)
        or not all(isinstance(slug, str) for slug in value)
    ):
        raise LimitsConfigError(f"c.GPUSpawner.{where} must be a list of profile slugs")
    slugs = frozenset(value)
    unknown = slugs - set(known)
    if unknown:
        raise LimitsConfigError(
            f"c.GPUSpawner.{where}: no profile with slug {', '.join(sorted(map(str, unknown)))}; "
            f"profiles are: {', '.join(sorted(known))}"
        )
    return slugs
