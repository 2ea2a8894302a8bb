"""The core, end to end: real hub, proxy, dockerd with the stand-in NVIDIA hook, real image."""

import html
import json
import re
import subprocess
import threading
import time

import pytest
import requests
from realhub import NOTEBOOK_IMAGE, Hub

LEAKY_IMAGE = "gpuspawner-test-leaky:latest"

CONFIG = f"""
c.GPUSpawner.simulate_gpus = 4
c.GPUSpawner.profiles = [
    {{"display_name": "CPU only", "slug": "cpu", "gpus": 0,
      "spawner_override": {{"image": {LEAKY_IMAGE!r}}}}},
    {{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True}},
    {{"display_name": "2 GPUs", "slug": "gpu-2", "gpus": 2}},
]
"""


@pytest.fixture(scope="module")
def leaky_image():
    """An image that asks for every GPU, as NVIDIA's CUDA images do."""
    dockerfile = f"FROM {NOTEBOOK_IMAGE}\nENV NVIDIA_VISIBLE_DEVICES=all\n"
    subprocess.run(
        ["docker", "build", "-q", "-t", LEAKY_IMAGE, "-"],
        input=dockerfile.encode(),
        check=True,
        capture_output=True,
    )
    return LEAKY_IMAGE


@pytest.fixture(scope="module")
def hub(hub_factory, leaky_image) -> Hub:
    hub = hub_factory(CONFIG)
    hub.add_users("ann", "bob", "cat", "dan")
    return hub


def state_gpus(hub: Hub, user: str, server: str = "") -> list[str]:
    return hub.server_model(user, server)["state"]["gpus"]


def device_request(hub: Hub, user: str, server: str = "") -> list[str]:
    container = hub.container_of(user, server)
    requests_ = container.attrs["HostConfig"]["DeviceRequests"] or []
    return [i for r in requests_ for i in r["DeviceIDs"]]


def test_two_pairs_then_a_refusal_then_the_freed_pair(hub: Hub):
    hub.spawn_ready("ann", profile="gpu-2")
    hub.spawn_ready("bob", profile="gpu-2")
    ann, bob = hub.held_uuids("ann"), hub.held_uuids("bob")
    assert len(ann) == 2 and len(bob) == 2
    assert set(ann).isdisjoint(bob)
    # what the container sees is what the pool granted and what Docker was asked for
    assert ann == state_gpus(hub, "ann") == device_request(hub, "ann")
    assert all(re.fullmatch(r"GPU-[0-9a-f-]{36}", u) for u in ann + bob)

    refused = hub.spawn("cat", profile="gpu-2")
    assert refused.status_code == 409
    message = refused.json()["message"]
    assert "needs 2, 0 of 4 are free" in message and "Try again" in message
    assert hub.server_model("cat") is None
    assert not [c for c in hub.containers(all=True) if c.labels.get("gpuspawner.user") == "cat"]

    hub.stop_server("ann")
    hub.spawn_ready("cat", profile="gpu-2")
    assert sorted(hub.held_uuids("cat")) == sorted(ann)
    hub.stop_server("bob")
    hub.stop_server("cat")


def test_cpu_only_servers_see_no_gpu_even_if_the_image_asks_for_all(hub: Hub):
    hub.spawn_ready("dan", "notes", profile="cpu")
    assert hub.container_of("dan", "notes").image.tags == [LEAKY_IMAGE]
    assert hub.visible_devices("dan", "notes") == "void"
    assert device_request(hub, "dan", "notes") == []
    hub.stop_server("dan", "notes")


def test_stored_options_are_checked_again_on_the_next_start(hub: Hub):
    """The hub reuses stored user_options; a restart with no body must still be checked."""
    hub.spawn_ready("dan", "again", profile="gpu-1")
    first = hub.held_uuids("dan", "again")
    hub.stop_server("dan", "again")
    response = hub.api("POST", "/users/dan/servers/again")  # no body: stored options
    assert response.status_code in (201, 202), response.text
    hub.wait_ready("dan", "again")
    assert len(hub.held_uuids("dan", "again")) == 1
    assert hub.server_model("dan", "again")["user_options"] == {"profile": "gpu-1"}
    hub.stop_server("dan", "again")
    assert first


def test_progress_names_the_gpus_given(hub: Hub):
    # the POST returns only once the server is up, so watch progress beside it
    spawning = threading.Thread(
        target=hub.spawn, args=("ann", "progress"), kwargs={"profile": "gpu-1"}
    )
    spawning.start()
    while not (hub.server_model("ann", "progress") or {}).get("pending"):
        time.sleep(0.05)
    messages = []
    with hub.api("GET", "/users/ann/servers/progress/progress", stream=True) as events:
        for line in events.iter_lines():
            if line.startswith(b"data:"):
                event = json.loads(line[5:])
                messages.append(event["message"])
                if event.get("ready") or event.get("failed"):
                    break
    spawning.join()
    hub.wait_ready("ann", "progress")
    [uuid] = hub.held_uuids("ann", "progress")
    assert f"Reserved 1 × NVIDIA H100 80GB HBM3 · 80 GiB: {uuid}" in messages
    hub.stop_server("ann", "progress")


def test_the_form_shows_availability_and_spawns_the_choice(hub: Hub):
    session = hub.login("bob")
    page = session.get(f"{hub.url}/hub/spawn/bob/viaform").text
    assert "4 of 4</strong> GPUs free" in page
    assert 'value="gpu-2"' in page and "NVIDIA H100 80GB HBM3" in page

    response = hub.submit_form(session, "bob", "viaform", profile="gpu-2")
    assert response.ok, response.text
    hub.wait_ready("bob", "viaform")
    assert len(hub.held_uuids("bob", "viaform")) == 2
    assert hub.server_model("bob", "viaform")["user_options"] == {"profile": "gpu-2"}

    # another user now sees two free and can still take a pair, but not after a 1-GPU spawn
    hub.spawn_ready("cat", "one", profile="gpu-1")
    cat_page = hub.login("cat").get(f"{hub.url}/hub/spawn/cat/x").text
    assert "1 of 4</strong> GPUs free" in cat_page
    gpu2 = re.search(
        r'<label class="gpu-profile is-disabled"[^>]*profile-gpu-2.*?</label>', cat_page, re.S
    )
    assert gpu2 and "Needs 2 free GPU(s); 1 free right now." in gpu2.group(0)
    assert "You hold 1 GPU: GPU-" in cat_page and "(your server 'one')" in html.unescape(cat_page)
    hub.stop_server("bob", "viaform")
    hub.stop_server("cat", "one")


def test_a_refused_form_spawn_shows_the_reason_on_the_spawn_page(hub: Hub):
    hub.spawn_ready("ann", "big1", profile="gpu-2")
    hub.spawn_ready("bob", "big2", profile="gpu-2")
    session = hub.login("cat")
    response = hub.submit_form(session, "cat", "late", profile="gpu-1")
    assert "Not enough free GPUs" in response.text
    assert hub.server_model("cat", "late") is None
    hub.stop_server("ann", "big1")
    hub.stop_server("bob", "big2")


def test_the_user_lands_in_a_working_notebook(hub: Hub):
    hub.spawn_ready("dan", "lab", profile="gpu-1")
    session = hub.login("dan")
    landing = session.get(f"{hub.url}/user/dan/lab/")  # through the hub's OAuth, like a browser
    assert landing.ok and landing.url.endswith("/user/dan/lab/lab")
    assert "JupyterLab" in landing.text
    status = session.get(f"{hub.url}/user/dan/lab/api/status")
    assert status.ok and "started" in status.json()
    hub.stop_server("dan", "lab")


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            "c.GPUSpawner.simulate_gpus = 0\n",
            ["NVML could not start", "c.GPUSpawner.simulate_gpus = N"],
        ),
        (
            "c.GPUSpawner.simulate_gpus = 2\nc.DockerSpawner.remove = False\n",
            ["GPUSpawner needs remove=True"],
        ),
    ],
    ids=["no-gpus", "remove-false"],
)
def test_a_hub_that_cannot_hand_out_gpus_safely_refuses_to_start(hub_factory, config, expected):
    hub = hub_factory(config, start=False)
    hub.start(wait=False)
    assert hub.process.wait(60) != 0
    lines = [line for line in hub.log().splitlines() if "gpuspawner:" in line]
    assert len(lines) == 1, hub.log()
    assert all(words in lines[0] for words in expected), lines[0]
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{hub.url}/hub/api/", timeout=2)
