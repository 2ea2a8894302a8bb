"""The pending page's estimate: only a holder's own rules (max_age, an idle clock) are a basis."""

from datetime import UTC, datetime

import pytest

from gpuspawner.core.estimates import Holding, next_freeing
from gpuspawner.core.limits import Limited
from gpuspawner.core.words import ordinal

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC).timestamp()
MIN = 60.0


def held(user="bob", server="", gpus=1, since=NOW - 60 * MIN, idle_since=None, **limits):
    clocks = {key: Limited(value, "g") for key, value in limits.items()}
    return Holding(user, server, gpus, since, idle_since, **clocks)


@pytest.mark.parametrize(
    ("holdings", "expected"),
    [
        # no rule ends any holder: no estimate, however long they have run
        ([held(), held("ann", gpus=2, idle_since=NOW - 5 * MIN)], None),
        # an idle clock counts only while the GPUs are idle
        ([held(gpu_idle_timeout=30 * MIN)], None),
        (
            [held(max_age=200 * MIN)],
            "1 GPU frees up when bob's server reaches its max_age at 14:20 UTC",
        ),
        (
            [held("ann", "train", gpus=2, idle_since=NOW - 10 * MIN, gpu_idle_timeout=30 * MIN)],
            "2 GPUs free up at 12:20 UTC if ann's server 'train' stays idle (gpu_idle_timeout)",
        ),
        # the earliest wins; on a tie, the certain max_age before the conditional idle clock
        (
            [
                held("ann", idle_since=NOW, gpu_idle_timeout=160 * MIN),
                held("cat", idle_since=NOW - 60 * MIN, gpu_idle_timeout=200 * MIN),
                held(max_age=200 * MIN),
            ],
            "1 GPU frees up when bob's server reaches its max_age at 14:20 UTC",
        ),
        # over its limit already (the monitor stops it at its next look): now, not in the past
        (
            [held(max_age=30 * MIN)],
            "1 GPU frees up when bob's server reaches its max_age at 12:00 UTC",
        ),
        # another day says which
        (
            [held(max_age=24 * 60 * MIN)],
            "1 GPU frees up when bob's server reaches its max_age at 2026-12-01 11:00 UTC",
        ),
    ],
)
def test_the_next_gpu_to_free_up_and_why(holdings, expected):
    found = next_freeing(holdings, NOW)
    assert (found.words if found else None) == expected


def test_ordinals_read_as_places_in_line():
    places = [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111)]
    assert " ".join(places) == "1st 2nd 3rd 4th 11th 12th 13th 21st 22nd 23rd 101st 111th"
