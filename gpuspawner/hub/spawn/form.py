"""The spawn form: which profiles a user may pick now, and why others are greyed out.

The hub inserts the form unescaped, so escaping is ours: Jinja with
autoescape on. Admin template folders come first, then the packaged one.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import jinja2

from ...core.limits import LimitExceeded, UserLimits
from ...core.nodes import Count, counts_by_node
from ...core.pool_view import DeviceState, PoolView
from ...core.profiles import Profile, default_profile
from ...core.units import Unit
from ...core.words import amount, count_gpus, duration, from_group, your_server

TEMPLATE = "gpuspawner_form.html"
WAIT = "If you start it now, you wait in line"  # then until what, and for how long at most


@dataclass(frozen=True)
class ProfileRow:
    slug: str
    display_name: str
    description: str
    hardware: str
    reason: str
    checked: bool = False
    waiting: int = 0  # starts waiting in line for this profile
    note: str = ""  # cannot start now, but this user would wait in line for it
    turns: bool = False  # shares a GPU in turns with one other person when none is free


@dataclass(frozen=True)
class Availability:
    """One kind of unit on the form: "2 of 2 GPUs free · NVIDIA H100 80GB HBM3 · 80 GiB"."""

    kind: str
    free: int
    total: int
    what: str


@dataclass(frozen=True)
class NoticeRow:
    """A stop notice on the form, with its button to start that server again on CPU."""

    text: str
    restart_slug: str = ""
    restart_name: str = ""
    restart_action: str = ""  # that server's spawn URL, with the page's XSRF token

    def __str__(self) -> str:  # admin templates written for plain-text notices still work
        return self.text


def by_machine(
    pool: PoolView, states: Mapping[str, DeviceState], nodes: Collection[str] | None = None
) -> list[tuple[str, Count]]:
    """Free and total GPUs (of every kind) on each of the user's machines, where the pool
    spans more than one; [] on one host. `states`: each unit's, as shown (drains count)."""
    counts = counts_by_node(pool.units, states)
    found = [
        (node, Count(sum(c.free for c in kinds.values()), sum(c.total for c in kinds.values())))
        for node, kinds in counts.items()
        if nodes is None or node in nodes
    ]
    return found if len(counts) > 1 else []


def availability(
    pool: PoolView, states: Mapping[str, DeviceState], nodes: Collection[str] | None = None
) -> list[Availability]:
    """Free and total units of each kind and model, in the pool's order, on the machines
    `nodes` names (a user's groups' `nodes`; None: every machine). `states`: each unit's, as
    shown (a drained unit is not free: `Calendar.states`)."""
    groups: dict[tuple[object, ...], list[Unit]] = {}
    for unit in pool.units:
        if nodes is not None and unit.node not in nodes:
            continue
        key = (unit.kind, unit.model, unit.profile, unit.memory_bytes, unit.slots)
        groups.setdefault(key, []).append(unit)
    return [
        Availability(
            units[0].kind.value,
            sum(states[u.id] is DeviceState.FREE for u in units),
            len(units),
            units[0].free_of_its_kind,
        )
        for units in groups.values()
    ]


def why_not_now(profile: Profile, limits: UserLimits, user_id: int, pool: PoolView) -> str:
    """Why `profile` cannot start now, or "" when it can."""
    return _blocked(profile, limits, user_id, pool).reason


@dataclass(frozen=True)
class Blocked:
    """Why a profile cannot start now, for a user who may not wait; and, where waiting in
    line could change that, what a user who may wait reads instead (the reason without the
    advice to try again later, and what they would wait for)."""

    reason: str = ""
    if_waiting: str = ""


def _blocked(
    profile: Profile,
    limits: UserLimits,
    user_id: int,
    pool: PoolView,
    keep: frozenset[str] = frozenset(),
) -> Blocked:
    """Why `profile` cannot start now (no reason when it can), and what waiting in line
    would mean where it could change that (too few free units of a kind one machine has
    enough of, or the group's quota full). `keep`: units the calendar keeps from this user
    now (drained, or booked for others), which placement would not give them either."""
    request = limits.request_for(profile)
    try:
        limits.admit(pool.weight_of(request), user_id, pool.usage())
    except LimitExceeded as exceeded:
        waits = f"{exceeded.state} {WAIT} until a group member's server stops"
        return Blocked(str(exceeded), waits if exceeded.waitable else "")
    short = pool.refusal(request, keep)
    if short is None:
        return Blocked()
    reason = short.why
    if not reason:
        reason = f"Needs {request.what}; {short.free} of {short.total} free right now."
        if request.plain:
            reason = f"Needs {request.gpus} free GPU(s); {short.free} free right now."
    waitable = request.count <= pool.on_one_machine(request)
    return Blocked(reason, f"{reason} {WAIT}" if waitable else "")


def profile_rows(
    profiles: Sequence[Profile],
    limits: UserLimits,
    user_id: int,
    pool: PoolView,
    previous: str | None,
    waiting: Mapping[str, int] | None = None,
    over_budget: str = "",
    may_wait: bool = True,
    keep: frozenset[str] = frozenset(),
) -> list[ProfileRow]:
    """The profiles this user may pick, each startable or with its reason; how many wait for
    each. Where the user may wait in line (max_wait, and a place left for them in it), a full
    pool or quota greys nothing out: the row says they would wait instead. `over_budget`: why
    no GPU profile may start now (a used-up GPU-hour budget), if so; waiting cannot change
    that. `keep`: units the calendar keeps from this user now (`Kept.now`)."""
    visible = [p for p in profiles if limits.may_pick(p.slug)]
    blocked = {
        p.slug: Blocked(over_budget)
        if over_budget and p.request.kind is not None
        else _blocked(p, limits, user_id, pool, keep)
        for p in visible
    }
    max_wait = limits.max_wait
    notes = {
        slug: f"{why.if_waiting}, at most {duration(max_wait.value)} "
        f"(max_wait{from_group(max_wait.group)})."
        for slug, why in blocked.items()
        if why.if_waiting and max_wait.value and may_wait
    }
    reasons = {slug: "" if slug in notes else why.reason for slug, why in blocked.items()}
    startable = [p.slug for p in visible if not reasons[p.slug]]
    preferred = [previous, default_profile(profiles).slug, *startable]
    checked = next((s for s in preferred if s in startable), None)
    units = pool.units
    return [
        ProfileRow(
            p.slug,
            p.display_name,
            p.description,
            p.request.hardware(units),
            reasons[p.slug],
            p.slug == checked,
            (waiting or {}).get(p.slug, 0),
            notes.get(p.slug, ""),
            p.request.in_turns,
        )
        for p in visible
    ]


def turns_words(turn_quantum: float) -> str:
    """What a profile in turns means, for the form."""
    return (
        "In turns: when no GPU is free, you start at once on a GPU shared with one other "
        "person. While you both run work on it, each has it for "
        f"{duration(turn_quantum)} at a time, the other's work parked in host memory "
        "meanwhile: your GPU work is slower, and nothing is lost. When their GPU is idle, "
        "your next cell gets it at once."
    )


def holdings(limits: UserLimits, user_id: int, pool: PoolView) -> str:
    """For example "You hold 1 of your 2 GPUs: GPU-… (your server 'train')."."""
    held = pool.usage().by_user[user_id]
    allowance = limits.max_gpus_per_user.value
    if not held and allowance is None:
        return ""
    words = count_gpus(held)
    if allowance is not None:
        words = f"{amount(held)} of your {count_gpus(allowance)}"
    servers = [
        f"{', '.join(u.held_as for u in g.units)} ({your_server(g.holder.server)})"
        for g in pool.grants()
        if g.holder.user_id == user_id and not g.stopping
    ]
    return f"You hold {words}" + (": " + "; ".join(servers) + "." if servers else ".")


def render(template_paths: Sequence[str], **context: object) -> str:
    return _environment(tuple(template_paths)).get_template(TEMPLATE).render(**context)


@functools.cache
def _environment(template_paths: tuple[str, ...]) -> jinja2.Environment:
    """One environment per template search path, so the form is compiled once, not per view.

    Jinja still rereads an admin's template when its file changes.
    """
    loader = jinja2.ChoiceLoader(
        [
            jinja2.FileSystemLoader(list(template_paths)),
            jinja2.PackageLoader("gpuspawner.hub.spawn"),
        ]
    )
    return jinja2.Environment(loader=loader, autoescape=True)
