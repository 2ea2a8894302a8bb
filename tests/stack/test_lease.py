"""Inside JupyterLab: a user sees her server's GPU, the time left and a warning before the cull.

A real JupyterLab in a real container, reached through the hub's OAuth and the proxy, in
headless Chromium; the hub's lease API answers a server's own token and refuses it any other
server's lease. Simulated GPUs stay idle (an empty load file), so gpu_idle_timeout runs.
"""

import re

import pytest
import requests
from browser import STALE, log_in, text_of
from realhub import PASSWORD, Hub
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

IDLE_TIMEOUT = 120  # gpu_idle_timeout of group researchers
WARNING = 60  # warn_before_cull

CONFIG = """
c.GPUSpawner.simulate_gpus = 4
c.GPUSpawner.simulated_load_file = {load!r}
c.GPUSpawner.monitor_interval = 1
c.GPUSpawner.warn_before_cull = {warning}
c.GPUSpawner.profiles = [
    {{"display_name": "CPU only", "slug": "cpu", "gpus": 0}},
    {{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True}},
]
c.GPUSpawner.group_limits = {{
    "researchers": {{"gpu_idle_timeout": {idle}, "max_age": 3600}},
}}
"""


@pytest.fixture(scope="module")
def hub(hub_factory, load_file) -> Hub:
    hub = hub_factory(CONFIG.format(load=str(load_file), warning=WARNING, idle=IDLE_TIMEOUT))
    hub.add_users("alice", "bob", groups={"researchers": ["alice"]})
    hub.spawn_ready("alice", profile="gpu-1")  # her GPUs fall idle from here on
    hub.spawn_ready("bob", profile="gpu-1")
    return hub


def server_token(hub: Hub, user: str) -> str:
    """The JUPYTERHUB_API_TOKEN the hub gave the user's server."""
    env = hub.container_of(user).attrs["Config"]["Env"]
    return next(e.partition("=")[2] for e in env if e.startswith("JUPYTERHUB_API_TOKEN="))


def lease_status(hub: Hub, token: str, path: str) -> requests.Response:
    return requests.get(
        f"{hub.url}/hub/api/users/{path}/gpu-lease",
        headers={"Authorization": f"token {token}"},
        timeout=30,
    )


def test_a_servers_token_reads_its_own_lease_and_no_one_elses(hub: Hub):
    [uuid] = hub.held_uuids("alice")
    token = server_token(hub, "alice")

    own = lease_status(hub, token, "alice/server")
    assert own.status_code == 200, own.text
    lease = own.json()
    assert [g["uuid"] for g in lease["gpus"]] == [uuid]  # one GPU of four, and only hers
    assert lease["profile"] == {"slug": "gpu-1", "display_name": "1 GPU"}
    assert [limit["key"] for limit in lease["limits"]] == ["max_age", "gpu_idle_timeout"]
    assert lease_status(hub, token, "alice/servers/").json()["gpus"] == lease["gpus"]

    for other in ("bob/server", "bob/servers/", "alice/servers/other", "nobody/server"):
        refused = lease_status(hub, token, other)
        assert refused.status_code == 403, (other, refused.text)
        assert "GPU-" not in refused.text
    assert lease_status(hub, "not-a-token", "alice/server").status_code == 403
    # what the container holds is that one GPU, as Docker was asked
    assert hub.visible_devices("alice") == uuid
    [request] = hub.container_of("alice").attrs["HostConfig"]["DeviceRequests"]
    assert request["DeviceIDs"] == [uuid]


def lease_shown(driver) -> str:
    """The status bar's lease, once read: a read that failed says "unknown" until a retry."""
    summary = text_of(driver, "#gpuspawner-lease")
    return "" if summary == "GPU lease: unknown" else summary


def lease_title(driver) -> str:
    """What the status bar item says on hover: after a failed read, why it failed."""
    found = driver.find_elements(By.ID, "gpuspawner-lease")
    return found[0].get_attribute("title") if found else "no status bar item"


def test_jupyterlab_shows_the_lease_and_warns_before_the_cull(hub: Hub, browser):
    [uuid] = hub.held_uuids("alice")
    log_in(browser, hub.url, "alice", PASSWORD)
    WebDriverWait(browser, 30).until(lambda d: "/hub/login" not in d.current_url)
    browser.get(f"{hub.url}/user/alice/lab")  # through the hub's OAuth, into JupyterLab
    wait = WebDriverWait(browser, 90, poll_frequency=0.5, ignored_exceptions=STALE)
    try:
        summary = wait.until(lease_shown)
    except TimeoutException:
        pytest.fail(f"the lease was never read: {lease_title(browser)}")
    assert re.fullmatch(r"1 GPU · (\d+ s|[12] min) left", summary), summary

    # the GPU extensions of the image are loaded beside ours
    config = browser.execute_script(
        "return JSON.parse(document.getElementById('jupyter-config-data').textContent)"
    )
    loaded = {e["name"] for e in config["federated_extensions"]}
    assert {"gpuspawner-lab", "jupyterlab-nvdashboard", "@jupyter-server/resource-usage"} <= loaded

    browser.find_element(By.ID, "gpuspawner-lease").click()
    details = wait.until(lambda d: text_of(d, ".jp-gpuspawner-details"))
    assert "Profile: 1 GPU" in details
    assert re.search(rf"GPU \d: NVIDIA H100 80GB HBM3 · 80 GiB, {uuid}", details), details
    assert "(max_age of group researchers)" in details and "This server stops at" in details
    assert re.search(
        r"Your 1 GPU has been idle for [^;]+; at 2 min it goes back to the pool and this "
        r"server stops, in [^(]+ \(gpu_idle_timeout of group researchers\)",
        details,
    ), details
    browser.find_element(By.CSS_SELECTOR, ".jp-Dialog .jp-mod-accept").click()

    warning = WebDriverWait(
        browser, IDLE_TIMEOUT + 30, poll_frequency=0.5, ignored_exceptions=STALE
    ).until(
        lambda d: next(  # JupyterLab's own toasts (its news prompt) may be there too
            (
                t.text
                for t in d.find_elements(By.CSS_SELECTOR, ".Toastify__toast")
                if "gpu_idle_timeout" in t.text
            ),
            "",
        )
    )
    assert hub.server_model("alice") is not None, "the warning came only after the cull"
    assert re.fullmatch(
        r"This server stops at \d\d:\d\d UTC \(in \d+ s\): its 1 GPU has been idle for 1 min "
        r"\(gpu_idle_timeout\)\. Use it or save your work\.",
        warning.strip(),
    ), warning
    assert "jp-gpuspawner-warning" in browser.find_element(By.ID, "gpuspawner-lease").get_attribute(
        "class"
    )

    hub.wait_for(lambda: hub.server_model("alice") is None, timeout=WARNING + 30, what="cull")
    browser.get(f"{hub.url}/hub/spawn/alice")
    page = browser.find_element(By.TAG_NAME, "body").text
    assert "Your default server was stopped at" in page
    assert "its 1 GPU was idle for 2 min (gpu_idle_timeout of group researchers)" in page
    assert "Your files in /home/jovyan are kept." in page  # her home outlives the container
    hub.wait_for(lambda: hub.pool()["free"] == 3, what="her GPU back in the pool")  # bob keeps his
