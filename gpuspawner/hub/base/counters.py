"""The hub's counters and histograms, counted where things happen: a refused spawn (the
spawner), an allocation and a wait in line (the broker), an error from Docker (the
liveness checks, the monitor). They import nothing of the hub, so anything in it may
count; `metrics` adds the gauges read from the books at scrape time."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

SPAWNS_REFUSED = Counter(
    "gpuspawner_spawns_refused_total",
    "Spawns refused before a container was made, by reason: capacity (not enough free "
    "GPUs), limit (a group limit), budget (a used-up GPU-hour budget), invalid_options (bad "
    "user_options), job_server (a GPU job's server started by hand).",
    ["reason"],
)
for _reason in ("capacity", "limit", "budget", "invalid_options", "job_server"):
    SPAWNS_REFUSED.labels(_reason)  # at zero from the start, so rate() sees the first one

ENGINE_ERRORS = Counter(
    "gpuspawner_engine_errors_total",
    "Questions the hub asked Docker (or the swarm) that got an error instead of an answer, "
    "by question: poll (is a server still running?), list (which containers run?). No "
    "server is ended on an error: only on Docker's word that its container is gone or exited.",
    ["question"],
)
for _question in ("poll", "list"):
    ENGINE_ERRORS.labels(_question)

ALLOCATION_SECONDS = Histogram(
    "gpuspawner_allocation_duration_seconds",
    "Time to decide an allocation: limits checked and GPUs chosen, under the pool's lock.",
    buckets=(0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05),
)

WAIT_SECONDS = Histogram(
    "gpuspawner_wait_duration_seconds",
    "Time GPU starts spent in the waiting line, by how the wait ended: started, max_wait "
    "(gave up), cancelled (by the user), removed (by an admin), refused (could not wait).",
    ["outcome"],
    buckets=(1, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400),
)
WAIT_OUTCOMES = ("started", "max_wait", "cancelled", "removed", "refused")
for _outcome in WAIT_OUTCOMES:
    WAIT_SECONDS.labels(_outcome)


def observe_wait(outcome: str, seconds: float) -> None:
    """One wait in the line ended (the line counts each as it ends)."""
    WAIT_SECONDS.labels(outcome).observe(seconds)


GPU_SECONDS_HELD = Counter(
    "gpuspawner_gpu_seconds_held",
    "GPU-seconds held by servers, by the quota group charged, counted each monitor tick "
    "(GPU-equivalents × seconds; stopping servers included until Docker confirms them gone).",
    ["group"],
)
GPU_SECONDS_BUSY = Counter(
    "gpuspawner_gpu_seconds_busy",
    "Of the GPU-seconds held, those whose GPUs the monitor judged busy, by the quota group "
    "charged. Busy over held is how much of what people hold they use.",
    ["group"],
)

# --- jobs (`hub.jobs.board`) -------------------------------------------------------------
JOBS_ENDED = Counter(
    "gpuspawner_jobs_ended_total",
    "Jobs that ended, by how: done, failed, cancelled.",
    ["state"],
)
for _state in ("done", "failed", "cancelled"):
    JOBS_ENDED.labels(_state)
JOB_PREEMPTIONS = Counter(
    "gpuspawner_job_preemptions_total",
    "Times a running job gave way to a person's start (SIGTERM, grace, then it waits again).",
)
JOB_WAIT_SECONDS = Histogram(
    "gpuspawner_job_wait_duration_seconds",
    "Time jobs waited for GPUs before a run started (each attempt: from submission, or from "
    "giving way).",
    buckets=(10, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400),
)
JOB_RUN_SECONDS = Histogram(
    "gpuspawner_job_run_duration_seconds",
    "Runs of jobs, from their start until Docker confirmed their container gone, by how the "
    "run ended: done, failed, cancelled, gave way.",
    ["end"],
    buckets=(60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 259200),
)
JOB_GPU_SECONDS = Counter(
    "gpuspawner_job_gpu_seconds",
    "GPU-seconds held by jobs' runs (GPU-equivalents × seconds), counted as each run ends.",
)

PARKS = Counter(
    "gpuspawner_parks_total",
    "Jobs the hub asked the checkpoint driver to park for a person's start, by outcome: "
    "parked, refused (the driver refused; the job gave way by SIGTERM).",
    ["outcome"],
)
for _outcome in ("parked", "refused"):
    PARKS.labels(_outcome)
DRIVER_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120)
PARK_SECONDS = Histogram(
    "gpuspawner_park_duration_seconds",
    "Time the driver took to lock and checkpoint a job's CUDA process (GPU memory to host).",
    buckets=DRIVER_BUCKETS,
)
RESTORE_SECONDS = Histogram(
    "gpuspawner_restore_duration_seconds",
    "Time the driver took to restore and unlock parked work (host memory back to the GPU).",
    buckets=DRIVER_BUCKETS,
)
RESTORE_WAIT_SECONDS = Histogram(
    "gpuspawner_restore_wait_seconds",
    "Time a parked person waited for their GPU work to be back, from their wake (a cell run, "
    "a new process on their GPU) to the end of its restore: jobs giving way, a turn ending, "
    "and the driver's copy.",
    buckets=(1, 2, 5, 10, 30, 60, 120, 300, 600, 1800),
)

BOOKED_GPU_SECONDS = Counter(
    "gpuspawner_booked_gpu_seconds_total",
    "GPU-seconds of each booking of the calendar while its window is open, by booking "
    "(its number, as `gpuspawner calendar` lists it) and use: used (a holder's server held "
    "the GPU) or unused (the GPU was kept for the holders and nobody used it).",
    ["booking", "use"],
)
