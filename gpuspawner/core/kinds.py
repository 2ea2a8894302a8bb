"""The kinds of unit the pool hands out, and what the rest of gpuspawner needs to know of each.

A whole GPU, a MIG instance, a shared GPU's slot. Which kind a GPU gives is the
machine's and the admin's word (`units.units_of`). A new kind is a member of `Kind`,
a row of `KIND_FACTS`, and its words in `units` (`Unit.name`, `Unit.label`,
`Unit.free_of_its_kind`, `Unit.held_as`, `Unit.column`, `Request.what`,
`Request.hardware`); `tests/core/test_units.py` fails for a kind without its row.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True)
class KindFacts:
    """What the rest of gpuspawner needs to know of one kind of unit: a new kind is one row
    of `KIND_FACTS` (and its words in `Unit.name`, `Unit.label` and `Request.what`)."""

    noun: str  # one unit, in a waiting start's words: "2 GPUs free up", "a MIG instance …"
    plural: str  # many, in a pool's summary
    whole: bool  # a whole GPU: asked for by count, placed by how the GPUs are wired
    own_memory: bool  # its memory is its own (a MIG instance's), not its whole GPU's
    shares_gpu: bool  # several servers run on its GPU at once: busy by its own processes,
    # and a container that reaches the GPU holds it only where its labels say so
    to_have_some: str  # what an admin does to have units of this kind in the pool


class Kind(StrEnum):
    GPU = "gpu"  # a whole GPU, for one server alone
    MIG = "mig"  # one MIG instance, for one server alone
    SHARED = "shared"  # one slot of a GPU that several servers use at once

    @property
    def facts(self) -> KindFacts:
        return KIND_FACTS[self]

    @property
    def held_by_reach(self) -> bool:
        """Whether a container that reaches its device holds it: a whole GPU or a MIG instance,
        yes; a shared GPU's slot only when the server's labels name it."""
        return not self.facts.shares_gpu


KIND_FACTS = {
    Kind.GPU: KindFacts(
        "GPU", "whole GPUs", True, False, False, "change gpus, gpu_model or min_gpu_memory"
    ),
    Kind.MIG: KindFacts(
        "MIG instance",
        "MIG instances",
        False,
        True,
        False,
        "gpuspawner hands out the MIG instances it finds; make them (nvidia-smi mig or "
        "nvidia-mig-parted) or change mig_profile",
    ),
    Kind.SHARED: KindFacts(
        "shared slot",
        "shared slots",
        False,
        False,
        True,
        "mark a GPU as shared in c.GPUSpawner.shared_gpus",
    ),
}
