"""Users' work survives: a home per user that outlives every container, shared data read-only,
and 'keep working on CPU' after a GPU is reclaimed. Real hubs, containers and volumes; the
files are written and read as a user does, through the notebook server's contents API."""

import json

import docker
import pytest
import requests
from admintools import gpuspawner
from browser import chromium, log_in
from in_container import run_in
from realhub import CPU_IMAGE, PASSWORD, Hub, restart_dockerd
from selenium.webdriver.common.by import By

from gpuspawner.engine.storage import LABEL_HOME

CONFIG = """
from gpuspawner.hub.culler import idle_culler_service

c.GPUSpawner.simulate_gpus = 4
c.GPUSpawner.simulated_load_file = {load!r}
c.GPUSpawner.monitor_interval = 0.5
# A CPU server killed, or ended by a Docker restart: only JupyterHub's poll sees it end
c.DockerSpawner.poll_interval = 1
c.GPUSpawner.profiles = [
    {{"display_name": "CPU only", "slug": "cpu", "gpus": 0,
      "spawner_override": {{"image": {cpu_image!r}}}}},
    {{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True}},
    {{"display_name": "Lost data", "slug": "lost-data", "gpus": 1,
      "spawner_override": {{"read_only_volumes": {{{missing!r}: "/lost"}}}}}},
]
c.GPUSpawner.read_only_volumes = {{{data!r}: "/data"}}
c.Spawner.group_overrides = {{
    "physics-data": {{
        "groups": ["physics"],
        "spawner_override": {{"read_only_volumes": {{{physics!r}: "/data-physics"}}}},
    }},
}}
c.GPUSpawner.group_limits = {{
    "gpu-idlers": {{"gpu_idle_timeout": 4}},
    "marathon": {{"max_age": 30}},  # beyond a JupyterLab start on a busy machine
    "idlers": {{"idle_timeout": 15}},
}}
culler, culler_role = idle_culler_service(timeout=3600, cull_every=1)
c.JupyterHub.services.append(culler)
c.JupyterHub.load_roles.append(culler_role)
c.JupyterHub.cleanup_servers = False
"""
RESULT = "work/result.txt"


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """Datasets on the host: one for everyone, one for the physics group."""
    root = tmp_path_factory.mktemp("shared")
    for folder, name, text in (("data", "README", "for everyone"), ("physics", "events", "1,2")):
        (root / folder).mkdir(mode=0o755)
        (root / folder / name).write_text(text)
        (root / folder).chmod(0o755)
    return root


@pytest.fixture(scope="module")
def hub(hub_factory, load_file, shared) -> Hub:
    hub = hub_factory(
        CONFIG.format(
            load=str(load_file),
            cpu_image=CPU_IMAGE,
            data=str(shared / "data"),
            physics=str(shared / "physics"),
            missing=str(shared / "no-such-folder"),
        )
    )
    hub.add_users(
        "alice", "bob", "carol", "dan", "erin", "frank", "gina",
        groups={
            "gpu-idlers": ["alice", "carol"],
            "marathon": ["frank"],
            "idlers": ["gina"],
            "physics": ["erin"],
        },
    )  # fmt: skip
    return hub


# --- as a user does, through the notebook server -------------------------------------------
def contents(hub: Hub, user: str, path: str, server: str = "") -> str:
    return f"{hub.url}/user/{user}/{server + '/' if server else ''}api/contents/{path}"


def write(hub: Hub, user: str, path: str, text: str, server: str = "") -> None:
    auth = {"Authorization": f"token {hub.token}"}
    folder = path.rpartition("/")[0]
    made = requests.put(
        contents(hub, user, folder, server), headers=auth, json={"type": "directory"}, timeout=30
    )
    assert made.status_code in (200, 201), made.text
    body = {"type": "file", "format": "text", "content": text}
    saved = requests.put(contents(hub, user, path, server), headers=auth, json=body, timeout=30)
    assert saved.status_code in (200, 201), saved.text


def read(hub: Hub, user: str, path: str, server: str = "") -> str | None:
    """The file's text as the user's notebook server shows it; None if it has no such file."""
    got = requests.get(
        contents(hub, user, path, server),
        headers={"Authorization": f"token {hub.token}"},
        params={"content": "1"},
        timeout=30,
    )
    if got.status_code == 404:
        return None
    assert got.ok, got.text
    return got.json()["content"]


def set_load(load_file, busy: list[str]) -> None:
    load_file.write_text(json.dumps({u: {"utilization_percent": 97} for u in busy}))


def all_gpus(hub: Hub) -> list[str]:
    return [gpu["uuid"] for gpu in hub.pool()["gpus"]]


def spawn_page(hub: Hub, user: str) -> str:
    return hub.login(user).get(f"{hub.url}/hub/spawn/{user}").text


def write_then_cull(hub: Hub, load_file, user: str, text: str) -> None:
    """A GPU server that writes its result, then leaves its GPU idle until it is culled."""
    set_load(load_file, all_gpus(hub))  # busy while it starts and writes: no early cull
    try:
        hub.spawn_ready(user, profile="gpu-1")
        write(hub, user, RESULT, text)
    finally:
        set_load(load_file, [])
    hub.wait_for(lambda: hub.server_model(user) is None, timeout=60, what="the GPU-idle cull")


# --- the acceptance path ------------------------------------------------------------
@pytest.mark.engine_alone  # restarts dockerd
def test_alices_result_survives_a_gpu_cull_a_cpu_restart_a_hub_kill_and_a_docker_restart(
    hub: Hub, load_file, tmp_path
):
    write_then_cull(hub, load_file, "alice", "loss=0.031")
    page = spawn_page(hub, "alice")
    assert "its 1 GPU was idle for" in page and "Your files in /home/jovyan are kept." in page
    assert 'data-testid="restart-on-cpu"' in page

    browser = chromium()  # one click on the spawn page, as alice
    try:
        log_in(browser, hub.url, "alice", PASSWORD)
        browser.get(f"{hub.url}/hub/spawn/alice")
        button = browser.find_element(By.CSS_SELECTOR, "[data-testid=restart-on-cpu]")
        assert "CPU only" in button.text
        button.click()
        hub.wait_for(lambda: (hub.server_model("alice") or {}).get("ready"), 90, "the CPU restart")
    finally:
        browser.quit()
    assert hub.server_model("alice")["user_options"] == {"profile": "cpu"}
    assert hub.held_uuids("alice") == [] and hub.container_of("alice").image.tags == [CPU_IMAGE]
    assert read(hub, "alice", RESULT) == "loss=0.031"
    assert hub.api("GET", "/users/alice/stop-notices").json() == {"notices": []}  # gone with it

    hub.kill()  # kill -9 of the hub; the notebook keeps running (cleanup_servers = False)
    hub.start()
    assert read(hub, "alice", RESULT) == "loss=0.031"

    restart_dockerd()  # running containers stop, and --rm removes them
    hub.wait_for(lambda: hub.server_model("alice") is None, 60, "alice's server dropped")
    set_load(load_file, all_gpus(hub))  # back to a GPU, busy this time
    try:
        hub.spawn_ready("alice", profile="gpu-1")
        assert read(hub, "alice", RESULT) == "loss=0.031"

        done = gpuspawner(
            "cleanup", "-f", str(hub.config_file), "--prefix", hub.prefix, "--yes", cwd=hub.workdir
        )
        assert done.returncode == 0, done.stderr
        assert "every home belongs to a user of the hub" in done.stdout
        assert hub.home_of("alice") in {v.name for v in hub.volumes()}
        assert read(hub, "alice", RESULT) == "loss=0.031"
        hub.stop_server("alice")
    finally:
        set_load(load_file, [])

    volume = docker.from_env().volumes.get(hub.home_of("alice"))
    assert volume.attrs["Labels"][LABEL_HOME] == "alice"  # how the admin tools know it
    listed = gpuspawner(
        "homes", "-f", str(hub.config_file), "--prefix", hub.prefix, cwd=hub.workdir
    )
    assert listed.returncode == 0, listed.stderr
    [row] = [line.split() for line in listed.stdout.splitlines() if line.startswith(volume.name)]
    assert row[1] == "alice" and row[-2] in ("kB", "MB") and row[-1] == "–"  # size; unused


def test_bobs_server_cannot_see_alices_files(hub: Hub):
    hub.spawn_ready("alice", profile="cpu")
    write(hub, "alice", "work/private.txt", "alice only")
    hub.spawn_ready("bob", profile="cpu")
    assert read(hub, "bob", "work/private.txt") is None
    mounts = {m.get("Name") or m["Source"] for m in hub.container_of("bob").attrs["Mounts"]}
    assert hub.home_of("bob") in mounts and hub.home_of("alice") not in mounts
    hub.stop_server("alice")
    hub.stop_server("bob")


def test_the_cpu_restart_is_offered_and_made_through_the_rest_api(hub: Hub, load_file):
    write_then_cull(hub, load_file, "carol", "from the API")
    session = hub.login("carol")
    notices = session.get(f"{hub.url}/hub/api/users/carol/stop-notices").json()["notices"]
    [notice] = notices
    assert "Your files in /home/jovyan are kept." in notice["notice"]
    offer = notice["restart"]
    assert offer["json"] == {"user_options": {"profile": "cpu"}}
    started = session.request(
        offer["method"],
        hub.url + offer["url"],
        json=offer["json"],
        headers={"X-XSRFToken": session.cookies["_xsrf"]},
    )
    assert started.status_code in (201, 202), started.text
    hub.wait_ready("carol")
    assert hub.held_uuids("carol") == []
    assert read(hub, "carol", RESULT) == "from the API"
    assert session.get(f"{hub.url}/hub/api/users/carol/stop-notices").json() == {"notices": []}
    assert hub.api("GET", "/users/bob/stop-notices").json() == {"notices": []}
    hub.stop_server("carol")


@pytest.mark.parametrize(
    ("user", "why"),
    [
        ("frank", "the longest a GPU server may run (max_age of group marathon)"),
        ("gina", "(idle_timeout of group idlers)"),
    ],
)
def test_files_survive_culls_by_max_age_and_idle_timeout(hub: Hub, user, why):
    hub.spawn_ready(user, profile="gpu-1")
    write(hub, user, RESULT, why)
    hub.wait_for(lambda: hub.server_model(user) is None, timeout=90, what="the cull")
    page = spawn_page(hub, user)
    assert why in page and "Your files in /home/jovyan are kept." in page
    hub.spawn_ready(user, profile="gpu-1")
    assert read(hub, user, RESULT) == why
    hub.stop_server(user)


def test_files_survive_docker_kill_of_the_container(hub: Hub):
    hub.spawn_ready("dan", profile="cpu")
    write(hub, "dan", RESULT, "killed")
    hub.container_of("dan").kill()
    hub.wait_for(lambda: hub.server_model("dan") is None, what="the hub noticing the death")
    hub.spawn_ready("dan", profile="cpu")
    assert read(hub, "dan", RESULT) == "killed"
    hub.stop_server("dan")


def test_files_survive_a_hub_restart_that_stops_every_server(hub: Hub):
    hub.spawn_ready("dan", "notes", profile="gpu-1")
    write(hub, "dan", "work/named.txt", "a named server", server="notes")
    config = hub.config_file.read_text()
    hub.config_file.write_text(config + "\nc.JupyterHub.cleanup_servers = True\n")
    try:
        hub.stop()  # leaves the server running (cleanup_servers was False) ...
        hub.start()  # ... and this hub reads True
        hub.stop()  # graceful: now the hub stops every server, and their containers go
        assert not hub.containers(all=True)
    finally:
        hub.config_file.write_text(config)
        hub.start()
    hub.spawn_ready("dan", profile="cpu")  # another server of dan's: the same home
    assert read(hub, "dan", "work/named.txt") == "a named server"
    hub.stop_server("dan")


def test_shared_data_is_read_only_for_everyone_and_per_group(hub: Hub):
    hub.spawn_ready("erin", profile="cpu")
    hub.spawn_ready("bob", profile="cpu")
    for user in ("erin", "bob"):
        container = hub.container_of(user)
        assert run_in(container, ["cat", "/data/README"]).output == "for everyone"
        refused = run_in(container, ["touch", "/data/mine"])
        assert refused.exit_code != 0 and "Read-only file system" in refused.output
    assert run_in(hub.container_of("erin"), ["cat", "/data-physics/events"]).output == "1,2"
    assert run_in(hub.container_of("bob"), ["ls", "/data-physics"]).exit_code != 0
    hub.stop_server("erin")
    hub.stop_server("bob")


def test_missing_shared_data_is_a_clear_error_that_takes_nothing(hub: Hub):
    refused = hub.spawn("bob", "lost", profile="lost-data")
    assert refused.status_code == 500
    assert "does not exist on this host" in refused.json()["message"]
    hub.wait_gone("bob", "lost")
    assert hub.pool()["free"] == 4
    assert not [c for c in hub.containers(all=True) if c.labels.get("gpuspawner.user") == "bob"]


def test_homes_in_host_folders_are_made_for_the_notebook_user(hub_factory, tmp_path):
    homes = tmp_path / "srv-home"
    folders = hub_factory(
        f"""
c.GPUSpawner.simulate_gpus = 1
c.GPUSpawner.profiles = [{{"display_name": "CPU", "slug": "cpu", "gpus": 0}}]
c.GPUSpawner.image = {CPU_IMAGE!r}
c.DockerSpawner.volumes = {{"{homes}/{{username}}": "/home/jovyan"}}
"""
    )
    folders.add_users("hana")
    folders.spawn_ready("hana")
    write(folders, "hana", RESULT, "on the host disk")
    home = homes / "hana"
    assert (home.stat().st_uid, home.stat().st_mode & 0o777) == (1000, 0o700)
    assert (home / RESULT).read_text() == "on the host disk"
    assert (home / RESULT).stat().st_uid == 1000
    folders.stop_server("hana")
    folders.spawn_ready("hana")
    assert read(folders, "hana", RESULT) == "on the host disk"
    folders.stop_server("hana")
    folders.stop()
