"""The spawn form for one user: what it shows, gathered from the broker's books.

`form` words each part (profiles, availability, holdings); this puts one user's
together: their limits, budget, waiting line places and stop notices.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from jupyterhub.utils import url_escape_path, url_path_join

from ...core.limits import UserLimits
from ..books import budgets
from ..books.broker import Broker
from ..line import status as line_status
from . import form, notices

RESTART_ON = "restart_on"  # the form button of a stop notice: start that server on this profile
LINKS_CANNOT_START = (
    "A link cannot start a server: check the choice below and press Start. "
    "(GPU servers start only from this form, or through the REST API with a token.)"
)


class QueryCannotSpawn(Exception):
    """GET /hub/spawn?… tried to start a server: only a form POST or the API may."""


def render(
    broker: Broker,
    user: Any,
    limits: UserLimits,
    template_paths: Sequence[str],
    images: list[str],
    preselected: str | None,
    xsrf: bytes | None,
    base_url: str,
    turn_quantum: float,
) -> str:
    """The form `user` (JupyterHub's User) sees now, with `preselected` chosen if it may;
    a turn on a GPU shared in turns lasts `turn_quantum` seconds."""
    pool, profiles = broker.pool, broker.site.profiles
    budget = budgets.standing_of(broker, user.db, user.id, limits)
    states = broker.calendar.states(pool)  # a drained GPU is not free
    available = form.availability(pool, states, limits.machines)  # on the user's machines
    return form.render(
        template_paths,
        free=sum(a.free for a in available),
        total=sum(a.total for a in available),
        model=pool.units[0].label if available else "",
        availability=available,
        machines=form.by_machine(pool, states, limits.machines),
        rows=form.profile_rows(
            profiles,
            limits,
            user.id,
            pool,
            preselected,
            line_status.waiting_by_profile(broker.line),
            over_budget=str(budget.refusal(broker.clock()) or ""),
            may_wait=broker.line.may_wait(user.id, limits),
            keep=broker.calendar.kept_from(user.name, None).now,  # as placement has them
        ),
        turns=form.turns_words(turn_quantum),
        holdings=form.holdings(limits, user.id, pool),
        budget=budget.words(),
        calendar=broker.calendar.said_to(user.name, limits.duration("max_age").value),
        home=broker.homes.said_to(user.name, limits),
        away_from=limits.home or "",
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


def preselected(handler: Any, user: Any, orm_spawner: Any) -> str | None:
    """The profile a link asked for, else the one this server had last time, else the one
    the user's latest start had: a new named server has no options of its own (JupyterHub
    6 creates its record as its form opens), and people start one after another on the
    profile they use."""
    request = getattr(handler, "request", None)
    query = request.query_arguments if request is not None else {}
    asked = query.get("opt-profile") or query.get("profile")  # JupyterHub's new style, or old
    if asked:
        return asked[0].decode("utf-8", "replace")
    chosen = [s for s in user.orm_user.orm_spawners.values() if s.user_options]
    latest = max(
        chosen,
        key=lambda s: s.last_activity.timestamp() if s.last_activity else 0.0,
        default=None,
    )
    own = orm_spawner if orm_spawner.user_options else latest
    return (own.user_options or {}).get("profile") if own is not None else None


class ChoosesProfiles(Protocol):
    """What the form's options are checked by: the spawner the form was sent to."""

    def user_limits(self) -> UserLimits: ...

    def permitted_profile(
        self, limits: UserLimits, options: dict[str, Any] | None = None
    ) -> Any: ...


def options_from_form(
    formdata: dict[str, list[str]], spawner: ChoosesProfiles | None = None
) -> dict[str, Any]:
    """Form fields as user_options, checked as the form is sent (JupyterHub passes the
    spawner): a profile or option that does not exist, or that the user's group may not
    pick, gets the form back saying why, holding nothing. Only at once: JupyterHub shows a
    start that fails after its first second on the pending page, not the form. Every start
    checks them again (the REST API does not pass through here).

    An image field left empty means the default image. A stop notice's "start again on
    CPU" button (`restart_on`) names the profile itself, whatever else the form had chosen.
    """
    options: dict[str, Any]
    if formdata.get(RESTART_ON):
        options = {"profile": formdata[RESTART_ON][0]}
    else:
        options = {
            key: values[0] if len(values) == 1 else values
            for key, values in formdata.items()
            if key != "_xsrf" and not (key == "image" and values == [""])
        }
    if spawner is not None:
        spawner.permitted_profile(spawner.user_limits(), options)
    return options
