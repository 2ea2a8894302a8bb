import pynvml
import pytest
from nvml_double import FakeGPU, FakeNVML

from gpuspawner.devices import (
    GPU,
    NoGPUSourceError,
    NvmlSource,
    SimulatedSource,
    describe,
    discover,
)


def test_nvml_inventory_names_gpus_by_uuid():
    nvml = FakeNVML([FakeGPU("GPU-aaa"), FakeGPU("GPU-bbb", name="NVIDIA H100 PCIe")])
    gpus = NvmlSource(nvml).list_gpus()
    assert gpus == [
        GPU("GPU-aaa", 0, "NVIDIA A100-SXM4-80GB", 80 * 2**30),
        GPU("GPU-bbb", 1, "NVIDIA H100 PCIe", 80 * 2**30),
    ]


@pytest.mark.parametrize(
    "error", [pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED]
)
def test_without_nvml_the_error_says_what_to_install_or_set(error):
    with pytest.raises(NoGPUSourceError, match=r"Install the NVIDIA driver .*simulate_gpus = N"):
        NvmlSource(FakeNVML(init_error=error)).list_gpus()


def test_simulated_gpus_look_real_and_stay_the_same():
    first = SimulatedSource(4).list_gpus()
    assert first == SimulatedSource(4).list_gpus()
    assert len({g.uuid for g in first}) == 4
    assert all(g.uuid.startswith("GPU-") and len(g.uuid) == 40 for g in first)
    assert first[0].memory_gib == 80 and "H100" in first[0].model


def test_exclusion_by_uuid_or_index():
    source = SimulatedSource(4)
    uuids = [g.uuid for g in source.list_gpus()]
    kept, excluded = discover(source, [uuids[1], 3])
    assert [g.index for g in kept] == [0, 2]
    assert [g.index for g in excluded] == [1, 3]


def test_excluding_an_unknown_gpu_is_a_config_error():
    with pytest.raises(ValueError, match=r"exclude_gpus names GPUs this machine does not have: 9"):
        discover(SimulatedSource(2), [9])


def test_describe():
    gpus = SimulatedSource(2).list_gpus()
    assert describe(gpus) == "2 × NVIDIA H100 80GB HBM3 · 80 GiB"
    assert describe([]) == "no GPU"
