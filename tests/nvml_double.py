"""A stand-in for the NVML library, for the one thing these machines lack: GPUs.

It answers the pynvml calls gpuspawner makes, from a list of fake devices,
and fails the way the real library does: with pynvml's own error classes.
MIG devices answer pynvml's MIG calls as a real driver does (as NVIDIA
documents them; see benchmarks/README.md for what was checked on hardware):
a GPU without MIG answers NotSupported, an empty MIG index NotFound; a MIG
device has a handle of its own, a UUID `MIG-…`, attributes in pynvml's own
structure, memory and processes, but no utilisation, temperature or power.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml


def error(code: int) -> pynvml.NVMLError:
    """pynvml maps a code to its subclass, e.g. NVML_ERROR_GPU_IS_LOST → NVMLError_GpuIsLost."""
    return pynvml.NVMLError(code)


@dataclass
class FakeMig:
    """A MIG device: a compute instance of `compute_slices` in a GPU instance of `slices`."""

    uuid: str
    slices: int = 1
    memory_mb: int = 9728  # an A100 80GB's 1g.10gb
    compute_slices: int | None = None  # None: the whole GPU instance
    processes: list[int] = field(default_factory=list)
    memory_used: int = 0


@dataclass(frozen=True)
class MigHandle:
    """A MIG device's handle: which GPU, which MIG index."""

    gpu: int
    position: int


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
    mig_mode: bool | None = None  # None: a GPU without MIG (NVML answers NotSupported)
    mig: dict[int, FakeMig] = field(default_factory=dict)  # by MIG index; gaps are empty
    max_mig: int = 7
    process_sm: dict[int, int] | None = None  # percent per PID; None: not reported


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

    def _gpu(self, handle: int | MigHandle) -> FakeGPU:
        self._check()
        if isinstance(handle, MigHandle):
            raise error(pynvml.NVML_ERROR_NOT_SUPPORTED)  # not a question for a MIG device
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

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int | MigHandle:
        self._check()
        for index, gpu in enumerate(self.gpus):
            if gpu.uuid == uuid:
                return index
            for position, mig in gpu.mig.items():
                if mig.uuid == uuid and gpu.mig_mode:
                    return MigHandle(index, position)
        raise error(pynvml.NVML_ERROR_NOT_FOUND)

    def _mig(self, handle: MigHandle) -> FakeMig:
        gpu = self._gpu(handle.gpu)
        if not gpu.mig_mode or handle.position not in gpu.mig:
            raise error(pynvml.NVML_ERROR_NOT_FOUND)  # destroyed since the handle was taken
        return gpu.mig[handle.position]

    def nvmlDeviceGetUUID(self, handle: int | MigHandle) -> str:
        if isinstance(handle, MigHandle):
            return self._mig(handle).uuid
        return self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle: int | MigHandle) -> bytes:
        if isinstance(handle, MigHandle):
            return f"{self._gpu(handle.gpu).name} MIG".encode()
        return self._gpu(handle).name.encode()  # older bindings return bytes

    def nvmlDeviceGetMemoryInfo(self, handle: int | MigHandle) -> SimpleNamespace:
        if isinstance(handle, MigHandle):
            mig = self._mig(handle)
            total = mig.memory_mb * 2**20
            return SimpleNamespace(total=total, used=mig.memory_used, free=total - mig.memory_used)
        gpu = self._gpu(handle)
        return SimpleNamespace(
            total=gpu.memory_total, used=gpu.memory_used, free=gpu.memory_total - gpu.memory_used
        )

    def nvmlDeviceGetUtilizationRates(self, handle: int | MigHandle) -> SimpleNamespace:
        gpu = self._gpu(handle)
        if gpu.mig_mode:
            raise error(pynvml.NVML_ERROR_NOT_SUPPORTED)  # not reported in MIG mode
        return SimpleNamespace(gpu=gpu.utilization, memory=0)

    # --- MIG, as pynvml asks ---------------------------------------------------------
    def nvmlDeviceGetMigMode(self, handle: int) -> list[int]:
        gpu = self._gpu(handle)
        if gpu.mig_mode is None:
            raise error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if gpu.mig_mode else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: int) -> int:
        gpu = self._gpu(handle)
        if gpu.mig_mode is None:
            raise error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.max_mig

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: int, index: int) -> MigHandle:
        gpu = self._gpu(handle)
        if gpu.mig_mode is None:
            raise error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= index < gpu.max_mig:
            raise error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if not gpu.mig_mode or index not in gpu.mig:
            raise error(pynvml.NVML_ERROR_NOT_FOUND)
        return MigHandle(handle, index)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: int | MigHandle) -> int:
        if not isinstance(handle, MigHandle):
            raise error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._mig(handle)
        return handle.gpu

    def nvmlDeviceGetAttributes(self, handle: int | MigHandle) -> pynvml.c_nvmlDeviceAttributes:
        if not isinstance(handle, MigHandle):
            raise error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mig = self._mig(handle)
        attributes = pynvml.c_nvmlDeviceAttributes()
        attributes.gpuInstanceSliceCount = mig.slices
        attributes.computeInstanceSliceCount = mig.compute_slices or mig.slices
        attributes.multiprocessorCount = 14 * (mig.compute_slices or mig.slices)
        attributes.memorySizeMB = mig.memory_mb
        return attributes

    def nvmlDeviceGetProcessUtilization(self, handle: int, timestamp: int) -> list:
        gpu = self._gpu(handle)
        if gpu.process_sm is None or gpu.mig_mode:
            raise error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        now = timestamp + 1_000_000
        samples = []
        for pid, percent in gpu.process_sm.items():
            sample = pynvml.c_nvmlProcessUtilizationSample_t()
            sample.pid, sample.timeStamp, sample.smUtil = pid, now, percent
            samples.append(sample)
        if not samples:
            raise error(pynvml.NVML_ERROR_NOT_FOUND)  # no process sampled since `timestamp`
        return samples

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._gpu(handle).temperature

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        gpu = self._gpu(handle)
        if gpu.power_mw is None:
            raise error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.power_mw

    def nvmlDeviceGetComputeRunningProcesses(
        self, handle: int | MigHandle
    ) -> list[SimpleNamespace]:
        if isinstance(handle, MigHandle):
            processes = self._mig(handle).processes
        else:
            processes = self._gpu(handle).processes
        return [SimpleNamespace(pid=pid, usedGpuMemory=0) for pid in processes]

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
