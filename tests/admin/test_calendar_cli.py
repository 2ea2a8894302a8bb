"""What `gpuspawner book`, `drain` and `undrain` echo: the window as the hub answered it,
in words people read."""

import pytest

from gpuspawner.admin.calendar import line


def answered(gpus: int, state: str, end: str | None) -> dict:
    return {
        "id": 4,
        "kind": "drain",
        "state": state,
        "gpus": [f"GPU-{n}" for n in range(gpus)],
        "start": "2026-12-11T18:00:00Z",
        "end": end,
        "user": "",
        "group": "",
        "reason": "new fan",
        "asked": "node n2",
    }


@pytest.mark.parametrize(
    ("gpus", "state", "end", "says"),
    [
        (1, "ended", "2026-12-11T19:30:00Z", "drain 4 (ended): 1 GPU from 2026-12-11 18:00 to"),
        (2, "open", None, "drain 4 (open): 2 GPUs from 2026-12-11 18:00, new fan (node n2)"),
        (1, "cancelled", "2026-12-11T18:00:00Z", "drain 4 (cancelled): 1 GPU from"),
    ],
)
def test_a_window_is_echoed_with_its_state_and_its_gpus_counted_in_words(gpus, state, end, says):
    assert line(answered(gpus, state, end)).startswith(says)
