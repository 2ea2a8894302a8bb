"""The waiting line on the real stack: a full pool of 4 simulated GPUs, people who wait in
line with different priorities and recent use, the pending page in headless Chromium, the
admin page, cancelling, max_wait, and a kill -9 of the hub while people wait.

The servers run a tiny HTTP server instead of JupyterLab (as benchmarks/restart_recovery.py
does): the line cares only that they hold GPUs, and six JupyterLabs would crowd two cores.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import sqlite3
import threading
import time

import pytest
from browser import log_in
from realhub import LIGHT_SERVER, PASSWORD, Hub
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from gpuspawner.core.pool import Grant, Holder
from gpuspawner.core.units import bare
from gpuspawner.records.ledger import Ledger

START_TIMEOUT = 10
CONFIG = f"""
c.GPUSpawner.simulate_gpus = 4
c.GPUSpawner.monitor_interval = 3600  # the line moves on events alone, never on the monitor's tick
c.GPUSpawner.profiles = [
    {{"display_name": "CPU only", "slug": "cpu", "gpus": 0, "spawner_override": {LIGHT_SERVER!r}}},
    {{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True,
      "spawner_override": {LIGHT_SERVER!r}}},
]
c.GPUSpawner.group_limits = {{
    "marathon": {{"max_age": 4 * 3600}},
    "vip": {{"priority": 10, "max_wait": 900, "max_gpus_per_user": 1}},
    "researchers": {{"max_wait": 900}},
    "impatient": {{"max_wait": 4}},
    "one-gpu": {{"max_wait": 900, "max_gpus_per_user": 1}},
}}
c.DockerSpawner.start_timeout = {START_TIMEOUT}
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 1}}  # to the pending page after 1 s
"""
HOLDERS = ["h1", "h2", "h3", "h4"]


@pytest.fixture(scope="module")
def hub(hub_factory) -> Hub:
    hub = hub_factory(CONFIG)
    hub.add_users(
        *HOLDERS, "vera", "rhea", "lena", "otto", "ivan", "nina", "admin",
        groups={"marathon": HOLDERS, "vip": ["vera"], "researchers": ["rhea", "lena", "otto"],
                "impatient": ["ivan"], "one-gpu": ["nina"]},
    )  # fmt: skip
    return hub


def line(hub: Hub) -> list[dict]:
    return hub.pool()["waiting"]


def in_line(hub: Hub) -> list[str]:
    return [entry["user"] for entry in line(hub)]


def used_recently(hub: Hub, user: str, gpu_hours: float) -> None:
    """What the ledger holds after `user` held GPUs yesterday (written by the hub's own
    ledger code, into the hub's ledger file, keyed by the hub's user id)."""
    with sqlite3.connect(hub.workdir / "jupyterhub.sqlite") as db:
        [(user_id,)] = db.execute("SELECT id FROM users WHERE name = ?", (user,))
    ledger = Ledger(hub.workdir / "gpuspawner-usage.sqlite")
    start = time.time() - 24 * 3600
    ledger.opened(
        Grant(Holder(10_000 + user_id, user_id, user), (bare("GPU-old"),), start), gpu_hours
    )
    ledger.ended(10_000 + user_id, start + 3600)
    ledger.close()


def pending_message(browser, hub: Hub, user: str, containing: str) -> str:
    """The pending page's progress message, as the person sees it, once it says `containing`."""
    browser.get(f"{hub.url}/hub/logout")
    log_in(browser, hub.url, user, PASSWORD)
    browser.get(f"{hub.url}/hub/spawn-pending/{user}")
    WebDriverWait(browser, 30).until(
        expected_conditions.text_to_be_present_in_element((By.ID, "progress-message"), containing)
    )
    return browser.find_element(By.ID, "progress-message").text


def progress_end(hub: Hub, user: str, server: str = "") -> dict:
    """The last event of a spawn's progress stream (ready or failed), as the page gets it.

    JupyterHub stops a failed start before its failure is settled; in between, the stream
    answers 400 ("not starting"), and is asked again once that stop has ended."""
    path = f"/users/{user}/servers/{server}/progress"
    for _ in range(2):
        with hub.api("GET", path, stream=True) as events:
            if events.status_code == 400:
                hub.wait_for(
                    lambda: (hub.server_model(user, server) or {}).get("pending") != "stop",
                    what=f"the stop after {user}'s failed start",
                )
                continue
            for raw in events.iter_lines():
                if raw.startswith(b"data:"):
                    event = json.loads(raw[5:])
                    if event.get("ready") or event.get("failed"):
                        return event
    raise AssertionError("the progress stream ended without a last event")


def progress_until(hub: Hub, user: str, containing: str, shown: threading.Event) -> list[dict]:
    """A waiting start's progress events, as its open pending page gets them, up to the first
    whose message says `containing`; `shown` is set at the first."""
    events = []
    with hub.api("GET", f"/users/{user}/servers//progress", stream=True) as stream:
        for raw in stream.iter_lines():
            if raw.startswith(b"data:"):
                events.append(json.loads(raw[5:]))
                if "in line" in events[-1].get("message", ""):
                    shown.set()
                if containing in events[-1].get("message", ""):
                    return events
    raise AssertionError(f"{user}'s progress ended before saying {containing!r}: {events}")


def test_waiters_line_up_by_priority_then_recent_use_then_arrival(hub: Hub, browser):
    used_recently(hub, "rhea", 100.0)
    used_recently(hub, "lena", 1.0)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda user: hub.spawn_ready(user, profile="gpu-1"), HOLDERS))
    assert hub.pool()["free"] == 0
    for user in ("rhea", "lena"):  # in this order: rhea arrives first
        assert hub.spawn(user, profile="gpu-1").status_code == 202
        hub.wait_for(lambda user=user: user in in_line(hub), what=f"{user} in line")
    # vera, last to arrive, starts from the form: a full pool greys nothing out for her
    log_in(browser, hub.url, "vera", PASSWORD)
    browser.get(f"{hub.url}/hub/spawn/vera")
    note = browser.find_element(By.CSS_SELECTOR, "[data-testid=profile-gpu-1] .gpu-note").text
    assert "If you start it now, you wait in line, at most 15 min (max_wait of group vip)." in note
    assert browser.find_element(By.CSS_SELECTOR, "[data-testid=waiting-gpu-1]").text == "2 waiting"
    browser.find_element(By.CSS_SELECTOR, "#spawn_form button[type=submit]").click()
    WebDriverWait(browser, 30).until(expected_conditions.url_contains("/spawn-pending/vera"))

    hub.wait_for(lambda: len(line(hub)) == 3, what="three in line")
    assert in_line(hub) == ["vera", "lena", "rhea"]  # priority; then less recent use first
    assert [e["position"] for e in line(hub)] == [1, 2, 3]
    for user, place, group in [("vera", "1st", "vip"), ("lena", "2nd", "researchers"),
                               ("rhea", "3rd", "researchers")]:  # fmt: skip
        message = pending_message(browser, hub, user, "in line")
        assert message.startswith(f"Waiting for 1 GPU — you are {place} in line (group {group}).")
        assert "1 GPU frees up when h" in message and "reaches its max_age at " in message
    assert hub.pool()["free"] == 0 and not hub.held_by("vera")


def test_stopping_one_server_starts_exactly_the_first_in_line(hub: Hub):
    # longer in line than start_timeout: GPUSpawner gave the start its wait on top of it
    hub.wait_for(
        lambda: line(hub)[0]["waited_seconds"] > START_TIMEOUT + 2, timeout=60, what="a long wait"
    )
    [freed] = hub.held_by("h1")
    with concurrent.futures.ThreadPoolExecutor(1) as page:  # rhea's pending page, open
        shown = threading.Event()
        moved = page.submit(progress_until, hub, "rhea", "2nd in line", shown)
        assert shown.wait(30), "rhea's page shows nothing"
        hub.stop_server("h1")
        hub.wait_ready("vera")
        events = moved.result(timeout=30)
    assert hub.held_by("vera") == [freed]
    assert in_line(hub) == ["lena", "rhea"]
    # the bar moves with the line: 3rd, then 2nd (of the 3rd place the page opened on)
    in_line_events = [e for e in events if "in line" in e.get("message", "")]
    bar = [e["progress"] for e in in_line_events]  # (JupyterHub's own first event: 0)
    assert bar[0] == 15 and bar[-1] == 20 and bar == sorted(bar), bar
    assert "3rd in line" in in_line_events[0]["message"]
    # JupyterHub's "slow to start" after slow_spawn_timeout: not for a start in line
    assert re.search(r"User rhea is waiting in line for GPUs \(place \d\), not slow", hub.log())
    assert "User rhea is slow to start" not in hub.log()
    assert hub.server_model("lena")["pending"] == hub.server_model("rhea")["pending"] == "spawn"
    assert not hub.held_by("lena") and not hub.held_by("rhea")
    assert "failed to start in" not in hub.log()


def test_a_cancelled_waiter_leaves_at_once_and_holds_nothing(hub: Hub, browser):
    pending_message(browser, hub, "lena", "1st in line")
    browser.find_element(By.ID, "stop-server-btn").click()  # the pending page's own button
    hub.wait_gone("lena")
    assert in_line(hub) == ["rhea"]
    [freed] = hub.held_by("h2")
    hub.stop_server("h2")
    hub.wait_ready("rhea")  # the next in line, not the one who left
    assert hub.held_by("rhea") == [freed]
    assert not hub.held_by("lena") and hub.server_model("lena") is None
    assert not [c for c in hub.containers(all=True) if c.labels.get("gpuspawner.user") == "lena"]


def test_a_waiter_whose_max_wait_passes_is_told_why(hub: Hub):
    assert hub.spawn("ivan", profile="gpu-1").status_code == 202
    ended = progress_end(hub, "ivan")
    assert ended["failed"]
    assert ended["message"] == (
        "Spawn failed: Your default server waited 4 s in line for 1 GPU, the longest it may "
        "wait (max_wait of group impatient), and no GPU came free for it (it was 1st in line). "
        "Nothing is held for it: start it again to join the line anew, or pick a profile with "
        "fewer GPUs."
    )
    assert hub.server_model("ivan") is None and not hub.held_by("ivan")
    assert in_line(hub) == []
    waits = hub.metrics()
    assert waits[("gpuspawner_wait_duration_seconds_count", (("outcome", "max_wait"),))] == 1
    assert waits[("gpuspawner_wait_duration_seconds_count", (("outcome", "cancelled"),))] == 1
    assert waits[("gpuspawner_wait_duration_seconds_count", (("outcome", "started"),))] >= 3


def test_limits_waiting_cannot_change_refuse_at_once(hub: Hub):
    refused = hub.spawn("vera", "second", profile="gpu-1")
    assert refused.status_code == 403
    assert "max_gpus_per_user of group vip" in refused.json()["message"]
    assert in_line(hub) == [] and hub.server_model("vera", "second") is None


def test_one_user_cannot_take_many_places_in_line(hub: Hub):
    """Each waiting start holds one of the hub's concurrent_spawn_limit slots. nina may hold
    1 GPU, so 1 start of hers may wait; the 9 more she asks for are refused at once."""
    assert hub.pool()["free"] == 0
    assert hub.spawn("nina", profile="gpu-1").status_code == 202
    hub.wait_for(lambda: in_line(hub) == ["nina"], what="nina in line")
    for n in range(1, 10):
        refused = hub.spawn("nina", f"more{n}", profile="gpu-1")
        assert refused.status_code == 403, refused.text
        assert refused.json()["message"] == (
            "You already wait in line for 1 server (nina); you may have at most 1 waiting at "
            "once (max_waiting_per_user, unset: 1 per GPU you could still take), so this start, "
            "which cannot begin now, is refused. Nothing is held for it: cancel one of those "
            "starts, or start this one again once one of them has begun."
        )
        assert hub.server_model("nina", f"more{n}") is None
    assert in_line(hub) == ["nina"] and not hub.held_by("nina")
    assert [c.name for c in hub.containers(all=True) if "more" in c.name] == []
    assert hub.server_model("nina")["pending"] == "spawn"
    # her form no longer offers a wait she could not have: the full pool greys the GPU out
    form = hub.login("nina").get(f"{hub.url}/hub/spawn/nina/more1").text
    assert "If you start it now, you wait in line" not in form
    assert "Needs 1 free GPU(s); 0 free right now." in form
    [freed] = hub.held_by("h3")
    hub.stop_server("h3")
    hub.wait_ready("nina")  # the one place she had still started, on the GPU that freed
    assert hub.held_by("nina") == [freed] and in_line(hub) == []


def test_the_admin_page_lists_the_line_and_removes_an_entry(hub: Hub, browser):
    for user in ("lena", "otto"):
        assert hub.spawn(user, profile="gpu-1").status_code == 202
    hub.wait_for(lambda: len(line(hub)) == 2, what="two in line")
    order = in_line(hub)
    assert order == ["otto", "lena"]  # lena used a GPU-hour yesterday, otto none
    assert hub.metrics()[("gpuspawner_waiting_spawns", (("group", "researchers"),))] == 2
    page = hub.login("h3").get(f"{hub.url}/hub/spawn/h3/next").text
    assert 'data-testid="waiting-gpu-1">2 waiting</span>' in page

    log_in(browser, hub.url, "admin", PASSWORD)
    browser.get(f"{hub.url}/hub/gpus")
    rows = browser.find_elements(By.CSS_SELECTOR, "#waiting-table tbody tr")
    assert [row.get_attribute("data-user") for row in rows] == order
    # lena's GPU-hour of yesterday, decayed by a day of the 7-day half-life: 2**(-1/7) = 0.91
    assert "researchers (0)" in rows[1].text and "0.9 GPU-h" in rows[1].text
    rows[0].find_element(By.CSS_SELECTOR, "button.remove-waiting").click()
    hub.wait_for(lambda: in_line(hub) == ["lena"], what="otto out of the line")
    ended = progress_end(hub, "otto")
    assert ended["message"].startswith(
        "Spawn failed: An admin removed the start of your default server from the waiting line"
    )
    assert hub.server_model("otto") is None and not hub.held_by("otto")


def test_a_hub_restart_ends_each_waiting_start_with_a_notice(hub: Hub):
    """kill -9 while lena waits: JupyterHub forgets her pending start; the restarted hub
    tells her so on her next spawn page, and the running servers keep their GPUs."""
    assert in_line(hub) == ["lena"]
    held = {user: hub.held_by(user) for user in ("h3", "h4", "vera", "rhea")}
    hub.kill()
    hub.start()
    assert in_line(hub) == [] and hub.server_model("lena") is None
    assert {user: hub.held_by(user) for user in held} == held
    page = hub.login("lena").get(f"{hub.url}/hub/spawn/lena").text
    assert "The start of your default server ended when the hub restarted (it was back at " in page
    assert "it was waiting in line for 1 GPU (profile &#39;1 GPU&#39;) since" in page
    assert ", and a restart ends every waiting start." in page
    notices = hub.api("GET", "/users/lena/stop-notices").json()["notices"]
    assert [n["server"] for n in notices] == [""]
    assert "lena was waiting in line for 1 GPU when the hub stopped" in hub.log()


def test_a_graceful_restart_also_ends_each_wait_with_a_notice_and_starts_nobody(hub: Hub):
    """SIGTERM, as systemd stops a hub: JupyterHub stops every server (cleanup_servers), then
    cancels the waiting starts. The GPUs freed meanwhile start nobody, and the line's record
    outlives the cancel, so lena is told as after a kill -9."""
    assert hub.spawn("lena", profile="gpu-1").status_code == 202
    hub.wait_for(lambda: in_line(hub) == ["lena"], what="lena in line")
    hub.stop()
    assert "lena's turn" not in hub.log()
    assert not [c for c in hub.containers(all=True) if c.labels.get("gpuspawner.user") == "lena"]
    hub.start()
    assert hub.pool()["free"] == 4 and in_line(hub) == []
    page = hub.login("lena").get(f"{hub.url}/hub/spawn/lena").text
    assert "The start of your default server ended when the hub restarted" in page
