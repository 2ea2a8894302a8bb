"""The hub's GPU pages, admins only: the pool in JupyterHub's UI, and as JSON for scripts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.handlers.base import BaseHandler
from jupyterhub.scopes import needs_scope
from jupyterhub.utils import url_path_join
from tornado import web

from . import hubgpus
from .report import pool_report

TEMPLATES = str(Path(__file__).with_name("templates"))


class PoolReport:
    """What both pages show: the report, with each holder's last activity from the hub."""

    def report(self: Any) -> dict[str, Any]:
        hub = hubgpus.current()
        return pool_report(hub, hub.telemetry, self._last_activity)

    def _last_activity(self: Any, user: str, server: str) -> Any:
        found = self.find_user(user)
        spawner = found.orm_spawners.get(server) if found else None
        return spawner.last_activity if spawner else None


class PoolAPIHandler(PoolReport, APIHandler):
    """GET /hub/api/gpus: every GPU, its state, telemetry, health and holder."""

    @needs_scope("admin:servers")
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


def handlers(hub_prefix: str) -> list[tuple[str, type]]:
    return [
        (url_path_join(hub_prefix, "api/gpus"), PoolAPIHandler),
        (url_path_join(hub_prefix, "gpus"), PoolPageHandler),
    ]


def install(app: Any) -> None:
    """Serve the pages, and let the hub's templates find ours (after the admin's own)."""
    app.tornado_application.add_handlers(".*$", handlers(app.hub_prefix))
    paths = app.tornado_settings["jinja2_env"].loader.loaders[-1].searchpath
    own = app._template_paths_default()[0]
    paths.insert(paths.index(own) if own in paths else len(paths), TEMPLATES)
