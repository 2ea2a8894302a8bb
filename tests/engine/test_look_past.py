"""What a hub looks past (c.GPUSpawner.ignore_gpu_containers): a monitoring exporter, a
neighbour hub's servers, never one of its own."""

import pytest

from gpuspawner.core.reach import Reach
from gpuspawner.engine.base import LookPast, Seen, ServerLabels

LOOK_PAST = LookPast(("*/dcgm-exporter:*", "lab-*"), hub="jupyter")


@pytest.mark.parametrize(
    ("name", "image", "server_of", "skipped"),
    [
        ("exporter", "registry.example/nvidia/k8s/dcgm-exporter:3.3.5", None, True),  # by its image
        ("lab-train", "pytorch", None, True),  # by its name
        ("lab-alice", "notebook", "lab", True),  # another hub's server
        ("lab-alice", "notebook", "jupyter", False),  # this hub's own server: never
        ("lab-bob", "notebook", "", False),  # a server whose labels do not say whose
        ("train", "pytorch", None, False),  # named by no pattern
    ],
)
def test_only_what_the_admin_names_and_no_server_of_this_hub_is_looked_past(
    name, image, server_of, skipped
):
    assert LOOK_PAST(name, image, server_of) is skipped


def server(hub: str | None, problem: str | None = None) -> Seen:
    labels = None if hub is None else ServerLabels(hub, 7, 3, "alice", "", (), None, None)
    return Seen("c1", "lab-alice", "notebook", True, Reach(), labels, problem)


def test_a_container_read_back_is_looked_past_by_the_same_rule():
    assert LOOK_PAST.skips(server("lab"))
    assert not LOOK_PAST.skips(server("jupyter"))
    assert not LOOK_PAST.skips(server(None, problem="gpuspawner.spawner-id is not a number"))
    assert not LookPast().skips(server("lab"))  # no patterns: nothing
