"""The spawn form for one user: what it shows, gathered from the broker's books.

`form` words each part (profiles, availability, holdings); this puts one user's
together: their limits, budget, waiting line places and stop notices.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jupyterhub.utils import url_escape_path, url_path_join

from ..core.limits import UserLimits
from . import budgets, form, notices
from .broker import Broker


def render(
    broker: Broker,
    user: Any,
    limits: UserLimits,
    template_paths: Sequence[str],
    images: list[str],
    preselected: str | None,
    xsrf: bytes | None,
    base_url: str,
) -> str:
    """The form `user` (JupyterHub's User) sees now, with `preselected` chosen if it may."""
    pool, profiles = broker.pool, broker.site.profiles
    budget = budgets.standing_of(broker, user.db, user.id, limits)
    available = form.availability(pool, limits.nodes.value)  # on the user's machines
    return form.render(
        template_paths,
        free=sum(a.free for a in available),
        total=sum(a.total for a in available),
        model=pool.units[0].label if available else "",
        availability=available,
        machines=form.by_machine(pool, limits.nodes.value),
        rows=form.profile_rows(
            profiles,
            limits,
            user.id,
            pool,
            preselected,
            broker.line.waiting_by_profile(),
            over_budget=str(budget.refusal(broker.clock()) or ""),
            may_wait=broker.line.may_wait(user.id, limits),
        ),
        holdings=form.holdings(limits, user.id, pool),
        budget=budget.words(),
        images=images,
        notices=notices.rows(
            notices.stop_notices(
                user.orm_user.orm_spawners,
                notices.cpu_profile(profiles, limits, user.id, pool),
            ),
            url_path_join(base_url, "spawn", url_escape_path(user.name)),
            xsrf,
        ),
    )
