"""How long a server keeps its GPUs: the time left before each limit, in the words users read.

Pure and clock-driven, like `culling.decide`, which stops the server when a
deadline here has passed: the hub reads the lease to its user inside
JupyterLab, so that a stop never comes unannounced. `max_age` counts from
when the GPUs were granted, `gpu_idle_timeout` from when they all fell idle
(the monitor's idle clock), and the idle timeout from the server's last
activity as the hub knows it (jupyterhub-idle-culler stops that one, at its
next look). A warning starts `warn_before` seconds before the hub itself stops
the server (max_age, gpu_idle_timeout); the idle culler's stop is not the
hub's to time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from .limits import Limited
from .words import at_clock, count_gpus, duration, from_group

CALENDAR = "calendar"  # a booking or drain opening on the server's GPUs (`core.calendar`)
NOTIFICATION_LENGTH = 140  # JupyterLab cuts a notification's message after this many characters

WARNED = ("max_age", "gpu_idle_timeout", CALENDAR)
LOOK_AGAIN_SECONDS = (5.0, 30.0)  # the soonest and the latest the lease should be read again


@dataclass(frozen=True)
class Deadline:
    """One limit that applies to the server, and when it stops the server.

    `stops_at` is None while its clock does not run (GPUs in use, no activity
    known yet); `warn_at` is None for limits the hub does not warn of.
    """

    key: str
    limit: float
    group: str | None
    stops_at: float | None
    warn_at: float | None
    says: str


@dataclass(frozen=True)
class Lease:
    gpus: int | Fraction  # GPU-equivalents held: a MIG instance or a shared slot is a part
    deadlines: tuple[Deadline, ...]
    now: float

    @property
    def soonest(self) -> Deadline | None:
        running = [d for d in self.deadlines if d.stops_at is not None]
        return min(running, key=lambda d: d.stops_at or 0.0, default=None)

    @property
    def warning(self) -> Deadline | None:
        """The soonest stop the hub will make that is near enough to warn of."""
        due = [d for d in self.deadlines if d.warn_at is not None and d.warn_at <= self.now]
        return min(due, key=lambda d: d.stops_at or 0.0, default=None)

    def warning_says(self) -> str | None:
        """The warning, short enough for JupyterLab's notifications (which cut at 140
        characters): the details are in the deadline's own sentence."""
        deadline = self.warning
        if deadline is None or deadline.stops_at is None:
            return None
        when = f"at {at_clock(deadline.stops_at, self.now)} ({_in(deadline.stops_at - self.now)})"
        if deadline.key == CALENDAR:
            return deadline.says[:NOTIFICATION_LENGTH]
        if deadline.key == "gpu_idle_timeout":
            idle = self.now - (deadline.stops_at - deadline.limit)
            return (
                f"This server stops {when}: its {count_gpus(self.gpus)} {_has(self.gpus)} been "
                f"idle for {duration(idle)} (gpu_idle_timeout). "
                f"Use {_it_object(self.gpus)} or save your work."
            )
        return (
            f"This server stops {when}: a GPU server may run {duration(deadline.limit)} "
            "(max_age). Save your work now."
        )

    def summary(self) -> str:
        """The status bar's few words: what the server holds, and the time left."""
        holds = count_gpus(self.gpus) if self.gpus else "CPU only"
        soonest = self.soonest
        if soonest is None or soonest.stops_at is None:
            return holds
        return f"{holds} · {duration(max(0.0, soonest.stops_at - self.now))} left"

    def look_again_in(self) -> float:
        """Seconds until the lease should be read again: at the latest when a warning starts."""
        soonest, latest = LOOK_AGAIN_SECONDS
        moments = [
            moment - self.now
            for d in self.deadlines
            for moment in (d.warn_at, d.stops_at)
            if moment is not None and moment > self.now
        ]
        return max(soonest, min([latest, *(m + 1 for m in moments)]))


def lease(
    *,
    gpus: int | Fraction,
    started: float,
    idle_since: float | None,
    last_activity: float | None,
    durations: Mapping[str, Limited],
    now: float,
    warn_before: float,
    gpu_use_known: bool = True,
    parks: bool = False,
    parked: bool = False,
    window: tuple[float, str] | None = None,
    window_warning: float = 0.0,
) -> Lease:
    """The deadlines of a server holding `gpus` GPUs (GPU-equivalents) since `started`.

    `durations` holds the server's limits by key, as `UserLimits.durations`
    resolves them. `gpu_use_known`: whether the monitor has a verdict on the GPUs' use
    (not before its first sample, nor while it cannot tell); `idle_since` None then means
    "not known", not "busy". The idle culler applies `idle_timeout` to GPU servers and
    `cpu_idle_timeout` to CPU-only ones, as the spawner tells it at start. `parks`: the hub
    parks the server's GPU work at its gpu_idle_timeout instead of stopping it (parking is
    on), so that limit stops nothing and is never warned of; `parked`: its GPU work is
    parked now, so that limit has nothing more to say. `window`: when a window of the
    calendar that stops the server opens, and what it is ("booked for group ml"), warned of
    `window_warning` seconds ahead.
    """
    keys = ("max_age", "gpu_idle_timeout", "idle_timeout") if gpus else ("cpu_idle_timeout",)
    deadlines = []
    for key in keys:
        stops_at: float | None
        limit = durations.get(key)
        if limit is None or limit.value is None or (key == "gpu_idle_timeout" and parked):
            continue
        seconds, where = float(limit.value), f"({key}{from_group(limit.group)})"
        if key == "max_age":
            stops_at, says = _max_age(seconds, where, started, now)
        elif key == "gpu_idle_timeout" and parks:
            stops_at, says = None, _parked_at(seconds, where, gpus, idle_since, gpu_use_known, now)
        elif key == "gpu_idle_timeout":
            stops_at, says = _gpu_idle(seconds, where, gpus, idle_since, gpu_use_known, now)
        else:
            stops_at, says = _idle(seconds, where, last_activity, now)
        warn_at = None
        if stops_at is not None and warn_before > 0 and key in WARNED:
            warn_at = stops_at - warn_before
        deadlines.append(Deadline(key, seconds, limit.group, stops_at, warn_at, says))
    if window is not None:
        opens, what = window
        says = (
            f"This server stops at {at_clock(opens, now)} ({_in(opens - now)}): its "
            f"{count_gpus(gpus)} {_is(gpus)} {what}. Save your work before then."
        )
        warn_at = opens - window_warning if window_warning > 0 else None
        deadlines.append(Deadline(CALENDAR, 0.0, None, opens, warn_at, says))
    return Lease(gpus, tuple(deadlines), now)


def _max_age(seconds: float, where: str, started: float, now: float) -> tuple[float, str]:
    stops_at = started + seconds
    return stops_at, (
        f"This server stops at {at_clock(stops_at, now)} ({_in(stops_at - now)}) unless you "
        f"stop it sooner: a GPU server may run {duration(seconds)} {where}."
    )


def _gpu_idle(
    seconds: float,
    where: str,
    gpus: int | Fraction,
    idle_since: float | None,
    known: bool,
    now: float,
) -> tuple[float | None, str]:
    back = f"{_it(gpus)} {_goes(gpus)} back to the pool and this server stops"
    state = _idle_state(gpus, idle_since, known, now)
    if idle_since is None:
        return None, (
            f"Your {count_gpus(gpus)} {state}. Once idle for {duration(seconds)}, {back} {where}."
        )
    stops_at = idle_since + seconds
    return stops_at, (
        f"Your {count_gpus(gpus)} {state}; at {duration(seconds)} {back}, "
        f"{_in(stops_at - now)} {where}."
    )


def _idle_state(gpus: int | Fraction, idle_since: float | None, known: bool, now: float) -> str:
    """How the server's GPUs stand against the idle clock: "has been idle for …", "is not
    idle", or "is not measured yet" (the monitor has no verdict)."""
    if idle_since is not None:
        return f"{_has(gpus)} been idle for {duration(now - idle_since)}"
    return f"{_is(gpus)} not idle" if known else f"{_is(gpus)} not measured yet"


def _parked_at(
    seconds: float,
    where: str,
    gpus: int | Fraction,
    idle_since: float | None,
    known: bool,
    now: float,
) -> str:
    then = (
        f"; at {duration(seconds)}, {_in(idle_since + seconds - now)}"
        if idle_since is not None
        else f"; once idle for {duration(seconds)}"
    )
    state = _idle_state(gpus, idle_since, known, now)
    return (
        f"Your {count_gpus(gpus)} {state}{then}, your GPU work is "
        f"parked in host memory and {_it(gpus)} may run a job {where}: nothing stops, and "
        "your work comes back where it was when you run a cell."
    )


def _idle(
    seconds: float, where: str, last_activity: float | None, now: float
) -> tuple[float | None, str]:
    says = f"This server stops after {duration(seconds)} without activity {where}"
    if last_activity is None:
        return None, f"{says}."
    stops_at = last_activity + seconds
    return stops_at, (
        f"{says}. The last the hub knows of was {duration(max(0.0, now - last_activity))} "
        f"ago: {_about_left(stops_at - now)} if nothing happens."
    )


def _in(seconds: float) -> str:
    return f"in {duration(seconds)}" if seconds >= 1 else "any moment now"


def _about_left(seconds: float) -> str:
    return f"about {duration(seconds)} left" if seconds >= 1 else "it stops any moment now"


def _it(gpus: int | Fraction) -> str:
    return "it" if gpus <= 1 else "they"


def _it_object(gpus: int | Fraction) -> str:
    return "it" if gpus <= 1 else "them"


def _is(gpus: int | Fraction) -> str:
    return "is" if gpus <= 1 else "are"


def _has(gpus: int | Fraction) -> str:
    return "has" if gpus <= 1 else "have"


def _goes(gpus: int | Fraction) -> str:
    return "goes" if gpus <= 1 else "go"
