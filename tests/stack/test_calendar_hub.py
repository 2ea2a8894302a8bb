"""The calendar on the real stack: a drain stops servers on its GPUs with the reason and
keeps every start off them until undrained; a booking serves only its holders in its
window, and holds through a hub kill -9."""

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
import requests
from browser import STALE, log_in
from realhub import LIGHT_SERVERS, PASSWORD, Hub
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

CONFIG = """
c.GPUSpawner.simulate_gpus = 2
c.GPUSpawner.simulated_load_file = {load!r}
c.GPUSpawner.monitor_interval = 0.5
c.GPUSpawner.profiles = [{{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1}}]
c.GPUSpawner.group_limits = {{
    "patient": {{"max_wait": 120, "max_booking": 7200, "max_gpus_per_user": 1}},
}}
"""


@pytest.fixture(scope="module")
def hub(hub_factory, load_file) -> Hub:
    hub = hub_factory(CONFIG.format(load=str(load_file)) + LIGHT_SERVERS)
    hub.add_users(
        "alice", "bob", "carol", "dave", "admin", groups={"ml": ["carol"], "patient": ["dave"]}
    )
    return hub


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def calendar_cli(hub: Hub, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "gpuspawner.admin.cli", *args]
    command += ["--api-url", f"{hub.url}/hub/api", "--token", hub.token]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_a_drain_stops_the_servers_on_its_gpus_files_kept_and_an_undrain_gives_them_back(hub):
    hub.spawn_ready("alice", profile="gpu-1")
    done = calendar_cli(hub, "drain", "--all", "--reason", "driver update")
    assert done.returncode == 0, done.stderr
    assert "drain" in done.stdout and "driver update" in done.stdout

    hub.wait_for(lambda: hub.server_model("alice") is None, 30, "alice stopped by the drain")
    page = hub.login("alice").get(f"{hub.url}/hub/spawn/alice").text
    assert "taken out for maintenance (driver update)" in page
    assert hub.home_of("alice") in [v.name for v in hub.volumes()]  # her files are kept
    refused = hub.spawn("bob", profile="gpu-1")
    assert refused.status_code >= 400 and hub.held_by("bob") == []
    assert "2 GPUs are taken out for maintenance (driver update)" in refused.text

    [drain] = hub.api("GET", "/gpu-calendar").json()["windows"]
    done = calendar_cli(hub, "undrain", str(drain["id"]))
    assert done.returncode == 0, done.stderr
    assert f"drain {drain['id']} (ended): 2 GPUs from" in done.stdout, done.stdout
    hub.spawn_ready("bob", profile="gpu-1")
    hub.stop_server("bob")


def test_a_booking_serves_only_its_holders_and_holds_through_a_hub_kill_9(hub):
    now = datetime.now(UTC)
    body = {"group": "ml", "gpus": 1, "start": iso(now), "end": iso(now + timedelta(hours=2))}
    made = hub.api("POST", "/gpu-calendar/bookings", json=body)
    assert made.status_code == 201, made.text
    [booked] = made.json()["gpus"]
    assert made.json()["asked"] == "1 GPU"  # not "1 GPUs"
    too_many = hub.api("POST", "/gpu-calendar/bookings", json={**body, "gpus": 2})
    assert too_many.status_code == 400 and "Only 1 of the 2 GPUs" in too_many.text

    hub.spawn_ready("bob", profile="gpu-1")
    assert hub.held_by("bob") != [booked]  # placed on the GPU nobody booked
    hub.kill()
    hub.start()
    listed = calendar_cli(hub, "calendar")
    assert listed.returncode == 0 and "group ml" in listed.stdout, listed.stdout
    refused = hub.spawn("alice", profile="gpu-1")  # the one GPU left is booked
    assert refused.status_code >= 400 and hub.held_by("alice") == []
    assert "1 GPU is booked for group ml to" in refused.text, refused.text
    hub.spawn_ready("carol", profile="gpu-1")  # a member starts at once on it
    assert hub.held_by("carol") == [booked]
    for user in ("bob", "carol"):
        hub.stop_server(user)
    assert hub.api("DELETE", f"/gpu-calendar/{made.json()['id']}").status_code == 200


def test_a_booking_ahead_is_told_on_the_form_warned_in_the_lease_and_counted(hub, browser):
    now = datetime.now(UTC)
    window = {"start": iso(now + timedelta(minutes=30)), "end": iso(now + timedelta(hours=2))}
    made = hub.api("POST", "/gpu-calendar/bookings", json={"group": "ml", "gpus": 1, **window})
    assert made.status_code == 201, made.text
    [booked] = made.json()["gpus"]

    log_in(browser, hub.url, "alice", PASSWORD)
    browser.get(f"{hub.url}/hub/spawn/alice")
    said = " ".join(
        e.text for e in browser.find_elements(By.CSS_SELECTOR, "[data-testid=calendar]")
    )
    assert "1 GPU is booked for group ml from" in said and "a server on them then stops" in said
    browser.delete_all_cookies()
    log_in(browser, hub.url, "carol", PASSWORD)
    browser.get(f"{hub.url}/hub/spawn/carol")
    said = browser.find_element(By.CSS_SELECTOR, "[data-testid=calendar]").text
    assert "1 GPU is booked for you from" in said

    hub.spawn_ready("bob", profile="gpu-1")  # steered off the booked GPU
    hub.spawn_ready("alice", profile="gpu-1")  # nothing else is free: it stops at the window
    assert hub.held_by("bob") != [booked] and hub.held_by("alice") == [booked]
    lease = hub.api("GET", "/users/alice/server/gpu-lease").json()
    assert "booked for group ml" in lease["warning"]["says"]  # calendar_warning is an hour
    assert lease["warning"]["key"] == "calendar"
    assert hub.api("GET", "/users/bob/server/gpu-lease").json()["warning"] is None
    for user in ("alice", "bob"):
        hub.stop_server(user)
    assert hub.api("DELETE", f"/gpu-calendar/{made.json()['id']}").status_code == 200


def test_an_admin_drains_a_gpu_from_the_gpus_page_and_ends_the_drain_there(hub, browser):
    log_in(browser, hub.url, "admin", PASSWORD)
    browser.get(f"{hub.url}/hub/gpus")
    assert browser.find_element(By.CSS_SELECTOR, "[data-testid=calendar-empty]")
    uuid = hub.pool()["gpus"][0]["uuid"]
    choice = browser.find_element(By.CSS_SELECTOR, f"#drain-what option[value*='{uuid}']")
    choice.click()
    browser.find_element(By.ID, "drain-reason").send_keys("fan replaced")
    browser.find_element(By.CSS_SELECTOR, "#drain-form button[type=submit]").click()
    row = WebDriverWait(browser, 20, ignored_exceptions=STALE).until(
        lambda d: d.find_element(By.CSS_SELECTOR, "#calendar-table tr[data-kind=drain]")
    )
    assert "fan replaced" in row.text and "until ended" in row.text
    assert hub.metrics()[("gpuspawner_drained_gpus", ())] == 1
    hub.spawn_ready("bob", profile="gpu-1")
    assert hub.held_by("bob") != [uuid]  # placed on the GPU not drained

    row.find_element(By.CSS_SELECTOR, "button.end-window").click()
    WebDriverWait(browser, 20, ignored_exceptions=STALE).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "[data-testid=calendar-empty]")
    )
    assert hub.metrics()[("gpuspawner_drained_gpus", ())] == 0
    hub.spawn_ready("alice", profile="gpu-1")  # the GPU is back in the pool
    assert hub.held_by("alice") == [uuid]
    for user in ("alice", "bob"):
        hub.stop_server(user)


def test_a_start_waiting_through_a_drain_is_told_why_and_starts_once_it_ends(hub):
    done = calendar_cli(hub, "drain", "--all", "--reason", "driver update")
    assert done.returncode == 0, done.stderr
    assert hub.spawn("dave", profile="gpu-1").status_code == 202
    said = hub.message_in_line("dave")
    assert "2 GPUs are taken out for maintenance (driver update)" in said, said
    [drain] = hub.api("GET", "/gpu-calendar").json()["windows"]
    assert calendar_cli(hub, "undrain", str(drain["id"])).returncode == 0
    hub.wait_ready("dave")  # the undrain runs the line
    hub.stop_server("dave")


def test_a_booking_made_before_a_hub_kill_9_opens_after_it_and_stops_whom_it_must(hub):
    hub.spawn_ready("alice", profile="gpu-1")
    now = datetime.now(UTC)
    window = {"start": iso(now + timedelta(seconds=20)), "end": iso(now + timedelta(hours=1))}
    made = hub.api("POST", "/gpu-calendar/bookings", json={"group": "ml", "gpus": 2, **window})
    assert made.status_code == 201, made.text
    hub.kill()
    hub.start()

    hub.wait_for(lambda: hub.server_model("alice") is None, 90, "alice stopped at the window")
    page = hub.login("alice").get(f"{hub.url}/hub/spawn/alice").text
    assert "its GPUs are booked for group ml from" in page
    assert hub.home_of("alice") in [v.name for v in hub.volumes()]  # her files are kept
    hub.spawn_ready("carol", profile="gpu-1")  # a member starts at once
    hub.stop_server("carol")
    assert hub.api("DELETE", f"/gpu-calendar/{made.json()['id']}").status_code == 200


@pytest.mark.parametrize(
    ("path", "body", "says"),
    [
        ("bookings", {"group": "nosuch"}, "No such group: 'nosuch'"),
        ("bookings", {"user": "nobody"}, "No such user: 'nobody'"),
        ("bookings", {"user": "bob", "gpus": 0}, "'gpus' must be a whole number"),
        ("bookings", {"user": "bob", "start": "tomorrow"}, "'start' is not an ISO 8601 time"),
        ("bookings", {"user": "bob", "start": "2020-01-01T09:00Z"}, "starts in the past"),
        ("bookings", {"user": "bob", "colour": "red"}, "Unknown keys: 'colour'"),
        ("bookings", {"user": "bob", "profile": "gpu-9"}, "No whole-GPU profile 'gpu-9'"),
        ("drains", {"reason": "x"}, "Give one of 'gpus', 'model', 'node' or 'all'"),
        ("drains", {"all": True}, "A drain needs a reason"),
        ("drains", {"gpus": ["GPU-nope"], "reason": "x"}, "No such GPU: 'GPU-nope'"),
        ("bookings", {"user": "bob", "gpus": 10**30}, "from 1 to 2"),
        # what a request sent comes back cut short, however long it was
        ("bookings", {"user": "bob", "start": "9" * 2**20}, "is not an ISO 8601 time: '999"),
        ("bookings", {"user": "bob", **{f"k{n}": 1 for n in range(3000)}}, "and 2,995 more"),
        ("drains", {"gpus": [f"GPU-{n}" for n in range(5000)], "reason": "x"}, "and 4,995 more"),
    ],
)
def test_a_bad_booking_or_drain_gets_a_specific_400_and_changes_nothing(hub, path, body, says):
    if path == "bookings":
        now = datetime.now(UTC)
        body = {"gpus": 1, "start": iso(now), "end": iso(now + timedelta(hours=1)), **body}
    answer = hub.api("POST", f"/gpu-calendar/{path}", json=body)
    assert answer.status_code == 400 and says in answer.json()["message"], answer.text[:500]
    assert len(answer.text) < 400, answer.text[:500]
    assert hub.api("GET", "/gpu-calendar").json()["windows"] == []


def token_of(hub: Hub, user: str) -> dict[str, str]:
    """A token the user makes for themselves, logged in (as on the hub's token page)."""
    session = hub.login(user)
    made = session.post(
        f"{hub.url}/hub/api/users/{user}/tokens",
        json={"note": "calendar test"},
        headers={"X-XSRFToken": session.cookies["_xsrf"]},
        timeout=30,
    )
    assert made.status_code == 201, made.text
    return {"Authorization": f"token {made.json()['token']}"}


def test_a_user_books_for_themselves_only_as_far_as_their_group_allows(hub):
    dave, bob = token_of(hub, "dave"), token_of(hub, "bob")
    now = datetime.now(UTC)
    hour = {"gpus": 1, "start": iso(now), "end": iso(now + timedelta(hours=1))}

    def book(headers, **body):
        return hub.api("POST", "/gpu-calendar/bookings", json=body, headers=headers)

    assert "max_gpus_per_user" in book(dave, **{**hour, "gpus": 2}).json()["message"]
    long = book(dave, **{**hour, "end": iso(now + timedelta(hours=3))})
    assert long.status_code == 400 and "max_booking" in long.json()["message"]
    assert book(dave, **hour, group="patient").status_code == 403
    assert book(bob, **hour).status_code == 403  # bob's groups set no max_booking
    assert (
        hub.api(
            "POST", "/gpu-calendar/drains", json={"all": True, "reason": "x"}, headers=dave
        ).status_code
        == 403
    )
    mine = book(dave, **hour)
    assert mine.status_code == 201 and mine.json()["user"] == "dave", mine.text
    assert mine.json()["let_finish"]  # a member's booking stops nobody's server
    again = book(dave, **hour)  # one more overlapping would hold 2 GPUs at once
    assert again.status_code == 400 and "your bookings in that window hold 1" in again.text
    path = f"/gpu-calendar/{mine.json()['id']}"
    not_bobs, none = (hub.api("DELETE", p, headers=bob) for p in (path, "/gpu-calendar/999999"))
    assert not_bobs.status_code == none.status_code == 404  # bob cannot tell it exists
    said = not_bobs.json()["message"].replace(str(mine.json()["id"]), "999999")
    assert said == none.json()["message"] == "No booking of yours 999999 open or ahead"
    assert hub.api("DELETE", path, headers=dave).status_code == 200
    assert hub.api("GET", "/gpu-calendar").json()["windows"] == []


def test_a_drain_at_a_time_warns_the_servers_on_its_gpus_then_stops_them(hub):
    hub.spawn_ready("alice", profile="gpu-1")
    [gpu] = hub.held_by("alice")
    at = iso(datetime.now(UTC) + timedelta(seconds=8))
    done = calendar_cli(hub, "drain", "--gpu", gpu, "--start", at, "--reason", "new fan")
    assert done.returncode == 0, done.stderr
    warning = hub.api("GET", "/users/alice/server/gpu-lease").json()["warning"]
    assert "taken out for maintenance (new fan)" in warning["says"], warning
    assert hub.server_model("alice")["ready"]  # nothing stops before its time

    hub.wait_for(lambda: hub.server_model("alice") is None, 60, "alice stopped at the drain")
    hub.spawn_ready("bob", profile="gpu-1")
    assert hub.held_by("bob") != [gpu]
    [drain] = hub.api("GET", "/gpu-calendar").json()["windows"]
    done = calendar_cli(hub, "undrain", str(drain["id"]))
    assert done.returncode == 0, done.stderr
    assert f"drain {drain['id']} (ended): 1 GPU from" in done.stdout, done.stdout
    hub.stop_server("bob")


def test_a_members_own_bookings_together_stay_within_max_booking(hub):
    """The attack run booked twenty back-to-back windows of the longest allowed each."""
    dave = token_of(hub, "dave")  # patient: max_booking 2 h, max_gpus_per_user 1
    now = datetime.now(UTC) + timedelta(minutes=5)

    def book(headers, start, end, **body):
        window = {"gpus": 1, "start": iso(now + start), "end": iso(now + end), **body}
        return hub.api("POST", "/gpu-calendar/bookings", json=window, headers=headers)

    hour = timedelta(hours=1)
    made = [book(dave, 0 * hour, 1 * hour), book(dave, 1 * hour, 2 * hour)]
    assert [m.status_code for m in made] == [201, 201], [m.text for m in made]
    third = book(dave, 2 * hour, 3 * hour)
    assert third.status_code == 400, third.text
    assert "already cover 2 h 0 min" in third.json()["message"]
    assert "allows 2 h 0 min booked at once (max_booking)" in third.json()["message"]
    assert len(hub.api("GET", "/gpu-calendar").json()["windows"]) == 2  # nothing booked
    admins = book({}, 3 * hour, 6 * hour, user="dave")  # the admin token's: not bound
    assert admins.status_code == 201, admins.text
    for window in [*made, admins]:
        assert hub.api("DELETE", f"/gpu-calendar/{window.json()['id']}").status_code == 200


def test_a_stranger_learns_nothing_of_the_calendar_and_long_ids_are_not_found(hub):
    now = datetime.now(UTC) + timedelta(hours=1)
    body = {"user": "bob", "gpus": 1, "start": iso(now), "end": iso(now + timedelta(hours=1))}
    made = hub.api("POST", "/gpu-calendar/bookings", json=body)
    assert made.status_code == 201, made.text
    url = f"{hub.url}/hub/api/gpu-calendar"
    answers = [
        requests.delete(f"{url}/{window}", timeout=30) for window in (made.json()["id"], 999999)
    ]
    assert [a.status_code for a in answers] == [403, 403]  # before any lookup
    assert answers[0].json() == answers[1].json()
    assert requests.post(f"{url}/bookings", json={"gpus": "x"}, timeout=30).status_code == 403
    for digits in ("9" * 20, "1" + "0" * 30):  # past SQLite's 64-bit INTEGER
        assert hub.api("DELETE", f"/gpu-calendar/{digits}").status_code == 404
    assert hub.api("DELETE", f"/gpu-calendar/{made.json()['id']}").status_code == 200


def test_every_view_shows_drained_gpus_drained_and_not_free(hub):
    """The attack run: 7 of 8 GPUs drained, and the API, the form and the page said 8 free."""
    first, second = (gpu["uuid"] for gpu in hub.pool()["gpus"])
    done = calendar_cli(hub, "drain", "--gpu", first, "--reason", "new fan")
    assert done.returncode == 0, done.stderr
    pool = hub.pool()
    assert pool["free"] == 1 and pool["by_state"]["drained"] == 1
    [row] = [gpu for gpu in pool["gpus"] if gpu["uuid"] == first]
    assert (row["state"], row["drained"]) == ("drained", "new fan")
    metrics = hub.metrics()
    assert metrics[("gpuspawner_gpus", (("state", "free"),))] == 1
    assert metrics[("gpuspawner_gpus", (("state", "drained"),))] == 1
    alice = hub.login("alice")
    assert "1 of 2</strong> GPUs free" in alice.get(f"{hub.url}/hub/spawn/alice").text

    done = calendar_cli(hub, "drain", "--gpu", second, "--reason", "new fan")
    assert done.returncode == 0, done.stderr
    assert hub.pool()["free"] == 0
    page = alice.get(f"{hub.url}/hub/spawn/alice").text
    assert "0 of 2</strong> GPUs free" in page
    assert "no other GPU is left for new starts while it lasts" in page
    assert "starts go to the others" not in page
    assert "Needs 1 free GPU(s); 0 free right now." in page  # greyed out, as placement has it
    for drain in hub.api("GET", "/gpu-calendar").json()["windows"]:
        assert calendar_cli(hub, "undrain", str(drain["id"])).returncode == 0
    assert hub.pool()["free"] == 2
