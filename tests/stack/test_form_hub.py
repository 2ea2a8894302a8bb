"""The spawn form on the real stack, as a person sees it in headless Chromium: one true
message for a profile over a full group quota, and the profile a server had last time
chosen again when its form is opened anew.

The servers run a tiny HTTP server instead of JupyterLab: the form cares only about what
they hold.
"""

from __future__ import annotations

import pytest
from browser import log_in
from realhub import LIGHT_SERVER, PASSWORD, Hub
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

CONFIG = f"""
c.GPUSpawner.simulate_gpus = 3
c.GPUSpawner.profiles = [
    {{"display_name": "CPU only", "slug": "cpu", "gpus": 0, "spawner_override": {LIGHT_SERVER!r}}},
    {{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True,
      "spawner_override": {LIGHT_SERVER!r}}},
    {{"display_name": "2 GPUs", "slug": "gpu-2", "gpus": 2, "spawner_override": {LIGHT_SERVER!r}}},
]
c.GPUSpawner.group_limits = {{
    "course": {{"max_gpus_group": 1, "max_wait": 600}},
    "exam": {{"max_gpus_group": 1}},
}}
"""
QUOTA = (
    "Members of group {group} already hold 1 of their 1 GPU (max_gpus_group of group {group}); "
    "this profile asks for 1 more."
)


@pytest.fixture(scope="module")
def hub(hub_factory) -> Hub:
    hub = hub_factory(CONFIG)
    hub.add_users(
        "c1", "c2", "e1", "e2", "ann", groups={"course": ["c1", "c2"], "exam": ["e1", "e2"]}
    )
    return hub


def open_form(browser, hub: Hub, user: str, server: str = "") -> None:
    browser.get(f"{hub.url}/hub/logout")
    log_in(browser, hub.url, user, PASSWORD)
    browser.get(f"{hub.url}/hub/spawn/{user}/{server}".rstrip("/"))
    WebDriverWait(browser, 30).until(
        expected_conditions.presence_of_element_located((By.ID, "spawn_form"))
    )


def row(browser, slug: str):
    return browser.find_element(By.CSS_SELECTOR, f"[data-testid=profile-{slug}]")


def test_a_full_quota_reads_as_the_wait_where_one_may_wait(hub: Hub, browser):
    hub.spawn_ready("c1", profile="gpu-1")
    open_form(browser, hub, "c2")
    gpu = row(browser, "gpu-1")
    assert gpu.text.endswith(
        QUOTA.format(group="course") + " If you start it now, you wait in line until a group "
        "member's server stops, at most 10 min (max_wait of group course)."
    )
    assert "Try again" not in gpu.text
    assert gpu.find_element(By.TAG_NAME, "input").is_enabled()


def test_a_full_quota_reads_as_the_refusal_where_one_may_not_wait(hub: Hub, browser):
    hub.spawn_ready("e1", profile="gpu-1")
    open_form(browser, hub, "e2")
    gpu = row(browser, "gpu-1")
    assert gpu.text.endswith(
        QUOTA.format(group="exam")
        + " Try again when a group member's server stops, or pick CPU only."
    )
    assert "wait in line" not in gpu.text
    assert not gpu.find_element(By.TAG_NAME, "input").is_enabled()
    hub.stop_server("c1")
    hub.stop_server("e1")


def start_from_form(browser, hub: Hub, user: str, server: str, slug: str) -> None:
    open_form(browser, hub, user, server)
    row(browser, slug).find_element(By.TAG_NAME, "input").click()
    browser.find_element(By.CSS_SELECTOR, "#spawn_form button[type=submit]").click()
    WebDriverWait(browser, 30).until(lambda d: "/hub/spawn/" not in d.current_url)
    hub.wait_ready(user, server)


def checked(browser) -> list[str]:
    radios = browser.find_elements(By.CSS_SELECTOR, "input[name=profile]")
    return [r.get_attribute("value") for r in radios if r.is_selected()]


def test_the_form_chooses_the_profile_a_server_or_its_user_had_last(hub: Hub, browser):
    start_from_form(browser, hub, "ann", "", "cpu")
    hub.stop_server("ann")
    open_form(browser, hub, "ann")
    assert checked(browser) == ["cpu"]  # this server's, last time
    open_form(browser, hub, "ann", "train")
    assert checked(browser) == ["cpu"]  # a new named server: her last start's
    start_from_form(browser, hub, "ann", "train", "gpu-2")
    hub.stop_server("ann", "train")
    open_form(browser, hub, "ann", "train")
    assert checked(browser) == ["gpu-2"]
    open_form(browser, hub, "ann")
    assert checked(browser) == ["cpu"]  # each server keeps its own
    open_form(browser, hub, "ann", "another")
    assert checked(browser) == ["gpu-2"]  # the latest start's
