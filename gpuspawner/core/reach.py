"""Which GPUs a container can reach, from what it asked Docker for.

Docker gives GPUs in several forms: device IDs (UUIDs or NVML indices, one
per entry or comma-separated in one), a count (`--gpus 2`: the first two by
index, as Docker's nvidia driver writes NVIDIA_VISIBLE_DEVICES=0,1; `--gpus
all`: -1), CDI names (`nvidia.com/gpu=1`), an NVIDIA runtime reading the
container's NVIDIA_VISIBLE_DEVICES, or device nodes and privileged mode. A GPU
is free only when no container can reach it, so where it cannot be known which
GPUs a container reaches, it reaches them all — on a real machine. A simulated machine's
GPUs exist only by the names it gives them, so there a name it does not know is another
simulated machine's GPU, and reaches none of its own.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

NO_GPU_VALUES = frozenset({"", "void", "none"})  # NVIDIA_VISIBLE_DEVICES meaning no GPU


@dataclass(frozen=True)
class Reach:
    """GPUs a container can reach: named ones, the first `first` by index, or every one.

    Names are GPU or MIG UUIDs, NVML indices, or MIG devices by index ("2:1"), which
    count as their whole GPU: which instance such an index names is the toolkit's
    business, and a GPU is free only when no container can reach it.
    """

    ids: frozenset[str] = frozenset()
    first: int = 0
    every: bool = False

    def __bool__(self) -> bool:
        return self.every or self.first > 0 or bool(self.ids)

    def __or__(self, other: Reach) -> Reach:
        return Reach(self.ids | other.ids, max(self.first, other.first), self.every or other.every)

    def uuids(
        self, by_index: Mapping[str, str], known: Collection[str], names_only: bool = False
    ) -> frozenset[str]:
        """The UUIDs among `known`, with indices resolved by `by_index` (index text → UUID).
        `names_only`: the machine's GPUs are reached only by their own names (a simulated
        machine), so a name it does not know reaches none of them."""
        if self.every:
            return frozenset(known)
        found = {by_index[str(i)] for i in range(self.first) if str(i) in by_index}
        for device in self.ids:
            gpu, colon, instance = device.partition(":")
            if colon and gpu.isdigit() and instance.isdigit():
                device = gpu
            uuid = by_index.get(device, device)
            if uuid not in known and not device.isdigit() and not names_only:
                return frozenset(known)  # a name this host does not know: assume the worst
            found.add(uuid)
        return frozenset(u for u in found if u in known)


def from_ids(entries: Iterable[str]) -> Reach:
    """Device IDs as Docker or NVIDIA_VISIBLE_DEVICES list them; "all" means every GPU."""
    ids = {part.strip() for entry in entries for part in str(entry).split(",")}
    ids -= NO_GPU_VALUES
    if "all" in ids:
        return Reach(every=True)
    return Reach(frozenset(ids))


def from_count(count: int) -> Reach:
    """Docker's Count: -1 for every GPU, n for the first n by index."""
    return Reach(every=True) if count < 0 else Reach(first=count)


def from_cdi(names: Iterable[str]) -> Reach:
    """CDI device names: "nvidia.com/gpu=0", "nvidia.com/gpu=GPU-…", "nvidia.com/gpu=all"."""
    return from_ids(name.partition("=")[2] or name for name in names)
