"""Who may see the GPU pool and act on it: gpuspawner's own JupyterHub scopes.

The pool report names every holder, the waiting line and each user's use of
the last 7 days. JupyterHub's `read:servers` is held by tokens that need none
of that (jupyterhub-idle-culler's, a dashboard's), so the pages ask for scopes
of their own:

- `custom:gpus:read`: the GPUs page and `GET /hub/api/gpus`;
- `custom:gpus:admin` (includes the above): stopping a GPU holder's server from
  the page and taking a start out of the waiting line. Both act on another
  user's server, so each also needs JupyterHub's own `delete:servers` for that
  user: the custom scope never gives more than JupyterHub would.
- `custom:gpu-jobs`: a user's jobs (`hub.jobs.api`), given to every user for
  themselves (`!user` in the user role) and to their servers' own tokens, which
  JupyterLab submits with: least privilege, since `servers` would also let a
  notebook start and stop its user's servers.

`attach` defines the scopes the admin's `c.JupyterHub.custom_scopes` does not, before the
hub loads its roles (so `load_roles` may grant them, to a "gpu-operators" group say), adds
`USER_SCOPE` to `extra_user_scopes`, and puts `custom:gpus:admin` in JupyterHub's admin
role, as admins saw the page before these scopes existed.
"""

from __future__ import annotations

from typing import Any

from jupyterhub import roles
from jupyterhub.scopes import has_scope
from tornado import web

READ = "custom:gpus:read"
ADMIN = "custom:gpus:admin"
JOBS = "custom:gpu-jobs"
DEFINITIONS = {
    JOBS: {
        "description": "Submit, list and cancel GPU jobs (with a user filter: that user's "
        "only). Every user holds it for themselves, and their servers' tokens too, so that "
        "JupyterLab can submit their jobs without the token being able to start servers.",
    },
    READ: {
        "description": "Read the GPU pool: every GPU, its holder, the waiting line and the "
        "last 7 days' GPU use per user and group (the GPUs page and /hub/api/gpus).",
    },
    ADMIN: {
        "description": "Stop GPU holders' servers from the GPUs page and take starts out of "
        "the waiting line (with delete:servers for those users).",
        "subscopes": [READ],
    },
}


USER_SCOPE = f"{JOBS}!user"  # every user's own jobs: what the user role gets


def require(handler: Any, scope: str) -> None:
    """403 unless the request holds `scope`, for every user (no filter)."""
    if handler.current_user is None:
        raise web.HTTPError(403, "Missing or invalid credentials.")
    if not has_scope(scope, handler.parsed_scopes, db=handler.db):
        raise web.HTTPError(
            403,
            f"This needs the {scope} scope, which your account (or this token) does not have: "
            "an admin can grant it with a role in c.JupyterHub.load_roles.",
        )


def server_token_scopes() -> list[str]:
    """What a server's own token holds: JupyterHub's `server` role, and its user's jobs."""
    server = next(r for r in roles.get_default_roles() if r["name"] == "server")
    return [*server["scopes"], USER_SCOPE]


def require_jobs(handler: Any, owner: str, read: bool) -> None:
    """403 unless the request may read (`read`) or submit and cancel `owner`'s jobs: their
    own `custom:gpu-jobs`, or what JupyterHub asks to read (`read:servers`) or start and
    stop (`servers`) that user's servers."""
    if handler.current_user is None:
        raise web.HTTPError(403, "Missing or invalid credentials.")
    servers = "read:servers" if read else "servers"
    if not any(
        has_scope(f"{scope}!user={owner}", handler.parsed_scopes, db=handler.db)
        for scope in (JOBS, servers)
    ):
        raise web.HTTPError(
            403, f"This token may not {'read' if read else 'submit or cancel'} {owner}'s jobs."
        )


def require_delete_servers(handler: Any, owner: str) -> None:
    """403 unless the request may stop `owner`'s servers through JupyterHub itself."""
    if not has_scope(f"delete:servers!user={owner}", handler.parsed_scopes, db=handler.db):
        raise web.HTTPError(403, f"Stopping {owner}'s servers needs delete:servers for {owner}.")
