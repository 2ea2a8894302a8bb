"""A GPU is free only when Docker confirms that no container holds it.

The hub talks to Docker through a fault-injecting proxy (`tests/dockerfaults.py`),
so Docker can refuse to stop, remove or inspect a container, or keep a request
in flight while a user cancels. At every step, `assert_books_hold`: no GPU is
reachable from two running containers, and no running container of the hub
reaches a GPU the pool calls free.

DockerSpawner runs all of a hub's Docker calls in one thread, so while a
request is held, the hub's polls of every server wait behind it (and so does
the answer to a spawn's POST); the monitor, on its own client, goes on.
"""

import concurrent.futures
import contextlib

import pytest
from books import assert_books_hold, containers_of, wait_free_only_once_gone
from dockerfaults import Rule
from realhub import LIGHT_SERVER, Hub

# The books are what these tests are about, not JupyterLab: their servers are light.
CONFIG = f"""
c.GPUSpawner.simulate_gpus = 2
c.GPUSpawner.monitor_interval = 0.5
c.DockerSpawner.poll_interval = 1
# a stop waiting on a held Docker request answers the API in 1 s (202), not in 10 s
c.JupyterHub.tornado_settings = {{"slow_stop_timeout": 1}}
c.GPUSpawner.profiles = [
    {{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True,
     "spawner_override": {LIGHT_SERVER!r}}},
    {{"display_name": "Slow to answer", "slug": "slow", "gpus": 1,
     "spawner_override": {{"cmd": ["sleep", "infinity"], "http_timeout": 120}}}},
]
c.GPUSpawner.group_overrides = {{
    "impatient": {{"groups": ["impatient"], "spawner_override": {{"start_timeout": 3}}}},
}}
# ivy may wait 10 min in line: her starts get 603 s from JupyterHub, but once her GPUs are
# reserved the container gets 3 s, as anyone's
c.GPUSpawner.group_limits = {{"impatient": {{"max_wait": 600}}}}
"""


@pytest.fixture(scope="module")
def hub(faults, hub_factory) -> Hub:  # faults first, so the proxy outlives the hub
    hub = hub_factory(CONFIG, env={"DOCKER_HOST": faults.docker_host})
    hub.add_users("ann", "bob", "cat", "dan", "ivy", groups={"impatient": ["ivy"]})
    return hub


@pytest.fixture(autouse=True)
def no_fault_outlives_its_test(faults):
    yield
    faults.clear()


def running(hub: Hub, container_id: str) -> bool:
    return hub.docker.api.inspect_container(container_id)["State"]["Running"]


@contextlib.contextmanager
def spawning(hub: Hub, user: str, server: str, held: Rule | None = None, **options):
    """A spawn whose POST waits, as a browser does, while the test goes on; if a Docker
    request is `held`, until it arrives. Leaving lets it go and waits for the POST's answer."""
    with concurrent.futures.ThreadPoolExecutor(1) as browser:
        browser.submit(hub.spawn, user, server, **options)
        try:
            if held is not None:
                held.wait_arrived()
            yield
        finally:
            if held is not None:
                held.release()


def test_docker_refusing_to_stop_and_remove_keeps_the_gpu_held_until_it_confirms(hub, faults):
    hub.spawn_ready("ann", profile="gpu-1")
    [gpu] = hub.held_uuids("ann")
    container = hub.container_of("ann")
    faults.fail("POST", f"/containers/{container.id}/stop", 500, "cannot stop")
    faults.fail("DELETE", f"/containers/{container.id}", 500, "cannot remove")

    hub.api("DELETE", "/users/ann/server")
    hub.wait_gone("ann")  # the hub believes the server ended
    assert running(hub, container.id)
    assert hub.gpu_states()[gpu] == "stopping"
    assert hub.held_by("ann") == [gpu]
    assert_books_hold(hub)

    hub.spawn_ready("bob", profile="gpu-1")  # the other GPU
    assert hub.held_uuids("bob") != [gpu]
    assert hub.spawn("cat", profile="gpu-1").status_code == 409  # none free
    again = hub.spawn("ann", profile="gpu-1")
    assert again.status_code == 409
    assert "has not been confirmed gone yet" in again.json()["message"]
    assert_books_hold(hub)

    faults.clear()  # Docker works again: the monitor's next try removes it
    wait_free_only_once_gone(hub, [gpu], "ann")
    assert_books_hold(hub)
    hub.spawn_ready("ann", profile="gpu-1")
    hub.stop_server("ann")
    hub.stop_server("bob")


def test_an_inspect_error_is_not_docker_word_that_the_server_ended(hub, faults):
    """DockerSpawner reads a 500 on inspect as "gone"; only Docker's 404 ends the server.

    Here the container really goes while Docker errs on every inspect of it: the hub cannot
    know, so the server stays listed and its GPU held, never given to another; Docker's
    first real answer (404) ends the server and frees the GPU."""
    hub.spawn_ready("ann", profile="gpu-1")
    [gpu] = hub.held_uuids("ann")
    container = hub.container_of("ann")
    inspect = faults.fail("GET", f"/containers/({container.id}|{container.name})/json", 500)
    hub.wait_for(lambda: inspect.hits >= 3, what="three polls Docker errs on")
    assert hub.server_model("ann")["ready"]
    hub.docker.api.remove_container(container.id, force=True)  # behind the hub's back
    hits = inspect.hits
    hub.wait_for(lambda: inspect.hits >= hits + 2, what="two more polls Docker errs on")
    assert hub.server_model("ann") is not None
    assert hub.gpu_states()[gpu] != "free"
    hub.spawn_ready("bob", profile="gpu-1")
    assert hub.held_uuids("bob") != [gpu]
    assert_books_hold(hub)

    faults.clear(inspect)  # Docker answers: no such container
    hub.wait_gone("ann")
    wait_free_only_once_gone(hub, [gpu], "ann")
    assert_books_hold(hub)
    hub.stop_server("bob")


STEPS = {  # method, path, and how many such requests go through first
    # the start checks its image before the GPUs, then DockerSpawner's start checks again
    "the image check": ("GET", r"/images/.+/json", 1),
    "docker create": ("POST", r"/containers/create", 0),
    "docker start": ("POST", r"/containers/[0-9a-f]+/start", 0),
}


@pytest.mark.parametrize("step", STEPS)
def test_a_spawn_cancelled_during_a_docker_call_leaves_no_container(hub, faults, step):
    """The held request reaches Docker only after the user cancelled."""
    held = faults.hold(*STEPS[step])
    with spawning(hub, "dan", "c", held, profile="gpu-1"):
        [gpu] = hub.held_by("dan")
        assert_books_hold(hub)
        cancel = hub.api("DELETE", "/users/dan/servers/c")
        assert cancel.status_code == 202, cancel.text  # the stop waits on Docker
        assert hub.gpu_states()[gpu] != "free"
        assert_books_hold(hub)
        held.release()

    hub.wait_gone("dan", "c")
    wait_free_only_once_gone(hub, [gpu], "dan", "c")
    assert_books_hold(hub)


def test_a_spawn_cancelled_while_the_notebook_starts_leaves_no_container(hub):
    with spawning(hub, "dan", "slow", profile="slow"):
        hub.wait_for(lambda: containers_of(hub, "dan", "slow"), what="the slow container")
        [gpu] = hub.held_by("dan")
        assert_books_hold(hub)
        hub.api("DELETE", "/users/dan/servers/slow")

    hub.wait_gone("dan", "slow", timeout=60)
    wait_free_only_once_gone(hub, [gpu], "dan", "slow")
    assert_books_hold(hub)


def test_a_start_timeout_during_docker_create_leaves_no_container(hub, faults):
    """ivy's group gives her servers start_timeout = 3 s; Docker takes longer to create.
    Her max_wait does not lengthen it: she got her GPUs at once."""
    held = faults.hold("POST", r"/containers/create")
    with spawning(hub, "ivy", "", held, profile="gpu-1"):
        [gpu] = hub.held_by("ivy")
        hub.wait_for(
            lambda: (hub.server_model("ivy") or {}).get("pending") == "stop",
            timeout=20,
            what="the hub giving up after 3 s",
        )
        assert "did not start within 3 s of getting its GPUs (start_timeout)" in hub.log()
        assert hub.gpu_states()[gpu] != "free"  # the create is still in flight
        assert_books_hold(hub)
        held.release()

    hub.wait_gone("ivy")
    wait_free_only_once_gone(hub, [gpu], "ivy")
    assert_books_hold(hub)
