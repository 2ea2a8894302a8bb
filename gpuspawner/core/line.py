"""The waiting line's rules: who starts next when GPUs free up, fairly and without idle
GPUs, and what a start in line is told.

Order, as the batch schedulers that do it well order jobs (Slurm's
multifactor priority, Kueue's admission fair sharing): a group's `priority`
first; within one priority, the person who used fewer GPU-hours recently
(decayed with a half-life, `usage.decayed_gpu_hours`); ties by arrival.

Policy — backfill, then a reservation for whoever has waited long:
- A request that does not fit and has waited less than `reserve_after`
  holds nothing back: anyone further back whose request fits starts at once,
  so a freed GPU never sits idle while someone it fits is waiting.
- A request that does not fit and has waited `reserve_after` reserves: from
  then on what frees up that it could use gathers for it. Nobody behind it
  who *competes* (could use a unit it could use) takes such a unit; they may
  still start on units it could not use (`fits_apart`: a plain 1-GPU request
  on an L40S while the head waits for H100s), and requests for other units
  (a MIG instance behind a whole GPU) go on as before, so a reservation never
  idles a unit its head could not use. A 4-GPU
  request therefore starts under any steady stream of 1-GPU requests that
  sort behind it, after at most `reserve_after` plus the time for 4 GPUs to
  free; GPUs sit idle only while they gather for it, never more than it
  asked for. A request sorted ahead of it (a higher priority, less recent
  use) still goes first: the order is the policy's, the reservation only
  stops what comes after.
- A request that may not wait (`patient` false: `max_wait` 0) never
  reserves: it is refused if it does not fit at once.
- A request its group's quota holds back (`Outcome.HELD`) is passed over:
  freed GPUs cannot help it, so none gather for it and it never blocks the
  line; it starts when a member of its group gives GPUs back.
Notebooks give no runtime estimates, so the classic "backfill only what ends
before the reservation" (EASY backfill) has nothing to go on; the wait bound
above is what this policy promises instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from .limits import Limited
from .words import DEFAULT_GROUP, at_clock, duration, from_group, listed, ordinal, your_server

DEFAULT_RESERVE_AFTER = 10 * 60.0


class Outcome(Enum):
    """What trying a request now gives (`fits` may also answer True: STARTS, False: SHORT)."""

    STARTS = "starts"
    SHORT = "short"  # too few free GPUs: what frees up may gather for it
    HELD = "held"  # held back by its group's quota: freed GPUs cannot help it


@dataclass(frozen=True)
class Waiting:
    """A start that waits for GPUs: a server (by spawner id), what it asks, since when."""

    key: int
    user_id: int
    group: str  # the group whose priority it has (the user's highest)
    priority: int
    weight: float  # what it asks for, in GPU-equivalents (a 1g.10gb instance of an A100: 1/7)
    arrived: float
    patient: bool = True  # may wait (max_wait > 0); one that may not never reserves


@dataclass(frozen=True)
class Pass:
    """One pass over the line: who starts now, and who freed units are held for."""

    starting: list[Waiting]
    held_for: list[Waiting]


def everyone_competes(a: Waiting, b: Waiting) -> bool:
    """On a pool of one kind of unit, every two requests compete for it."""
    return True


def in_order(line: Sequence[Waiting], recent_use: Mapping[int, float]) -> list[Waiting]:
    """Priority (higher first), then recent GPU-hours (fewer first), then arrival."""
    return sorted(line, key=lambda w: (-w.priority, recent_use.get(w.user_id, 0.0), w.arrived))


@dataclass
class LinePass:
    """One pass over the line in order, step by step, with no call back into the caller.

    For each waiting start in order the caller finds the reserving heads ahead of it
    that it competes with (`held_for`, and its own rule of competing), tries it (on
    all units it could use, or, behind such heads, only on units none of them could
    use) and tells `tried` what came of it. The hub takes the GPUs as it tries, so
    deciding and reserving are one pass; the rule of who reserves is here.
    """

    now: float
    reserve_after: float = DEFAULT_RESERVE_AFTER
    starting: list[Waiting] = field(default_factory=list)
    held_for: list[Waiting] = field(default_factory=list)  # heads freed units are held for

    def tried(self, waiting: Waiting, outcome: bool | Outcome, behind: bool = False) -> None:
        """`behind`: it was tried apart from heads ahead of it, so it never reserves."""
        if _starts(outcome):
            self.starting.append(waiting)
        elif (
            not behind
            and outcome is not Outcome.HELD
            and waiting.patient
            and self.now - waiting.arrived >= self.reserve_after
        ):
            self.held_for.append(waiting)  # short of units, and has waited long enough


def starting_now(
    ordered: Sequence[Waiting],
    fits: Callable[[Waiting, Sequence[Waiting]], bool | Outcome],
    now: float,
    reserve_after: float = DEFAULT_RESERVE_AFTER,
    competes: Callable[[Waiting, Waiting], bool] = everyone_competes,
    fits_apart: Callable[[Waiting, Sequence[Waiting], Sequence[Waiting]], bool | Outcome]
    | None = None,
) -> Pass:
    """Who of the `ordered` line starts now, and who reserves what frees up: a whole
    `LinePass` with the answers from functions (the simulator's and the tests' way).

    `fits(waiting, starting)` says whether a request can be served now,
    after the ones already chosen to start (`starting`) have taken theirs.
    For a request behind reservations it competes with (`competes(request,
    head)`), `fits_apart(waiting, starting, heads)` is asked instead: whether
    it can be served from units none of those heads could use (without it,
    such a request waits).
    """
    line = LinePass(now, reserve_after)
    for waiting in ordered:
        heads = [head for head in line.held_for if competes(waiting, head)]
        if not heads:
            line.tried(waiting, fits(waiting, line.starting))
        elif fits_apart is not None:  # what frees up that it could use is kept for a head
            line.tried(waiting, fits_apart(waiting, line.starting, heads), behind=True)
    return Pass(line.starting, line.held_for)


def _starts(outcome: bool | Outcome) -> bool:
    return outcome is True or outcome is Outcome.STARTS


# --- what a start in the line is told: where it stands, and why its wait ended ------------
# The pending page, the REST API's progress and the spawn page say the same things the
# same way: what the person waits for, where they stand, what (if anything) gives a time,
# and what they can do.

QUOTA = "max_gpus_group"  # the one limit that waiting can change: a group member gives GPUs back


def standing(
    what: str,
    place: int,
    group: str,
    now: float,
    deadline: float,
    max_wait: Limited,
    *,
    quota: str | None = None,
    kept_for: bool = False,
    kept_ahead: bool = False,
    freeing: str | None = None,
) -> str:
    """ "Waiting for 2 GPUs — you are 3rd in line (group researchers). 1 GPU frees up when …"

    `what` is the request in words (`Request.what`: "2 GPUs", "a MIG instance 1g.10gb");
    `place` counts only the starts ahead that wait for the same kind of unit; `group` is
    the one the user waits as (their priority's), `quota` the group whose max_gpus_group
    holds them back, if that is what they wait for; `kept_for`: what frees up gathers for
    this start, `kept_ahead`: for one ahead of it; `freeing` is the estimate
    (`estimates.next_freeing`), where there is a basis for one.
    """
    text = f"Waiting for {what}"
    if quota is not None:
        text += f" within the quota{from_group(quota)} ({QUOTA})"
    text += f" — you are {ordinal(place)} in line ({_as_group(group)})."
    if kept_for:
        text += " GPUs that free up are kept for you."
    elif kept_ahead:
        text += " GPUs that free up are kept for a start ahead of you, which has waited long."
    if freeing:
        text += f" {freeing}."
    return (
        f"{text} You wait until {at_clock(deadline, now)} at the most "
        f"(max_wait{from_group(max_wait.group)})."
    )


def gave_up(server: str, what: str, place: int, max_wait: Limited, quota: str | None) -> str:
    """Why a start's wait ended at its max_wait, and what the user can do."""
    why = (
        f"its group's GPUs stayed in use ({QUOTA}{from_group(quota)})"
        if quota
        else ("no GPU came free for it")
    )
    return (
        f"{_capital(your_server(server))} waited {duration(max_wait.value or 0)} in line for "
        f"{what}, the longest it may wait (max_wait{from_group(max_wait.group)}), "
        f"and {why} (it was {ordinal(place)} in line). Nothing is held for it: start it again "
        "to join the line anew, or pick a profile with fewer GPUs."
    )


def kept_for_another(what: str) -> str:
    """Why a start that may not wait (max_wait 0) is refused though GPUs are free."""
    return (
        f"Not enough free GPUs for {what} now: the GPUs that free up are kept for a "
        "start that has waited long in line. Try again when it has started, or pick a "
        "profile with fewer GPUs."
    )


def no_place(servers: list[str], places: int, limit: Limited) -> str:
    """Why a start that cannot begin now is refused a place in line: its user already has
    as many starts waiting as they may (`UserLimits.places_in_line`). `servers`: theirs, as
    JupyterHub names them ("alice/train")."""
    many = f"{len(servers)} server{'' if len(servers) == 1 else 's'}"
    rule = f"max_waiting_per_user{from_group(limit.group)}"
    if limit.value is None:
        rule = "max_waiting_per_user, unset: 1 per GPU you could still take"
    return (
        f"You already wait in line for {many} ({listed(servers)}); you may have at most "
        f"{places} waiting at once ({rule}), so this start, which cannot begin now, is "
        "refused. Nothing is held for it: cancel one of those starts, or start this one "
        "again once one of them has begun."
    )


def removed(server: str, at: float) -> str:
    return (
        f"An admin removed the start of {your_server(server)} from the waiting line at "
        f"{at_clock(at, at)}. Nothing is held for it; you may start it again."
    )


def ended_by_restart(server: str, what: str, profile: str, arrived: float, at: float) -> str:
    """For the next spawn page of someone who was waiting when the hub stopped."""
    return (
        f"The start of {your_server(server)} ended when the hub restarted (it was back at "
        f"{at_clock(at, at)}): it was waiting in line for {what} (profile {profile!r}) since "
        f"{at_clock(arrived, at)}, and a restart ends every waiting start. Nothing is held "
        "for it: start it again to join the line anew."
    )


def _as_group(group: str) -> str:
    return group if group == DEFAULT_GROUP else f"group {group}"


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]
