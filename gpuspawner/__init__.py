"""gpuspawner: share a multi-GPU server through JupyterHub.

The package's top level is its public face: `GPUSpawner`, and what a
jupyterhub_config.py needs (`idle_culler_service`, `docker_bridge_gateway`,
`nvml_gpu_count`, from `gpuspawner/public.py`). A config imports only these.

Below it the package is layered (see docs/architecture.md): `core` (the books and
the rules, standard library only), `devices` (what GPUs exist), `engine` (where
containers run), `config` (the admin's settings), `hub` (the spawner and what
runs inside the hub) and `admin` (the `gpuspawner` command). Importing the
package imports none of them; each public name loads its part on first use,
so the core and the command line start quickly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .hub.engines.docker import GPUSpawner
    from .public import docker_bridge_gateway, idle_culler_service, nvml_gpu_count

__all__ = ["GPUSpawner", "docker_bridge_gateway", "idle_culler_service", "nvml_gpu_count"]


def __getattr__(name: str) -> Any:
    if name == "GPUSpawner":
        from .hub.engines.docker import GPUSpawner

        return GPUSpawner
    if name in __all__:
        from . import public

        return getattr(public, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
