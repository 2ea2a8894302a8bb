"""The hub a trace replays on: its GPUs and the admin's c.GPUSpawner settings, from a JSON file.

The profiles and limits go through the core's own parsers, so a site file that
would stop the hub stops the simulator with the same message, and a session
the hub would refuse for good (a profile the person may not pick) is named
before anything runs instead of waiting all week.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuspawner.config.settings import GPUSettings
from gpuspawner.core.culling import Busyness
from gpuspawner.core.errors import GPUConfigError
from gpuspawner.core.limits import LimitsTable
from gpuspawner.core.profiles import Profile, parse_profiles

from .trace import Session, TraceError

SITE_KEYS = {
    "about",
    "gpus",
    "profiles",
    "default_limits",
    "group_limits",
    "culler_timeout",
    "gpu_busy_threshold",
    "gpu_processes_count_as_busy",
}


# What a hub that leaves c.GPUSpawner.gpu_processes_count_as_busy unset counts as busy.
SHIPPED_PROCESSES_COUNT = bool(
    GPUSettings.class_traits()["gpu_processes_count_as_busy"].default_value
)


@dataclass(frozen=True)
class Site:
    gpus: int
    profiles: tuple[Profile, ...]
    limits: LimitsTable
    culler_timeout: float  # jupyterhub-idle-culler's --timeout: servers without a group limit
    busyness: Busyness  # c.GPUSpawner.gpu_busy_threshold, gpu_processes_count_as_busy

    @property
    def uuids(self) -> list[str]:
        return [f"GPU-{i:02d}" for i in range(self.gpus)]

    def check(self, sessions: Sequence[Session]) -> None:
        """TraceError naming the first session this hub would refuse whatever was free."""
        offered = {p.gpus: p.slug for p in self.profiles}
        for s in sessions:
            slug = offered.get(s.gpus)
            if slug is None:
                raise TraceError(
                    f"{s.user} asks for {s.gpus} GPU(s) at {s.arrival}, but no profile "
                    f"offers that many (profiles offer {sorted(offered)})"
                )
            if not self.limits.for_user(s.groups).may_pick(slug):
                raise TraceError(
                    f"{s.user} (groups: {', '.join(s.groups) or 'none'}) asks for profile "
                    f"{slug} at {s.arrival}, which their limits do not allow"
                )


def load_site(path: Path) -> Site:
    return site_from(json.loads(path.read_text(encoding="utf-8")), str(path))


def site_from(raw: Any, where: str = "the site") -> Site:
    """A Site from the settings as the JSON file holds them; GPUConfigError naming the fault."""
    if not isinstance(raw, dict) or set(raw) - SITE_KEYS:
        unknown = sorted(set(raw) - SITE_KEYS) if isinstance(raw, dict) else "not an object"
        raise GPUConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(SITE_KEYS)}")
    gpus = raw.get("gpus")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise GPUConfigError(f"{where}: gpus must be a whole number ≥ 1, got {gpus!r}")
    profiles = parse_profiles(raw.get("profiles", []), gpus)
    limits = LimitsTable.parse(
        raw.get("group_limits", {}), raw.get("default_limits", {}), [p.slug for p in profiles]
    )
    return Site(
        gpus=gpus,
        profiles=tuple(profiles),
        limits=limits,
        culler_timeout=float(raw.get("culler_timeout", 3600)),
        busyness=Busyness(
            float(raw.get("gpu_busy_threshold", 5.0)),
            bool(raw.get("gpu_processes_count_as_busy", SHIPPED_PROCESSES_COUNT)),
        ),
    )
