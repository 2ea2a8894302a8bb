"""The documented synthetic week: a team of 12 sharing 8 GPUs, Monday to Sunday.

Every number below is either tied to a published figure or named as an
assumption; benchmarks/README.md ("Utilisation over a week") lists them with
their sources. The generator is seeded, and its output for the default seed is
committed as team-week.csv, so the published table replays from a file.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from .jobs import CHECKPOINT_MINUTES, TrainingJob
from .trace import Segment, Session

WEEK_START = datetime(2026, 11, 30)  # a Monday
WORKDAYS = 5  # assumption: nobody starts a session at the weekend
RESEARCHERS = tuple(f"researcher{i}" for i in range(1, 5))
STUDENTS = tuple(f"student{i}" for i in range(1, 9))

# Assumptions about the team (no published figure for a team this size was found).
STUDENT_DAY_CHANCE = 0.5  # a student works on a given weekday
STUDENT_ARRIVAL_HOURS = (9.0, 16.0)  # uniform
STUDENT_WORK_HOURS = (1.0, 3.0)  # uniform
RESEARCHER_ARRIVAL_HOURS = (8.5, 10.5)  # uniform; researchers work every weekday
RESEARCHER_WORK_HOURS = (2.0, 6.0)  # uniform
RESEARCHER_GPUS = {1: 0.6, 2: 0.3, 4: 0.1}  # GPUs asked, with their chances
AWAY_RUN_CHANCE = 0.5  # a researcher's day ends with a run left going (tab closed)
AWAY_RUN_HOURS = (2.0, 12.0)  # uniform
BUSY_RUN_MINUTES = 20.0  # mean length of one busy stretch at the notebook (exponential)

# Published: the share of a held GPU's time that it sits idle. Philly (Jeon et al., USENIX
# ATC 2019), as measured per minute from its public trace by affinode's case study: 49 %
# for jobs under 6 h, 25 % for jobs over 24 h. Each session draws its own share between.
IDLE_SHARE = (0.25, 0.49)

# Assumption: how a session ends, equally likely (no published figure found).
ENDINGS = ("stop", "close", "open")

# The training team's backlog (item 8), each an assumption: the researchers' training runs,
# on top of the week above. It is sized to be more than the machine can run in the week
# once people have had their GPUs (about 1,100 of its 1,344 GPU-hours): about 1,240
# GPU-hours of runs, plus the week's own (as jobs, about 140), so that some still wait when
# the week ends: with less, the machine's busy share would measure the backlog, not the
# way the GPUs are shared.
JOBS_WAITING_AT_START = 30  # submitted before the week: all waiting on Monday at 0:00
JOBS_PER_WEEKDAY = 14  # submitted from 9:00 to 19:00, uniform; none at the weekend
JOB_SUBMIT_HOURS = (9.0, 19.0)
JOB_GPUS = {1: 0.5, 2: 0.3, 4: 0.2}  # GPUs a run asks for, with their chances
JOB_RUN_HOURS = (1.0, 12.0)  # uniform: the work a run needs on its GPUs


def generate(seed: int = 1) -> list[Session]:
    """The team's week of demand, in arrival order."""
    rng = random.Random(seed)
    sessions = []
    for day in range(WORKDAYS):
        midnight = WEEK_START + timedelta(days=day)
        for user in RESEARCHERS:
            sessions.append(_researcher_day(rng, user, midnight))
        for user in STUDENTS:
            if rng.random() < STUDENT_DAY_CHANCE:
                sessions.append(_student_day(rng, user, midnight))
    return sorted(sessions, key=lambda s: s.arrival)


def generate_backlog(seed: int = 1) -> list[TrainingJob]:
    """The training team's runs for the week of `generate(seed)`, in submission order (its
    own random stream: the week of sessions is the same with or without it)."""
    rng = random.Random(f"backlog-{seed}")
    jobs = [_run(rng, WEEK_START) for _ in range(JOBS_WAITING_AT_START)]
    for day in range(WORKDAYS):
        midnight = WEEK_START + timedelta(days=day)
        for _ in range(JOBS_PER_WEEKDAY):
            jobs.append(_run(rng, midnight + timedelta(hours=rng.uniform(*JOB_SUBMIT_HOURS))))
    return sorted(jobs, key=lambda j: j.submitted)


def _run(rng: random.Random, at: datetime) -> TrainingJob:
    gpus = rng.choices(list(JOB_GPUS), weights=list(JOB_GPUS.values()))[0]
    minutes = round(rng.uniform(*JOB_RUN_HOURS) * 60)
    user = rng.choice(RESEARCHERS)
    return TrainingJob(user, ("researchers",), _minute(at), gpus, minutes, CHECKPOINT_MINUTES)


def _student_day(rng: random.Random, user: str, midnight: datetime) -> Session:
    arrival = midnight + timedelta(hours=rng.uniform(*STUDENT_ARRIVAL_HOURS))
    pattern = _working(rng, rng.uniform(*STUDENT_WORK_HOURS) * 60)
    return Session(user, ("students",), "", _minute(arrival), 1, pattern, rng.choice(ENDINGS), True)


def _researcher_day(rng: random.Random, user: str, midnight: datetime) -> Session:
    arrival = midnight + timedelta(hours=rng.uniform(*RESEARCHER_ARRIVAL_HOURS))
    gpus = rng.choices(list(RESEARCHER_GPUS), weights=list(RESEARCHER_GPUS.values()))[0]
    pattern = _working(rng, rng.uniform(*RESEARCHER_WORK_HOURS) * 60)
    then = rng.choice(ENDINGS)
    if rng.random() < AWAY_RUN_CHANCE:
        away = round(rng.uniform(*AWAY_RUN_HOURS) * 60)
        pattern += (Segment("A", away),)
        then = "close"  # they went home: nobody is there to stop it
    return Session(user, ("researchers",), "", _minute(arrival), gpus, pattern, then, True)


def _working(rng: random.Random, minutes: float) -> tuple[Segment, ...]:
    """Idle and busy stretches at the notebook, alternating, adding up to `minutes`."""
    idle_share = rng.uniform(*IDLE_SHARE)
    idle_mean = BUSY_RUN_MINUTES * idle_share / (1 - idle_share)
    segments: list[Segment] = []
    left = max(1, round(minutes))
    kind = "I"  # a session starts with reading and editing
    while left > 0:
        mean = idle_mean if kind == "I" else BUSY_RUN_MINUTES
        length = min(left, max(1, round(rng.expovariate(1 / mean))))
        segments.append(Segment(kind, length))
        left -= length
        kind = "B" if kind == "I" else "I"
    return tuple(segments)


def _minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)
