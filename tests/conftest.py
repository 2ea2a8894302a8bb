from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from realhub import Hub


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "hub_factory" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.docker)


@pytest.fixture(scope="module")
def hub_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Hub]]:
    """Start real hubs for a test module; stop them and remove their containers after."""
    hubs: list[Hub] = []

    def make(config: str, start: bool = True) -> Hub:
        hub = Hub(tmp_path_factory.mktemp("hub"), config)
        hubs.append(hub)
        return hub.start() if start else hub

    yield make
    for hub in hubs:
        hub.stop()
        hub.remove_containers()


@pytest.fixture(scope="module")
def load_file(tmp_path_factory: pytest.TempPathFactory):
    """The simulated GPUs' load file (c.GPUSpawner.simulated_load_file): idle to begin with."""
    path = tmp_path_factory.mktemp("load") / "load.json"
    path.write_text("{}")
    return path
