"""Why a start got no GPUs, in the words its user reads: what `Broker.take` raises.

The core refuses in its own terms (not enough free GPUs, a limit, a wait that ended);
here each becomes one `Refused`, with the words for the spawn page, the reason the
refusal counter counts it under and the HTTP status of the answer. A spawner turns
those, and its own refusals, into JupyterHub's `SpawnException` (`refused_start`,
`failed_start`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from jupyterhub.spawner import SpawnException

from ...core.limits import LimitExceeded
from ...core.placement import NotEnoughGPUs
from ...core.profiles import Profile
from ..base.counters import SPAWNS_REFUSED
from ..line.waiting import WaitEnded


class Refused(Exception):
    """A start that gets no GPUs. `counted`: a refusal (the metric counts it by `reason`);
    False for an admin's decision, such as taking the start out of the line."""

    def __init__(self, message: str, reason: str, status: int, counted: bool = True) -> None:
        super().__init__(message)
        self.message, self.reason, self.status, self.counted = message, reason, status, counted


def refused(
    profile: Profile, error: LimitExceeded | NotEnoughGPUs | WaitEnded, told: Sequence[str] = ()
) -> Refused:
    """`told`: the calendar's windows open now, said where GPUs were short (a drain, a
    booking for others explains why free GPUs do not serve this start)."""
    if isinstance(error, LimitExceeded):
        return Refused(str(error), "limit", 403)
    if isinstance(error, NotEnoughGPUs):
        return Refused(" ".join([not_enough(profile, error), *told]), "capacity", 409)
    return Refused(str(error), error.reason, 409, counted=error.outcome != "removed")


def not_enough(profile: Profile, short: NotEnoughGPUs) -> str:
    """A start refused for want of GPUs, in the core's words where it has them (free GPUs on
    different machines, or none of the allowed machines there)."""
    if short.why:
        return (
            f"Profile {profile.display_name!r} cannot start now: {short.why} "
            "Pick another profile, or try again later."
        )
    return (
        f"Not enough free GPUs: profile {profile.display_name!r} needs {short.needs}, "
        f"{short.free} of {short.total} are free right now. Try again when another "
        "server stops, or pick a profile with fewer GPUs."
    )


def refused_start(message: str, reason: str, status_code: int) -> SpawnException:
    """A spawn refused before any container: counted, and shown to the user as is."""
    SPAWNS_REFUSED.labels(reason).inc()
    refusal = failed_start(message, reason, status_code)
    refusal.refused = True  # for `RefusalsAreNotFaults`
    return refusal


class RefusalsAreNotFaults(logging.Filter):
    """On the hub's logger: JupyterHub logs a spawn that failed with its traceback, at error.
    A start gpuspawner refused (bad options, a limit, a job's server started by hand) is
    the user's to fix, not a fault of the hub: its line stays, at warning, without the
    traceback of gpuspawner's own `raise` (JupyterHub's next line says why it failed)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, SpawnException) and getattr(error, "refused", False):
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def failed_start(message: str, reason: str, status_code: int) -> SpawnException:
    """A spawn that ends with `message` for the user: as is on the spawn page and in the
    progress stream, which otherwise prefix it with "409 SpawnException(reason=…):"."""
    failure = SpawnException(message, reason=reason, status_code=status_code)
    failure.jupyterhub_message = message
    return failure
