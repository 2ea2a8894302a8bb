"""What gpuspawner's REST handlers share: an answer in JSON that no cache keeps, and an id
read from a URL's path as far as a record could hold it."""

from __future__ import annotations

import json
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from tornado import web

from ...core.ids import as_id
from ...core.words import quoted


def id_in_url(text: str, what: str) -> int:
    """The id a route's `(\\d+)` caught, or 404 "No such job: '…'" where no record could have
    it (more digits than SQLite's integers hold): never the 500 of an OverflowError."""
    found = as_id(text)
    if found is None:
        raise web.HTTPError(404, f"No such {what}: {quoted(text)}")
    return found


class JSONHandler(APIHandler):
    def _answer(self, body: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.write(json.dumps(body))
