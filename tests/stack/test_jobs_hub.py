"""Jobs on the real stack: submitted through the hub's REST API, run by the images'
`gpuspawner-job` in a real container on exactly their GPUs, outputs in the user's home,
GPUs back once Docker confirms the container gone; a person's start that makes a job give
way (SIGTERM seen, grace respected, the job waits and runs again); cancel; failure; bad
submissions.
"""

from __future__ import annotations

import json

import pytest
from browser import chromium, log_in
from jobkit import (
    ADDS_UP,
    SEES_ITS_GPUS,
    TRAIN,
    checkpoints,
    in_home,
    job,
    notebook,
    put,
    read,
    submit,
    wait_state,
)
from realhub import LIGHT_SERVER, PASSWORD, Hub
from selenium.webdriver.common.by import By

from gpuspawner.admin import cli

CONFIG = """
c.GPUSpawner.simulate_gpus = 2
c.GPUSpawner.simulated_load_file = {load!r}
c.GPUSpawner.monitor_interval = 0.5
c.GPUSpawner.profiles = [
    {{"display_name": "CPU only", "slug": "cpu", "gpus": 0, "spawner_override": {light!r}}},
    {{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True}},
    {{"display_name": "1 GPU, light", "slug": "light-1", "gpus": 1,
      "spawner_override": {light!r}}},
    {{"display_name": "2 GPUs", "slug": "gpu-2", "gpus": 2}},
]
c.GPUSpawner.default_limits = {{"max_jobs": 0}}
c.GPUSpawner.group_limits = {{
    "people": {{"max_wait": 900}},
    "trainers": {{"max_jobs": 2, "preempt_grace": 20}},
    # max_runtime counts from the job's start, its server's start included
    "sprinters": {{"max_jobs": 1, "max_runtime": 20, "preempt_grace": 10}},
}}
"""


@pytest.fixture(scope="module")
def hub(hub_factory, load_file) -> Hub:
    hub = hub_factory(CONFIG.format(load=str(load_file), light=LIGHT_SERVER))
    hub.add_users(
        "bob", "alice", "carol", "sam",
        groups={"trainers": ["bob"], "people": ["alice"], "sprinters": ["sam"]},
    )  # fmt: skip
    put(hub, "sam", "train.py", TRAIN)
    put(hub, "bob", "train.ipynb", notebook(SEES_ITS_GPUS, ADDS_UP))
    put(hub, "bob", "broken.ipynb", notebook(SEES_ITS_GPUS, "raise ValueError('bad data')"))
    put(hub, "bob", "train.py", TRAIN)
    return hub


def free(hub: Hub) -> list[str]:
    return [uuid for uuid, state in hub.gpu_states().items() if state == "free"]


def unfinished_ids(hub: Hub) -> list[int]:
    return [j["id"] for j in hub.api("GET", "/gpu-jobs").json()["jobs"]]


def servers_on_home(hub: Hub, user: str) -> dict:
    """The user's servers, stopped ones included, as their Home page lists them."""
    return hub.api("GET", f"/users/{user}?include_stopped_servers").json()["servers"]


def test_a_notebook_job_runs_on_exactly_its_gpus_and_keeps_its_output(hub):
    submitted = submit(hub, "bob", profile="gpu-1", notebook="train.ipynb")
    running = wait_state(hub, "bob", submitted["id"], "running", "done")
    assert len(running["gpus"]) == 1
    if running["state"] == "running":  # Docker's word: the container sees exactly them
        assert hub.held_uuids("bob", running["server"]) == running["gpus"]
    done = wait_state(hub, "bob", submitted["id"], "done")
    assert done["progress"]["cells"] == {"done": 2, "total": 2}
    assert 0 <= done["elapsed_seconds"] <= 120  # how long its run took, once it ended
    executed = json.loads(read(hub, "bob", f"{done['outputs']}/train.ipynb"))
    texts = ["".join(o.get("text", "")) for c in executed["cells"] for o in c["outputs"]]
    assert texts == [f"sees {running['gpus'][0]}\n", "total 45\n"]
    hub.wait_for(lambda: len(free(hub)) == 2, timeout=90, what="the job's GPU back in the pool")
    hub.wait_gone("bob", running["server"])
    hub.wait_for(  # and its server leaves bob's Home: no start link to a run that ended
        lambda: running["server"] not in servers_on_home(hub, "bob"),
        what="the ended job's server removed",
    )
    assert done == job(hub, "bob", submitted["id"])  # the job itself is kept, outputs too

    by_hand = hub.spawn("bob", running["server"], profile="gpu-1")  # its name is still its
    assert by_hand.status_code == 409, by_hand.text
    assert (
        "is a GPU job's server: the hub starts it when the job's turn comes"
        in (by_hand.json()["message"])
    )
    assert len(free(hub)) == 2 and job(hub, "bob", submitted["id"])["state"] == "done"
    assert "raise refused_start(" not in hub.log()  # a refusal, not a fault: no traceback
    hub.wait_for(  # the refused start made the server again: it leaves Home as well
        lambda: running["server"] not in servers_on_home(hub, "bob"),
        what="the server the refused start made removed",
    )


def test_a_failed_notebook_job_keeps_its_error_and_gives_its_gpu_back(hub):
    submitted = submit(hub, "bob", profile="gpu-1", notebook="broken.ipynb")
    failed = wait_state(hub, "bob", submitted["id"], "failed")
    assert "bad data" in failed["reason"]
    executed = json.loads(read(hub, "bob", f"{failed['outputs']}/broken.ipynb"))
    assert executed["cells"][1]["outputs"][0]["ename"] == "ValueError"
    hub.wait_for(lambda: len(free(hub)) == 2, timeout=90, what="the failed job's GPU back")


def test_a_persons_start_makes_a_job_give_way_and_the_job_runs_again(hub):
    saved = checkpoints(hub)
    submitted = submit(hub, "bob", profile="gpu-2", script="train.py")
    running = wait_state(hub, "bob", submitted["id"], "running")
    hub.wait_for(lambda: "training" in job(hub, "bob", submitted["id"])["progress"].get("tail", []))
    assert free(hub) == []
    # its GPUs are idle, yet the culler sees activity: a running job is never idle
    first = hub.server_model("bob", running["server"])["last_activity"]
    hub.wait_for(
        lambda: hub.server_model("bob", running["server"])["last_activity"] > first,
        what="activity recorded for a job with idle GPUs",
    )

    # alice may wait in line: her start makes the job give way, and gets its GPUs
    response = hub.spawn("alice", "", profile="light-1")
    assert response.status_code in (201, 202), response.text
    model = hub.wait_ready("alice", "", timeout=120)
    assert model["ready"]
    waiting = wait_state(hub, "bob", submitted["id"], "waiting")
    assert waiting["preemptions"] == 1 and "alice" in waiting["reason"]
    assert hub.metrics()[("gpuspawner_job_preemptions_total", ())] >= 1
    assert checkpoints(hub) == saved + 1  # SIGTERM seen, grace respected
    assert "attempt 1" in read(hub, "bob", f"{running['outputs']}/log.txt")

    # people first: the job waits while alice holds a GPU it needs, then runs again
    hub.stop_server("alice")
    again = wait_state(hub, "bob", submitted["id"], "running")
    assert again["attempts"] == 2

    cancelled = hub.api("DELETE", f"/users/bob/gpu-jobs/{submitted['id']}")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "cancelled"
    hub.wait_for(lambda: len(free(hub)) == 2, timeout=90, what="the cancelled job's GPUs back")
    assert checkpoints(hub) == saved + 2


@pytest.mark.parametrize(
    ("user", "body", "says"),
    [
        ("bob", {"profile": "nope", "notebook": "train.ipynb"}, "No profile 'nope'"),
        ("bob", {"profile": "cpu", "notebook": "train.ipynb"}, "jobs run on GPUs"),
        ("bob", {"profile": "gpu-1", "notebook": "../alice/x.ipynb"}, "inside your home"),
        ("carol", {"profile": "gpu-1", "notebook": "train.ipynb"}, "may not submit jobs"),
    ],
)
def test_a_bad_submission_is_refused_with_the_reason_and_holds_nothing(hub, user, body, says):
    before = free(hub)
    response = hub.api("POST", f"/users/{user}/gpu-jobs", json=body)
    assert response.status_code == 400
    assert says in response.json()["message"]
    assert free(hub) == before


@pytest.mark.parametrize(
    ("body", "says"),
    [
        # more than one environment string holds: before, it held a GPU 30 s and failed
        ({"profile": "gpu-1", "script": "train.py", "args": ["x" * 200_000]}, "at most 64 KiB"),
        ({"profile": "gpu-1", "script": "train.py", "x" * 20_000_000: 1}, "Unknown key 'xxx"),
        ({"profile": "x" * 60_000, "script": "train.py"}, "No profile 'xxx"),
    ],
)
def test_a_huge_submission_is_refused_without_its_text_and_holds_nothing(hub, body, says):
    before, jobs = free(hub), unfinished_ids(hub)
    response = hub.api("POST", "/users/bob/gpu-jobs", json=body)
    assert response.status_code == 400, response.text[:300]
    assert says in response.json()["message"]
    assert len(response.content) < 2000  # a short prefix quoted, not the input sent
    assert free(hub) == before and unfinished_ids(hub) == jobs


HUGE_ID = "99999999999999999999999"  # past SQLite's integers: OverflowError, a 500 before


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", f"/users/bob/gpu-jobs/{HUGE_ID}"),
        ("DELETE", f"/users/bob/gpu-jobs/{HUGE_ID}"),
        ("POST", f"/users/bob/servers/job-{HUGE_ID}/gpu-job"),
        ("DELETE", f"/gpus/waiting/{HUGE_ID}"),
        ("DELETE", f"/gpu-calendar/{HUGE_ID}"),
    ],
)
def test_an_id_no_record_could_hold_names_nothing(hub, method, path):
    response = hub.api(method, path, json={"state": "running", "attempt": 1})
    assert response.status_code == 404, response.text
    assert HUGE_ID[:10] in response.json()["message"]


def test_the_job_names_are_the_hubs_so_no_start_by_hand_breaks_anyones_jobs(hub):
    """Before: bob started job-<the next id> by hand, his next submission got that id, and
    every user's submission answered 500 until his server stopped; job-<23 digits> answered
    500 and its stray server stopped the removal of everyone's ended jobs' servers."""
    first = submit(hub, "bob", profile="gpu-1", script="train.py")
    hub.api("DELETE", f"/users/bob/gpu-jobs/{first['id']}")
    following, huge = f"job-{first['id'] + 1}", f"job-{HUGE_ID}"
    for server in (following, huge):
        refused = hub.spawn("bob", server, profile="gpu-1")
        assert refused.status_code == 409, refused.text
        assert "names job-<number> are the hub's" in refused.json()["message"]
    hub.wait_for(  # the stray servers the refused starts made leave bob's Home
        lambda: not {following, huge} & set(servers_on_home(hub, "bob")),
        what="the refused starts' servers removed",
    )

    bobs = submit(hub, "bob", profile="gpu-1", notebook="train.ipynb")
    assert bobs["server"] == following
    sams = submit(hub, "sam", profile="gpu-1", script="train.py")
    assert wait_state(hub, "bob", bobs["id"], "done")["attempts"] == 1
    hub.api("DELETE", f"/users/sam/gpu-jobs/{sams['id']}")
    hub.wait_for(lambda: len(free(hub)) == 2, timeout=90, what="the jobs' GPUs back")


def test_a_users_list_has_every_unfinished_job_and_pages_the_ended(hub):
    hub.wait_for(lambda: len(free(hub)) == 2, timeout=90, what="free GPUs")
    running = submit(hub, "bob", profile="gpu-2", script="train.py")
    for _ in range(3):  # ended jobs to page through: cancelled while they waited
        gone = submit(hub, "bob", profile="gpu-1", script="train.py")
        hub.api("DELETE", f"/users/bob/gpu-jobs/{gone['id']}").raise_for_status()
    waiting = submit(hub, "bob", profile="gpu-1", script="train.py")  # no GPU left for it
    try:
        first = hub.api("GET", "/users/bob/gpu-jobs?limit=1").json()
        listed = [j["id"] for j in first["jobs"]]
        assert listed[:2] == [waiting["id"], running["id"]] and len(listed) == 3
        ended = [listed[2]]
        after = first["next_after"]
        while after is not None:
            page = hub.api("GET", f"/users/bob/gpu-jobs?limit=2&after={after}").json()
            assert all(j["state"] in ("done", "failed", "cancelled") for j in page["jobs"])
            ended += [j["id"] for j in page["jobs"]]
            after = page["next_after"]
        whole = hub.api("GET", "/users/bob/gpu-jobs?limit=500").json()
        assert [j["id"] for j in whole["jobs"]] == [*listed[:2], *ended]
        assert whole["next_after"] is None and len(ended) == len(set(ended)) >= 3
        for query, says in (("limit=0", '"limit"'), ("after=1x", '"after"')):
            refused = hub.api("GET", f"/users/bob/gpu-jobs?{query}")
            assert refused.status_code == 400 and says in refused.json()["message"]
    finally:
        for job_id in (waiting["id"], running["id"]):
            hub.api("DELETE", f"/users/bob/gpu-jobs/{job_id}")
    hub.wait_for(lambda: len(free(hub)) == 2, timeout=90, what="the jobs' GPUs back")


def test_another_user_sees_no_job_of_theirs(hub):
    carol = hub.login("carol")
    mine = carol.get(f"{hub.url}/hub/api/users/carol/gpu-jobs", timeout=30)
    assert mine.status_code == 200 and mine.json() == {"jobs": [], "next_after": None}
    other = carol.get(f"{hub.url}/hub/api/users/bob/gpu-jobs", timeout=30)
    assert other.status_code in (403, 404)
    assert "train" not in other.text


def test_a_running_job_runs_on_through_a_hub_kill_9_and_is_recovered(hub):
    before = checkpoints(hub)
    submitted = submit(hub, "bob", profile="gpu-1", script="train.py")
    running = wait_state(hub, "bob", submitted["id"], "running")
    container = hub.container_of("bob", running["server"]).id

    hub.kill()
    hub.start()

    after = job(hub, "bob", submitted["id"])
    assert (after["state"], after["attempts"], after["gpus"]) == ("running", 1, running["gpus"])
    assert hub.container_of("bob", running["server"]).id == container  # the same run, on
    assert hub.held_by("bob") == running["gpus"]
    hub.wait_ready("bob", running["server"])  # routed again: its user can open it

    cancelled = hub.api("DELETE", f"/users/bob/gpu-jobs/{submitted['id']}")
    assert cancelled.json()["state"] == "cancelled"
    hub.wait_for(lambda: len(free(hub)) == 2, timeout=90, what="the recovered job's GPU back")
    assert checkpoints(hub) == before + 1


def test_a_graceful_hub_restart_puts_a_running_job_back_in_line_not_failed(hub):
    """systemctl restart: JupyterHub's shutdown stops every server (cleanup_servers), a job's
    with its grace; the job waits for the next hub and runs again."""
    saved = checkpoints(hub)
    submitted = submit(hub, "bob", profile="gpu-1", script="train.py")
    wait_state(hub, "bob", submitted["id"], "running")
    hub.wait_for(lambda: "training" in job(hub, "bob", submitted["id"])["progress"].get("tail", []))

    hub.stop()
    assert checkpoints(hub) == saved + 1  # its SIGTERM reached it: it saved
    hub.start()

    again = wait_state(hub, "bob", submitted["id"], "running")
    assert (again["attempts"], again["preemptions"]) == (2, 0)
    assert f"{again['server']} was stopped with the hub and waits again" in hub.log()

    cancelled = hub.api("DELETE", f"/users/bob/gpu-jobs/{submitted['id']}")
    assert cancelled.json()["state"] == "cancelled"
    hub.wait_for(lambda: len(free(hub)) == 2, timeout=90, what="the job's GPU back")


def test_a_servers_own_token_manages_its_users_jobs_and_nothing_more(hub):
    hub.spawn_ready("alice", "", profile="cpu")
    env = hub.container_of("alice").attrs["Config"]["Env"]
    token = next(e.split("=", 1)[1] for e in env if e.startswith("JUPYTERHUB_API_TOKEN="))
    as_server = {"headers": {"Authorization": f"token {token}"}}
    try:
        assert hub.api("GET", "/users/alice/gpu-jobs", **as_server).status_code == 200
        refused = hub.api(
            "POST", "/users/alice/gpu-jobs", json={"profile": "gpu-1", "notebook": "a.ipynb"},
            **as_server,
        )  # fmt: skip
        assert refused.status_code == 400  # allowed to ask; her groups allow no jobs
        assert "may not submit jobs" in refused.json()["message"]
        assert hub.api("GET", "/users/bob/gpu-jobs", **as_server).status_code == 403
        start = hub.api("POST", "/users/alice/servers/other", json={}, **as_server)
        assert start.status_code == 403  # the token cannot start servers
    finally:
        hub.stop_server("alice")


def test_the_job_command_submits_lists_follows_and_cancels(hub, capsys):
    where = ["--api-url", f"{hub.url}/hub/api", "--token", hub.token, "--user", "bob"]
    assert cli.main(["job", *where, "submit", "--profile", "gpu-1", "train.py", "--", "-v"]) == 0
    submitted = capsys.readouterr().out
    job_id = int(submitted.split()[1])
    assert f"job {job_id} (train.py -v): " in submitted
    wait_state(hub, "bob", job_id, "running")
    hub.wait_for(lambda: "training" in job(hub, "bob", job_id)["progress"].get("tail", []))

    assert cli.main(["job", *where, "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].split()[:4] == ["ID", "STATE", "PROFILE", "RUNS"]
    assert listed[1].split()[:5] == [str(job_id), "running", "gpu-1", "train.py", "-v"]
    assert cli.main(["job", *where, "logs", str(job_id)]) == 0
    assert "training" in capsys.readouterr().out.splitlines()

    assert cli.main(["job", *where, "cancel", str(job_id)]) == 0
    assert "cancelled" in capsys.readouterr().out
    assert cli.main(["job", *where, "cancel", str(job_id)]) == 1  # the hub's word, as it said it
    assert "has already ended (cancelled)" in capsys.readouterr().err
    hub.wait_for(lambda: len(free(hub)) == 2, timeout=90, what="the job's GPU back")


def test_the_gpus_page_shows_a_running_job_its_gpus_and_a_hint(hub, load_file):
    submitted = submit(hub, "bob", profile="gpu-1", script="train.py")
    running = wait_state(hub, "bob", submitted["id"], "running")
    [uuid] = running["gpus"]
    load_file.write_text(json.dumps({uuid: {"utilization_percent": 60, "memory_used_gib": 79}}))
    driver = chromium()
    try:
        hub.wait_for(lambda: job(hub, "bob", submitted["id"])["hints"], what="the memory hint")
        log_in(driver, hub.url, "admin", PASSWORD)
        driver.get(f"{hub.url}/hub/gpus")
        row = driver.find_element(By.CSS_SELECTOR, f'#jobs-table tr[data-job="{submitted["id"]}"]')
        assert f"bob / {running['server']}" in row.text
        assert "running" in row.text and "train.py (gpu-1)" in row.text
        assert f"{uuid}: 60 %, memory 99 %" in row.text
        assert "Close to out of memory" in row.text
        hub.api("DELETE", f"/users/bob/gpu-jobs/{submitted['id']}")
        wait_state(hub, "bob", submitted["id"], "cancelled")
        driver.get(f"{hub.url}/hub/gpus")  # it leaves the Jobs table for the ended ones
        assert not driver.find_elements(
            By.CSS_SELECTOR, f'#jobs-table tr[data-job="{submitted["id"]}"]'
        )
        ended = f'#ended-jobs-table tr[data-job="{submitted["id"]}"]'
        row = driver.find_element(By.CSS_SELECTOR, ended)
        assert "cancelled" in row.text and "Cancelled at" in row.text
        assert f"outputs in ~/jobs/{running['server']}" in row.text
    finally:
        driver.quit()
        load_file.write_text("{}")
        hub.api("DELETE", f"/users/bob/gpu-jobs/{submitted['id']}")
    hub.wait_for(lambda: len(free(hub)) == 2, timeout=90, what="the job's GPU back")


def test_a_job_past_its_max_runtime_is_stopped_and_its_work_saved(hub):
    submitted = submit(hub, "sam", profile="gpu-1", script="train.py")
    failed = wait_state(hub, "sam", submitted["id"], "failed", timeout=60)
    assert "max_runtime" in failed["reason"] and "sprinters" in failed["reason"]
    hub.wait_for(lambda: len(free(hub)) == 2, timeout=90, what="its GPU back")
    assert "saved" in in_home(hub, "sam", ["cat", "checkpoint.txt"], "ro")  # SIGTERM, grace
    states = {
        labels[0][1]: value
        for (name, labels), value in hub.metrics().items()
        if name == "gpuspawner_jobs"
    }
    assert states == {"waiting": 0, "starting": 0, "running": 0, "giving way": 0, "parked": 0}
    assert hub.metrics()[("gpuspawner_jobs_ended_total", (("state", "failed"),))] >= 1
