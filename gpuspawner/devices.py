"""What GPUs this machine has: NVML on a GPU server, a simulated set elsewhere.

Discovery sits behind one small interface (`GPUSource`) so the pool never
knows which it got. Devices are named by UUID; NVML indices can change
across reboots and are shown for people only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import pynvml

log = logging.getLogger("gpuspawner")


@dataclass(frozen=True)
class GPU:
    uuid: str
    index: int
    model: str
    memory_total_bytes: int

    @property
    def memory_gib(self) -> int:
        return round(self.memory_total_bytes / 2**30)

    @property
    def label(self) -> str:
        return f"{self.model} · {self.memory_gib} GiB"


@dataclass(frozen=True)
class Telemetry:
    """One sample of a GPU. None where the driver does not report a value.

    `health` is None for a healthy GPU, else why it must not be handed out.
    """

    utilization_percent: float | None = None
    memory_used_bytes: int | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None
    processes: tuple[int, ...] = ()
    health: str | None = None


class GPUSource(Protocol):
    """Where the inventory and the telemetry come from."""

    def list_gpus(self) -> list[GPU]: ...

    def sample(self, uuids: Sequence[str]) -> dict[str, Telemetry]: ...


class NoGPUSourceError(RuntimeError):
    """Neither NVML nor simulated GPUs are available: the hub must not start."""


# Errors for a value this GPU or driver does not report: the value stays None.
UNREPORTED = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_NoPermission)

# XIDs that report an application's own fault, not the GPU's (as NVIDIA's device plugin).
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})

_READINGS: dict[str, Callable[[Any, Any], Any]] = {
    "utilization_percent": lambda nvml, h: float(nvml.nvmlDeviceGetUtilizationRates(h).gpu),
    "memory_used_bytes": lambda nvml, h: int(nvml.nvmlDeviceGetMemoryInfo(h).used),
    "temperature_celsius": lambda nvml, h: float(
        nvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
    ),
    "power_watts": lambda nvml, h: nvml.nvmlDeviceGetPowerUsage(h) / 1000,
    "processes": lambda nvml, h: tuple(p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(h)),
}


class NvmlSource:
    """GPUs as the NVIDIA driver reports them, through NVML (nvidia-ml-py).

    Health follows NVML on every sample: a GPU that is lost, needs a reset,
    has uncorrectable ECC errors or pending page retirement is unhealthy
    until NVML reports otherwise. A critical XID event keeps it unhealthy
    until the hub restarts, since NVML never reports such a GPU mended.
    """

    def __init__(self, nvml: Any = pynvml) -> None:
        self._nvml = nvml
        self._lock = threading.Lock()
        self._initialised = False
        self._events: Any = None
        self._critical_xids: dict[str, int] = {}

    def _init(self) -> None:
        with self._lock:
            if not self._initialised:
                self._nvml.nvmlInit()
                self._initialised = True
                self._events = self._watch_xids()

    def _watch_xids(self) -> Any:
        nvml = self._nvml
        try:
            events = nvml.nvmlEventSetCreate()
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
        except pynvml.NVMLError:
            return None  # not supported here (e.g. some vGPU or WSL drivers): no XID watch
        return events

    def sample(self, uuids: Sequence[str]) -> dict[str, Telemetry]:
        self._init()
        self._drain_xid_events()
        return {uuid: self._sample_one(uuid) for uuid in uuids}

    def _drain_xid_events(self) -> None:
        while self._events is not None:
            try:
                event = self._nvml.nvmlEventSetWait(self._events, 0)
            except pynvml.NVMLError:
                return  # Timeout: nothing pending
            xid = int(event.eventData)
            if xid not in APPLICATION_XIDS:
                self._critical_xids[_text(self._nvml.nvmlDeviceGetUUID(event.device))] = xid

    def _sample_one(self, uuid: str) -> Telemetry:
        nvml = self._nvml
        values: dict[str, Any] = {}
        try:
            handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
            for name, read in _READINGS.items():
                with contextlib.suppress(*UNREPORTED):
                    values[name] = read(nvml, handle)
            health = self._health(handle)
        except pynvml.NVMLError as error:
            health = _health_from_error(error)
        if uuid in self._critical_xids:
            health = health or f"critical XID {self._critical_xids[uuid]} reported"
        return Telemetry(**values, health=health)

    def _health(self, handle: Any) -> str | None:
        nvml = self._nvml
        try:
            ecc = nvml.nvmlDeviceGetTotalEccErrors(
                handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
            )
            if ecc:
                return f"{ecc} uncorrectable ECC error(s)"
        except pynvml.NVMLError_NotSupported:
            pass
        try:
            pending = nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)
            if pending == pynvml.NVML_FEATURE_ENABLED:
                return "memory page retirement pending: reset the GPU"
        except pynvml.NVMLError_NotSupported:
            pass
        return None

    def list_gpus(self) -> list[GPU]:
        try:
            self._init()
        except pynvml.NVMLError as error:
            raise NoGPUSourceError(
                f"No GPUs found: NVML could not start ({error}). Install the NVIDIA driver "
                "(nvidia-smi must work), or set c.GPUSpawner.simulate_gpus = N to run "
                "on N simulated GPUs."
            ) from error
        nvml = self._nvml
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                gpus.append(
                    GPU(
                        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                        index=index,
                        model=_text(nvml.nvmlDeviceGetName(handle)),
                        memory_total_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                    )
                )
            except pynvml.NVMLError as error:
                # Without a UUID it cannot be named, so it cannot be handed out either.
                log.warning("GPU %d left out of the pool: NVML says %s", index, error)
        return gpus


class SimulatedSource:
    """N GPUs that look real: stable UUIDs, an H100's name and memory.

    They idle at 0 % unless `load_file` says otherwise: a JSON object from
    UUID or index to any of utilization_percent, memory_used_gib,
    temperature_celsius, power_watts, processes (a list of PIDs) and health,
    so demos and tests can make a GPU look busy, hot or broken.
    """

    MODEL = "NVIDIA H100 80GB HBM3"
    MEMORY_BYTES = 80 * 2**30
    IDLE = Telemetry(0.0, 0, 34.0, 70.0)

    def __init__(self, count: int, seed: str = "gpuspawner", load_file: str = "") -> None:
        self.count = count
        self.seed = seed
        self.load_file = load_file

    def list_gpus(self) -> list[GPU]:
        return [GPU(self.uuid(i), i, self.MODEL, self.MEMORY_BYTES) for i in range(self.count)]

    def uuid(self, index: int) -> str:
        digest = hashlib.sha256(f"{self.seed}:{index}".encode()).hexdigest()
        return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"

    def sample(self, uuids: Sequence[str]) -> dict[str, Telemetry]:
        loads = self._loads()
        index = {self.uuid(i): str(i) for i in range(self.count)}
        samples = {}
        for uuid in uuids:
            load = loads.get(uuid) or loads.get(index.get(uuid, "")) or {}
            changes: dict[str, Any] = {k: v for k, v in load.items() if k in _SIMULATED_FIELDS}
            if "memory_used_gib" in load:
                changes["memory_used_bytes"] = int(load["memory_used_gib"] * 2**30)
            changes["processes"] = tuple(load.get("processes", ()))
            samples[uuid] = replace(self.IDLE, **changes)
        return samples

    def _loads(self) -> dict[str, Any]:
        if not self.load_file:
            return {}
        try:
            loads = json.loads(Path(self.load_file).read_text())
        except (OSError, ValueError):
            return {}
        return loads if isinstance(loads, dict) else {}


_SIMULATED_FIELDS = {"utilization_percent", "temperature_celsius", "power_watts", "health"}


def discover(source: GPUSource, exclude: Iterable[str | int] = ()) -> tuple[list[GPU], list[GPU]]:
    """The GPUs for the pool, and those the admin excluded (by UUID or index)."""
    gpus = source.list_gpus()
    excluded_keys = {str(key) for key in exclude}
    unknown = excluded_keys - {g.uuid for g in gpus} - {str(g.index) for g in gpus}
    if unknown:
        raise ValueError(
            f"c.GPUSpawner.exclude_gpus names GPUs this machine does not have: "
            f"{', '.join(sorted(unknown))}. Known: "
            f"{', '.join(f'{g.index}={g.uuid}' for g in gpus) or 'none'}"
        )
    kept = [g for g in gpus if g.uuid not in excluded_keys and str(g.index) not in excluded_keys]
    excluded = [g for g in gpus if g not in kept]
    return kept, excluded


def describe(gpus: Sequence[GPU]) -> str:
    """ "2 × NVIDIA H100 80GB HBM3 · 80 GiB" for logs, progress and the form."""
    if not gpus:
        return "no GPU"
    return f"{len(gpus)} × {' + '.join(sorted({g.label for g in gpus}))}"


def _health_from_error(error: Exception) -> str | None:
    """An NVML error that says the GPU itself is broken, in words; None for other errors."""
    if isinstance(error, pynvml.NVMLError_GpuIsLost):
        return "lost: the GPU has fallen off the bus"
    if isinstance(error, pynvml.NVMLError_ResetRequired):
        return "needs a reset"
    if isinstance(error, pynvml.NVMLError_NotFound):
        return "not found by the driver"
    return None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
