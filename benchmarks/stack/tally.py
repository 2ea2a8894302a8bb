"""The replay's figures, read from what happened on the real stack, in the trace's own time
(real seconds × the factor), keyed as `window.figures_of` keys the simulator's:

- GPU-hours busy: the GPUs the hub's telemetry called busy, sample by sample, weighted by
  the time to the next sample;
- first-start waits: each start a scripted person made, request → GPUs granted and
  request → ready (`person.Start`); a start granted before its progress stream opened has
  only its ready time, which bounds its grant;
- parks and restores: the pool's parked work appearing and leaving, sample by sample; a
  job's parks also from the hub's count of its preemptions, less its SIGTERM ends (its
  journal), since a park and its restore may fall between two samples;
- jobs: their final models (state, preemptions) and their own journals (`lost_work`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from figures import percentile

from .invariants import Sample, Who
from .lost_work import LostWork
from .person import Start


@dataclass(frozen=True)
class JobEnd:
    """One job at the end of the replay: its model's state and give-ways, and its journal."""

    gpus: int
    state: str
    preemptions: int
    work: LostWork


def waits(values: Sequence[float], factor: float) -> dict[str, float]:
    scaled = [v * factor for v in values]
    if not scaled:
        return {"p50": 0.0, "p95": 0.0, "max": 0.0}
    return {
        "p50": round(percentile(scaled, 0.5), 1),
        "p95": round(percentile(scaled, 0.95), 1),
        "max": round(max(scaled), 1),
    }


def start_waits(starts: Sequence[Start], end: float) -> tuple[list[float], list[float], int]:
    """Real seconds to the grant and to ready, one per start; one never granted counts as
    waiting until `end` (a lower bound), and how many those were."""
    granted, ready, never = [], [], 0
    for s in starts:
        to_ready = s.wait_for_ready
        to_grant = s.wait_for_gpus if s.wait_for_gpus is not None else to_ready
        if to_grant is None:
            never += 1
            to_grant = max(0.0, end - s.requested)
        granted.append(to_grant)
        ready.append(to_ready if to_ready is not None else max(0.0, end - s.requested))
    return granted, ready, never


def busy_seconds(samples: Sequence[Sample], end: float) -> float:
    """GPU-seconds busy (real): each sample's busy GPUs until the next sample (or `end`)."""
    untils = ([s.at for s in samples[1:]] + [end])[: len(samples)]
    return sum(
        sum(g.busy for g in sample.after) * max(0.0, until - sample.at)
        for sample, until in zip(samples, untils, strict=True)
    )


def parks(samples: Sequence[Sample], jobs: set[Who]) -> Counter[str]:
    """Parked work appearing (of a job, of a person) and leaving with its container still
    running (restored) or gone (stopped while parked), between successive samples."""
    counted: Counter[str] = Counter({"parked_jobs": 0, "parked_people": 0, "restored": 0})
    before: set[tuple[str, Who]] = set()
    for sample in samples:
        now = {(g.uuid, who) for g in sample.after for who in g.parked}
        running = {(r.user, r.server) for r in sample.docker}
        for _, who in now - before:
            counted["parked_jobs" if who in jobs else "parked_people"] += 1
        for _, who in before - now:
            counted["restored" if who in running else "stopped_parked"] += 1
        before = now
    return counted


def figures(
    factor: float,
    gpus: int,
    origin: float,  # the replay's start, Unix seconds
    seconds: float,  # its length, real
    starts: Sequence[Start],
    samples: Sequence[Sample],
    interrupted: int,
    resume_waits: Sequence[float],
    jobs: Mapping[Who, JobEnd],
) -> dict[str, Any]:
    end = origin + seconds
    granted, ready, never = start_waits(starts, end)
    busy = busy_seconds(samples, end) * factor / 3600
    parked = parks(samples, set(jobs))
    lost = sum(j.work.seconds_redone * j.gpus for j in jobs.values()) * factor / 3600
    gave_way = sum(a.ended == "sigterm" for j in jobs.values() for a in j.work.attempts)
    preemptions = sum(j.preemptions for j in jobs.values())  # the hub's: its parks too
    return {
        "gpu_hours_busy": round(busy, 2),
        "machine_busy": round(busy / (gpus * seconds * factor / 3600), 4) if seconds else 0.0,
        "starts": len(starts),
        "never_granted": never,
        "wait_granted": waits(granted, factor),
        "wait_ready": waits(ready, factor),
        "interrupted": interrupted,
        # a job's park and restore may fall between two samples: the hub's own count
        "parked_jobs": max(parked["parked_jobs"], preemptions - gave_way),
        "parked_people": parked["parked_people"],
        "restored": len(resume_waits),
        "restores_seen": parked["restored"],  # jobs' and people's, in the pool's report
        "resume_wait_p95": waits(resume_waits, factor)["p95"],
        "jobs": len(jobs),
        "jobs_done": sum(j.state == "done" for j in jobs.values()),
        "gave_way": gave_way,
        "preemptions": preemptions,
        "gpu_hours_lost": round(lost, 2),
    }


ROWS = (  # (key, words, how it is shown)
    ("gpu_hours_busy", "GPU-hours busy", "{:.1f}"),
    ("machine_busy", "machine's GPU-hours busy", "{:.0%}"),
    ("starts", "people's starts", "{}"),
    ("never_granted", "of them never granted", "{}"),
    ("wait_granted.p50", "wait request→granted p50 (s)", "{:.0f}"),
    ("wait_granted.p95", "wait request→granted p95 (s)", "{:.0f}"),
    ("wait_granted.max", "wait request→granted max (s)", "{:.0f}"),
    ("wait_ready.p50", "wait request→ready p50 (s)", "{:.0f}"),
    ("wait_ready.p95", "wait request→ready p95 (s)", "{:.0f}"),
    ("wait_ready.max", "wait request→ready max (s)", "{:.0f}"),
    ("interrupted", "sessions interrupted", "{}"),
    ("parked_jobs", "jobs parked for a person", "{}"),
    ("parked_people", "people's servers parked", "{}"),
    ("restored", "returns to a parked server", "{}"),
    ("resume_wait_p95", "resume wait p95 (s)", "{:.0f}"),
    ("jobs", "jobs", "{}"),
    ("jobs_done", "jobs done", "{}"),
    ("gave_way", "jobs gave way", "{}"),
    ("gpu_hours_lost", "GPU-hours lost", "{:.2f}"),
)


def value(found: Mapping[str, Any], key: str) -> Any:
    for part in key.split("."):
        found = found[part]
    return found


def far_apart(stack: float, simulated: float, share: bool) -> bool:
    """Over 5 points apart (a share), or a factor of 2 (a count or a time; both over 1)."""
    if share:
        return abs(stack - simulated) > 0.05
    low, high = sorted((abs(stack), abs(simulated)))
    return high > 1 and high > 2 * low


def side_by_side(stack: Mapping[str, Any], simulated: Mapping[str, Any]) -> str:
    """The table the report prints; a row marked ⚠ differs by more than 5 points or 2×."""
    lines = ["| figure | real stack | simulator | |", "|---|---|---|---|"]
    for key, words, shown in ROWS:
        ours, theirs = value(stack, key), value(simulated, key)
        mark = "⚠" if far_apart(float(ours), float(theirs), key == "machine_busy") else ""
        lines.append(f"| {words} | {shown.format(ours)} | {shown.format(theirs)} | {mark} |")
    return "\n".join(lines)
