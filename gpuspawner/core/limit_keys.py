"""Every key of `group_limits` and `default_limits`, in one table.

For each key: how its value is read (`parse`), its unit, how a user in several groups
gets one value (`merge`), whether a group that leaves it out takes `default_limits'`
value (`inherits`), what it is about (`concern`) and one line for admins (`doc`).

Made from this table: the parser (`group_limits.parse_limits`), both merges
(`limits.LimitsTable.for_user`, `job_rules.job_rules`, each through `limits.merged`),
the limits table of docs/configuration.md (`markdown_table`, written there at every
docs build) and the reference's help of `c.GPUSpawner.group_limits` (`help_lines`).
A new key is a row here and a field of `group_limits.Limits` (a test holds them equal).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from typing import Any

from .errors import LimitsConfigError
from .nodes import parse_nodes

A_DECADE = 10 * 365 * 24 * 3600  # the longest time limit: past it, clocks overflow dates
DEFAULT_PREEMPT_GRACE = 120.0  # seconds from SIGTERM to SIGKILL when a job gives way
DEFAULT_MAX_PREEMPTIONS = 3  # a job that gave way this often is left to run


class Concern(Enum):
    GPUS = "GPUs"
    MACHINES = "machines"
    CULLING = "culling"
    CALENDAR = "calendar"
    LINE = "the line"
    BUDGETS = "budgets"
    JOBS = "jobs"


class Merge(Enum):
    """How a user in several listed groups gets one value of a key (`limits.merged`)."""

    MOST = "the most generous (a group that leaves it unset wins)"
    HIGHEST = "the highest, unset counting as {unset}"
    HIGHEST_SET = "the highest of those set; none set: {unset}"
    LEAST_SET = "the lowest of those set; none set: {unset}"
    UNION = "all their groups' together; unset in one: any"
    ALL = "only if every group says so"
    ANY = "if any group says so"
    OWN = "each group's own, for its members together"


Parser = Callable[[Any, str, Collection[str]], Any]  # value, where, profile slugs → value


@dataclass(frozen=True)
class Key:
    name: str
    parse: Parser  # LimitsConfigError naming `where` (e.g. "group_limits['ml']['max_age']")
    unit: str
    merge: Merge
    concern: Concern
    doc: str  # one line, for admins
    inherits: bool = True  # a group that leaves it out takes default_limits' value
    unset: Any = None  # what unset means: a flag's value, or what a merge counts it as
    sourced: bool = True  # a message names where it was written (else: the group itself)

    @property
    def merge_words(self) -> str:
        return self.merge.value.format(unset=_shown(self.unset))


def _shown(value: Any) -> str:
    return f"`{value}`" if isinstance(value, bool) else f"{value:g}" if value is not None else ""


# --- how each unit is read -------------------------------------------------------------------
def _count(value: Any, where: str, profiles: Collection[str]) -> Fraction:
    """GPU-equivalents: a number ≥ 0 (0.5 is two slots of a GPU shared by 4)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not 0 <= value < math.inf:
        raise LimitsConfigError(
            f"c.GPUSpawner.{where} must be a number of GPU-equivalents ≥ 0 (such as 1, 2 "
            f"or 0.5) or None, got {value!r}"
        )
    return Fraction(str(value)) if isinstance(value, float) else Fraction(value)


def _seconds(value: Any, where: str, profiles: Collection[str]) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= A_DECADE:
        raise LimitsConfigError(
            f"c.GPUSpawner.{where} must be a number of seconds > 0 (at most ten years) or None "
            f"for no limit, got {value!r}"
        )
    return float(value)


def _seconds_or_zero(zero: str) -> Parser:
    """Seconds ≥ 0; `zero` says what 0 means for the key."""

    def read(value: Any, where: str, profiles: Collection[str]) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not 0 <= value <= A_DECADE
        ):
            raise LimitsConfigError(
                f"c.GPUSpawner.{where} must be a number of seconds ≥ 0 ({zero}at most ten "
                f"years), got {value!r}"
            )
        return float(value)

    return read


def _hours(value: Any, where: str, profiles: Collection[str]) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise LimitsConfigError(
            f"c.GPUSpawner.{where} must be a number of GPU-hours ≥ 0 (such as 40 or 12.5) "
            f"or None, got {value!r}"
        )
    return float(value)


def _priority(value: Any, where: str, profiles: Collection[str]) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LimitsConfigError(
            f"c.GPUSpawner.{where} must be a whole number (higher goes first), got {value!r}"
        )
    return value


def _places(value: Any, where: str, profiles: Collection[str]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LimitsConfigError(
            f"c.GPUSpawner.{where} must be a whole number of servers ≥ 1 that one user may "
            f"have waiting in line at once (max_wait 0 is how to let none wait), or None for "
            f"1 per GPU they may still take, got {value!r}"
        )
    return value


def _whole(value: Any, where: str, profiles: Collection[str]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LimitsConfigError(
            f"c.GPUSpawner.{where} must be a whole number ≥ 0 or None, got {value!r}"
        )
    return value


def _flag(value: Any, where: str, profiles: Collection[str]) -> bool:
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


def _nodes(value: Any, where: str, profiles: Collection[str]) -> frozenset[str]:
    return parse_nodes(value, f"c.GPUSpawner.{where}", LimitsConfigError)


GPU_EQUIVALENTS, SECONDS, GPU_HOURS = "GPU-equivalents", "seconds", "GPU-hours"
FLAG, WHOLE = "True or False", "a whole number"
C, M = Concern, Merge

KEYS: tuple[Key, ...] = (
    Key("max_gpus_per_server", _count, GPU_EQUIVALENTS, M.MOST, C.GPUS,
        "the most one server may hold"),
    Key("max_gpus_per_user", _count, GPU_EQUIVALENTS, M.MOST, C.GPUS,
        "the most one user may hold across all their servers"),
    Key("max_gpus_group", _count, GPU_EQUIVALENTS, M.OWN, C.GPUS,
        "the most all members may hold together (a quota); in default_limits, all users "
        "in no listed group together", inherits=False),
    Key("profiles", _profiles, "profile slugs", M.UNION, C.GPUS,
        "the profiles its members may pick (unset: all)"),
    Key("gpu_idle_timeout", _seconds, SECONDS, M.MOST, C.CULLING,
        "a GPU server whose GPUs have all been idle this long is stopped (with parking: "
        "parked); unset: never"),
    Key("idle_timeout", _seconds, SECONDS, M.MOST, C.CULLING,
        "a GPU server with no activity this long is stopped by jupyterhub-idle-culler; "
        "unset: the culler's own timeout"),
    Key("cpu_idle_timeout", _seconds, SECONDS, M.MOST, C.CULLING,
        "the same for a CPU-only server"),
    Key("max_age", _seconds, SECONDS, M.MOST, C.CULLING,
        "a GPU server is stopped this long after it started; unset: never"),
    Key("max_parked", _seconds, SECONDS, M.MOST, C.CULLING,
        "with parking: a server parked at its gpu_idle_timeout is stopped after this long "
        "parked, files kept; unset: 12 h"),
    Key("max_booking", _seconds, SECONDS, M.HIGHEST, C.CALENDAR,
        "how much time a member may hold booked for themselves on the calendar, all their "
        "bookings together; unset: only admins book", unset=0),
    Key("max_wait", _seconds_or_zero("0: no waiting; "), SECONDS, M.HIGHEST, C.LINE,
        "how long a GPU start may wait in line for GPUs (0: refused at once)", unset=0),
    Key("priority", _priority, WHOLE, M.HIGHEST, C.LINE,
        "who goes first in the waiting line (higher first)", unset=0, sourced=False),
    Key("gpu_hours_per_week", _hours, GPU_HOURS, M.MOST, C.BUDGETS,
        "GPU-hours each member may use in the last 7 days (rolling)"),
    Key("gpu_hours_per_week_group", _hours, GPU_HOURS, M.OWN, C.BUDGETS,
        "GPU-hours all members may use together in the last 7 days", inherits=False),
    Key("stop_over_budget", _flag, FLAG, M.ALL, C.BUDGETS,
        "True: a running GPU server is stopped once its user is over budget (else budgets "
        "only refuse new GPU starts)", unset=False),
    Key("nodes", _nodes, "machine names", M.UNION, C.MACHINES,
        "the machines its members' GPU servers may run on (unset: any)"),
    Key("max_waiting_per_user", _places, WHOLE, M.MOST, C.LINE,
        "how many of one user's starts may wait in line at once (unset: 1 per GPU they "
        "could still take)"),
    Key("max_jobs", _whole, WHOLE, M.MOST, C.JOBS,
        "jobs one member may have waiting or running at once (0: may not submit jobs)"),
    Key("max_runtime", _seconds_or_zero(""), SECONDS, M.MOST, C.JOBS,
        "how long a job may run; then it is stopped and failed, its outputs kept"),
    Key("min_runtime", _seconds_or_zero(""), SECONDS, M.HIGHEST_SET, C.JOBS,
        "how long a job runs before a person's start may make it give way", unset=0),
    Key("preempt_grace", _seconds_or_zero(""), SECONDS, M.HIGHEST_SET, C.JOBS,
        "the time from the SIGTERM of a job that gives way to its SIGKILL (to save a "
        "checkpoint)", unset=DEFAULT_PREEMPT_GRACE),
    Key("job_priority", _priority, WHOLE, M.HIGHEST_SET, C.JOBS,
        "higher goes first among waiting jobs (people's starts always come first)", unset=0),
    Key("jobs_give_way", _flag, FLAG, M.ALL, C.JOBS,
        "False: its members' jobs never give way to people's starts", unset=True),
    Key("preempts_jobs", _flag, FLAG, M.ANY, C.JOBS,
        "False: its members' starts never make jobs give way", unset=True),
    Key("max_preemptions", _whole, WHOLE, M.LEAST_SET, C.JOBS,
        "after giving way this often, a job is left to run", unset=DEFAULT_MAX_PREEMPTIONS),
)  # fmt: skip
KEY = {key.name: key for key in KEYS}
LIMIT_KEYS = tuple(KEY)


def named(concern: Concern) -> tuple[str, ...]:
    return tuple(key.name for key in KEYS if key.concern is concern)


def parse(name: str, value: Any, where: str, profile_slugs: Collection[str]) -> Any:
    """The value of key `name` as written at `where` (such as "group_limits['ml']"), checked
    (LimitsConfigError); None: unset (a flag: its `unset`)."""
    key = KEY[name]
    if value is None:
        return key.unset if key.unit == FLAG else None
    return key.parse(value, f"{where}[{name!r}]", profile_slugs)


def markdown_table() -> str:
    """The limits table of docs/configuration.md."""
    rows = [
        "| key | what it limits | unit | in several groups, a user gets | a group that leaves "
        "it out |",
        "|---|---|---|---|---|",
    ]
    for key in KEYS:
        left_out = "takes default_limits' value" if key.inherits else "has none (its own)"
        rows.append(
            f"| `{key.name}` | {key.concern.value}: {key.doc} | {key.unit} | "
            f"{key.merge_words} | {left_out} |"
        )
    return "\n".join(rows) + "\n"


def help_lines() -> str:
    """The keys, for the help of `c.GPUSpawner.group_limits` (the generated reference)."""
    own = " and ".join(f"`{key.name}`" for key in KEYS if not key.inherits)
    lines = [f"- `{key.name}` ({key.unit}): {key.doc}." for key in KEYS]
    return "\n".join(lines) + (
        f"\n\nA key a group leaves out takes its value from `default_limits` (but {own} are "
        'a group\'s own), and messages then say "from default_limits", not the group. A user '
        "in several groups gets the most generous value of each key (the configuration "
        "page's table says how, key by key)."
    )
