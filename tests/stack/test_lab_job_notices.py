"""JupyterLab tells its user when one of their GPU jobs ends (gpuspawner-lab's job notices).

A real hub, and bob's JupyterLab in a container, open in headless Chromium: jobs submitted
through the hub's REST API run to their end, and JupyterLab shows a notification for each
(success when done, error when failed, info when cancelled) with the job's file and the
hub's reason, whose action opens what the job wrote. A job that had ended before the page
loaded is not told of, and a job's own server has no notices to give.
"""

from __future__ import annotations

import pytest
import requests
from browser import STALE, log_in
from jobkit import ADDS_UP, SEES_ITS_GPUS, notebook, put
from realhub import PASSWORD, Hub
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

pytestmark = pytest.mark.docker

CONFIG = """
c.GPUSpawner.simulate_gpus = 2
c.GPUSpawner.profiles = [
    {"display_name": "CPU only", "slug": "cpu", "gpus": 0, "default": True},
    {"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1},
]
c.GPUSpawner.default_limits = {"max_jobs": 0}
c.GPUSpawner.group_limits = {"trainers": {"max_jobs": 2, "preempt_grace": 5}}
"""

TOAST = ".Toastify__toast"  # JupyterLab's notifications, as react-toastify draws them


@pytest.fixture(scope="module")
def hub(hub_factory) -> Hub:
    hub = hub_factory(CONFIG)
    hub.add_users("bob", groups={"trainers": ["bob"]})
    put(hub, "bob", "before.ipynb", notebook(ADDS_UP))
    put(hub, "bob", "train.ipynb", notebook(SEES_ITS_GPUS, ADDS_UP))
    put(hub, "bob", "broken.ipynb", notebook("raise ValueError('bad data')"))
    put(hub, "bob", "sleeper.ipynb", notebook("import time\ntime.sleep(600)"))  # till stopped
    hub.spawn_ready("bob", profile="cpu")  # his JupyterLab: no GPU, the jobs get theirs
    return hub


def submit(hub: Hub, **body) -> dict:
    response = hub.api("POST", "/users/bob/gpu-jobs", json={"profile": "gpu-1", **body})
    assert response.status_code == 201, response.text
    return response.json()


def wait_state(hub: Hub, job: dict, *states: str, timeout: float = 180) -> dict:
    def now() -> dict:
        return hub.api("GET", f"/users/bob/gpu-jobs/{job['id']}").json()

    return hub.wait_for(
        lambda: (found := now())["state"] in states and found,
        timeout=timeout,
        what=f"job {job['id']} {' or '.join(states)}",
    )


# The page's record of what it fetched keeps 250 entries by default; JupyterLab's first load
# takes about 100, and its polls add more while a loaded machine is slow to reach the read.
WHAT_IT_FETCHED = "performance.setResourceTimingBufferSize(100000)"
READ_THE_JOBS = (
    "return performance.getEntriesByType('resource').some(e => e.name.includes('/gpuspawner/jobs'))"
)


def open_lab(hub: Hub, driver) -> None:
    """bob's JupyterLab, once its first read of his jobs has come back: what had ended by
    then is what the page found."""
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WHAT_IT_FETCHED})
    log_in(driver, hub.url, "bob", PASSWORD)
    driver.get(f"{hub.url}/user/bob/lab")
    try:
        WebDriverWait(driver, 120, poll_frequency=0.5).until(
            lambda d: d.execute_script(READ_THE_JOBS)
        )
    except TimeoutException:
        pytest.fail(f"bob's JupyterLab never read his jobs; it shows {page_state(driver)}")


def page_state(driver) -> dict:
    """Where the page is and what it shows, for a failure's message."""
    return {
        "url": driver.current_url,
        "title": driver.title,
        "visibility": driver.execute_script("return document.visibilityState"),
        "fetched": driver.execute_script("return performance.getEntriesByType('resource').length"),
        "text": driver.find_element(By.TAG_NAME, "body").text[:300],
    }


def toasts(driver) -> list[tuple[str, str]]:
    """Each notification shown now: its text, and its classes (its type among them)."""
    return [
        (t.text, t.get_attribute("class") or "")
        for t in driver.find_elements(By.CSS_SELECTOR, TOAST)
    ]


def notification_centre(driver) -> list:
    """Every notification this page has had, open in the status bar's centre."""
    driver.find_element(By.CSS_SELECTOR, ".jp-Notification-Status").click()
    return WebDriverWait(driver, 30, poll_frequency=0.5).until(
        lambda d: d.find_elements(
            By.CSS_SELECTOR, ".jp-Notification-Center .jp-Notification-List-Item"
        )
    )


def toast_of(driver, words: str, timeout: float = 180):
    """The notification whose text has `words`, once it shows."""
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.5, ignored_exceptions=STALE).until(
            lambda d: next(
                (t for t in d.find_elements(By.CSS_SELECTOR, TOAST) if words in t.text), None
            )
        )
    except TimeoutException:
        pytest.fail(f"no notification with {words!r}; JupyterLab shows {toasts(driver)}")


def test_a_job_that_ends_is_told_of_and_its_notice_opens_the_executed_notebook(hub, browser):
    before = wait_state(hub, submit(hub, notebook="before.ipynb"), "done")
    open_lab(hub, browser)

    job = submit(hub, notebook="train.ipynb")
    toast = toast_of(browser, "train.ipynb")
    assert wait_state(hub, job, "done", timeout=10)["state"] == "done"
    assert "GPU job train.ipynb is done" in toast.text
    assert "Toastify__toast--success" in toast.get_attribute("class")
    # the job that had ended before the page loaded is not news: the notification centre,
    # which keeps every notification of this page (toasts close), has none of it
    told = notification_centre(browser)
    assert [t for t in told if "train.ipynb" in t.text], [t.text for t in told]
    assert not [t for t in told if "before.ipynb" in t.text], [t.text for t in told]
    assert before["state"] == "done"

    # the notice's action, from the centre (opening it put the toasts away)
    train = next(t for t in told if "train.ipynb" in t.text)
    train.find_element(By.XPATH, ".//button[normalize-space()='Open notebook']").click()
    executed = f"{job['outputs']}/train.ipynb"
    try:  # the executed notebook, with its outputs, in a tab of its own (not the input)
        WebDriverWait(browser, 60, poll_frequency=0.5, ignored_exceptions=STALE).until(
            lambda d: (
                any(
                    f"Path: {executed}" in (tab.get_attribute("title") or "")
                    for tab in d.find_elements(By.CSS_SELECTOR, ".lm-TabBar-tab.lm-mod-current")
                )
                and "total 45" in d.find_element(By.CSS_SELECTOR, "#jp-main-dock-panel").text
            )
        )
    except TimeoutException:
        tabs = [
            t.get_attribute("title")
            for t in browser.find_elements(By.CSS_SELECTOR, ".lm-TabBar-tab")
        ]
        pytest.fail(f"{executed} is not open with its outputs; the tabs: {tabs}")


def test_failed_and_cancelled_jobs_are_told_of_with_the_hubs_reason(hub, browser):
    open_lab(hub, browser)
    broken = submit(hub, notebook="broken.ipynb")
    sleeper = submit(hub, notebook="sleeper.ipynb")
    running = wait_state(hub, sleeper, "running")

    # the job's own server has no notices to give (its user's servers give them)
    own = requests.get(
        f"{hub.url}/user/bob/{running['server']}/gpuspawner/jobs",
        headers={"Authorization": f"token {hub.token}"},
        timeout=30,
    )
    assert own.status_code == 404 and "runs a job" in own.json()["message"], own.text
    listed = requests.get(
        f"{hub.url}/user/bob/gpuspawner/jobs",
        headers={"Authorization": f"token {hub.token}"},
        timeout=30,
    )
    assert listed.status_code == 200, listed.text
    assert sleeper["id"] in [j["id"] for j in listed.json()["jobs"]]

    # each notice is looked for as soon as its job has ended: a notice is up for 30 s
    failed = wait_state(hub, broken, "failed")
    toast = toast_of(browser, "broken.ipynb")
    assert "GPU job broken.ipynb failed" in toast.text and "bad data" in toast.text, toast.text
    assert "Toastify__toast--error" in toast.get_attribute("class")
    assert failed["reason"] and "bad data" in failed["reason"]

    assert hub.api("DELETE", f"/users/bob/gpu-jobs/{sleeper['id']}").status_code in (200, 204)
    cancelled = wait_state(hub, sleeper, "cancelled", timeout=60)
    toast = toast_of(browser, "sleeper.ipynb")
    assert "GPU job sleeper.ipynb was cancelled" in toast.text, toast.text
    assert "Toastify__toast--info" in toast.get_attribute("class")
    assert cancelled["state"] == "cancelled"
