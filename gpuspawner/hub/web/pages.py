"""The hub's GPU pages: the pool and the last 7 days' use for admins, in JupyterHub's UI and
as JSON for scripts, with a stop that tells the user why; and for each user, as JSON, why
their servers were stopped and how to go on (the spawn page shows the same).

Who may do what is `access`'s: reading the pool needs `custom:gpus:read`, acting on it
`custom:gpus:admin` and JupyterHub's own `delete:servers` for the user concerned."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from jupyterhub import orm
from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.handlers.base import BaseHandler
from jupyterhub.scopes import needs_scope
from jupyterhub.utils import url_escape_path, url_path_join
from tornado import web

from ...core.pool import Grant
from ...core.words import server_name as named
from ..base import access
from ..base.answers import id_in_url
from ..books.broker import Broker
from ..books.served import Route, Served, routes
from ..calendar.api import drain_choices, window_json
from ..homes.nodes import homes_json
from ..jobs.board import JobBoard
from ..jobs.view import job_view
from ..spawn import notices
from .report import HolderNow, as_labelled, pool_report, usage_report

TEMPLATES = str(Path(__file__).with_name("templates"))
ENDED_JOBS_SHOWN = 24 * 3600.0  # seconds: the GPUs page lists the jobs that ended this recently


class PoolReport(Served):
    """What both pages show: the report, each holder as the hub's database names it now."""

    def report(self: Any) -> dict[str, Any]:
        broker = self.broker
        jobs = broker.jobs
        report = {
            **pool_report(broker, self._holder_now),
            "usage": usage_report(broker),
            "jobs": [],
            "calendar": [window_json(w, broker.clock()) for w in broker.calendar.windows()],
            "calendar_choices": drain_choices(broker.site.gpus),
            "homes": homes_json(broker.homes) if broker.homes.on_nodes else None,
        }
        if isinstance(jobs, JobBoard):
            ended = jobs.ended_since(broker.clock() - ENDED_JOBS_SHOWN)
            places = jobs.places()
            report["jobs"] = [job_view(j, jobs, self.base_url, places) for j in jobs.unfinished()]
            report["ended_jobs"] = [job_view(j, jobs, self.base_url, places) for j in ended]
        return report

    def _holder_now(self: Any, grant: Grant) -> HolderNow:
        spawner = self.db.get(orm.Spawner, grant.holder.spawner_id)
        if spawner is None or spawner.user is None:
            return as_labelled(grant)  # a server deleted while its container is going
        return HolderNow(spawner.user.name, spawner.name, spawner.last_activity)


class PoolAPIHandler(PoolReport, APIHandler):
    """GET /hub/api/gpus: every GPU, its state, telemetry, health and holder, the line and
    the week's use by user (custom:gpus:read: a dashboard's token needs no more)."""

    def get(self) -> None:
        access.require(self, access.READ)
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(self.report()))


class PoolPageHandler(PoolReport, BaseHandler):
    """GET /hub/gpus: the same, as a page; with custom:gpus:admin, a button to stop each
    holder's server (asking first, and for a reason to tell its user)."""

    @web.authenticated
    async def get(self) -> None:
        access.require(self, access.READ)
        html = await self.render_template(
            "gpuspawner_admin.html",
            report=self.report(),
            may_act=access.ADMIN in self.parsed_scopes,
            reason_limit=notices.REASON_LIMIT,
        )
        self.finish(html)


class StopAPIHandler(Served, APIHandler):
    """POST /hub/api/gpus/stop/USER[/SERVER], optionally {"reason": "…"}: stop a server as
    the GPUs page does. Its stop notice says an admin stopped it, and why where a reason
    was given, so the user's next spawn page tells them; then JupyterHub's own stop."""

    async def post(self, user_name: str, server_name: str = "") -> None:
        access.require(self, access.ADMIN)
        access.require_delete_servers(self, user_name)
        reason = self._reason_for_user()
        user = self.find_user(user_name)
        if user is None or server_name not in user.orm_spawners:
            raise web.HTTPError(404, f"No server {named(user_name, server_name)}")
        spawner = user.spawners[server_name]
        if spawner.pending == "stop":
            self.set_status(202)  # already going: its notice stays as it is
            return
        if spawner.pending:
            raise web.HTTPError(
                409,
                f"{named(user.name, server_name)} is busy ({spawner.pending} in progress); "
                "a start waiting for GPUs leaves the waiting line with its own button",
            )
        if not spawner.ready:
            raise web.HTTPError(409, f"{named(user.name, server_name)} is not running")
        spawner.note_stop(time.time(), notices.stopped_by_admin(reason))
        self.log.warning(
            "gpuspawner: %s stops %s from the GPUs page: %s",
            self.current_user.name,
            spawner._log_name,
            reason or "no reason given",
        )
        stopping = await self.stop_single_user(user, server_name)
        self.set_status(204 if stopping.done() else 202)

    def _reason_for_user(self) -> str:
        body = self.get_json_body() or {}
        reason = body.get("reason", "") if isinstance(body, dict) else None
        if not isinstance(reason, str):
            raise web.HTTPError(400, 'The body must be JSON like {"reason": "why"}')
        if len(reason) > notices.REASON_LIMIT:
            raise web.HTTPError(
                400,
                f"The reason is {len(reason)} characters long; at most "
                f"{notices.REASON_LIMIT} reach the user",
            )
        return reason


class WaitingAPIHandler(Served, APIHandler):
    """DELETE /hub/api/gpus/waiting/KEY: an admin takes a start out of the waiting line (KEY
    is the server's id, as GET /hub/api/gpus lists it); the start ends, holding nothing."""

    def delete(self, key: str) -> None:
        access.require(self, access.ADMIN)
        number = id_in_url(key, "start waiting in line with key")
        orm_spawner = self.db.get(orm.Spawner, number)
        if orm_spawner is not None:
            access.require_delete_servers(self, orm_spawner.user.name)
        if orm_spawner is None or not self.broker.take_out_of_line(number):
            raise web.HTTPError(404, f"No start with key {number} is waiting in line")
        self.set_status(204)


class StopNoticesAPIHandler(Served, APIHandler):
    """GET /hub/api/users/NAME/stop-notices: each stopped server's notice, and the CPU-only
    start on offer as the REST request that makes it (an offer only: the start is checked
    like any other). What JupyterHub's server model says, so its scope: `read:servers` for
    that user, as the user's own session and token hold."""

    @needs_scope("read:servers")
    def get(self, user_name: str) -> None:
        user = self.find_user(user_name)
        if user is None:
            raise web.HTTPError(404, f"No such user: {user_name}")
        broker = self.broker
        limits = broker.limits_for(user)
        cpu = notices.cpu_profile(broker.site.profiles, limits, user.id, broker.pool)
        servers_api = url_path_join(
            self.hub.base_url, "api/users", url_escape_path(user.name), "servers/"
        )
        found = notices.stop_notices(user.orm_user.orm_spawners, cpu)
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps({"notices": [notices.as_json(n, servers_api) for n in found]}))


def handlers(hub_prefix: str, broker: Broker) -> list[Route]:
    return routes(
        broker,
        (url_path_join(hub_prefix, "api/gpus"), PoolAPIHandler),
        (url_path_join(hub_prefix, r"api/gpus/waiting/(\d+)"), WaitingAPIHandler),
        (url_path_join(hub_prefix, "api/gpus/stop/([^/]+)"), StopAPIHandler),
        (url_path_join(hub_prefix, "api/gpus/stop/([^/]+)/([^/]+)"), StopAPIHandler),
        (url_path_join(hub_prefix, "api/users/([^/]+)/stop-notices"), StopNoticesAPIHandler),
        (url_path_join(hub_prefix, "gpus"), PoolPageHandler),
    )
