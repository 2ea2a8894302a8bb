"""What a job's owner reads about it: why it was refused, why it waits again, why it ended."""

from __future__ import annotations

from ...core.jobs import FINAL, OUTPUTS, SERVER_PREFIX, JobSpec, JobState
from ...core.limits import Limited
from ...core.profiles import Profile
from ...core.units import Request
from ...core.words import at_clock, duration, from_group
from ...records.jobs import Job

SUBMIT_AGAIN = "submit the job again (JupyterLab's Create Job, or gpuspawner job submit)"


def too_many(count: int, most: Limited) -> str:
    if most.value == 0:
        return f"You may not submit jobs (max_jobs 0{from_group(most.group)})."
    return (
        f"You have {count} job{'s' if count != 1 else ''} waiting or running, the most you may "
        f"have at once (max_jobs{from_group(most.group)}): cancel one, or submit this one when "
        "one has ended."
    )


def never_fits(profile: Profile, request: Request) -> str:
    return (
        f"Profile {profile.display_name!r} asks for {request.what}, more than any one machine "
        "here has: it could never start."
    )


def not_a_gpu_profile(profile: Profile) -> str:
    return (
        f"Profile {profile.display_name!r} has no GPU: jobs run on GPUs. Pick a GPU profile "
        "(a CPU-only run needs no job: run it in your server)."
    )


def cancelled(now: float, ran: bool) -> str:
    kept = "its outputs so far are kept" if ran else "it had not started, so it wrote nothing"
    return f"Cancelled at {at_clock(now, now)}; {kept}."


def finished() -> str:
    return "Its run ended well."


def broke(error: object, spec: JobSpec) -> str:
    detail = f": {error}" if isinstance(error, str) and error else ""
    if spec.notebook:
        return f"Its run failed{detail}. The executed notebook keeps the cell that failed."
    return f"Its run failed{detail}. Its log (log.txt, in its folder) has the script's output."


def over_runtime(limit: Limited) -> str:
    return (
        f"Stopped after {duration(limit.value or 0)}, the longest a job may run "
        f"(max_runtime{from_group(limit.group)}); its outputs so far are kept."
    )


def gave_way(to: str, now: float) -> str:
    return (
        f"Gave way at {at_clock(now, now)} to {to}'s start: it waits again and will run "
        "again from its own checkpoint (saved on SIGTERM) when GPUs free up."
    )


def started_by_hand(server: str, job: Job | None) -> str:
    """Why a start by hand of a server named as a job's is refused, for what the name is."""
    if job is None:
        return (
            f"{server} is named as a GPU job's server: names {SERVER_PREFIX}<number> are the "
            "hub's, for the jobs it starts. Give your server another name."
        )
    hubs = (
        f"{server} is a GPU job's server: the hub starts it when the job's turn comes, never "
        "by hand."
    )
    if job.state not in FINAL:
        now = "It waits for free GPUs." if job.state is JobState.WAITING else "It runs now."
        return f"{hubs} {now}"
    if job.attempts == 0:
        return f"{hubs} It ended ({job.state}) before it ever ran; to run it, {SUBMIT_AGAIN}."
    return f"{hubs} Its outputs are in ~/{OUTPUTS}/{server}; to run it again, {SUBMIT_AGAIN}."


def not_started(error: BaseException) -> str:
    what = str(error) or type(error).__name__
    return (
        f"The hub could not start it ({what}); it holds no GPU. Submit it again; if this "
        "persists, ask an admin."
    )


def start_failed(error: BaseException) -> str:
    return f"Its server did not start: {error}"


def parked_for(to: str, why: str, now: float) -> str:
    return (
        f"Parked at {at_clock(now, now)} for {to}'s {why}: its GPU work waits in host memory, "
        "and goes on where it was, on the same GPUs, when they are free again."
    )


def parked_and_needed(to: str) -> str:
    return (
        f"its GPU was needed for {to}'s start while it was parked (its GPU idle), and no "
        "other GPU was free"
    )


def parked_while_away() -> str:
    return (
        "Parked while the hub restarted: its GPU work waits in host memory, and goes on "
        "where it was, on the same GPUs, when they are free."
    )


def restore_failed(error: object) -> str:
    return (
        f"Stopped: {error}. Its log and outputs so far are in its folder; submit it again "
        "to rerun it from its own checkpoint."
    )


def ended_unreported() -> str:
    return (
        "Its server stopped before its run said it had ended (someone stopped the server, "
        "you or an admin, or its container died); its log and outputs so far are in its folder."
    )


def hub_stopped() -> str:
    return (
        "The hub shut down while it ran and stopped its server (c.JupyterHub.cleanup_servers); "
        "it waits again, and its next run starts from its own checkpoint."
    )


def ended_while_away() -> str:
    return (
        "Its server ended while the hub was not running, so how its run ended is not known "
        "here; its log and outputs are in its folder."
    )


def user_gone() -> str:
    return "Its user no longer exists."
