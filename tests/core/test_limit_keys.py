"""The table of limit keys is the one description of each key: the parser, both merges, the
limits table of docs/configuration.md and the reference's help are made from it."""

from dataclasses import fields
from pathlib import Path

import pytest

from gpuspawner.config.settings import GPUSettings
from gpuspawner.core.group_limits import Limits
from gpuspawner.core.limit_keys import KEYS, LIMIT_KEYS, Concern, Merge, markdown_table
from gpuspawner.core.limits import Limited, LimitsTable, merged

CONFIGURATION = Path(__file__).parents[2] / "docs" / "configuration.md"


def test_the_table_and_the_dataclass_name_the_same_keys_in_the_same_order():
    assert tuple(f.name for f in fields(Limits) if f.name != "inherited") == LIMIT_KEYS


def test_a_flags_unset_value_is_the_dataclass_default():
    defaults = {f.name: f.default for f in fields(Limits)}
    for key in KEYS:
        if key.merge in (Merge.ALL, Merge.ANY):
            assert defaults[key.name] is key.unset, key.name


@pytest.mark.parametrize("key", KEYS, ids=lambda key: key.name)
def test_every_key_has_a_doc_a_unit_and_a_concern(key):
    assert key.doc and key.unit and isinstance(key.concern, Concern)
    assert not key.doc.endswith(".")  # a line of the table and of the help


def test_the_configuration_pages_limits_table_is_the_one_the_table_makes():
    """docs/conf.py writes it at every docs build; this says so before one."""
    assert markdown_table() in CONFIGURATION.read_text()


def test_the_references_help_lists_every_key_with_its_unit():
    for key in KEYS:
        assert f"- `{key.name}` ({key.unit}): {key.doc}." in GPUSettings.group_limits.help


@pytest.mark.parametrize(
    ("key", "students", "staff", "expected"),
    [
        ("max_gpus_per_user", 1, None, Limited(None, "default_limits")),  # most: unset wins
        ("max_gpus_per_user", 1, 3, Limited(3, "staff")),
        ("max_wait", None, 60, Limited(60.0, "staff")),  # highest, unset as 0
        ("priority", -1, None, Limited(0, "staff")),
        ("preempt_grace", 30, None, Limited(30.0, None)),  # highest set
        ("preempt_grace", None, None, Limited(120.0, None)),
        ("max_preemptions", 5, 2, Limited(2, None)),  # lowest set
        ("jobs_give_way", False, True, Limited(False, None)),  # all
        ("preempts_jobs", False, True, Limited(True, None)),  # any
        ("profiles", ["a"], ["b"], Limited(frozenset({"a", "b"}), "staff, students")),
        ("profiles", ["a"], None, Limited(None, None)),  # union: unset in one is any
    ],
)
def test_each_merge_rule(key, students, staff, expected):
    raw = {
        name: {} if value is None else {key: value}
        for name, value in [("students", students), ("staff", staff)]
    }
    table = LimitsTable.parse(raw, {}, ["a", "b"])
    assert merged({g: table.groups[g] for g in ("staff", "students")}, key) == expected


def test_a_groups_own_keys_are_never_taken_from_default_limits():
    table = LimitsTable.parse({"ml": {}}, {"max_gpus_group": 2, "max_gpus_per_user": 1}, [])
    assert table.groups["ml"].max_gpus_group is None
    assert table.groups["ml"].max_gpus_per_user == 1
    assert merged({"ml": table.groups["ml"]}, "max_gpus_per_user") == Limited(1, "default_limits")
