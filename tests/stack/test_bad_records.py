"""Bad records never stop the hub: they are named in one log line and their GPUs kept out.

The books are rebuilt at hub start from the containers' labels and device
requests. Here those records are made wrong on purpose, with real containers
labelled as gpuspawner labels them (`engine.docker.labels`) for this hub, while
the hub is down after `kill -9` (with `cleanup_servers = False`, servers outlive
it). The restarted hub serves, logs one line per bad container naming it,
keeps the GPUs those containers reach out of the pool while they run, and its
GPU pages answer.
"""

import time

import docker
import pytest
from realhub import BASE_IMAGE, LIGHT_SERVER, Hub

from gpuspawner.core.pool import Grant, Holder
from gpuspawner.core.units import bare
from gpuspawner.engine.docker import labels

# The books are what these tests are about, not JupyterLab: their servers are light.
CONFIG = f"""
c.GPUSpawner.simulate_gpus = 4
c.GPUSpawner.monitor_interval = 0.5
c.JupyterHub.cleanup_servers = False
c.JupyterHub.init_spawners_timeout = 1  # serve while checking that servers answer
c.GPUSpawner.profiles = [{{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True,
                           "spawner_override": {LIGHT_SERVER!r}}}]
"""


@pytest.fixture(scope="module")
def hub(hub_factory) -> Hub:
    hub = hub_factory(CONFIG)
    hub.add_users("ann", "bob", "cat")
    return hub


def device_request(uuids: list[str]) -> list[docker.types.DeviceRequest]:
    return [docker.types.DeviceRequest(device_ids=uuids, capabilities=[["gpu"]])]


def stray(hub: Hub, name: str, gpu: str, **bad_labels: str) -> str:
    """A container labelled as a server of this hub that the database never knew."""
    grant = Grant(Holder(900, 900, "ghost", name), (bare(gpu),), time.time())
    container = hub.docker.containers.run(
        BASE_IMAGE,
        ["sleep", "300"],
        name=f"{hub.prefix}-{name}",
        labels={**labels(grant, hub.prefix), **bad_labels},
        device_requests=device_request([gpu]),
        detach=True,
        remove=True,
    )
    return container.name


def claims(gpus: list[str]) -> dict[str, str]:
    """Labels that say a container holds these whole GPUs (a whole GPU's unit is its UUID)."""
    return {"gpuspawner.gpus": ",".join(gpus), "gpuspawner.units": ",".join(gpus)}


def replace(hub: Hub, user: str, gpus: list[str], **new_labels: str) -> str:
    """Swap a user's notebook container for a copy whose labels and device request say
    otherwise: the same name, command, token and port, so the hub finds it answering."""
    api = hub.docker.api
    original = api.inspect_container(hub.container_of(user).id)
    [binding] = original["NetworkSettings"]["Ports"]["8888/tcp"]
    api.remove_container(original["Id"], force=True)
    config = original["Config"]
    copy = api.create_container(
        config["Image"],
        config["Cmd"],
        name=original["Name"].lstrip("/"),
        environment=config["Env"],
        labels={**config["Labels"], **claims(gpus), **new_labels},
        ports=[8888],
        host_config=api.create_host_config(
            port_bindings={8888: (binding["HostIp"], int(binding["HostPort"]))},
            device_requests=device_request(gpus),
            auto_remove=True,
        ),
    )
    api.start(copy)
    return original["Name"].lstrip("/")


def restart(hub: Hub) -> int:
    """Start the hub again; where its log of this start begins."""
    start = len(hub.log())
    hub.start()
    return start


def found_running(hub: Hub, user: str) -> None:
    """The restarted hub has checked that the user's server answers (it may take a while)."""
    hub.wait_for(
        lambda: (hub.server_model(user) or {}).get("ready"), timeout=60, what=f"{user} running"
    )


def not_adopted_lines(hub: Hub, since: int) -> list[str]:
    return [line for line in hub.log()[since:].splitlines() if "not adopted" in line]


def the_gpu_pages_answer(hub: Hub) -> None:
    assert hub.api("GET", "/gpus").status_code == 200
    page = hub.login("admin").get(f"{hub.url}/hub/gpus", timeout=30)
    assert page.status_code == 200, page.text


def test_unreadable_labels_are_named_once_and_their_gpus_kept_out(hub: Hub):
    gpus = [g["uuid"] for g in hub.pool()["gpus"]]
    hub.spawn_ready("bob", profile="gpu-1")
    [bobs] = hub.held_uuids("bob")
    others = [g for g in gpus if g != bobs]
    hub.kill()
    bad = [
        stray(hub, "since-a-word", others[0], **{"gpuspawner.since": "yesterday"}),
        stray(hub, "since-inf", others[1], **{"gpuspawner.since": "inf"}),
        replace(hub, "bob", [bobs], **{"gpuspawner.since": "1e300"}),  # a server the hub knows
    ]
    since = restart(hub)

    lines = not_adopted_lines(hub, since)
    assert len(lines) == 3, lines
    for name in bad:
        [line] = [line for line in lines if f"container {name} " in line]
        assert "unreadable labels" in line
    expected = {others[0]: bad[0], others[1]: bad[1], bobs: bad[2]}
    hub.wait_for(lambda: hub.used_outside() == {g: f"container {n}" for g, n in expected.items()})
    the_gpu_pages_answer(hub)
    found_running(hub, "bob")  # bob's server runs on: only the books skip it

    hub.spawn_ready("ann", profile="gpu-1")
    assert hub.held_uuids("ann") == [others[2]]
    for name in bad[:2]:
        hub.docker.api.remove_container(name, force=True)
    hub.stop_server("bob")
    hub.stop_server("ann")
    hub.wait_for(lambda: hub.pool()["free"] == 4, what="every GPU back once the containers went")


def test_two_known_servers_claiming_one_gpu_are_named_and_keep_it_out(hub: Hub):
    hub.spawn_ready("ann", profile="gpu-1")
    hub.spawn_ready("bob", profile="gpu-1")
    [anns], [bobs] = hub.held_uuids("ann"), hub.held_uuids("bob")
    hub.kill()
    names = {hub.container_of("ann").name, replace(hub, "bob", [anns, bobs])}
    since = restart(hub)

    [line] = not_adopted_lines(hub, since)
    assert any(name in line for name in names) and "claims GPUs held by others" in line
    found_running(hub, "ann")
    found_running(hub, "bob")
    states = hub.gpu_states()
    assert states[anns] != "free" and states[bobs] != "free"
    assert hub.pool()["free"] == 2
    the_gpu_pages_answer(hub)

    hub.stop_server("ann")
    hub.stop_server("bob")
    hub.wait_for(lambda: hub.pool()["free"] == 4, what="both GPUs back once both containers went")


def test_a_container_of_this_hub_that_jupyterhub_says_ended_is_removed_at_start(hub: Hub):
    """As when a removal Docker had not confirmed was under way when the hub stopped: the
    restarted hub finishes it, holding the GPU (stopping) until Docker confirms it gone."""
    gpu = hub.pool()["gpus"][0]["uuid"]
    hub.kill()
    name = stray(hub, "left-over", gpu)
    since = restart(hub)
    hub.wait_for(
        lambda: not hub.docker.containers.list(all=True, filters={"name": name}),
        what="the leftover container removed",
    )
    hub.wait_for(lambda: hub.gpu_states()[gpu] == "free", what="its GPU back in the pool")
    assert f"container {name} runs, but JupyterHub says ghost/left-over ended" in hub.log()[since:]


def test_a_stale_container_on_a_running_servers_gpu_never_displaces_it_at_start(hub: Hub):
    """A container of a server JupyterHub says ended (left over, or forged by someone with
    Docker access), made while the hub was down on the GPU a running server holds: Docker
    lists it first, but the running server keeps its GPU and the stale one is removed."""
    hub.spawn_ready("cat", profile="gpu-1")
    [cats] = hub.held_uuids("cat")
    hub.kill()
    name = stray(hub, "stale", cats)
    since = restart(hub)
    hub.wait_for(
        lambda: not hub.docker.containers.list(all=True, filters={"name": name}),
        what="the stale container removed",
    )
    assert not not_adopted_lines(hub, since)
    assert f"container {name} runs, but JupyterHub says ghost/stale ended" in hub.log()[since:]
    found_running(hub, "cat")
    assert hub.held_by("cat") == [cats]
    hub.stop_server("cat")
    hub.wait_for(lambda: hub.pool()["free"] == 4, what="every GPU back once cat's server went")
