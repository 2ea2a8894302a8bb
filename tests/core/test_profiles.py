import pytest

from gpuspawner.core.gpus import GPU, MigInstance
from gpuspawner.core.profiles import (
    InvalidUserOptions,
    ProfileConfigError,
    choose_profile,
    default_profiles,
    parse_profiles,
)
from gpuspawner.core.units import Kind, Request, Sharing, all_units

PROFILES = parse_profiles(
    [
        {"display_name": "CPU", "slug": "cpu"},
        {"display_name": "One GPU", "gpus": 1, "default": True},
        {
            "display_name": "Two",
            "slug": "gpu-2",
            "gpus": 2,
            "spawner_override": {"mem_limit": "8G"},
        },
    ],
    pool=4,
)


def test_default_profiles_follow_the_pool():
    assert [(p.slug, p.gpus) for p in default_profiles(8)] == [
        ("cpu", 0),
        ("gpu-1", 1),
        ("gpu-2", 2),
        ("gpu-4", 4),
        ("gpu-8", 8),
    ]
    assert [p.slug for p in default_profiles(3)] == ["cpu", "gpu-1", "gpu-2", "gpu-3"]
    assert [p.slug for p in default_profiles(0)] == ["cpu"]
    assert parse_profiles([], 2) == default_profiles(2)


def test_slug_is_derived_from_the_display_name():
    assert PROFILES[1].slug == "one-gpu"
    assert PROFILES[2].spawner_override == {"mem_limit": "8G"}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([{"slug": "x"}], r"profiles\[0\] needs a display_name"),
        ([{"display_name": "A", "gpus": 9}], r"asks for 9 GPUs, but the pool has only 4"),
        ([{"display_name": "A", "gpus": -1}], r"gpus must be a whole number"),
        ([{"display_name": "A", "slug": "A B"}], r"slug 'A B' must be lowercase"),
        ([{"display_name": "A", "kubespawner_override": {}}], r"unknown key\(s\) kubespawner"),
        ([{"display_name": "A"}, {"display_name": "a"}], r"slug\(s\) used twice: a"),
        (
            [{"display_name": "A", "default": True}, {"display_name": "B", "default": True}],
            r"only one profile may have default=True",
        ),
        (["cpu"], r"profiles\[0\] must be a dict"),
    ],
)
def test_bad_profile_config_stops_the_hub(raw, message):
    with pytest.raises(ProfileConfigError, match=message):
        parse_profiles(raw, pool=4)


def test_the_choice_is_the_named_profile_or_the_default():
    assert choose_profile({"profile": "gpu-2"}, PROFILES).gpus == 2
    assert choose_profile({}, PROFILES).slug == "one-gpu"
    assert choose_profile(None, PROFILES).slug == "one-gpu"
    assert choose_profile({"image": "x"}, PROFILES, images=["x", "y"]).slug == "one-gpu"


@pytest.mark.parametrize(
    ("image", "images", "message"),
    [
        (["x"], ["x"], r"image must be an image name \(text\), got a list"),
        (7, ["x"], r"got a number"),
        ("z", ["x", "y"], r"image 'z' is not offered. Choose one of: x, y"),
        ("not an image!", ["*"], r"is not a Docker image name"),
        ("a" * 300, ["*"], r"image 'a{40}…' is not a Docker image name"),
    ],
)
def test_images_are_checked_by_type_and_list(image, images, message):
    with pytest.raises(InvalidUserOptions, match=message):
        choose_profile({"image": image}, PROFILES, images=images)


def test_any_image_means_any_valid_image_name_not_a_star():
    assert choose_profile({"image": "example.org/x:1.2"}, PROFILES, images=["*"]).slug == "one-gpu"
    with pytest.raises(InvalidUserOptions):
        choose_profile({"image": "*"}, PROFILES, images=["*"])


def test_a_huge_body_gets_a_short_answer():
    options = {f"key{i}": i for i in range(200_000)}
    with pytest.raises(InvalidUserOptions) as refused:
        choose_profile(options, PROFILES)
    message = str(refused.value)
    assert len(message) < 300, len(message)
    assert "and 199,995 more" in message


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"profile": "gpu-8"}, r"There is no profile 'gpu-8'. Choose one of: cpu, one-gpu, gpu-2"),
        ({"profile": ["gpu-2"]}, r"profile must be a profile's slug .* got a list"),
        ({"profile": 2}, r"got a number"),
        ({"profile": None, "x": 1}, r"Unknown option\(s\): 'x'"),
        ({"profile": {"slug": "cpu"}}, r"got an object"),
        ({"profile": ""}, r"There is no profile ''"),
        ({"profile": "x" * 10_000}, r"There is no profile 'x{40}…'"),
        ({"profile": "<script>"}, r"There is no profile '<script>'"),
        ({"gpus": 4}, r"Unknown option\(s\): 'gpus'. Accepted: profile"),
        ({"device_ids": ["0"], "env": {}}, r"Unknown option\(s\): 'device_ids', 'env'"),
        ({"image": "evil"}, r"Unknown option\(s\): 'image'"),
        ([1, 2], r"user_options must be an object .* got a list"),
        (3, r"got a number"),
    ],
)
def test_bad_choices_say_what_is_wrong(options, message):
    with pytest.raises(InvalidUserOptions, match=message):
        choose_profile(options, PROFILES)


GIB = 2**30
MIXED = all_units(
    [
        GPU("GPU-h0", 0, "NVIDIA H100 80GB HBM3", 80 * GIB),
        GPU("GPU-h1", 1, "NVIDIA H100 80GB HBM3", 80 * GIB),
        GPU(
            "GPU-a",
            2,
            "NVIDIA A100-SXM4-40GB",
            40 * GIB,
            True,
            tuple(MigInstance(f"MIG-{i}", "1g.5gb", 5 * GIB, 1, 7, i) for i in range(7)),
        ),
        GPU("GPU-l", 3, "NVIDIA L40S", 48 * GIB),
    ],
    {"GPU-l": Sharing(4)},
)


def test_profiles_pick_by_kind_model_and_memory():
    profiles = parse_profiles(
        [
            {"display_name": "H100", "slug": "h100", "gpus": 1, "gpu_model": "*H100*"},
            {"display_name": "Big", "slug": "big", "gpus": 2, "min_gpu_memory": "80G"},
            {"display_name": "Slice", "slug": "slice", "mig_profile": "1g.5gb"},
            {"display_name": "Shared", "slug": "shared", "shared": True},
        ],
        MIXED,
    )
    assert [p.request for p in profiles] == [
        Request(gpus=1, gpu_model="*H100*"),
        Request(gpus=2, min_gpu_memory=80 * GIB),
        Request(mig_profile="1g.5gb"),
        Request(shared=True),
    ]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"gpus": 1, "mig_profile": "1g.5gb"}, r"sets gpus and mig_profile; set only one"),
        ({"mig_profile": "1g.5gb", "shared": True}, r"sets mig_profile and shared; set only one"),
        ({"mig_profile": "small"}, r"mig_profile must name a MIG profile .* got 'small'"),
        ({"shared": "yes"}, r"shared must be true or false, got 'yes'"),
        ({"gpus": 1, "gpu_model": 100}, r"gpu_model must be a model name or pattern"),
        ({"gpus": 1, "min_gpu_memory": "lots"}, r"min_gpu_memory must be memory such as"),
        ({"gpu_model": "*A100*"}, r"choose among GPUs, but this profile asks for none"),
        ({"gpus": 3}, r"asks for 3 GPUs, but the pool has only 2"),
        (
            {"gpus": 1, "gpu_model": "*A100*"},
            r"asks for 1 GPU \(model \*A100\*\), but the pool has 0 such; it has 2 × NVIDIA H100"
            r".*Fix: change gpus, gpu_model or min_gpu_memory",
        ),
        (  # a model written as part of its name: the pattern that would match is named
            {"gpus": 1, "gpu_model": "H100"},
            r"asks for 1 GPU \(model H100\), but the pool has 0 such; it has 2 × NVIDIA H100 "
            r"80GB HBM3 · 80 GiB, .*\. gpu_model is a shell-style pattern for the whole model "
            r"name \(case-insensitive\), so 'H100' matches only a GPU named exactly that; "
            r"'\*H100\*' would match 2 here\. Fix: set gpu_model to '\*H100\*', or change gpus "
            r"or min_gpu_memory$",
        ),
        (  # too few even so: nothing to suggest
            {"gpus": 2, "gpu_model": "L40S"},
            r"asks for 2 GPUs \(model L40S\), but the pool has 0 such; it has (?!.*pattern).*\. "
            r"Fix: change gpus, gpu_model or min_gpu_memory$",
        ),
        (
            {"mig_profile": "1g.10gb"},
            r"asks for a MIG instance 1g.10gb, but the pool has 0 such; .*7 × MIG 1g.5gb · 5 GiB"
            r" of NVIDIA A100-SXM4-40GB.*make them \(nvidia-smi mig or nvidia-mig-parted\)",
        ),
        ({"shared": True, "min_gpu_memory": "40G"}, r"mark a GPU as shared in c.GPUSpawner"),
        ({"gpus": 1, "turns": "yes"}, r"turns must be true or false, got 'yes'"),
        ({"gpus": 2, "turns": True}, r"turns is for profiles of one whole GPU \(gpus: 1\)"),
        ({"mig_profile": "1g.5gb", "turns": True}, r"turns is for profiles of one whole GPU"),
    ],
)
def test_bad_gpu_keys_name_the_key_and_the_fix(entry, message):
    with pytest.raises(ProfileConfigError, match=r"^c.GPUSpawner.profiles\[0\] \(x\).*" + message):
        parse_profiles([{"display_name": "X", "slug": "x", **entry}], MIXED)


def test_default_profiles_offer_each_kind_the_pool_has():
    assert [(p.slug, p.request.kind) for p in default_profiles(MIXED)] == [
        ("cpu", None),
        ("gpu-1", Kind.GPU),
        ("gpu-2", Kind.GPU),
        ("mig-1g.5gb", Kind.MIG),
        ("shared", Kind.SHARED),
    ]
    slices_only = [u for u in MIXED if u.kind is Kind.MIG]
    assert [p.slug for p in default_profiles(slices_only) if p.default] == ["mig-1g.5gb"]
