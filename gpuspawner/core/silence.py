"""Since when the engine (Docker, a swarm) has not answered, and what it said last.

Only the engine's positive word ends a server: "no such container" (a 404), or an
inspect that says it exited. Any other failure (a 500, a timeout, a refused
connection) is silence, not an answer: the server runs on, and this record says
since when each of the hub's questions has gone unanswered, for the admin page
and, past a bound, for the server's own user. A question answered again is
forgotten.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass


@dataclass(frozen=True)
class Silence:
    """One question the engine has not answered since `since` (the hub's clock)."""

    since: float
    question: str  # in words: "is alice's server running?", "which containers run?"
    error: str  # the last failure, as the engine client put it

    def lasted(self, now: float) -> float:
        return max(0.0, now - self.since)


class Silences:
    """The unanswered questions, by a key the asker chooses (a server's id, "list")."""

    def __init__(self) -> None:
        self._open: dict[Hashable, Silence] = {}

    def unanswered(self, key: Hashable, now: float, question: str, error: str) -> Silence:
        """The question went unanswered again; its silence dates from the first time."""
        since = self._open[key].since if key in self._open else now
        self._open[key] = Silence(since, question, error)
        return self._open[key]

    def answered(self, key: Hashable) -> None:
        self._open.pop(key, None)

    def of(self, key: Hashable) -> Silence | None:
        return self._open.get(key)

    def longest(self) -> Silence | None:
        """The oldest silence: since when the engine has not answered the hub in full."""
        return min(self._open.values(), key=lambda s: s.since, default=None)
