"""The spawn form: which profiles a user may pick now, and why others are greyed out.

The hub inserts the form unescaped, so escaping is ours: Jinja with
autoescape on. Admin template folders come first, then the packaged one.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import jinja2

from ..core.gpus import GPU, gpus_in_words
from ..core.limits import LimitExceeded, UserLimits
from ..core.pool import Grant, Usage
from ..core.profiles import Profile, default_profile
from ..core.words import count_gpus, your_server

TEMPLATE = "gpuspawner_form.html"


@dataclass(frozen=True)
class ProfileRow:
    slug: str
    display_name: str
    description: str
    hardware: str
    reason: str
    checked: bool = False


@dataclass(frozen=True)
class NoticeRow:
    """A stop notice on the form, with its button to start that server again on CPU."""

    text: str
    restart_slug: str = ""
    restart_name: str = ""
    restart_action: str = ""  # that server's spawn URL, with the page's XSRF token

    def __str__(self) -> str:  # admin templates written for plain-text notices still work
        return self.text


def hardware(gpus: int, inventory: Sequence[GPU]) -> str:
    if gpus == 0:
        return "no GPU"
    return gpus_in_words(inventory[:1]).replace("1 ×", f"{gpus} ×", 1) + " each"


def why_not_now(profile: Profile, limits: UserLimits, user_id: int, usage: Usage, free: int) -> str:
    """Why `profile` cannot start now, or "" when it can."""
    try:
        limits.admit(profile.gpus, user_id, usage)
    except LimitExceeded as exceeded:
        return str(exceeded)
    if profile.gpus > free:
        return f"Needs {profile.gpus} free GPU(s); {free} free right now."
    return ""


def profile_rows(
    profiles: Sequence[Profile],
    limits: UserLimits,
    user_id: int,
    usage: Usage,
    free: int,
    inventory: Sequence[GPU],
    previous: str | None,
) -> list[ProfileRow]:
    """The profiles this user may pick, each startable or with its reason."""
    visible = [p for p in profiles if limits.may_pick(p.slug)]
    reasons = {p.slug: why_not_now(p, limits, user_id, usage, free) for p in visible}
    startable = [p.slug for p in visible if not reasons[p.slug]]
    preferred = [previous, default_profile(profiles).slug, *startable]
    checked = next((s for s in preferred if s in startable), None)
    return [
        ProfileRow(
            p.slug,
            p.display_name,
            p.description,
            hardware(p.gpus, inventory),
            reasons[p.slug],
            p.slug == checked,
        )
        for p in visible
    ]


def holdings(limits: UserLimits, user_id: int, usage: Usage, grants: Sequence[Grant]) -> str:
    """For example "You hold 1 of your 2 GPUs: GPU-… (your server 'train')."."""
    held = usage.by_user[user_id]
    allowance = limits.max_gpus_per_user.value
    if not held and allowance is None:
        return ""
    amount = count_gpus(held)
    if allowance is not None:
        amount = f"{held} of your {count_gpus(allowance)}"
    servers = [
        f"{', '.join(g.uuids)} ({your_server(g.holder.server)})"
        for g in grants
        if g.holder.user_id == user_id and not g.stopping
    ]
    return f"You hold {amount}" + (": " + "; ".join(servers) + "." if servers else ".")


def render(template_paths: Sequence[str], **context: object) -> str:
    return _environment(tuple(template_paths)).get_template(TEMPLATE).render(**context)


@functools.cache
def _environment(template_paths: tuple[str, ...]) -> jinja2.Environment:
    """One environment per template search path, so the form is compiled once, not per view.

    Jinja still rereads an admin's template when its file changes.
    """
    loader = jinja2.ChoiceLoader(
        [jinja2.FileSystemLoader(list(template_paths)), jinja2.PackageLoader("gpuspawner.hub")]
    )
    return jinja2.Environment(loader=loader, autoescape=True)
