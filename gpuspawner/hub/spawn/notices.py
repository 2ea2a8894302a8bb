"""Why a user's servers were stopped, and the way back: what the spawn page and the API say.

A server stopped by policy or by an admin leaves a notice in its state, kept
until its next start. A GPU server's notice also offers to start the same server again on a
CPU-only profile: its home is the same, so the user keeps working on their
files while the GPUs serve someone else. The offer is made only where the user
may start that profile now, and it is only an offer: the start itself goes
through the ordinary, XSRF-checked form POST or the REST API, and is checked
like any other.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from jupyterhub import orm
from jupyterhub.utils import url_escape_path, url_path_join
from tornado.httputil import url_concat

from ...core.limits import UserLimits
from ...core.line import ended_by_restart
from ...core.pool_view import PoolView
from ...core.profiles import Profile
from ...records.line import Waited
from .form import NoticeRow, why_not_now

STATE_NOTICE = "stop_notice"
STATE_CPU_RESTART = "restart_on_cpu"  # the stopped server held GPUs: offer a CPU-only start
REASON_LIMIT = 500  # characters of an admin's reason for a stop: a sentence or two


@dataclass(frozen=True)
class StopNotice:
    server: str
    text: str
    restart: Profile | None  # the CPU-only profile offered, if any


def stopped_by_admin(reason: str) -> str:
    """Why the server stopped, when an admin stopped it from the GPUs page: that an admin did,
    not a policy, and the admin's words where they gave any (on one line)."""
    words = " ".join(reason.split()).rstrip(".")  # the notice's own sentence ends it
    return f"an admin stopped it, saying “{words}”" if words else "an admin stopped it"


def cpu_profile(
    profiles: Sequence[Profile], limits: UserLimits, user_id: int, pool: PoolView
) -> Profile | None:
    """The first CPU-only profile this user may start now, if any (a MIG or shared-GPU
    profile asks for no whole GPU, but is no CPU-only one)."""
    for profile in profiles:
        if (
            profile.request.kind is None
            and limits.may_pick(profile.slug)
            and not why_not_now(profile, limits, user_id, pool)
        ):
            return profile
    return None


def stop_notices(orm_spawners: Mapping[str, Any], cpu: Profile | None) -> Iterator[StopNotice]:
    """The notices of a user's stopped servers (JupyterHub's orm spawners, by name)."""
    for name, orm_spawner in sorted(orm_spawners.items()):
        state = orm_spawner.state or {}
        if orm_spawner.server is not None or not state.get(STATE_NOTICE):
            continue
        offer = cpu if state.get(STATE_CPU_RESTART) else None
        yield StopNotice(name, str(state[STATE_NOTICE]), offer)


def rows(found: Iterable[StopNotice], spawn_url: str, xsrf: bytes | None) -> list[NoticeRow]:
    """The notices for the spawn form. An offer becomes a button that POSTs the form to that
    server's own spawn URL (`spawn_url` is the user's, /hub/spawn/NAME) with the page's XSRF
    token; without a token (no page being served) there is no button."""
    shown = []
    for notice in found:
        if notice.restart is None or xsrf is None:
            shown.append(NoticeRow(notice.text))
            continue
        url = (
            url_path_join(spawn_url, url_escape_path(notice.server)) if notice.server else spawn_url
        )
        action = url_concat(url, {"_xsrf": xsrf.decode("ascii")})
        shown.append(
            NoticeRow(notice.text, notice.restart.slug, notice.restart.display_name, action)
        )
    return shown


def as_json(notice: StopNotice, servers_api: str) -> dict[str, Any]:
    """A notice for the REST API; `servers_api` is the user's /hub/api/users/…/servers/ URL."""
    model: dict[str, Any] = {"server": notice.server, "notice": notice.text, "restart": None}
    if notice.restart is not None:
        model["restart"] = {
            "profile": notice.restart.slug,
            "display_name": notice.restart.display_name,
            "method": "POST",
            "url": servers_api + quote(notice.server, safe=""),
            "json": {"user_options": {"profile": notice.restart.slug}},
        }
    return model


def end_waiting_starts(db: Any, waited: Iterable[Waited], at: float) -> list[Waited]:
    """At hub start: a notice for each server whose start was waiting in line when the hub
    before this one ended (JupyterHub drops pending spawns on restart). Written into the
    server's state before JupyterHub loads it, so the next spawn page and the stop-notices
    API say it. Returns the servers told (a deleted one is not)."""
    told = []
    for entry in waited:
        orm_spawner = db.get(orm.Spawner, entry.spawner_id)
        if orm_spawner is None:
            continue
        text = ended_by_restart(entry.server, entry.asks_for, entry.profile, entry.arrived, at)
        orm_spawner.state = {**(orm_spawner.state or {}), STATE_NOTICE: text}
        told.append(entry)
    db.commit()
    return told
