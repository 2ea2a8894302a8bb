"""The slice of the trace a replay plays, and the simulator's figures for the same slice.

A slice is one day's hours, `FROM-TO`: the sessions that arrive in it and the training
runs submitted in it. With jobs, the week's own training starts are jobs, as the
simulator makes them (`simulation.jobs.as_jobs`): the stack replays the same split. What
began before the slice (a run submitted at midnight) is in neither replay; what goes on
past its end is cut there in both.

The simulator's side is its own replay (`simulation.week.replay_week`, the policy of
jobs that park, or of jobs alone) of the slice's sessions and runs, for the minutes up to
the slice's end, with its measures read for the slice's minutes only.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

from simulation.jobs import TrainingJob, as_jobs
from simulation.measures import Outcome
from simulation.model import span
from simulation.policies import Policy, with_jobs, with_parking
from simulation.site import Site
from simulation.trace import Session
from simulation.week import replay_week

HOURS = re.compile(r"^(\d{1,2})(?::(\d{2}))?-(\d{1,2})(?::(\d{2}))?$")


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime

    @property
    def minutes(self) -> int:
        return round((self.end - self.start).total_seconds() / 60)

    def holds(self, moment: datetime) -> bool:
        return self.start <= moment < self.end

    def __str__(self) -> str:
        return f"{self.start:%a %Y-%m-%d %H:%M}–{self.end:%H:%M}"


def window(day: date, hours: str = "0-24") -> Window:
    """`hours` as `9-11` or `9:30-11:30` on `day`; ValueError saying what is wrong."""
    found = HOURS.match(hours.strip())
    if not found:
        raise ValueError(f"--hours takes FROM-TO such as 9-11 or 9:30-11:30, got {hours!r}")
    h1, m1, h2, m2 = (int(g or 0) for g in found.groups())
    start = datetime.combine(day, time()) + timedelta(hours=h1, minutes=m1)
    end = datetime.combine(day, time()) + timedelta(hours=h2, minutes=m2)
    if not start < end <= datetime.combine(day, time()) + timedelta(days=1):
        raise ValueError(f"--hours {hours}: FROM must come before TO, within the day")
    return Window(start, end)


def busiest_day(sessions: Sequence[Session], jobs: Sequence[TrainingJob]) -> date:
    """The weekday whose arrivals and submissions ask for the most GPU-minutes."""
    asked: Counter[date] = Counter()
    for s in sessions:
        asked[s.arrival.date()] += s.gpus * s.minutes
    for j in jobs:
        asked[j.submitted.date()] += j.gpus * j.minutes
    weekdays = {d: n for d, n in asked.items() if d.weekday() < 5} or dict(asked)
    if not weekdays:
        raise ValueError("the trace is empty")
    return max(weekdays, key=lambda d: (weekdays[d], d))


@dataclass(frozen=True)
class Cut:
    """The slice's input, as the trace says it, and as the stack plays it."""

    sessions: tuple[Session, ...]  # arriving in the slice (the simulator's input)
    backlog: tuple[TrainingJob, ...]  # runs submitted in the slice (the simulator's input)
    people: tuple[Session, ...]  # what stays a notebook session
    jobs: tuple[TrainingJob, ...]  # what is submitted as a job: the runs and the week's own


def cut(sessions: Sequence[Session], backlog: Sequence[TrainingJob], slice_: Window) -> Cut:
    mine = tuple(s for s in sessions if slice_.holds(s.arrival))
    runs = tuple(j for j in backlog if slice_.holds(j.submitted))
    people, own = as_jobs(mine)
    every = sorted([*own, *runs], key=lambda j: j.submitted)
    return Cut(mine, runs, tuple(people), tuple(j for j in every if slice_.holds(j.submitted)))


def policy(site: Site, parking: bool) -> Policy:
    return with_parking(site) if parking else with_jobs(site)


def simulated(the_cut: Cut, slice_: Window, site: Site, chosen: Policy) -> dict[str, Any]:
    """The simulator's figures for the slice, in the trace's own time (simulated seconds)."""
    arrivals = [s.arrival for s in the_cut.sessions] + [j.submitted for j in the_cut.backlog]
    if not arrivals:
        raise ValueError(f"nothing arrives in {slice_}")
    origin, _ = span(arrivals)
    offset = round((slice_.start - origin).total_seconds() / 60)
    upto = offset + slice_.minutes
    outcome = replay_week(list(the_cut.sessions), the_cut.backlog, site, chosen, minutes=upto)
    return figures_of(outcome, offset, slice_.minutes)


def figures_of(o: Outcome, offset: int, minutes: int) -> dict[str, Any]:
    """An Outcome's figures for its minutes from `offset` on (the slice)."""
    busy = sum(o.busy[offset : offset + minutes]) / 60
    waits = o.waits + o.still_waiting
    return {
        "gpu_hours_busy": round(busy, 2),
        "machine_busy": round(busy / (o.gpus * minutes / 60), 4) if minutes else 0.0,
        "starts": len(waits),
        "never_granted": len(o.still_waiting),
        # the simulator's starts take no time: granted and ready are the same moment
        "wait_granted": {"p50": o.wait(0.5), "p95": o.wait(0.95), "max": o.longest_wait},
        "wait_ready": {"p50": o.wait(0.5), "p95": o.wait(0.95), "max": o.longest_wait},
        "interrupted": o.interrupted,
        "parked_jobs": o.parked["jobs"],
        "parked_people": o.parked["people"],
        "restored": len(o.resume_waits),
        "resume_wait_p95": o.resume_wait(0.95),
        "jobs": len(o.turnarounds) + len(o.unfinished),
        "jobs_done": len(o.turnarounds),
        "gave_way": o.stopped,
        "gpu_hours_lost": round(o.run_lost / 60, 2),
        # minute by minute, for the plot beside the stack's samples
        "series": {
            "held": o.held[offset : offset + minutes],
            "busy": o.busy[offset : offset + minutes],
            "wanted": o.wanted[offset : offset + minutes],
        },
    }
