"""Turns between two people on one GPU (a profile's `turns`, docs/parking.md).

A person's start that finds no GPU may join one whose one person allows turns too (the
pool's `_turn_on`): it starts parked, bound to that GPU. When the parked person wants the
GPU (a cell run, a process of theirs on it: `Restoring.wake`), the person on it is parked
for them by the core's rule (`core.parking.decide`, rule 5): at once if their GPU is idle,
else once their turn of `turn_quantum` is over; then the one who woke is restored.
Work the driver cannot park (several CUDA processes) stays on the GPU, and the other
waits, told why.
"""

from __future__ import annotations

import math

from ...core.parking import Bound, Residency, decide
from ...core.pool import Grant
from .giving_way import GivingWay


class Turns(GivingWay):
    def _end_turn(self, resident: Grant, waiting: Grant) -> None:
        """`waiting` wants the GPU `resident` is on, in turns: park `resident` if its turn
        is over or its GPU idle. The reason it cannot be parked, if any, is kept for the
        lease of `waiting`."""
        parker = self.parker
        if parker is None or resident.key in self._turning:
            return
        now = self.broker.clock()
        unparkable = parker.why_not(resident, for_turn=True)
        self._turn_blocked[waiting.key] = unparkable
        on_gpu = Bound(
            str(resident.key),
            person=True,
            residency=Residency.RESIDENT,
            since=self._on_gpu_since.get(resident.key, resident.since),
            idle_since=self.broker.idle_since(resident.key),
            unparkable=unparkable,
        )
        wants = Bound(str(waiting.key), True, Residency.PARKED, parker.since(waiting.key) or now)
        step = decide([on_gpu, wants], 0, now, math.inf, parker.turn_quantum)
        if step is None or step.action != "park":
            return
        self._turning.add(resident.key)
        self._spawn(self._park_for_turn(resident, waiting, step.reason))

    async def _park_for_turn(self, resident: Grant, waiting: Grant, reason: str) -> None:
        assert self.parker is not None
        try:
            refused = await self.parker.park(resident, for_turn=True)
        finally:
            self._turning.discard(resident.key)
        if refused:
            self._turn_blocked[waiting.key] = refused
            self.log.warning(
                "gpuspawner: %s stays on its GPU, %s waits: %s",
                resident.holder.name,
                waiting.holder.name,
                refused,
            )
            return
        self.log.info(
            "gpuspawner: %s parked: %s (%s's turn)",
            resident.holder.name,
            reason,
            waiting.holder.name,
        )

    def turn_blocked(self, key: int) -> str:
        """Why the person on the GPU this parked server shares in turns cannot be parked for
        it ("" if nothing stands in the way but the end of their turn)."""
        return self._turn_blocked.get(key, "")

    def _on_gpu(self, key: int) -> None:
        """The server's work is back on its GPU: its turn starts now."""
        self._on_gpu_since[key] = self.broker.clock()
        self._turn_blocked.pop(key, None)

    def _forget_turns(self, key: int) -> None:
        self._on_gpu_since.pop(key, None)
        self._turn_blocked.pop(key, None)
        self._turning.discard(key)
