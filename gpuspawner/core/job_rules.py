"""What a user's jobs may do: their groups' job keys, resolved as every limit is.

A job is a GPU holder like a server (the same profiles, limits, quotas and
budgets apply); these are the rules only jobs have. Each is the most generous
of the user's groups' values for the job's owner: the most jobs, the longest
runtime, the highest priority, the longest grace; a job gives way to people
only if every one of its owner's groups says its jobs do (`jobs_give_way`),
and a person's start may make jobs give way if any of their groups allows it
(`preempts_jobs`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .group_limits import Limits
from .limits import Limited, LimitsTable
from .words import DEFAULT_GROUP

DEFAULT_PREEMPT_GRACE = 120.0  # seconds from SIGTERM to SIGKILL when a job gives way
DEFAULT_MAX_PREEMPTIONS = 3  # a job that gave way this often is left to run


@dataclass(frozen=True)
class JobRules:
    max_jobs: Limited  # jobs waiting or running at once; None: no limit, 0: may not submit
    max_runtime: Limited  # seconds; None: none
    min_runtime: float = 0.0
    preempt_grace: float = DEFAULT_PREEMPT_GRACE
    priority: int = 0
    give_way: bool = True
    preempts: bool = True
    max_preemptions: int = DEFAULT_MAX_PREEMPTIONS


def job_rules(table: LimitsTable, groups: Iterable[str]) -> JobRules:
    """One user's job rules, from the groups listed in `table` (else default_limits)."""
    listed: Mapping[str, Limits] = {
        g: table.groups[g] for g in sorted(set(groups)) if g in table.groups
    }
    if not listed:
        listed = {DEFAULT_GROUP: table.default}

    def most(key: str) -> Limited:
        values = [(getattr(lim, key), name) for name, lim in listed.items()]
        unlimited = [name for value, name in values if value is None]
        return Limited(None, unlimited[0]) if unlimited else Limited(*max(values))

    def highest(key: str, default: float) -> float:
        return max(
            (v for lim in listed.values() if (v := getattr(lim, key)) is not None), default=default
        )

    preemptions = [
        lim.max_preemptions for lim in listed.values() if lim.max_preemptions is not None
    ]
    return JobRules(
        max_jobs=most("max_jobs"),
        max_runtime=most("max_runtime"),
        min_runtime=highest("min_runtime", 0.0),
        preempt_grace=highest("preempt_grace", DEFAULT_PREEMPT_GRACE),
        priority=int(highest("job_priority", 0)),
        give_way=all(lim.jobs_give_way for lim in listed.values()),
        preempts=any(lim.preempts_jobs for lim in listed.values()),
        max_preemptions=min(preemptions, default=DEFAULT_MAX_PREEMPTIONS),
    )
