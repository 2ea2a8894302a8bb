"""The lease API in-process: JupyterHub's MockHub with GPUSpawner, on the real dockerd.

Who may read a server's lease (its own token, its user, admins; nobody else's
token, whether the server exists or not), what a GPU server's and a CPU-only
server's lease hold, and a warning that comes while the server still runs.
The containers run a one-line HTTP server instead of Jupyter; the simulated
GPUs stay idle, so their gpu_idle_timeout clocks run.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from jupyterhub import orm
from jupyterhub.tests.utils import add_user, api_request
from mockhub import HTTP_STUB, gpu_hub_config, running_hub
from realhub import NOTEBOOK_IMAGE

from gpuspawner.hub.books.broker import Broker

pytestmark = pytest.mark.docker

SETTINGS = {
    "image": NOTEBOOK_IMAGE,
    "pull_policy": "never",
    "cmd": HTTP_STUB,
    "monitor_interval": 0.2,
    "warn_before_cull": 2,
    "profiles": [
        {"display_name": "CPU only", "slug": "cpu", "gpus": 0},
        {"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True},
    ],
    "default_limits": {"idle_timeout": 7200, "cpu_idle_timeout": 3600, "max_age": 8 * 3600},
    "group_limits": {"brief": {"gpu_idle_timeout": 3}},
}


@pytest.fixture(scope="module")
async def app():
    async with running_hub(gpu_hub_config(**SETTINGS)) as app:
        add_user(app.db, app, name="ann")
        add_user(app.db, app, name="bob")
        brief = orm.Group(name="brief")
        brief.users.append(add_user(app.db, app, name="cy").orm_user)
        app.db.add(brief)
        app.db.commit()
        yield app


def lease_path(user: str, server: str) -> tuple[str, ...]:
    where = ("servers", server) if server else ("server",)
    return ("users", user, *where, "gpu-lease")


async def lease(app, user: str, server: str = "", token: str | None = None, **kwargs):
    headers = {"Authorization": f"token {token}"} if token else {}
    return await api_request(app, *lease_path(user, server), headers=headers, **kwargs)


async def spawn(app, user: str, server: str = "", **user_options) -> str:
    """Start a server; its own JUPYTERHUB_API_TOKEN."""
    path = ("users", user, "servers", server) if server else ("users", user, "server")
    response = await api_request(app, *path, method="post", json={"user_options": user_options})
    assert response.status_code == 201, response.text
    return app.users[user].spawners[server].api_token


async def stop(app, user: str, server: str = "") -> None:
    path = ("users", user, "servers", server) if server else ("users", user, "server")
    await api_request(app, *path, method="delete")
    await Broker.current().settled(app.users[user].spawners[server].orm_spawner.id)


async def test_a_servers_token_reads_its_own_lease_and_no_other(app):
    ann = await spawn(app, "ann", profile="gpu-1")
    notes = await spawn(app, "ann", "notes", profile="cpu")
    bob = await spawn(app, "bob", profile="gpu-1")
    try:
        own = await lease(app, "ann", token=ann)
        assert own.status_code == 200, own.text
        body = own.json()
        grant = Broker.current().grant_of(app.users["ann"].spawners[""].orm_spawner.id)
        assert [g["uuid"] for g in body["gpus"]] == list(grant.uuids)
        assert body["profile"] == {"slug": "gpu-1", "display_name": "1 GPU"}
        assert [limit["key"] for limit in body["limits"]] == ["max_age", "idle_timeout"]
        assert body["summary"].startswith("1 GPU · ") and body["warning"] is None

        cpu = (await lease(app, "ann", "notes", token=notes)).json()
        assert cpu["gpus"] == [] and [limit["key"] for limit in cpu["limits"]] == [
            "cpu_idle_timeout"
        ]
        assert cpu["summary"].startswith("CPU only · ")

        for user, server in [("ann", "notes"), ("bob", ""), ("nobody", ""), ("ann", "other")]:
            refused = await lease(app, user, server, token=ann)
            assert refused.status_code == 403, (user, server, refused.text)
        assert (await lease(app, "ann", token=bob)).status_code == 403
        assert (await lease(app, "ann", name="ann")).status_code == 200  # her own session
        assert (await lease(app, "bob", name="ann")).status_code == 403
        assert (await lease(app, "bob")).status_code == 200  # an admin's token
        assert (await lease(app, "ann", noauth=True)).status_code == 403  # no credentials
    finally:
        await stop(app, "ann", "notes")
        await stop(app, "bob")
    await stop(app, "ann")
    assert (await lease(app, "ann", name="ann")).status_code == 404


async def test_the_warning_comes_while_the_server_runs_then_the_stop(app):
    """cy's group stops a server whose GPU was idle 3 s, warned 2 s ahead."""
    token = await spawn(app, "cy", profile="gpu-1")
    deadline = time.monotonic() + 10
    while True:
        body = (await lease(app, "cy", token=token)).json()
        if body["warning"]:
            break
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.1)
    assert body["warning"]["key"] == "gpu_idle_timeout"
    assert "its 1 GPU has been idle for" in body["warning"]["says"]
    # brief sets only gpu_idle_timeout: the rest is default_limits', and the lease says so
    sources = {limit["key"]: limit["group"] for limit in body["limits"]}
    assert sources == {
        "max_age": "default_limits", "gpu_idle_timeout": "brief", "idle_timeout": "default_limits"
    }  # fmt: skip
    says = {limit["key"]: limit["says"] for limit in body["limits"]}
    assert says["max_age"].endswith(" (max_age from default_limits).")
    assert "(gpu_idle_timeout of group brief)" in says["gpu_idle_timeout"]
    assert app.users["cy"].spawners[""].active
    while app.users["cy"].spawners[""].active:  # the reclaimer stops it at 3 s idle
        assert time.monotonic() < deadline + 10, "no cull"
        await asyncio.sleep(0.1)
    assert (await lease(app, "cy", token=token)).status_code in (403, 404)
    await Broker.current().settled(app.users["cy"].spawners[""].orm_spawner.id)
