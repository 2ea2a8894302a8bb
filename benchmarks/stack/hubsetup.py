"""The replay's hub, from `timescale.Scaled`: the site's GPUs (simulated), profiles and
limits with their durations divided, c.GPUSpawner's and JupyterHub's intervals divided,
jupyterhub-idle-culler as the site runs it, the servers' activity interval, and parking
over the simulated checkpoint driver (the load file the replay writes is what it reads).

This is the part of jupyterhub_config.py that `tests/realhub.base_config` does not write
(ports, the image, homes as volumes, users by password, the simulated machine).

People's servers run a tiny HTTP server instead of JupyterLab (`LIGHT`), as the hub tests
of the books and the line do: on two cores, a dozen JupyterLabs would slow every start,
and the replay measures the hub, not JupyterLab. A job's container runs the images' job
runner whatever its profile says (`hub/server.py`), so jobs run `train.py` for real.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .timescale import Scaled

# The light server of the hub tests (tests/realhub.LIGHT_SERVER) without its memory limit,
# which a job (the same profile, the job runner and train.py) would run out of.
LIGHT = {"cmd": ["python3", "-m", "http.server", "8888"], "extra_host_config": {"init": True}}
PARK_MEMORY = "64G"  # the simulated driver's parked work takes no real memory
SETTINGS = ("gpu_busy_threshold", "gpu_processes_count_as_busy")  # the site's, as they are


def profiles(site: Mapping[str, Any], light: bool = True) -> list[dict[str, Any]]:
    return [
        {**p, "spawner_override": {**p.get("spawner_override", {}), **LIGHT}} if light else p
        for p in site.get("profiles", [])
    ]


def hub_config(scaled: Scaled, load_file: Path, parking: bool, light: bool = True) -> str:
    """The replay's config lines, after `realhub.base_config`'s."""
    site = scaled.site
    lines = [
        f"c.GPUSpawner.simulate_gpus = {int(site['gpus'])!r}",
        f"c.GPUSpawner.simulated_load_file = {str(load_file)!r}",
        f"c.GPUSpawner.profiles = {profiles(site, light)!r}",
        f"c.GPUSpawner.default_limits = {site.get('default_limits', {})!r}",
        f"c.GPUSpawner.group_limits = {site.get('group_limits', {})!r}",
        *(f"c.GPUSpawner.{name} = {site[name]!r}" for name in SETTINGS if name in site),
        *(f"c.GPUSpawner.{name} = {value!r}" for name, value in scaled.gpuspawner.items()),
        *(f"c.{name} = {value!r}" for name, value in scaled.jupyterhub.items()),
        f"c.Spawner.environment = {scaled.environment!r}",
        "c.JupyterHub.concurrent_spawn_limit = 100",
        f"c.GPUSpawner.parking = {parking!r}",
    ]
    if parking:
        lines += [
            'c.GPUSpawner.checkpoint_driver = "simulated"',
            f"c.GPUSpawner.park_memory_limit = {PARK_MEMORY!r}",
        ]
    culler = ", ".join(f"{name}={value!r}" for name, value in scaled.culler.items())
    lines += [
        "from gpuspawner import idle_culler_service",
        f"_culler, _culler_role = idle_culler_service({culler})",
        "c.JupyterHub.services.append(_culler)",
        "c.JupyterHub.load_roles.append(_culler_role)",
    ]
    return "\n" + "\n".join(lines) + "\n"


def groups_of(members: Mapping[str, tuple[str, ...]]) -> dict[str, list[str]]:
    """group → its members, from each user's groups (as the trace gives them)."""
    found: dict[str, list[str]] = {}
    for user, groups in sorted(members.items()):
        for group in groups:
            found.setdefault(group, []).append(user)
    return found
