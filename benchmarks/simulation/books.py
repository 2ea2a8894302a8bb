"""The core's `Pool`, remembering its answers until its books change.

A replay asks the pool the same questions minute after minute: a refused person
asks again every few minutes, each waiting job is tried every minute, and the
parking rows ask where each start would go several times a minute. Between two
changes of the books (a grant made, parked, restored, stopping or released) the
pool's answer to the same question is the same: the simulator marks no GPU
unhealthy, external or unreachable, and a user's limits weigh only what the
books hold. So it is asked once and remembered: every answer is still the
core's own. (One thread: the replay's.)
"""

from __future__ import annotations

from typing import Any, TypeVar

from gpuspawner.core.grants import Admission, Grant, Holder
from gpuspawner.core.limits import LimitExceeded
from gpuspawner.core.pool import NotEnoughGPUs, Pool
from gpuspawner.core.units import Request

G = TypeVar("G", Grant, Grant | None)


class RememberingPool(Pool):
    def __init__(self, *args: Any, **kwargs: Any) -> None:  # Pool's
        super().__init__(*args, **kwargs)
        # (holder, request, borrows, keep) → the admission asked, and the refusal
        self._refused: dict[tuple[Any, ...], tuple[Admission | None, Exception]] = {}
        self._taken: dict[tuple[Any, ...], frozenset[str] | None] = {}  # would_take's

    def allocate(
        self,
        holder: Holder,
        request: Request | int,
        admit: Admission | None = None,
        borrows: bool = True,
        keep: frozenset[str] = frozenset(),
    ) -> Grant:
        question = (holder, request, borrows, keep)
        asked = self._refused.get(question)
        if asked is not None and asked[0] == admit:  # the same limits (a bound method)
            raise asked[1].with_traceback(None)
        try:
            grant = super().allocate(holder, request, admit, borrows, keep)
        except (NotEnoughGPUs, LimitExceeded) as refusal:
            self._refused[question] = (admit, refusal)
            raise
        return self._changing(grant)

    def would_take(
        self, request: Request, freed: frozenset[str], claimed: frozenset[str] = frozenset()
    ) -> frozenset[str] | None:
        question = (request, freed, claimed)
        if question not in self._taken:
            self._taken[question] = super().would_take(request, freed, claimed)
        return self._taken[question]

    def park(self, key: int) -> Grant:
        return self._changing(super().park(key))

    def restore(self, key: int, admit: Admission | None = None) -> Grant:
        return self._changing(super().restore(key, admit))

    def begin_release(self, key: int) -> Grant | None:
        return self._changing(super().begin_release(key))

    def release(self, key: int) -> Grant | None:
        return self._changing(super().release(key))

    def _changing(self, grant: G) -> G:
        """What a change returned, once it is made (one refused changes nothing)."""
        self._refused.clear()
        self._taken.clear()
        return grant
