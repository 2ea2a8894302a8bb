"""Where this server's lease is on the hub, from the variables the hub gives each server (and
every kernel it runs)."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote


def lease_url(environ: Mapping[str, str]) -> str | None:
    """The hub's URL for this server's lease, from the variables the hub gives each server."""
    api, user = environ.get("JUPYTERHUB_API_URL"), environ.get("JUPYTERHUB_USER")
    if not api or not user:
        return None
    server = environ.get("JUPYTERHUB_SERVER_NAME", "")
    where = f"servers/{quote(server, safe='')}" if server else "server"
    return f"{api.rstrip('/')}/users/{quote(user, safe='')}/{where}/gpu-lease"
