"""GPU-hour budgets inside the hub: the ledger's last week and the groups' members now, handed
to the core's arithmetic (`core.budgets`).

A start asks before it reserves anything (a used-up budget refuses it with 403 and leaves
nothing allocated); the form shows each user where they stand; the reclaimer stops servers
over budget only where the admin set `stop_over_budget`. Who is in a group is read from
the hub's database at that moment, so a group budget follows its members.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from jupyterhub import orm

from ...core.budgets import Standing, standing
from ...core.limits import UserLimits
from ...core.profiles import Profile
from ...core.usage import WEEK, UsageRecord
from ...core.words import DEFAULT_GROUP
from .broker import Broker


def standing_of(
    broker: Broker,
    db: Any,
    user_id: int,
    limits: UserLimits,
    week: list[UsageRecord] | None = None,
    members: Mapping[str, frozenset[int]] | None = None,
) -> Standing:
    """Where one user stands against each budget that applies to them, now. `week`: the
    ledger's last week, already read (`of_users_now(db, last_week(…))`), and `members`,
    those of the budgets' groups (`group_members`); else each is read here."""
    budgets = limits.budgets
    if not budgets.any:
        return Standing()
    now = broker.clock()
    if members is None:
        members = group_members(db, budgets.groups, broker.site.limits.groups)
    if week is None:
        week = of_users_now(db, last_week(broker, now))
    return standing(budgets, user_id, members, week, now)


def start_refusal(broker: Broker, user: Any, profile: Profile, limits: UserLimits) -> str | None:
    """Why a GPU start is refused for a used-up GPU-hour budget, before anything is reserved
    and without a place in the waiting line: waiting gives no budget back (use leaves the
    window by the hour, not when a GPU frees up). CPU-only profiles are never refused."""
    if profile.request.kind is None:
        return None
    refusal = standing_of(broker, user.db, user.id, limits).refusal(broker.clock())
    return None if refusal is None else str(refusal)


def last_week(broker: Broker, now: float) -> list[UsageRecord]:
    """Every grant held at any time in the week up to `now`, from the usage ledger."""
    return broker.ledger.records(since=now - WEEK) if broker.ledger is not None else []


def of_users_now(db: Any, records: list[UsageRecord]) -> list[UsageRecord]:
    """The records whose user id still means the same person: JupyterHub's SQLite database
    gives a deleted user's id to the next user made, who must not inherit those hours."""
    ids = {record.user_id for record in records}
    rows = db.query(orm.User.id, orm.User.created).filter(orm.User.id.in_(ids))
    since = {user_id: _timestamp(created) for user_id, created in rows if created is not None}
    return [r for r in records if r.start >= since.get(r.user_id, r.start)]


def _timestamp(moment: datetime) -> float:
    """JupyterHub keeps UTC times without their zone."""
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def group_members(
    db: Any, groups: Iterable[str], listed: Collection[str]
) -> dict[str, frozenset[int]]:
    """The user ids of each group now. For `default_limits`: users in no group that
    `group_limits` lists (whose group budget they share, as they share its quota)."""
    found: dict[str, frozenset[int]] = {}
    for name in groups:
        if name == DEFAULT_GROUP:
            found[name] = frozenset(
                user.id
                for user in db.query(orm.User)
                if not any(group.name in listed for group in user.groups)
            )
            continue
        group = orm.Group.find(db, name)
        found[name] = frozenset(user.id for user in (group.users if group is not None else ()))
    return found
