"""Per-group limits on the real stack: every path (form, REST, named servers, bursts) obeys them."""

import concurrent.futures
import html

import pytest
from realhub import LIGHT_SERVERS, Hub

CONFIG = """
c.GPUSpawner.simulate_gpus = 4
c.GPUSpawner.profiles = [
    {"display_name": "CPU only", "slug": "cpu", "gpus": 0},
    {"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True},
    {"display_name": "2 GPUs", "slug": "gpu-2", "gpus": 2},
    {"display_name": "4 GPUs", "slug": "gpu-4", "gpus": 4},
]
c.GPUSpawner.group_limits = {
    "students": {
        "max_gpus_per_server": 1, "max_gpus_per_user": 1, "max_gpus_group": 2,
        "profiles": ["cpu", "gpu-1", "gpu-2"],
    },
    "researchers": {"max_gpus_per_user": 4},
}
c.GPUSpawner.group_overrides = {
    "course-env": {
        "groups": ["students"], "spawner_override": {"environment": {"COURSE": "ml101"}},
    },
}
"""

STUDENTS = ["s1", "s2", "s3"]


@pytest.fixture(scope="module")
def hub(hub_factory) -> Hub:
    hub = hub_factory(CONFIG + LIGHT_SERVERS)
    hub.add_users(*STUDENTS, "r1", groups={"students": STUDENTS, "researchers": ["r1"]})
    return hub


def test_a_student_asking_for_two_gpus_is_told_the_limit(hub: Hub):
    refused = hub.spawn("s1", "big", profile="gpu-2")
    assert refused.status_code == 403
    assert "max_gpus_per_server of group students" in refused.json()["message"]
    assert hub.server_model("s1", "big") is None
    assert hub.pool()["free"] == 4


def test_a_profile_outside_the_group_is_refused_and_hidden(hub: Hub):
    refused = hub.spawn("s1", "huge", profile="gpu-4")
    assert refused.status_code == 403
    assert "not available to you" in refused.json()["message"]
    page = hub.login("s1").get(f"{hub.url}/hub/spawn/s1/x").text
    assert 'value="gpu-1"' in page and 'value="gpu-4"' not in page
    assert 'value="gpu-4"' in hub.login("r1").get(f"{hub.url}/hub/spawn/r1/x").text


def test_a_burst_of_named_server_spawns_leaves_one_gpu(hub: Hub):
    with concurrent.futures.ThreadPoolExecutor(5) as burst:
        responses = list(
            burst.map(lambda i: hub.spawn("s1", f"burst{i}", profile="gpu-1"), range(5))
        )
    codes = sorted(r.status_code for r in responses)
    assert codes.count(403) == 4 and codes[0] in (201, 202), codes
    for refused in (r for r in responses if r.status_code == 403):
        assert "max_gpus_per_user of group students" in refused.json()["message"]
    assert len(hub.held_by("s1")) == 1
    running = [c for c in hub.containers() if c.labels.get("gpuspawner.user") == "s1"]
    assert len(running) == 1


def test_the_form_shows_the_users_allowance(hub: Hub):
    page = hub.login("s1").get(f"{hub.url}/hub/spawn/s1/another").text
    assert "You hold 1 of your 1 GPU: GPU-" in page
    assert "You already hold 1 GPU of your 1 GPU (max_gpus_per_user of group students)" in page


def test_the_group_quota_stops_the_third_student(hub: Hub):
    hub.spawn_ready("s2", profile="gpu-1")
    refused = hub.spawn("s3", profile="gpu-1")
    assert refused.status_code == 403
    message = refused.json()["message"]
    assert "Members of group students already hold 2 of their 2 GPUs" in message
    assert "max_gpus_group of group students" in message
    # CPU-only is still open to them, and a researcher is not held back by the students' quota
    hub.spawn_ready("s3", "cpu", profile="cpu")
    hub.spawn_ready("r1", profile="gpu-2")
    assert hub.pool()["free"] == 0


def test_group_overrides_and_profiles_combine(hub: Hub):
    container = hub.container_of("s2")
    assert "COURSE=ml101" in container.attrs["Config"]["Env"]
    assert len(hub.held_uuids("s2")) == 1


def test_stopping_frees_room_in_the_quota(hub: Hub):
    [server] = [
        c.labels["gpuspawner.server"]
        for c in hub.containers()
        if c.labels.get("gpuspawner.user") == "s1"
    ]
    hub.stop_server("s1", server)
    hub.stop_server("r1")
    hub.spawn_ready("s3", profile="gpu-1")
    assert len(hub.held_by("s3")) == 1


BAD_OPTIONS = [
    ({"profile": "gpu-99"}, 400, "There is no profile 'gpu-99'"),
    ({"profile": ""}, 400, "There is no profile ''"),
    ({"profile": "x" * 100_000}, 400, "There is no profile"),
    ({"profile": "gpu-1\u00e9\u2603"}, 400, "There is no profile"),
    ({"profile": "<script>alert(1)</script>"}, 400, "There is no profile"),
    ({"profile": ["gpu-1"]}, 400, "got a list"),
    ({"profile": 1}, 400, "got a number"),
    ({"profile": None, "gpus": 4}, 400, "Unknown option(s): 'gpus'"),
    ({"profile": "gpu-1", "device_ids": ["0", "1"]}, 400, "'device_ids'"),
    ({"profile": "gpu-1", "env": {"NVIDIA_VISIBLE_DEVICES": "all"}}, 400, "'env'"),
    ({"profile": "gpu-1", "image": "evil:latest"}, 400, "'image'"),
    ({"profile": "gpu-1", "extra_host_config": {"privileged": True}}, 400, "'extra_host_config'"),
    ({"profile": "gpu-1", "runtime": "nvidia"}, 400, "'runtime'"),
    ({"profile": "gpu-1", "devices": ["/dev/nvidia0"]}, 400, "'devices'"),
    ({"profile": "gpu-1", "volumes": {"/dev": "/dev"}}, 400, "'volumes'"),
    ({"profile": "gpu-1", "DOCKER_RESOURCE_NVIDIA_GPU": "GPU-x"}, 400, "DOCKER_RESOURCE"),
]


@pytest.mark.parametrize(("options", "status", "message"), BAD_OPTIONS)
def test_bad_rest_input_is_a_clear_4xx_and_takes_nothing(hub: Hub, options, status, message):
    free = hub.pool()["free"]
    response = hub.api("POST", "/users/r1/servers/bad", json={"user_options": options})
    assert response.status_code == status, response.text
    assert message in response.json()["message"]
    assert hub.pool()["free"] == free
    assert hub.server_model("r1", "bad") is None


@pytest.mark.parametrize("body", [[1, 2], 3, "gpu-1", {"user_options": [1]}, {"user_options": 5}])
def test_options_that_are_not_an_object_are_refused(hub: Hub, body):
    free = hub.pool()["free"]
    response = hub.api("POST", "/users/r1/servers/bad", json=body)
    assert 400 <= response.status_code < 500, response.text
    assert hub.pool()["free"] == free
    assert hub.server_model("r1", "bad") is None


def test_a_crafted_form_cannot_inject_script_or_extra_options(hub: Hub):
    session = hub.login("r1")
    free = hub.pool()["free"]
    attack = "<script>alert(1)</script>"
    sent = hub.submit_form(session, "r1", "crafted", profile=attack)
    assert "/spawn-pending/" not in sent.url  # the form again, at once, saying why
    page = sent.text
    assert attack not in page and html.escape(attack) in page
    sent = hub.submit_form(session, "r1", "crafted", profile="gpu-1", privileged="true")
    assert "/spawn-pending/" not in sent.url
    page = sent.text
    assert (
        "Unknown option(s): &#39;privileged&#39;" in page
        or "Unknown option(s): 'privileged'" in page
    )
    assert hub.pool()["free"] == free
    assert hub.server_model("r1", "crafted") is None


def test_malformed_limits_stop_the_hub_naming_group_and_key(hub_factory):
    hub = hub_factory(
        "c.GPUSpawner.simulate_gpus = 2\n"
        'c.GPUSpawner.group_limits = {"students": {"max_gpus_per_user": -1}}\n',
        start=False,
    )
    hub.start(wait=False)
    assert hub.process.wait(60) != 0
    [line] = [line for line in hub.log().splitlines() if "gpuspawner:" in line]
    assert (
        "group_limits['students']['max_gpus_per_user'] must be a number of GPU-equivalents" in line
    )
