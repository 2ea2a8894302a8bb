"""When the next GPU could free up, and why: the only estimate a waiting user is given.

Notebooks say nothing about how long they will run, so an estimate has a basis
only where a rule ends a server by itself: its group's `max_age` (certain: the
server stops then, busy or not) and its `gpu_idle_timeout` (if its GPUs stay
idle from now on). Anything else would be a guess, and a guess on the pending
page reads as a promise; so where no holder has such a clock there is no
estimate at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .limits import Limited
from .words import at_clock, their_server

NEVER = Limited(None, None)


@dataclass(frozen=True)
class Holding:
    """A server holding GPUs, with the clocks that could end it."""

    user: str
    server: str
    units: int  # that the waiter could use
    since: float
    idle_since: float | None = None  # since when all its GPUs have been idle, if they are
    max_age: Limited = NEVER
    gpu_idle_timeout: Limited = NEVER
    noun: str = "GPU"  # what a unit is called: "GPU", "MIG instance", "shared slot"

    @property
    def frees(self) -> str:
        """ "1 GPU frees up", "2 MIG instances free up"."""
        one = self.units == 1
        return f"{self.units} {self.noun}{'' if one else 's'} {'frees' if one else 'free'} up"


@dataclass(frozen=True)
class Freeing:
    at: float
    units: int
    words: str  # "1 GPU frees up when bob's server reaches its max_age at 14:20 UTC"


def next_freeing(holdings: Iterable[Holding], now: float) -> Freeing | None:
    """The earliest moment a holder's own rules return its GPUs; None without any basis.

    On a tie, `max_age` (which happens for certain) wins over an idle clock (which
    happens only if the GPUs stay idle).
    """
    found: list[tuple[float, int, Freeing]] = []
    for held in holdings:
        frees = held.frees
        server = their_server(held.user, held.server)
        if held.max_age.value is not None:
            at = max(now, held.since + held.max_age.value)
            words = f"{frees} when {server} reaches its max_age at {at_clock(at, now)}"
            found.append((at, 0, Freeing(at, held.units, words)))
        if held.gpu_idle_timeout.value is not None and held.idle_since is not None:
            at = max(now, held.idle_since + held.gpu_idle_timeout.value)
            words = f"{frees} at {at_clock(at, now)} if {server} stays idle (gpu_idle_timeout)"
            found.append((at, 1, Freeing(at, held.units, words)))
    return min(found, key=lambda f: f[:2])[2] if found else None
