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

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .limit_keys import DEFAULT_MAX_PREEMPTIONS, DEFAULT_PREEMPT_GRACE
from .limits import Limited, LimitsTable, listed_groups, merged

__all__ = ["DEFAULT_MAX_PREEMPTIONS", "DEFAULT_PREEMPT_GRACE", "JobRules", "job_rules"]


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
    """One user's job rules, from the groups listed in `table` (else default_limits), each
    key merged as its row of `limit_keys.KEYS` says; a limit names where it was written."""
    listed = listed_groups(table, groups)

    def value(key: str) -> Any:
        return merged(listed, key).value

    return JobRules(
        max_jobs=merged(listed, "max_jobs"),
        max_runtime=merged(listed, "max_runtime"),
        min_runtime=value("min_runtime"),
        preempt_grace=value("preempt_grace"),
        priority=int(value("job_priority")),
        give_way=value("jobs_give_way"),
        preempts=value("preempts_jobs"),
        max_preemptions=value("max_preemptions"),
    )
