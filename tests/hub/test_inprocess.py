"""The hub side in-process: JupyterHub's MockHub with GPUSpawner, on the real dockerd.

One hub for the module, started as a real one starts (the adapter starts the
broker). Tests drive spawners directly where the path is the spawner's, and
the REST API where it is the hub's. The containers run a one-line HTTP server
instead of Jupyter, so a server is ready in about a second. After each test
every server is stopped and every GPU must be back in the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable

import docker
import pytest
from jupyterhub import orm
from jupyterhub.app import JupyterHub
from jupyterhub.spawner import SpawnException
from jupyterhub.tests.utils import (
    add_user,
    api_request,
    async_requests,
    auth_header,
    get_page,
    public_url,
)
from mockhub import HTTP_STUB, gpu_hub_config, running_hub
from prometheus_client.parser import text_string_to_metric_families
from realhub import NOTEBOOK_IMAGE

from gpuspawner.core.pool import DeviceState
from gpuspawner.engine.docker import device_requests
from gpuspawner.hub import attach
from gpuspawner.hub.books.broker import Broker

pytestmark = pytest.mark.docker

PROFILES = [
    {"display_name": "CPU only", "slug": "cpu", "gpus": 0},
    {"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True},
    {"display_name": "2 GPUs", "slug": "gpu-2", "gpus": 2},
    {"display_name": "4 GPUs", "slug": "gpu-4", "gpus": 4},
]
GPUS = 8
SETTINGS = {
    "image": NOTEBOOK_IMAGE,
    "pull_policy": "never",
    "simulate_gpus": GPUS,
    "profiles": PROFILES,
    "cmd": HTTP_STUB,
    "monitor_interval": 0.5,
    # Culling limits for everyone: what made every admin spawn crash in 0.1.
    "default_limits": {"max_gpus_per_user": 2, "idle_timeout": 7200, "gpu_idle_timeout": 3600},
    "group_limits": {
        "staff": {"max_gpus_per_user": GPUS, "max_gpus_group": GPUS},
        "short": {"max_age": 3600},
    },
}


@pytest.fixture(scope="module")
async def app():
    async with running_hub(gpu_hub_config(**SETTINGS)) as app:
        yield app


@pytest.fixture(autouse=True)
async def every_gpu_comes_back(app):
    """After each test: every server stopped, users and groups gone, the whole pool free."""
    yield
    for orm_user in app.db.query(orm.User).all():
        user = app.users[orm_user]
        for name, spawner in list(user.spawners.items()):
            if spawner.active:
                await app.proxy.delete_user(user, name)
                await user.stop(name)
            await Broker.current().settled(spawner.orm_spawner.id)
        if user.name not in ("admin", "user"):
            app.users.delete(user.id)
    for group in app.db.query(orm.Group).all():
        app.db.delete(group)
    app.db.commit()
    pool = Broker.current().pool
    await until(lambda: pool.free_count() == GPUS, "every GPU back in the pool")
    assert pool.grants() == []


async def until(condition: Callable[[], object], what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.05)


def member(app, name: str, *groups: str, admin: bool = False):
    """A user (an admin with `admin`; an existing admin stays one) in `groups`."""
    user = add_user(app.db, app, name=name, **({"admin": True} if admin else {}))
    for group_name in groups:
        group = orm.Group.find(app.db, group_name)
        if group is None:
            group = orm.Group(name=group_name)
            app.db.add(group)
        group.users.append(user.orm_user)
    app.db.commit()
    return user


def server_path(user: str, server: str) -> tuple[str, ...]:
    return ("users", user, "servers", server) if server else ("users", user, "server")


async def spawn(app, user: str, server: str = "", **user_options):
    body = {"user_options": user_options}
    return await api_request(app, *server_path(user, server), method="post", json=body)


async def stop(app, user: str, server: str = "") -> None:
    response = await api_request(app, *server_path(user, server), method="delete")
    assert response.status_code == 204, response.text
    await Broker.current().settled(app.users[user].spawners[server].orm_spawner.id)


def held(app, user: str, server: str = "") -> tuple[str, ...]:
    grant = Broker.current().grant_of(app.users[user].spawners[server].orm_spawner.id)
    return grant.uuids if grant else ()


def containers_of(app, user: str) -> list:
    labels = [f"gpuspawner.hub={app.config.DockerSpawner.prefix}", f"gpuspawner.user={user}"]
    return docker.from_env().containers.list(all=True, filters={"label": labels})


@contextlib.asynccontextmanager
async def reconfigured(app, **settings) -> AsyncIterator[Broker]:
    """The hub's broker restarted with other c.GPUSpawner settings, as after an admin's edit
    and a hub restart; the module's settings again afterwards."""
    saved = copy.deepcopy(app.config.GPUSpawner)
    await Broker.current().shutdown()
    app.config.GPUSpawner.update(settings)
    try:
        yield await attach.start_broker(app)
    finally:
        await Broker.current().shutdown()
        app.config.GPUSpawner = saved
        await attach.start_broker(app)


# --- hub start ------------------------------------------------------------------------------
async def test_the_hub_starts_one_broker_and_a_second_start_returns_it(app):
    broker = Broker.current()
    assert len(broker.site.gpus) == GPUS and broker.pool.free_count() == GPUS
    assert JupyterHub.init_spawners.gpuspawner  # the adapter ran this hub's start
    assert await attach.start_broker(app) is broker
    assert Broker.current() is broker


# --- admins -----------------------------------------------------------------------------------
async def test_an_admin_starts_every_profile(app):
    """gpu-2 and gpu-4 are over default_limits' 2 GPUs per user: admins are not limited."""
    responses = await asyncio.gather(
        *(spawn(app, "admin", p["slug"], profile=p["slug"]) for p in PROFILES)
    )
    assert [r.status_code for r in responses] == [201] * len(PROFILES), [r.text for r in responses]
    client = docker.from_env().api
    for profile in PROFILES:
        spawner = app.users["admin"].spawners[profile["slug"]]
        uuids = held(app, "admin", profile["slug"])
        assert len(uuids) == profile["gpus"]
        inspected = client.inspect_container(spawner.object_id)
        requested = [r["DeviceIDs"] for r in inspected["HostConfig"]["DeviceRequests"]]
        assert requested == ([list(uuids)] if uuids else [])
        if not uuids:
            assert "NVIDIA_VISIBLE_DEVICES=void" in inspected["Config"]["Env"]
        state = spawner.get_state()
        assert state.get("gpus", []) == list(uuids)
        assert state.get("idle_timeout") == (7200 if profile["gpus"] else None)
    assert Broker.current().pool.free_count() == GPUS - sum(p["gpus"] for p in PROFILES)


async def test_with_limit_admins_an_admin_gets_their_groups_limits(app):
    member(app, "admin", "staff")
    member(app, "boss", admin=True)
    async with reconfigured(app, limit_admins=True):
        responses = await asyncio.gather(
            *(spawn(app, "admin", p["slug"], profile=p["slug"]) for p in PROFILES)
        )
        assert [r.status_code for r in responses] == [201] * len(PROFILES)
        refused = await spawn(app, "boss", "big", profile="gpu-4")
        assert refused.status_code == 403, refused.text
        assert "(max_gpus_per_user from default_limits)" in refused.json()["message"]
        assert (await spawn(app, "boss", profile="gpu-1")).status_code == 201
        assert len(held(app, "boss")) == 1


# --- user_options ---------------------------------------------------------------------------
async def test_stored_options_naming_a_removed_profile_are_refused_and_take_nothing(app):
    member(app, "sam")
    assert (await spawn(app, "sam", profile="gpu-2")).status_code == 201
    await stop(app, "sam")
    remaining = [p for p in PROFILES if p["slug"] != "gpu-2"]
    async with reconfigured(app, profiles=remaining) as broker:
        # No options in the request: the hub starts the server with the stored ones.
        response = await api_request(app, *server_path("sam", ""), method="post")
        assert response.status_code == 400, response.text
        assert (
            "There is no profile 'gpu-2'. Choose one of: cpu, gpu-1, gpu-4."
            in (response.json()["message"])
        )
        assert broker.pool.free_count() == GPUS and broker.pool.grants() == []
        assert not app.users["sam"].spawner.active
        assert containers_of(app, "sam") == []


# --- the books: adoption and release ----------------------------------------------------------
async def test_two_containers_claiming_one_gpu_at_hub_start_one_is_adopted_and_it_never_frees(
    app, caplog
):
    member(app, "ann")
    member(app, "bob")
    assert (await spawn(app, "ann")).status_code == 201
    assert (await spawn(app, "bob")).status_code == 201
    [shared] = held(app, "ann")
    await Broker.current().shutdown()
    # While no broker runs, bob's container is replaced by one that claims ann's GPU too.
    client = docker.from_env().api
    bob = app.users["bob"].spawner
    original = client.inspect_container(bob.object_id)
    client.remove_container(bob.object_id, force=True)
    forged = client.create_container(
        NOTEBOOK_IMAGE,
        HTTP_STUB,
        name=original["Name"].lstrip("/"),
        labels={
            **original["Config"]["Labels"],
            "gpuspawner.gpus": shared,
            "gpuspawner.units": shared,  # a whole GPU's unit is its UUID
        },
        host_config={"DeviceRequests": device_requests([shared])},
    )
    client.start(forged["Id"])
    bob.object_id = forged["Id"]
    caplog.clear()

    broker = await attach.start_broker(app)

    keys = {name: app.users[name].spawner.orm_spawner.id for name in ("ann", "bob")}
    adopted = [name for name, key in keys.items() if broker.grant_of(key)]
    assert len(adopted) == 1
    [winner] = adopted
    [loser] = set(keys) - {winner}
    assert broker.grant_of(keys[winner]).uuids == (shared,)
    assert broker.pool.states()[shared] is DeviceState.ALLOCATED
    loser_container = client.inspect_container(app.users[loser].spawner.object_id)["Name"][1:]
    refusals = [r.getMessage() for r in caplog.records if "not adopted" in r.getMessage()]
    assert len(refusals) == 1 and f"container {loser_container} not adopted" in refusals[0]

    await stop(app, winner)  # the GPU goes with the container that still runs, not to the pool
    assert broker.pool.states()[shared] is DeviceState.EXTERNAL
    [row] = [g for g in (await api_request(app, "gpus")).json()["gpus"] if g["uuid"] == shared]
    assert row["state"] == "external"
    assert row["used_outside_hub_by"] == f"container {loser_container}"


async def test_a_running_container_the_hub_lost_track_of_is_found_by_label_and_removed(app):
    spawner = member(app, "cara").spawner
    spawner.user_options = {"profile": "gpu-1"}
    await spawner.start()
    container, key = spawner.object_id, spawner.orm_spawner.id
    [uuid] = held(app, "cara")
    broker = Broker.current()
    # The hub ends the server without a stop that worked and without the container's id.
    spawner.object_id = ""
    spawner.clear_state()
    assert broker.pool.states()[uuid] is DeviceState.STOPPING
    assert await broker.settled(key)
    assert docker.from_env().api.containers(all=True, filters={"id": container}) == []
    assert broker.pool.states()[uuid] is DeviceState.FREE


async def test_a_gpu_stays_stopping_while_docker_cannot_confirm_the_container_gone(app, caplog):
    spawner = member(app, "dan").spawner
    spawner.user_options = {"profile": "gpu-1"}
    await spawner.start()
    key = spawner.orm_spawner.id
    [uuid] = held(app, "dan")
    broker = Broker.current()
    engine = broker.engine  # the one the broker's removals and its monitor ask
    answering = engine.client
    engine.client = docker.APIClient("unix:///nonexistent/docker.sock", "1.41")  # Docker gone
    try:
        await spawner.stop()
        spawner.clear_state()
        assert not await broker.settled(key)
        assert broker.pool.states()[uuid] is DeviceState.STOPPING
        assert "dan ended, but Docker has not confirmed its container gone" in caplog.text
        [row] = [g for g in (await api_request(app, "gpus")).json()["gpus"] if g["uuid"] == uuid]
        assert row["state"] == "stopping" and row["holder"]["stopping"]
        with pytest.raises(SpawnException) as refused:
            await spawner.start()
        assert refused.value.status_code == 409
        assert "has not been confirmed gone yet" in str(refused.value)
        assert broker.pool.states()[uuid] is DeviceState.STOPPING
    finally:
        engine.client = answering
    # The monitor asks again at its next tick, and now Docker answers.
    await until(lambda: broker.pool.states()[uuid] is DeviceState.FREE, "the GPU released")


# --- culling ------------------------------------------------------------------------------------
async def test_the_reclaimer_stops_a_server_over_its_max_age_and_tells_its_user_why(app):
    member(app, "eve", "short")
    assert (await spawn(app, "eve")).status_code == 201
    broker = Broker.current()
    broker.clock = lambda: time.time() + 2 * 3600
    try:
        await until(lambda: not app.users["eve"].spawner.active, "eve's server stopped")
    finally:
        broker.clock = time.time
    spawner = app.users["eve"].spawner
    assert await broker.settled(spawner.orm_spawner.id)
    reason = "it ran for 2 h 0 min, the longest a GPU server may run (max_age of group short)"
    # What the hub saved when the server stopped: why, and no GPUs or idle timeout any more.
    state = spawner.orm_spawner.state
    assert reason in state["stop_notice"]
    assert "gpus" not in state and "idle_timeout" not in state
    cookies = await app.login_user("eve")
    page = await get_page("spawn/eve", app, cookies=cookies)
    assert page.status_code == 200
    assert "Your default server was stopped at" in page.text and reason in page.text
    assert "Start it again on CPU only, with the same files" in page.text


# --- what admins see --------------------------------------------------------------------------
async def test_the_metrics_match_the_pool(app):
    member(app, "fay", "staff")
    assert (await spawn(app, "fay", profile="gpu-2")).status_code == 201
    response = await async_requests.get(
        public_url(app, path="hub/metrics"), headers=auth_header(app.db, "admin")
    )
    assert response.status_code == 200, response.text
    families = {f.name: f.samples for f in text_string_to_metric_families(response.text)}
    pool = Broker.current().pool
    by_state = {s.labels["state"]: s.value for s in families["gpuspawner_gpus"]}
    counted = Counter(state.value for state in pool.states().values())
    assert by_state == {state.value: counted[state.value] for state in DeviceState} | {
        "excluded": 0
    }
    assert by_state["allocated"] == 2 and by_state["free"] == GPUS - 2
    assert {s.labels["group"]: s.value for s in families["gpuspawner_gpus_held"]} == {"staff": 2}
    allocated = {s.labels["uuid"] for s in families["gpuspawner_gpu_allocated"] if s.value}
    assert allocated == set(held(app, "fay"))


async def test_the_gpu_pages_answer_admins_and_refuse_everyone_else(app):
    member(app, "gil")
    as_admin = await api_request(app, "gpus")
    assert as_admin.status_code == 200
    assert as_admin.json()["total"] == GPUS
    assert (await api_request(app, "gpus", name="gil")).status_code == 403
    page = await get_page("gpus", app, cookies=await app.login_user("admin"))
    assert page.status_code == 200
    assert Broker.current().pool.ids[0] in page.text
    refused = await get_page("gpus", app, cookies=await app.login_user("gil"))
    assert refused.status_code == 403
