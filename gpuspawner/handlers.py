"""The hub's GPU pages: the pool as JSON for scripts (admins only)."""

from __future__ import annotations

import json
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import needs_scope
from jupyterhub.utils import url_path_join

from . import hubgpus
from .report import pool_report


class PoolAPIHandler(APIHandler):
    """GET /hub/api/gpus: every GPU, its state, health and holder."""

    @needs_scope("admin:servers")
    def get(self) -> None:
        hub = hubgpus.current()
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(pool_report(hub, hub.telemetry, self._last_activity)))

    def _last_activity(self, user: str, server: str) -> Any:
        found = self.find_user(user)
        spawner = found.orm_spawners.get(server) if found else None
        return spawner.last_activity if spawner else None


def handlers(hub_prefix: str) -> list[tuple[str, type]]:
    return [(url_path_join(hub_prefix, "api/gpus"), PoolAPIHandler)]
