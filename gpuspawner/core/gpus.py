"""GPUs as the books know them: plain data, whatever driver reported them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class GPU:
    """One device of the pool. Named by UUID: NVML indices can change across reboots."""

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


def gpus_in_words(gpus: Sequence[GPU]) -> str:
    """ "2 × NVIDIA H100 80GB HBM3 · 80 GiB" for logs, progress and the form."""
    if not gpus:
        return "no GPU"
    return f"{len(gpus)} × {' + '.join(sorted({g.label for g in gpus}))}"
