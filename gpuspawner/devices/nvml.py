"""GPUs as the NVIDIA driver reports them, through NVML (nvidia-ml-py, imported as pynvml).

A GPU in MIG mode is listed with the MIG instances the driver reports on it
(their UUIDs `MIG-…`, profiles and memory); gpuspawner makes no MIG layout,
it follows the one it finds, each time it looks.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pynvml

from ..core.errors import GPUConfigError, NoGPUSourceError
from ..core.gpus import GPU, MigInstance, Telemetry
from ..core.placement import Topology
from ..core.units import mig_profile_name
from . import processes
from .checkpoint import HostOf, cuda_driver, on_this_host

SIMULATED_ONLY = (
    "c.GPUSpawner.checkpoint_driver = 'simulated' parks simulated GPUs' work only: set "
    "simulate_gpus or simulated_host, or checkpoint_driver = 'cuda'"
)

log = logging.getLogger("gpuspawner")

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

    names_only = False  # a device name the driver does not know may still reach a GPU

    def __init__(self, nvml: Any = pynvml) -> None:
        self._nvml = nvml
        self._lock = threading.Lock()
        self._initialised = False
        self._events: Any = None
        self._critical_xids: dict[str, int] = {}
        self._seen_until: dict[str, int] = {}  # per GPU: the last process sample read (µs)
        self._warned: set[str] = set()  # list_gpus runs every tick: each problem said once

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
            if uuid.startswith("MIG-"):
                return self._sample_mig(handle)
            for name, read in _READINGS.items():
                with contextlib.suppress(*UNREPORTED):
                    values[name] = read(nvml, handle)
            values["process_utilization"] = self._process_utilization(uuid, handle)
            health = self._health(handle)
        except pynvml.NVMLError as error:
            health = _health_from_error(error)
        if uuid in self._critical_xids:
            health = health or f"critical XID {self._critical_xids[uuid]} reported"
        return Telemetry(**values, health=health)

    def _sample_mig(self, handle: Any) -> Telemetry:
        """A MIG instance: its own memory and processes, its GPU's health.

        NVML reports no utilisation for a MIG instance. With no compute process
        on it, it is idle (0 %); with some, how busy it is stays unknown (None),
        so it neither counts as activity nor as idle.
        """
        nvml = self._nvml
        values: dict[str, Any] = {}
        for name in ("memory_used_bytes", "processes"):
            with contextlib.suppress(*UNREPORTED):
                values[name] = _READINGS[name](nvml, handle)
        if values.get("processes") == ():
            values["utilization_percent"] = 0.0
        gpu = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
        health = self._health(gpu)
        xid = self._critical_xids.get(_text(nvml.nvmlDeviceGetUUID(gpu)))
        if xid is not None:
            health = health or f"critical XID {xid} reported on its GPU"
        return Telemetry(**values, health=health)

    def _process_utilization(self, uuid: str, handle: Any) -> tuple[tuple[int, float], ...] | None:
        """Each process's share of the GPU since the last look (the most it was seen using);
        what tells the servers sharing one GPU apart. None where the GPU does not report it."""
        try:
            samples = self._nvml.nvmlDeviceGetProcessUtilization(
                handle, self._seen_until.get(uuid, 0)
            )
        except pynvml.NVMLError_NotFound:
            return ()  # no process used the GPU since the last look
        except pynvml.NVMLError:
            return None
        busiest: dict[int, float] = {}
        for sample in samples:
            busiest[int(sample.pid)] = max(busiest.get(int(sample.pid), 0.0), float(sample.smUtil))
            self._seen_until[uuid] = max(self._seen_until.get(uuid, 0), int(sample.timeStamp))
        return tuple(sorted(busiest.items()))

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

    def topology(self, gpus: Sequence[GPU]) -> Topology:
        """The GPUs' wiring as NVML reports it: NVLink, then the PCIe path between each pair.

        Where the driver reports no topology (some virtualised GPUs), neighbours
        by index are taken to share a switch, as on DGX/HGX boards.
        """
        self._init()
        try:
            handles = {g.uuid: self._nvml.nvmlDeviceGetHandleByUUID(g.uuid) for g in gpus}
            nvlinks = {uuid: self._nvlink_peers(handle) for uuid, handle in handles.items()}
            bus_ids = {
                uuid: _text(self._nvml.nvmlDeviceGetPciInfo(handle).busId).lower()
                for uuid, handle in handles.items()
            }
            levels = {
                (a, b): int(self._nvml.nvmlDeviceGetTopologyCommonAncestor(handles[a], handles[b]))
                for a in handles
                for b in handles
                if a < b
            }
        except pynvml.NVMLError as error:
            log.warning("gpuspawner: NVML reports no GPU topology (%s): placing by index", error)
            return Topology.by_index({g.uuid: g.index for g in gpus})

        def score(a: str, b: str) -> int:
            links = nvlinks[a].count(bus_ids[b]) + nvlinks[b].count(bus_ids[a])
            # Any NVLink beats any PCIe path; a nearer common PCIe ancestor beats a farther one.
            return links * 100 + (int(pynvml.NVML_TOPOLOGY_SYSTEM) - levels[min(a, b), max(a, b)])

        return Topology.from_scores([g.uuid for g in sorted(gpus, key=lambda g: g.index)], score)

    def _nvlink_peers(self, handle: Any) -> list[str]:
        """The PCI bus ids at the far end of each active NVLink of a GPU (one entry a link)."""
        peers = []
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                if self._nvml.nvmlDeviceGetNvLinkState(handle, link) != pynvml.NVML_FEATURE_ENABLED:
                    continue
                remote = self._nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
            except pynvml.NVMLError:
                break  # no such link (or no NVLink at all): the rest are missing too
            peers.append(_text(remote.busId).lower())
        return peers

    # --- its abilities on the seam (`source.GPUSource`) -----------------------------------
    def process_owners(self, pids: Iterable[int]) -> dict[int, str]:
        """The container of each GPU process: this host's /proc says."""
        return processes.owners(pids)

    def container_pids(self, containers: Mapping[str, Iterable[str]]) -> dict[str, list[int]]:
        return processes.container_pids(containers)

    def checkpoint_hosts(self, driver: str) -> HostOf:
        """The NVIDIA driver's checkpoint API, here ("auto" or "cuda"); GPUConfigError for
        the stand-in, which parks simulated GPUs' work only, or without the API."""
        if driver == "simulated":
            raise GPUConfigError(SIMULATED_ONLY)
        return on_this_host(cuda_driver(), self.container_pids)

    def on_nodes(self) -> None:
        """This host's GPUs: no nodes."""
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
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
                mig_mode, instances = self._mig(handle, index, memory)
                gpus.append(
                    GPU(
                        uuid=uuid,
                        index=index,
                        model=_text(nvml.nvmlDeviceGetName(handle)),
                        memory_total_bytes=memory,
                        mig_mode=mig_mode,
                        mig=instances,
                    )
                )
            except pynvml.NVMLError as error:
                # Without a UUID it cannot be named, so it cannot be handed out either.
                self._warn_once("GPU %d left out of the pool: NVML says %s", index, error)
        return gpus

    def _warn_once(self, message: str, *args: object) -> None:
        text = message % args
        if text not in self._warned:
            self._warned.add(text)
            log.warning(text)

    def _mig(self, handle: Any, index: int, memory: int) -> tuple[bool, tuple[MigInstance, ...]]:
        """Whether a GPU is in MIG mode, and the MIG instances on it now.

        A GPU without MIG answers NotSupported; an empty MIG index NotFound. The
        GPU's compute slices are as many as it may have MIG devices (7 on A100 and
        H100, 4 on A30). An instance NVML cannot describe is left out and named.
        """
        nvml = self._nvml
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except UNREPORTED:
            return False, ()
        if current != pynvml.NVML_DEVICE_MIG_ENABLE:
            return False, ()
        slices = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
        found = []
        for position in range(slices):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, position)
                attributes = nvml.nvmlDeviceGetAttributes(mig)
                compute = int(attributes.computeInstanceSliceCount)
                mib = int(attributes.memorySizeMB)
                found.append(
                    MigInstance(
                        uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
                        profile=mig_profile_name(
                            compute, int(attributes.gpuInstanceSliceCount), mib, memory
                        ),
                        memory_total_bytes=mib * 2**20,
                        slices=compute,
                        gpu_slices=slices,
                        position=position,
                    )
                )
            except pynvml.NVMLError_NotFound:
                continue  # no MIG device at this index
            except pynvml.NVMLError as error:
                self._warn_once(
                    "GPU %d: MIG device %d left out of the pool: NVML says %s",
                    index,
                    position,
                    error,
                )
        return True, tuple(found)


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
