"""What one replay of a trace under one policy measured, and the figures read from it.

GPU time is counted in GPU-minutes, one simulated minute at a time: held (in a
grant, or for the fixed split, dealt to someone) and busy (held, and the trace
says the GPUs were working). Waits run from a person's first request to the
grant, across refusals and retries. A training run (a job, or under today's
policies a notebook server of its own) counts apart: its waits are in its
turnaround, from submission to the end of its run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from figures import percentile  # benchmarks/figures.py: the benchmarks' one percentile


@dataclass
class Outcome:
    gpus: int
    minutes: int = 0  # simulated minutes
    held: list[int] = field(default_factory=list)  # GPUs held, minute by minute
    busy: list[int] = field(default_factory=list)  # GPUs busy, minute by minute
    wanted: list[int] = field(default_factory=list)  # GPUs people were waiting for
    waits: list[float] = field(default_factory=list)  # seconds, one per granted request
    # seconds: of the waits (still_waiting too), those that a quota held at some point (the
    # person's own or their group's GPUs all in use: a wait the admin's limits chose)
    quota_waits: list[float] = field(default_factory=list)
    still_waiting: list[float] = field(default_factory=list)  # seconds, ungranted at the end
    refusals: Counter[str] = field(default_factory=Counter)  # "capacity", "limit"
    culls: Counter[str] = field(default_factory=Counter)  # why servers were stopped
    interrupted: int = 0  # culls of a person still working: they came back later
    runs_killed: int = 0  # of those, culls that stopped a running GPU job
    lost: int = 0  # GPU-minutes of those runs, thrown away and run again
    capped: int = 0  # fixed split: sessions that got fewer GPUs than they asked for
    # training runs (jobs, or notebook servers of their own under today's policies)
    turnarounds: list[float] = field(default_factory=list)  # seconds, submitted → run done
    unfinished: list[float] = field(default_factory=list)  # seconds, runs not done at the end
    run_busy: int = 0  # GPU-minutes busy with training runs
    stopped: int = 0  # runs stopped before their end: jobs that gave way, servers culled
    needless: int = 0  # of the jobs, those that gave way to a start already freed for
    run_lost: int = 0  # GPU-minutes of those runs' work thrown away
    jobs_refused: int = 0  # jobs whose submission was refused (max_jobs reached) at first
    jobs_failed: int = 0  # jobs stopped at max_runtime
    # parking (`parking.ParkingReplay`)
    parked: Counter[str] = field(default_factory=Counter)  # parks of "jobs" and of "people"
    resume_waits: list[float] = field(default_factory=list)  # seconds: a cell run → restored
    people_busy: int = 0  # minutes a person's server had busy work to do
    held_back: int = 0  # of those, minutes it waited to be restored (turns, or a job parking)

    def record_wait(self, seconds: float, quota_held: bool) -> None:
        self.waits.append(seconds)
        if quota_held:
            self.quota_waits.append(seconds)

    def record(self, held: int, busy: int, wanted: int) -> None:
        self.minutes += 1
        self.held.append(held)
        self.busy.append(busy)
        self.wanted.append(wanted)

    @property
    def held_busy_share(self) -> float:
        """Of the GPU-hours held, the share that was busy (1.0 when nothing was held)."""
        held = sum(self.held)
        return sum(self.busy) / held if held else 1.0

    @property
    def machine_busy_share(self) -> float:
        """Of all the machine's GPU-hours in the replay, the share that was busy."""
        return sum(self.busy) / (self.gpus * self.minutes) if self.minutes else 0.0

    def resume_wait(self, fraction: float) -> float:
        """A percentile of the resume waits in seconds (0 with none)."""
        return percentile(self.resume_waits, fraction) if self.resume_waits else 0.0

    def wait(self, fraction: float) -> float:
        """A percentile of the wait in seconds; requests never granted count as waiting
        until the end, a lower bound on their wait."""
        waits = self.waits + self.still_waiting
        return percentile(waits, fraction) if waits else 0.0

    def turnaround(self, fraction: float) -> float:
        """A percentile of the training runs' turnaround in seconds; a run not done at the
        end counts as ending then, a lower bound on its turnaround."""
        times = self.turnarounds + self.unfinished
        return percentile(times, fraction) if times else 0.0

    @property
    def longest_wait(self) -> float:
        return max(self.waits + self.still_waiting, default=0.0)

    @property
    def held_gpu_hours(self) -> float:
        return sum(self.held) / 60

    @property
    def busy_gpu_hours(self) -> float:
        return sum(self.busy) / 60
