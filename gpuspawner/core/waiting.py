"""What a start in the waiting line is told: where it stands, and why its wait ended.

Pure words, in one place: the pending page, the REST API's progress and the
spawn page say the same things the same way. Each message says what the
person waits for, where they stand, what (if anything) gives a time, and what
they can do.
"""

from __future__ import annotations

from .limits import Limited
from .words import DEFAULT_GROUP, at_clock, duration, from_group, listed, ordinal, your_server

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
