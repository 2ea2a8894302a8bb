"""The waiting line inside the hub: GPU starts that wait their turn instead of being refused.

Every GPU start passes through the broker's line. One that can be served now
starts at once; one that cannot waits, up to its group's `max_wait`, and is
woken with its GPUs already reserved when its turn comes. Who goes next is the
core's rule (`core.line`: priority, then recent GPU-hours, then arrival;
backfill, then a reservation for a head that has waited `reserve_after`).

The line never polls. A pass runs when something happens that can let a
waiter start: Docker confirms a release (`hub.books.removals`), a server ends (its
group's quota has room again), the monitor has looked at the machine (health,
GPUs used outside JupyterHub), someone joins or leaves the line. In that pass
each waiter whose turn has come gets its GPUs from the pool (one atomic step
each, in line order) and is woken. JupyterHub cancels a pending spawn's task
on DELETE, so a waiter leaves the line in a `finally` and holds nothing.

Entries are also written down (`records.line`), so that a restarted hub,
which has lost every pending spawn, can tell each person their start ended.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from fractions import Fraction
from typing import Any, Protocol

from ...core import line as words
from ...core.culling import IdleClock
from ...core.limits import LimitExceeded, UserLimits
from ...core.line import DEFAULT_RESERVE_AFTER, LinePass, Outcome, Waiting, in_order
from ...core.placement import NotEnoughGPUs
from ...core.pool import Admission, Grant, Holder, Pool
from ...core.units import Request
from ...core.words import DEFAULT_GROUP, duration, server_name
from ...records.line import LineRecord, Waited
from ..base.counters import observe_wait
from . import status as line_status
from .entry import Entry


class TakeNow(Protocol):
    """GPUs now, or why not (raises), for a server that may run `lasts` seconds."""

    def __call__(
        self, holder: Holder, request: Request, admit: Admission, *, lasts: float | None
    ) -> Grant: ...


RECENT_USE_TTL = 60.0  # seconds between two reads of everyone's recent use from the ledger


class WaitEnded(Exception):
    """A wait that ended without GPUs. The message is for the user; `outcome` names the end
    for the wait-time metric, `reason` for the hub's refusal counter."""

    def __init__(self, message: str, outcome: str, reason: str) -> None:
        super().__init__(message)
        self.outcome, self.reason = outcome, reason


class Line:
    """One hub's waiting line. Used from the hub's event loop only."""

    def __init__(
        self,
        pool: Pool,
        idle: IdleClock,
        clock: Callable[[], float],
        log: logging.Logger,
        *,
        take_now: TakeNow,
        reserve_after: float = DEFAULT_RESERVE_AFTER,
        recent_use: Callable[[float], Mapping[int, float]] | None = None,
        record: LineRecord | None = None,
        limits_of: Callable[[int], UserLimits | None] = lambda user_id: None,
        after_run: Callable[[], None] = lambda: None,
    ) -> None:
        self.pool, self.idle, self.clock, self.log = pool, idle, clock, log
        self.after_run = after_run  # jobs give way to, and fill around, who waits
        self.take_now = take_now  # the broker's one way to take GPUs, for whoever's turn it is
        self.reserve_after = reserve_after
        self.recent_use = recent_use or (lambda now: {})
        self.record = record
        self.limits_of = limits_of  # each user's limits, by id (for the estimates' clocks)
        self._entries: dict[int, Entry] = {}
        self._order: list[int] = []  # the waiting keys in line order, as of the last pass
        self._held_for: set[int] = set()  # the heads freed units gather for
        self._closing = False  # the hub is shutting down: nobody starts, the record stays
        self._changed: asyncio.Future[None] | None = None
        self._recent: tuple[float, Mapping[int, float]] = (float("-inf"), {})
        self._competing: dict[tuple[Request, Request], bool] = {}

    # --- a start's way through the line ----------------------------------------------
    async def take(
        self,
        holder: Holder,
        slug: str,
        profile: str,
        request: Request,
        limits: UserLimits,
    ) -> Grant:
        """GPUs for a start: now if its turn has come, else once it comes, within max_wait.

        Raises what reserving raises where waiting cannot help (max_wait 0: today's
        refusal; a limit other than the group's quota), and WaitEnded when the wait ends
        without GPUs.
        """
        arrived = self.clock()
        group, priority = limits.priority.group or DEFAULT_GROUP, limits.priority.value or 0
        weight = float(self.pool.weight_of(request))
        theirs = [e.holder for e in self._entries.values() if e.holder.user_id == holder.user_id]
        places = self._places(holder.user_id, limits)
        patient = bool(limits.max_wait.value) and len(theirs) < places
        waiting = Waiting(
            holder.spawner_id, holder.user_id, group, priority, weight, arrived, patient
        )
        result = asyncio.get_running_loop().create_future()
        entry = Entry(waiting, holder, slug, profile, request, limits, result)
        outcome = "cancelled"  # unless the wait ends otherwise: JupyterHub cancelled the spawn
        try:
            self._entries[waiting.key] = entry
            ids = (holder.spawner_id, holder.user_id, holder.user, holder.server)
            self._write("joined", Waited(*ids, profile, request.what, arrived))
            self.run()
            if not entry.result.done() and not limits.max_wait.value:
                outcome = "refused"
                ended = WaitEnded(words.kept_for_another(request.what), outcome, "capacity")
                raise entry.blocked or ended
            if not entry.result.done() and not patient:  # no place left for it in line
                outcome = "refused"
                names = [server_name(h.user, h.server) for h in theirs]
                text = words.no_place(names, places, limits.line_places)
                raise LimitExceeded(text, "max_waiting_per_user", limits.line_places.group)
            timeout = max(0.0, entry.deadline - self.clock())
            if not (await asyncio.wait([entry.result], timeout=timeout))[0]:
                outcome = "max_wait"
                text = words.gave_up(
                    holder.server, request.what, self.place(entry), limits.max_wait, entry.quota
                )
                raise WaitEnded(text, outcome, "limit" if entry.quota else "capacity")
            outcome = "refused"  # unless the result is GPUs, or the end of the wait
            error = entry.result.exception()
            if error is not None:
                outcome = getattr(error, "outcome", outcome)
                raise error
            outcome = "started"
            return entry.result.result()
        finally:
            if self._entries.get(entry.waiting.key) is entry:
                was_held_for = entry.waiting.key in self._held_for
                self._end(entry)
                if was_held_for:  # what gathered for it may start others now
                    self.run()
                else:  # it held nothing back: only the places behind it moved
                    self._moved()
            observe_wait(outcome, self.clock() - entry.waiting.arrived)

    def _places(self, user_id: int, limits: UserLimits) -> int:
        """How many starts this user may have waiting: each holds one of JupyterHub's
        concurrent_spawn_limit slots, so one user must not be able to fill them."""
        held = self.pool.usage().by_user[user_id]
        return limits.places_in_line(held, sum((u.weight for u in self.pool.units), Fraction(0)))

    def may_wait(self, user_id: int, limits: UserLimits) -> bool:
        """Whether one more of this user's starts could wait in line (for the spawn form)."""
        theirs = sum(e.holder.user_id == user_id for e in self._entries.values())
        return bool(limits.max_wait.value) and theirs < self._places(user_id, limits)

    def remove(self, key: int) -> bool:
        """An admin takes a start out of the line; it ends with a message, holding nothing."""
        entry = self._entries.get(key)
        if entry is None:
            return False
        text = words.removed(entry.holder.server, self.clock())
        self._end(entry).set_exception(WaitEnded(text, "removed", "removed"))
        self.log.warning("gpuspawner: an admin removed %s from the waiting line", entry.holder.name)
        self.run()
        return True

    def forget_previous(self) -> list[Waited]:
        """At hub start: who waited when the hub before this one ended (their starts are gone)."""
        return self.record.take_all() if self.record is not None else []

    def close(self) -> None:
        if self.record is not None:
            self.record.close()

    def shut_down(self) -> None:
        """The hub is shutting down: start nobody more (servers stopping now must not hand
        their GPUs to a start that is about to be cancelled), and keep the written line as it
        is, so the next hub tells each person their start ended."""
        self._closing = True
        self.close()
        self.record = None

    # --- the pass ------------------------------------------------------------------------
    def run(self) -> None:
        """Start whoever's turn has come, then tell everyone watching that the line moved.
        Called from the broker's and the monitor's events: a fault here is logged, never
        raised into them."""
        try:
            if self._entries and not self._closing:
                self._pass()
            elif not self._entries:
                self._order, self._held_for = [], set()
        except Exception:
            self.log.exception("gpuspawner: the waiting line's pass failed")
        if not self._closing:
            self.after_run()
        self._moved()

    def _moved(self) -> None:
        """Wake the pending pages: their place or their estimate may have changed."""
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)

    def _pass(self) -> None:
        self._competing.clear()
        now = self.clock()
        recent = self._recent_use(now) if len(self._entries) > 1 else {}
        ordered = in_order([e.waiting for e in self._entries.values()], recent)
        chosen = LinePass(now, self.reserve_after)
        for waiting in ordered:
            heads = [head for head in chosen.held_for if self.compete(waiting, head)]
            outcome = self._try_apart(waiting, heads) if heads else self._try(waiting)
            chosen.tried(waiting, outcome, behind=bool(heads))
        self._order = [w.key for w in ordered if w.key in self._entries]
        self._held_for = {w.key for w in chosen.held_for if w.key in self._entries}
        if chosen.starting:
            self.log.debug(
                "gpuspawner: the line starts %d of %d", len(chosen.starting), len(ordered)
            )

    def compete(self, a: Waiting, b: Waiting) -> bool:
        """Whether two waiting starts could use one same unit (a MIG start and a whole-GPU
        start do not): only then does a reservation for one hold the other back. Known per
        pair of requests (profiles) until the next pass, which may see other units."""
        pair = (self._entries[a.key].request, self._entries[b.key].request)
        if pair not in self._competing:
            first, second = pair
            units = self.pool.units
            self._competing[pair] = any(first.matches(u) and second.matches(u) for u in units)
        return self._competing[pair]

    def _try_apart(self, waiting: Waiting, heads: Sequence[Waiting]) -> Outcome:
        """Try to reserve for a waiter behind reservations, from units none of their heads
        could use."""
        kept = [self._entries[head.key].request for head in heads]
        not_on = frozenset(u.id for u in self.pool.units if any(r.matches(u) for r in kept))
        request = self._entries[waiting.key].request
        return self._try(waiting, replace(request, not_on=request.not_on | not_on))

    def _try(self, waiting: Waiting, request: Request | None = None) -> Outcome:
        """Try to reserve for one waiter, in line order: the pool decides and takes at once."""
        entry = self._entries[waiting.key]
        try:
            lasts = entry.limits.duration("max_age").value
            grant = self.take_now(
                entry.holder, request or entry.request, entry.limits.admit, lasts=lasts
            )
        except NotEnoughGPUs as short:
            entry.blocked = short
            if self.pool.on_one_machine(entry.request) < entry.request.count:  # never fits
                self._end(entry).set_exception(short)
                return Outcome.HELD
            if self.pool.on_one_machine(entry.request, usable=True) < entry.request.count:
                return Outcome.HELD  # until GPUs are healthy, free of outside use or reachable
                # again: keeping freed GPUs for it meanwhile would only idle them
            return Outcome.SHORT
        except LimitExceeded as over:
            entry.blocked = over
            if not over.waitable:  # the user started another server meanwhile
                self._end(entry).set_exception(over)
            return Outcome.HELD
        except Exception as error:  # a fault of one start must not stop the line
            self.log.exception("gpuspawner: reserving for %s failed", entry.holder.name)
            self._end(entry).set_exception(error)
            return Outcome.HELD
        self._end(entry).set_result(grant)
        waited = self.clock() - waiting.arrived
        if waited >= 1:
            self.log.info(
                "gpuspawner: %s's turn after %s in line", entry.holder.name, duration(waited)
            )
        return Outcome.STARTS

    def _end(self, entry: Entry) -> asyncio.Future[Grant]:
        """Out of the line (and out of the written record); its future, to settle."""
        key = entry.waiting.key
        del self._entries[key]
        self._held_for.discard(key)
        if key in self._order:
            self._order.remove(key)
        self._write("left", key)
        return entry.result

    def _write(self, change: str, what: Any) -> None:
        """Write a change of the line down; a failure (a full disk) is logged and costs only
        the notice after a restart, never a start or the line itself."""
        if self.record is None:
            return
        try:
            getattr(self.record, change)(what)
        except sqlite3.Error:
            self.log.exception("gpuspawner: could not write the waiting line down (%s)", change)

    def _recent_use(self, now: float) -> Mapping[int, float]:
        """Everyone's recent GPU-hours, read at most once a minute; where the ledger cannot
        be read (locked, a full disk), the last reading, so the line still moves."""
        at, recent = self._recent
        if now - at >= RECENT_USE_TTL:
            try:
                recent = self.recent_use(now)
            except sqlite3.Error:
                self.log.exception("gpuspawner: could not read recent GPU use; the line goes on")
            self._recent = (now, recent)
        return recent

    # --- what people see -------------------------------------------------------------------
    def status(self, key: int) -> str | None:
        """Where a waiting start stands, for its pending page; None when it is not waiting."""
        entry = self._entries.get(key)
        return line_status.status(self, entry) if entry is not None else None

    def standings(self) -> list[line_status.Standing]:
        """The line in order, for the admin page and its JSON."""
        return line_status.standings(self, [self._entries[key] for key in self._order])

    def entry(self, key: int) -> Entry | None:
        return self._entries.get(key)

    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def order(self) -> list[int]:
        """The waiting keys in line order, as of the last pass."""
        return list(self._order)

    def next_change(self) -> asyncio.Future[None]:
        """Done at the line's next change (a place or an estimate may have moved)."""
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
        return self._changed

    def kept_for(self, key: int) -> bool:
        """Whether freed units gather for this start (it has waited reserve_after)."""
        return key in self._held_for

    def recent_use_now(self) -> Mapping[int, float]:
        return self._recent_use(self.clock())

    def place_of(self, key: int) -> int | None:
        """A waiting start's place (1: next), as its pending page says; None when not waiting."""
        entry = self._entries.get(key)
        return self.place(entry) if entry is not None else None

    def place(self, entry: Entry) -> int:
        """Its place among the starts that wait for what it could use."""
        return len(self.ahead(entry)) + 1

    def ahead(self, entry: Entry) -> list[int]:
        """The starts ahead of it in line that compete with it (could use a unit it could)."""
        key = entry.waiting.key
        ahead = self._order[: self._order.index(key)] if key in self._order else self._order
        return [
            k for k in ahead if k != key and self.compete(self._entries[k].waiting, entry.waiting)
        ]
