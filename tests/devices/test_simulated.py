"""A simulated mixed host: models, memory, MIG layouts, and activity per container."""

import json

import pytest

from gpuspawner.core.errors import InventoryConfigError
from gpuspawner.core.units import Kind, Sharing, all_units
from gpuspawner.devices.simulated import FIRST_SIMULATED_PID, SimulatedSource

GIB = 2**30
HOST = [
    {"model": "NVIDIA H100 80GB HBM3", "memory": "80G", "count": 2},
    {"model": "NVIDIA A100-SXM4-80GB", "memory": "80G", "mig": ["1g.10gb"] * 7},
    {"model": "NVIDIA L40S", "memory": "48G"},
]


def test_a_host_described_gpu_by_gpu():
    source = SimulatedSource(host=HOST)
    gpus = source.list_gpus()
    assert [(g.index, g.model, g.memory_total_bytes // GIB, g.mig_mode) for g in gpus] == [
        (0, "NVIDIA H100 80GB HBM3", 80, False),
        (1, "NVIDIA H100 80GB HBM3", 80, False),
        (2, "NVIDIA A100-SXM4-80GB", 80, True),
        (3, "NVIDIA L40S", 48, False),
    ]
    assert [m.profile for m in gpus[2].mig] == ["1g.10gb"] * 7
    assert {m.uuid[:4] for m in gpus[2].mig} == {"MIG-"}
    # the same UUIDs as simulate_gpus gives, and the same on every start (recovery needs it)
    assert [g.uuid for g in gpus[:2]] == [g.uuid for g in SimulatedSource(2).list_gpus()]
    assert SimulatedSource(host=HOST).list_gpus() == gpus
    units = all_units(gpus, {gpus[3].uuid: Sharing(4)})
    assert [u.kind for u in units].count(Kind.SHARED) == 4


def test_a_host_file_is_read_again_so_a_mig_layout_can_change(tmp_path):
    path = tmp_path / "host.json"
    path.write_text(json.dumps(HOST))
    source = SimulatedSource(host=str(path))
    before = source.list_gpus()[2].mig
    path.write_text(json.dumps([*HOST[:1], {**HOST[1], "mig": ["3g.40gb", "4g.40gb"]}, HOST[2]]))
    after = source.list_gpus()[2].mig
    assert [m.profile for m in after] == ["3g.40gb", "4g.40gb"]
    assert {m.uuid for m in after}.isdisjoint(m.uuid for m in before)
    path.write_text("{half a file")
    assert source.list_gpus()[2].mig == after  # as last read


@pytest.mark.parametrize(
    ("host", "message"),
    [
        ({"model": "X"}, r"simulated_host must be a non-empty list"),
        ([{"model": "X", "colour": "red"}], r"simulated_host\[0\] must be a dict with keys among"),
        ([{"count": 0}], r"\[0\]: count must be 1 to 64"),
        ([{"memory": "lots"}], r"\[0\]\['memory'\] must be memory such as '40G'"),
        ([{"mig": "1g.10gb"}], r"\[0\]: mig must be a list of MIG profiles"),
        ([{"mig": ["tiny"]}], r"'tiny' is not a MIG profile like 1g.10gb"),
        ([{"mig": ["4g.40gb", "4g.40gb"]}], r"GPU 0's MIG instances use 8 slices; it has 7"),
    ],
)
def test_a_bad_host_is_named(host, message):
    with pytest.raises(InventoryConfigError, match=message):
        SimulatedSource(host=host)


def test_a_host_file_that_cannot_be_read_at_start_is_named(tmp_path):
    with pytest.raises(InventoryConfigError, match=r"simulated_host: cannot read .*nowhere"):
        SimulatedSource(host=str(tmp_path / "nowhere.json"))


def test_mig_instances_sample_as_nvml_reports_them(tmp_path):
    load = tmp_path / "load.json"
    source = SimulatedSource(host=HOST, load_file=str(load))
    gpus = source.list_gpus()
    migs = [m.uuid for m in gpus[2].mig]
    load.write_text(json.dumps({"2:1": {"processes": [77], "memory_used_gib": 3}}))
    samples = source.sample([gpus[2].uuid, *migs[:2]])
    assert samples[migs[0]].utilization_percent == 0.0  # nothing runs on it: idle
    assert samples[migs[1]].utilization_percent is None  # something runs: NVML cannot say
    assert samples[migs[1]].memory_used_bytes == 3 * GIB
    assert samples[gpus[2].uuid].utilization_percent is None  # no utilisation in MIG mode
    load.write_text(json.dumps({"2": {"health": "needs a reset"}}))
    assert source.sample(migs[:1])[migs[0]].health == "needs a reset"


def test_a_shared_gpus_activity_is_told_per_container(tmp_path):
    load = tmp_path / "load.json"
    source = SimulatedSource(host=HOST, load_file=str(load))
    l40s = source.list_gpus()[3].uuid
    processes = [{"container": "jupyter-ann", "utilization_percent": 80}, {"container": "c2"}, 9]
    load.write_text(json.dumps({"3": {"utilization_percent": 80, "processes": processes}}))
    sample = source.sample([l40s])[l40s]
    ann, other, nine = sample.processes
    assert nine == 9 and min(ann, other) >= FIRST_SIMULATED_PID and ann != other
    assert sample.process_utilization == ((ann, 80.0), (other, 0.0))
    assert source.process_owners([ann, other, 9]) == {ann: "jupyter-ann", other: "c2"}
    assert source.sample([l40s])[l40s].processes[0] == ann  # the same PID on every look
    again = SimulatedSource(host=HOST, load_file=str(load))  # and in the next hub's
    assert again.sample([l40s])[l40s].processes[:2] == (ann, other)


def test_a_gpu_without_figures_of_its_own_shows_the_work_on_it_now(tmp_path):
    """As `gpuspawner simulate` writes it: the processes make up the GPU's load, and a
    parked one (the checkpoint driver's word) neither works nor holds GPU memory."""
    load = tmp_path / "load.json"
    processes = [
        {"container": "job", "memory_gib": 20, "utilization_percent": 95},
        {"container": "person", "memory_gib": 6, "utilization_percent": 0},
    ]
    load.write_text(json.dumps({"0": {"processes": processes}}))
    source = SimulatedSource(1, load_file=str(load))
    [uuid] = [g.uuid for g in source.list_gpus()]
    both = source.sample([uuid])[uuid]
    assert (both.utilization_percent, both.memory_used_bytes) == (95, 26 * 2**30)

    job, person = both.processes
    source.parked = lambda: {job: 20 * 2**30}
    parked = source.sample([uuid])[uuid]
    assert (parked.utilization_percent, parked.memory_used_bytes) == (0, 6 * 2**30)
    assert parked.processes == (person,)
