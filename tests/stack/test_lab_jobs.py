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

import pytest
import requests
from browser import STALE, log_in
from in_container import run_in
from jobkit import ADDS_UP, SEES_ITS_GPUS, in_home, notebook, put
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


ENVIRONMENT = '[role="combobox"], [aria-haspopup="listbox"]'  # the dialog's Select
# JupyterLab's app object in the page (window.jupyterapp), so that a test waits for its own
# signals (restored, a document's context ready, a command's result) rather than for a DOM
# it redraws: bob's own JupyterLab setting, in his home, as any user could make it.
EXPOSE_APP = json.dumps({"LabApp": {"expose_app_in_browser": True}})
# The notebook opened and current, then the Create Job dialog for it, as its toolbar button
# opens it. That button's command (jupyter-scheduler 2.12) takes the file the file browser
# has selected, which opening a notebook from a link selects only some time later: the
# dialog opened for no file under load. So the notebook is opened, and selected in the file
# browser, each step awaited; the answer is the file browser's selection as the command met
# it.
CREATE_JOB_FOR = """
const [path, done] = arguments;
const app = window.jupyterapp;
(async () => {
  await app.restored;
  const notebook = await app.commands.execute('docmanager:open', {path, factory: 'Notebook'});
  await notebook.context.ready;
  await app.commands.execute('filebrowser:go-to-path', {path, dontShowBrowser: true});
  app.shell.activateById(notebook.id);
  const browser = [...app.shell.widgets('left')].find(widget => widget.id === 'filebrowser');
  const selected = [...browser.selectedItems()].map(item => item.path);
  await app.commands.execute('scheduling:create-from-notebook');
  return selected;
})().then(selected => done({selected}), error => done({error: String(error)}));
"""


@pytest.fixture(scope="module")
def hub(hub_factory) -> Hub:
    hub = hub_factory(CONFIG)
    hub.add_users("bob", groups={"trainers": ["bob"]})
    put(hub, "bob", "train.ipynb", notebook(SEES_ITS_GPUS, ADDS_UP))
    put(hub, "bob", "sleeper.ipynb", notebook("import time\ntime.sleep(600)"))  # till stopped
    in_home(hub, "bob", ["sh", "-c", "mkdir -p .jupyter"], "rw")
    put(hub, "bob", ".jupyter/jupyter_server_config.json", EXPOSE_APP)
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


def button(text: str):
    """A wait's condition: the button that says `text`, once drawn."""
    return lambda driver: next(
        (b for b in driver.find_elements(By.CSS_SELECTOR, "button") if b.text.strip() == text), None
    )


def field(name: str):
    """A wait's condition: the dialog's text field `name`, once drawn."""
    return lambda driver: driver.find_elements(By.CSS_SELECTOR, f'input[name="{name}"]')


def test_a_job_created_in_jupyterlab_runs_on_the_hub_and_shows_completed(hub: Hub, browser):
    log_in(browser, hub.url, "bob", PASSWORD)
    browser.get(f"{hub.url}/user/bob/lab")
    wait = WebDriverWait(browser, 120, poll_frequency=0.5, ignored_exceptions=STALE)
    wait.until(lambda d: d.execute_script("return !!window.jupyterapp"))
    browser.set_script_timeout(180)
    opened = browser.execute_async_script(CREATE_JOB_FOR, "train.ipynb")
    assert opened == {"selected": ["train.ipynb"]}, opened
    [input_file] = wait.until(field("inputFile"))
    assert input_file.get_attribute("value") == "train.ipynb"
    # the environment: the GPU profile gpu-2 ("2 GPUs"), of the two the dialog offers
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ENVIRONMENT))[0].click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, '[data-value="gpu-2"]'))[0].click()
    wait.until(lambda d: "gpu-2" in d.find_element(By.CSS_SELECTOR, ENVIRONMENT).text)
    [name] = wait.until(field("jobName"))
    assert name.get_attribute("value") == "train"  # its default, from the notebook's name
    name.send_keys(Keys.CONTROL, "a")  # a React field: clear() would come back
    name.send_keys("GPU training")
    wait.until(
        lambda d: d.find_element(By.NAME, "jobName").get_attribute("value") == "GPU training"
    )
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

    # JupyterLab's list, once the scheduler says it completed, shows it so at a Reload (the
    # list does not poll)
    hub.wait_for(
        lambda: scheduler(hub, "GET", f"jobs/{done['server']}").json()["status"] == "COMPLETED",
        what="the scheduler's word that it completed",
    )
    reload = wait.until(
        lambda d: next(
            (b for b in d.find_elements(By.CSS_SELECTOR, "button") if b.text == "Reload"), None
        )
    )
    reload.click()
    try:
        row = wait.until(
            lambda d: (row := row_of(d, "GPU training")) and "Completed" in row and row
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
    other = create(hub, input_uri="sleeper.ipynb", name="kept", runtime_environment_name="gpu-2")
    assert other.status_code == 200, other.text  # (it waits: the sleeper holds a GPU of two)
    stopped = scheduler(hub, "PATCH", f"jobs/{job_id}", json={"status": "STOPPED"})
    assert stopped.status_code == 204, stopped.text
    assert hub.api("GET", f"/users/bob/gpu-jobs/{number}").json()["state"] == "cancelled"
    hub.wait_for(
        lambda: scheduler(hub, "GET", f"jobs/{job_id}").json()["status"] == "STOPPED",
        what="STOPPED in JupyterLab",
    )

    assert scheduler(hub, "DELETE", f"jobs/{job_id}").status_code == 204
    listed = [j["job_id"] for j in scheduler(hub, "GET", "jobs").json()["jobs"]]
    assert job_id not in listed and other.json()["job_id"] in listed  # only it goes
    assert any(j["id"] == number for j in hub_jobs(hub, "bob"))  # the hub keeps its record
    hub.wait_gone("bob", f"job-{number}", timeout=60)
    kept = other.json()["job_id"]
    assert scheduler(hub, "PATCH", f"jobs/{kept}", json={"status": "STOPPED"}).status_code == 204


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
    listed = run_in(hub.container_of("bob"), ["python3", "-c", script])
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.output) == ids


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
