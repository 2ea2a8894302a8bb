"""GET {base_url}gpuspawner/lease: this server's lease, as the hub tells it.

The hub answers `GET /hub/api/users/:user/server[s/:name]/gpu-lease` only to a
token that may access that very server: here, the server's own
`JUPYTERHUB_API_TOKEN`. The route asks for its own server only, whatever the
browser sends, and passes the hub's answer (or its refusal) through unchanged.
Outside a JupyterHub it answers 404, and the JupyterLab side shows nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

HUB_TIMEOUT_SECONDS = 10


def lease_url(environ: Mapping[str, str]) -> str | None:
    """The hub's URL for this server's lease, from the variables the hub gives each server."""
    api, user = environ.get("JUPYTERHUB_API_URL"), environ.get("JUPYTERHUB_USER")
    if not api or not user:
        return None
    server = environ.get("JUPYTERHUB_SERVER_NAME", "")
    where = f"servers/{quote(server, safe='')}" if server else "server"
    return f"{api.rstrip('/')}/users/{quote(user, safe='')}/{where}/gpu-lease"


class LeaseHandler(APIHandler):
    # Reading the lease is not activity: an open tab must not look like work to the idle culler.
    _track_activity = False

    @web.authenticated
    async def get(self) -> None:
        url = lease_url(os.environ)
        token = os.environ.get("JUPYTERHUB_API_TOKEN")
        if url is None or not token:
            raise web.HTTPError(404, "This server was not started by a JupyterHub.")
        try:
            response = await AsyncHTTPClient().fetch(
                url,
                headers={"Authorization": f"token {token}"},
                request_timeout=HUB_TIMEOUT_SECONDS,
            )
        except HTTPClientError as refused:
            self._relay(refused.code, refused.response.body if refused.response else b"")
            return
        except OSError as error:
            raise web.HTTPError(502, f"The hub did not answer: {error}") from None
        self.finish(response.body)

    def _relay(self, code: int, body: bytes) -> None:
        try:
            message = json.loads(body).get("message", "")
        except (ValueError, AttributeError):
            message = ""
        self.set_status(502 if code == 599 else code)
        self.finish({"message": message or f"The hub answered {code}."})


def setup_handlers(web_app: Any) -> None:
    route = url_path_join(web_app.settings["base_url"], "gpuspawner", "lease")
    web_app.add_handlers(".*$", [(route, LeaseHandler)])
