"""A server's own lease, for the JupyterLab inside it: its GPUs, and the time left.

`GET /hub/api/users/:name/server/gpu-lease` (the default server) and
`GET /hub/api/users/:name/servers/:server/gpu-lease` (a named one); with parking on,
`POST …/gpu-lease/wake` brings a parked server's GPU work back (a cell is about to run).

Who may read it: a token holding `access:servers` for that very server. The
server's own `JUPYTERHUB_API_TOKEN` holds exactly that (JupyterHub's `server`
role resolves `access:servers!server` to its own server), so the notebook
server can ask without any new scope granted to anyone. Everyone else who
holds it (the user, people the user shared the server with, admins) can open
that JupyterLab and see the lease there anyway. Any other server's lease is
403, whether or not it exists, so a token learns nothing about other users.

The lease is computed here, from the broker's books and clocks, the limits
the reclaimer applies, and the idle limit the spawner gave jupyterhub-idle-culler.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import has_scope
from jupyterhub.utils import url_path_join
from tornado import web

from ...core.homes import AWAY
from ...core.lease import Lease, lease
from ...core.profiles import InvalidUserOptions, choose_profile
from ...core.words import duration, iso_utc
from ..books.broker import Broker
from ..books.served import Route, Served, routes

SCOPE = "access:servers"
REFRESH_WHILE = {"parked": 10, "restoring": 2}  # seconds: JupyterLab shows a wake promptly


class LeaseAPIHandler(Served, APIHandler):
    def get(self, user_name: str, server_name: str = "") -> None:
        self._answer(self._spawner(user_name, server_name))

    def _spawner(self, user_name: str, server_name: str) -> Any:
        if self.current_user is None:
            raise web.HTTPError(403, "Missing or invalid credentials.")
        server = f"{user_name}/{server_name}"
        if not has_scope(f"{SCOPE}!server={server}", self.parsed_scopes, db=self.db):
            raise web.HTTPError(403, f"This token may not read the lease of server {server}.")
        user = self.find_user(user_name)
        orm_spawner = user.orm_spawners.get(server_name) if user is not None else None
        if orm_spawner is None or orm_spawner.server is None:
            raise web.HTTPError(404, f"Server {server} is not running.")
        return user.spawners[server_name]

    def _answer(self, spawner: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.write(json.dumps(lease_of(spawner, self.broker)))


class WakeAPIHandler(LeaseAPIHandler):
    """POST …/gpu-lease/wake: a parked server wants its GPUs back (a cell is about to run in
    it). The jobs lent them give way and its work is restored; the answer is its lease, whose
    `residency` says where it is now. A server that is not parked is left as it is."""

    def post(self, user_name: str, server_name: str = "") -> None:
        spawner = self._spawner(user_name, server_name)
        broker = self.broker
        grant = broker.grant_of(spawner.orm_spawner.id)
        if grant is not None and broker.jobs is not None:
            broker.jobs.wake(grant)
        self._answer(spawner)


def lease_of(spawner: Any, broker: Broker) -> dict[str, Any]:
    """The lease of a running GPUSpawner's server, as JSON for the JupyterLab extension."""
    now = broker.clock()
    grant = broker.grant_of(spawner.orm_spawner.id)
    units = grant.units if grant is not None else ()
    user = spawner.user
    limits = broker.limits_for(user)
    durations = dict(limits.durations)
    if spawner.idle_limit is not None:  # what the idle culler reads from the server's state
        durations["idle_timeout" if units else "cpu_idle_timeout"] = spawner.idle_limit
    started = grant.since if grant is not None else _epoch(spawner.orm_spawner.started) or now
    residency = _residency(spawner, broker)
    window = broker.calendar.stop_for(grant) if grant is not None else None
    current = lease(
        gpus=grant.weight if grant is not None else 0,
        started=started,
        idle_since=broker.idle_since(spawner.orm_spawner.id),
        last_activity=_epoch(spawner.orm_spawner.last_activity),
        durations=durations,
        now=now,
        warn_before=spawner.warn_before_cull,
        gpu_use_known=broker.gpu_use_known(spawner.orm_spawner.id),
        parks=bool(spawner.parking),
        parked=residency["state"] != "resident",
        window=(window.start, window.title()) if window is not None else None,
        window_warning=spawner.calendar_warning,
    )
    return {
        "user": user.name,
        "server": spawner.name,
        "profile": _profile(spawner, broker),
        "gpus": [  # one per unit held: a whole GPU, a MIG instance, a shared GPU's slot
            {
                "uuid": u.device,
                "index": u.index,
                "model": u.model,
                "unit": u.id,
                "kind": u.kind.value,
                "name": u.name,
                "label": u.label,
            }
            for u in units
        ],
        "summary": current.summary(),
        "limits": [
            {
                "key": d.key,
                "seconds": d.limit,
                "group": d.group,
                "stops_at": iso_utc(d.stops_at),
                "warn_at": iso_utc(d.warn_at),
                "says": d.says,
            }
            for d in current.deadlines
        ],
        "residency": residency,
        "warning": _docker_silent(spawner, broker, now) or _warning(current),
        "refresh_seconds": REFRESH_WHILE.get(residency["state"], current.look_again_in()),
        "now": iso_utc(now),
    }


def _residency(spawner: Any, broker: Broker) -> dict[str, Any]:
    """Where the server's GPU work is: on its GPUs ("resident"), in host memory while its
    GPUs run a job or another person's turn ("parked"), or on its way back ("restoring")."""
    jobs = broker.jobs
    key = spawner.orm_spawner.id
    state = jobs.residency(key) if jobs is not None else "resident"
    grant = broker.grant_of(key)
    on_it = [broker.pool.holder_of(u.id) for u in grant.units] if grant is not None else []
    lent = state == "parked" and any(g is not None and g.holder.job for g in on_it)
    turn = state == "parked" and any(g is not None and not g.holder.job for g in on_it)
    shared = (
        state == "resident"
        and grant is not None
        and any(not g.holder.job for u in grant.units for g in broker.pool.bound_to(u.id))
    )
    lost = jobs is not None and jobs.work_lost(key)
    says = {
        "resident": LOST_SAYS if lost else _shared_says(spawner) if shared else "",
        "parked": _parked_says(lent, turn, spawner, key, jobs),
        "restoring": "Restoring: your GPU work is on its way back to your GPU.",
    }[state]
    return {"state": state, "lent": lent, "turn": turn, "shared": shared, "says": says}


LOST_SAYS = (
    "Your kernel's GPU state was lost while it was parked: this server's container was "
    "restarted (or its GPU program ended) meanwhile, so there was nothing to bring back. "
    "Your files are kept and your GPU is yours again; run your notebook again to reload "
    "what it had on the GPU."
)


def _shared_says(spawner: Any) -> str:
    return (
        "You share this GPU in turns with one other person, who is parked now. When they "
        "run a cell, your work is parked for their turn at once if your GPU is idle, else "
        f"after your turn of {duration(spawner.turn_quantum)}; it waits in host memory, "
        "and comes back when you run a cell."
    )


def _parked_says(lent: bool, turn: bool, spawner: Any, key: int, jobs: Any) -> str:
    if turn:
        blocked = jobs.turn_blocked(key)
        return (
            "Parked: you share this GPU in turns, and it is the other person's turn"
            + (f"; their work stays on it for now: {blocked}. " if blocked else ". ")
            + "Run a cell (or start a GPU program) and your turn comes once their GPU is "
            + f"idle, or within {duration(spawner.turn_quantum)}; while you both work, "
            + "each has the GPU in turns."
        )
    return (
        "Parked: your GPU work waits in host memory"
        + (", and your GPU runs a job meanwhile. " if lent else ". ")
        + "Run a cell (or start a GPU program) and it comes back, where it was."
    )


def _docker_silent(spawner: Any, broker: Broker, now: float) -> dict[str, Any] | None:
    """Past `tell_user_docker_silent_after` of errors from Docker about this server: the
    hub cannot see it, though it runs on."""
    silence = broker.silence_of(spawner.orm_spawner.id)
    if silence is None or silence.lasted(now) < spawner.tell_user_docker_silent_after:
        return None
    return {
        "key": "docker",
        "stops_at": None,
        "says": f"The hub has had no answer from Docker about this server for "
        f"{duration(silence.lasted(now))}. It runs on; save your work.",
    }


def _warning(current: Lease) -> dict[str, Any] | None:
    deadline, says = current.warning, current.warning_says()
    if deadline is None or says is None:
        return None
    return {"key": deadline.key, "stops_at": iso_utc(deadline.stops_at), "says": says}


def _profile(spawner: Any, broker: Broker) -> dict[str, str] | None:
    try:
        profile = choose_profile(  # (options its start accepted: a swarm's choice too)
            spawner.user_options, broker.site.profiles, spawner.images_offered(), (AWAY,)
        )
    except InvalidUserOptions:
        return None
    return {"slug": profile.slug, "display_name": profile.display_name}


def _epoch(moment: datetime | None) -> float | None:
    """The hub's database keeps naive UTC datetimes."""
    if moment is None:
        return None
    return moment.replace(tzinfo=UTC).timestamp()


def handlers(hub_prefix: str, broker: Broker) -> list[Route]:
    api = url_path_join(hub_prefix, "api/users/([^/]+)")
    return routes(
        broker,
        (f"{api}/server/gpu-lease", LeaseAPIHandler),
        (f"{api}/servers/([^/]*)/gpu-lease", LeaseAPIHandler),
        (f"{api}/server/gpu-lease/wake", WakeAPIHandler),
        (f"{api}/servers/([^/]*)/gpu-lease/wake", WakeAPIHandler),
    )
