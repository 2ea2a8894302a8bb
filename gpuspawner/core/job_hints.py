"""Hints a researcher can act on, from what a running job's GPUs and CPUs show.

The two problems the team we build for meets most: a GPU that waits for its
data (mostly idle while the job's CPUs are saturated: the input pipeline is
the bottleneck), and GPU memory close to full (the next larger batch, or a
fragmenting allocator, runs out). Each hint names what it saw; none is given
without the numbers that say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MEMORY_NEARLY_FULL = 0.95  # of a GPU's memory in use
GPU_MOSTLY_IDLE = 30.0  # percent busy, the GPUs' mean
CPU_SATURATED = 0.9  # of the CPUs the job's container may use


@dataclass(frozen=True)
class GPUUse:
    """One of a running job's GPUs, as last sampled; None where not reported."""

    uuid: str
    utilization_percent: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None


def hints(gpus: Sequence[GPUUse], cpu_busy: float | None) -> list[str]:
    found = []
    for gpu in gpus:
        used, total = gpu.memory_used_bytes, gpu.memory_total_bytes
        if used is not None and total and used / total >= MEMORY_NEARLY_FULL:
            found.append(
                f"Close to out of memory: {gpu.uuid} has {used / total:.0%} of its memory in "
                "use (a smaller batch or mixed precision makes room)."
            )
    busy = [g.utilization_percent for g in gpus if g.utilization_percent is not None]
    if busy and cpu_busy is not None and cpu_busy >= CPU_SATURATED:
        mean = sum(busy) / len(busy)
        if mean < GPU_MOSTLY_IDLE:
            found.append(
                f"Your GPU waits for data loading: it is {mean:.0f} % busy while the job's CPUs "
                f"are {cpu_busy:.0%} busy (more data-loader workers, data on a local disk, or "
                "preprocessed data help)."
            )
    return found
