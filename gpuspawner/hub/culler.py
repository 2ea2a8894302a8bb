"""jupyterhub-idle-culler as a hub-managed service, reading each server's group idle timeout.

The culler runs in its own process; its hook (`core.culling.idle_arbiter`)
imports only the core, so that process loads no more of gpuspawner than it uses.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

CULLER_CONFIG = str(Path(__file__).with_name("idle_culler_config.py"))
CULLER_SCOPES = [
    "list:users",
    "read:users:activity",
    "read:servers",
    "delete:servers",
    "admin:server_state",  # to read each server's group idle timeout
]


def idle_culler_service(
    timeout: int = 3600, cull_every: int = 60, name: str = "idle-culler"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """jupyterhub-idle-culler as a hub-managed service, and its least-privilege role.

    `timeout` is the site-wide idle limit; a group's `idle_timeout` /
    `cpu_idle_timeout` replaces it for that group's servers.
    """
    service = {
        "name": name,
        "command": [
            sys.executable,
            "-m",
            "gpuspawner.hub.culler_process",  # the culler's main, ending with its hub
            f"--timeout={timeout}",
            f"--cull-every={cull_every}",
            f"--config={CULLER_CONFIG}",
        ],
        # the config is read in the hub's own process: the culler ends when this one does
        "environment": {"GPUSPAWNER_HUB_PID": str(os.getpid())},
    }
    role = {"name": name, "scopes": CULLER_SCOPES, "services": [name]}
    return service, role
