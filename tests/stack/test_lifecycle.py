"""The books stay right on every path: hub crashes and restarts, dying containers,
failed spawns, GPUs used outside the hub, unhealthy GPUs, and a spawn storm."""

import concurrent.futures
import json
import socket
import subprocess
import time

import pytest
from realhub import LIGHT_SERVER, Hub, free_port, restart_dockerd

CLASHING_PORT = free_port()

# The books are what these tests are about, not JupyterLab: their servers are light.
PROFILES = """
c.GPUSpawner.profiles = [
    {"display_name": "CPU only", "slug": "cpu", "gpus": 0, "spawner_override": LIGHT_SERVER},
    {"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True,
     "spawner_override": LIGHT_SERVER},
    {"display_name": "2 GPUs", "slug": "gpu-2", "gpus": 2, "spawner_override": LIGHT_SERVER},
    {"display_name": "Missing image", "slug": "no-image", "gpus": 1,
     "spawner_override": {"image": "gpuspawner-test-does-not-exist:never"}},
    {"display_name": "Never answers", "slug": "silent", "gpus": 1,
     "spawner_override": {"cmd": ["sleep", "infinity"], "http_timeout": 5}},
    {"display_name": "Slow to answer", "slug": "slow", "gpus": 1,
     "spawner_override": {"cmd": ["sleep", "infinity"], "http_timeout": 120}},
    {"display_name": "Port clash", "slug": "port-clash", "gpus": 1,
     "spawner_override": {
         "extra_host_config": {"port_bindings": {8888: ("127.0.0.1", CLASHING_PORT)}}}},
]
""".replace("CLASHING_PORT", str(CLASHING_PORT)).replace("LIGHT_SERVER", repr(LIGHT_SERVER))


@pytest.fixture(scope="module")
def hub(hub_factory, load_file) -> Hub:
    hub = hub_factory(
        PROFILES
        + f"""
c.GPUSpawner.simulate_gpus = 4
c.GPUSpawner.simulated_load_file = {str(load_file)!r}
c.GPUSpawner.monitor_interval = 0.5
# A server killed, or a CPU one ended by a Docker restart: only JupyterHub's poll sees it end
c.DockerSpawner.poll_interval = 1
c.GPUSpawner.avoid_gpus_with_foreign_processes = True
c.JupyterHub.cleanup_servers = False
"""
    )
    hub.add_users("ann", "bob", "cat", "dan")
    return hub


def free(hub: Hub) -> int:
    return hub.pool()["free"]


def leftovers(hub: Hub, user: str) -> list:
    return [c for c in hub.containers(all=True) if c.labels.get("gpuspawner.user") == user]


def test_after_kill_9_and_restart_no_gpu_is_given_twice_and_dead_servers_free_theirs(hub: Hub):
    hub.spawn_ready("ann", profile="gpu-2")
    hub.spawn_ready("bob", profile="gpu-2")
    ann = sorted(hub.held_uuids("ann"))
    hub.kill()
    hub.start()
    refused = hub.spawn("cat", profile="gpu-2")  # the very first request after the restart
    assert refused.status_code == 409, refused.text
    assert free(hub) == 0
    assert sorted(hub.held_uuids("ann")) == ann  # still running, still holding

    hub.docker.containers.get(hub.container_of("ann").id).kill()
    hub.wait_for(lambda: hub.server_model("ann") is None, what="the hub noticing ann's death")
    hub.spawn_ready("cat", profile="gpu-2")
    assert sorted(hub.held_uuids("cat")) == ann
    hub.stop_server("bob")
    hub.stop_server("cat")


def test_a_graceful_restart_keeps_running_servers_and_their_gpus(hub: Hub):
    hub.spawn_ready("ann", profile="gpu-1")
    held = hub.held_uuids("ann")
    hub.stop()
    hub.start()
    assert hub.server_model("ann")["ready"]
    assert hub.held_by("ann") == held
    assert free(hub) == 3
    hub.stop_server("ann")
    assert free(hub) == 4


def test_servers_that_died_while_the_hub_was_down_give_their_gpus_back(hub: Hub):
    hub.spawn_ready("ann", profile="gpu-2")
    hub.kill()
    hub.container_of("ann").remove(force=True)
    hub.start()
    hub.wait_for(lambda: hub.server_model("ann") is None, what="ann's server dropped")
    assert free(hub) == 4


def test_a_container_removed_by_hand_returns_its_gpus(hub: Hub):
    hub.spawn_ready("dan", profile="gpu-1")
    hub.container_of("dan").remove(force=True)
    hub.wait_for(lambda: free(hub) == 4, what="dan's GPU back in the pool")
    assert hub.server_model("dan") is None


def test_a_missing_image_fails_at_once_and_takes_nothing(hub: Hub):
    response = hub.spawn("dan", "x", profile="no-image")
    assert response.status_code >= 400
    assert free(hub) == 4
    assert hub.server_model("dan", "x") is None
    assert not leftovers(hub, "dan")


def test_a_container_that_cannot_start_is_removed_and_takes_nothing(hub: Hub):
    """Docker creates the container, then cannot start it: its port is taken."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", CLASHING_PORT))
        taken.listen()
        response = hub.spawn("dan", "clash", profile="port-clash")
    assert response.status_code >= 400, response.text
    assert free(hub) == 4
    assert hub.server_model("dan", "clash") is None
    assert not leftovers(hub, "dan")


def test_a_server_that_never_answers_is_stopped_and_frees_its_gpu(hub: Hub):
    hub.spawn("dan", "silent", profile="silent")
    hub.wait_for(lambda: hub.server_model("dan", "silent") is None, timeout=60, what="give-up")
    assert free(hub) == 4
    hub.wait_for(lambda: not leftovers(hub, "dan"), what="the silent container removed")


def test_cancelling_a_pending_spawn_frees_its_gpu(hub: Hub):
    hub.spawn("dan", "slow", profile="slow")
    hub.wait_for(lambda: free(hub) == 3, what="the slow server holding its GPU")
    response = hub.api("DELETE", "/users/dan/servers/slow")
    assert response.status_code in (202, 204), response.text
    hub.wait_for(lambda: hub.server_model("dan", "slow") is None, timeout=60, what="cancel")
    assert free(hub) == 4
    hub.wait_for(lambda: not leftovers(hub, "dan"), what="the cancelled container removed")


def test_gpus_used_by_containers_outside_the_hub_are_kept_out(hub: Hub):
    gpus = hub.pool()["gpus"]
    by_uuid = hub.docker_run("by-uuid", "--gpus", f"device={gpus[0]['uuid']}")
    by_index = hub.docker_run("by-index", "--gpus", '"device=2"')
    try:
        hub.wait_for(lambda: free(hub) == 2, what="the hand-started containers noticed")
        states = hub.gpu_states()
        assert states[gpus[0]["uuid"]] == states[gpus[2]["uuid"]] == "external"
        hub.spawn_ready("ann", profile="gpu-2")
        assert sorted(hub.held_uuids("ann")) == sorted([gpus[1]["uuid"], gpus[3]["uuid"]])
        hub.stop_server("ann")
    finally:
        subprocess.run(["docker", "rm", "-f", by_uuid, by_index], capture_output=True)
    hub.wait_for(lambda: free(hub) == 4, what="the GPUs back after the containers went")


def test_free_gpus_running_foreign_processes_are_kept_out_when_asked(hub: Hub, load_file):
    uuid = hub.pool()["gpus"][1]["uuid"]
    load_file.write_text(json.dumps({uuid: {"processes": [31337], "utilization_percent": 80}}))
    try:
        hub.wait_for(lambda: hub.gpu_states()[uuid] == "external", what="foreign process seen")
        [row] = [g for g in hub.pool()["gpus"] if g["uuid"] == uuid]
        assert row["used_outside_hub_by"] == "processes 31337 outside JupyterHub"
    finally:
        load_file.write_text("{}")
    hub.wait_for(lambda: hub.gpu_states()[uuid] == "free", what="the GPU back")


def test_an_unhealthy_gpu_is_kept_out_while_its_holder_keeps_running(hub: Hub, load_file):
    hub.spawn_ready("bob", profile="gpu-1")
    [uuid] = hub.held_uuids("bob")
    load_file.write_text(json.dumps({uuid: {"health": "lost: the GPU has fallen off the bus"}}))
    try:
        hub.wait_for(lambda: hub.gpu_states()[uuid] == "unhealthy", what="unhealthy GPU seen")
        assert hub.server_model("bob")["ready"]
        assert f"{uuid} is unhealthy (lost: the GPU has fallen off the bus)" in hub.log()
        assert "bob holds it and keeps running" in hub.log()
        hub.stop_server("bob")
        assert free(hub) == 3 and hub.gpu_states()[uuid] == "unhealthy"
    finally:
        load_file.write_text("{}")
    hub.wait_for(lambda: free(hub) == 4, what="the GPU healthy again")


@pytest.mark.engine_alone  # restarts dockerd
def test_after_a_docker_restart_the_pool_and_the_hub_agree(hub: Hub):
    hub.spawn_ready("ann", profile="gpu-2")
    hub.spawn_ready("bob", "cpu", profile="cpu")
    restart_dockerd()  # running containers stop, and --rm removes them
    hub.wait_for(lambda: hub.server_model("ann") is None, timeout=60, what="ann's server dropped")
    hub.wait_for(lambda: hub.server_model("bob", "cpu") is None, what="bob's server dropped")
    # JupyterHub may drop a server while dockerd is still coming back: her GPUs stay held
    # until Docker itself says the container is gone, then return (the removal's next ask)
    hub.wait_for(lambda: free(hub) == 4, what="her GPUs back once Docker confirms them free")
    hub.spawn_ready("ann", profile="gpu-2")
    assert len(hub.held_uuids("ann")) == 2
    hub.stop_server("ann")


def test_a_spawn_storm_never_gives_a_gpu_twice(hub_factory):
    storm = hub_factory(
        f"""
c.GPUSpawner.simulate_gpus = 8
c.GPUSpawner.profiles = [{{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1,
                           "spawner_override": {LIGHT_SERVER!r}}}]
# Each answer gives the outcome, however long 50 starts take on a busy machine: without
# this, a start still being refused after 10 s answers 202 and fails later.
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 60}}
"""
    )
    users = [f"storm{i:02d}" for i in range(50)]
    storm.add_users(*users)
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(50) as pool:
        responses = list(pool.map(lambda u: storm.spawn(u, profile="gpu-1"), users))
    codes = [r.status_code for r in responses]
    assert codes.count(409) == 42, codes
    assert sorted(set(codes) - {409}) in ([201], [202], [201, 202]), codes
    winners = [u for u, r in zip(users, responses, strict=True) if r.status_code != 409]
    for user in winners:
        storm.wait_ready(user)
    held = [u for user in winners for u in storm.held_uuids(user)]
    assert len(held) == len(set(held)) == 8
    assert storm.pool()["free"] == 0
    print(f"50 concurrent spawns on 8 GPUs settled in {time.monotonic() - started:.1f}s")
    for user in winners:
        storm.stop_server(user)
    assert storm.pool()["free"] == 8
