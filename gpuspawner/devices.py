"""What GPUs this machine has: NVML on a GPU server, a simulated set elsewhere.

Discovery sits behind one small interface (`GPUSource`) so the pool never
knows which it got. Devices are named by UUID; NVML indices can change
across reboots and are shown for people only.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import pynvml


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


class GPUSource(Protocol):
    """Where the inventory comes from."""

    def list_gpus(self) -> list[GPU]: ...


class NoGPUSourceError(RuntimeError):
    """Neither NVML nor simulated GPUs are available: the hub must not start."""


class NvmlSource:
    """GPUs as the NVIDIA driver reports them, through NVML (nvidia-ml-py)."""

    def __init__(self, nvml=pynvml) -> None:
        self._nvml = nvml
        self._lock = threading.Lock()
        self._initialised = False

    def _init(self) -> None:
        with self._lock:
            if not self._initialised:
                self._nvml.nvmlInit()
                self._initialised = True

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
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            gpus.append(
                GPU(
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    index=index,
                    model=_text(nvml.nvmlDeviceGetName(handle)),
                    memory_total_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                )
            )
        return gpus


class SimulatedSource:
    """N GPUs that look real: stable UUIDs, an H100's name and memory."""

    MODEL = "NVIDIA H100 80GB HBM3"
    MEMORY_BYTES = 80 * 2**30

    def __init__(self, count: int, seed: str = "gpuspawner") -> None:
        self.count = count
        self.seed = seed

    def list_gpus(self) -> list[GPU]:
        return [GPU(self.uuid(i), i, self.MODEL, self.MEMORY_BYTES) for i in range(self.count)]

    def uuid(self, index: int) -> str:
        digest = hashlib.sha256(f"{self.seed}:{index}".encode()).hexdigest()
        return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


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


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
