"""The public face for configs: what jupyterhub_config.py imports from `gpuspawner`."""

import re
from pathlib import Path
from types import SimpleNamespace

import docker
import pynvml
import pytest
from nvml_double import FakeGPU, FakeNVML

import gpuspawner
from gpuspawner import public
from gpuspawner.devices.nvml import NvmlSource


def test_every_name_for_configs_is_at_the_packages_top_level():
    assert set(public.__all__) < set(gpuspawner.__all__)
    for name in public.__all__:
        assert getattr(gpuspawner, name) is getattr(public, name)


def test_the_configuration_page_names_each_of_them_and_nothing_else():
    page = (Path(__file__).parents[1] / "docs" / "configuration.md").read_text()
    table = page.split("\n## ", 1)[0]  # before the first section
    assert sorted(re.findall(r"^\| `(\w+)\(", table, flags=re.M)) == sorted(public.__all__)


def engine_with_bridge(ipam: dict[str, str]) -> SimpleNamespace:
    """A Docker client whose default bridge has this IPAM config."""
    bridge = SimpleNamespace(attrs={"IPAM": {"Config": [ipam]}})
    return SimpleNamespace(networks=SimpleNamespace(get={"bridge": bridge}.__getitem__))


@pytest.mark.parametrize(
    ("ipam", "gateway"),
    [
        ({"Subnet": "172.18.0.0/16", "Gateway": "172.18.0.1"}, "172.18.0.1"),
        ({"Subnet": "10.99.0.0/24"}, "10.99.0.1"),  # dockerd 20.10 leaves Gateway out
    ],
)
def test_the_bridge_gateway_is_asked_of_the_engine_docker_names(monkeypatch, ipam, gateway):
    monkeypatch.setattr(docker, "from_env", lambda: engine_with_bridge(ipam))
    assert gpuspawner.docker_bridge_gateway() == gateway


def nvml_with(nvml: FakeNVML):
    return lambda: NvmlSource(nvml)


def test_the_gpu_count_is_what_nvml_lists(monkeypatch):
    monkeypatch.setattr(
        public, "NvmlSource", nvml_with(FakeNVML([FakeGPU("GPU-a"), FakeGPU("GPU-b")]))
    )
    assert gpuspawner.nvml_gpu_count() == 2


def test_without_nvml_the_gpu_count_is_0_so_the_config_still_loads(monkeypatch):
    broken = FakeNVML(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    monkeypatch.setattr(public, "NvmlSource", nvml_with(broken))
    assert gpuspawner.nvml_gpu_count() == 0
