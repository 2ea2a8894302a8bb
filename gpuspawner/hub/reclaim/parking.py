"""Parking on the hub: a job gives way to a person, and a person's idle server lends its GPU
to jobs, by parking GPU work in host memory.

The jobs' board asks `why_not` of a job it would make give way, and the reclaimer of a
person's server at its GPU-idle limit. Where the driver can park the server's work, `park`
has the driver lock and checkpoint the CUDA processes the monitor last saw its container
run on its GPUs (all or none, `devices.checkpoint.park`), and only then tells the books
(`Broker.parked`): its GPUs may be lent. Where it cannot (MIG or shared slots, no CUDA
process or several, past `park_memory_limit`, the driver's refusal), the reason is
returned: a job gives way by SIGTERM, a person's server is stopped, as without parking.

`restore` brings parked work back once its GPUs are free again and hold the memory it
parked (a restore without room leaves the process stuck for good): the books first take
the GPUs back for it, so nobody is given them while the driver copies, then the driver
restores and unlocks. A refused restore is `RestoreFailed`: its server must be stopped.
Parked work is its processes': where the container no longer runs them (it was restarted,
or they were killed), the driver holds nothing of it any more. A person's server then has
its GPUs back with nothing to restore, and is told its kernel's GPU state was lost (`lost`);
a job's run is over (`RestoreFailed`).

Turns (a profile's `turns`): two people's servers bound to one GPU, one parked while the
other is on it. The one that joined waits parked from its start, with nothing of it in the
driver yet; parking a person for the other's turn (`park(…, for_turn=True)`) may then
find no CUDA process of theirs: nothing to checkpoint, and they are parked all the same.

The driver's calls are made where the work runs (`hosts`): on one host, here; on a swarm,
by the agent of the grant's node, which answers the driver's refusals as the driver would.
An agent that cannot be asked (`HostUnreachable`) leaves work where it was: a park is not
made; a restore may have been made, so its GPUs are lent to nobody until the agent answers
it again. `park_memory_limit` bounds each host's parked
memory: on a swarm, each node's RAM holds its own.

Driver calls block for seconds (they copy GPU memory), so they run in a worker thread of
their own, one at a time. What is parked is remembered here, with the PIDs and bytes; where
each server's work is (resident, parking, parked, restoring, or waiting for its first turn)
moves only through the core's table (`core.parking.after`): a move it does not allow is a
bug, and raises `IllegalMove`, as h11's state machine does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from ...core.grants import Grant
from ...core.parking import TURN_QUANTUM, Residency, after
from ...core.pool import NotParkable, StillLent
from ...core.pool_view import DeviceState
from ...core.words import gib
from ...devices.checkpoint import CheckpointError, CheckpointHost, HostOf, HostUnreachable
from ...engine.base import Seen
from ..base.counters import PARK_SECONDS, PARKS, RESTORE_SECONDS
from ..books.broker import Broker
from ..watch.monitor import Observation, processes_of

LOCK_TIMEOUT_MS = 30_000  # how long the driver waits for a job's queued GPU work to drain


class RestoreFailed(Exception):
    """The driver could not bring parked work back: its owner must be stopped."""


LOST = (
    "its GPU work was lost while parked: the processes the driver held it for are gone "
    "(its container was restarted, or they were ended)"
)


@dataclass(frozen=True)
class Parked:
    pids: tuple[int, ...]
    bytes: int | None  # None: not known (read back after a restart): its GPUs must be empty
    since: float
    node: str = ""  # whose host memory holds it (a swarm node's); "" on one host


class Parker:
    def __init__(
        self,
        broker: Broker,
        hosts: HostOf,
        memory_limit: int,
        log: logging.Logger,
        turn_quantum: float = TURN_QUANTUM,
    ) -> None:
        self.broker, self.hosts, self.log = broker, hosts, log
        self.memory_limit = memory_limit  # bytes of each host's memory that parked work may take
        self.turn_quantum = turn_quantum  # seconds: a person's turn on a GPU shared in turns
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="gpuspawner-parking")
        self._seen: Observation | None = None
        # Where each server's work is, by grant key, if not resident (moved by `_move` only),
        # and the work it parks or parked (its PIDs, bytes and host).
        self._where: dict[int, Residency] = {}
        self._work: dict[int, Parked] = {}
        # Work restored since the monitor's last look, which saw it parked (no process):
        # what it is now is what it was, until the next look.
        self._restored: dict[int, Parked] = {}
        self._unsure: set[int] = set()  # restores whose host did not answer: asked again
        self._lost: dict[int, float] = {}  # servers whose parked work went with its processes

    def observed(self, observation: Observation) -> None:
        """The monitor's latest look: which container runs which GPU process."""
        self._seen = observation
        self._restored.clear()

    def since(self, key: int) -> float | None:
        """When the server's work was parked; None if it is not."""
        parked = self._parked_of(key)
        return parked.since if parked is not None else None

    def residency(self, key: int) -> Residency:
        """Where the server's work is. A server the books hold parked that parked nothing
        here joined a GPU in turns, and waits for its first turn (nothing of it is on the
        GPU, or in the driver)."""
        where = self._where.get(key)
        if where is not None:
            return where
        grant = self.broker.grant_of(key)
        waits = grant is not None and grant.parked and grant.turns
        return Residency.WAITING if waits else Residency.RESIDENT

    def _move(self, key: int, event: str, work: Parked | None = None) -> None:
        """The one way a server's work changes place: by the core's table (IllegalMove where
        it has no such move); `work`: what it parks, where it starts to."""
        now = after(self.residency(key), event)
        if now is Residency.RESIDENT:
            self._where.pop(key, None)
            self._work.pop(key, None)
            return
        self._where[key] = now
        if work is not None:
            self._work[key] = work

    def _parked_of(self, key: int) -> Parked | None:
        """What the server has parked (restoring: until it is back); one waiting for its
        first turn in turns has parked nothing."""
        where = self.residency(key)
        if where in (Residency.PARKED, Residency.RESTORING):
            return self._work[key]
        if where is Residency.WAITING:
            grant = self.broker.grant_of(key)
            if grant is not None:
                return Parked((), 0, grant.since, grant.node)
        return None

    def parked_bytes(self, node: str | None = None) -> int:
        """Host memory parked work holds, and work being parked will (unknown: none): on
        `node`'s host, or (None) on every host."""
        return sum(p.bytes or 0 for p in self._work.values() if node is None or p.node == node)

    def why_not(self, grant: Grant, for_turn: bool = False) -> str:
        """Why the driver cannot park this server's work now; "" where it can. `for_turn`:
        for the other person's turn on its GPU, where a server with no CUDA process is
        parked too (nothing of it is on the GPU to give way)."""
        if any(not u.kind.facts.whole for u in grant.units):
            return "it runs on a MIG instance or a shared GPU, which the driver cannot park"
        pids = self._pids_of(grant)
        if pids is None:
            return "which processes it runs on its GPUs is not known yet"
        if not pids and not for_turn:
            return "it has no CUDA process to park"
        if len(pids) > 1:
            return (
                f"it runs {len(pids)} CUDA processes, and the driver cannot yet checkpoint "
                "a program of several"
            )
        needs, parked = self._bytes_of(grant), self.parked_bytes(grant.node)
        if needs + parked > self.memory_limit:
            on = f" on {grant.node}" if grant.node else ""
            return (
                f"its {gib(needs)} GiB of GPU memory would take parked work past "
                f"park_memory_limit ({gib(self.memory_limit)} GiB{on}; {gib(parked)} GiB "
                "parked now)"
            )
        return ""

    async def park(self, grant: Grant, for_turn: bool = False) -> str:
        """Park the server's work and lend its GPUs (`for_turn`: give its GPU to the other
        person in turns); "" once done, else why it stays on its GPUs (running, as
        before)."""
        reason = self.why_not(grant, for_turn)
        where = self.residency(grant.key)
        if not reason and where is not Residency.RESIDENT:  # (the table has no such move)
            reason = f"its work is {where.value}, not on its GPUs"
        if reason:
            return reason
        pids = self._pids_of(grant) or ()
        host = self.hosts(grant.node)
        pending = Parked(pids, self._bytes_of(grant), 0.0, grant.node)
        self._move(grant.key, "park", pending)  # counted against park_memory_limit meanwhile
        try:
            with PARK_SECONDS.time():
                await self._call(host.park, pids, LOCK_TIMEOUT_MS)
        except (CheckpointError, HostUnreachable) as error:
            PARKS.labels("refused").inc()
            self._move(grant.key, "park refused")
            return (
                f"the driver refused: {error}" if isinstance(error, CheckpointError) else str(error)
            )
        PARKS.labels("parked").inc()
        try:
            if self.broker.grant_of(grant.key) != grant:
                raise NotParkable("it stopped, or stopped and started again")
            self.broker.parked(grant.key)
        except NotParkable as error:  # while the driver worked
            self._move(grant.key, "park refused")
            await self._unpark_quietly(host, pids)
            return f"it changed meanwhile: {error}"
        self._move(grant.key, "parked", replace(pending, since=self.broker.clock()))
        self.log.info(
            "gpuspawner: %s parked (%d GiB of GPU memory, processes %s)",
            grant.holder.name,
            gib(pending.bytes or 0),
            ", ".join(map(str, pids)),
        )
        return ""

    async def _unpark_quietly(self, host: CheckpointHost, pids: tuple[int, ...]) -> None:
        """Bring back work that must not stay parked (its server changed while it was being
        parked); a refusal is logged: the server ends, or stopped already."""
        try:
            await self._call(host.unpark, pids)
        except (CheckpointError, HostUnreachable) as error:
            self.log.error("gpuspawner: processes %s could not be brought back: %s", pids, error)

    def parking_now(self, key: int) -> bool:
        """Whether the driver is parking this server's work right now."""
        return self.residency(key) is Residency.PARKING

    def waits_for(self, grant: Grant) -> str:
        """Why parked work cannot come back now ("" when it can): its GPUs are lent, or
        hold too little free memory for it."""
        parked = self._parked_of(grant.key)
        if parked is None:
            return ""
        pool = self.broker.pool
        states = pool.states()
        lent = [u.id for u in grant.units if states.get(u.id) is not DeviceState.FREE]
        if lent:
            return f"its GPUs are in use ({', '.join(lent)})"
        sizes = {g.uuid: g.memory_total_bytes for g in self.broker.site.gpus}
        if parked.bytes is None or not all(sizes.get(d) for d in grant.uuids):
            # How much it needs, or how much its GPUs hold, is not known (a swarm node's GPUs
            # without a gpu-memory label): it comes back onto GPUs that run nothing.
            telemetry = self.broker.telemetry
            running = [d for d in grant.uuids if getattr(telemetry.get(d), "processes", ())]
            return f"processes run on its GPUs ({', '.join(running)})" if running else ""
        free = sum(sizes[d] - self._used_memory(d) for d in grant.uuids)
        if parked.bytes > free:
            return f"its GPU has {gib(free)} GiB free; its work needs {gib(parked.bytes)} GiB"
        return ""

    async def restore(self, grant: Grant) -> bool:
        """Bring parked work back if it can come now (`waits_for`): True once it runs on its
        GPUs again, False if it must wait; RestoreFailed if the driver refused. A restore
        whose host did not answer may have been made: its GPUs stay its own, lent to
        nobody, and the restore is asked again (`unsure`) until the host answers."""
        unsure = grant.key in self._unsure
        parked = self._parked_of(grant.key)
        if parked is None or (not unsure and self.waits_for(grant)):
            return False
        first_turn = self.residency(grant.key) is Residency.WAITING  # nothing to restore
        if first_turn:  # as the books have it (until they take it back, below): no move
            self._where[grant.key] = Residency.WAITING
        if not unsure:
            try:
                self.broker.take_back(grant.key)
            except (StillLent, KeyError):
                return False
            if not first_turn:
                self._move(grant.key, "restore")
        try:
            if not unsure and await self._call(self._gone, grant, parked):
                return self._back_without(grant)
            with RESTORE_SECONDS.time():
                await self._call(self.hosts(grant.node).unpark, parked.pids)
        except HostUnreachable as error:
            self._unsure.add(grant.key)
            self.log.warning(
                "gpuspawner: %s may not be back on its GPUs (%s): its GPUs are lent to nobody "
                "and its restore is asked again",
                grant.holder.name,
                error,
            )
            return False
        except CheckpointError as error:
            self.forget(grant.key)
            raise RestoreFailed(f"its GPU work could not be brought back: {error}") from None
        self._move(grant.key, "start" if first_turn else "restored")
        self._unsure.discard(grant.key)
        self._restored[grant.key] = parked
        self.log.info("gpuspawner: %s restored on its GPUs", grant.holder.name)
        return True

    def _gone(self, grant: Grant, parked: Parked) -> bool:
        """Whether the processes whose work was parked are gone from the server's container
        (blocking: asks its host). Not known (no look at the container yet): not gone."""
        names = self._names_of(grant.key)
        if not parked.pids or names is None:
            return False
        held = self.hosts(grant.node).parked({"server": list(names)}, False)
        return not set(parked.pids) & set(held.get("server", ()))

    def _back_without(self, grant: Grant) -> bool:
        """Its parked work is lost: a person's GPUs are theirs again, with nothing to bring
        back; a job's run is over."""
        self.forget(grant.key)
        if grant.holder.job:
            raise RestoreFailed(LOST)
        self._lost[grant.key] = self.broker.clock()
        self.log.warning("gpuspawner: %s: %s; its GPUs are its own again", grant.holder.name, LOST)
        return True

    def lost(self, key: int) -> bool:
        """Whether this server's parked work was lost (its kernel's GPU state is gone)."""
        return key in self._lost

    def _names_of(self, key: int) -> tuple[str, ...] | None:
        """What the host may call the server's container, as the monitor last saw it."""
        containers = self._seen.containers if self._seen is not None else None
        hub = self.broker.hub
        for seen in containers or ():
            if seen.running and seen.server and seen.server.spawner_id == key and seen.of_hub(hub):
                return seen.names
        return None

    def unsure(self, key: int) -> bool:
        """Whether the server's restore was asked of a host that did not answer."""
        return key in self._unsure

    def read_back(self, containers: list[Seen]) -> dict[int, tuple[int, ...]]:
        """After a restart, the driver's word (blocking): the servers whose CUDA processes it
        holds checkpointed, with their PIDs, by spawner id, asked of each host. A process
        left locked (a park or restore the last hub did not finish) is on its GPU: it is
        unlocked to run on. A host that cannot be asked is said so in the log: its servers
        are taken as running on their GPUs."""
        by_node: dict[str, dict[str, list[str]]] = {}  # node → spawner id → names
        hub = self.broker.hub
        for seen in containers:
            if seen.running and seen.server and seen.server.spawner_id and seen.of_hub(hub):
                by_node.setdefault(seen.node, {})[str(seen.server.spawner_id)] = [*seen.names]
        parked: dict[int, tuple[int, ...]] = {}
        for node, ours in by_node.items():
            try:
                held = self.hosts(node).parked(ours, settle=True)
            except (HostUnreachable, CheckpointError) as error:
                self.log.warning(
                    "gpuspawner: what is parked on %s is not known (%s): its servers are "
                    "taken as running on their GPUs",
                    node or "this host",
                    error,
                )
                continue
            parked |= {int(key): tuple(pids) for key, pids in held.items()}
        return parked

    def adopted(self, parked: Mapping[int, tuple[int, ...]]) -> None:
        """The books adopted those servers parked. How much memory each parked the driver
        does not say: it comes back once no process runs on its GPUs."""
        for key, pids in parked.items():
            grant = self.broker.grant_of(key)
            if grant is not None and grant.parked:  # where the driver says it is: no move
                self._where[key] = Residency.PARKED
                self._work[key] = Parked(pids, None, self.broker.clock(), grant.node)

    def forget(self, key: int) -> None:
        """The server's container is gone: what it had parked went with it (a holder that
        leaves the GPU's books is in no residency: the core's table has no move for it)."""
        self._where.pop(key, None)
        self._work.pop(key, None)
        self._lost.pop(key, None)
        self._restored.pop(key, None)
        self._unsure.discard(key)

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)

    def _pids_of(self, grant: Grant) -> tuple[int, ...] | None:
        """Its CUDA processes, as the monitor last saw them (None: not known)."""
        restored = self._restored.get(grant.key)
        if restored is not None:
            return restored.pids
        return processes_of(grant, self._seen, self.broker.hub) if self._seen else None

    def _bytes_of(self, grant: Grant) -> int:
        restored = self._restored.get(grant.key)
        if restored is not None and restored.bytes is not None:
            return restored.bytes
        telemetry = self._seen.telemetry if self._seen else {}
        return sum(getattr(telemetry.get(d), "memory_used_bytes", 0) or 0 for d in grant.uuids)

    def _used_memory(self, device: str) -> int:
        return getattr(self.broker.telemetry.get(device), "memory_used_bytes", 0) or 0

    async def _call(self, function: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, function, *args)
