"""Units: what one GPU gives (whole, MIG instances, slots), what profiles ask, and the admin's
sharing config, checked."""

from fractions import Fraction

import pytest

from gpuspawner.core.errors import InventoryConfigError, ProfileConfigError
from gpuspawner.core.gpus import GPU, MigInstance
from gpuspawner.core.units import (
    Kind,
    Request,
    Sharing,
    Unit,
    mig_profile_name,
    parse_memory,
    parse_shared,
    units_of,
)

GIB = 2**30
H100 = GPU("GPU-h100", 0, "NVIDIA H100 80GB HBM3", 80 * GIB)
A100 = GPU(
    "GPU-a100",
    1,
    "NVIDIA A100-SXM4-80GB",
    80 * GIB,
    mig_mode=True,
    mig=tuple(MigInstance(f"MIG-{i}", "1g.10gb", 10 * GIB, 1, 7, i) for i in range(7)),
)
L40S = GPU("GPU-l40s", 2, "NVIDIA L40S", 48 * GIB)


def test_a_gpu_gives_itself_its_mig_instances_or_its_slots():
    [whole] = units_of(H100)
    assert (whole.id, whole.device, whole.gpu, whole.kind, whole.weight) == (
        "GPU-h100",
        "GPU-h100",
        "GPU-h100",
        Kind.GPU,
        1,
    )
    migs = units_of(A100)
    assert [u.id for u in migs] == [f"MIG-{i}" for i in range(7)]
    assert {(u.device == u.id, u.gpu, u.kind, u.weight) for u in migs} == {
        (True, "GPU-a100", Kind.MIG, Fraction(1, 7))
    }
    assert sum(u.weight for u in migs) == 1  # exactly: seven sevenths
    slots = units_of(L40S, Sharing(4, 12 * GIB))
    assert [u.id for u in slots] == [f"GPU-l40s#{n}" for n in (1, 2, 3, 4)]
    assert {(u.device, u.weight, u.memory_bytes) for u in slots} == {
        ("GPU-l40s", Fraction(1, 4), 12 * GIB)
    }
    assert units_of(L40S, Sharing(2))[0].memory_bytes == 24 * GIB  # without MPS: a share
    assert units_of(GPU("GPU-x", 3, "m", GIB, mig_mode=True)) == ()  # MIG on, no instance yet


def test_units_name_themselves_for_people():
    assert units_of(H100)[0].name == "GPU 0"
    assert units_of(A100)[2].name == "GPU 1 · MIG 1g.10gb #2"
    assert units_of(L40S, Sharing(4))[1].name == "GPU 2 · slot 2 of 4"
    assert units_of(A100)[0].label == "MIG 1g.10gb · 10 GiB of NVIDIA A100-SXM4-80GB"
    assert units_of(L40S, Sharing(4))[0].label == "1 of 4 slots of NVIDIA L40S (shared)"


@pytest.mark.parametrize(
    ("compute", "instance", "memory_mib", "board_gib", "name"),
    [
        (1, 1, 9728, 80, "1g.10gb"),  # A100 80GB, as nvidia-smi lists it
        (2, 2, 19968, 80, "2g.20gb"),
        (3, 3, 40192, 80, "3g.40gb"),
        (7, 7, 80896, 80, "7g.80gb"),
        (1, 1, 4864, 40, "1g.5gb"),  # A100 40GB
        (1, 1, 5836, 24, "1g.6gb"),  # A30
        (1, 3, 40192, 80, "1c.3g.40gb"),  # a compute instance smaller than its GPU instance
    ],
)
def test_mig_profile_names_follow_nvidia_smi(compute, instance, memory_mib, board_gib, name):
    assert mig_profile_name(compute, instance, memory_mib, board_gib * GIB) == name


@pytest.mark.parametrize(
    ("request_", "unit", "matches"),
    [
        (Request(gpus=1), units_of(H100)[0], True),
        (Request(gpus=1, gpu_model="*a100*"), units_of(H100)[0], False),
        (Request(gpus=1, gpu_model="*H100*"), units_of(H100)[0], True),
        (Request(gpus=1, min_gpu_memory=81 * GIB), units_of(H100)[0], False),
        (Request(mig_profile="1g.10gb"), units_of(A100)[0], True),
        (Request(mig_profile="3g.40gb"), units_of(A100)[0], False),
        (Request(gpus=1), units_of(A100)[0], False),  # a MIG instance is not a whole GPU
        (Request(shared=True), units_of(L40S, Sharing(2))[0], True),
        (Request(shared=True, min_gpu_memory=30 * GIB), units_of(L40S, Sharing(2))[0], False),
        (Request(), units_of(H100)[0], False),  # CPU only takes nothing
    ],
)
def test_requests_match_kind_model_and_memory(request_, unit, matches):
    assert request_.matches(unit) is matches


def test_requests_say_what_they_need():
    assert Request(gpus=2).needs == "2"
    assert Request(gpus=2, gpu_model="*A100*").needs == "2 GPUs (model *A100*)"
    assert Request(mig_profile="1g.10gb").what == "a MIG instance 1g.10gb"
    assert Request(shared=True, min_gpu_memory=40 * GIB).what == (
        "a shared GPU slot (at least 40 GiB)"
    )
    assert (Request().kind, Request().count, Request(mig_profile="1g.5gb").count) == (None, 0, 1)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        *[(0, 0), (2048, 2048), ("40G", 40 * GIB), ("40GB", 40 * GIB), ("40GiB", 40 * GIB)],
        *[("512M", 512 * 2**20), ("1.5g", int(1.5 * GIB)), ("2T", 2 * 2**40)],
    ],
)
def test_memory_reads_as_mem_limit_does(value, expected):
    assert parse_memory(value, "x", ProfileConfigError) == expected


@pytest.mark.parametrize("value", [-1, "forty", "40 X", True, 1.5, None, "G"])
def test_bad_memory_is_named(value):
    with pytest.raises(ProfileConfigError, match=r"^where must be memory such as '40G'"):
        parse_memory(value, "where", ProfileConfigError)


def test_shared_gpus_by_index_or_uuid():
    gpus = [H100, A100, L40S]
    assert parse_shared({2: 4}, gpus) == {"GPU-l40s": Sharing(4)}
    assert parse_shared({"GPU-h100": {"slots": 2, "mps_memory_limit": "20G"}}, gpus) == {
        "GPU-h100": Sharing(2, 20 * GIB)
    }


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({7: 2}, r"shared_gpus names GPU 7, which this machine does not have. Known: 0=GPU-h100"),
        ({1: 2}, r"\[1\]: GPU 1 is in MIG mode"),
        ({0: 1}, r"\[0\]: slots must be a whole number from 2 to 64"),
        ({0: "4"}, r"slots must be a whole number"),
        ({0: 2, "GPU-h100": 2}, r"GPU 0 is listed twice"),
        ({0: {"slots": 2, "mps": 1}}, r"unknown key\(s\) mps; known keys: slots, mps_memory"),
        ({0: {"slots": 2, "mps_memory_limit": "90G"}}, r"90 GiB is more than GPU 0 has \(80"),
        ([0], r"shared_gpus must be a dict"),
    ],
)
def test_bad_sharing_stops_the_hub_with_the_fix(raw, message):
    with pytest.raises(InventoryConfigError, match=message):
        parse_shared(raw, [H100, A100, L40S])


def test_a_unit_is_plain_data():
    unit = Unit("GPU-a", "GPU-a", "GPU-a", 0, "m", GIB)
    assert unit == units_of(GPU("GPU-a", 0, "m", GIB))[0]


@pytest.mark.parametrize("kind", list(Kind))
def test_every_kind_of_unit_says_what_the_rest_needs_to_know(kind):
    facts = kind.facts  # a new kind without its row in KIND_FACTS fails here, not in the hub
    assert facts.noun and facts.plural and facts.to_have_some
    assert kind.held_by_reach is not facts.shares_gpu
    assert facts.whole is (kind is Kind.GPU)
