"""The figures as people read them: the table of policies side by side, the spread over
other generated weeks, what the trace itself asks for, and whether the shipped policy
meets the targets of issue #16. The same text goes to the console and the README.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuspawner.core.words import duration

from .jobs import TrainingJob
from .measures import Outcome
from .parking import MAX_PARKED
from .policies import Policy
from .trace import Session

HELD_BUSY_TARGET = 0.85
P95_WAIT_TARGET = 10 * 60.0  # seconds
# Item 8's goal on the training team's week, for its runs as jobs.
MACHINE_BUSY_GOAL = 0.85
P95_WAIT_GOAL = 2 * 60.0  # seconds: the interactive p95 first-start wait is under it
RESUME_WAIT_GOAL = 60.0  # seconds: a parked server's p95 resume wait is under it
BEGIN = "<!-- utilisation table: written by benchmarks/utilisation.py -->"
END = "<!-- end of utilisation table -->"


@dataclass(frozen=True)
class Result:
    policy: Policy
    outcome: Outcome  # on the trace replayed
    others: tuple[Outcome, ...] = ()  # on other generated weeks, for the spread


def percent(share: float) -> str:
    return f"{share * 100:.0f} %"


def wait(seconds: float) -> str:
    return "0" if seconds == 0 else duration(seconds)


def demand(sessions: Sequence[Session]) -> str:
    """What the trace asks for, and the held-busy share no culling can beat without
    stopping someone mid-work: busy minutes over the minutes people work."""
    working = sum(s.gpus * s.minutes for s in sessions) / 60
    busy = sum(s.gpus * seg.minutes for s in sessions for seg in s.pattern if seg.busy) / 60
    people = len({s.user for s in sessions})
    return (
        f"{len(sessions)} sessions of {people} people; {working:.0f} GPU-hours held while "
        f"they work, {busy:.0f} of them busy ({percent(busy / working if working else 1)}: "
        "the most a policy can reach without stopping anyone mid-work)"
    )


def table(results: Sequence[Result]) -> str:
    lines = [
        "| policy | GPU-hours held | busy | held GPU-hours busy | machine's GPU-hours busy "
        "| wait p50 | wait p95 | servers stopped | work interrupted (runs lost) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        o = r.outcome
        unserved = f" ({len(o.still_waiting)} never served)" if o.still_waiting else ""
        lines.append(
            f"| {r.policy.name} | {o.held_gpu_hours:.0f} | {o.busy_gpu_hours:.0f} "
            f"| {percent(o.held_busy_share)} | {percent(o.machine_busy_share)} "
            f"| {wait(o.wait(0.5))} | {wait(o.wait(0.95))}{unserved} "
            f"| {sum(o.culls.values())} | {o.interrupted} ({o.runs_killed}) |"
        )
    return "\n".join(lines)


def spread(results: Sequence[Result], seeds: Sequence[int]) -> str:
    """Median and range over the other weeks, house style: "56 % (52 – 61)"."""
    if not results or not results[0].others:
        return ""
    lines = [
        f"Over {len(seeds)} generated weeks (seeds {seeds[0]}–{seeds[-1]}), median (range):",
        "",
        "| policy | held GPU-hours busy | machine's GPU-hours busy | wait p95 |",
        "|---|---|---|---|",
    ]
    for r in results:
        held = [o.held_busy_share * 100 for o in r.others]
        machine = [o.machine_busy_share * 100 for o in r.others]
        p95 = [o.wait(0.95) / 60 for o in r.others]
        lines.append(
            f"| {r.policy.name} | {_range(held, ' %')} | {_range(machine, ' %')} "
            f"| {_range(p95, ' min')} |"
        )
    return "\n".join(lines)


def verdict(results: Sequence[Result]) -> str:
    """Whether the shipped policy meets issue #16's targets, and by how much it misses."""
    shipped = next((r for r in results if r.policy.shipped), None)
    if shipped is None:
        return ""
    o = shipped.outcome
    held, p95 = o.held_busy_share, o.wait(0.95)
    held_gap = f"{(HELD_BUSY_TARGET - held) * 100:.0f} points short"
    wait_gap = f"{wait(p95 - P95_WAIT_TARGET)} over"
    parts = [
        f"held GPU-hours busy {percent(held)} "
        f"(target ≥ 85 %: {'met' if held >= HELD_BUSY_TARGET else held_gap})",
        f"p95 wait {wait(p95)} (target < 10 min: {'met' if p95 < P95_WAIT_TARGET else wait_gap})",
    ]
    return f"Against the targets of #16, {shipped.policy.name}: " + "; ".join(parts) + "."


def backlog(runs: Sequence[TrainingJob], source: str, own: Sequence[TrainingJob]) -> str:
    """What the training team's week adds: its runs, and the week's own that become jobs."""
    hours = sum(j.gpus * j.minutes for j in runs) / 60
    own_hours = sum(j.gpus * j.minutes for j in own) / 60
    users = len({j.user for j in runs})
    return (
        f"Training runs: {source}: {len(runs)} runs of {users} people, {hours:.0f} GPU-hours; "
        f"with jobs, {len(own)} more from the week itself ({own_hours:.0f} GPU-hours: its "
        "unattended runs and its 2- and 4-GPU starts)."
    )


def training_table(results: Sequence[Result]) -> str:
    lines = [
        "| policy | machine's GPU-hours busy (training) | interactive wait p95 | longest "
        "| sessions interrupted | runs done | turnaround p50 | p95 | runs stopped "
        "(needlessly) | GPU-hours lost |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        o = r.outcome
        runs = len(o.turnarounds) + len(o.unfinished)
        unserved = f" ({len(o.still_waiting)} never served)" if o.still_waiting else ""
        lines.append(
            f"| {r.policy.name} | {percent(o.machine_busy_share)} "
            f"({percent(o.run_busy / (o.gpus * o.minutes) if o.minutes else 0)}) "
            f"| {wait(o.wait(0.95))}{unserved} | {wait(o.longest_wait)} | {o.interrupted} "
            f"| {len(o.turnarounds)} of {runs} | {hours(o.turnaround(0.5))} "
            f"| {hours(o.turnaround(0.95))} | {o.stopped} ({o.needless}) "
            f"| {o.run_lost / 60:.1f} |"
        )
    return "\n".join(lines)


def goal(results: Sequence[Result]) -> str:
    """Whether the runs as jobs (the site's own grace) meet item 8's goal."""
    jobs = next(
        (r for r in results if r.policy.jobs and r.policy.grace is None and not r.policy.parking),
        None,
    )
    if jobs is None:
        return ""
    o = jobs.outcome
    busy, p95 = o.machine_busy_share, o.wait(0.95)
    short = f"{(MACHINE_BUSY_GOAL - busy) * 100:.0f} points short"
    parts = [
        f"machine busy {percent(busy)} "
        f"(goal ≥ 85 %: {'met' if busy >= MACHINE_BUSY_GOAL else short})",
        f"interactive p95 first-start wait {wait(p95)} (goal < 2 min: "
        f"{'met' if p95 < P95_WAIT_GOAL else 'not met'}{_quota_share(o)})",
        f"{o.interrupted} interactive sessions interrupted (goal 0: "
        f"{'met' if o.interrupted == 0 else 'not met'})",
    ]
    return f"Against the goal of item 8, {jobs.policy.name}: " + "; ".join(parts) + "."


def parking_goal(results: Sequence[Result]) -> str:
    """Whether the runs as jobs that park meet issue #29's goal."""
    parking = next((r for r in results if r.policy.parking and not r.policy.parks_nccl), None)
    if parking is None:
        return ""
    o = parking.outcome
    busy, p95, resume = o.machine_busy_share, o.wait(0.95), o.resume_wait(0.95)
    lost = o.run_lost / 60
    parts = [
        f"machine busy {percent(busy)} (goal ≥ 85 %: {_met(busy >= MACHINE_BUSY_GOAL)})",
        f"interactive p95 first-start wait {wait(p95)} (goal < 2 min: {_met(p95 < P95_WAIT_GOAL)})",
        f"p95 resume wait {wait(resume)}, longest {wait(max(o.resume_waits, default=0))}, "
        f"over {len(o.resume_waits)} returns to a parked server (goal < 1 min: "
        f"{_met(resume < RESUME_WAIT_GOAL)})",
        f"{o.interrupted} people stopped mid-session (goal 0: {_met(o.interrupted == 0)})",
        f"{lost:.1f} job GPU-hours lost to giving way (goal 0: {_met(lost == 0)})",
    ]
    parks = (
        f" Parked: {o.parked['jobs']} times a job for a person, {o.parked['people']} times a "
        f"person's idle server; {o.culls['max_parked']} servers stopped after "
        f"{duration(MAX_PARKED)} parked, {o.culls['parked, its GPU needed']} for work that "
        "needed their GPUs."
    )
    return (
        f"Against the goal of issue #29, {parking.policy.name}: " + "; ".join(parts) + "." + parks
    )


def turns_line(results: Sequence[Result]) -> str:
    """What turns between people (an admin's choice) give and cost, against parking alone."""
    turns = next((r for r in results if r.policy.turns), None)
    alone = next((r for r in results if r.policy.parking and not r.policy.parks_nccl), None)
    if turns is None or alone is None:
        return ""
    o, a = turns.outcome, alone.outcome
    gpu_hours = o.gpus * o.minutes / 60
    slowed = o.held_back / o.people_busy if o.people_busy else 0.0
    return (
        f"With turns between people ({turns.policy.name}): interactive p95 first-start wait "
        f"{wait(o.wait(0.95))}, longest {wait(o.longest_wait)} (parking alone: "
        f"{wait(a.wait(0.95))}, longest {wait(a.longest_wait)}); p95 resume wait "
        f"{wait(o.resume_wait(0.95))}, longest {wait(max(o.resume_waits, default=0))}, over "
        f"{len(o.resume_waits)} returns (parking alone: {wait(a.resume_wait(0.95))}); people's "
        f"busy work slowed by {slowed * 100:.1f} % (minutes waiting for their turn or a "
        f"restore, of their busy minutes); {o.parked['turns']} turns handed over, "
        f"{o.parked['turns'] / gpu_hours if gpu_hours else 0:.2f} park/restore pairs per "
        f"GPU-hour; machine busy {percent(o.machine_busy_share)}, "
        f"{o.run_lost / 60:.1f} job GPU-hours lost."
    )


def _met(met: bool) -> str:
    return "met" if met else "not met"


def _quota_share(o: Outcome) -> str:
    """Why the starts that waited 2 min or more waited: exactly 2 min is a job's default
    grace (preempt_grace, 120 s); a quota is the person's own limit or their group's."""
    long = [w for w in o.waits + o.still_waiting if w >= P95_WAIT_GOAL]
    if not long:
        return ""
    exact = sum(w == P95_WAIT_GOAL for w in long)
    held = sum(w >= P95_WAIT_GOAL for w in o.quota_waits)
    starts = "1 start" if len(long) == 1 else f"{len(long)} starts"
    return (
        f"; {starts} waited 2 min or more: {exact} exactly 2 min, {held} held by their own "
        "or their group's GPU quota at some point"
    )


def training_spread(results: Sequence[Result], seeds: Sequence[int]) -> str:
    if not results or not results[0].others:
        return ""
    lines = [
        f"Over {len(seeds)} generated training weeks (seeds {seeds[0]}–{seeds[-1]}), "
        "median (range):",
        "",
        "| policy | machine's GPU-hours busy | interactive wait p95 | longest "
        "| sessions interrupted | turnaround p50 | runs stopped | of them needlessly |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        os = r.others
        lines.append(
            f"| {r.policy.name} | {_range([o.machine_busy_share * 100 for o in os], ' %')} "
            f"| {_range([o.wait(0.95) / 60 for o in os], ' min')} "
            f"| {_range([o.longest_wait / 60 for o in os], ' min')} "
            f"| {_range([o.interrupted for o in os], '')} "
            f"| {_range([o.turnaround(0.5) / 3600 for o in os], ' h')} "
            f"| {_range([o.stopped for o in os], '')} | {_range([o.needless for o in os], '')} |"
        )
    return "\n".join(lines)


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h"


def write_readme(readme: Path, block: str) -> None:
    """Replace the text between the README's two markers with `block`."""
    text = readme.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{readme}: no place for the table (the markers {BEGIN!r} … {END!r})")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{BEGIN}\n{block}\n{END}{tail}", encoding="utf-8")


def _range(values: Sequence[float], unit: str) -> str:
    return f"{statistics.median(values):.0f}{unit} ({min(values):.0f} – {max(values):.0f})"
