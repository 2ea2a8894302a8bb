"""The GPUs of a Docker Swarm's nodes, as each node advertises them to the manager.

The hub runs beside a manager, not on the GPU servers, so NVML on the hub's
host sees none of them. What the manager can read of a node is what its
dockerd advertises: the GPUs in daemon.json's `node-generic-resources`
("NVIDIA-GPU=GPU-…", as NVIDIA's Swarm guide sets them up; gpuspawner reads
them as an inventory and never asks Swarm to schedule them), and the node's
labels. Model and memory are not advertised: an admin gives them as node labels
(`docker node update --label-add gpuspawner.gpu-model="NVIDIA A100-SXM4-80GB"
--label-add gpuspawner.gpu-memory=80G`), or the GPUs are listed as "NVIDIA GPU"
of unknown memory (0), which profiles asking for memory then never match.

Telemetry is not read from afar: each GPU's sample is "unknown" (no
utilisation, never marked unhealthy), so GPU-aware culling falls back to
JupyterHub's own activity on a swarm.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from ..core.errors import InventoryConfigError
from ..core.gpus import GPU, Telemetry
from ..core.placement import Topology
from ..core.units import parse_memory

MODEL_LABEL = "gpuspawner.gpu-model"
MEMORY_LABEL = "gpuspawner.gpu-memory"
UNKNOWN_MODEL = "NVIDIA GPU"


class AdvertisingNode(Protocol):
    """A node as the manager reports it (engine.swarm.SwarmNode)."""

    @property
    def hostname(self) -> str: ...

    @property
    def gpus(self) -> tuple[str, ...]: ...

    @property
    def labels(self) -> Mapping[str, str]: ...


class SwarmSource:
    """Every node's advertised GPUs, each on its node (`GPU.node`, the node's hostname),
    indexed in the order the node lists them (daemon.json's, which NVIDIA's guide writes
    in nvidia-smi's order)."""

    def __init__(self, nodes: Callable[[], Iterable[AdvertisingNode]]) -> None:
        self.nodes = nodes  # blocking: asks the manager

    def list_gpus(self) -> list[GPU]:
        found = []
        for node in sorted(self.nodes(), key=lambda n: n.hostname):
            model, memory = _described(node)
            found += [
                GPU(uuid, index, model, memory, node=node.hostname)
                for index, uuid in enumerate(node.gpus)
            ]
        return found

    def topology(self, gpus: Sequence[GPU]) -> Topology:
        """Without wiring from afar: blocks by index, within each node (a grant never spans
        nodes, so pairs across them are never weighed)."""
        return Topology.by_index({g.uuid: g.index for g in gpus})

    def sample(self, uuids: Sequence[str]) -> dict[str, Telemetry]:
        return {uuid: Telemetry() for uuid in uuids}


def _described(node: AdvertisingNode) -> tuple[str, int]:
    labels = node.labels
    where = f"node {node.hostname}'s label {MEMORY_LABEL}"
    memory = parse_memory(labels.get(MEMORY_LABEL, 0), where, InventoryConfigError)
    return labels.get(MODEL_LABEL) or UNKNOWN_MODEL, memory
