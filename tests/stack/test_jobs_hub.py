"""Jobs on the real stack: submitted through the hub's REST API, run by the images'
`gpuspawner-job` in a real container on exactly their GPUs, outputs in the user's home,
GPUs back once Docker confirms the container gone; a person's start that makes a job give
way (SIGTERM seen, grace respected, the job waits and runs again); cancel; failure; bad
submissions.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from realhub import LIGHT_SERVER, NOTEBOOK_IMAGE, Hub

CONFIG = f"""
c.GPUSpawner.simulate_gpus = 2
c.GPUSpawner.profiles = [
    {{"display_name": "CPU only", "slug": "cpu", "gpus": 0, "spawner_override": {LIGHT_SERVER!r}}},
    {{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True}},
    {{"display_name": "1 GPU, light", "slug": "light-1", "gpus": 1,
      "spawner_override": {LIGHT_SERVER!r}}},
    {{"display_name": "2 GPUs", "slug": "gpu-2", "gpus": 2}},
]
c.GPUSpawner.default_limits = {{"max_jobs": 0}}
c.GPUSpawner.group_limits = {{
    "people": {{"max_wait": 900}},
    "trainers": {{"max_jobs": 2, "preempt_grace": 20}},
}}
"""

NOTEBOOK = {
    "nbformat": 4,
    "nbformat_minor": 5,
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
    "cells": [
        {"cell_type": "code", "metadata": {}, "source": src, "outputs": [],
         "execution_count": None, "id": f"c{i}"}
        for i, src in enumerate(
            ["import os\nprint('sees', os.environ.get('NVIDIA_VISIBLE_DEVICES'))",
             "total = sum(range(10))\nprint('total', total)"]
        )
    ],
}  # fmt: skip
BROKEN = {**NOTEBOOK, "cells": [*NOTEBOOK["cells"][:1], {
    "cell_type": "code", "metadata": {}, "source": "raise ValueError('bad data')",
    "outputs": [], "execution_count": None, "id": "boom"}]}  # fmt: skip
# Runs until SIGTERM, then saves its "checkpoint" and ends: the documented contract.
TRAIN = textwrap.dedent(
    """
    import os, signal, sys, time
    def save(signum, frame):
        with open('checkpoint.txt', 'a') as f:
            f.write('saved\\n')
        sys.exit(0)
    signal.signal(signal.SIGTERM, save)
    print('training', flush=True)
    while True:
        time.sleep(0.2)
    """
)


@pytest.fixture(scope="module")
def hub(hub_factory) -> Hub:
    hub = hub_factory(CONFIG)
    hub.add_users("bob", "alice", "carol", groups={"trainers": ["bob"], "people": ["alice"]})
    put(hub, "bob", "train.ipynb", json.dumps(NOTEBOOK))
    put(hub, "bob", "broken.ipynb", json.dumps(BROKEN))
    put(hub, "bob", "train.py", TRAIN)
    return hub


def put(hub: Hub, user: str, path: str, text: str) -> None:
    """A file in the user's home, written as the notebook user (uid 1000)."""
    hub.docker.containers.run(
        NOTEBOOK_IMAGE,
        ["sh", "-c", f"cat > {path} <<'EOF'\n{text}\nEOF"],
        entrypoint=[],
        volumes={hub.home_of(user): {"bind": "/home/jovyan", "mode": "rw"}},
        remove=True,
    )


def read(hub: Hub, user: str, path: str) -> str:
    return hub.docker.containers.run(
        NOTEBOOK_IMAGE,
        ["cat", path],
        entrypoint=[],
        volumes={hub.home_of(user): {"bind": "/home/jovyan", "mode": "ro"}},
        remove=True,
    ).decode()


def submit(hub: Hub, user: str, **body) -> dict:
    response = hub.api("POST", f"/users/{user}/gpu-jobs", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def job(hub: Hub, user: str, job_id: int) -> dict:
    response = hub.api("GET", f"/users/{user}/gpu-jobs/{job_id}")
    response.raise_for_status()
    return response.json()


def wait_state(hub: Hub, user: str, job_id: int, *states: str, timeout: float = 120) -> dict:
    try:
        return hub.wait_for(
            lambda: (found := job(hub, user, job_id))["state"] in states and found,
            timeout=timeout,
            what=f"job {job_id} {' or '.join(states)}",
        )
    except TimeoutError:
        ours = [line for line in hub.log().splitlines() if "gpuspawner" in line or "[E" in line]
        raise AssertionError(
            f"job {job_id} is {job(hub, user, job_id)}, not {states}; the hub said:\n"
            + "\n".join(ours[-40:])
        ) from None


def free(hub: Hub) -> list[str]:
    return [uuid for uuid, state in hub.gpu_states().items() if state == "free"]


def test_a_notebook_job_runs_on_exactly_its_gpus_and_keeps_its_output(hub):
    submitted = submit(hub, "bob", profile="gpu-1", notebook="train.ipynb")
    running = wait_state(hub, "bob", submitted["id"], "running", "done")
    assert len(running["gpus"]) == 1
    if running["state"] == "running":  # Docker's word: the container sees exactly them
        assert hub.held_uuids("bob", running["server"]) == running["gpus"]
    done = wait_state(hub, "bob", submitted["id"], "done")
    assert done["progress"]["cells"] == {"done": 2, "total": 2}
    executed = json.loads(read(hub, "bob", f"{done['outputs']}/train.ipynb"))
    texts = ["".join(o.get("text", "")) for c in executed["cells"] for o in c["outputs"]]
    assert texts == [f"sees {running['gpus'][0]}\n", "total 45\n"]
    hub.wait_for(lambda: len(free(hub)) == 2, what="the job's GPU back in the pool")
    hub.wait_gone("bob", running["server"])


def test_a_failed_notebook_job_keeps_its_error_and_gives_its_gpu_back(hub):
    submitted = submit(hub, "bob", profile="gpu-1", notebook="broken.ipynb")
    failed = wait_state(hub, "bob", submitted["id"], "failed")
    assert "bad data" in failed["reason"]
    executed = json.loads(read(hub, "bob", f"{failed['outputs']}/broken.ipynb"))
    assert executed["cells"][1]["outputs"][0]["ename"] == "ValueError"
    hub.wait_for(lambda: len(free(hub)) == 2, what="the failed job's GPU back")


def test_a_persons_start_makes_a_job_give_way_and_the_job_runs_again(hub):
    submitted = submit(hub, "bob", profile="gpu-2", script="train.py")
    running = wait_state(hub, "bob", submitted["id"], "running")
    hub.wait_for(lambda: "training" in job(hub, "bob", submitted["id"])["progress"].get("tail", []))
    assert free(hub) == []

    # alice may wait in line: her start makes the job give way, and gets its GPUs
    response = hub.spawn("alice", "", profile="light-1")
    assert response.status_code in (201, 202), response.text
    model = hub.wait_ready("alice", "", timeout=120)
    assert model["ready"]
    waiting = wait_state(hub, "bob", submitted["id"], "waiting")
    assert waiting["preemptions"] == 1 and "alice" in waiting["reason"]
    assert read(hub, "bob", "checkpoint.txt") == "saved\n"  # SIGTERM seen, grace respected
    assert "attempt 1" in read(hub, "bob", f"{running['outputs']}/log.txt")

    # people first: the job waits while alice holds a GPU it needs, then runs again
    hub.stop_server("alice")
    again = wait_state(hub, "bob", submitted["id"], "running")
    assert again["attempts"] == 2

    cancelled = hub.api("DELETE", f"/users/bob/gpu-jobs/{submitted['id']}")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "cancelled"
    hub.wait_for(lambda: len(free(hub)) == 2, what="the cancelled job's GPUs back")
    assert read(hub, "bob", "checkpoint.txt") == "saved\nsaved\n"


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


def test_another_user_sees_no_job_of_theirs(hub):
    carol = hub.login("carol")
    mine = carol.get(f"{hub.url}/hub/api/users/carol/gpu-jobs", timeout=30)
    assert mine.status_code == 200 and mine.json() == {"jobs": []}
    other = carol.get(f"{hub.url}/hub/api/users/bob/gpu-jobs", timeout=30)
    assert other.status_code in (403, 404)
    assert "train" not in other.text
