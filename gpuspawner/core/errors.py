"""The one family of configuration errors: each stops the hub with one line naming the setting."""

from __future__ import annotations


class GPUConfigError(ValueError):
    """The admin's GPU configuration cannot work; the message names the setting and the fix."""


class ProfileConfigError(GPUConfigError):
    """c.GPUSpawner.profiles is malformed."""


class LimitsConfigError(GPUConfigError):
    """c.GPUSpawner.group_limits or default_limits is malformed."""


class InventoryConfigError(GPUConfigError):
    """The GPUs the config names (exclude_gpus, the simulated host) do not match the machine."""


class NoGPUSourceError(GPUConfigError):
    """Neither NVML nor simulated GPUs are available."""


class UnsafeContainerConfig(GPUConfigError):
    """A container setting would hand a notebook GPUs (or the host) outside its grant."""
