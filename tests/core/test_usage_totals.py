"""Usage reports: GPU-hours held and busy per user or group in a window, as admins read them."""

import pytest

from gpuspawner.core.usage import HOUR, Totals, UsageRecord, report, totals

NOW = 1000 * HOUR


def grant(user_id, user, group, gpus, start, end=None, busy=0.0):
    return UsageRecord(user_id, user, "", group, gpus, start, end, busy)


RECORDS = [
    grant(1, "ann", "students", 2, NOW - 10 * HOUR, NOW - 6 * HOUR, busy=3 * HOUR),
    grant(2, "bob", None, 1, NOW - 2 * HOUR, None, busy=HOUR),  # running
    grant(1, "ann-renamed", "students", 1, NOW - HOUR, NOW, busy=0),
]


def test_by_user_sums_each_persons_grants_under_their_latest_name():
    rows = report(RECORDS, NOW - 24 * HOUR, NOW, "user")
    assert rows == [("ann-renamed", Totals(9.0, 6.0)), ("bob", Totals(2.0, 1.0))]
    assert rows[0][1].busy_share == pytest.approx(2 / 3)


def test_by_group_is_the_quota_group_charged():
    rows = dict(report(RECORDS, NOW - 24 * HOUR, NOW, "group"))
    assert rows == {"students": Totals(9.0, 6.0), "(none)": Totals(2.0, 1.0)}


def test_a_grant_partly_in_the_window_counts_that_share_of_its_busy_time():
    [(_, found)] = report(RECORDS[:1], NOW - 8 * HOUR, NOW, "user")
    assert found == Totals(held_gpu_hours=4.0, busy_gpu_hours=3.0)  # half its 4 h, half busy


def test_nothing_held_has_no_busy_share():
    assert Totals().busy_share is None
    assert totals([], NOW, lambda r: r.user) == {}


def test_a_report_is_by_user_or_group_only():
    with pytest.raises(ValueError, match="by user or group, not 'server'"):
        report(RECORDS, 0, NOW, "server")
