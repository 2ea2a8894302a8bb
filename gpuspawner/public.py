"""What a jupyterhub_config.py needs from gpuspawner, besides `c.GPUSpawner` settings.

A config imports these from the package's top level (`from gpuspawner import
idle_culler_service`), which loads this module on first use; the layers below
(`core`, `devices`, `engine`, `config`, `hub`) are internal and may move.

- `idle_culler_service`: jupyterhub-idle-culler as a hub-managed service, and its role.
- `docker_bridge_gateway`: this host's address on Docker's bridge, for `c.JupyterHub.hub_ip`.
- `nvml_gpu_count`: how many GPUs the driver lists, to offer only profiles that fit.
"""

from __future__ import annotations

import docker

from .core.errors import NoGPUSourceError
from .devices.nvml import NvmlSource
from .engine.docker import bridge_gateway
from .hub.culler import idle_culler_service

__all__ = ["docker_bridge_gateway", "idle_culler_service", "nvml_gpu_count"]


def docker_bridge_gateway() -> str:
    """This host's address on Docker's default bridge, asking the Docker engine that
    `DOCKER_HOST` names (else the local one): where notebook containers reach the hub.
    Set `c.JupyterHub.hub_ip` to it (`gpuspawner doctor` has a container connect there)."""
    return bridge_gateway(docker.from_env())


def nvml_gpu_count() -> int:
    """How many GPUs the NVIDIA driver lists, through NVML; 0 where NVML cannot start (no
    driver, no GPU), so that a config loads anyway and the hub, as it starts, says why."""
    try:
        return len(NvmlSource().list_gpus())
    except NoGPUSourceError:
        return 0
