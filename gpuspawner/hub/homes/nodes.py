"""The homes part of the broker: on a swarm whose homes are each node's own, a user's
servers go to the node that holds their home.

The engine adapter says where a server's task ran (`settled`): a user's first server
makes their home there, and later ones mark it used. Every start, wait and judgment of
one reads the user's limits through `narrow`, so the form, the line, jobs and placement
all keep them on that node; a full node makes the start wait in line, a node that is down
makes it wait or be refused, and `said_to` tells them why. An admin moves a home to
another node (`move`, through the engine adapter's `Mover`). Without a record (one host,
or homes on shared storage) nothing is narrowed.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from ...config.adapter import Mover
from ...core.homes import Home, away_chosen, said_of
from ...core.limits import UserLimits
from ...core.pool_view import PoolView
from ...core.profiles import Profile
from ...core.words import iso_utc
from ...engine.home_copy import DIFFERENT, NOT_EMPTY
from ...records.homes import HomeRecord


class Homes:
    def __init__(self, record: HomeRecord | None = None, mover: Mover | None = None) -> None:
        """`mover`: the engine adapter's, where homes are each node's own (`move`)."""
        self.record, self.mover = record, mover
        self._homes: dict[str, Home] = record.all() if record is not None else {}
        self._moving: set[str] = set()  # users whose home is being copied to another node

    @property
    def on_nodes(self) -> bool:
        """Whether homes are each node's own here (and servers follow them)."""
        return self.record is not None

    def of(self, user: str) -> Home | None:
        return self._homes.get(user)

    def all(self) -> list[Home]:
        return sorted(self._homes.values(), key=lambda home: home.user)

    def settled(self, user: str, volume: str, node: str, now: float) -> Home | None:
        """A server of `user` runs on `node` with home `volume`: their home is there if they
        had none yet; a server elsewhere (a profile for other machines, or a start away
        from home) leaves it where it is."""
        if self.record is None:
            return None
        home = self._homes.get(user)
        if home is None:
            home = Home(user, volume, node, now, now)
        elif home.node == node:
            home = home.used(now)
        else:
            return home
        self.record.save(home)
        self._homes[user] = home
        return home

    def moving(self, user: str) -> bool:
        return user in self._moving

    async def move(self, user: str, node: str, empty_old: bool, now: float) -> Home:
        """Copy `user`'s home to `node`, check it, write the new node down and only then,
        where asked, empty the old copy; MoveFailed with the reason, the home unchanged.
        Their starts are refused meanwhile (`Broker.take`)."""
        home = self._homes.get(user)
        if home is None or self.mover is None or self.record is None:
            raise MoveFailed(f"{user} has no home on a node")
        if home.node == node:
            raise MoveFailed(f"{user}'s home is on {node} already")
        if user in self._moving:
            raise MoveFailed(f"{user}'s home is being moved already")
        self._moving.add(user)
        try:
            copied = await asyncio.to_thread(self.mover.copy, home.volume, home.node, node)
            if copied != 0:
                raise MoveFailed(_why_not(copied, home, node))
            moved = Home(user, home.volume, node, home.made, now)
            self.record.save(moved)
            self._homes[user] = moved
            if empty_old:
                emptied = await asyncio.to_thread(self.mover.empty, home.volume, home.node)
                if emptied != 0:
                    raise MoveFailed(
                        f"{user}'s home is now on {node}, checked; emptying the old copy on "
                        f"{home.node} failed ({emptied}): remove it there yourself"
                    )
            return moved
        finally:
            self._moving.discard(user)

    def narrow(self, user: str, limits: UserLimits) -> UserLimits:
        """`limits` with their servers kept on their home's node (where their groups allow
        that node; where they do not, the home is out of their reach anyway)."""
        home = self._homes.get(user)
        return limits if home is None else limits.at_home(home.node)

    def said_to(self, user: str, limits: UserLimits) -> list[str]:
        """Where their files are, where `limits` keep them there (not where their groups
        do not allow that node)."""
        home = self._homes.get(user)
        return [said_of(home)] if home is not None and limits.home == home.node else []


class MoveFailed(Exception):
    """A home that was not moved (or whose old copy stays); the message says why."""


def _why_not(answer: int | str, home: Home, node: str) -> str:
    if answer == DIFFERENT:
        why = "the copy did not agree with the home (a file changed meanwhile?)"
    elif answer == NOT_EMPTY:
        why = (
            f"{node} has a copy of this home already (from a start there away from home): "
            "look at it there, and merge or empty it yourself"
        )
    else:
        why = str(answer)
    return f"{home.user}'s home stays on {home.node}: {why}"


def away_if_full(
    limits: UserLimits, profile: Profile, user_options: Any, pool: PoolView
) -> UserLimits:
    """`limits` without the home's machine where its user chose to start elsewhere should
    that machine have no room for `profile` now (the form's checkbox): they get that
    machine's own copy of their home, and their home stays where it is."""
    if limits.home is None or not away_chosen(user_options):
        return limits
    return (
        limits if pool.refusal(limits.request_for(profile)) is None else replace(limits, home=None)
    )


def homes_json(homes: Homes) -> list[dict[str, Any]]:
    """Each user's home and its node, for the GPUs page and `GET /hub/api/gpus`."""
    return [
        {
            "user": home.user,
            "volume": home.volume,
            "node": home.node,
            "made": iso_utc(home.made),
            "last_used": iso_utc(home.last_used),
        }
        for home in homes.all()
    ]
