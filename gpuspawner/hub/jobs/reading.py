"""What the jobs' board reads from the hub's books, as plain functions: which people wait
for want of GPUs, whether a job could use their units, the jobs' order, a job's profile,
its GPUs' use now, and a running job as the give-way rule sees it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ...core.give_way import RunningJob
from ...core.gpus import Telemetry
from ...core.job_hints import GPUUse
from ...core.job_rules import JobRules
from ...core.jobs import InvalidJob
from ...core.limits import UserLimits
from ...core.line import Waiting
from ...core.line import in_order as line_order
from ...core.placement import NotEnoughGPUs
from ...core.pool import Grant
from ...core.profiles import Profile
from ...core.units import Request, Unit
from ...core.words import DEFAULT_GROUP, quoted
from ...records.jobs import Job
from ..line.entry import Entry
from ..line.waiting import Line
from . import words


def people_short_of_gpus(line: Line) -> list[Entry]:
    """People's starts in the line that wait for want of free GPUs, in line order (a start
    that may not wait, max_wait 0, is refused before a job could give way)."""
    entries = [line.entry(key) for key in line.order()]
    return [
        e
        for e in entries
        if e is not None and e.waiting.patient and isinstance(e.blocked, NotEnoughGPUs)
    ]


def competes(units: Sequence[Unit], request: Request, person: Entry) -> bool:
    """Whether a job's request could use a unit the person's start could use."""
    return any(request.matches(u) and person.request.matches(u) for u in units)


def in_order(
    jobs: Sequence[Job], recent: Mapping[int, float], priority_of: Callable[[int], int]
) -> list[Job]:
    """The waiting line's rule for jobs: job priority, then recent GPU-hours, then
    submission."""
    waiting = [
        Waiting(j.id, j.user_id, DEFAULT_GROUP, priority_of(j.user_id), 0.0, j.submitted)
        for j in jobs
    ]
    by_id = {j.id: j for j in jobs}
    return [by_id[w.key] for w in line_order(waiting, recent)]


def job_profile(profiles: Sequence[Profile], slug: str, limits: UserLimits) -> Profile:
    """The GPU profile a job asks for, or InvalidJob saying why it may not."""
    profile = next((p for p in profiles if p.slug == slug), None)
    if profile is None:
        known = ", ".join(p.slug for p in profiles if p.request.kind)
        raise InvalidJob(f"No profile {quoted(slug)}; GPU profiles are: {known}")
    if profile.request.kind is None:
        raise InvalidJob(words.not_a_gpu_profile(profile))
    if not limits.may_pick(slug):
        allowed = ", ".join(sorted(limits.profiles.value or ()))
        raise InvalidJob(
            f"Profile {quoted(slug)} is not available to you (group {limits.profiles.group} "
            f"may pick: {allowed})"
        )
    return profile


def gpu_use(grant: Grant, telemetry: Mapping[str, Telemetry]) -> list[GPUUse]:
    use = []
    for unit in grant.units:
        sample = telemetry.get(unit.device)
        use.append(
            GPUUse(
                unit.device,
                sample.utilization_percent if sample else None,
                sample.memory_used_bytes if sample else None,
                unit.memory_bytes or None,
            )
        )
    return use


def as_running(job: Job, grant: Grant, rules: JobRules) -> RunningJob:
    return RunningJob(
        job.id,
        job.user_id,
        frozenset(u.id for u in grant.units),
        rules.priority,
        job.started or 0.0,
        rules.min_runtime,
        rules.give_way,
        job.preemptions,
        rules.max_preemptions,
    )
