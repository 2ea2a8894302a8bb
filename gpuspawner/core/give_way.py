"""Which jobs give way to a person's start: the rule, as a pure function.

When a person's start finds too few free GPUs and jobs hold GPUs it could
use, the fewest jobs whose GPUs would let it start give way, chosen in this
order (as Slurm's preemption with `PreemptExemptTime`, and KAI's reclaim with
a minimum runtime, do): lowest job priority first, then the most recently
started (it has the least work to lose). A job is never chosen

- while it has run less than its group's `min_runtime`,
- when its owner's groups say their jobs do not give way (`jobs_give_way`),
- once it has given way `max_preemptions` times (it is then left to run),
- or when the start is the same user's (nobody is stopped for themselves).

No more jobs give way than the start needs: after the first enough are
found in order, any of them whose GPUs the start can do without stays.
A job that gives way gets SIGTERM and its group's grace (`preempt_grace`),
then goes back to waiting and runs again from its own checkpoint. Parking a
job's GPU state in host memory instead is the next way of giving way: it
would answer the same question, with cheaper victims first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RunningJob:
    """A running job, as the rule sees it."""

    key: int  # its server's id
    user_id: int
    units: frozenset[str]  # the units it holds
    priority: int
    started: float
    min_runtime: float = 0.0
    gives_way: bool = True
    preemptions: int = 0  # how often it gave way already
    max_preemptions: int = 3


def may_give_way(job: RunningJob, now: float, for_user: int) -> bool:
    return (
        job.gives_way
        and job.user_id != for_user
        and job.preemptions < job.max_preemptions
        and now - job.started >= job.min_runtime
    )


def giving_way(
    running: Sequence[RunningJob],
    fits: Callable[[frozenset[str]], bool],
    now: float,
    for_user: int,
) -> list[RunningJob]:
    """The jobs that give way so that a start fits (`fits(freed)`: whether it would, were
    the units `freed` free too); empty when no choice of them would make it fit."""
    candidates = sorted(
        (job for job in running if may_give_way(job, now, for_user)),
        key=lambda job: (job.priority, -job.started, job.key),
    )
    chosen: list[RunningJob] = []
    freed: frozenset[str] = frozenset()
    for job in candidates:
        chosen.append(job)
        freed |= job.units
        if fits(freed):
            break
    else:
        return []
    for job in reversed(chosen[:-1]):  # keep running whoever the start can do without
        rest = freed - job.units
        if fits(rest):
            chosen.remove(job)
            freed = rest
    return chosen
