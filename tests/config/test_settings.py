"""Number settings are checked as the hub reads them: a clear error, never a clock that breaks."""

import math

import pytest
from traitlets import TraitError

from gpuspawner.config.settings import GPUSettings

BAD = [
    ("monitor_interval", 0),
    ("monitor_interval", math.inf),
    ("usage_retention_days", -1),
    ("usage_retention_days", math.inf),
    ("usage_half_life_days", math.nan),
    ("line_reserve_after", -1),
    ("line_reserve_after", math.inf),
    ("warn_before_cull", math.inf),
]


@pytest.mark.parametrize(("name", "value"), BAD)
def test_numbers_out_of_range_are_refused_naming_the_setting(name, value):
    with pytest.raises(TraitError, match=rf"c\.GPUSpawner\.{name} must be a number of"):
        GPUSettings(**{name: value})


def test_numbers_in_range_are_kept():
    settings = GPUSettings(line_reserve_after=0, warn_before_cull=0, monitor_interval=0.5)
    assert (settings.line_reserve_after, settings.warn_before_cull) == (0.0, 0.0)
    assert settings.monitor_interval == 0.5
