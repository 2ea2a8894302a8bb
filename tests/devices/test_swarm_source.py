"""The GPUs of a swarm's nodes as the manager sees them: each node's advertised UUIDs, on
that node, with the model and memory its labels give; and which of them a container on a
node reaches."""

from dataclasses import dataclass, field

import pytest

from gpuspawner.core.errors import InventoryConfigError
from gpuspawner.core.reach import from_count, from_ids
from gpuspawner.devices.source import discover
from gpuspawner.devices.swarm import SwarmSource


@dataclass(frozen=True)
class Node:
    hostname: str
    gpus: tuple[str, ...]
    labels: dict[str, str] = field(default_factory=dict)


NODES = [
    Node(
        "b",
        ("GPU-b0", "GPU-b1"),
        {"gpuspawner.gpu-model": "NVIDIA A100", "gpuspawner.gpu-memory": "40G"},
    ),
    Node("a", ("GPU-a0", "GPU-a1")),
    Node("cpu", ()),
]


def test_each_gpu_is_on_its_node_indexed_in_the_nodes_own_order():
    gpus = SwarmSource(lambda: NODES).list_gpus()
    assert [(g.node, g.index, g.uuid) for g in gpus] == [
        ("a", 0, "GPU-a0"),
        ("a", 1, "GPU-a1"),
        ("b", 0, "GPU-b0"),
        ("b", 1, "GPU-b1"),
    ]
    assert {(g.node, g.model, g.memory_gib) for g in gpus} == {
        ("a", "NVIDIA GPU", 0),
        ("b", "NVIDIA A100", 40),
    }
    # what the form says of them: no "0 GiB" where the memory is not known
    assert {g.label for g in gpus} == {"NVIDIA GPU", "NVIDIA A100 · 40 GiB"}
    assert {u.label for u in discover(SwarmSource(lambda: NODES)).units} == {g.label for g in gpus}


def test_a_memory_label_that_is_no_size_is_refused_naming_the_node():
    odd = Node("c", ("GPU-c0",), {"gpuspawner.gpu-memory": "lots"})
    with pytest.raises(InventoryConfigError, match=r"node c's label gpuspawner\.gpu-memory"):
        SwarmSource(lambda: [odd]).list_gpus()


def test_no_telemetry_from_afar_reads_as_unknown():
    sample = SwarmSource(lambda: NODES).sample(["GPU-a0"])["GPU-a0"]
    assert sample.utilization_percent is None and sample.health is None


@pytest.mark.parametrize(
    ("reach", "node", "reached"),
    [
        (from_ids(["1"]), "b", {"GPU-b1"}),  # an index is the node's own
        (from_count(1), "a", {"GPU-a0"}),
        (from_ids(["all"]), "a", {"GPU-a0", "GPU-a1"}),  # all: of its node only
        (from_ids(["GPU-b0"]), "b", {"GPU-b0"}),
        (from_ids(["0"]), "", {"GPU-a0", "GPU-b0"}),  # a task not yet on a node: on any
        (from_ids(["GPU-zz"]), "a", {"GPU-a0", "GPU-a1"}),  # unknown there: the worst
        (from_ids(["all"]), "cpu", set()),  # a machine without GPUs: none of the others'
    ],
)
def test_a_container_reaches_gpus_on_its_own_node(reach, node, reached):
    inventory = discover(SwarmSource(lambda: NODES))
    assert inventory.reached(reach, node) == reached
