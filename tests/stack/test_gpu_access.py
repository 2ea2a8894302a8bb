"""Who may read the GPU pool and act on it, in a real hub: the idle culler's token reads no
holder, a dashboard's reads and changes nothing, admins need no config, and a group the
admin's own config grants `custom:gpus:admin` stops servers with a reason their user reads."""

import pytest
import requests
from realhub import LIGHT_SERVERS, Hub

from gpuspawner.hub.culler import idle_culler_service

_, CULLER_ROLE = idle_culler_service()
CULLER_TOKEN = "culler-token-0123456789abcdef"
DASHBOARD_TOKEN = "dashboard-token-0123456789abcdef"
# No c.JupyterHub.custom_scopes: the hub defines gpuspawner's scopes for load_roles itself.
CONFIG = f"""
c.GPUSpawner.simulate_gpus = 3
c.GPUSpawner.profiles = [{{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1}}]
c.JupyterHub.services += [
    {{"name": "culler", "api_token": {CULLER_TOKEN!r}}},
    {{"name": "dashboard", "api_token": {DASHBOARD_TOKEN!r}}},
]
c.JupyterHub.load_groups = {{"gpu-operators": {{"users": ["olga"]}}}}
c.JupyterHub.load_roles += [
    {{"name": "culler", "scopes": {CULLER_ROLE["scopes"]!r}, "services": ["culler"]}},
    {{"name": "dashboard", "scopes": ["custom:gpus:read"], "services": ["dashboard"]}},
    {{"name": "gpu-operators", "scopes": ["custom:gpus:admin", "delete:servers"],
      "groups": ["gpu-operators"]}},
]
"""


@pytest.fixture(scope="module")
def hub(hub_factory) -> Hub:
    hub = hub_factory(CONFIG + LIGHT_SERVERS)
    hub.add_users("ann", "bob", "admin", "olga")
    hub.spawn_ready("ann", profile="gpu-1")
    hub.spawn_ready("bob", "train", profile="gpu-1")
    return hub


def as_token(hub: Hub, token: str, method: str, path: str, **kwargs) -> requests.Response:
    headers = {"Authorization": f"token {token}"}
    return requests.request(method, f"{hub.url}/hub{path}", headers=headers, timeout=30, **kwargs)


def test_the_idle_cullers_token_lists_servers_but_reads_no_gpu_holder(hub: Hub):
    listed = as_token(hub, CULLER_TOKEN, "GET", "/api/users")
    assert listed.status_code == 200 and {u["name"] for u in listed.json()} >= {"ann", "bob"}
    pool = as_token(hub, CULLER_TOKEN, "GET", "/api/gpus")
    assert pool.status_code == 403
    assert "custom:gpus:read" in pool.json()["message"]
    page = as_token(hub, CULLER_TOKEN, "GET", "/gpus", allow_redirects=False)
    assert page.status_code in (302, 403) and "gpu-table" not in page.text
    assert as_token(hub, CULLER_TOKEN, "POST", "/api/gpus/stop/ann").status_code == 403
    assert hub.server_model("ann")["ready"]


def test_a_dashboards_token_reads_the_pool_and_stops_nothing(hub: Hub):
    pool = as_token(hub, DASHBOARD_TOKEN, "GET", "/api/gpus")
    assert pool.status_code == 200
    assert {(g["holder"] or {}).get("user") for g in pool.json()["gpus"]} == {"ann", "bob", None}
    stop = as_token(hub, DASHBOARD_TOKEN, "POST", "/api/gpus/stop/ann")
    assert stop.status_code == 403 and "custom:gpus:admin" in stop.json()["message"]
    assert as_token(hub, DASHBOARD_TOKEN, "DELETE", "/api/gpus/waiting/1").status_code == 403
    assert hub.server_model("ann")["ready"]


def test_admins_see_the_page_and_its_stop_buttons_with_no_scope_config(hub: Hub):
    page = hub.login("admin").get(f"{hub.url}/hub/gpus", timeout=30)
    assert page.status_code == 200
    assert page.text.count('class="btn btn-sm btn-outline-danger stop-server"') == 2
    assert 'id="stop-dialog"' in page.text


def test_users_outside_the_group_get_neither_page_nor_link(hub: Hub):
    session = hub.login("bob")
    page = session.get(f"{hub.url}/hub/gpus", timeout=30)
    assert page.status_code == 403
    assert "which your account (or this token) does not have" in page.text  # a person's words
    assert session.get(f"{hub.url}/hub/api/gpus", timeout=30).status_code == 403
    assert 'href="/hub/gpus"' not in session.get(f"{hub.url}/hub/home", timeout=30).text


def test_a_gpu_operator_stops_a_server_with_a_reason_its_user_reads(hub: Hub):
    session = hub.login("olga")
    assert 'href="/hub/gpus"' in session.get(f"{hub.url}/hub/home", timeout=30).text
    assert "stop-server" in session.get(f"{hub.url}/hub/gpus", timeout=30).text
    url = f"{hub.url}/hub/api/gpus/stop/bob/train"
    body = {"reason": "the GPUs are booked for the exam"}
    forged = session.post(url, json=body, timeout=30)  # the cookie alone, as another site's form
    assert forged.status_code == 403 and hub.server_model("bob", "train")["ready"]
    too_long = session.post(
        url,
        json={"reason": "x" * 501},
        headers={"X-XSRFToken": session.cookies["_xsrf"]},
        timeout=30,
    )
    assert too_long.status_code == 400 and "at most 500" in too_long.json()["message"]

    stop = session.post(
        url, json=body, headers={"X-XSRFToken": session.cookies["_xsrf"]}, timeout=30
    )
    assert stop.status_code in (202, 204), stop.text
    hub.wait_gone("bob", "train")
    hub.wait_for(lambda: not hub.held_by("bob"), what="bob's GPU back in the pool")
    [notice] = hub.login("bob").get(f"{hub.url}/hub/api/users/bob/stop-notices").json()["notices"]
    assert notice["server"] == "train"
    assert "an admin stopped it, saying “the GPUs are booked for the exam”" in notice["notice"]
    again = session.post(
        url, json={}, headers={"X-XSRFToken": session.cookies["_xsrf"]}, timeout=30
    )
    assert again.status_code == 409 and "bob/train is not running" in again.json()["message"]
