"""What gpuspawner's REST handlers share: an answer in JSON that no cache keeps."""

from __future__ import annotations

import json
from typing import Any

from jupyterhub.apihandlers.base import APIHandler


class JSONHandler(APIHandler):
    def _answer(self, body: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.write(json.dumps(body))
