"""Fair use over time on the real stack: the usage ledger through hub crashes, GPU-hour
budgets at start and mid-run, and the reports admins read (CLI, admin page, Prometheus).

Budgets here are GPU-seconds (0.01 GPU-hours is 36 GPU-seconds), so that a test runs one
out in seconds; the simulated GPUs are made busy through their load file.
"""

import csv
import io
import json
import sqlite3
import time

import pytest
from admintools import gpuspawner
from realhub import LIGHT_SERVERS, Hub

CONFIG = """
c.GPUSpawner.simulate_gpus = 4
c.GPUSpawner.simulated_load_file = {load!r}
c.GPUSpawner.monitor_interval = 0.5
c.JupyterHub.cleanup_servers = False
c.GPUSpawner.profiles = [
    {{"display_name": "CPU only", "slug": "cpu", "gpus": 0}},
    {{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True}},
    {{"display_name": "2 GPUs", "slug": "gpu-2", "gpus": 2}},
]
c.GPUSpawner.group_limits = {{
    # students may wait in line: a budget refusal must not wait all the same
    "students": {{"gpu_hours_per_week": 0.01, "max_gpus_group": 4, "max_wait": 600}},
    "course": {{"gpu_hours_per_week_group": 0.01}},
    "strict": {{"gpu_hours_per_week": 0.01, "stop_over_budget": True}},
}}
"""
HUB_AWAY = 3.0  # seconds between a kill -9 and the restart, all busy on the GPU; not counted
LEDGER = "gpuspawner-usage.sqlite"  # c.GPUSpawner.usage_ledger_file's default, in the hub's folder


@pytest.fixture(scope="module")
def hub(hub_factory, load_file) -> Hub:
    hub = hub_factory(CONFIG.format(load=str(load_file)) + LIGHT_SERVERS)
    hub.add_users(
        "trainer",
        "dropped",
        "s1",
        "c1",
        "c2",
        "hasty",
        "admin",
        groups={"students": ["s1"], "course": ["c1", "c2"], "strict": ["hasty"]},
    )
    return hub


def ledger_rows(hub: Hub, user: str | None = None) -> list[dict]:
    """The ledger's rows as the hub wrote them (read-only, beside the running hub)."""
    uri = f"{(hub.workdir / LEDGER).as_uri()}?mode=ro"
    with sqlite3.connect(uri, uri=True) as db:
        db.row_factory = sqlite3.Row
        rows = [dict(row) for row in db.execute("SELECT * FROM grants ORDER BY start")]
    return [row for row in rows if user is None or row["user"] == user]


def gpu_seconds(hub: Hub, user: str) -> float:
    """GPU-seconds `user` held so far, as budgets count them (a running grant up to now)."""
    now = time.time()
    return sum(r["gpus"] * ((r["end"] or now) - r["start"]) for r in ledger_rows(hub, user))


def make_busy(load_file, uuids) -> None:
    load_file.write_text(json.dumps({u: {"utilization_percent": 90} for u in uuids}))


def test_a_hub_kill_9_in_the_middle_of_a_grant_loses_no_usage(hub: Hub, load_file):
    started = time.time()
    hub.spawn_ready("trainer", profile="gpu-1")
    make_busy(load_file, hub.held_uuids("trainer"))
    hub.wait_for(
        lambda: ledger_rows(hub, "trainer")[0]["busy_seconds"] >= 3, what="busy time recorded"
    )
    [before] = ledger_rows(hub, "trainer")
    killed = time.time()
    hub.kill()
    time.sleep(HUB_AWAY)  # the scenario itself: the GPU stays busy while no hub is there
    restarted = time.time()
    hub.start()
    back = time.time()
    assert hub.server_model("trainer")["ready"]
    hub.wait_for(
        lambda: ledger_rows(hub, "trainer")[0]["busy_seconds"] >= before["busy_seconds"] + 3,
        what="busy time recorded again after the restart",
    )
    load_file.write_text("{}")
    hub.stop_server("trainer")
    stopped = time.time()
    hub.wait_for(lambda: ledger_rows(hub, "trainer")[0]["end"], what="the grant's end")

    [after] = ledger_rows(hub, "trainer")  # one row: the same grant went on
    assert after["start"] == before["start"] and started <= after["start"] <= killed
    assert killed < back <= after["end"] <= stopped + 2  # held right through the restart
    held = after["end"] - after["start"]
    assert held >= stopped - killed
    # busy time from before the crash kept; the time the hub was away is not counted busy:
    # what was added is at most the old hub's ticks after `before` was read, up to the kill,
    # and the new hub's from its recovery (after `restarted`; its start takes seconds on a
    # busy machine, so `back` would be too late a bound) to the grant's end
    gained = after["busy_seconds"] - before["busy_seconds"]
    counted_at_most = (killed - before["last_seen"]) + (after["end"] - restarted)
    assert 3 <= gained <= counted_at_most + 0.5


def test_a_grant_that_ended_while_the_hub_was_down_ends_when_docker_says(hub: Hub):
    """The container is removed as it exits (DockerSpawner's auto_remove): Docker's event
    log is its only record, and the ledger's recovery reads it."""
    hub.spawn_ready("dropped", profile="gpu-1")
    container = hub.container_of("dropped")
    hub.kill()
    [seen] = ledger_rows(hub, "dropped")  # the hub's last look
    before_stop = time.time()
    container.kill()
    after_stop = time.time()
    hub.start()
    hub.wait_for(lambda: hub.server_model("dropped") is None, what="dropped's server gone")
    [row] = ledger_rows(hub, "dropped")
    assert seen["last_seen"] < before_stop <= row["end"] <= after_stop  # not the hub's last look
    assert "dropped's grant of 1 GPU(s) ended while the hub was away; recorded as ending at" in (
        hub.log()
    )
    assert hub.pool()["free"] == 4


def test_a_student_over_budget_is_refused_with_the_message_and_can_still_start_cpu(hub: Hub):
    hub.spawn_ready("s1", "train", profile="gpu-2")
    hub.wait_for(lambda: gpu_seconds(hub, "s1") >= 36, timeout=60, what="0.01 GPU-hours used")

    while_running = hub.spawn("s1", "more", profile="gpu-1")
    assert while_running.status_code == 403, while_running.text
    message = while_running.json()["message"]
    assert "of your 0.01 GPU-hours in the last 7 days (gpu_hours_per_week of group students)" in (
        message
    )
    assert "While your GPU servers run, it stays used up; once they stop" in message
    assert hub.server_model("s1", "train")["ready"]  # never stopped for budget unasked
    hub.stop_server("s1", "train")

    refused = hub.spawn("s1", profile="gpu-1")
    assert refused.status_code == 403, refused.text  # at once, not after waiting in line
    assert hub.pool()["waiting"] == []
    message = refused.json()["message"]
    assert message.startswith("You used 0.01 of your 0.01 GPU-hours in the last 7 days")
    assert "GPU profiles can start again from" in message and "UTC" in message
    assert message.endswith("CPU-only profiles stay open.")
    assert hub.server_model("s1") is None and hub.pool()["free"] == 4  # nothing allocated
    assert hub.metrics()[("gpuspawner_spawns_refused_total", (("reason", "budget"),))] == 2

    page = hub.login("s1").get(f"{hub.url}/hub/spawn/s1/next").text
    assert "You used 0.01 of your 0.01 GPU-hours in the last 7 days" in page
    assert page.count("GPU profiles can start again from") == 2  # gpu-1 and gpu-2 greyed out
    hub.spawn_ready("s1", profile="cpu")
    assert hub.held_uuids("s1") == []
    hub.stop_server("s1")


def test_a_group_budget_counts_every_member(hub: Hub):
    hub.spawn_ready("c1", profile="gpu-2")
    hub.wait_for(lambda: gpu_seconds(hub, "c1") >= 36, timeout=60, what="the group's budget used")
    hub.stop_server("c1")
    refused = hub.spawn("c2", profile="gpu-1")  # c2 has used nothing; the group has
    assert refused.status_code == 403, refused.text
    assert refused.json()["message"].startswith(
        "Members of group course used 0.01 of their 0.01 GPU-hours in the last 7 days "
        "(gpu_hours_per_week_group of group course)."
    )
    hub.spawn_ready("c2", profile="cpu")
    hub.stop_server("c2")


def test_stop_over_budget_stops_a_running_server_with_a_notice(hub: Hub):
    hub.spawn_ready("hasty", profile="gpu-2")
    hub.wait_for(lambda: hub.server_model("hasty") is None, timeout=60, what="stop over budget")
    assert gpu_seconds(hub, "hasty") >= 36
    hub.wait_for(lambda: hub.pool()["free"] == 4, what="its GPUs back")
    page = hub.login("hasty").get(f"{hub.url}/hub/spawn/hasty").text
    assert "Your default server was stopped at" in page
    assert "you used 0.01 of your 0.01 GPU-hours in the last 7 days" in page
    assert "and GPU servers over budget stop (stop_over_budget)." in page
    assert "stopping hasty: you used 0.01 of your 0.01 GPU-hours" in hub.log()


def test_usage_csv_matches_the_ledger(hub: Hub):
    """With every grant ended, the report's figures are the ledger's own."""
    rows = ledger_rows(hub)
    assert rows and all(r["end"] for r in rows)
    expected: dict[str, list[float]] = {}
    for r in rows:
        held, busy = expected.setdefault(r["user"], [0.0, 0.0]), r["gpus"] / 3600
        held[0] += (r["end"] - r["start"]) * busy
        held[1] += r["busy_seconds"] * busy
    done = gpuspawner("usage", "--format", "csv", cwd=hub.workdir)  # the hub's own folder
    assert done.returncode == 0, done.stderr
    report = {row["user"]: row for row in csv.DictReader(io.StringIO(done.stdout))}
    assert set(report) == set(expected) == {"trainer", "dropped", "s1", "c1", "hasty"}
    for user, (held, busy) in expected.items():
        assert float(report[user]["held_gpu_hours"]) == pytest.approx(held, abs=1e-6)
        assert float(report[user]["busy_gpu_hours"]) == pytest.approx(busy, abs=1e-6)
        assert float(report[user]["busy_ratio"]) == pytest.approx(busy / held, abs=1e-4)


def test_the_admin_page_and_prometheus_show_the_same_use(hub: Hub, load_file):
    cli = json.loads(gpuspawner("usage", "--format", "json", cwd=hub.workdir).stdout)["rows"]
    usage = hub.pool()["usage"]
    assert usage["by_user"] == cli
    by_group = {row["group"]: row for row in usage["by_group"]}
    assert set(by_group) == {"students", "(none)"}  # the quota group charged
    page = hub.login("admin").get(f"{hub.url}/hub/gpus").text
    assert "Use in the last 7 days" in page and 'data-name="trainer"' in page

    # Counters count from this hub process's start (the last restart), as Prometheus
    # counters do: s1's grants since then, and a busy one made here.
    held = hub.metrics()[("gpuspawner_gpu_seconds_held_total", (("group", "students"),))]
    assert 30 <= held <= by_group["students"]["held_gpu_hours"] * 3600 + 1
    hub.spawn_ready("trainer", profile="gpu-1")
    make_busy(load_file, hub.held_uuids("trainer"))
    busy = ("gpuspawner_gpu_seconds_busy_total", (("group", "(none)"),))
    hub.wait_for(lambda: hub.metrics().get(busy, 0) > 0, what="busy GPU-seconds counted")
    load_file.write_text("{}")
    hub.stop_server("trainer")
    metrics = hub.metrics()
    assert metrics[busy] <= metrics[("gpuspawner_gpu_seconds_held_total", (("group", "(none)"),))]
    assert not any("user" in dict(labels) for name, labels in metrics if "gpu_seconds" in name)
