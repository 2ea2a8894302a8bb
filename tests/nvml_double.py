"""A stand-in for the NVML library, for the one thing these machines lack: GPUs.

It answers the pynvml calls gpuspawner makes, from a list of fake devices,
and fails the way the real library does: with pynvml's own error classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml


def error(code: int) -> pynvml.NVMLError:
    """pynvml maps a code to its subclass, e.g. NVML_ERROR_GPU_IS_LOST → NVMLError_GpuIsLost."""
    return pynvml.NVMLError(code)


@dataclass
class FakeGPU:
    uuid: str
    name: str = "NVIDIA A100-SXM4-80GB"
    memory_total: int = 80 * 2**30
    memory_used: int = 0
    utilization: int = 0
    temperature: int = 40
    power_mw: int | None = 90_000  # None: the board does not report power
    processes: list[int] = field(default_factory=list)
    ecc_uncorrected: int | None = 0  # None: ECC not supported (consumer boards)
    retirement_pending: bool = False
    lost: bool = False
    reset_required: bool = False
    nvlinks: list[int] = field(default_factory=list)  # the GPU index at the end of each link


@dataclass
class FakeNVML:
    gpus: list[FakeGPU] = field(default_factory=list)
    init_error: int | None = None
    initialised: bool = False
    pending_xids: list[tuple[int, int]] = field(default_factory=list)  # (device index, xid)
    events_supported: bool = True
    driver_version: str = "550.54.15"
    cuda_version: int = 12040  # as NVML encodes CUDA 12.4
    # the PCIe common ancestor of two GPUs (by index), NVML_TOPOLOGY_*; unlisted pairs: SYSTEM
    ancestors: dict[frozenset[int], int] = field(default_factory=dict)
    topology_supported: bool = True

    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError

    def _check(self) -> None:
        if not self.initialised:
            raise error(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: int) -> FakeGPU:
        self._check()
        gpu = self.gpus[handle]
        if gpu.lost:
            raise error(pynvml.NVML_ERROR_GPU_IS_LOST)
        if gpu.reset_required:
            raise error(pynvml.NVML_ERROR_RESET_REQUIRED)
        return gpu

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise error(self.init_error)
        self.initialised = True

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check()
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check()
        return self.cuda_version

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._check()
        if not 0 <= index < len(self.gpus):
            raise error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        self._check()
        for index, gpu in enumerate(self.gpus):
            if gpu.uuid == uuid:
                return index
        raise error(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return self._gpu(handle).name.encode()  # older bindings return bytes

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        gpu = self._gpu(handle)
        return SimpleNamespace(
            total=gpu.memory_total, used=gpu.memory_used, free=gpu.memory_total - gpu.memory_used
        )

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=self._gpu(handle).utilization, memory=0)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._gpu(handle).temperature

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        gpu = self._gpu(handle)
        if gpu.power_mw is None:
            raise error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.power_mw

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=0) for pid in self._gpu(handle).processes]

    def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter: int) -> int:
        gpu = self._gpu(handle)
        if gpu.ecc_uncorrected is None:
            raise error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.ecc_uncorrected

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: int) -> int:
        return int(self._gpu(handle).retirement_pending)

    def nvmlEventSetCreate(self) -> str:
        if not self.events_supported:
            raise error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle: int, types: int, event_set: str) -> None:
        self._check()

    def nvmlEventSetWait(self, event_set: str, timeout_ms: int) -> SimpleNamespace:
        if not self.pending_xids:
            raise error(pynvml.NVML_ERROR_TIMEOUT)
        index, xid = self.pending_xids.pop(0)
        return SimpleNamespace(
            device=index, eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=xid
        )

    def nvmlDeviceGetPciInfo(self, handle: int) -> SimpleNamespace:
        self._gpu(handle)
        return SimpleNamespace(busId=self._bus_id(handle))

    @staticmethod
    def _bus_id(index: int) -> bytes:
        return f"00000000:{0x17 + index:02X}:00.0".encode()  # older bindings return bytes

    def nvmlDeviceGetTopologyCommonAncestor(self, first: int, second: int) -> int:
        self._gpu(first), self._gpu(second)
        if not self.topology_supported:
            raise error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self.ancestors.get(frozenset({first, second}), pynvml.NVML_TOPOLOGY_SYSTEM)

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        gpu = self._gpu(handle)
        if not gpu.nvlinks:
            raise error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if link >= len(gpu.nvlinks):
            raise error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: int, link: int) -> SimpleNamespace:
        self.nvmlDeviceGetNvLinkState(handle, link)
        return SimpleNamespace(busId=self._bus_id(self.gpus[handle].nvlinks[link]))
