"""GPU-hour budgets: what was used in the rolling week, whether a GPU start goes ahead, and
when a used-up budget frees up — tables of cases, and a property against brute force."""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuspawner.core.budgets import WEEK, BudgetExceeded, frees_at, standing, used
from gpuspawner.core.limits import Budgets, Limited, LimitsTable
from gpuspawner.core.usage import HOUR, UsageRecord
from gpuspawner.core.words import DEFAULT_GROUP

DAY = 24 * HOUR
NOW = 100 * DAY  # 1970-04-11 00:00 UTC
ANN, BOB, CID = 1, 2, 3


def held(user=ANN, gpus=1.0, start=NOW - HOUR, end=None, group="students"):
    """A grant: `gpus` held from `start` to `end` (None: still running)."""
    return UsageRecord(user, f"user{user}", "", group, gpus, start, end)


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        ([], 0),
        ([held(start=NOW - 2 * HOUR)], 2),  # running: counts up to now
        ([held(gpus=2, start=NOW - 3 * HOUR, end=NOW - HOUR)], 4),
        ([held(start=NOW - WEEK - HOUR, end=NOW - WEEK + HOUR)], 1),  # half inside the week
        ([held(start=NOW - WEEK - 3 * HOUR, end=NOW - WEEK)], 0),  # just out of it
        ([held(gpus=0.5, start=NOW - 4 * HOUR)], 2),  # a slice: GPU-equivalents
    ],
)
def test_used_is_gpu_hours_held_in_the_last_week(records, expected):
    assert used(records, NOW) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("records", "budget", "expected"),
    [
        pytest.param([], 10, NOW, id="nothing used: now"),
        pytest.param([held(start=NOW - DAY, end=NOW - DAY + 5 * HOUR)], 10, NOW, id="room: now"),
        pytest.param(
            [held(start=NOW - 2 * DAY, end=NOW - 2 * DAY + 10 * HOUR)],
            10,
            NOW - 2 * DAY + WEEK,
            id="used up exactly: the moment its start leaves the window",
        ),
        pytest.param(
            [held(start=NOW - 2 * DAY, end=NOW - 2 * DAY + 10 * HOUR)],
            5,
            NOW - 2 * DAY + WEEK + 5 * HOUR,
            id="half the budget: once half of it has left",
        ),
        pytest.param(
            [
                held(gpus=4, start=NOW - 6 * DAY - 10 * HOUR, end=NOW - 6 * DAY),
                held(start=NOW - HOUR),
            ],
            40,
            NOW + 19 * HOUR,
            id="old use leaves faster than a running server adds: 41 + 1/h, then - 3/h",
        ),
        pytest.param([held(start=NOW - 2 * HOUR)], 1, None, id="running alone keeps it used up"),
        pytest.param([], 0, None, id="a budget of 0 never frees up"),
        pytest.param(
            [
                held(gpus=2, start=NOW - 3 * DAY, end=NOW - 3 * DAY + HOUR),
                held(start=NOW - 3 * DAY + HOUR, end=NOW - 3 * DAY + 5 * HOUR),
            ],
            5,
            NOW - 3 * DAY + WEEK + HOUR / 2,
            id="6 GPU-hours of 5: halfway through the 2-GPU hour leaving",
        ),
    ],
)
def test_frees_at_is_when_the_budget_is_no_longer_used_up(records, budget, expected):
    found = frees_at(records, NOW, budget)
    assert found == (pytest.approx(expected) if expected is not None else None)


moments = st.floats(NOW - 9 * DAY, NOW, allow_nan=False)
grants = st.builds(
    lambda start, length, gpus, running: held(
        gpus=gpus, start=start, end=None if running else min(NOW, start + length)
    ),
    moments,
    st.floats(0, 3 * DAY),
    st.sampled_from([0.5, 1.0, 2.0, 4.0]),
    st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(grants, max_size=8), st.floats(0.1, 200))
@example(  # room now, though the running servers use it up a minute later: now is the answer
    [held(gpus=0.5, start=NOW - 359), held(gpus=2.0, start=NOW - 135)], 0.125
)
def test_frees_at_agrees_with_stepping_through_time(records, budget):
    """Used up at every step before the moment found, and no longer at it; never if
    stepping through the next week and more never finds room."""
    found = frees_at(records, NOW, budget)
    steps = [NOW + i * HOUR / 4 for i in range(4 * 24 * 9)]
    if found is None:
        assert all(used(records, t) >= budget - 1e-6 for t in steps)
        return
    assert found >= NOW
    assert all(used(records, t) >= budget - 1e-6 for t in steps if t < found)
    assert used(records, found) < budget + 1e-6


def budgets(per_user=None, groups=None, stop=False, source="students"):
    return Budgets(Limited(per_user, source), groups or {}, stop)


def test_a_user_with_budget_left_may_start():
    record = held(start=NOW - 2 * DAY, end=NOW - 2 * DAY + 12.5 * HOUR)
    now = standing(budgets(per_user=40), ANN, {}, [record], NOW)
    assert now.refusal(NOW) is None
    assert now.words() == [
        "You used 12.5 of your 40 GPU-hours in the last 7 days "
        "(gpu_hours_per_week of group students)."
    ]


def test_a_used_up_budget_refuses_with_how_much_and_from_when():
    record = held(start=NOW - 2 * DAY, end=NOW - 2 * DAY + 40 * HOUR)
    refusal = standing(budgets(per_user=40), ANN, {}, [record], NOW).refusal(NOW)
    assert isinstance(refusal, BudgetExceeded)
    assert (refusal.key, refusal.group) == ("gpu_hours_per_week", "students")
    assert str(refusal) == (
        "You used 40 of your 40 GPU-hours in the last 7 days (gpu_hours_per_week of group "
        "students). GPU profiles can start again from 1970-04-16 00:00 UTC, as older use "
        "leaves the 7-day window. CPU-only profiles stay open."
    )


@pytest.mark.parametrize(
    ("budget", "hours", "says"),
    [
        # a tiny budget (a test's, a trial's): its use is read to the budget's own decimals
        (0.002, 0.0025, "You used 0.002 of your 0.002 GPU-hours"),  # before: "used 0 of"
        (0.002, 0.0015, "You used 0.001 of your 0.002 GPU-hours"),
        (40, 39.999, "You used 39.99 of your 40 GPU-hours"),  # rounded down: not yet used up
        (40, 60, "You used 60 of your 40 GPU-hours"),
    ],
)
def test_what_was_used_is_read_to_the_budgets_own_decimals(budget, hours, says):
    record = held(start=NOW - 3 * DAY, end=NOW - 3 * DAY + hours * HOUR)
    now = standing(budgets(per_user=budget), ANN, {}, [record], NOW)
    assert now.words()[0].startswith(says)
    refusal = now.refusal(NOW)
    assert (refusal is not None) == (hours >= budget)
    assert refusal is None or str(refusal).startswith(says)


def test_a_running_server_that_keeps_the_budget_used_up_is_named():
    record = held(start=NOW - 3 * HOUR)
    refusal = standing(budgets(per_user=2), ANN, {}, [record], NOW).refusal(NOW)
    assert str(refusal).endswith(
        "While your GPU servers run, it stays used up; once they stop, GPU profiles can start "
        "again from 1970-04-17 22:00 UTC. CPU-only profiles stay open."
    )


def test_a_budget_kept_used_up_by_other_members_servers_says_so():
    """Ann's own budget frees up with time; the group's stays used up while bob's runs."""
    records = [
        held(start=NOW - 2 * DAY, end=NOW - 2 * DAY + 3 * HOUR),
        held(user=BOB, start=NOW - 3 * HOUR),
    ]
    limits = budgets(per_user=3, groups={"students": 5})
    refusal = standing(limits, ANN, {"students": frozenset({ANN, BOB})}, records, NOW)
    assert "While the group's GPU servers run, it stays used up" in str(refusal.refusal(NOW))


def test_a_budget_of_zero_says_gpus_are_not_for_this_user():
    refusal = standing(budgets(per_user=0), ANN, {}, [], NOW).refusal(NOW)
    assert str(refusal) == (
        "Your GPU-hour budget is 0 (gpu_hours_per_week of group students): GPU profiles are "
        "not available to you. CPU-only profiles stay open."
    )


def test_only_the_users_own_grants_count_against_their_budget():
    others = [held(user=BOB, start=NOW - DAY, end=NOW - DAY + 50 * HOUR)]
    assert standing(budgets(per_user=40), ANN, {}, others, NOW).refusal(NOW) is None


def test_a_group_budget_counts_every_current_member_whatever_quota_group_was_charged():
    records = [
        held(user=BOB, start=NOW - 2 * DAY, end=NOW - 2 * DAY + 30 * HOUR, group=None),
        held(user=CID, start=NOW - 2 * DAY, end=NOW - 2 * DAY + 30 * HOUR, group="students"),
    ]
    members = {"students": {ANN, BOB}}  # cid left the group: not counted
    now = standing(budgets(groups={"students": 40}), ANN, members, records, NOW)
    assert now.refusal(NOW) is None
    assert now.words() == [
        "Members of group students used 30 of their 40 GPU-hours in the last 7 days "
        "(gpu_hours_per_week_group of group students)."
    ]
    members = {"students": {ANN, BOB, CID}}
    refusal = standing(budgets(groups={"students": 40}), ANN, members, records, NOW).refusal(NOW)
    assert refusal is not None and refusal.key == "gpu_hours_per_week_group"
    assert "Members of group students used 60 of their 40 GPU-hours" in str(refusal)


def test_a_user_in_two_budgeted_groups_may_start_while_either_has_room():
    records = [held(user=BOB, start=NOW - DAY, end=NOW - DAY + 10 * HOUR)]
    members = {"students": {ANN, BOB}, "course": {ANN}}
    either = budgets(groups={"students": 10, "course": 10})
    assert standing(either, ANN, members, records, NOW).refusal(NOW) is None
    both_full = {"students": {ANN, BOB}, "course": {ANN, BOB}}
    assert standing(either, ANN, both_full, records, NOW).refusal(NOW) is not None


def test_both_budgets_used_up_free_up_when_the_later_one_does():
    records = [
        held(start=NOW - 2 * DAY, end=NOW - 2 * DAY + 10 * HOUR),
        held(user=BOB, start=NOW - DAY, end=NOW - DAY + 10 * HOUR),
    ]
    both = budgets(per_user=10, groups={"students": 20})
    refusal = standing(both, ANN, {"students": {ANN, BOB}}, records, NOW).refusal(NOW)
    assert "from 1970-04-16 00:00 UTC" in str(refusal)  # bob's use leaves a day after ann's
    assert "You used 10 of your 10" in str(refusal)
    assert "Members of group students used 20 of their 20" in str(refusal)


def test_users_in_no_listed_group_are_named_as_such():
    now = standing(budgets(groups={DEFAULT_GROUP: 5}), ANN, {}, [], NOW)
    assert now.words() == [
        "Users in no listed group used 0 of their 5 GPU-hours in the last 7 days "
        "(gpu_hours_per_week_group from default_limits)."
    ]


# --- the keys, as LimitsTable reads them ----------------------------------------------------


def table(groups, default=None, limit_admins=False):
    return LimitsTable.parse(groups, default or {}, ["cpu", "gpu-1"], limit_admins)


def test_budget_keys_resolve_like_every_limit():
    limits = table(
        {
            "students": {"gpu_hours_per_week": 40, "gpu_hours_per_week_group": 200},
            "course": {"gpu_hours_per_week": 60, "stop_over_budget": True},
            "staff": {},
        },
        default={"gpu_hours_per_week": 10, "stop_over_budget": True},
    )
    student = limits.for_user({"students"}).budgets
    assert student == Budgets(Limited(40.0, "students"), {"students": 200.0}, True)
    both = limits.for_user({"students", "course"}).budgets
    assert both.per_user == Limited(60.0, "course")  # the most generous
    assert both.groups == {}  # course sets no group budget: none applies, as with quotas
    # staff sets no budget of its own: it has default_limits', and says so
    assert limits.for_user({"staff"}).budgets == Budgets(Limited(10.0, DEFAULT_GROUP), {}, True)
    assert limits.for_user({"students", "staff"}).budgets.per_user == Limited(40.0, "students")
    nobody = limits.for_user(set()).budgets
    assert nobody.per_user == Limited(10.0, DEFAULT_GROUP) and nobody.groups == {}


def test_admins_have_no_budget_unless_limits_apply_to_them():
    config = {"students": {"gpu_hours_per_week": 1}}
    assert not table(config).for_user({"students"}, admin=True).budgets.any
    strict = table(config, limit_admins=True).for_user({"students"}, admin=True)
    assert strict.budgets.per_user.value == 1


def test_stop_over_budget_needs_every_group_to_ask_for_it():
    limits = table(
        {"students": {"stop_over_budget": True, "gpu_hours_per_week": 1}, "staff": {}},
    )
    assert limits.for_user({"students"}).budgets.stop
    assert not limits.for_user({"students", "staff"}).budgets.stop


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("gpu_hours_per_week", -1, "must be a number of GPU-hours ≥ 0"),
        ("gpu_hours_per_week", "40", "must be a number of GPU-hours ≥ 0"),
        ("gpu_hours_per_week", float("inf"), "must be a number of GPU-hours ≥ 0"),
        ("gpu_hours_per_week_group", True, "must be a number of GPU-hours ≥ 0"),
        ("stop_over_budget", "yes", "must be True or False, got 'yes'"),
        ("gpu_hours_per_day", 4, "unknown key(s) gpu_hours_per_day"),
    ],
)
def test_malformed_budget_keys_name_the_group_and_key(key, value, message):
    with pytest.raises(ValueError, match=r".*") as raised:
        table({"students": {key: value}})
    assert "group_limits['students']" in str(raised.value)
    assert message in str(raised.value)


def test_a_ledger_that_forgets_sooner_than_the_budgets_window_stops_the_hub():
    """Budgets would hand back GPU-hours still in the 7-day window."""
    config = {"students": {"gpu_hours_per_week_group": 40}}
    with pytest.raises(ValueError) as raised:
        LimitsTable.parse(config, {}, ["cpu"], retention=3 * DAY)
    assert str(raised.value) == (
        "c.GPUSpawner.group_limits['students']['gpu_hours_per_week_group'] counts GPU-hours over "
        "the last 7 days, but the usage ledger keeps grants only 3 days "
        "(c.GPUSpawner.usage_retention_days): set it to 7 or more"
    )
    LimitsTable.parse(config, {}, ["cpu"], retention=WEEK)
    LimitsTable.parse({"students": {"max_gpus_group": 4}}, {}, ["cpu"], retention=DAY)
