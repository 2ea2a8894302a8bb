"""What giving way cost a training run, from its own journal (`stack.train`).

A run that gave way and ran again did some steps twice: those past the checkpoint it
resumed from. Attempt by attempt, the journal says where each began (its checkpoint) and
how far it got (its last step line, written even where its end was a SIGKILL):

    steps run     = Σ (furthest − resumed from), over the attempts
    steps done    = the furthest step of all − where the first attempt began
    steps redone  = steps run − steps done

and the time between an attempt's last line and the next one's start is the time the run
waited (giving way, in line, its container's start).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .train import parse, read


@dataclass(frozen=True)
class Attempt:
    number: int
    resumed_from: int  # the step of the checkpoint it began at
    furthest: int  # the last step it finished
    started: float  # Unix seconds
    last_seen: float  # its last line's time
    ended: str | None  # "done", "sigterm", or None: killed (SIGKILL) or still running

    @property
    def steps_run(self) -> int:
        return self.furthest - self.resumed_from


@dataclass(frozen=True)
class LostWork:
    attempts: tuple[Attempt, ...]
    step_seconds: float  # as the first attempt was told

    @property
    def finished(self) -> bool:
        return bool(self.attempts) and self.attempts[-1].ended == "done"

    @property
    def steps_run(self) -> int:
        return sum(a.steps_run for a in self.attempts)

    @property
    def steps_done(self) -> int:
        if not self.attempts:
            return 0
        return max(a.furthest for a in self.attempts) - self.attempts[0].resumed_from

    @property
    def steps_redone(self) -> int:
        return self.steps_run - self.steps_done

    @property
    def seconds_redone(self) -> float:
        return self.steps_redone * self.step_seconds

    @property
    def waited_seconds(self) -> float:
        """Between attempts: from an attempt's last line to the next one's start."""
        pairs = zip(self.attempts, self.attempts[1:], strict=False)
        return sum(later.started - earlier.last_seen for earlier, later in pairs)

    def figures(self) -> dict[str, Any]:
        """For the replay's report, one row per job."""
        return {
            "attempts": len(self.attempts),
            "finished": self.finished,
            "steps_done": self.steps_done,
            "steps_redone": self.steps_redone,
            "seconds_redone": round(self.seconds_redone, 3),
            "waited_seconds": round(self.waited_seconds, 3),
        }


def lost_work(lines: Sequence[dict[str, Any]]) -> LostWork:
    """The figures of a journal's lines, as `train.read` gives them."""
    attempts: list[Attempt] = []
    step_seconds = 0.0
    for line in lines:
        event, when = line["event"], float(line.get("time", 0.0))
        if event == "start":
            step = int(line["step"])
            attempts.append(Attempt(len(attempts) + 1, step, step, when, when, None))
            step_seconds = step_seconds or float(line.get("step_seconds", 0.0))
            continue
        if not attempts:
            continue  # lines of no attempt: not this script's journal
        now = attempts[-1]
        furthest = max(now.furthest, int(line.get("step", now.furthest)))
        ended = str(line["why"]) if event == "end" else now.ended
        attempts[-1] = Attempt(now.number, now.resumed_from, furthest, now.started, when, ended)
    return LostWork(tuple(attempts), step_seconds)


def read_journal(text: str) -> LostWork:
    """The figures of a journal's text (as read from a user's home volume)."""
    return lost_work(parse(text))


def read_file(path: Path) -> LostWork:
    return lost_work(read(path))
