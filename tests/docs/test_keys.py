"""Every key a profile or a group's limits accept is described where admins look: the
configuration page's tables, and the settings' own help (the generated reference)."""

from pathlib import Path

import pytest

from gpuspawner.config.settings import GPUSettings
from gpuspawner.core.group_limits import LIMIT_KEYS
from gpuspawner.core.profiles import PROFILE_KEYS

PAGE = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
SETTINGS_TABLE = PAGE.split("## Profiles and settings")[1].split("\n## ")[0]
LIMITS_TABLE = PAGE.split("## Limits per group")[1].split("\n### ")[0]


def first_cells(table: str) -> list[str]:
    return [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]


@pytest.mark.parametrize("key", PROFILE_KEYS)
def test_every_profile_key_is_described(key):
    (row,) = [line for line in SETTINGS_TABLE.splitlines() if line.startswith("| `profiles` |")]
    assert f"`{key}`" in row
    assert f"`{key}`" in GPUSettings.profiles.help


@pytest.mark.parametrize("key", LIMIT_KEYS)
def test_every_limit_key_is_described(key):
    assert any(f"`{key}`" in cell for cell in first_cells(LIMITS_TABLE))
