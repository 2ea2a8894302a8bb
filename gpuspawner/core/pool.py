"""Who holds which GPU: the books of one hub's shared pool.

The books count units (`units.Unit`): whole GPUs, MIG instances and the slots
of shared GPUs. Every change happens under one lock and in one step, so a unit
is never held by two servers (and a shared GPU is never in more servers than
it has slots), and an allocation takes all the units it asked for or none.

The state and every question about it are `books.Books`'s; this adds what takes
and gives units. The pool may span several machines (nodes): a grant's units all come from one
(`placement.one_node`), and a machine that cannot be reached gives nothing
until it is marked reachable again, while grants on it stay on the books.

A grant (`grants.Grant`) ends in two steps: `begin_release` when the hub says the server ended
(its GPUs stay held, "stopping"), `release` only once the container is known
to be gone. Between the two, nobody else can be given those GPUs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from fractions import Fraction

from .books import GONE, Books
from .grants import Admission, Grant, Holder, Usage
from .placement import (
    PLACEMENT_POLICIES,
    NotEnoughGPUs,
    Placer,
    Topology,
    no_machine,
    one_node,
    pack,
)
from .pool_view import DeviceState
from .units import Request, Unit, bare

__all__ = ["GONE", "Admission", "DeviceState", "Grant", "Holder", "NotEnoughGPUs", "Usage"]


# Units that `fits_if_freed` may count as free: held, or already stopping (freeing up).
FREEABLE = (DeviceState.ALLOCATED, DeviceState.STOPPING)


class AlreadyHolding(Exception):
    """A server asked for GPUs while its earlier grant was never released."""


class NotParkable(Exception):
    """Only a grant that holds its units (not stopping, not parked already) can be parked."""


class StillLent(Exception):
    """A parked grant's units are held by another (or unusable): it cannot come back yet."""


class Pool(Books):
    """The shared pool. Thread-safe; every public method is one atomic step.

    `units` may be plain UUIDs, each then a whole GPU (tests, benchmarks). `topology`
    holds the wiring of every machine's GPUs; without it, each machine's is by index.
    """

    def __init__(
        self,
        units: Sequence[Unit | str],
        policy: str = "packed",
        clock: Callable[[], float] = time.time,
        topology: Topology | None = None,
    ) -> None:
        super().__init__([u if isinstance(u, Unit) else bare(u, i) for i, u in enumerate(units)])
        if policy not in PLACEMENT_POLICIES:
            raise ValueError(f"unknown placement policy {policy!r}: {sorted(PLACEMENT_POLICIES)}")
        self.policy = policy
        place = {u.gpu: (u.node, u.index) for u in self._units.values()}
        machines: dict[str, dict[str, int]] = {}  # node → its GPUs' indices
        for gpu in self.gpus:
            node, index = place[gpu]
            machines.setdefault(node, {})[gpu] = index
        self._placers = {  # each machine's wiring: its part of `topology`, else by index
            node: Placer(
                topology.restricted_to(gpus) if topology else Topology.by_index(gpus), policy
            )
            for node, gpus in machines.items()
        }
        self._clock = clock

    # --- taking and giving back ---------------------------------------------------------
    def allocate(
        self,
        holder: Holder,
        request: Request | int,
        admit: Admission | None = None,
        borrows: bool = True,
        keep: frozenset[str] = frozenset(),
    ) -> Grant:
        """Take what `request` asks for (a number: whole GPUs) for a server, after `admit`
        (which may raise; a user's `UserLimits.admit`) agrees to its weight. Limits are
        decided before capacity, so a request over a limit is told so even when nothing is
        free. `borrows`: whether it may be lent parked work's GPUs (`_choose_for`); False
        for a job that cannot be parked, as it could not give them back at once. `keep`:
        units it must not be given (a parked person's who wants them back). A person's
        start of one GPU that allows turns (`Request.in_turns`) may share one in turns
        (`_turn_on`) when no GPU can be had now: bound to a GPU another person is on, it
        starts parked, and no running job is made to give way for it (the jobs go on,
        and the people share; the simulator's turns row weighs the trade)."""
        if isinstance(request, int):
            request = Request(gpus=request)
        with self._lock:
            if holder.spawner_id in self._grants:
                held = self._grants[holder.spawner_id]
                raise AlreadyHolding(f"{held.holder.name} already holds {held.ids}")
            short: NotEnoughGPUs | None = None
            try:
                chosen = self._choose_for(request, holder.job, borrows, keep)
            except NotEnoughGPUs as refusal:
                chosen, short = (), refusal
                if request.in_turns and not holder.job:
                    chosen = self._turn_on(request, keep)
                    short = None if chosen else refusal
            weight = sum((u.weight for u in chosen), Fraction(0))
            if short is not None:
                weight = self.weight_of(request)
            quota_group = admit(weight, holder.user_id, self._usage()) if admit else None
            if short is not None:
                raise short
            waits = any(u.id in self._holder_of for u in chosen)  # its turn comes
            turns = request.in_turns and not holder.job
            grant = Grant(holder, chosen, self._clock(), quota_group, parked=waits, turns=turns)
            if chosen:  # a CPU-only server holds nothing to keep books of
                self._record(grant)
            return grant

    def weight_of(self, request: Request) -> Fraction:
        """The GPU-equivalents a request takes, before it is placed: for one MIG instance or
        slot, the lightest that would do."""
        if request.kind is None:
            return Fraction(0)
        if request.kind.facts.whole:
            return Fraction(request.gpus)
        with self._lock:
            weights = [u.weight for u in self._units.values() if request.matches(u)]
        return min(weights, default=Fraction(1))

    def refusal(self, request: Request, keep: frozenset[str] = frozenset()) -> NotEnoughGPUs | None:
        """What allocating `request` for a person now would be refused with for want of
        units (limits aside), without taking anything: for the spawn form. A start that
        would share a GPU in turns is not refused. `keep`: units it may not be given (the
        calendar's, for this person now), as `allocate` has them."""
        with self._lock:
            try:
                self._choose_for(request, job=False, keep=keep)
            except NotEnoughGPUs as short:
                return None if self._turn_on(request, keep) else short
            return None

    def fits_if_freed(
        self, request: Request, freed: frozenset[str], claimed: frozenset[str] = frozenset()
    ) -> bool:
        """Whether `request` could be served now were the units `freed` (held or stopping)
        free too, and none of the units `claimed` (kept for people ahead of it): which jobs
        must give way for a person's start (`give_way`), counting what already frees up."""
        return self.would_take(request, freed, claimed) is not None

    def would_take(
        self, request: Request, freed: frozenset[str], claimed: frozenset[str] = frozenset()
    ) -> frozenset[str] | None:
        """The units `request` would get on those terms (`fits_if_freed`); None if none do."""
        with self._lock:
            try:
                return frozenset(u.id for u in self._choose(request, freed, claimed))
            except NotEnoughGPUs:
                return None

    def _choose_for(
        self,
        request: Request,
        job: bool,
        borrows: bool = True,
        keep: frozenset[str] = frozenset(),
    ) -> tuple[Unit, ...]:
        """Units bound to parked work are lent only when no others will do, and only across
        kinds: a parked job's to a person, a parked person's to a job (which gives way at
        once, by parking, when they come back). Never those in `keep`."""
        try:
            return self._choose(request, claimed=frozenset(self._bound) | keep)
        except NotEnoughGPUs:
            if not borrows:
                raise
            lendable = {
                unit_id
                for unit_id, keys in self._bound.items()
                if all(self._grants[k].holder.job != job for k in keys)
            }
            return self._choose(request, claimed=frozenset(self._bound.keys() - lendable) | keep)

    def _turn_on(self, request: Request, keep: frozenset[str]) -> tuple[Unit, ...]:
        """A whole GPU for one more person, in turns: one that exactly one other person's
        1-GPU server is bound to, resident or parked, which allows turns too. Those with
        that person parked first (nobody is on the GPU, or a job it gives way to); () if
        none will do."""
        if not request.in_turns:
            return ()
        partners = []
        for unit in self._units.values():
            if unit.id in keep or not request.matches(unit) or self._unusable(unit):
                continue
            partner = self._turn_partner(unit)
            if partner is not None:
                partners.append((not partner.parked, unit))
        return (min(partners, key=lambda p: p[0])[1],) if partners else ()

    def _turn_partner(self, unit: Unit) -> Grant | None:
        """The one person's server bound to this GPU, if it allows turns and is not stopping:
        another person may join it in turns. None where no person's, or two, are."""
        keys = [*self._bound.get(unit.id, ()), self._holder_of.get(unit.id)]
        people = [self._grants[k] for k in keys if k is not None]
        people = [g for g in people if not g.holder.job]
        if len(people) == 1 and people[0].turns and not people[0].stopping:
            return people[0]
        return None

    def _unusable(self, unit: Unit) -> bool:
        """Unhealthy, on an unreachable machine, or used outside the hub."""
        external = unit.device in self._external or unit.gpu in self._external
        return self._unhealth(unit) is not None or external

    def _choose(
        self,
        request: Request,
        freed: frozenset[str] = frozenset(),
        claimed: frozenset[str] = frozenset(),
    ) -> tuple[Unit, ...]:
        if request.kind is None:
            return ()
        matching = [u for u in self._units.values() if request.matches(u)]
        if request.nodes is not None and not request.nodes & self._reachable():
            raise no_machine(request, len(matching))
        free = [
            u
            for u in matching
            if u.id not in claimed
            and (
                self._state(u) is DeviceState.FREE or (u.id in freed and self._state(u) in FREEABLE)
            )
        ]
        here = one_node(request, free, len(matching), self.policy)
        if request.kind.facts.whole:
            chosen = self._placers[here[0].node].place({u.id for u in here}, request.count)
            return tuple(self._units[uuid] for uuid in chosen)
        return (pack(here, self._used_by_gpu(), self.policy),)

    def _used_by_gpu(self) -> dict[str, Fraction]:
        used: dict[str, Fraction] = {}
        for unit in self._units.values():
            if self._state(unit) is not DeviceState.FREE:
                used[unit.gpu] = used.get(unit.gpu, Fraction(0)) + unit.weight
        return used

    def adopt(
        self,
        holder: Holder,
        ids: Iterable[str],
        since: float | None = None,
        quota_group: str | None = None,
        parked: bool = False,
        turns: bool = False,
    ) -> Grant:
        """Record units a running server already holds (recovery after a hub restart), or
        is bound to while `parked` (the driver's word).

        Unlike `allocate`, adopting takes unhealthy or externally used units too:
        the container has them whatever the books say. Units held by another
        server are refused: AlreadyHolding names them, unless both are people's servers
        in `turns` on one GPU: the one adopted second is then parked (the driver parks no
        work it has not run; if its processes are on the GPU, it wakes). Unknown ids are
        skipped.
        """
        with self._lock:
            wanted = tuple(self._units[i] for i in dict.fromkeys(ids) if i in self._units)
            taken = {
                u.id: self._grants[self._holder_of[u.id]].holder.name
                for u in wanted
                if not parked and self._holder_of.get(u.id, holder.spawner_id) != holder.spawner_id
            }
            if taken and turns and len(wanted) == 1 and self._turn_partner(wanted[0]):
                taken, parked = {}, True
            if taken:
                raise AlreadyHolding(f"{holder.name} claims GPUs held by others: {taken}")
            self._forget(holder.spawner_id)
            when = self._clock() if since is None else since
            grant = Grant(holder, wanted, when, quota_group, parked=parked, turns=turns)
            if wanted:
                self._record(grant)
            return grant

    def park(self, key: int) -> Grant:
        """The grant's work is parked in host memory (the driver said so): its units stay
        bound to it, and may be lent (`_choose_for`) until it is restored."""
        with self._lock:
            grant = self._grants[key]
            if grant.stopping or grant.parked:
                raise NotParkable(
                    f"{grant.holder.name} is {'stopping' if grant.stopping else 'parked'}"
                )
            self._unrecord(grant)
            parked = replace(grant, parked=True)
            self._record(parked)
            return parked

    def restore(self, key: int, admit: Admission | None = None) -> Grant:
        """The parked grant holds its own units again, if they are free and `admit` (its
        user's limits, as when it was first allocated) agrees; else StillLent or the
        limit's refusal, and it stays parked. A person's wake is admitted without `admit`:
        their server was admitted when it started, and their work must come back at once;
        their group may then hold more than its quota for a while, and new starts wait."""
        with self._lock:
            grant = self._grants[key]
            if not grant.parked:
                return grant
            busy = {
                u.id: self._state(u).value
                for u in grant.units
                if self._state(u) is not DeviceState.FREE
            }
            if busy:
                raise StillLent(f"{grant.holder.name} cannot come back yet: {busy}")
            group = grant.quota_group
            if admit is not None:
                group = admit(grant.weight, grant.holder.user_id, self._usage())
            self._unrecord(grant)
            resident = replace(grant, parked=False, quota_group=group)
            self._record(resident)
            return resident

    def begin_release(self, key: int) -> Grant | None:
        """The server ended: its GPUs stay held, as stopping, until `release`."""
        with self._lock:
            grant = self._grants.get(key)
            if grant is None or grant.stopping:
                return grant
            stopping = replace(grant, stopping=True)
            self._grants[key] = stopping
            return stopping

    def release(self, key: int) -> Grant | None:
        """Give back what a server holds, once its container is gone. Safe to repeat."""
        with self._lock:
            return self._forget(key)

    # --- the machine as it changes ----------------------------------------------------
    def follow_layout(self, gpu: str, units: Sequence[Unit]) -> bool:
        """What one GPU gives now (its MIG layout changed). New units come in free; units
        no longer there go, except those held, which stay (unhealthy, never handed out
        again) until their server gives them back. True if anything changed."""
        with self._lock:
            if gpu not in self.gpus:
                return False
            before = {i: u for i, u in self._units.items() if u.gpu == gpu}
            now = {u.id: u for u in units if u.gpu == gpu}
            if {i: u for i, u in before.items() if i not in self._gone} == now:
                return False
            kept = {i: u for i, u in before.items() if i not in now and self._referenced(i)}
            self._gone = (self._gone - set(before)) | set(kept)
            others = [u for u in self._units.values() if u.gpu != gpu]
            merged = [*others, *now.values(), *kept.values()]
            merged.sort(key=lambda u: (u.node, u.index, u.position))
            self._units = {u.id: u for u in merged}
            return True
