"""More people per GPU server, end to end (issue #15): a simulated host of 2 exclusive H100s,
an A100 cut into 7 × 1g.10gb MIG instances and an L40S shared by 4, on a real hub, proxy and
dockerd with the stand-in NVIDIA hook.

13 servers run at once here. JupyterLab 13 times does not fit on two cores, so these
profiles run a tiny HTTP server in the same image instead (as benchmarks/restart_recovery.py
does): what is under test is the GPUs each container is given, which is the same.
"""

import concurrent.futures
import json

import pytest
from browser import log_in
from realhub import LIGHT_SERVERS, PASSWORD, Hub
from selenium.webdriver.common.by import By

HOST = [
    {"model": "NVIDIA H100 80GB HBM3", "memory": "80G", "count": 2},
    {"model": "NVIDIA A100-SXM4-80GB", "memory": "80G", "mig": ["1g.10gb"] * 7},
    {"model": "NVIDIA L40S", "memory": "48G"},
]
CONFIG = """
LIGHT = {{"cmd": ["python3", "-m", "http.server", "8888"], "mem_limit": "64M"}}
c.GPUSpawner.simulated_host = {host!r}
c.GPUSpawner.shared_gpus = {{3: 4}}
c.GPUSpawner.simulated_load_file = {load!r}
c.GPUSpawner.monitor_interval = 0.5
c.GPUSpawner.profiles = [
    {{"display_name": "CPU only", "slug": "cpu", "spawner_override": LIGHT}},
    {{"display_name": "An H100", "slug": "h100", "gpus": 1, "gpu_model": "*H100*",
      "min_gpu_memory": "80G", "spawner_override": LIGHT}},
    {{"display_name": "A slice", "slug": "slice", "mig_profile": "1g.10gb",
      "spawner_override": LIGHT}},
    {{"display_name": "Shared GPU", "slug": "shared", "shared": True,
      "spawner_override": LIGHT}},
]
c.GPUSpawner.group_limits = {{
    "students": {{"max_gpus_per_user": 0.25}},
    "idlers": {{"gpu_idle_timeout": 3}},
}}
c.JupyterHub.cleanup_servers = False
c.JupyterHub.concurrent_spawn_limit = 20
"""
EVERYONE = {
    **{f"h{n}": "h100" for n in range(2)},
    **{f"m{n}": "slice" for n in range(7)},
    **{f"s{n}": "shared" for n in range(4)},
}


@pytest.fixture(scope="module")
def host_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("host") / "host.json"
    path.write_text(json.dumps(HOST))
    return path


@pytest.fixture(scope="module")
def hub(hub_factory, host_file, load_file) -> Hub:
    hub = hub_factory(CONFIG.format(host=str(host_file), load=str(load_file)) + LIGHT_SERVERS)
    hub.add_users(*EVERYONE, "stu", "viewer", "busy", "idle", groups={"students": ["stu"]})
    hub.add_users(groups={"idlers": ["busy", "idle"]})
    return hub


def device_ids(hub: Hub, user: str, server: str = "") -> list[str]:
    """What the container's device request names."""
    container = hub.container_of(user, server)
    return [
        i for r in container.attrs["HostConfig"]["DeviceRequests"] or [] for i in r["DeviceIDs"]
    ]


def holders(hub: Hub) -> dict[str, str]:
    """Unit → who holds it, as the hub reports its books."""
    return {g["unit"]: g["holder"]["user"] for g in hub.pool()["gpus"] if g["holder"]}


def test_limits_count_gpu_equivalents_and_say_so(hub: Hub):
    refused = hub.spawn("stu", "big", profile="h100")
    assert refused.status_code == 403
    assert "of your 1/4 GPU (max_gpus_per_user of group students)" in refused.json()["message"]
    hub.spawn_ready("stu", "a", profile="shared")  # 1/4 of the L40S: exactly the allowance
    refused = hub.spawn("stu", "b", profile="slice")  # 1/7 more is over it
    assert refused.status_code == 403
    message = refused.json()["message"]
    assert "You already hold 1/4 GPU of your 1/4 GPU" in message
    assert "this profile asks for 1/7 more" in message
    assert "Counted in GPU-equivalents: a whole GPU counts 1, a MIG instance its share" in message
    assert hub.server_model("stu", "b") is None
    hub.stop_server("stu", "a")


def test_thirteen_servers_each_get_exactly_their_gpu_instance_or_slot(hub: Hub):
    with concurrent.futures.ThreadPoolExecutor(4) as spawns:
        list(spawns.map(lambda user: hub.spawn_ready(user, profile=EVERYONE[user]), EVERYONE))
    requested = {user: device_ids(hub, user) for user in EVERYONE}
    # each device request names exactly one GPU or MIG UUID, which the container sees
    assert all(len(ids) == 1 for ids in requested.values()), requested
    for user, [device] in requested.items():
        assert hub.visible_devices(user) == device
    h100s = {requested[u][0] for u in EVERYONE if EVERYONE[u] == "h100"}
    slices = {requested[u][0] for u in EVERYONE if EVERYONE[u] == "slice"}
    shared = [requested[u][0] for u in EVERYONE if EVERYONE[u] == "shared"]
    assert len(h100s) == 2 and all(u.startswith("GPU-") for u in h100s)
    assert len(slices) == 7 and all(u.startswith("MIG-") for u in slices)
    # the shared GPU is in exactly its 4 slots' containers, each holding another slot
    assert len(set(shared)) == 1 and not {shared[0]} & h100s
    slots = {hub.container_of(u).labels["gpuspawner.units"] for u in EVERYONE if u[0] == "s"}
    assert slots == {f"{shared[0]}#{n}" for n in (1, 2, 3, 4)}
    books = holders(hub)
    assert len(books) == 13 and sorted(books.values()) == sorted(EVERYONE)
    pool = hub.pool()
    assert pool["free"] == 0
    assert pool["by_kind"] == {
        "gpu": {"total": 2, "free": 0},
        "mig": {"total": 7, "free": 0},
        "shared": {"total": 4, "free": 0},
    }
    # nothing of any kind is left, and the refusal says what was needed
    refused = hub.spawn("viewer", profile="slice")
    assert refused.status_code == 409
    assert "needs a MIG instance 1g.10gb, 0 of 7 are free" in refused.json()["message"]


def test_the_form_shows_each_kind_with_its_free_count_and_greys_out_the_rest(hub: Hub, browser):
    hub.stop_server("m0")
    hub.stop_server("s0")
    log_in(browser, hub.url, "viewer", PASSWORD)
    browser.get(f"{hub.url}/hub/spawn/viewer/look")
    lines = {
        p.get_attribute("data-kind"): p.text
        for p in browser.find_elements(By.CSS_SELECTOR, "[data-testid=availability] p")
    }
    assert lines["gpu"] == "0 of 2 GPUs free · NVIDIA H100 80GB HBM3 · 80 GiB"
    assert lines["mig"].startswith("1 of 7 MIG 1g.10gb instances free · 10 GiB each, 1/7 of")
    assert lines["shared"].startswith("1 of 4 shared GPU slots free · NVIDIA L40S")
    assert "no memory isolation" in lines["shared"]

    def row(slug):
        return browser.find_element(By.CSS_SELECTOR, f"[data-testid=profile-{slug}]")

    h100 = row("h100")
    assert h100.find_element(By.TAG_NAME, "input").get_attribute("disabled")
    assert "Needs 1 GPU (model *H100*, at least 80 GiB); 0 of 2 free right now." in h100.text
    for slug in ("slice", "shared", "cpu"):
        assert not row(slug).find_element(By.TAG_NAME, "input").get_attribute("disabled")
    assert "no memory isolation" in row("shared").text
    row("slice").click()
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit], input[type=submit]").click()
    hub.wait_started_by_browser("viewer", "look")
    [device] = device_ids(hub, "viewer", "look")
    assert device.startswith("MIG-")
    refused = hub.spawn("m0", profile="slice")  # the instance m0 gave back went to viewer
    assert refused.status_code == 409
    hub.stop_server("viewer", "look")
    hub.spawn_ready("m0", profile="slice")
    hub.spawn_ready("s0", profile="shared")


def test_a_hub_killed_and_restarted_recovers_every_holder(hub: Hub):
    before = holders(hub)
    assert len(before) == 13
    hub.kill()
    hub.start()
    assert holders(hub) == before
    assert hub.pool()["free"] == 0


def test_a_mig_layout_changed_while_the_hub_runs_is_followed(hub: Hub, host_file):
    others = {u: hub.container_of(u).id for u in EVERYONE if EVERYONE[u] != "slice"}
    with concurrent.futures.ThreadPoolExecutor(4) as stops:
        list(stops.map(hub.stop_server, [u for u in EVERYONE if EVERYONE[u] == "slice"]))
    host_file.write_text(json.dumps([HOST[0], {**HOST[1], "mig": ["3g.40gb", "3g.40gb"]}, HOST[2]]))

    def mig_profiles():
        return sorted(g["mig_profile"] for g in hub.pool()["gpus"] if g["kind"] == "mig")

    hub.wait_for(lambda: mig_profiles() == ["3g.40gb", "3g.40gb"], what="the new MIG layout")
    assert {u: hub.container_of(u).id for u in others} == others  # nothing else restarted
    refused = hub.spawn("m0", profile="slice")
    assert refused.status_code == 409 and "0 of 0 are free" in refused.json()["message"]
    host_file.write_text(json.dumps(HOST))
    hub.wait_for(lambda: mig_profiles() == ["1g.10gb"] * 7, what="the old MIG layout")
    with concurrent.futures.ThreadPoolExecutor(4) as stops:
        list(stops.map(hub.stop_server, list(others)))


def test_an_idle_server_on_a_shared_gpu_is_culled_beside_a_busy_one(hub: Hub, load_file):
    busy = f"{hub.prefix}-busy"  # DockerSpawner's container name, known before it starts
    load_file.write_text(
        json.dumps(
            {"3": {"utilization_percent": 90,
                   "processes": [{"container": busy, "utilization_percent": 90}]}}
        )
    )  # fmt: skip
    try:
        hub.spawn_ready("busy", profile="shared")
        assert hub.container_of("busy").name == busy
        started = hub.spawn("idle", profile="shared")
        assert started.status_code in (201, 202), started.text
        hub.wait_for(lambda: hub.server_model("idle") is None, timeout=60, what="idle slot cull")
        assert hub.server_model("busy")["ready"]  # its own processes keep it busy
        page = hub.login("idle").get(f"{hub.url}/hub/spawn/idle/next").text
        assert "its 1/4 GPU was idle for" in page and "(gpu_idle_timeout of group idlers)" in page
    finally:
        load_file.write_text("{}")
    hub.stop_server("busy")
