"""A job as people see it: the API's JSON, the admin page's row and the command's line all
read this one view (its state and place, its run's progress, how long it has run, its GPUs'
use now, and the hints those numbers give)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jupyterhub.utils import url_escape_path, url_path_join

from ...core.job_hints import hints
from ...core.jobs import JobState, outputs_of
from ...core.words import iso_utc
from ...records.jobs import Job
from .board import JobBoard


def job_view(
    job: Job, jobs: JobBoard, base_url: str, places: Mapping[int, int] | None = None
) -> dict[str, Any]:
    """`places`: the board's `places()`, where many jobs are shown at once."""
    broker = jobs.broker
    waiting = job.state is JobState.WAITING
    running = job.state is JobState.RUNNING
    gpus = jobs.gpu_use(job) if running else []
    progress = dict(job.progress)
    user_url = url_path_join(base_url, "user", url_escape_path(job.user))
    return {
        "id": job.id,
        "server": job.server,
        "user": job.user,
        **job.spec.as_json(),
        "state": str(job.state),
        "place": (jobs.places() if places is None else places).get(job.id, 0) if waiting else None,
        "submitted": iso_utc(job.submitted),
        "started": iso_utc(job.started),
        "ended": iso_utc(job.ended),
        "elapsed_seconds": _elapsed(job, broker.clock()),
        "attempts": job.attempts,
        "preemptions": job.preemptions,
        "gpus": list(job.gpus),
        "gpu_use": [
            {
                "uuid": g.uuid,
                "utilization_percent": g.utilization_percent,
                "memory_used_bytes": g.memory_used_bytes,
                "memory_total_bytes": g.memory_total_bytes,
            }
            for g in gpus
        ],
        "hints": hints(gpus, progress.get("cpu_busy")) if running else [],
        "progress": progress,
        "reason": job.reason,
        "outputs": outputs_of(job.id),
        "url": url_path_join(user_url, job.server, "/") if running else None,
    }


def _elapsed(job: Job, now: float) -> int | None:
    """Seconds its latest attempt has run (while it holds GPUs), or ran (once it ended);
    None while it waits."""
    if job.started is None or job.state is JobState.WAITING:
        return None
    return round((job.ended if job.final and job.ended is not None else now) - job.started)
