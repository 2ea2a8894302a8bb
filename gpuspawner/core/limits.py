"""Who may get how many GPUs: per-group limits, resolved per user, checked per request.

Pure standard library. `LimitsTable.parse` turns the admin's `group_limits`
and `default_limits` into checked values once, at hub start (`group_limits`
checks each); `for_user` resolves one user's limits (the most generous of their
groups' values, each with where it was written); `admit` decides a request
against what is held now, inside the pool's lock.

Limits count GPU-equivalents (`units.Unit.weight`): a whole GPU 1, a MIG
instance its share of its GPU's compute slices, a shared GPU's slot 1/slots.
On a pool of whole GPUs that is simply the number of GPUs; a refusal that
involves a fraction says how it counted.

A group's `nodes` keeps its members' servers on some machines (a course on the
older ones); a profile's `nodes` applies as well (`UserLimits.request_for`).

GPU-hour budgets are resolved here too (`Budgets`); `budgets` does their arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from .errors import LimitsConfigError
from .group_limits import Limits, check_retention, parse_limits
from .limit_keys import KEY, Concern, Merge, named
from .pool import Usage
from .profiles import Profile
from .units import Request
from .words import COUNTING, DEFAULT_GROUP, amount, count_gpus, from_group, members


class LimitExceeded(Exception):
    """A request over a limit. `key` and `group` name the limit for the user; `waitable` says
    whether waiting in line could change it (a group member giving GPUs back). `state` is
    the message without `then`, what to do about it: where the start would wait in line,
    the form says that instead."""

    def __init__(
        self, message: str, key: str, group: str | None, waitable: bool = False, then: str = ""
    ) -> None:
        super().__init__(f"{message} {then}" if then else message)
        self.key, self.group, self.waitable, self.state = key, group, waitable, message


@dataclass(frozen=True)
class Limited:
    """A resolved value and the group it came from, so refusals can name it."""

    value: Any
    group: str | None


@dataclass(frozen=True)
class Budgets:
    """A user's GPU-hours per rolling week, resolved from their groups like every limit.

    `per_user`: the most generous `gpu_hours_per_week` of their groups.
    `groups`: each of their groups' own `gpu_hours_per_week_group` (what all its members
    may use together); empty where one of their groups has none, as with quotas.
    `stop`: stop their running GPU servers once over, only if every group says so.
    """

    per_user: Limited = Limited(None, None)
    groups: Mapping[str, float] = field(default_factory=dict)
    stop: bool = False

    @property
    def any(self) -> bool:
        return self.per_user.value is not None or bool(self.groups)


@dataclass(frozen=True)
class UserLimits:
    max_gpus_per_server: Limited
    max_gpus_per_user: Limited
    profiles: Limited
    quotas: Mapping[str, Fraction | None] = field(default_factory=dict)
    durations: Mapping[str, Limited] = field(default_factory=dict)
    max_wait: Limited = Limited(0.0, None)  # seconds; 0: a start that cannot be served is refused
    priority: Limited = Limited(0, None)  # and the group the user waits as
    line_places: Limited = Limited(None, None)  # max_waiting_per_user; None: `places_in_line`
    budgets: Budgets = field(default_factory=Budgets)
    nodes: Limited = Limited(None, None)  # the machines their servers may run on; None: any
    home: str | None = None  # the machine that holds their home, where homes are each node's

    def may_pick(self, slug: str) -> bool:
        return self.profiles.value is None or slug in self.profiles.value

    def places_in_line(self, held: Fraction, pool_gpus: Fraction) -> int:
        """How many of this user's starts may wait in line at once (max_waiting_per_user).

        Each waiting start counts against JupyterHub's concurrent_spawn_limit, so one user
        must not fill it. Unset: 1 per GPU they could still take (`max_gpus_per_user`, or the
        pool's `pool_gpus` where that is unlimited, minus the `held` GPU-equivalents),
        rounded up, and at least 1. A start that cannot begin now is refused beyond that.
        """
        if self.line_places.value is not None:
            return int(self.line_places.value)
        most = self.max_gpus_per_user.value
        return max(1, math.ceil((pool_gpus if most is None else most) - held))

    def request_for(self, profile: Profile) -> Request:
        """What this user's start on `profile` asks the pool for: on a machine both the
        profile and their groups allow, and their home's where it is one of those. Every
        start, wait and judgment of one uses this."""
        request = profile.request.only_on(self.nodes.value)
        if self.home is None or (request.nodes is not None and self.home not in request.nodes):
            return request  # a profile for other machines: the user chose those
        return request.only_on({self.home})

    def at_home(self, node: str) -> UserLimits:
        """These limits with their servers kept on `node`, where their home is (`homes`),
        wherever their groups allow that node (elsewhere the home is out of their reach)."""
        allowed = self.nodes.value
        return self if allowed is not None and node not in allowed else replace(self, home=node)

    @property
    def machines(self) -> frozenset[str] | None:
        """The machines their servers go to, unless a profile names others: their home's,
        else those their groups allow (None: any)."""
        return frozenset({self.home}) if self.home is not None else self.nodes.value

    def duration(self, key: str) -> Limited:
        """A culling limit (seconds) and where it came from; Limited(None, …) for never."""
        return self.durations.get(key, Limited(None, None))

    def admit(self, gpus: int | Fraction, user_id: int, usage: Usage) -> str | None:
        """Raise LimitExceeded, or return the quota group to charge (None: no quota).

        `gpus` is what the request weighs, in GPU-equivalents.
        """
        if gpus == 0:
            return None
        per_server = self.max_gpus_per_server
        if per_server.value is not None and gpus > per_server.value:
            raise LimitExceeded(
                f"This profile asks for {count_gpus(gpus)}, but one server may hold at most "
                f"{count_gpus(per_server.value)} "
                f"(max_gpus_per_server{from_group(per_server.group)}). "
                "Pick a smaller profile." + _counted(gpus, per_server.value),
                "max_gpus_per_server",
                per_server.group,
            )
        per_user = self.max_gpus_per_user
        held = usage.by_user[user_id]
        if per_user.value is not None and held + gpus > per_user.value:
            raise LimitExceeded(
                f"You already hold {count_gpus(held)} of your {count_gpus(per_user.value)} "
                f"(max_gpus_per_user{from_group(per_user.group)}); "
                f"this profile asks for {amount(gpus)} more. "
                "Stop one of your other servers first, or pick a smaller profile."
                + _counted(held, gpus, per_user.value),
                "max_gpus_per_user",
                per_user.group,
            )
        return self._charge(gpus, usage)

    def _charge(self, gpus: int | Fraction, usage: Usage) -> str | None:
        if not self.quotas or any(q is None for q in self.quotas.values()):
            return None
        roomiest = max(self.quotas, key=lambda g: (self.quotas[g] or 0) - usage.by_group[g])
        largest = max(self.quotas, key=lambda g: self.quotas[g] or 0)
        if gpus > (self.quotas[largest] or 0):
            quota = self.quotas[largest] or Fraction(0)
            raise LimitExceeded(
                f"This profile asks for {count_gpus(gpus)}, but {members(largest).lower()} may "
                f"hold at most {count_gpus(quota)} together (max_gpus_group"
                f"{from_group(largest)}). Pick a smaller profile." + _counted(gpus, quota),
                "max_gpus_group",
                largest,
            )
        quota = self.quotas[roomiest] or Fraction(0)
        held = usage.by_group[roomiest]
        if held + gpus > quota:
            raise LimitExceeded(
                f"{members(roomiest)} already hold {amount(held)} of their "
                f"{count_gpus(quota)} (max_gpus_group{from_group(roomiest)}); "
                f"this profile asks for {amount(gpus)} more." + _counted(held, gpus, quota),
                "max_gpus_group",
                roomiest,
                waitable=True,
                then="Try again when a group member's server stops, or pick CPU only.",
            )
        return roomiest


def _counted(*numbers: int | Fraction) -> str:
    """How the numbers were counted, where one of them is not a whole number of GPUs."""
    if all(Fraction(n).denominator == 1 for n in numbers):
        return ""
    return f" (Counted in {COUNTING}.)"


@dataclass(frozen=True)
class LimitsTable:
    groups: Mapping[str, Limits]
    default: Limits
    limit_admins: bool = False

    @classmethod
    def parse(
        cls,
        group_limits: Mapping[str, Any],
        default_limits: Mapping[str, Any],
        profile_slugs: Collection[str],
        limit_admins: bool = False,
        retention: float = math.inf,
    ) -> LimitsTable:
        """Checked limits; `retention`: seconds the usage ledger keeps a grant, which must
        cover the budgets' 7-day window, or budgets would forget use still in it."""
        if not isinstance(group_limits, Mapping):
            raise LimitsConfigError("c.GPUSpawner.group_limits must be a dict of group → limits")
        default = parse_limits(default_limits, "default_limits", None, profile_slugs)
        groups = {
            name: parse_limits(raw, f"group_limits[{name!r}]", default, profile_slugs)
            for name, raw in group_limits.items()
        }
        check_retention(
            {"default_limits": default, **{f"group_limits[{n!r}]": g for n, g in groups.items()}},
            retention,
        )
        return cls(groups, default, limit_admins)

    def for_user(self, groups: Iterable[str], admin: bool = False) -> UserLimits:
        """One user's limits: the most generous of their groups'.

        An admin (unless `limit_admins`) may take any number of GPUs and any
        profile, with no budget; culling limits apply to admins as to everyone in their groups.
        """
        listed = listed_groups(self, groups)

        def most_generous(key: str) -> Limited:
            return merged(listed, key)

        durations = {key: merged(listed, key) for key in (*CULLING, *CALENDAR)}
        booking = durations["max_booking"]  # unset: may not book (0)
        durations["max_booking"] = booking if booking.value else Limited(None, None)
        wait, priority = merged(listed, "max_wait"), merged(listed, "priority")
        places = most_generous("max_waiting_per_user")
        if admin and not self.limit_admins:
            unlimited = Limited(None, "admin")
            return UserLimits(
                unlimited,
                unlimited,
                unlimited,
                durations=durations,
                max_wait=wait,
                priority=priority,
                line_places=places,
            )
        group_hours = merged(listed, "gpu_hours_per_week_group").value
        budgets = Budgets(
            most_generous("gpu_hours_per_week"),
            {n: h for n, h in group_hours.items() if h is not None}
            if None not in group_hours.values()
            else {},
            merged(listed, "stop_over_budget").value,
        )
        return UserLimits(
            max_gpus_per_server=most_generous("max_gpus_per_server"),
            max_gpus_per_user=most_generous("max_gpus_per_user"),
            profiles=merged(listed, "profiles"),
            quotas=merged(listed, "max_gpus_group").value,
            durations=durations,
            max_wait=wait,
            priority=priority,
            line_places=places,
            budgets=budgets,
            nodes=merged(listed, "nodes"),
        )


CULLING, CALENDAR = named(Concern.CULLING), named(Concern.CALENDAR)  # the durations


def listed_groups(table: LimitsTable, groups: Iterable[str]) -> dict[str, Limits]:
    """A user's groups that `table` lists, by name in name order; default_limits alone for a
    user in none of them."""
    listed = {g: table.groups[g] for g in sorted(set(groups)) if g in table.groups}
    return listed or {DEFAULT_GROUP: table.default}


def merged(listed: Mapping[str, Limits], key: str) -> Limited:
    """One user's value of `key` from their groups' (`listed`, in name order), by the key's
    merge rule (`limit_keys.KEYS`), with where it was written where that is said: in the
    group's own entry, or, for a key it leaves out, in default_limits."""
    rule, unset = KEY[key].merge, KEY[key].unset
    values = [(getattr(limits, key), _source(name, limits, key)) for name, limits in listed.items()]
    given = [value for value, _ in values if value is not None]
    if rule is Merge.MOST:
        unlimited = [where for value, where in values if value is None]
        return Limited(None, unlimited[0]) if unlimited else Limited(*max(values))
    if rule is Merge.HIGHEST:  # unset counts as `unset`; on a tie, the first group by name
        counted = [
            (unset if (v := getattr(lim, key)) is None else v, n) for n, lim in listed.items()
        ]
        value, name = max(counted, key=lambda pair: pair[0])
        return Limited(value, _source(name, listed[name], key) if KEY[key].sourced else name)
    if rule is Merge.HIGHEST_SET:
        return Limited(max(given, default=unset), None)
    if rule is Merge.LEAST_SET:
        return Limited(min(given, default=unset), None)
    if rule is Merge.UNION:
        if len(given) < len(values):
            return Limited(None, None)
        return Limited(frozenset[str]().union(*given), ", ".join(listed))
    if rule is Merge.ALL:
        return Limited(all(given), None)
    if rule is Merge.ANY:
        return Limited(any(given), None)
    return Limited({name: getattr(limits, key) for name, limits in listed.items()}, None)


def _source(name: str, limits: Limits, key: str) -> str:
    """Where group `name`'s value of `key` was written: in its own entry, or, for a key it
    leaves out, in default_limits, which a message must name instead."""
    return DEFAULT_GROUP if key in limits.inherited else name
