from fractions import Fraction

import pytest

from gpuspawner.core.errors import LimitsConfigError
from gpuspawner.core.limits import Limited, LimitExceeded, LimitsTable
from gpuspawner.core.pool import Usage
from gpuspawner.core.words import DEFAULT_GROUP

SLUGS = ["cpu", "gpu-1", "gpu-2", "gpu-4"]


def table(groups=None, default=None, limit_admins=False):
    return LimitsTable.parse(groups or {}, default or {}, SLUGS, limit_admins)


def usage(by_user=None, by_group=None):
    u = Usage()
    u.by_user.update(by_user or {})
    u.by_group.update(by_group or {})
    return u


def test_a_missing_key_takes_the_default():
    limits = table({"students": {"max_gpus_group": 2}}, {"max_gpus_per_user": 1})
    student = limits.for_user({"students"})
    assert student.max_gpus_per_user.value == 1
    assert student.quotas == {"students": 2}


def test_several_groups_give_the_most_generous_value():
    limits = table(
        {
            "students": {"max_gpus_per_user": 1, "profiles": ["cpu", "gpu-1"]},
            "researchers": {"max_gpus_per_user": 4, "profiles": ["gpu-2"]},
            "staff": {"max_gpus_per_server": None},
        }
    )
    both = limits.for_user({"students", "researchers"})
    assert both.max_gpus_per_user.value == 4
    assert both.max_gpus_per_user.group == "researchers"
    assert both.profiles.value == {"cpu", "gpu-1", "gpu-2"}
    assert limits.for_user({"students", "staff"}).profiles.value is None


def test_users_in_no_listed_group_get_the_default():
    limits = table({"students": {"max_gpus_per_user": 1}}, {"max_gpus_per_user": 2})
    other = limits.for_user({"some-unlisted-group"})
    assert other.max_gpus_per_user.value == 2
    assert other.max_gpus_per_user.group == DEFAULT_GROUP


def test_admins_are_unlimited_unless_configured():
    strict = {"max_gpus_per_user": 0}
    assert table(default=strict).for_user(set(), admin=True).max_gpus_per_user.value is None
    limited = table(default=strict, limit_admins=True).for_user(set(), admin=True)
    assert limited.max_gpus_per_user.value == 0


@pytest.mark.parametrize("limit_admins", [False, True])
def test_admins_are_culled_like_their_groups(limit_admins):
    """Every limits object answers every culling key (an admin's spawn once crashed on it)."""
    limits = table(
        {"staff": {"gpu_idle_timeout": 600}},
        {"idle_timeout": 3600},
        limit_admins=limit_admins,
    )
    admin = limits.for_user({"staff"}, admin=True)
    assert admin.duration("gpu_idle_timeout").value == 600
    assert admin.duration("idle_timeout").value == 3600
    assert admin.duration("cpu_idle_timeout").value is None
    assert admin.duration("max_age").value is None


def test_refusals_name_the_limit_and_group():
    limits = table(
        {"students": {"max_gpus_per_server": 1, "max_gpus_per_user": 1, "max_gpus_group": 2}}
    )
    student = limits.for_user({"students"})
    with pytest.raises(LimitExceeded, match="max_gpus_per_server of group students") as e:
        student.admit(2, "s1", usage())
    assert (e.value.key, e.value.group) == ("max_gpus_per_server", "students")
    with pytest.raises(LimitExceeded, match="You already hold 1 GPU of your 1 GPU"):
        student.admit(1, "s1", usage({"s1": 1}, {"students": 1}))
    with pytest.raises(LimitExceeded, match="Members of group students already hold 2") as e:
        student.admit(1, "s3", usage({"s1": 1, "s2": 1}, {"students": 2}))
    assert e.value.key == "max_gpus_group"
    assert student.admit(1, "s1", usage()) == "students"
    assert student.admit(0, "s1", usage({"s1": 1}, {"students": 2})) is None


def test_quota_is_charged_to_the_group_with_room():
    limits = table({"a": {"max_gpus_group": 1}, "b": {"max_gpus_group": 3}})
    user = limits.for_user({"a", "b"})
    assert user.admit(1, "x", usage(by_group={"a": 1})) == "b"
    # a group without a quota means no quota for its members
    free_for_all = table({"a": {"max_gpus_group": 1}, "c": {}}).for_user({"a", "c"})
    assert free_for_all.admit(4, "x", usage(by_group={"a": 1})) is None


def test_default_limits_quota_caps_everyone_unlisted_together():
    limits = table(default={"max_gpus_group": 1})
    with pytest.raises(LimitExceeded, match="Users in no listed group already hold 1"):
        limits.for_user(set()).admit(1, "y", usage({"x": 1}, {DEFAULT_GROUP: 1}))


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ({"students": {"max_gpu": 1}}, r"group_limits\['students'\]: unknown key\(s\) max_gpu"),
        ({"students": {"max_gpus_per_user": -1}}, r"\['max_gpus_per_user'\] must be a number"),
        ({"students": {"max_gpus_per_user": "2"}}, r"must be a number of GPU-equivalents"),
        ({"students": {"max_gpus_per_user": True}}, r"must be a number of GPU-equivalents"),
        ({"students": {"max_gpus_group": float("inf")}}, r"GPU-equivalents ≥ 0"),
        ({"students": {"profiles": ["gpu-8"]}}, r"\['profiles'\]: no profile with slug gpu-8"),
        ({"students": {"profiles": "gpu-1"}}, r"must be a list of profile slugs"),
        ({"students": {"max_age": 0}}, r"\['max_age'\] must be a number of seconds > 0"),
        # "never" is None: an infinite or absurd clock would break every date shown of it
        ({"students": {"max_age": float("inf")}}, r"\['max_age'\] must be a number of seconds"),
        ({"students": {"idle_timeout": float("nan")}}, r"or None for no limit, got nan"),
        ({"students": {"gpu_idle_timeout": 1e12}}, r"at most ten years"),
        ({"students": {"profiles": [["cpu"]]}}, r"must be a list of profile slugs"),
        ({"students": 3}, r"group_limits\['students'\] must be a dict"),
    ],
)
def test_malformed_config_names_group_and_key(groups, message):
    with pytest.raises(LimitsConfigError, match=message):
        table(groups)


def test_malformed_default_limits_are_named():
    with pytest.raises(LimitsConfigError, match=r"default_limits: unknown key"):
        table(default={"gpus": 1})


def test_limits_count_gpu_equivalents_and_say_so():
    limits = table({"students": {"max_gpus_per_user": 1, "max_gpus_group": 0.5}})
    student = limits.for_user({"students"})
    assert student.max_gpus_per_user.value == 1
    assert student.quotas == {"students": Fraction(1, 2)}
    # four slices of a GPU cut in seven, then a quarter of a shared GPU: within 1
    held = usage({"s1": Fraction(4, 7)}, {"students": Fraction(1, 4)})
    assert student.admit(Fraction(1, 4), "s1", held) == "students"
    with pytest.raises(LimitExceeded) as refused:
        student.admit(Fraction(3, 7), "s1", usage({"s1": Fraction(6, 7)}))
    assert str(refused.value) == (
        "You already hold 6/7 GPU of your 1 GPU (max_gpus_per_user of group students); "
        "this profile asks for 3/7 more. Stop one of your other servers first, or pick a "
        "smaller profile. (Counted in GPU-equivalents: a whole GPU counts 1, a MIG instance "
        "its share of its GPU's compute slices, a slot of a shared GPU 1/slots.)"
    )
    with pytest.raises(LimitExceeded, match=r"already hold 1/2 of their 1/2 GPU \(max_gpus_grou"):
        student.admit(Fraction(1, 7), "s2", usage(by_group={"students": Fraction(1, 2)}))


def test_whole_gpu_refusals_read_as_before():
    student = table({"students": {"max_gpus_per_user": 1}}).for_user({"students"})
    with pytest.raises(LimitExceeded) as refused:
        student.admit(1, "s1", usage({"s1": 1}))
    assert "GPU-equivalents" not in str(refused.value)


def test_the_waiting_line_keys_take_the_highest_of_the_users_groups():
    limits = table(
        {
            "students": {"max_wait": 600},
            "researchers": {"priority": 5, "max_wait": 1800},
            "guests": {"priority": -1},
        },
        {"max_wait": 60},
    )
    both = limits.for_user({"students", "researchers"})
    assert both.max_wait == Limited(1800.0, "researchers")
    assert both.priority == Limited(5, "researchers")
    assert limits.for_user({"guests"}).priority == Limited(-1, "guests")
    assert limits.for_user({"guests"}).max_wait.value == 60  # from default_limits
    assert limits.for_user(set()).max_wait == Limited(60.0, DEFAULT_GROUP)
    # unset: no waiting and no precedence, for admins too (the line is not a limit)
    assert table().for_user(set(), admin=True).max_wait.value == 0
    assert limits.for_user({"researchers"}, admin=True).priority.value == 5


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"max_wait": -1},
            "max_wait'] must be a number of seconds ≥ 0 (0: no waiting; at most ten years), got -1",
        ),
        ({"max_wait": "1h"}, "max_wait'] must be a number of seconds ≥ 0"),
        ({"max_wait": 1e12}, "max_wait'] must be a number of seconds ≥ 0"),
        ({"max_wait": float("inf")}, "max_wait'] must be a number of seconds ≥ 0"),
        ({"priority": 1.5}, "priority'] must be a whole number (higher goes first), got 1.5"),
        ({"priority": True}, "priority'] must be a whole number"),
        (
            {"max_waiting_per_user": 0},
            "max_waiting_per_user'] must be a whole number of servers ≥ 1 that one user may "
            "have waiting in line at once (max_wait 0 is how to let none wait), or None for 1 "
            "per GPU they may still take, got 0",
        ),
        ({"max_waiting_per_user": 2.5}, "max_waiting_per_user'] must be a whole number"),
    ],
)
def test_bad_waiting_line_keys_name_the_group_and_key(raw, message):
    with pytest.raises(LimitsConfigError) as error:
        table({"students": raw})
    assert f"group_limits['students']['{message}" in str(error.value)


def test_places_in_line_are_one_per_gpu_the_user_could_still_take_unless_set():
    limits = table(
        {"students": {"max_gpus_per_user": 2}, "staff": {"max_waiting_per_user": 5}},
        {"max_waiting_per_user": None},
    )
    student, pool = limits.for_user({"students"}), Fraction(8)
    assert student.line_places == Limited(None, DEFAULT_GROUP)  # left to default_limits
    assert student.places_in_line(Fraction(0), pool) == 2
    assert student.places_in_line(Fraction(1, 7), pool) == 2  # 1 6/7 GPUs left, rounded up
    assert student.places_in_line(Fraction(2), pool) == 1  # always at least 1
    unlimited = limits.for_user({"guests"})  # no max_gpus_per_user: the pool's GPUs
    assert unlimited.places_in_line(Fraction(3), pool) == 5
    assert limits.for_user({"staff"}).places_in_line(Fraction(0), pool) == 5
    assert limits.for_user({"staff"}).line_places == Limited(5, "staff")
    # the most generous of a user's groups, where unset (1 per GPU left) counts as the most
    assert limits.for_user({"staff", "students"}).line_places.value is None


def test_a_value_a_group_leaves_to_default_limits_says_it_came_from_there():
    """The lease, the form and stop notices name where a limit was written: a group that
    leaves gpu_idle_timeout out has default_limits', not one of its own."""
    limits = table(
        {"researchers": {"max_gpus_per_user": 4}, "students": {"gpu_idle_timeout": 600}},
        {"gpu_idle_timeout": 1800, "max_age": 7200, "max_wait": 60},
    )
    researcher = limits.for_user({"researchers"})
    assert researcher.duration("gpu_idle_timeout") == Limited(1800.0, DEFAULT_GROUP)
    assert researcher.duration("max_age") == Limited(7200.0, DEFAULT_GROUP)
    assert researcher.max_wait == Limited(60.0, DEFAULT_GROUP)
    assert researcher.max_gpus_per_user == Limited(4, "researchers")
    assert researcher.priority.group == "researchers"  # the group they wait as, in line
    both = limits.for_user({"researchers", "students"})
    assert both.duration("gpu_idle_timeout") == Limited(1800.0, DEFAULT_GROUP)
    assert limits.for_user({"students"}).duration("gpu_idle_timeout") == Limited(600.0, "students")


def test_a_member_may_book_if_any_of_their_groups_lets_them_for_the_longest_it_allows():
    limits = table({"ml": {"max_booking": 7200}, "staff": {"max_booking": 3600}, "students": {}})
    assert limits.for_user({"ml", "students"}).duration("max_booking") == Limited(7200, "ml")
    assert limits.for_user({"ml", "staff"}).duration("max_booking").value == 7200
    assert limits.for_user({"students"}).duration("max_booking").value is None
