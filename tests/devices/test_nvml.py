import json

import pynvml
import pytest
from nvml_double import FakeGPU, FakeNVML

from gpuspawner.core.errors import InventoryConfigError, NoGPUSourceError
from gpuspawner.core.gpus import GPU, Telemetry, gpus_in_words
from gpuspawner.core.placement import Placer
from gpuspawner.devices.nvml import NvmlSource
from gpuspawner.devices.simulated import SimulatedSource
from gpuspawner.devices.source import discover


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
    inventory = discover(source, [uuids[1], 3])
    assert [g.index for g in inventory.gpus] == [0, 2]
    assert [g.index for g in inventory.excluded] == [1, 3]
    assert inventory.uuid_by_index() == {str(i): u for i, u in enumerate(uuids)}


def test_excluding_an_unknown_gpu_is_a_config_error():
    with pytest.raises(
        InventoryConfigError, match=r"exclude_gpus names GPUs this machine does not have: 9"
    ):
        discover(SimulatedSource(2), [9])


def test_a_uuid_the_driver_reports_twice_is_kept_out_and_named(caplog):
    nvml = FakeNVML([FakeGPU("GPU-aaa"), FakeGPU("GPU-twice"), FakeGPU("GPU-twice")])
    inventory = discover(NvmlSource(nvml))
    assert [g.uuid for g in inventory.gpus] == ["GPU-aaa"]
    assert [g.index for g in inventory.ambiguous] == [1, 2]
    assert "GPU-twice more than once (indices 1, 2): kept out of the pool" in caplog.text


def nvlinked_pairs() -> FakeNVML:
    """Four GPUs whose NVLink pairs are 0–3 and 1–2, under one PCIe switch each pair."""
    gpus = [FakeGPU(f"GPU-{i}", nvlinks=peer) for i, peer in enumerate([[3, 3], [2], [1], [0, 0]])]
    single = pynvml.NVML_TOPOLOGY_SINGLE
    return FakeNVML(gpus, ancestors={frozenset({0, 3}): single, frozenset({1, 2}): single})


def test_placement_follows_nvlink_and_pcie_as_nvml_reports_them():
    source = NvmlSource(nvlinked_pairs())
    gpus = source.list_gpus()
    placer = Placer(source.topology(gpus))
    assert placer.place({"GPU-0", "GPU-1", "GPU-3"}, 2) == ["GPU-0", "GPU-3"]
    assert placer.place({"GPU-0", "GPU-1", "GPU-2", "GPU-3"}, 2) == ["GPU-0", "GPU-3"]
    assert placer.place({"GPU-1", "GPU-2", "GPU-3"}, 1) == ["GPU-3"]  # its partner is busy


def test_without_topology_from_the_driver_placement_goes_by_index(caplog):
    nvml = nvlinked_pairs()
    nvml.topology_supported = False
    source = NvmlSource(nvml)
    placer = Placer(source.topology(source.list_gpus()))
    assert placer.place({"GPU-0", "GPU-1", "GPU-2", "GPU-3"}, 2) == ["GPU-0", "GPU-1"]
    assert "NVML reports no GPU topology" in caplog.text


def test_a_gpu_unreadable_at_start_is_left_out_and_named(caplog):
    nvml = FakeNVML([FakeGPU("GPU-aaa", lost=True), FakeGPU("GPU-bbb")])
    assert [g.uuid for g in NvmlSource(nvml).list_gpus()] == ["GPU-bbb"]
    assert "GPU 0 left out of the pool: NVML says GPU is lost" in caplog.text


def test_gpus_in_words():
    gpus = SimulatedSource(2).list_gpus()
    assert gpus_in_words(gpus) == "2 × NVIDIA H100 80GB HBM3 · 80 GiB"
    assert gpus_in_words([]) == "no GPU"


def fake(**changes) -> tuple[FakeNVML, NvmlSource]:
    """Two GPUs found at start; then the first one changes."""
    nvml = FakeNVML([FakeGPU("GPU-aaa"), FakeGPU("GPU-bbb")])
    source = NvmlSource(nvml)
    source.list_gpus()
    for name, value in changes.items():
        setattr(nvml.gpus[0], name, value)
    return nvml, source


def test_nvml_telemetry():
    _, source = fake(utilization=87, memory_used=2**30, temperature=71, processes=[4242])
    sample = source.sample(["GPU-aaa"])["GPU-aaa"]
    assert sample == Telemetry(87.0, 2**30, 71.0, 90.0, (4242,), None)
    assert source.sample(["GPU-bbb"])["GPU-bbb"] == Telemetry(0.0, 0, 40.0, 90.0, (), None)


def test_values_a_board_does_not_report_stay_empty():
    _, source = fake(power_mw=None, ecc_uncorrected=None)
    sample = source.sample(["GPU-aaa"])["GPU-aaa"]
    assert sample.power_watts is None and sample.health is None


@pytest.mark.parametrize(
    ("gpu", "health"),
    [
        ({"lost": True}, "lost: the GPU has fallen off the bus"),
        ({"reset_required": True}, "needs a reset"),
        ({"ecc_uncorrected": 3}, "3 uncorrectable ECC error(s)"),
        ({"retirement_pending": True}, "memory page retirement pending: reset the GPU"),
    ],
)
def test_health_follows_nvml_and_recovers_with_it(gpu, health):
    nvml, source = fake(**gpu)
    assert source.sample(["GPU-aaa"])["GPU-aaa"].health == health
    assert source.sample(["GPU-bbb"])["GPU-bbb"].health is None
    nvml.gpus[0] = FakeGPU("GPU-aaa")
    assert source.sample(["GPU-aaa"])["GPU-aaa"].health is None


def test_a_vanished_gpu_is_unhealthy_not_a_crash():
    nvml, source = fake()
    del nvml.gpus[0]
    assert source.sample(["GPU-aaa"])["GPU-aaa"].health == "not found by the driver"


def test_critical_xids_mark_a_gpu_and_application_xids_do_not():
    nvml, source = fake()
    nvml.pending_xids = [(1, 13), (0, 79)]  # 13: a program's fault; 79: fallen off the bus
    samples = source.sample(["GPU-aaa", "GPU-bbb"])
    assert samples["GPU-aaa"].health == "critical XID 79 reported"
    assert samples["GPU-bbb"].health is None
    assert source.sample(["GPU-aaa"])["GPU-aaa"].health == "critical XID 79 reported"


def test_drivers_without_events_still_sample():
    nvml = FakeNVML([FakeGPU("GPU-aaa")], events_supported=False)
    source = NvmlSource(nvml)
    assert source.sample(["GPU-aaa"])["GPU-aaa"].health is None


def test_simulated_gpus_idle_unless_the_load_file_says_otherwise(tmp_path):
    load = tmp_path / "load.json"
    source = SimulatedSource(2, load_file=str(load))
    uuids = [g.uuid for g in source.list_gpus()]
    assert source.sample(uuids)[uuids[0]] == SimulatedSource.IDLE  # no file yet
    load.write_text(
        json.dumps(
            {uuids[0]: {"utilization_percent": 93, "processes": [7]}, "1": {"health": "lost"}}
        )
    )
    samples = source.sample(uuids)
    assert samples[uuids[0]].utilization_percent == 93 and samples[uuids[0]].processes == (7,)
    assert samples[uuids[1]].health == "lost"
    load.write_text("{not json")
    assert source.sample(uuids)[uuids[0]] == SimulatedSource.IDLE
