"""Homes on a swarm whose nodes keep their own (the default named volume): a user's next
server goes where their files are, whatever else runs; with that node full the start waits
in line and says why, or starts elsewhere only when the user chose so on the form (headless
Chromium); with that node down they are told at once; an admin moves a home to another
node, copied and checked before the old copy is emptied. With homes on shared storage
(`shared_homes`) placement is free and the files are on every node, the doctor asks each
node whether it mounts that storage, and storage the hub cannot use stops it."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import in_container
import pytest
from browser import log_in
from realhub import NOTEBOOK_IMAGE, PASSWORD, Hub
from selenium.webdriver.common.by import By
from swarmbed import NODES, SOCKETS, Swarm, wait_for
from test_hub import container_on, gpuspawner_cli, placed, task_of

from gpuspawner.engine.shared_homes import MARKER, NOT_SHARED, probe_node

pytestmark = [pytest.mark.swarm, pytest.mark.docker]

LIGHT = {
    "cmd": ["python3", "-m", "http.server", "8888"],
    "mem_limit": "64M",
    "extra_container_spec": {"init": True},  # stops at once on SIGTERM
}
PINNED = [  # a profile per node, to fill one node whatever the placement policy says
    {"display_name": f"1 GPU on {n}", "slug": f"on-{n}", "gpus": 1, "nodes": [n],
     "spawner_override": LIGHT}
    for n in NODES
]  # fmt: skip
CONFIG = f"""
c.JupyterHub.spawner_class = "gpu-swarm"
c.JupyterHub.hub_ip = "10.250.0.1"
c.DockerSpawner.pull_policy = "skip"
c.GPUSpawner.placement = "spread"
c.GPUSpawner.monitor_interval = 1
c.SwarmGPUSpawner.node_down_grace = 5
c.GPUSpawner.profiles = [
    {{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True,
      "spawner_override": {LIGHT!r}}},
    {{"display_name": "CPU only", "slug": "cpu", "gpus": 0, "spawner_override": {LIGHT!r}}},
    *{PINNED!r},
]
c.GPUSpawner.group_limits = {{"people": {{"max_wait": 120}}}}
"""
ANN = "ann"  # waits in line ("people")
OTHERS = ["bo", "cy", "di", "ed", "fa"]
RESULT = "ann's result, made on her first server"
HOME = "n2"  # where her first server runs (not the manager, n1, which a test takes down)


@pytest.fixture(scope="module")
def hub(swarm: Swarm, hub_factory) -> Iterator[Hub]:
    hub = hub_factory(CONFIG, env={"DOCKER_HOST": f"unix://{SOCKETS}/n1.sock"})
    hub.add_users(ANN, *OTHERS, groups={"people": [ANN]})
    yield hub
    hub.stop()
    for service in swarm.manager.services.list(filters={"name": hub.prefix}):
        service.remove()


def run_in(swarm: Swarm, hub: Hub, user: str, command: str) -> tuple[str, str]:
    """`command` in the user's running server, as a shell on its node would run it; the
    node, and what it printed."""
    task = task_of(swarm, hub, user)
    (node,) = [n for n in NODES if swarm.node_id(n) == task["NodeID"]]
    container = swarm.clients[node].containers.get(container_on(swarm, node, task)["Id"])
    return node, in_container.run_in(container, command).output


def test_a_users_next_server_goes_where_their_files_are(swarm: Swarm, hub: Hub):
    hub.spawn_ready(ANN, profile=f"on-{HOME}")  # her first server: her home is made there
    home, _ = run_in(swarm, hub, ANN, f"echo {RESULT!r} > ~/result.txt")
    assert home == HOME
    hub.stop_server(ANN)
    hub.spawn_ready(OTHERS[0], profile=f"on-{home}")  # "spread" would now pick another node
    hub.spawn_ready(ANN)
    node, said = run_in(swarm, hub, ANN, "cat ~/result.txt")
    assert (node, said.strip()) == (home, RESULT)
    hub.stop_server(ANN)
    homes = {h["user"]: h for h in hub.api("GET", "/gpus").json()["homes"]}
    assert homes[ANN]["node"] == home and homes[ANN]["volume"] == hub.home_of(ANN)
    listed = gpuspawner_cli(hub, "homes")  # as an admin runs it on the manager
    assert listed.returncode == 0, listed.stderr
    assert re.search(rf"\n{hub.home_of(ANN)} +{ANN} +\? +– +{home} +20", listed.stdout)


def test_with_its_node_full_a_start_waits_for_it_or_goes_elsewhere_as_the_user_chose(
    swarm: Swarm, hub: Hub, browser
):
    (home,) = {node for node, _ in placed(hub).values()}  # bo's server, on ann's node
    for user in OTHERS[1:4]:
        hub.spawn_ready(user, profile=f"on-{home}")  # the node's 4 GPUs are taken
    assert hub.spawn(ANN).status_code == 202
    said = hub.message_in_line(ANN)
    assert f"Your files are on {home}" in said, said
    assert hub.server_model(ANN)["pending"] == "spawn"  # though other nodes have free GPUs
    hub.stop_server(OTHERS[0])
    hub.wait_ready(ANN)
    assert placed(hub)[ANN][0] == home
    hub.stop_server(ANN)
    hub.spawn_ready(OTHERS[0], profile=f"on-{home}")  # full again

    log_in(browser, hub.url, ANN, PASSWORD)
    browser.get(f"{hub.url}/hub/spawn/{ANN}")
    told = browser.find_element(By.CSS_SELECTOR, "[data-testid=home]").text
    assert f"Your files are on {home}" in told
    gpu_1 = browser.find_element(By.CSS_SELECTOR, 'input[value="gpu-1"]')
    gpu_1.click()
    assert gpu_1.is_selected()  # a disabled choice takes no click
    browser.find_element(By.ID, "away-from-home").click()
    browser.find_element(By.CSS_SELECTOR, "#spawn_form button[type=submit]").click()
    hub.wait_started_by_browser(ANN)
    node, said = run_in(swarm, hub, ANN, "cat ~/result.txt 2>&1")
    assert node != home and "No such file" in said  # that node's own home, as the form said
    hub.stop_server(ANN)
    browser.get(f"{hub.url}/hub/spawn/{ANN}")  # the home stays where the files are
    assert (
        f"Your files are on {home}"
        in browser.find_element(By.CSS_SELECTOR, "[data-testid=home]").text
    )


def test_with_its_node_down_the_user_is_told_at_once(swarm: Swarm, hub: Hub):
    home = placed(hub)[OTHERS[0]][0]
    for user in OTHERS[:4]:
        hub.stop_server(user)
    try:
        swarm.kill(home)
        wait_for(lambda: home in hub.pool()["unreachable"], f"the hub marks {home} unreachable")
        refused = hub.spawn(OTHERS[0])  # bo's home is there too; bo may not wait
        assert refused.status_code == 409, refused.text
        message = refused.json()["message"]
        assert f"may come only from machine {home}, which is not available now" in message
        assert f"Your files are on {home}" in message
        cpu = hub.spawn(OTHERS[0], profile="cpu")
        if cpu.status_code == 202:
            hub.wait_for(lambda: hub.server_model(OTHERS[0]) is None, 60, "the start failed")
            assert f"{home} is down now" in hub.log()
        else:
            assert f"{home} is down now" in cpu.json()["message"], cpu.text
    finally:
        swarm.restart()
    wait_for(lambda: home not in hub.pool()["unreachable"], f"the hub marks {home} back")
    hub.spawn_ready(OTHERS[0])
    assert placed(hub)[OTHERS[0]][0] == home
    hub.stop_server(OTHERS[0])


def volume_on(swarm: Swarm, node: str, name: str) -> bool:
    return any(v.name == name for v in swarm.clients[node].volumes.list())


def listing(swarm: Swarm, node: str, volume: str) -> str:
    """What the home volume holds on `node`, as a shell there lists it."""
    return swarm.clients[node].containers.run(
        NOTEBOOK_IMAGE, ["ls", "-A", "/h"], entrypoint=[], remove=True,
        volumes={volume: {"bind": "/h", "mode": "ro"}},
    ).decode()  # fmt: skip


def move_home(hub: Hub, user: str, to: str, *more: str) -> subprocess.CompletedProcess[str]:
    """`gpuspawner move-home`, as an admin runs it with the hub's API and an admin's token."""
    command = [str(Path(sys.executable).parent / "gpuspawner"), "move-home", user, "--to", to]
    return subprocess.run(
        [*command, *more, "--api-url", f"{hub.url}/hub/api", "--token", hub.token],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_home_is_moved_to_another_node_copied_and_checked_before_the_old_copy_goes(
    swarm: Swarm, hub: Hub
):
    volume = hub.home_of(ANN)
    for body, status, says in [
        ({"to": "n9"}, 400, "'to' must be one of the nodes: n1, n2, n3"),
        ({"to": "n3", "empty_old": "yes"}, 400, "'empty_old' must be true or false"),
        ({"to": "n3", "now": True}, 400, 'The body must be {"to": NODE}'),
        ({"to": HOME}, 409, f"{ANN}'s home is on {HOME} already"),
    ]:
        answer = hub.api("POST", f"/gpu-homes/{ANN}", json=body)
        assert (answer.status_code, says in answer.json()["message"]) == (status, True), answer.text
    assert hub.api("POST", "/gpu-homes/nobody", json={"to": "n3"}).status_code == 404
    hub.spawn_ready(ANN)  # on her home's node
    busy = move_home(hub, ANN, "n3")
    assert busy.returncode == 1 and f"Stop {ANN}'s servers first" in busy.stderr, busy.stderr
    hub.stop_server(ANN)
    others = [n for n in NODES if n != HOME]
    [used, unused] = sorted(others, key=lambda n: not volume_on(swarm, n, volume))
    assert volume_on(swarm, used, volume)  # her start away from home made a copy there
    refused = move_home(hub, ANN, used)
    assert refused.returncode == 1
    assert f"{ANN}'s home stays on {HOME}: {used} has a copy of this home already" in (
        refused.stderr
    )

    moved = move_home(hub, ANN, unused, "--empty-old")
    assert moved.returncode == 0, moved.stderr
    assert f"{ANN}'s home {volume} is on {unused} now; the old copy is emptied." in moved.stdout
    [home] = [h for h in hub.api("GET", "/gpus").json()["homes"] if h["user"] == ANN]
    assert home["node"] == unused
    assert listing(swarm, HOME, volume) == ""  # emptied only once the copy was checked
    hub.spawn_ready(ANN)
    node, said = run_in(swarm, hub, ANN, "cat ~/result.txt; stat -c %U ~/result.txt")
    assert (node, said) == (unused, f"{RESULT}\njovyan\n")  # her file, still hers
    hub.stop_server(ANN)


# --- homes on shared storage ----------------------------------------------------------------
@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    """A host folder: every bed node sees the host's files, as nodes that mount one NFS
    export at the same path see the same files."""
    folder = tmp_path_factory.mktemp("shared-homes")
    folder.chmod(0o755)  # as an export's top is: the notebook user reads the hub's marker
    return folder


@pytest.fixture(scope="module")
def shared_hub(swarm: Swarm, hub_factory, shared: Path) -> Iterator[Hub]:
    config = CONFIG + textwrap.dedent(
        f"""
        c.SwarmGPUSpawner.shared_homes = {str(shared)!r}
        c.DockerSpawner.volumes = {{{str(shared) + "/{username}"!r}: "/home/jovyan"}}
        """
    )
    hub = hub_factory(config, env={"DOCKER_HOST": f"unix://{SOCKETS}/n1.sock"})
    hub.add_users(ANN, "bo")
    yield hub
    hub.stop()
    for service in swarm.manager.services.list(filters={"name": hub.prefix}):
        service.remove()


def test_on_shared_storage_placement_is_free_and_the_files_are_everywhere(
    swarm: Swarm, shared_hub: Hub, shared: Path
):
    hub = shared_hub
    # the hub asks every node whether it mounts the storage, and keeps none out (on the bed
    # every node sees the host's folders: a node without the mount is the in-process tests')
    said = f"shared homes {shared} mounted on n1, n2, n3"
    hub.wait_for(lambda: said in hub.log(), timeout=90, what="each node asked")
    assert hub.pool()["unreachable"] == {}
    hub.spawn_ready(ANN, profile="on-n1")
    assert run_in(swarm, hub, ANN, f"echo {RESULT!r} > ~/result.txt") == ("n1", "")
    folder = shared / ANN
    assert (folder.stat().st_uid, (folder / "result.txt").read_text()) == (1000, RESULT + "\n")
    hub.stop_server(ANN)
    hub.spawn_ready(ANN, profile="on-n3")  # no home pins her: another node has her files
    assert run_in(swarm, hub, ANN, "cat ~/result.txt") == ("n3", RESULT + "\n")
    hub.stop_server(ANN)
    assert hub.api("GET", "/gpus").json()["homes"] is None  # no node holds a home

    doctor = gpuspawner_cli(hub, "doctor")
    for node in NODES:
        assert f"PASS  Shared homes on {node}: {shared} is the hub's shared storage, " in (
            doctor.stdout
        )
    assert not swarm.manager.services.list(filters={"label": "gpuspawner.task"})  # removed


def test_a_node_without_the_shared_storage_is_named_by_the_probe(swarm: Swarm, shared: Path):
    """What a node that lost its mount shows: an empty folder where the marker should be."""
    elsewhere = shared.parent / "not-shared"
    elsewhere.mkdir(mode=0o755)
    token = (shared / MARKER).read_text().strip()
    client = swarm.manager.api
    assert probe_node(client, swarm.node_id("n2"), NOTEBOOK_IMAGE, str(elsewhere), token, 1000) == (
        NOT_SHARED
    )
    assert probe_node(client, swarm.node_id("n2"), NOTEBOOK_IMAGE, str(shared), token, 1000) == 0
    missing = probe_node(client, swarm.node_id("n2"), NOTEBOOK_IMAGE, "/no/such", token, 1000)
    assert "/no/such" in str(missing)  # Swarm refuses a bind whose source is not there


@pytest.mark.parametrize(
    ("volumes", "says"),
    [
        ({"/no/such/storage/{username}": "/home/jovyan"}, "/no/such/storage is not a folder"),
        (None, "keeps homes in named volumes each node makes for itself"),  # the tests' homes
    ],
    ids=["not-mounted-here", "named-homes-too"],
)
def test_shared_storage_the_hub_cannot_use_stops_it_with_one_line(hub_factory, volumes, says):
    config = CONFIG + 'c.SwarmGPUSpawner.shared_homes = "/no/such/storage"\n'
    if volumes is not None:
        config += f"c.DockerSpawner.volumes = {volumes!r}\n"
    hub = hub_factory(config, start=False, env={"DOCKER_HOST": f"unix://{SOCKETS}/n1.sock"})
    hub.start(wait=False)
    assert hub.process.wait(60) != 0
    [line] = [x for x in hub.log().splitlines() if "gpuspawner:" in x]
    assert says in line
