"""The broker's part that gives GPUs back, on the engine's word alone.

A server that ended keeps its grant, shown as stopping, until the engine confirms
every container of it gone; then the GPUs go back to the pool, the usage ledger
closes the grant, and the waiting line gets a pass. A removal the engine did not
confirm is asked again at the next monitor tick. Used from the hub's event loop
only; the engine's calls run in the broker's worker thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor, Future

from ...core.pool import Grant, Pool
from ...engine.base import Engine
from ...records.ledger import Ledger


class Removals:
    def __init__(
        self,
        pool: Pool,
        engine: Engine,
        hub: str,
        executor: Executor,
        log: logging.Logger,
        clock: Callable[[], float],
        ledger: Ledger | None,
        returned: Callable[[Grant], None],
    ) -> None:
        self._pool, self._engine, self._hub, self._executor = pool, engine, hub, executor
        self._log, self._clock, self._ledger = log, clock, ledger
        self._returned = returned  # GPUs came back: the waiting line's pass, a job's end
        self._containers: dict[int, set[str]] = {}  # grant key → container ids known to hold it
        self._removing: dict[int, asyncio.Task[None]] = {}
        self._strays: set[int] = set()  # ended servers' containers that hold no grant

    def note(self, key: int, container_id: str) -> None:
        """`container_id` holds grant `key`: removing the grant's server removes it too."""
        self._containers.setdefault(key, set()).add(container_id)

    def remove_stray(self, key: int, container_id: str) -> None:
        """A container of server `key`, which JupyterHub says ended, on GPUs another server
        holds (so it was not adopted): removed all the same, asked again each monitor tick
        until the engine confirms it gone. It has no grant to release; while it runs, the
        monitor keeps what it reaches out of the pool."""
        self.note(key, container_id)
        self._strays.add(key)
        if key not in self._removing:
            self._start_removal(key)

    def start(
        self, key: int, container_id: str = "", after: Future[object] | None = None
    ) -> asyncio.Future[None] | None:
        """Begin (or join) the release of grant `key`; the removal under way, or None when
        the grant is not held."""
        if container_id:
            self.note(key, container_id)
        if self._pool.begin_release(key) is None:
            self._containers.pop(key, None)
            return None
        if key not in self._removing:
            self._start_removal(key, after)
        return self._removing[key]

    async def settled(self, key: int) -> bool:
        """Whether a server's earlier GPUs are released, after one more try if still stopping."""
        grant = self._pool.grant_of(key)
        if grant is None:
            return True
        if not grant.stopping:
            return False
        if key not in self._removing:
            self._start_removal(key)
        await asyncio.wait([self._removing[key]])
        return self._pool.grant_of(key) is None

    def retry(self) -> None:
        """Ask the engine again to remove every ended server's container it has not confirmed
        gone. Each monitor tick, whether or not the engine could list the containers: one it
        cannot inspect (a 500) may still be removed, and that confirmed by a listing."""
        ended = {grant.key for grant in self._pool.grants() if grant.stopping} | self._strays
        for key in sorted(ended - set(self._removing)):
            self._start_removal(key)

    def cancel(self) -> None:
        for task in list(self._removing.values()):
            task.cancel()

    def _start_removal(self, key: int, after: Future[object] | None = None) -> None:
        self._removing[key] = asyncio.ensure_future(self._remove(key, after))

    async def _remove(self, key: int, after: Future[object] | None) -> None:
        try:
            if after is not None and not after.done():
                await asyncio.wait([asyncio.wrap_future(after)])
            loop = asyncio.get_running_loop()
            ids = tuple(self._containers.get(key, ()))
            gone = await loop.run_in_executor(
                self._executor, self._engine.remove_server, self._hub, key, ids
            )
            if gone:
                self._release(key)
                return
            grant = self._pool.grant_of(key)
            if key in self._strays:
                self._log.warning(
                    "gpuspawner: Docker has not confirmed container(s) %s of ended server %s "
                    "gone; asking again at the next monitor tick",
                    ", ".join(c[:12] for c in sorted(self._containers.get(key, ()))),
                    key,
                )
            elif grant is not None:
                self._log.warning(
                    "gpuspawner: %s ended, but Docker has not confirmed its container gone: "
                    "GPU(s) %s stay held (stopping); asking again at the next monitor tick",
                    grant.holder.name,
                    ", ".join(grant.uuids),
                )
        finally:
            self._removing.pop(key, None)

    def _release(self, key: int) -> None:
        released = self._pool.release(key)
        self._containers.pop(key, None)
        self._strays.discard(key)
        if released is None:
            return
        if self._ledger is not None:
            self._ledger.ended(key, self._clock())
        self._log.info(
            "gpuspawner: %s returned %s", released.holder.name, ", ".join(released.uuids)
        )
        self._returned(released)  # the next in line starts now, not at the next monitor tick
