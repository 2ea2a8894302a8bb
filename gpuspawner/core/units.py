"""What the pool hands out: a whole GPU, one MIG instance, or one slot of a shared GPU.

The books used to know one thing, a GPU's UUID. A `Unit` is whatever one
server can be given, with what each part of gpuspawner needs to know of it:

- `id`, the books' key: the GPU's or MIG instance's UUID; a shared GPU's slot
  is its GPU's UUID and the slot number (`GPU-…#2`), since the device request
  cannot say which slot a container holds (the container's labels do);
- `device`, what Docker is asked for: the GPU or MIG UUID (every slot of a
  shared GPU gives the same GPU UUID);
- `gpu`, the physical GPU it lives on: its health, its wiring, and whether
  some other container reaches it;
- `weight`, in GPU-equivalents, which is what limits count: a whole GPU 1, a
  MIG instance its share of its GPU's compute slices (1g.10gb on an A100: 1/7),
  a shared slot 1/slots;
- `node`, the machine its GPU is in, where one pool spans several ("" on a
  single host): one server's units all come from one node.

Which kind a GPU gives is the machine's and the admin's word, never
gpuspawner's: a GPU in MIG mode gives the instances an admin made
(nvidia-smi mig, nvidia-mig-parted); a GPU the admin lists in `shared_gpus`
gives its slots; every other GPU is handed out whole.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from .errors import InventoryConfigError
from .gpus import GPU
from .kinds import Kind as Kind  # imported from here, as before core/kinds.py
from .words import amount, count_gpus, gib, with_memory

SLOT_MARK = "#"
NO_ISOLATION = "shares the GPU and its memory with the other servers on it: no memory isolation"
MIG_PROFILE = re.compile(r"^(\d+c\.)?\d+g\.\d+gb(\+[a-z0-9,]+)?$")
MEMORY = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?$", re.IGNORECASE)
MEMORY_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


@dataclass(frozen=True)
class Unit:
    id: str
    device: str
    gpu: str
    index: int  # the GPU's NVML index
    model: str  # the GPU's model
    memory_bytes: int  # a GPU's or MIG instance's own; a slot: its MPS cap, else its share
    kind: Kind = Kind.GPU
    weight: Fraction = Fraction(1)
    profile: str = ""  # a MIG instance's profile, such as 1g.10gb
    position: int = 0  # on its GPU: the MIG device index, or the slot number (from 1)
    slots: int = 0  # a shared GPU's number of slots
    mps_memory_limit: int = 0  # bytes each client of a shared GPU may pin, with MPS; 0: none
    node: str = ""  # its GPU's machine (`GPU.node`)

    @property
    def name(self) -> str:
        """ "GPU 0", "GPU 2 · MIG 1g.10gb #3", "GPU 3 · slot 2 of 4": a unit, for people."""
        if self.kind is Kind.MIG:
            return f"GPU {self.index} · MIG {self.profile} #{self.position}"
        if self.kind is Kind.SHARED:
            return f"GPU {self.index} · slot {self.position} of {self.slots}"
        return f"GPU {self.index}"

    @property
    def label(self) -> str:
        """What a server gets, in words: model, kind and memory."""
        if self.kind is Kind.MIG:
            return f"MIG {self.profile} · {gib(self.memory_bytes)} GiB of {self.model}"
        if self.kind is Kind.SHARED:
            return f"1 of {self.slots} slots of {self.model} (shared)"
        return with_memory(self.model, self.memory_bytes)

    @property
    def free_of_its_kind(self) -> str:
        """What the spawn form's counts of such units say: "MIG 1g.10gb instances free · …"."""
        if self.kind is Kind.MIG:
            return (
                f"MIG {self.profile} instances free · {gib(self.memory_bytes)} GiB each, "
                f"{amount(self.weight)} of {self.model}"
            )
        if self.kind is Kind.SHARED:
            return (
                f"shared GPU slots free · {self.model}, used by up to {self.slots} servers at "
                "once (no memory isolation)"
            )
        return f"GPUs free · {self.label}"

    @property
    def held_as(self) -> str:
        """Which device a server holds, for its user: a shared GPU's slot names its slot."""
        if self.kind is Kind.SHARED:
            return f"{self.device} (slot {self.position} of {self.slots})"
        return self.device

    def column(self, where: str) -> str:
        """`gpuspawner status`'s GPU column: "0", "2 MIG 1g.10gb #3", "3 slot 2/4", where
        `where` is its GPU's index (on a swarm, "n2:0")."""
        if self.kind is Kind.MIG:
            number = f" #{self.position}" if self.id != self.gpu else ""
            return f"{where} MIG {self.profile}{number}"
        if self.kind is Kind.SHARED:
            return f"{where} slot {self.position}/{self.slots}"
        return where


def units_in_words(units: Sequence[Unit]) -> str:
    """ "2 × NVIDIA H100 80GB HBM3 · 80 GiB", "1 × MIG 1g.10gb · 10 GiB of …": what a
    server got, for logs and progress."""
    if not units:
        return "no GPU"
    return f"{len(units)} × {' + '.join(sorted({u.label for u in units}))}"


def tally(units: Sequence[Unit]) -> str:
    """ "2 × NVIDIA H100 80GB HBM3 · 80 GiB, 7 × MIG 1g.10gb · 10 GiB of …": what a pool
    holds, kind by kind and model by model."""
    counts: dict[str, int] = {}
    for unit in units:
        counts[unit.label] = counts.get(unit.label, 0) + 1
    return ", ".join(f"{n} × {label}" for label, n in counts.items()) or "nothing"


def bare(uuid: str, index: int = 0) -> Unit:
    """A whole GPU known only by its UUID (and index): for pools built from UUIDs alone."""
    return Unit(uuid, uuid, uuid, index, "", 0)


def whole(gpu: GPU) -> Unit:
    return Unit(
        gpu.uuid, gpu.uuid, gpu.uuid, gpu.index, gpu.model, gpu.memory_total_bytes, node=gpu.node
    )


@dataclass(frozen=True)
class Sharing:
    """An admin's word that a GPU is shared: by how many servers, and each one's MPS memory cap."""

    slots: int
    mps_memory_limit: int = 0


def units_of(gpu: GPU, sharing: Sharing | None = None) -> tuple[Unit, ...]:
    """What one GPU gives: its MIG instances in MIG mode, else its slots if shared, else itself."""
    if gpu.mig_mode:
        return tuple(
            Unit(
                id=mig.uuid,
                device=mig.uuid,
                gpu=gpu.uuid,
                index=gpu.index,
                model=gpu.model,
                memory_bytes=mig.memory_total_bytes,
                kind=Kind.MIG,
                weight=Fraction(mig.slices, max(mig.gpu_slices, mig.slices, 1)),
                profile=mig.profile,
                position=mig.position,
                node=gpu.node,
            )
            for mig in gpu.mig
        )
    if sharing is not None:
        share = sharing.mps_memory_limit or gpu.memory_total_bytes // sharing.slots
        return tuple(
            Unit(
                id=f"{gpu.uuid}{SLOT_MARK}{slot}",
                device=gpu.uuid,
                gpu=gpu.uuid,
                index=gpu.index,
                model=gpu.model,
                memory_bytes=share,
                kind=Kind.SHARED,
                weight=Fraction(1, sharing.slots),
                position=slot,
                slots=sharing.slots,
                mps_memory_limit=sharing.mps_memory_limit,
                node=gpu.node,
            )
            for slot in range(1, sharing.slots + 1)
        )
    return (whole(gpu),)


def all_units(gpus: Iterable[GPU], shared: Mapping[str, Sharing]) -> list[Unit]:
    return [unit for gpu in gpus for unit in units_of(gpu, shared.get(gpu.uuid))]


@dataclass(frozen=True)
class Request:
    """What a profile asks the pool for: whole GPUs, one MIG instance, or one shared slot,
    of a model (a shell-style pattern, case-insensitive) and with at least some memory, on
    one of some machines (`nodes`; None: any)."""

    gpus: int = 0
    mig_profile: str = ""
    shared: bool = False
    gpu_model: str = ""
    min_gpu_memory: int = 0
    not_on: frozenset[str] = frozenset()  # units it must leave (kept for a waiting head)
    nodes: frozenset[str] | None = None
    turns: bool = False  # one whole GPU it may share in turns with one other person

    @property
    def kind(self) -> Kind | None:
        """None for a CPU-only server."""
        if self.mig_profile:
            return Kind.MIG
        if self.shared:
            return Kind.SHARED
        return Kind.GPU if self.gpus else None

    @property
    def in_turns(self) -> bool:
        """One whole GPU, which a person's server may share in turns with one other."""
        return self.turns and self.kind is Kind.GPU and self.gpus == 1

    @property
    def count(self) -> int:
        """How many units: whole GPUs as asked, one MIG instance or slot, none for CPU only."""
        return self.gpus if self.kind is Kind.GPU else int(self.kind is not None)

    def matches(self, unit: Unit) -> bool:
        if unit.kind is not self.kind or unit.memory_bytes < self.min_gpu_memory:
            return False
        if unit.id in self.not_on or (self.nodes is not None and unit.node not in self.nodes):
            return False
        if self.kind is Kind.MIG and unit.profile != self.mig_profile:
            return False
        return not self.gpu_model or fnmatch.fnmatchcase(unit.model.lower(), self.gpu_model.lower())

    def only_on(self, nodes: Collection[str] | None) -> Request:
        """The same request, placed only where `nodes` allows too (None: anywhere): a
        profile's machines and a group's both apply."""
        if nodes is None:
            return self
        allowed = frozenset(nodes)
        return replace(self, nodes=allowed if self.nodes is None else self.nodes & allowed)

    def hardware(self, units: Sequence[Unit]) -> str:
        """What a profile gets, in words: the models (and kinds) of `units` that could
        serve it."""
        if self.kind is None:
            return "no GPU"
        labels = " or ".join(dict.fromkeys(u.label for u in units if self.matches(u)))
        if self.kind is Kind.GPU:
            return f"{self.gpus} × {labels} each"
        if self.kind is Kind.SHARED:
            return f"{labels}: {NO_ISOLATION}"
        return labels

    @property
    def what(self) -> str:
        """ "2 GPUs", "a MIG instance 1g.10gb", "a shared GPU slot", with any model and memory."""
        if self.kind is Kind.MIG:
            what = f"a MIG instance {self.mig_profile}"
        elif self.kind is Kind.SHARED:
            what = "a shared GPU slot"
        else:
            what = count_gpus(self.gpus)
        return what + self._filters()

    @property
    def plain(self) -> bool:
        """Whole GPUs of any model: what every profile asked for before MIG and sharing."""
        return self.kind is Kind.GPU and not self._filters()

    @property
    def needs(self) -> str:
        """What a refusal says it needs: the bare count for plain whole GPUs ("needs 2")."""
        return str(self.gpus) if self.plain else self.what

    def _filters(self) -> str:
        parts = []
        if self.gpu_model:
            parts.append(f"model {self.gpu_model}")
        if self.min_gpu_memory:
            parts.append(f"at least {gib(self.min_gpu_memory)} GiB")
        return f" ({', '.join(parts)})" if parts else ""


def parse_memory(value: Any, where: str, error: type[ValueError]) -> int:
    """Bytes from a number of bytes or text such as "40G" (K, M, G, T: powers of 1024, as
    DockerSpawner's mem_limit; "40GB" and "40GiB" mean the same)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    found = MEMORY.match(value.strip()) if isinstance(value, str) else None
    if found is None:
        raise error(f"{where} must be memory such as '40G' (or a number of bytes), got {value!r}")
    return int(float(found.group(1)) * MEMORY_UNITS[found.group(2).lower()])


def parse_shared(raw: Any, gpus: Sequence[GPU]) -> dict[str, Sharing]:
    """c.GPUSpawner.shared_gpus, checked against the machine: GPU UUID → its sharing.

    Each key is a GPU's index or UUID; each value its number of slots, or a dict
    with `slots` and `mps_memory_limit` (for sites that run NVIDIA MPS).
    """
    where = "c.GPUSpawner.shared_gpus"
    if not isinstance(raw, Mapping):
        raise InventoryConfigError(f"{where} must be a dict of GPU (index or UUID) → slots")
    found = {g.uuid: g for g in gpus} | {str(g.index): g for g in gpus}
    shared: dict[str, Sharing] = {}
    for key, value in raw.items():
        gpu = found.get(str(key))
        if gpu is None:
            raise InventoryConfigError(
                f"{where} names GPU {key!r}, which this machine does not have. Known: "
                f"{', '.join(f'{g.index}={g.uuid}' for g in gpus) or 'none'}"
            )
        here = f"{where}[{key!r}]"
        if gpu.mig_mode:
            raise InventoryConfigError(
                f"{here}: GPU {gpu.index} is in MIG mode, so it is handed out instance by "
                "instance; remove it here, or turn MIG mode off to share it whole"
            )
        if gpu.uuid in shared:
            raise InventoryConfigError(f"{here}: GPU {gpu.index} is listed twice")
        shared[gpu.uuid] = _sharing(value, here, gpu)
    return shared


def _sharing(value: Any, where: str, gpu: GPU) -> Sharing:
    if isinstance(value, Mapping):
        unknown = set(value) - {"slots", "mps_memory_limit"}
        if unknown:
            raise InventoryConfigError(
                f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
                "known keys: slots, mps_memory_limit"
            )
        slots, limit = value.get("slots"), value.get("mps_memory_limit", 0)
    else:
        slots, limit = value, 0
    if isinstance(slots, bool) or not isinstance(slots, int) or not 2 <= slots <= 64:
        raise InventoryConfigError(
            f"{where}: slots must be a whole number from 2 to 64 (servers using the GPU at "
            f"once), got {slots!r}"
        )
    memory = parse_memory(limit, f"{where}['mps_memory_limit']", InventoryConfigError)
    if memory > gpu.memory_total_bytes:
        raise InventoryConfigError(
            f"{where}: mps_memory_limit {gib(memory)} GiB is more than GPU {gpu.index} has "
            f"({gib(gpu.memory_total_bytes)} GiB)"
        )
    return Sharing(slots, memory)


def mig_profile_name(
    compute_slices: int, instance_slices: int, memory_mib: int, gpu_memory: int
) -> str:
    """A MIG instance's profile name, as nvidia-smi spells it, from what NVML reports.

    The memory in the name is the instance's share of the board, rounded up to an
    eighth, times the board's GiB, rounded: a 1-slice A100 80GB instance holds
    9728 MiB, which the name calls 10gb; an A100 40GB's holds 4864 MiB: 5gb.
    """
    board_gib = -(-gpu_memory // 2**30)
    eighths = -(-memory_mib * 2**20 * 8 // max(gpu_memory, 1))
    size = math.floor(Fraction(eighths * board_gib, 8) + Fraction(1, 2))
    name = f"{instance_slices}g.{size}gb"
    return name if compute_slices == instance_slices else f"{compute_slices}c.{name}"
