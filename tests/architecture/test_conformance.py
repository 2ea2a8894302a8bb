"""Every implementation and test double of a seam offers what its protocol states, at run
time too (conformance.py is mypy's check of the same pairs)."""

import pytest
from conformance import SEAMS

from gpuspawner.config.seams import missing

PAIRS = [(protocol, implementation) for protocol, found in SEAMS for implementation in found]


@pytest.mark.parametrize(
    ("protocol", "implementation"),
    PAIRS,
    ids=[f"{i.__name__}-is-a-{p.__name__}" for p, i in PAIRS],
)
def test_each_implementation_and_double_offers_all_its_seam_states(protocol, implementation):
    assert missing(implementation, protocol) == []


def test_the_check_finds_what_a_double_lacks():
    """As GoneEngine once lacked `stopped_since` and `cluster_nodes`, and nothing noticed."""
    from gpuspawner.engine.base import Engine

    class Partial:
        def containers(self, look_past=None):
            return []

        def unreachable(self):
            return {}

        def remove_server(self, hub, spawner_id):  # one parameter short
            return True

    assert missing(Partial, Engine) == [
        "stopped_since",
        "cluster_nodes",
        "remove_server(self, hub: 'str', spawner_id: 'int', container_ids: "
        "'tuple[str, ...]' = ()) -> 'bool'",
    ]


def test_every_seam_and_every_engine_and_source_in_the_package_is_in_the_list():
    from gpuspawner.devices import nvml, simulated, swarm
    from gpuspawner.engine import docker
    from gpuspawner.engine import swarm as swarm_engine

    listed = {i for _, found in SEAMS for i in found}
    assert {
        docker.DockerEngine,
        swarm_engine.SwarmEngine,
        nvml.NvmlSource,
        simulated.SimulatedSource,
        swarm.SwarmSource,
    } <= listed
