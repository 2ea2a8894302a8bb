"""Time runs faster on the replay: every duration of the hub's config and of the trace,
divided by one stated factor; and the hub's own intervals that cannot be, as data.

At a factor of 30 a simulated minute is two real seconds: a week replays in 5.6 hours.
What runs at real speed whatever the factor (Docker's start of a container, JupyterLab's,
JupyterHub's intervals kept for its own sake, gpuspawner's constants) is `UNSCALED`: the
replay's report prints it beside the figures, with what it does to them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from simulation.jobs import TrainingJob
from simulation.trace import OfKind, Session

from gpuspawner.config.settings import GPUSettings
from gpuspawner.core.limit_keys import DEFAULT_PREEMPT_GRACE, GPU_HOURS, KEY, SECONDS

# c.GPUSpawner's intervals in seconds (their shipped defaults, unless the replay says), and
# the line's half-life in days: all scale.
GPUSPAWNER_SECONDS = (
    "monitor_interval", "line_reserve_after", "warn_before_cull", "calendar_warning",
    "park_after", "turn_quantum",
)  # fmt: skip
GPUSPAWNER_DAYS = ("usage_half_life_days",)
# JupyterHub's intervals that shape what the figures count (whole seconds, at least 1),
# with JupyterHub 6.1's defaults.
JUPYTERHUB_SECONDS = {
    "JupyterHub.last_activity_interval": 300,  # it collects the proxy's activity so often
    "JupyterHub.activity_resolution": 30,  # it ignores activity closer than this
    "Spawner.poll_interval": 30,  # it asks whether a server still runs so often
}
# What jupyterhub-singleuser reads from its environment: it reports activity so often.
SERVER_ENVIRONMENT_SECONDS = {"JUPYTERHUB_ACTIVITY_INTERVAL": 300}
CULLER_EVERY = 60  # gpuspawner.public.idle_culler_service's cull_every
# The limits whose unset value is a duration the hub applies (docs/limits.md): a site that
# leaves them out gets them divided too, in default_limits, which every group inherits.
UNSET_SECONDS = {"preempt_grace": DEFAULT_PREEMPT_GRACE, "max_parked": 12 * 3600.0}


@dataclass(frozen=True)
class Unscaled:
    """One of the hub's durations that the replay leaves at real speed (or can only round)."""

    name: str
    seconds: float  # as the replay runs it, real seconds
    why: str
    effect: str  # on the figures, in the replay's time


UNSCALED = (
    Unscaled("Spawner.start_timeout", 60, "bounds Docker's and the server's real start: "
             "divided, every start would fail",
             "a start may take up to this long before it fails, factor × longer than the "
             "simulator's hub would wait"),
    Unscaled("Spawner.http_timeout", 30, "bounds the server's real first answer",
             "as start_timeout"),
    Unscaled("Docker's and the server's start", 4, "real work: create, start, answer HTTP",
             "every start's request-to-ready time reads factor × longer in simulated time "
             "(4 s at 30× is 2 simulated minutes); request-to-granted does not include it"),
    Unscaled("tornado_settings slow_spawn_timeout", 10, "when the REST API answers 202 "
             "instead of waiting on", "none: people read the progress stream"),
    Unscaled("JupyterHub.proxy_check_interval", 5, "the proxy's liveness", "none"),
    Unscaled("JupyterHub.service_check_interval", 60, "the services' liveness (the culler's)",
             "none"),
    Unscaled("JupyterHub.init_spawners_timeout", 10, "the hub's own start",
             "only the restart partway through the run: its rebuild counts factor × longer"),
    Unscaled("gpuspawner.core.usage.WEEK", 7 * 24 * 3600, "a constant: the budgets' rolling "
             "window", "none for a trace of at most a week (both windows hold the whole "
             "replay so far); GPU-hour budgets are divided by the factor"),
    Unscaled("gpuspawner.hub.line.waiting.RECENT_USE_TTL", 60, "a constant: how often the "
             "line rereads recent use", "the line's fair order lags by up to factor minutes"),
    Unscaled("gpuspawner.engine.docker.REMOVAL_WAIT_SECONDS", 30, "a constant",
             "only where Docker is slow to remove a container"),
    Unscaled("the job runner's REPORT_EVERY_SECONDS", 5, "in the image (gpuspawner_lab)",
             "a job's progress reaches the hub up to factor × 5 s late; not its state"),
    Unscaled("the container's stop timeout", 1, "Docker takes whole seconds: preempt_grace "
             "is rounded up", "a grace under a second lasts a second"),
)  # fmt: skip


@dataclass(frozen=True)
class Part(OfKind):
    """A segment of a session's pattern, in real seconds (`simulation.trace.Segment`)."""

    kind: str  # B, I or A
    seconds: float


@dataclass(frozen=True)
class ScaledSession:
    session: Session
    at: float  # real seconds from the replay's start
    parts: tuple[Part, ...]


@dataclass(frozen=True)
class ScaledJob:
    job: TrainingJob
    at: float  # real seconds from the replay's start
    work_seconds: float
    checkpoint_seconds: float  # 0: it writes none


@dataclass(frozen=True)
class Scaled:
    factor: float
    site: dict[str, Any]  # the site file's settings (c.GPUSpawner's), durations divided
    gpuspawner: dict[str, float]  # c.GPUSpawner's intervals
    jupyterhub: dict[str, int]  # "JupyterHub.last_activity_interval" → whole seconds
    environment: dict[str, str]  # the servers' (c.Spawner.environment)
    culler: dict[str, int]  # idle_culler_service(timeout=…, cull_every=…)
    sessions: tuple[ScaledSession, ...]
    jobs: tuple[ScaledJob, ...]
    unscaled: tuple[Unscaled, ...]


def scale(
    factor: float,
    site: Mapping[str, Any],
    sessions: Sequence[Session],
    jobs: Sequence[TrainingJob] = (),
    start: datetime | None = None,
    hub: Mapping[str, float] | None = None,
) -> Scaled:
    """Everything the replay runs, `factor` times faster. `site`: the simulator's site file
    (benchmarks/simulation/site.json); `start`: the trace's moment the replay starts at (its
    first arrival or submission unless given); `hub`: c.GPUSpawner intervals other than
    their defaults."""
    if not 0 < factor < math.inf:
        raise ValueError(f"the factor must be a number > 0, got {factor!r}")
    first = [s.arrival for s in sessions] + [j.submitted for j in jobs]
    origin = start or min(first, default=datetime.min)
    rounded: list[Unscaled] = []

    def whole(name: str, seconds: float) -> int:
        value = max(1, round(seconds / factor))
        if value != seconds / factor:
            rounded.append(Unscaled(name, value, "whole seconds only",
                                    f"{seconds / factor:g} s rounded to {value} s"))  # fmt: skip
        return value

    def at(moment: datetime) -> float:
        return (moment - origin).total_seconds() / factor

    intervals = {**_gpuspawner_defaults(), **(hub or {})}
    culler_timeout = float(site.get("culler_timeout", 3600))
    return Scaled(
        factor=factor,
        site=_site(site, factor),
        gpuspawner={name: value / factor for name, value in intervals.items()},
        jupyterhub={name: whole(name, s) for name, s in JUPYTERHUB_SECONDS.items()},
        environment={name: str(whole(name, s)) for name, s in SERVER_ENVIRONMENT_SECONDS.items()},
        culler={
            "timeout": whole("idle culler --timeout", culler_timeout),
            "cull_every": whole("idle culler --cull-every", CULLER_EVERY),
        },
        sessions=tuple(
            ScaledSession(
                s, at(s.arrival), tuple(Part(p.kind, p.minutes * 60 / factor) for p in s.pattern)
            )
            for s in sessions
        ),
        jobs=tuple(
            ScaledJob(j, at(j.submitted), j.minutes * 60 / factor, j.checkpoint * 60 / factor)
            for j in jobs
        ),
        unscaled=UNSCALED + tuple(rounded),
    )


def _site(site: Mapping[str, Any], factor: float) -> dict[str, Any]:
    """The site's limits with every duration (and GPU-hour budget) divided."""
    scaled = dict(site)
    if "culler_timeout" in site:
        scaled["culler_timeout"] = site["culler_timeout"] / factor
    defaults = {**UNSET_SECONDS, **site.get("default_limits", {})}
    scaled["default_limits"] = _limits(defaults, factor)
    scaled["group_limits"] = {
        group: _limits(limits, factor) for group, limits in site.get("group_limits", {}).items()
    }
    return scaled


def _limits(limits: Mapping[str, Any], factor: float) -> dict[str, Any]:
    def divided(name: str, value: Any) -> Any:
        key = KEY.get(name)
        timed = key is not None and key.unit in (SECONDS, GPU_HOURS)
        return value / factor if timed and isinstance(value, int | float) and value else value

    return {name: divided(name, value) for name, value in limits.items()}


def _gpuspawner_defaults() -> dict[str, float]:
    traits = GPUSettings.class_traits()
    seconds = {name: float(traits[name].default_value) for name in GPUSPAWNER_SECONDS}
    days = {name: float(traits[name].default_value) for name in GPUSPAWNER_DAYS}
    return seconds | days


def unscaled_table(scaled: Scaled) -> str:
    """What the report prints: the durations left at real speed, and what they do."""
    rows = [
        f"Time runs {scaled.factor:g}× faster; these do not:",
        "",
        "| duration | real seconds | why | effect on the figures |",
        "|---|---|---|---|",
    ]
    rows += [f"| {u.name} | {u.seconds:g} | {u.why} | {u.effect} |" for u in scaled.unscaled]
    return "\n".join(rows) + "\n"
