"""GPU jobs from JupyterLab's own "Create Job" dialog (jupyter-scheduler, with
gpuspawner_lab.scheduler as its backend inside a hub's servers).

A real hub and a real JupyterLab in a container, reached in headless Chromium through the
hub's OAuth: a user creates a job for a notebook in the dialog, the hub has it as theirs
and runs it on a GPU to the end, and JupyterLab's job list shows it completed with its
outputs. Then jupyter-scheduler's REST API, as the dialog and the list speak it: the GPU
profiles as environments, the hub's refusals in its own words, stop and delete cancelling
through the hub, schedules refused. Outside a hub the image's jupyter-scheduler is stock.
"""

from __future__ import annotations

import json
import textwrap
import time

import pytest
import requests
from browser import STALE, log_in
from jobkit import ADDS_UP, SEES_ITS_GPUS, notebook, put
from realhub import NOTEBOOK_IMAGE, PASSWORD, Hub
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

pytestmark = pytest.mark.docker

CONFIG = """
c.GPUSpawner.simulate_gpus = 2
c.GPUSpawner.profiles = [
    {"display_name": "CPU only", "slug": "cpu", "gpus": 0, "default": True},
    {"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1},
    {"display_name": "2 GPUs", "slug": "gpu-2", "gpus": 2},
]
c.GPUSpawner.default_limits = {"max_jobs": 0}
c.GPUSpawner.group_limits = {"trainers": {"max_jobs": 2, "preempt_grace": 5}}
"""


# The notebook toolbar's button that opens the Create Job dialog.
CREATE_JOB = '[data-command="scheduling:create-from-notebook"]'
ENVIRONMENT = '[role="combobox"], [aria-haspopup="listbox"]'  # the dialog's Select


@pytest.fixture(scope="module")
def hub(hub_factory) -> Hub:
    hub = hub_factory(CONFIG)
    hub.add_users("bob", groups={"trainers": ["bob"]})
    put(hub, "bob", "train.ipynb", notebook(SEES_ITS_GPUS, ADDS_UP))
    put(hub, "bob", "sleeper.ipynb", notebook("import time\ntime.sleep(600)"))  # till stopped
    hub.spawn_ready("bob", profile="cpu")  # his JupyterLab: no GPU, jobs get theirs
    return hub


def hub_jobs(hub: Hub, user: str) -> list[dict]:
    response = hub.api("GET", f"/users/{user}/gpu-jobs")
    response.raise_for_status()
    return response.json()["jobs"]


def scheduler(hub: Hub, method: str, path: str, **kwargs) -> requests.Response:
    """jupyter-scheduler's REST API in bob's server, through the hub's proxy (a token that
    may access his server, as the browser's session may)."""
    return requests.request(
        method,
        f"{hub.url}/user/bob/scheduler/{path}",
        headers={"Authorization": f"token {hub.token}"},
        timeout=60,
        **kwargs,
    )


def row_of(driver, name: str) -> str:
    """The text of the job list's row for the job called `name`, once it is listed."""
    rows = driver.find_elements(By.CSS_SELECTOR, "tr")
    return next((r.text for r in rows if name in r.text), "")


def create_enabled(driver):
    """The dialog's Create button, once it may be pressed (None before)."""
    buttons = driver.find_elements(By.CSS_SELECTOR, "button")
    create = next((b for b in buttons if b.text.strip() == "Create"), None)
    return create if create is not None and create.is_enabled() else None


def dialog_for(notebook: str):
    """A wait's condition: the Create Job dialog, opened from the notebook's toolbar, for
    `notebook`. Under CI's load the button could be pressed before JupyterLab tracked the
    notebook as current, and the dialog opened for no file ("Input path '' does not
    exist"): such a dialog is cancelled and the button pressed again."""

    def condition(driver) -> bool:
        inputs = driver.find_elements(By.CSS_SELECTOR, 'input[name="inputFile"]')
        if any(i.get_attribute("value") == notebook for i in inputs):
            return True
        cancel = [b for b in driver.find_elements(By.CSS_SELECTOR, "button") if b.text == "Cancel"]
        if cancel and "Input path '' does not exist" in driver.page_source:
            cancel[0].click()
            return False
        buttons = driver.find_elements(By.CSS_SELECTOR, CREATE_JOB)
        if buttons and not cancel:
            buttons[0].click()
        return False

    return condition


def named(name: str):
    """A wait's condition: the dialog's job name field says `name`, typed again for as long
    as it does not (the dialog fills in its default name as it loads, over what was typed:
    under CI's load the job was created as "train")."""

    def condition(driver) -> bool:
        field = driver.find_element(By.CSS_SELECTOR, 'input[name="jobName"]')
        if field.get_attribute("value") == name:
            return True
        field.send_keys(Keys.CONTROL, "a")  # a React field: clear() would come back
        field.send_keys(name)
        return False

    return condition


def completed_row(name: str):
    """A wait's condition: the job list's row for `name` once it says Completed. Until it
    does, Reload is clicked (the list does not poll), and the rows are read at the next
    look, not just after the click: a list still loading shows none. A list that shows no
    such row is reloaded every 10 s."""
    clicked = 0.0

    def condition(driver) -> str | bool:
        nonlocal clicked
        row = row_of(driver, name)
        if "Completed" in row:
            return row
        buttons = [b for b in driver.find_elements(By.CSS_SELECTOR, "button") if b.text == "Reload"]
        if buttons and (row or time.monotonic() - clicked > 10):
            buttons[0].click()
            clicked = time.monotonic()
        return False

    return condition


def test_a_job_created_in_jupyterlab_runs_on_the_hub_and_shows_completed(hub: Hub, browser):
    log_in(browser, hub.url, "bob", PASSWORD)
    browser.get(f"{hub.url}/user/bob/lab/tree/train.ipynb")
    wait = WebDriverWait(browser, 120, poll_frequency=0.5, ignored_exceptions=STALE)
    wait.until(dialog_for("train.ipynb"))
    # the environment: the GPU profile gpu-2 ("2 GPUs"), of the two the dialog offers
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ENVIRONMENT))[0].click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, '[data-value="gpu-2"]'))[0].click()
    wait.until(lambda d: "gpu-2" in d.find_element(By.CSS_SELECTOR, ENVIRONMENT).text)
    wait.until(named("GPU training"))
    wait.until(create_enabled).click()
    try:  # the dialog stages the notebook, then its backend submits it to the hub
        [job] = hub.wait_for(lambda: hub_jobs(hub, "bob"), timeout=90, what="bob's job")
    except TimeoutError:
        shown = browser.execute_script("return document.body.innerText")[-1500:]
        pytest.fail(f"no job reached the hub after Create; JupyterLab shows:\n{shown}")
    assert (job["user"], job["profile"], job["notebook"]) == ("bob", "gpu-2", "train.ipynb")
    done = hub.wait_for(
        lambda: (found := hub_jobs(hub, "bob")[0])["state"] in ("done", "failed") and found,
        timeout=180,
        what="the job's end",
    )
    assert done["state"] == "done", done
    assert done["progress"]["cells"] == {"done": 2, "total": 2}

    try:  # the list shows it completed once reloaded (its Reload button: it does not poll)
        row = WebDriverWait(browser, 90, poll_frequency=2, ignored_exceptions=STALE).until(
            completed_row("GPU training")
        )
    except TimeoutException:
        listed = scheduler(hub, "GET", "jobs").json()
        pytest.fail(
            f"JupyterLab's job list shows: {row_of(browser, 'GPU training')!r}; "
            f"jupyter-scheduler's API lists: {listed}"
        )
    assert "train.ipynb" in row and "Notebook" in row, row

    described = scheduler(hub, "GET", f"jobs/{done['server']}").json()
    assert described["status"] == "COMPLETED" and described["name"] == "GPU training"
    files = {f["file_format"]: f["file_path"] for f in described["job_files"]}
    assert files == {
        "ipynb": f"{done['outputs']}/train.ipynb",
        "log": f"{done['outputs']}/log.txt",
        "input": "train.ipynb",
    }


def test_the_dialogs_environments_are_the_users_gpu_profiles(hub: Hub):
    response = scheduler(hub, "GET", "runtime_environments")
    assert response.status_code == 200, response.text
    notebook = [{"name": "ipynb", "label": "Notebook"}]
    assert [(e["name"], e["description"], e["output_formats"]) for e in response.json()] == [
        ("gpu-1", "1 GPU", notebook),
        ("gpu-2", "2 GPUs", notebook),
    ]  # the hub's GPU profiles bob's groups may pick, in the form's order: no CPU-only one


def create(hub: Hub, **fields) -> requests.Response:
    body = {"name": "run", "input_uri": "train.ipynb", "runtime_environment_name": "gpu-1"}
    return scheduler(hub, "POST", "jobs", json={**body, **fields})


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"runtime_environment_name": "gpu-9"}, "No profile 'gpu-9'"),  # the hub's own words
        ({"input_uri": "missing.ipynb"}, "'missing.ipynb' does not exist"),
        ({"parameters": {"lr": "0.1"}}, "takes no parameters"),
    ],
)
def test_a_job_that_cannot_run_is_refused_with_the_reason(hub: Hub, fields, says):
    before = len(hub_jobs(hub, "bob"))
    refused = create(hub, **fields)
    assert refused.status_code == 500 and says in refused.json()["message"], refused.text
    assert len(hub_jobs(hub, "bob")) == before


def test_schedules_are_refused(hub: Hub):
    body = {"name": "nightly", "input_uri": "train.ipynb", "runtime_environment_name": "gpu-1",
            "schedule": "0 3 * * *", "timezone": "UTC"}  # fmt: skip
    refused = scheduler(hub, "POST", "job_definitions", json=body)
    assert refused.status_code == 500 and "schedules are not supported" in refused.text


def test_stop_and_delete_cancel_through_the_hub(hub: Hub):
    created = create(hub, input_uri="sleeper.ipynb", name="sleeper")
    assert created.status_code == 200, created.text
    job_id = created.json()["job_id"]
    number = int(job_id.removeprefix("job-"))
    hub.wait_for(
        lambda: scheduler(hub, "GET", f"jobs/{job_id}").json()["status"] == "IN_PROGRESS",
        timeout=120,
        what="the sleeper in progress",
    )
    stopped = scheduler(hub, "PATCH", f"jobs/{job_id}", json={"status": "STOPPED"})
    assert stopped.status_code == 204, stopped.text
    assert hub.api("GET", f"/users/bob/gpu-jobs/{number}").json()["state"] == "cancelled"
    hub.wait_for(
        lambda: scheduler(hub, "GET", f"jobs/{job_id}").json()["status"] == "STOPPED",
        what="STOPPED in JupyterLab",
    )

    assert scheduler(hub, "DELETE", f"jobs/{job_id}").status_code == 204
    listed = [j["job_id"] for j in scheduler(hub, "GET", "jobs").json()["jobs"]]
    assert job_id not in listed and listed  # off JupyterLab's list; the first job stays
    assert any(j["id"] == number for j in hub_jobs(hub, "bob"))  # the hub keeps its record
    hub.wait_gone("bob", f"job-{number}", timeout=60)


def test_jupyterlabs_list_reads_every_page_of_the_hubs(hub: Hub):
    """jupyter-scheduler sorts, filters and counts the list itself, so its backend follows
    the hub's cursor through every page of ended jobs (here one job a page, in bob's own
    server with its own token); the jobs above left bob at least two ended jobs."""
    whole = hub.api("GET", "/users/bob/gpu-jobs?limit=500").json()
    ids = [j["id"] for j in whole["jobs"]]
    assert whole["next_after"] is None and len(ids) >= 2
    script = (
        "import asyncio, json, os\n"
        "from gpuspawner_lab.hub_jobs import Hub\n"
        "jobs = asyncio.run(Hub.from_environ(os.environ).every_job(per_page=1))\n"
        "print(json.dumps([j['id'] for j in jobs]))"
    )
    code, printed = hub.container_of("bob").exec_run(["python3", "-c", script])
    assert code == 0, printed.decode()
    assert json.loads(printed) == ids


def test_outside_a_hub_jupyter_scheduler_is_stock(hub: Hub):
    script = textwrap.dedent(
        """
        from gpuspawner_lab.scheduler import GPUJobScheduler, GPUProfiles
        manager = GPUProfiles()
        scheduler = GPUJobScheduler(root_dir=".", environments_manager=manager,
                                    db_url="sqlite://")
        print(type(manager).__name__, type(scheduler).__name__)
        """
    )
    printed = hub.docker.containers.run(
        NOTEBOOK_IMAGE, ["python3", "-c", script], entrypoint=[], remove=True
    ).decode()
    assert printed.split() == ["CondaEnvironmentManager", "Scheduler"]
