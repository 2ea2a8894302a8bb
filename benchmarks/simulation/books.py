"""The core's `Pool`, remembering its answers until its books change.

A replay asks the pool the same questions minute after minute: a refused person
asks again every few minutes, each waiting job is tried every minute, and the
parking rows ask where each start would go, and try restores the GPU's grace
still holds back, several times a minute. Between two
changes of the books (a grant made, parked, restored, stopping or released) the
pool's answer to the same question is the same: the simulator marks no GPU
unhealthy, external or unreachable, and a user's limits weigh only what the
books hold. So it is asked once and remembered: every answer is still the
core's own. Its `changes` count the changes of the books, for the replay's
passes that skip a look at the same books (`JobsReplay.unless_seen`). (One
thread: the replay's.)
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar, cast

from gpuspawner.core.grants import Admission, Grant, Holder
from gpuspawner.core.limits import LimitExceeded
from gpuspawner.core.pool import NotEnoughGPUs, Pool, StillLent
from gpuspawner.core.units import Request

A = TypeVar("A")
G = TypeVar("G", Grant, Grant | None)


class RememberingPool(Pool):
    def __init__(self, *args: Any, **kwargs: Any) -> None:  # Pool's
        super().__init__(*args, **kwargs)
        # a change's question and the admission asked → the refusal (each admission its
        # own: two sessions of one server waiting at once ask in turns, with their own limits)
        self._refused: dict[tuple[tuple[Any, ...], Admission | None], Exception] = {}
        self._answers: dict[tuple[Any, ...], Any] = {}  # the questions that take nothing
        self.changes = 0  # how many times its books changed: equal counts, the same books

    def allocate(
        self,
        holder: Holder,
        request: Request | int,
        admit: Admission | None = None,
        borrows: bool = True,
        keep: frozenset[str] = frozenset(),
    ) -> Grant:
        made = partial(super().allocate, holder, request, admit, borrows, keep)
        return self._unless_refused(("allocate", holder, request, borrows, keep), admit, made)

    def would_take(
        self, request: Request, freed: frozenset[str], claimed: frozenset[str] = frozenset()
    ) -> frozenset[str] | None:
        answer = partial(super().would_take, request, freed, claimed)
        return self._remembered(("would_take", request, freed, claimed), answer)

    def free_count(self, request: Request | None = None) -> int:
        return self._remembered(("free_count", request), partial(super().free_count, request))

    def parked_units(self) -> frozenset[str]:
        """The units parked grants are bound to."""
        return self._remembered(
            ("parked_units",),
            lambda: frozenset(u for g in self.grants() if g.parked for u in g.ids),
        )

    def park(self, key: int) -> Grant:
        return self._changing(super().park(key))

    def restore(self, key: int, admit: Admission | None = None) -> Grant:
        return self._unless_refused(("restore", key), admit, partial(super().restore, key, admit))

    def begin_release(self, key: int) -> Grant | None:
        return self._changing(super().begin_release(key))

    def release(self, key: int) -> Grant | None:
        return self._changing(super().release(key))

    def _unless_refused(
        self, question: tuple[Any, ...], admit: Admission | None, change: Callable[[], Grant]
    ) -> Grant:
        """The change made, unless the same question with the same limits (`admit`, a bound
        method) was refused since the books last changed: then that refusal again."""
        refused = self._refused.get((question, admit))
        if refused is not None:
            raise refused.with_traceback(None)
        try:
            grant = change()
        except (NotEnoughGPUs, StillLent, LimitExceeded) as refusal:
            self._refused[question, admit] = refusal
            raise
        return self._changing(grant)

    def _remembered(self, question: tuple[Any, ...], answer: Callable[[], A]) -> A:
        if question not in self._answers:
            self._answers[question] = answer()
        return cast(A, self._answers[question])

    def _changing(self, grant: G) -> G:
        """What a change returned, once it is made (one refused changes nothing)."""
        self.changes += 1
        self._refused.clear()
        self._answers.clear()
        return grant
