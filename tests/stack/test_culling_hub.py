"""GPU-aware culling end to end: the real jupyterhub-idle-culler as a hub-managed
service, the hub's GPU monitor, simulated GPUs made busy or idle through their load file."""

import json
import os
import select
import signal
import threading
from datetime import UTC, datetime

import pytest
from realhub import LIGHT_SERVERS, Hub, processes_in

CONFIG = """
from gpuspawner.hub.culler import idle_culler_service

c.GPUSpawner.simulate_gpus = 4
c.GPUSpawner.simulated_load_file = {load!r}
c.GPUSpawner.monitor_interval = 0.5
c.GPUSpawner.profiles = [
    {{"display_name": "CPU only", "slug": "cpu", "gpus": 0}},
    {{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True}},
]
# the culler's own timeout is an hour: the 15 s here reach it through each server's state
c.GPUSpawner.default_limits = {{"idle_timeout": 15}}
c.GPUSpawner.group_limits = {{
    "students": {{"gpu_idle_timeout": 6}},
    "marathon": {{"max_age": 30}},  # beyond a JupyterLab start on a busy machine
}}
culler, culler_role = idle_culler_service(timeout=3600, cull_every=1)
c.JupyterHub.services.append(culler)
c.JupyterHub.load_roles.append(culler_role)
"""


@pytest.fixture(scope="module")
def hub(hub_factory, load_file) -> Hub:
    hub = hub_factory(CONFIG.format(load=str(load_file)) + LIGHT_SERVERS)
    hub.add_users(
        "idler",
        "trainer",
        "student",
        "runner",
        groups={"students": ["student"], "marathon": ["runner"]},
    )
    return hub


def make_busy(load_file, *uuids: str) -> None:
    load_file.write_text(
        json.dumps({u: {"utilization_percent": 97, "processes": [7]} for u in uuids})
    )


def spawn_page(hub: Hub, user: str) -> str:
    return hub.login(user).get(f"{hub.url}/hub/spawn/{user}/next").text


def test_an_idle_server_is_culled_and_its_gpu_returns(hub: Hub):
    hub.spawn_ready("idler", profile="gpu-1")
    hub.wait_for(lambda: hub.server_model("idler") is None, timeout=60, what="idle cull")
    assert hub.pool()["free"] == 4
    page = spawn_page(hub, "idler")
    assert "Your default server was stopped at" in page
    assert "it was idle for" in page and "(idle_timeout from default_limits)" in page
    hub.spawn_ready("idler", profile="gpu-1")  # the freed GPU is there to take
    hub.stop_server("idler")


def test_a_server_with_busy_gpus_is_spared_though_nothing_touches_jupyter(hub: Hub, load_file):
    hub.spawn_ready("trainer", profile="gpu-1")
    make_busy(load_file, *hub.held_uuids("trainer"))
    try:
        with pytest.raises(TimeoutError):  # twice the idle timeout
            hub.wait_for(lambda: hub.server_model("trainer") is None, timeout=30, what="cull")
        assert hub.server_model("trainer")["ready"]
    finally:
        load_file.write_text("{}")
    hub.stop_server("trainer")


def keep_jupyter_active(hub: Hub, user: str, stop: threading.Event) -> None:
    """What an open browser tab does: the server reports activity to the hub."""
    while not stop.wait(1):
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        hub.api("POST", f"/users/{user}/activity", json={"servers": {"": {"last_activity": now}}})


def test_gpu_idle_timeout_stops_a_server_with_an_open_session(hub: Hub, load_file):
    make_busy(load_file, *(gpu["uuid"] for gpu in hub.pool()["gpus"]))  # no cull mid-start
    try:
        hub.spawn_ready("student", profile="gpu-1")
    finally:
        load_file.write_text("{}")
    stop = threading.Event()
    tab = threading.Thread(target=keep_jupyter_active, args=(hub, "student", stop))
    tab.start()
    try:
        hub.wait_for(lambda: hub.server_model("student") is None, timeout=60, what="GPU-idle stop")
    finally:
        stop.set()
        tab.join()
    assert hub.pool()["free"] == 4
    page = spawn_page(hub, "student")
    assert "Your default server was stopped at" in page
    assert "its 1 GPU was idle for" in page and "(gpu_idle_timeout of group students)" in page
    assert "stopping student: its 1 GPU was idle for" in hub.log()
    make_busy(load_file, *(gpu["uuid"] for gpu in hub.pool()["gpus"]))  # no second stop
    try:
        hub.spawn_ready("student", profile="gpu-1")  # the notice goes with the next start
        assert "stop_notice" not in hub.server_model("student")["state"]
        hub.stop_server("student")
    finally:
        load_file.write_text("{}")


def test_max_age_stops_a_busy_server(hub: Hub, load_file):
    hub.spawn_ready("runner", profile="gpu-1")
    make_busy(load_file, *hub.held_uuids("runner"))
    try:
        hub.wait_for(lambda: hub.server_model("runner") is None, timeout=90, what="max_age stop")
    finally:
        load_file.write_text("{}")
    assert hub.pool()["free"] == 4
    page = spawn_page(hub, "runner")
    assert "the longest a GPU server may run (max_age of group marathon)" in page
    hub.spawn_ready("runner", profile="gpu-1")
    hub.stop_server("runner")


def test_the_hub_stops_its_culler_with_sigint_even_when_started_with_sigint_ignored(
    hub_factory, load_file
):
    """A shell's background job (`scripts/hub &`) starts with SIGINT ignored, and so would
    every process the hub starts: the culler then ignored the SIGINT the hub stops it with,
    and each hub stop waited the 30 s of interrupt_timeout before a SIGTERM."""
    hub = hub_factory(CONFIG.format(load=str(load_file)) + LIGHT_SERVERS, start=False)
    inherited = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        hub.start()
    finally:
        signal.signal(signal.SIGINT, inherited)
    [culler] = hub.wait_for(lambda: cullers(hub), what="the culler running")
    # once it has asked the hub for the users (its first cull): a SIGINT during the
    # interpreter's own start, before the culler's main runs, still meets SIGINT ignored
    hub.wait_for(lambda: "/hub/api/users?state=[secret] (idle-culler@" in hub.log(), what="a cull")
    hub.stop()
    log = hub.log()
    assert f"Interrupting {culler}" in log
    assert f"Terminating {culler}" not in log  # it ended on the SIGINT


def cullers(hub: Hub) -> list[int]:
    """The hub's culler processes (managed services run in the hub's folder)."""
    running = processes_in({hub.workdir.resolve()}).items()
    return [pid for pid, command in running if "culler_process" in command]


def ends_within(pid: int, timeout: float) -> bool:
    """Whether the process ends within `timeout` seconds (its pidfd becomes readable)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([pidfd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(pidfd)


def test_the_culler_ends_with_its_hub_even_after_a_kill_9(hub_factory, load_file):
    """JupyterHub starts a managed service in a session of its own: a hub ended by kill -9
    left its culler running, and each restart added another."""
    hub = hub_factory(CONFIG.format(load=str(load_file)) + LIGHT_SERVERS)
    [culler] = hub.wait_for(lambda: cullers(hub), what="the culler running")
    os.killpg(hub.process.pid, signal.SIGKILL)  # the hub's own session: nothing cleans up
    hub.process.wait(10)
    assert ends_within(culler, 10), "the culler outlived its hub"
    hub.start()
    [again] = hub.wait_for(lambda: cullers(hub), what="the restarted hub's culler")
    assert again != culler
