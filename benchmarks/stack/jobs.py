"""A trace's training run as the replay submits it: the documented jobs API's body, running
`train.py` (this folder's) for the run's scaled work, checkpointing at its scaled interval.

    POST /hub/api/users/NAME/gpu-jobs
    {"profile": "gpu-2", "script": "train.py", "args": ["--steps", "390", ...]}
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpuspawner.core.profiles import Profile

from .timescale import ScaledJob

TRAIN_SCRIPT = Path(__file__).with_name("train.py")
SCRIPT = "train.py"  # where the replay puts it, in each user's home


def profile_for(gpus: int, profiles: Sequence[Profile]) -> str:
    """The slug of the profile offering exactly `gpus` GPUs (as the simulator's site picks)."""
    offered = {p.gpus: p.slug for p in profiles}
    if gpus not in offered:
        raise ValueError(f"no profile offers {gpus} GPU(s); profiles offer {sorted(offered)}")
    return offered[gpus]


def job_request(
    job: ScaledJob,
    profiles: Sequence[Profile],
    step_seconds: float = 1.0,
    on_sigterm: str = "save",
    journal: str | None = None,
) -> dict[str, Any]:
    """The body that submits `job`: its work in steps of `step_seconds` (at least one), a
    checkpoint every scaled interval (none where the trace says 0), its own journal."""
    steps = max(1, round(job.work_seconds / step_seconds))
    args = [
        "--steps", str(steps),
        "--step-seconds", f"{step_seconds:g}",
        "--checkpoint-every", f"{job.checkpoint_seconds:g}",
        "--on-sigterm", on_sigterm,
    ]  # fmt: skip
    if journal is not None:
        args += ["--journal", journal]
    return {"profile": profile_for(job.job.gpus, profiles), "script": SCRIPT, "args": args}
