"""GPUs as the books know them: plain data, whatever driver reported them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .words import gib, with_memory


@dataclass(frozen=True)
class MigInstance:
    """A MIG device on a GPU in MIG mode, as the driver reports it: an admin made it
    (nvidia-smi mig, nvidia-mig-parted); gpuspawner only hands it out.

    `slices` is its share of the GPU's compute (its compute instance's slices) out of
    `gpu_slices` (7 on A100 and H100, 4 on A30); `position` is its MIG device index.
    """

    uuid: str
    profile: str
    memory_total_bytes: int
    slices: int
    gpu_slices: int
    position: int = 0


@dataclass(frozen=True)
class GPU:
    """One device of a machine. Named by UUID: NVML indices can change across reboots.

    `mig_mode` is on for a GPU split into MIG instances (`mig`, possibly none yet):
    such a GPU is handed out only instance by instance. `node` names its machine
    where one pool spans several (a Swarm node's name); "" on a single host.
    """

    uuid: str
    index: int
    model: str
    memory_total_bytes: int
    mig_mode: bool = False
    mig: tuple[MigInstance, ...] = ()
    node: str = ""

    @property
    def memory_gib(self) -> int:
        return gib(self.memory_total_bytes)

    @property
    def label(self) -> str:
        return with_memory(self.model, self.memory_total_bytes)


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
    # Per compute process, its share of the GPU's time (pid, percent); None: not reported.
    process_utilization: tuple[tuple[int, float], ...] | None = None


def gpus_in_words(gpus: Sequence[GPU]) -> str:
    """ "2 × NVIDIA H100 80GB HBM3 · 80 GiB" for logs, progress and the form."""
    if not gpus:
        return "no GPU"
    return f"{len(gpus)} × {' + '.join(sorted({g.label for g in gpus}))}"
