"""MIG instances and per-process figures as NVML reports them, through the NVML double.

The double answers pynvml's MIG calls and raises pynvml's own errors; these
paths have not met a real driver in CI (benchmarks/README.md says which have).
"""

import pynvml
import pytest
from nvml_double import FakeGPU, FakeMig, FakeNVML

from gpuspawner.core.gpus import MigInstance, Telemetry
from gpuspawner.core.units import Kind, all_units
from gpuspawner.devices.nvml import NvmlSource

GIB = 2**30


def a100_in_mig_mode(**changes) -> FakeGPU:
    """Five 1g.10gb and one 2g.20gb instance, made by an admin; MIG index 4 is empty."""
    layout = {i: FakeMig(f"MIG-{i:04d}") for i in (0, 1, 2, 5, 6)}
    layout[3] = FakeMig("MIG-0003", slices=2, memory_mb=19968)
    return FakeGPU("GPU-a100", mig_mode=True, mig=layout, **changes)


def machine() -> FakeNVML:
    return FakeNVML(
        [
            FakeGPU("GPU-h100", name="NVIDIA H100 80GB HBM3"),  # no MIG at all: NotSupported
            a100_in_mig_mode(),
            FakeGPU("GPU-off", mig_mode=False),  # MIG-capable, MIG off: a whole GPU
        ]
    )


def test_mig_instances_are_listed_with_their_profiles_and_memory():
    gpus = NvmlSource(machine()).list_gpus()
    assert [(g.uuid, g.mig_mode, len(g.mig)) for g in gpus] == [
        ("GPU-h100", False, 0),
        ("GPU-a100", True, 6),
        ("GPU-off", False, 0),
    ]
    assert gpus[1].mig[:4] == (
        MigInstance("MIG-0000", "1g.10gb", 9728 * 2**20, 1, 7, 0),
        MigInstance("MIG-0001", "1g.10gb", 9728 * 2**20, 1, 7, 1),
        MigInstance("MIG-0002", "1g.10gb", 9728 * 2**20, 1, 7, 2),
        MigInstance("MIG-0003", "2g.20gb", 19968 * 2**20, 2, 7, 3),
    )
    units = all_units(gpus, {})
    assert [u.kind for u in units].count(Kind.MIG) == 6
    assert sum(u.weight for u in units if u.gpu == "GPU-a100") == 1  # 5 × 1/7 + 2/7


def test_a_compute_instance_smaller_than_its_gpu_instance_counts_its_own_slices():
    nvml = FakeNVML(
        [FakeGPU("GPU-a", mig_mode=True, mig={0: FakeMig("MIG-x", 3, 40192, compute_slices=1)})]
    )
    [gpu] = NvmlSource(nvml).list_gpus()
    assert gpu.mig == (MigInstance("MIG-x", "1c.3g.40gb", 40192 * 2**20, 1, 7, 0),)


def test_an_instance_nvml_cannot_describe_is_left_out_and_named(caplog, monkeypatch):
    nvml = machine()
    real = nvml.nvmlDeviceGetAttributes

    def failing(handle):
        if handle.position == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        return real(handle)

    monkeypatch.setattr(nvml, "nvmlDeviceGetAttributes", failing)
    [_, a100, _] = NvmlSource(nvml).list_gpus()
    assert [m.position for m in a100.mig] == [0, 2, 3, 5, 6]
    assert "GPU 1: MIG device 1 left out of the pool: NVML says Unknown Error" in caplog.text


def test_a_changed_layout_is_seen_on_the_next_look():
    nvml = machine()
    source = NvmlSource(nvml)
    assert len(source.list_gpus()[1].mig) == 6
    nvml.gpus[1].mig = {0: FakeMig("MIG-big", slices=7, memory_mb=80896)}
    assert [m.profile for m in source.list_gpus()[1].mig] == ["7g.80gb"]
    nvml.gpus[1].mig_mode = False
    assert source.list_gpus()[1].mig_mode is False


def test_a_mig_instance_reports_its_memory_processes_and_its_gpus_health():
    nvml = machine()
    source = NvmlSource(nvml)
    source.list_gpus()
    nvml.gpus[1].mig[0].processes = [4242]
    nvml.gpus[1].mig[0].memory_used = 2 * GIB
    samples = source.sample(["MIG-0000", "MIG-0001", "GPU-a100"])
    # NVML gives no utilisation for a MIG instance: busy unknown while a process runs
    assert samples["MIG-0000"] == Telemetry(None, 2 * GIB, None, None, (4242,), None)
    assert samples["MIG-0001"] == Telemetry(0.0, 0, None, None, (), None)
    # the GPU itself: no utilisation in MIG mode, but temperature, power, health
    assert samples["GPU-a100"].utilization_percent is None
    assert samples["GPU-a100"].temperature_celsius == 40.0
    nvml.gpus[1].ecc_uncorrected = 2
    assert source.sample(["MIG-0001"])["MIG-0001"].health == "2 uncorrectable ECC error(s)"


def test_a_destroyed_instance_reads_as_gone_not_a_crash():
    nvml = machine()
    source = NvmlSource(nvml)
    source.list_gpus()
    del nvml.gpus[1].mig[0]
    assert source.sample(["MIG-0000"])["MIG-0000"].health == "not found by the driver"


def test_a_critical_xid_on_the_gpu_marks_its_instances():
    nvml = machine()
    source = NvmlSource(nvml)
    source.list_gpus()
    nvml.pending_xids = [(1, 79)]
    assert source.sample(["MIG-0002"])["MIG-0002"].health == ("critical XID 79 reported on its GPU")


@pytest.mark.parametrize(
    ("process_sm", "expected"),
    [(None, None), ({}, ()), ({7: 80, 9: 0}, ((7, 80.0), (9, 0.0)))],
    ids=["not-reported", "no-process-since", "per-process"],
)
def test_each_process_share_of_a_whole_gpu(process_sm, expected):
    nvml = FakeNVML([FakeGPU("GPU-s", utilization=80, processes=[7, 9], process_sm=process_sm)])
    source = NvmlSource(nvml)
    assert source.sample(["GPU-s"])["GPU-s"].process_utilization == expected


def test_a_problem_seen_on_every_look_is_said_once(caplog):
    nvml = machine()
    nvml.gpus[0].lost = True
    source = NvmlSource(nvml)
    for _ in range(3):
        source.list_gpus()
    assert caplog.text.count("GPU 0 left out of the pool") == 1
