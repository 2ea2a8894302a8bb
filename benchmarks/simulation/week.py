"""A week replayed under one policy: people's sessions, and a training team's runs as
notebook servers, as jobs, or as jobs that park (the simulator's front door)."""

from __future__ import annotations

from collections.abc import Sequence

from .board import JobsReplay
from .jobs import TrainingJob, as_jobs, as_servers
from .measures import Outcome
from .model import Replay, replay, span
from .parking import ParkingReplay
from .policies import Policy
from .site import Site
from .trace import Session


def replay_week(
    sessions: list[Session],
    backlog: Sequence[TrainingJob],
    site: Site,
    policy: Policy,
    minutes: int | None = None,
) -> Outcome:
    """A week of sessions and training runs under `policy`: with jobs, the week's own
    unattended runs and 2- and 4-GPU starts are jobs too (`as_jobs`); without, each run of
    the backlog is a notebook server of its own (`as_servers`)."""
    arrivals = [s.arrival for s in sessions] + [j.submitted for j in backlog]
    start, whole = span(arrivals)
    minutes = whole if minutes is None else minutes
    if policy.jobs:
        people, own = as_jobs(sessions)
        jobs = sorted([*own, *backlog], key=lambda j: j.submitted)
        board = ParkingReplay if policy.parking else JobsReplay
        return board(people, jobs, site, policy, start, minutes).run()
    if not backlog:
        return replay(sessions, site, policy, minutes)
    runs = as_servers(backlog)
    every = sorted([*sessions, *runs], key=lambda s: s.arrival)
    marked = {id(s) for s in runs}
    return Replay(
        every, site, policy, start, minutes, [i for i, s in enumerate(every) if id(s) in marked]
    ).run()


def check_jobs(site: Site, jobs: Sequence[TrainingJob]) -> None:
    """TraceError naming the first run this hub would refuse whatever was free: the same
    profiles and limits as a server on as many GPUs."""
    site.check(as_servers(jobs))
