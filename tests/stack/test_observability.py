"""Seeing the pool: /hub/metrics scraped from a running hub, and the admin GPU page in Chromium."""

import json

import pytest
import requests
from browser import STALE, log_in, screenshot_for_docs
from realhub import LIGHT_SERVERS, PASSWORD, Hub
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

CONFIG = """
c.GPUSpawner.simulate_gpus = 4
c.GPUSpawner.simulated_load_file = {load!r}
c.GPUSpawner.monitor_interval = 0.5
c.GPUSpawner.profiles = [
    {{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True}},
    {{"display_name": "2 GPUs", "slug": "gpu-2", "gpus": 2}},
    {{"display_name": "4 GPUs", "slug": "gpu-4", "gpus": 4}},
]
c.GPUSpawner.group_limits = {{"students": {{"max_gpus_group": 3}}}}
# a dashboard's token: it may read the GPU pool, and change nothing
c.JupyterHub.services.append({{"name": "dashboard", "api_token": {dashboard!r}}})
c.JupyterHub.load_roles.append(
    {{"name": "dashboard", "scopes": ["custom:gpus:read"], "services": ["dashboard"]}}
)
"""
DASHBOARD_TOKEN = "dashboard-token-0123456789abcdef"


@pytest.fixture(scope="module")
def hub(hub_factory, tmp_path_factory) -> Hub:
    load = tmp_path_factory.mktemp("load") / "load.json"
    load.write_text(json.dumps({"0": {"temperature_celsius": 83.5, "utilization_percent": 64}}))
    hub = hub_factory(CONFIG.format(load=str(load), dashboard=DASHBOARD_TOKEN) + LIGHT_SERVERS)
    hub.add_users("ann", "bob", "admin", groups={"students": ["ann"]})
    hub.spawn_ready("ann", profile="gpu-2")
    hub.spawn_ready("bob", "train", profile="gpu-1")
    return hub


def value(metrics, name: str, **labels) -> float:
    return metrics[(name, tuple(sorted(labels.items())))]


def test_metrics_match_the_pool(hub: Hub):
    assert hub.spawn("admin", "big", profile="gpu-4").status_code == 409  # one refusal
    pool = hub.pool()
    hub.wait_for(lambda: hub.pool()["gpus"][0]["telemetry"], what="a telemetry sample")
    metrics = hub.metrics()
    assert value(metrics, "gpuspawner_gpus", state="free") == pool["free"] == 1
    assert value(metrics, "gpuspawner_gpus", state="allocated") == 3
    assert value(metrics, "gpuspawner_gpus", state="unhealthy") == 0
    assert value(metrics, "gpuspawner_gpus_held", group="students") == 2
    assert value(metrics, "gpuspawner_gpus_held", group="(none)") == 1
    for gpu in pool["gpus"]:
        labels = {"uuid": gpu["uuid"], "index": str(gpu["index"]), "model": gpu["model"]}
        assert value(metrics, "gpuspawner_gpu_allocated", **labels) == (gpu["holder"] is not None)
        assert value(metrics, "gpuspawner_gpu_memory_total_bytes", **labels) == 80 * 2**30
    first = {"uuid": pool["gpus"][0]["uuid"], "index": "0", "model": pool["gpus"][0]["model"]}
    assert value(metrics, "gpuspawner_gpu_temperature_celsius", **first) == 83.5
    assert value(metrics, "gpuspawner_gpu_utilization_ratio", **first) == 0.64
    assert value(metrics, "gpuspawner_spawns_refused_total", reason="capacity") == 1
    assert value(metrics, "gpuspawner_allocation_duration_seconds_count") >= 3


def test_non_admins_are_refused_the_page_and_the_json(hub: Hub):
    session = hub.login("bob")
    assert session.get(f"{hub.url}/hub/gpus").status_code == 403
    assert session.get(f"{hub.url}/hub/api/gpus").status_code == 403
    assert requests.get(f"{hub.url}/hub/api/gpus", timeout=10).status_code == 403
    home = session.get(f"{hub.url}/hub/home").text
    assert 'href="/hub/gpus"' not in home


def test_a_read_only_token_reads_the_json_and_changes_nothing(hub: Hub):
    dashboard = {"Authorization": f"token {DASHBOARD_TOKEN}"}
    found = requests.get(f"{hub.url}/hub/api/gpus", headers=dashboard, timeout=10)
    assert found.status_code == 200 and len(found.json()["gpus"]) == 4
    removal = requests.delete(f"{hub.url}/hub/api/gpus/waiting/1", headers=dashboard, timeout=10)
    assert removal.status_code == 403


def test_an_admin_sees_the_holders_and_stops_one_from_the_page(hub: Hub, browser):
    log_in(browser, hub.url, "admin", PASSWORD)
    browser.find_element(By.LINK_TEXT, "GPUs").click()  # linked from the hub's navigation
    WebDriverWait(browser, 20).until(expected_conditions.title_contains("GPUs"))
    table = browser.find_element(By.ID, "gpu-table").text
    assert "ann" in table and "bob / train" in table
    assert "1 of 4" in browser.find_element(By.CSS_SELECTOR, "[data-testid=summary]").text
    screenshot_for_docs(browser, "gpus-page")  # the README's picture of the admin page

    [bob_gpu] = [g["uuid"] for g in hub.pool()["gpus"] if (g["holder"] or {}).get("user") == "bob"]
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-uuid="{bob_gpu}"]')
    row.find_element(By.CSS_SELECTOR, "button.stop-server").click()
    dialog = WebDriverWait(browser, 20).until(
        expected_conditions.visibility_of_element_located((By.ID, "stop-dialog"))
    )
    assert "Stop bob's server train?" in dialog.text
    assert hub.server_model("bob", "train")["ready"]  # nothing stops before the confirmation
    browser.find_element(By.ID, "stop-reason").send_keys("the GPUs are booked for the exam")
    browser.find_element(By.ID, "stop-confirm").click()
    # the page redraws its table as the stop goes through: a row read mid-redraw is stale
    WebDriverWait(browser, 60, ignored_exceptions=STALE).until(
        lambda driver: (
            driver.find_element(By.CSS_SELECTOR, f'tr[data-uuid="{bob_gpu}"]').get_attribute(
                "data-state"
            )
            == "free"
        )
    )
    assert "2 of 4" in browser.find_element(By.CSS_SELECTOR, "[data-testid=summary]").text
    assert hub.server_model("bob", "train") is None
    assert value(hub.metrics(), "gpuspawner_gpus", state="free") == 2

    browser.delete_all_cookies()
    log_in(browser, hub.url, "bob", PASSWORD)
    browser.get(f"{hub.url}/hub/spawn/bob/train")
    notice = browser.find_element(By.CSS_SELECTOR, "[data-testid=notice]").text
    assert notice.startswith("Your server 'train' was stopped at ")
    assert "an admin stopped it, saying “the GPUs are booked for the exam”" in notice
