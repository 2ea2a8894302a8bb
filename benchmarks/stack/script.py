"""What one person of the trace does, and when: pure, so that it is checked without a hub.

A session's pattern counts from the grant on (benchmarks/simulation/trace.py): each part
sets the person's kernel busy or idle (the load file) and says whether they are at the
notebook (Jupyter activity). Where busy work begins, the person runs a cell: on a parked
server that is the documented wake. When the pattern ends they stop the server, or leave
it running with the tab closed (no activity) or open (activity goes on).

The people are modelled as the simulator models them (benchmarks/simulation/model.py):
- coming back to a server of theirs that still runs, they use it if it has the profile
  they want, else they stop it and ask anew (`on_arrival`);
- a person whose server the hub stops while they still work comes back when the part
  they were in would have ended, asks again, and goes on from the next part; a busy part
  that was stopped is run again from its start, at the notebook (`after_stopped`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpuspawner.core.profiles import Profile

from .jobs import profile_for
from .timescale import Part, ScaledSession


@dataclass(frozen=True)
class Act:
    """What the person does `after` seconds from the grant, until the next act."""

    after: float
    busy: bool  # their kernel's GPUs are busy
    present: bool  # they are at the notebook: Jupyter sees activity
    cell: bool  # they run a cell now (on a parked server: the wake)


@dataclass(frozen=True)
class Script:
    user: str
    server: str
    profile: str
    at: float  # real seconds from the replay's start: when they first ask
    parts: tuple[Part, ...]
    then: str  # "stop", "close" or "open"

    @property
    def acts(self) -> tuple[Act, ...]:
        acts, after, busy_before = [], 0.0, False
        for part in self.parts:
            acts.append(Act(after, part.busy, part.present, part.busy and not busy_before))
            after, busy_before = after + part.seconds, part.busy
        return tuple(acts)

    @property
    def seconds(self) -> float:
        """From the grant to the pattern's end, where `then` happens."""
        return sum(p.seconds for p in self.parts)

    def act_at(self, elapsed: float) -> Act | None:
        """The act under way `elapsed` seconds after the grant; None past the pattern."""
        under_way = [a for a in self.acts if a.after <= elapsed]
        return under_way[-1] if under_way and elapsed < self.seconds else None


def script_of(session: ScaledSession, profiles: Sequence[Profile]) -> Script:
    s = session.session
    return Script(
        s.user, s.server, profile_for(s.gpus, profiles), session.at, session.parts, s.then
    )


def on_arrival(script: Script, running_profile: str | None) -> str:
    """What a person arriving does: "start" (nothing of theirs runs), "use" (their server
    runs with the profile they want), or "restart" (stop it, and ask anew)."""
    if running_profile is None:
        return "start"
    return "use" if running_profile == script.profile else "restart"


def after_stopped(script: Script, elapsed: float) -> tuple[float, Script | None]:
    """The hub stopped the person's server `elapsed` seconds after its grant: in how many
    seconds they ask again, and what they do then (None: nothing, their pattern was over)."""
    start = 0.0
    for n, part in enumerate(script.parts):
        end = start + part.seconds
        if elapsed < end:
            if part.busy:  # the run was lost: run again from its start, at the notebook
                rest = (Part("B", part.seconds), *script.parts[n + 1 :])
            else:
                rest = script.parts[n + 1 :]
            back = end - elapsed
            if not rest:
                return back, None
            return back, replace(script, parts=rest)
        start = end
    return 0.0, None
