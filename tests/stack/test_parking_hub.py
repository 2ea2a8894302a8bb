"""Parking on the real stack, with the checkpoint driver's double on simulated GPUs: a job
whose CUDA process the driver can park gives way to a person's start at once, loses
nothing (no SIGTERM, no second attempt), and goes on on the same GPU when the person
leaves; a job the driver cannot park (no CUDA process, or a refusal) gives way by SIGTERM
as without parking; a refused restore stops the job with the reason, its files kept; a
person's server idle past its GPU-idle limit is parked, its GPU runs a job meanwhile, and
it comes back on a wake (the lease API, a new process on its GPU, a cell run in
JupyterLab); parked past max_parked, it stops; after a hub kill -9 the driver says what
is parked; a bad parking config stops the hub with one line.
"""

from __future__ import annotations

import json
import re

import pytest
from admintools import gpuspawner
from browser import STALE, log_in, text_of
from jobkit import TRAIN, checkpoints, job, notebook, put, read, submit, wait_state
from realhub import LIGHT_SERVER, PASSWORD, Hub
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

CONFIG = """
c.GPUSpawner.simulate_gpus = 1
c.GPUSpawner.simulated_machine = "parking"
c.GPUSpawner.simulated_load_file = {load!r}
c.GPUSpawner.monitor_interval = 0.5
c.GPUSpawner.parking = True
c.GPUSpawner.park_memory_limit = "32G"
c.GPUSpawner.park_after = 3
c.GPUSpawner.profiles = [
    {{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True}},
    {{"display_name": "1 GPU, light", "slug": "light-1", "gpus": 1,
      "spawner_override": {light!r}}},
    {{"display_name": "1 GPU, in turns", "slug": "turns-1", "gpus": 1, "turns": True,
      "spawner_override": {light!r}}},
    # JupyterHub polls these servers hourly (its default is 30 s)
    {{"display_name": "1 GPU, polled hourly", "slug": "quiet-1", "gpus": 1,
      "spawner_override": {{"poll_interval": 3600}}}},
]
c.GPUSpawner.turn_quantum = 8
c.GPUSpawner.default_limits = {{"max_jobs": 0}}
c.GPUSpawner.group_limits = {{
    "people": {{"max_wait": 900}},
    "lunchers": {{"max_wait": 900, "gpu_idle_timeout": 3}},
    "sleepers": {{"gpu_idle_timeout": 2, "max_parked": 4}},
    "trainers": {{"max_jobs": 2, "preempt_grace": 5}},
}}
"""
GIB = 2**30


@pytest.fixture(scope="module")
def hub(hub_factory, load_file) -> Hub:
    hub = hub_factory(CONFIG.format(load=str(load_file), light=LIGHT_SERVER))
    groups = {"trainers": ["bob"], "people": ["alice"], "lunchers": ["carol", "erin"]}
    users = ("bob", "alice", "carol", "dave", "erin", "frank", "gina")
    hub.add_users(*users, groups=groups | {"sleepers": ["dave"]})
    put(hub, "bob", "train.py", TRAIN)
    return hub


def running_on_gpu(
    hub: Hub,
    load_file,
    memory_gib: int = 20,
    beside: dict | None = None,
    profile: str = "gpu-1",
    **process,
) -> tuple[dict, str, dict]:
    """bob's training job, running, with a CUDA process of `memory_gib` that the hub has seen
    (as NVML would list it): its GPU's uuid, and that GPU's load. `beside`: the load already
    on its GPU (a parked person's, whose GPU it is lent)."""
    submitted = submit(hub, "bob", profile=profile, script="train.py")
    running = wait_state(hub, "bob", submitted["id"], "running")
    [uuid] = running["gpus"]
    container = hub.container_of("bob", running["server"]).id
    load = dict(beside or {"memory_used_gib": 0, "utilization_percent": 90, "processes": []})
    load["memory_used_gib"] += memory_gib
    load["processes"] = [
        *load["processes"],
        {"container": container, "memory_gib": memory_gib, **process},
    ]
    load_file.write_text(json.dumps({uuid: load}))
    hub.wait_for(
        lambda: (
            job(hub, "bob", submitted["id"])["gpu_use"][0]["memory_used_bytes"] == memory_gib * GIB
        ),
        what="the job's GPU memory seen by the hub",
    )
    return running, uuid, load


def cancel(hub: Hub, running: dict) -> None:
    """The job cancelled, and its GPU back in the pool for the next test."""
    hub.api("DELETE", f"/users/bob/gpu-jobs/{running['id']}")
    wait_state(hub, "bob", running["id"], "cancelled", "failed")
    hub.wait_for(lambda: set(hub.gpu_states().values()) == {"free"}, 90, "the job's GPU back")


def back_to_the_job(hub: Hub, load_file, person: str, running: dict) -> None:
    """The person leaves: the parked job runs again on their GPU; then it is cancelled and
    the GPUs run nothing, for the next test."""
    hub.stop_server(person)
    wait_state(hub, "bob", running["id"], "running")
    cancel(hub, running)
    load_file.write_text("{}")


def test_a_job_is_parked_for_a_persons_start_and_goes_on_when_they_leave(hub, load_file):
    saved = checkpoints(hub)
    running, uuid, _ = running_on_gpu(hub, load_file)

    hub.spawn_ready("alice", profile="light-1")  # she gets the job's GPU at once, no grace
    assert hub.held_uuids("alice") == [uuid]
    parked = wait_state(hub, "bob", running["id"], "parked")
    assert "Parked" in parked["reason"] and "alice" in parked["reason"]
    assert parked["preemptions"] == 1 and parked["attempts"] == 1
    assert hub.container_of("bob", running["server"]).status == "running"  # nothing stopped
    gpu = hub.wait_for(  # NVML, at the monitor's next look: its memory left the GPU
        lambda: (seen := hub.pool()["gpus"][0])["telemetry"]["memory_used_bytes"] == 0 and seen,
        what="the parked job's memory gone from the GPU",
    )
    assert gpu["holder"]["user"] == "alice"
    assert gpu["parked"] == [{"user": "bob", "server": running["server"], "job": True}]
    page = hub.login("admin").get(f"{hub.url}/hub/gpus", timeout=30).text
    assert f"parked: bob / {running['server']} (job)" in page
    assert "parked" in hub.log() and checkpoints(hub) == saved  # no SIGTERM
    assert hub.metrics()[("gpuspawner_parked_bytes", ())] == 20 * GIB

    hub.stop_server("alice")
    back = wait_state(hub, "bob", running["id"], "running")
    assert back["attempts"] == 1 and back["reason"] == ""  # the same run, going on
    assert hub.held_uuids("bob", running["server"]) == [uuid]
    hub.wait_for(
        lambda: job(hub, "bob", running["id"])["gpu_use"][0]["memory_used_bytes"] == 20 * GIB,
        what="its memory back on the GPU",
    )
    assert hub.metrics()[("gpuspawner_parked_bytes", ())] == 0
    cancel(hub, running)
    load_file.write_text("{}")


def test_a_person_idle_for_park_after_on_a_parked_jobs_gpu_lets_the_job_go_on(hub, load_file):
    running, uuid, load = running_on_gpu(hub, load_file)
    hub.spawn_ready("alice", profile="light-1")
    wait_state(hub, "bob", running["id"], "parked")
    kernel = {"container": hub.container_of("alice").id, "memory_gib": 10}
    load |= {"memory_used_gib": 30, "utilization_percent": 0}
    load["processes"].append(kernel)
    load_file.write_text(json.dumps({uuid: load}))  # alice's kernel opens the GPU, then idles

    wait_residency(hub, "alice", "parked")  # park_after, not her group's gpu_idle_timeout
    assert wait_state(hub, "bob", running["id"], "running")["attempts"] == 1
    assert "while a job parked for it waits (park_after)" in hub.log()
    load["utilization_percent"] = 50  # she runs a cell: it wakes her, and keeps her busy
    load_file.write_text(json.dumps({uuid: load}))
    woken = hub.api("POST", "/users/alice/server/gpu-lease/wake")
    assert woken.status_code == 200, woken.text
    wait_residency(hub, "alice", "resident")
    wait_state(hub, "bob", running["id"], "parked")
    back_to_the_job(hub, load_file, "alice", running)


def test_a_parked_job_whose_container_is_killed_ends_at_the_monitors_next_look(hub, load_file):
    """JupyterHub looks at a server every poll_interval (here an hour): a parked job whose
    container was killed was shown parked until then. Docker's word, at the monitor's next
    look, ends it; its GPU stays the person's it was lent to."""
    running, uuid, _ = running_on_gpu(hub, load_file, profile="quiet-1")
    hub.spawn_ready("alice", profile="light-1")
    wait_state(hub, "bob", running["id"], "parked")
    hub.container_of("bob", running["server"]).kill()
    ended = wait_state(hub, "bob", running["id"], "failed", timeout=20)
    assert "its container died" in ended["reason"], ended
    assert hub.held_by("alice") == [uuid]
    hub.stop_server("alice")
    hub.wait_for(lambda: hub.gpu_states() == {uuid: "free"}, 30, "the GPU back once alice left")
    load_file.write_text("{}")


def test_a_drain_on_a_parked_jobs_gpu_makes_it_give_way_and_run_again_after(hub, load_file):
    """A drain's GPUs must be empty, and work parked under one driver may not come back
    under another: a parked job gives way as a running one does, and waits again."""
    running, uuid, _ = running_on_gpu(hub, load_file)
    hub.spawn_ready("alice", profile="light-1")
    wait_state(hub, "bob", running["id"], "parked")
    drained = hub.api(
        "POST", "/gpu-calendar/drains", json={"gpus": [uuid], "reason": "driver update"}
    )
    assert drained.status_code == 201, drained.text
    waiting = wait_state(hub, "bob", running["id"], "waiting")
    assert "driver update" in waiting["reason"] and waiting["attempts"] == 1, waiting
    hub.wait_for(lambda: hub.server_model("alice") is None, 30, "alice stopped by the drain")
    assert hub.api("DELETE", f"/gpu-calendar/{drained.json()['id']}").status_code == 200
    again = wait_state(hub, "bob", running["id"], "running")
    assert again["attempts"] == 2
    cancel(hub, again)
    load_file.write_text("{}")


def test_after_a_hub_kill_9_a_parked_job_is_parked_on_the_drivers_word(hub, load_file, tmp_path):
    running, uuid, _ = running_on_gpu(hub, load_file)
    hub.spawn_ready("alice", profile="light-1")
    wait_state(hub, "bob", running["id"], "parked")
    job_container = hub.container_of("bob", running["server"]).id

    hub.kill()
    # with the hub down, `gpuspawner status` asks the driver too: both hold the GPU, one parked
    done = gpuspawner("status", "-f", str(hub.config_file), "--prefix", hub.prefix, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [row] = [line for line in done.stdout.splitlines() if uuid in line]
    assert f"alice, bob/{running['server']} (parked)" in row, done.stdout
    hub.start()  # two containers reach the GPU; the driver says which one is on it

    assert job(hub, "bob", running["id"])["state"] == "parked"
    assert hub.gpu_states() == {uuid: "allocated"} and hub.held_by("alice") == [uuid]
    assert "its GPU work parked, as the driver says" in hub.log()
    assert "not adopted" not in hub.log()
    hub.stop_server("alice")
    back = wait_state(hub, "bob", running["id"], "running")
    assert back["attempts"] == 1  # the same run goes on
    assert hub.container_of("bob", running["server"]).id == job_container
    cancel(hub, running)
    load_file.write_text("{}")


@pytest.mark.parametrize(
    ("process", "says"),
    [
        (None, "it has no CUDA process to park"),
        ({"refuse": {"lock": "CUDA_ERROR_TIMEOUT"}}, "CUDA_ERROR_TIMEOUT"),
        ({"memory_gib": 40}, "its 40 GiB of GPU memory would take parked work past"),
    ],
    ids=["no-cuda-process", "lock-refused", "over-park-memory-limit"],
)
def test_a_job_the_driver_cannot_park_gives_way_by_sigterm(hub, load_file, process, says):
    saved = checkpoints(hub)
    memory = (process or {}).pop("memory_gib", 20)
    running, uuid, _ = running_on_gpu(hub, load_file, memory, **(process or {}))
    if process is None:
        load_file.write_text(json.dumps({uuid: {"utilization_percent": 90}}))
        hub.wait_for(
            lambda: not job(hub, "bob", running["id"])["gpu_use"][0]["memory_used_bytes"],
            what="no process on its GPU",
        )

    hub.spawn_ready("alice", profile="light-1")
    waiting = wait_state(hub, "bob", running["id"], "waiting")
    assert "Gave way" in waiting["reason"] and checkpoints(hub) == saved + 1
    assert says in hub.log()
    back_to_the_job(hub, load_file, "alice", running)


def test_a_refused_restore_stops_the_job_with_the_reason_and_keeps_its_files(hub, load_file):
    running, uuid, _ = running_on_gpu(hub, load_file, refuse={"restore": "CUDA_ERROR_UNKNOWN"})
    hub.spawn_ready("alice", profile="light-1")
    wait_state(hub, "bob", running["id"], "parked")
    hub.stop_server("alice")
    failed = wait_state(hub, "bob", running["id"], "failed")
    assert "could not be brought back" in failed["reason"]
    assert "CUDA_ERROR_UNKNOWN" in failed["reason"]
    assert "attempt 1" in read(hub, "bob", f"{running['outputs']}/log.txt")  # files kept
    hub.wait_for(
        lambda: hub.gpu_states() == {uuid: "free"}, timeout=90, what="its GPU back, once gone"
    )
    load_file.write_text("{}")


def outputs(driver) -> str:
    """What the notebook's cells printed, all of it."""
    return "\n".join(o.text for o in driver.find_elements(By.CSS_SELECTOR, ".jp-OutputArea"))


def residency(hub: Hub, user: str) -> str:
    response = hub.api("GET", f"/users/{user}/server/gpu-lease")
    if response.status_code != 200:
        ours = [line for line in hub.log().splitlines() if "gpuspawner" in line]
        raise AssertionError(
            f"{user}'s lease: {response.status_code} {response.text}; the hub said:\n"
            + "\n".join(ours[-25:])
        )
    return response.json()["residency"]["state"]


def wait_residency(hub: Hub, user: str, state: str, timeout: float = 60) -> None:
    hub.wait_for(lambda: residency(hub, user) == state, timeout, f"{user}'s server {state}")


def gpu_parked(hub: Hub) -> dict[str, float]:
    """gpuspawner_gpu_parked by GPU: the servers and jobs bound to it whose work is parked."""
    return {
        dict(labels)["uuid"]: value
        for (name, labels), value in hub.metrics().items()
        if name == "gpuspawner_gpu_parked"
    }


def person_on_gpu(hub: Hub, load_file, user: str, profile="light-1") -> tuple[str, dict]:
    """`user`'s server, with a CUDA process of 10 GiB on its GPU that has gone idle. Its GPU
    is busy until then, so that its idle clock starts only once its process is listed."""
    load_file.write_text(json.dumps({"0": {"utilization_percent": 90}}))
    hub.spawn_ready(user, profile=profile)
    [uuid] = hub.held_by(user)
    kernel = {"container": hub.container_of(user).id, "memory_gib": 10}
    load = {"memory_used_gib": 10, "utilization_percent": 0, "processes": [kernel]}
    load_file.write_text(json.dumps({uuid: load}))
    return uuid, load


def test_an_idle_persons_gpu_runs_a_job_meanwhile_and_comes_back_when_they_return(hub, load_file):
    uuid, load = person_on_gpu(hub, load_file, "carol")
    wait_residency(hub, "carol", "parked")  # past gpu_idle_timeout: parked, not stopped
    assert hub.server_model("carol")["ready"] and hub.gpu_states() == {uuid: "parked"}

    running, lent, load = running_on_gpu(hub, load_file, beside=load)
    assert lent == uuid  # on carol's GPU, lent
    assert gpu_parked(hub) == {uuid: 1}  # carol's work, under the job's
    waits = hub.metrics()[("gpuspawner_restore_wait_seconds_count", ())]

    woken = hub.api("POST", "/users/carol/server/gpu-lease/wake")  # a cell is about to run
    assert woken.status_code == 200, woken.text
    assert woken.json()["residency"]["state"] in ("parked", "restoring")
    wait_residency(hub, "carol", "resident")
    parked = wait_state(hub, "bob", running["id"], "parked")
    assert "carol's return" in parked["reason"] and hub.held_by("carol") == [uuid]
    assert hub.metrics()[("gpuspawner_restore_wait_seconds_count", ())] == waits + 1
    assert gpu_parked(hub) == {uuid: 1}  # now the job's, under carol's

    wait_residency(hub, "carol", "parked")  # idle again: the job goes on on her GPU
    assert wait_state(hub, "bob", running["id"], "running")["attempts"] == 1

    terminal = {"container": hub.container_of("carol").id, "name": "train"}
    load |= {"utilization_percent": 50, "processes": [*load["processes"], terminal]}
    load_file.write_text(json.dumps({uuid: load}))  # `python train.py` in her terminal
    wait_residency(hub, "carol", "resident")
    wait_state(hub, "bob", running["id"], "parked")

    back_to_the_job(hub, load_file, "carol", running)


def test_a_parked_persons_ended_kernel_is_not_restored_and_they_are_told_it_was_lost(
    hub, load_file
):
    """The driver's checkpoint belongs to the process: once the process whose GPU memory was
    parked has ended (its container restarted, its kernel restarted), nothing can come back.
    Its new kernel on the GPU wakes the server as any process of it does; the person gets
    the GPU back with nothing restored, is told their kernel's GPU state was lost, and
    keeps their files. (The hub used to claim a restore.)"""
    uuid, load = person_on_gpu(hub, load_file, "carol")
    wait_residency(hub, "carol", "parked")
    running, lent, load = running_on_gpu(hub, load_file, beside=load)
    assert lent == uuid
    since = len(hub.log())
    carols = hub.container_of("carol").id
    kernel = {"container": carols, "name": "restarted-kernel", "memory_gib": 10}
    load["processes"] = [p for p in load["processes"] if p["container"] != carols] + [kernel]
    load_file.write_text(json.dumps({uuid: load}))  # the parked process gone, a new one on
    wait_residency(hub, "carol", "resident")
    says = hub.api("GET", "/users/carol/server/gpu-lease").json()["residency"]["says"]
    assert "Your kernel's GPU state was lost while it was parked" in says, says
    assert hub.held_by("carol") == [uuid]
    # the job gave way for her, parked or by SIGTERM (its memory and the new kernel's decide)
    assert wait_state(hub, "bob", running["id"], "parked", "waiting")["preemptions"] == 1
    log = hub.log()[since:]
    assert "carol: its GPU work was lost while parked" in log
    assert "carol restored on its GPUs" not in log
    back_to_the_job(hub, load_file, "carol", running)


def test_a_persons_start_that_needs_a_parked_persons_gpu_stops_that_server(hub, load_file):
    person_on_gpu(hub, load_file, "carol")
    wait_residency(hub, "carol", "parked")
    hub.spawn_ready("alice", profile="light-1")  # no other GPU: carol's server stops for her
    assert hub.server_model("carol") is None
    says = "its GPU was needed for alice's start while it was parked (its GPU idle)"
    assert f"gpuspawner: stopping parked carol: {says}" in hub.log()
    spawn_page = hub.login("carol").get(f"{hub.url}/hub/spawn", timeout=30).text
    assert "was stopped at" in spawn_page and "needed for alice" in spawn_page
    hub.stop_server("alice")
    load_file.write_text("{}")


def test_a_start_that_needs_a_parked_persons_gpu_lent_to_a_job_gets_it_from_both(hub, load_file):
    uuid, load = person_on_gpu(hub, load_file, "carol")
    wait_residency(hub, "carol", "parked")
    running, lent, _ = running_on_gpu(hub, load_file, beside=load | {"utilization_percent": 90})
    assert lent == uuid  # carol's GPU, lent

    hub.spawn_ready("alice", profile="light-1")  # the job parks, carol's server stops
    assert hub.held_by("alice") == [uuid] and hub.server_model("carol") is None
    assert wait_state(hub, "bob", running["id"], "parked")["attempts"] == 1
    back_to_the_job(hub, load_file, "alice", running)


def test_a_server_parked_past_max_parked_is_stopped_its_files_kept(hub, load_file):
    person_on_gpu(hub, load_file, "dave")
    wait_residency(hub, "dave", "parked")
    hub.wait_for(lambda: hub.server_model("dave") is None, 60, "dave's parked server stopped")
    assert "the longest a server stays parked (max_parked of group sleepers)" in hub.log()
    load_file.write_text("{}")


def test_in_jupyterlab_a_cell_run_in_a_parked_server_brings_its_gpu_back_first(
    hub, load_file, browser
):
    put(hub, "erin", "wake.ipynb", notebook("print(6 * 7)"))
    person_on_gpu(hub, load_file, "erin", profile="gpu-1")  # the notebook image: JupyterLab
    try:
        cell_run_in_a_parked_lab(hub, browser)
    finally:  # the next tests need the GPU, whatever happened here
        hub.stop_server("erin")
        load_file.write_text("{}")


def cell_run_in_a_parked_lab(hub: Hub, browser) -> None:
    wait_residency(hub, "erin", "parked")
    log_in(browser, hub.url, "erin", PASSWORD)
    browser.get(f"{hub.url}/user/erin/lab/tree/wake.ipynb")
    # JupyterLab's first load on a busy CI machine (four workers on two cores) can take long
    first = WebDriverWait(browser, 180, poll_frequency=0.5, ignored_exceptions=STALE)
    first.until(lambda d: text_of(d, "#gpuspawner-lease").startswith("GPU parked · 1 GPU"))
    wait = WebDriverWait(browser, 90, poll_frequency=0.5, ignored_exceptions=STALE)
    wait.until(lambda d: "| Idle" in text_of(d, "#jp-main-statusbar"))  # its kernel is up

    editor = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, ".jp-CodeCell .cm-content"))
    editor.click()
    ActionChains(browser).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()
    try:
        output = wait.until(lambda d: "42" in (text := outputs(d)) and text)
    except TimeoutException:
        ours = [line for line in hub.log().splitlines() if "gpuspawner" in line]
        browser.save_screenshot("/tmp/wake.png")
        pytest.fail(
            f"the cell shows {outputs(browser)!r}; erin is {residency(hub, 'erin')}; "
            "the hub said:\n" + "\n".join(ours[-15:])
        )
    assert "Your GPU work was parked while your GPU was idle; bringing it back" in output
    assert re.search(r"Restored in \d+ s; the cell runs\.", output), output
    assert output.index("Restored in") < output.index("42")  # back before the cell ran


def test_two_people_in_turns_share_a_gpu_each_parked_for_the_others_turn(hub, load_file):
    """With no GPU free, gina's start in turns joins frank's GPU at once, parked; a hub kill -9
    then keeps both on it. Her cell run parks frank once his turn (8 s) is over, and his
    parks her once hers is; a person whose GPU is idle is parked at once."""
    uuid, load = person_on_gpu(hub, load_file, "frank", profile="turns-1")
    load["utilization_percent"] = 90  # frank works
    load_file.write_text(json.dumps({uuid: load}))
    hub.spawn_ready("gina", profile="turns-1")  # the only GPU is frank's: she starts at once
    assert residency(hub, "gina") == "parked" and hub.held_by("frank") == [uuid]
    gpu = hub.pool()["gpus"][0]
    assert gpu["holder"]["user"] == "frank"
    assert gpu["parked"] == [{"user": "gina", "server": "", "job": False}]
    lease = hub.api("GET", "/users/gina/server/gpu-lease").json()["residency"]
    assert lease["turn"] and not lease["lent"]
    assert "you share this GPU in turns, and it is the other person's turn" in lease["says"]
    assert "within 8 s;" in lease["says"]
    frank = hub.api("GET", "/users/frank/server/gpu-lease").json()["residency"]
    assert frank["state"] == "resident" and frank["shared"]
    assert "You share this GPU in turns with one other person, who is parked now" in frank["says"]

    hub.kill()
    hub.start()  # both containers reach the GPU; neither is parked in the driver
    assert "not adopted" not in hub.log()
    hub.wait_for(  # (adopted the other way round, frank's process on the GPU wakes him)
        lambda: residency(hub, "gina") == "parked" and hub.held_by("frank") == [uuid],
        what="frank on the GPU, gina waiting for her turn",
    )

    woken = hub.api("POST", "/users/gina/server/gpu-lease/wake")  # she runs a cell
    assert woken.status_code == 200, woken.text
    wait_residency(hub, "gina", "resident")
    assert residency(hub, "frank") == "parked" and hub.held_by("gina") == [uuid]
    assert "frank parked: its turn is over (gina's turn)" in hub.log()

    kernel = {"container": hub.container_of("gina").id, "memory_gib": 10}
    load_file.write_text(json.dumps({uuid: load | {"processes": [kernel]}}))  # gina works
    hub.api("POST", "/users/frank/server/gpu-lease/wake")
    assert residency(hub, "frank") == "parked"  # her turn has only begun
    wait_residency(hub, "frank", "resident")
    assert "gina parked: its turn is over (frank's turn)" in hub.log()

    load_file.write_text(json.dumps({uuid: load | {"utilization_percent": 0}}))  # frank idles
    hub.wait_for(lambda: gpu_idle(hub), what="frank's GPU idle, as the monitor sees it")
    hub.api("POST", "/users/gina/server/gpu-lease/wake")
    wait_residency(hub, "gina", "resident")
    assert "frank parked: its GPU idle; the other person's turn (gina's turn)" in hub.log()

    hub.stop_server("gina")
    hub.stop_server("frank")
    hub.wait_for(lambda: set(hub.gpu_states().values()) == {"free"}, 90, "the GPU back")
    load_file.write_text("{}")


def gpu_idle(hub: Hub) -> bool:
    metrics = hub.metrics().items()
    return any(name == "gpuspawner_gpu_idle_seconds" and v > 0 for (name, _), v in metrics)


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ('c.GPUSpawner.park_memory_limit = "lots"', "park_memory_limit must be memory"),
        ('c.GPUSpawner.checkpoint_driver = "cuda"', "needs the NVIDIA driver's checkpoint API"),
        ("c.GPUSpawner.turn_quantum = 0", "turn_quantum must be a number of seconds > 0"),
        (
            "c.GPUSpawner.parking = False",
            "turns-1 shares GPUs in turns, which parks each person's work for the other's turn",
        ),
    ],
    ids=["memory", "no-driver", "quantum", "turns-without-parking"],
)
def test_a_bad_parking_config_stops_the_hub_with_one_line(hub_factory, load_file, setting, says):
    config = CONFIG.format(load=str(load_file), light=LIGHT_SERVER) + setting + "\n"
    hub = hub_factory(config, start=False)
    hub.start(wait=False)
    assert hub.process.wait(60) != 0
    [line] = [x for x in hub.log().splitlines() if "gpuspawner:" in x]
    assert says in line
