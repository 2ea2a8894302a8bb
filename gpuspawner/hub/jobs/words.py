"""What a job's owner reads about it: why it was refused, why it waits again, why it ended."""

from __future__ import annotations

from ...core.jobs import OUTPUTS
from ...core.limits import Limited
from ...core.profiles import Profile
from ...core.units import Request
from ...core.words import at_clock, duration, from_group


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


def cancelled(now: float) -> str:
    return f"Cancelled at {at_clock(now, now)}; its outputs so far are kept."


def finished() -> str:
    return "Its run ended well."


def broke(error: object) -> str:
    detail = f": {error}" if isinstance(error, str) and error else ""
    return f"Its run failed{detail}. The output notebook keeps the cell that failed."


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


def started_by_hand(server: str) -> str:
    return (
        f"{server} is a GPU job's server: the hub starts it when the job's turn comes, "
        f"never by hand. Its outputs are in ~/{OUTPUTS}/{server}; to run it again, submit "
        "the job again (JupyterLab's Create Job, or gpuspawner job submit)."
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
        "Its server ended before its run said it had ended (stopped by an admin, or its "
        "container died); its log and outputs so far are in its folder."
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
