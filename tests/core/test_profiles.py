import pytest

from gpuspawner.core.profiles import (
    InvalidUserOptions,
    ProfileConfigError,
    choose_profile,
    default_profiles,
    parse_profiles,
)

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
    pool_size=4,
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
        parse_profiles(raw, pool_size=4)


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
    assert choose_profile({"image": "quay.io/x/y:1.2"}, PROFILES, images=["*"]).slug == "one-gpu"
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
