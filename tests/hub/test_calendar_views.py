"""Every view of the pool agrees with placement about drains: a drained GPU is shown
drained, with its drain's reason, and is not counted free (the attack run saw seven of eight
GPUs drained and `free: 8` in the API, "8 of 8 GPUs free" on the form, `state: free` rows)."""

import pytest
from brokers import a_broker
from test_machines import admin_page

from gpuspawner.core.calendar import NONE_LEFT
from gpuspawner.core.limits import LimitsTable
from gpuspawner.core.pool import DeviceState, Holder
from gpuspawner.core.profiles import default_profiles
from gpuspawner.hub.spawn import form
from gpuspawner.hub.web.report import pool_report
from gpuspawner.records.calendar import CalendarRecord

GPUS = 8
HOUR = 3600.0
PROFILES = default_profiles(GPUS)


@pytest.fixture
def broker(tmp_path):
    return a_broker(
        gpus=GPUS, clock=lambda: 1000.0, calendar=CalendarRecord(tmp_path / "usage.sqlite")
    )


def drain(broker, count: int, start: float = 1000.0, reason: str = "driver update"):
    gpus = [g.uuid for g in broker.site.gpus[:count]]
    return broker.calendar.drain(gpus, start, reason, "admin", f"{count} GPUs")


def test_the_api_and_the_gpus_page_show_drained_gpus_drained_with_the_reason(broker):
    drain(broker, 7)
    held = broker.take_now(Holder(1, 1, "ann"), 1)  # the one GPU not drained
    report = pool_report(broker)
    assert report["free"] == 0
    assert report["by_state"]["drained"] == 7 and report["by_state"]["free"] == 0
    assert report["by_kind"]["gpu"] == {"total": GPUS, "free": 0}
    rows = {row["uuid"]: row for row in report["gpus"]}
    assert rows[held.uuids[0]]["state"] == "allocated" and rows[held.uuids[0]]["drained"] is None
    drained = [row for row in rows.values() if row["state"] == "drained"]
    assert len(drained) == 7 and {row["drained"] for row in drained} == {"driver update"}
    page = admin_page({**report, "calendar": [], "calendar_choices": {}})
    assert "<strong>0 of 8</strong> free · 1 allocated · 7 drained" in " ".join(page.split())
    assert page.count('data-testid="drained">drained</span> <small>driver update') == 7


def test_a_drain_ahead_or_ended_leaves_its_gpus_free_in_every_view(broker):
    ahead = drain(broker, 7, start=1000.0 + HOUR)
    assert pool_report(broker)["free"] == GPUS
    broker.calendar.end(ahead.id)
    now = drain(broker, 7)
    assert pool_report(broker)["free"] == 1
    broker.calendar.end(now.id)
    assert pool_report(broker)["free"] == GPUS
    assert set(broker.calendar.states(broker.pool).values()) == {DeviceState.FREE}


def test_the_form_counts_drained_gpus_out_and_greys_out_what_cannot_start(broker):
    drain(broker, 7)
    limits = LimitsTable.parse({}, {}, [p.slug for p in PROFILES]).for_user(set())
    states = broker.calendar.states(broker.pool)
    [available] = form.availability(broker.pool, states)
    assert (available.free, available.total) == (1, GPUS)
    keep = broker.calendar.kept_from("ann", None).now

    def reasons():
        rows = form.profile_rows(PROFILES, limits, 1, broker.pool, None, keep=keep)
        return {row.slug: row.reason for row in rows}

    assert reasons()["gpu-1"] == "" and reasons()["gpu-2"].endswith("1 free right now.")
    drain(broker, GPUS, reason="new fans")
    keep = broker.calendar.kept_from("ann", None).now
    assert reasons()["gpu-1"] == "Needs 1 free GPU(s); 0 free right now."


@pytest.mark.parametrize(
    ("count", "start", "says"),
    [
        (GPUS, 1000.0, f"8 GPUs are taken out for maintenance (driver update): {NONE_LEFT}"),
        (GPUS, 1000.0 + HOUR, f"a server on them then stops (files kept), and {NONE_LEFT}"),
        (7, 1000.0, "7 GPUs are taken out for maintenance (driver update): starts go to the"),
        (7, 1000.0 + HOUR, "then stops (files kept); starts go to other GPUs while any is free"),
    ],
)
def test_a_drain_of_every_gpu_says_none_is_left_not_that_starts_go_elsewhere(
    broker, count, start, says
):
    drain(broker, count, start=start)
    [said] = broker.calendar.said_to("ann", None)
    assert says in said, said
