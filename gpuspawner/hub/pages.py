"""The hub's GPU pages: the pool and the last 7 days' use for admins, in JupyterHub's UI and
as JSON for scripts; and for each user, as JSON, why their servers were stopped and how to go
on (the spawn page shows the same)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jupyterhub import orm
from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.handlers.base import BaseHandler
from jupyterhub.scopes import needs_scope
from jupyterhub.utils import url_escape_path, url_path_join
from tornado import web

from ..core.pool import Grant
from . import notices
from .broker import Broker
from .report import HolderNow, as_labelled, pool_report, usage_report

TEMPLATES = str(Path(__file__).with_name("templates"))


class PoolReport:
    """What both pages show: the report, each holder as the hub's database names it now."""

    def report(self: Any) -> dict[str, Any]:
        broker = Broker.current()
        return {**pool_report(broker, self._holder_now), "usage": usage_report(broker)}

    def _holder_now(self: Any, grant: Grant) -> HolderNow:
        spawner = self.db.get(orm.Spawner, grant.holder.spawner_id)
        if spawner is None or spawner.user is None:
            return as_labelled(grant)  # a server deleted while its container is going
        return HolderNow(spawner.user.name, spawner.name, spawner.last_activity)


class PoolAPIHandler(PoolReport, APIHandler):
    """GET /hub/api/gpus: every GPU, its state, telemetry, health and holder. For anyone who
    may read every server (read:servers, unfiltered): a dashboard's token needs no more."""

    @needs_scope("read:servers")
    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(self.report()))


class PoolPageHandler(PoolReport, BaseHandler):
    """GET /hub/gpus: the same, as a page with a button to stop each holder's server."""

    @web.authenticated
    @needs_scope("admin:servers")
    async def get(self) -> None:
        html = await self.render_template("gpuspawner_admin.html", report=self.report())
        self.finish(html)


class WaitingAPIHandler(APIHandler):
    """DELETE /hub/api/gpus/waiting/KEY: an admin takes a start out of the waiting line (KEY
    is the server's id, as GET /hub/api/gpus lists it); the start ends, holding nothing."""

    @needs_scope("admin:servers")
    def delete(self, key: str) -> None:
        if not Broker.current().line.remove(int(key)):
            raise web.HTTPError(404, f"No start with key {key} is waiting in line")
        self.set_status(204)


class StopNoticesAPIHandler(APIHandler):
    """GET /hub/api/users/NAME/stop-notices: each stopped server's notice, and the CPU-only
    start on offer as the REST request that makes it (an offer only: the start is checked
    like any other)."""

    @needs_scope("read:servers")
    def get(self, user_name: str) -> None:
        user = self.find_user(user_name)
        if user is None:
            raise web.HTTPError(404, f"No such user: {user_name}")
        broker = Broker.current()
        limits = broker.site.limits.for_user({g.name for g in user.groups}, bool(user.admin))
        cpu = notices.cpu_profile(broker.site.profiles, limits, user.id, broker.pool)
        servers_api = url_path_join(
            self.hub.base_url, "api/users", url_escape_path(user.name), "servers/"
        )
        found = notices.stop_notices(user.orm_user.orm_spawners, cpu)
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps({"notices": [notices.as_json(n, servers_api) for n in found]}))


def handlers(hub_prefix: str) -> list[tuple[str, type]]:
    return [
        (url_path_join(hub_prefix, "api/gpus"), PoolAPIHandler),
        (url_path_join(hub_prefix, r"api/gpus/waiting/(\d+)"), WaitingAPIHandler),
        (url_path_join(hub_prefix, "api/users/([^/]+)/stop-notices"), StopNoticesAPIHandler),
        (url_path_join(hub_prefix, "gpus"), PoolPageHandler),
    ]


def install(app: Any) -> None:
    """Serve the pages, and let the hub's templates find ours (after the admin's own)."""
    app.tornado_application.add_handlers(".*$", handlers(app.hub_prefix))
    paths = app.tornado_settings["jinja2_env"].loader.loaders[-1].searchpath
    if TEMPLATES not in paths:
        own = app._template_paths_default()[0]
        paths.insert(paths.index(own) if own in paths else len(paths), TEMPLATES)
