"""Renaming a user who holds GPUs changes nothing about the books.

JupyterHub renames a user (PATCH /hub/api/users/:name {"name": …}) while their
servers run. The books are keyed by the server's and the user's ids in the
hub's database, so the GPUs, the group's limits and the culling policy follow
the user under the new name, and admins see the new name.
"""

import pytest
from realhub import LIGHT_SERVERS, Hub

CONFIG = """
c.GPUSpawner.simulate_gpus = 4
c.GPUSpawner.monitor_interval = 0.5
c.GPUSpawner.profiles = [{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True}]
c.GPUSpawner.group_limits = {
    "students": {"max_gpus_per_user": 1},
    "marathon": {"max_age": 30},  # beyond a JupyterLab start on a busy machine
}
# a teaching assistant who may manage the students, and only them
c.JupyterHub.load_roles.append(
    {"name": "teaching-assistant", "users": ["ta"],
     "scopes": ["admin:users!group=students", "admin:servers!group=students"]}
)
"""


@pytest.fixture(scope="module")
def hub(hub_factory) -> Hub:
    hub = hub_factory(CONFIG + LIGHT_SERVERS)
    hub.add_users("alice", "runner", groups={"students": ["alice"], "marathon": ["runner"]})
    return hub


def test_a_renamed_user_keeps_their_gpu_and_their_groups_limit(hub: Hub):
    hub.spawn_ready("alice", profile="gpu-1")
    [gpu] = hub.held_uuids("alice")
    ta = hub.login("ta")
    renamed = ta.patch(
        f"{hub.url}/hub/api/users/alice",
        json={"name": "alice2"},
        headers={"X-XSRFToken": ta.cookies["_xsrf"]},
        timeout=30,
    )
    assert renamed.status_code == 200, renamed.text

    assert hub.held_by("alice2") == [gpu] and hub.held_by("alice") == []
    page = hub.login("admin").get(f"{hub.url}/hub/gpus", timeout=30)
    assert page.status_code == 200 and "<strong>alice2</strong>" in page.text
    refused = hub.spawn("alice2", "more", profile="gpu-1")
    assert refused.status_code == 403
    assert "max_gpus_per_user of group students" in refused.json()["message"]

    hub.stop_server("alice2")
    hub.wait_for(lambda: hub.gpu_states()[gpu] == "free", what="alice2's GPU back")
    assert hub.pool()["free"] == 4


def test_a_renamed_users_server_is_still_stopped_at_its_max_age(hub: Hub):
    hub.spawn_ready("runner", profile="gpu-1")
    renamed = hub.api("PATCH", "/users/runner", json={"name": "runner2"})
    assert renamed.status_code == 200, renamed.text
    assert hub.server_model("runner2")["ready"]  # renamed in time, before its max_age

    hub.wait_for(lambda: hub.server_model("runner2") is None, timeout=60, what="max_age stop")
    hub.wait_for(lambda: hub.pool()["free"] == 4, what="runner2's GPU back")
    page = hub.login("runner2").get(f"{hub.url}/hub/spawn/runner2/next", timeout=30).text
    assert "the longest a GPU server may run (max_age of group marathon)" in page
