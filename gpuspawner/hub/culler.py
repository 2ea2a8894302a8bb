"""jupyterhub-idle-culler as a hub-managed service, reading each server's group idle timeout.

The culler runs in its own process; its hook (`core.culling.idle_arbiter`)
imports only the core, so that process loads no more of gpuspawner than it uses.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

CULLER_CONFIG = str(Path(__file__).with_name("idle_culler_config.py"))
# jupyterhub-idle-culler's main, ending on the SIGINT the hub stops it with even where the hub
# was started with SIGINT ignored (as a shell's background job is, and every child inherits):
# the hub would otherwise wait its 30 s interrupt_timeout for it at every stop.
CULLER_MAIN = (
    "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from jupyterhub_idle_culler import main; main()"
)
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
            "-c",
            CULLER_MAIN,
            f"--timeout={timeout}",
            f"--cull-every={cull_every}",
            f"--config={CULLER_CONFIG}",
        ],
    }
    role = {"name": name, "scopes": CULLER_SCOPES, "services": [name]}
    return service, role
