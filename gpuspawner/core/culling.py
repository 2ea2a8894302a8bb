"""When a GPU server must give its GPUs back: the culling policy, pure and clock-driven.

Two per-group limits are ours to enforce, because only the hub's GPU
monitor can see them: `gpu_idle_timeout` (its GPUs idle this long, even with
a browser tab open) and `max_age` (the longest a GPU server may run).
Ordinary idleness stays with jupyterhub-idle-culler: `idle_arbiter` lets it
read the per-group `idle_timeout` / `cpu_idle_timeout` each server carries
in its state, and the monitor keeps a busy GPU server's activity fresh so
the culler spares a training run that prints nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any

from .gpus import Telemetry
from .grants import Grant
from .limits import Limited
from .words import count_gpus, duration, from_group, your_server


@dataclass(frozen=True)
class Busyness:
    """What counts as a busy GPU."""

    threshold_percent: float = 5.0
    processes_count: bool = False

    def of(self, samples: Iterable[Telemetry | None]) -> bool | None:
        """True if any GPU is busy, False if all are idle, None if any is unknown.

        Unknown (no sample, or an unhealthy GPU) never counts as idle, so a
        hiccup of NVML cannot get a server stopped.
        """
        known = True
        for sample in samples:
            if sample is None or sample.health or sample.utilization_percent is None:
                known = False
                continue
            if sample.utilization_percent >= self.threshold_percent:
                return True
            if self.processes_count and sample.processes:
                return True
        return False if known else None

    def of_share(
        self, sample: Telemetry | None, mine: Collection[int], unowned: Collection[int] = ()
    ) -> bool | None:
        """Whether one server's slot of a shared GPU is busy: True, False, or None (unknown).

        `mine` are the GPU's processes that run in the server's container, `unowned`
        those whose container could not be found. The GPU's own figure covers all its
        servers, so it decides only when it is idle, or when NVML gave no figure per
        process: then a busy GPU counts for each server running something on it.
        """
        if sample is None or sample.health:
            return None
        shares = dict(sample.process_utilization or ())
        if sample.process_utilization is not None and any(
            shares.get(pid, 0.0) >= self.threshold_percent for pid in mine
        ):
            return True
        if self.processes_count and mine:
            return True
        gpu = sample.utilization_percent
        if gpu is not None and gpu < self.threshold_percent:
            return False
        if sample.process_utilization is not None:
            return False if not unowned else None
        if mine:
            return True if gpu is not None else None
        return False if not unowned else None


def combined(verdicts: Iterable[bool | None]) -> bool | None:
    """Busy if any part is, idle only if every part is known idle."""
    found = list(verdicts)
    if any(v is True for v in found):
        return True
    return None if any(v is None for v in found) else False


@dataclass
class IdleClock:
    """Since when each server's GPUs have been idle, from the monitor's samples."""

    idle_since: dict[int, float] = field(default_factory=dict)  # by grant key
    known: set[int] = field(default_factory=set)  # grants whose latest verdict was busy or idle

    def update(self, key: int, busy: bool | None, now: float) -> None:
        if busy is False:
            self.idle_since.setdefault(key, now)
        else:
            self.idle_since.pop(key, None)
        if busy is None:
            self.known.discard(key)
        else:
            self.known.add(key)

    def forget(self, key: int) -> None:
        """A server's new grant: whatever its last one was idle for does not count."""
        self.idle_since.pop(key, None)
        self.known.discard(key)

    def forget_all_but(self, keys: Iterable[int]) -> None:
        kept = set(keys)
        for key in list(self.idle_since):
            if key not in kept:
                del self.idle_since[key]
        self.known &= kept


@dataclass(frozen=True)
class Verdict:
    key: int
    reason: str
    idle: bool = False  # for its gpu_idle_timeout: where parking is on, it is parked instead
    stops: bool = True  # False: parked where it can be, else left as it is (park_after)


def decide(
    key: int,
    gpus: int | Fraction,
    started: float,
    idle_since: float | None,
    durations: Mapping[str, Limited],
    now: float,
) -> Verdict | None:
    """Whether a GPU server is over its max_age or gpu_idle_timeout, and why in words."""
    if not gpus:
        return None
    max_age = durations.get("max_age", Limited(None, None))
    if max_age.value is not None and now - started >= max_age.value:
        return Verdict(
            key,
            f"it ran for {duration(now - started)}, the longest a GPU server may run "
            f"(max_age{from_group(max_age.group)})",
        )
    idle_limit = durations.get("gpu_idle_timeout", Limited(None, None))
    if idle_limit.value is not None and idle_since is not None:
        idle = now - idle_since
        if idle >= idle_limit.value:
            return Verdict(
                key,
                f"its {count_gpus(gpus)} {'was' if gpus <= 1 else 'were'} idle for "
                f"{duration(idle)} (gpu_idle_timeout{from_group(idle_limit.group)})",
                idle=True,
            )
    return None


DEFAULT_MAX_PARKED = 12 * 3600.0  # seconds a parked server stays parked, unless its group says


def parked_too_long(
    grant: Grant, parked_since: float, durations: Mapping[str, Limited], now: float
) -> Verdict | None:
    """Whether a parked server is over its max_age or max_parked, and why in words."""
    aged = decide(grant.key, grant.weight, grant.since, None, durations, now)
    if aged is not None:
        return aged
    limit = durations.get("max_parked", Limited(None, None))
    longest = DEFAULT_MAX_PARKED if limit.value is None else float(limit.value)
    if now - parked_since < longest:
        return None
    return Verdict(
        grant.key,
        f"it was parked for {duration(now - parked_since)}, the longest a server stays "
        f"parked (max_parked{from_group(limit.group)})",
    )


def notice(server: str, stopped_at: float, reason: str, kept_in: str | None = None) -> str:
    """What the user reads on their next spawn page.

    `kept_in` is where the server's files outlive it (its home's mount point):
    a stop by policy must not read like a loss of work, and must not promise
    what a site without homes cannot keep.
    """
    when = datetime.fromtimestamp(stopped_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
    name = your_server(server)
    text = f"{name[0].upper()}{name[1:]} was stopped at {when}: {reason}."
    if kept_in:
        text += f" Your files in {kept_in} are kept."
    return text


def idle_arbiter(
    *, inactive: timedelta, inactive_limit: int, server: dict[str, Any], **_: Any
) -> bool:
    """jupyterhub-idle-culler's cull_arbiter_hook: the server's own group timeout first.

    gpuspawner puts the per-group `idle_timeout` (GPU servers) or
    `cpu_idle_timeout` (CPU-only servers) in the server's state; without one
    the culler's own --timeout applies. Reading state needs the culler's
    role to hold the `admin:server_state` scope.
    """
    limit = float((server.get("state") or {}).get("idle_timeout", inactive_limit))
    return inactive.total_seconds() >= limit
