"""GET {base_url}gpuspawner/lease: this server's lease, as the hub tells it.
GET {base_url}gpuspawner/jobs: the user's GPU jobs, for JupyterLab's notices when one ends.

The hub answers `GET /hub/api/users/:user/server[s/:name]/gpu-lease` only to a
token that may access that very server: here, the server's own
`JUPYTERHUB_API_TOKEN`. The route asks for its own server only, whatever the
browser sends, and passes the hub's answer (or its refusal) through unchanged.
Outside a JupyterHub it answers 404, and the JupyterLab side shows nothing.

The jobs come from `GET /hub/api/users/:user/gpu-jobs` (hub_jobs.Hub, with the same
token, which holds `custom:gpu-jobs!user`), cut down to what a notice says: each job's
state, file, reason, how often it gave way, and its output (the executed notebook, or a
script's log.txt) as a path from this server's root, once it is there. A job's own server
(`job-<id>`) answers 404: the notices belong in the user's servers, not in the jobs.
"""

from __future__ import annotations

import json
import os
import posixpath
from typing import Any

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from .hub_urls import lease_url

HUB_TIMEOUT_SECONDS = 10
JOB_SERVER_PREFIX = "job-"


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


class JobsHandler(APIHandler):
    _track_activity = False  # as for the lease: an open tab that asks is not work

    @web.authenticated
    async def get(self) -> None:
        # Imported here: it brings jupyter-scheduler, which `gpuspawner-job` has no use for.
        from .hub_jobs import Hub, HubRefused

        hub = Hub.from_environ(os.environ)
        if hub is None:
            raise web.HTTPError(404, "This server was not started by a JupyterHub.")
        if os.environ.get("JUPYTERHUB_SERVER_NAME", "").startswith(JOB_SERVER_PREFIX):
            raise web.HTTPError(404, "This server runs a job: its user's servers tell of it.")
        try:
            jobs = await hub.jobs()
        except HubRefused as refused:
            self.set_status(refused.code)
            self.finish({"message": str(refused)})
            return
        root = self.settings.get("server_root_dir") or os.getcwd()
        home = os.path.expanduser("~")
        self.finish({"jobs": [notice_of(job, home, root) for job in jobs]})


def notice_of(job: dict[str, Any], home: str, root: str) -> dict[str, Any]:
    """What JupyterLab needs to tell of a job: the hub's paths are relative to the home,
    JupyterLab's to the server's root (the same folder in the images)."""
    path = job.get("notebook") or job.get("script") or ""
    outputs = job.get("outputs") or ""
    name = posixpath.basename(path) if job.get("notebook") else "log.txt"
    return {
        "id": job["id"],
        "state": job["state"],
        "file": path,
        "reason": job.get("reason") or "",
        "preemptions": job.get("preemptions") or 0,
        "output": from_root(posixpath.join(outputs, name), home, root) if outputs else None,
    }


def from_root(home_path: str, home: str, root: str) -> str | None:
    """A file in the home as JupyterLab opens it, or None while it is not there (a job
    cancelled while it waited wrote nothing) or not under the root."""
    absolute = os.path.normpath(os.path.join(home, home_path))
    path = os.path.relpath(absolute, os.path.expanduser(root))
    if path.startswith("..") or not os.path.isfile(absolute):
        return None
    return path.replace(os.sep, "/")


def setup_handlers(web_app: Any) -> None:
    base = web_app.settings["base_url"]
    web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "gpuspawner", "lease"), LeaseHandler),
            (url_path_join(base, "gpuspawner", "jobs"), JobsHandler),
        ],
    )
