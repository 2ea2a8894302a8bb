"""A stand-in for the NVML library, for the one thing these machines lack: GPUs.

It answers the pynvml calls gpuspawner makes, from a list of fake devices,
and fails the way the real library does: with pynvml's own error classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml


@dataclass
class FakeGPU:
    uuid: str
    name: str = "NVIDIA A100-SXM4-80GB"
    memory_total: int = 80 * 2**30
    lost: bool = False


@dataclass
class FakeNVML:
    gpus: list[FakeGPU] = field(default_factory=list)
    init_error: int | None = None
    initialised: bool = False

    def _check(self) -> None:
        if not self.initialised:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: int) -> FakeGPU:
        self._check()
        gpu = self.gpus[handle]
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialised = True

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._check()
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return self._gpu(handle).name.encode()  # older drivers' bindings return bytes

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        gpu = self._gpu(handle)
        return SimpleNamespace(total=gpu.memory_total, used=0, free=gpu.memory_total)
