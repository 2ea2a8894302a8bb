"""Only Docker's word ends a server: errors and timeouts from Docker leave servers running.

The hub talks to Docker through the fault-injecting proxy (`tests/dockerfaults.py`).
While Docker answers 500, or holds the hub's requests past its client's timeout,
on inspect, list and events, JupyterHub polls every server many times and the
monitor asks for the container list every half second: no server is lost, no GPU
moves, and the admin and, after a while, the user are told. Once Docker answers
again, nothing is left of it.
"""

import pytest
from books import assert_books_hold
from browser import log_in
from realhub import LIGHT_SERVERS, PASSWORD, Hub
from selenium.webdriver.common.by import By

CONFIG = """
c.GPUSpawner.simulate_gpus = 4
c.GPUSpawner.monitor_interval = 0.5
c.DockerSpawner.poll_interval = 1
c.DockerSpawner.client_kwargs = {"timeout": 3}  # a held request fails the hub's call in 3 s
c.GPUSpawner.tell_user_docker_silent_after = 2
c.GPUSpawner.profiles = [
    {"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True},
    {"display_name": "3 GPUs", "slug": "gpu-3", "gpus": 3},
]
"""

# What the hub asks Docker while servers run: is it running (inspect), which containers
# run (list, then an inspect of each), and what happened meanwhile (events).
INSPECT, LIST, EVENTS = r"/containers/[^/]+/json", r"/containers/json", r"/events"


@pytest.fixture(scope="module")
def hub(faults, hub_factory) -> Hub:  # faults first, so the proxy outlives the hub
    hub = hub_factory(CONFIG + LIGHT_SERVERS, env={"DOCKER_HOST": faults.docker_host})
    hub.add_users("ann", "bob")
    return hub


@pytest.fixture(scope="module")
def servers(hub):
    """ann with one GPU, bob with three: the whole machine, busy with people's work."""
    hub.spawn_ready("ann", profile="gpu-1")
    hub.spawn_ready("bob", profile="gpu-3")
    return {
        user: (hub.container_of(user).attrs["State"]["StartedAt"], hub.held_uuids(user))
        for user in ("ann", "bob")
    }


def poll_errors(hub: Hub) -> float:
    return hub.metrics().get(("gpuspawner_engine_errors_total", (("question", "poll"),)), 0)


def list_errors(hub: Hub) -> float:
    return hub.metrics().get(("gpuspawner_engine_errors_total", (("question", "list"),)), 0)


def lease_warning(hub: Hub, user: str) -> dict | None:
    response = hub.api("GET", f"/users/{user}/server/gpu-lease")
    response.raise_for_status()
    return response.json()["warning"]


def assert_nothing_lost(hub: Hub, servers: dict) -> None:
    for user, (started_at, uuids) in servers.items():
        model = hub.server_model(user)
        assert model is not None and model["ready"], f"{user}'s server ended"
        container = hub.container_of(user)
        assert container.status == "running"
        assert container.attrs["State"]["StartedAt"] == started_at  # the same run, not a restart
        assert hub.held_uuids(user) == uuids
    assert_books_hold(hub)


@pytest.mark.parametrize("fault", ["500", "timeout"])
def test_docker_not_answering_ends_no_server(hub, faults, servers, fault, browser):
    polls, lists = poll_errors(hub), list_errors(hub)
    if fault == "500":
        rules = [faults.fail("GET", path, 500, "server error") for path in (INSPECT, LIST, EVENTS)]
    else:
        rules = [faults.hold("GET", path) for path in (INSPECT, LIST, EVENTS)]

    # Each server polled at least three times, and the monitor's list failing too.
    hub.wait_for(lambda: poll_errors(hub) >= polls + 6, timeout=60, what="polls Docker errs on")
    hub.wait_for(lambda: list_errors(hub) > lists, timeout=30, what="a list Docker errs on")
    assert_nothing_lost(hub, servers)
    report = hub.pool()["docker"]
    assert report["answering"] is False
    assert report["since"] and report["error"]
    log_in(browser, hub.url, "admin", PASSWORD)
    browser.get(f"{hub.url}/hub/gpus")
    banner = browser.find_element(By.CSS_SELECTOR, "[data-testid=docker-silent]").text
    assert banner.startswith("Docker not answering since ")
    assert "Every server runs on as last seen" in banner
    warning = hub.wait_for(lambda: lease_warning(hub, "bob"), what="bob told")
    assert "no answer from Docker about this server" in warning["says"]
    assert "It runs on" in warning["says"]

    faults.clear(*rules)
    hub.wait_for(lambda: hub.pool()["docker"]["answering"], timeout=30, what="Docker heard")
    hub.wait_for(lambda: lease_warning(hub, "bob") is None, what="bob's warning gone")
    browser.get(f"{hub.url}/hub/gpus")
    assert not browser.find_elements(By.CSS_SELECTOR, "[data-testid=docker-silent]")
    assert_nothing_lost(hub, servers)


def test_docker_word_that_a_container_is_gone_still_ends_its_server(hub, servers):
    """A 404 is Docker's word: the server ends and its GPU goes back."""
    [gpu] = servers["ann"][1]
    hub.docker.api.remove_container(hub.container_of("ann").id, force=True)
    hub.wait_gone("ann")
    hub.wait_for(lambda: hub.gpu_states()[gpu] == "free", what="ann's GPU back")
    assert_books_hold(hub)
