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

`register` runs before the hub loads its roles: it defines the scopes the
admin's `c.JupyterHub.custom_scopes` does not (so `load_roles` may grant them,
to a "gpu-operators" group say), and puts `custom:gpus:admin` in JupyterHub's
admin role, as admins saw the page before these scopes existed. JupyterHub
refuses any config that changes the admin role, and that role follows the
admin flag however it is set (config, admin page, REST API), so the scope
goes into the role's definition itself, `roles.get_default_roles`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from jupyterhub import roles
from jupyterhub.scopes import has_scope
from tornado import web

READ = "custom:gpus:read"
ADMIN = "custom:gpus:admin"
DEFINITIONS = {
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


def register(app: Any) -> None:
    """Define the scopes the config does not, and grant `custom:gpus:admin` to admins."""
    app.custom_scopes = {**DEFINITIONS, **app.custom_scopes}
    if not getattr(roles.get_default_roles, "gpuspawner", False):
        roles.get_default_roles = with_admins_granted(roles.get_default_roles)


def with_admins_granted(default_roles: Callable[[], list[dict[str, Any]]]) -> Any:
    """JupyterHub's default roles, the admin role with ADMIN added."""

    @functools.wraps(default_roles)
    def granted() -> list[dict[str, Any]]:
        found = default_roles()
        for role in found:
            if role["name"] == "admin" and ADMIN not in role["scopes"]:
                role["scopes"] = [*role["scopes"], ADMIN]
        return found

    granted.gpuspawner = True  # type: ignore[attr-defined]
    return granted


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


def require_delete_servers(handler: Any, owner: str) -> None:
    """403 unless the request may stop `owner`'s servers through JupyterHub itself."""
    if not has_scope(f"delete:servers!user={owner}", handler.parsed_scopes, db=handler.db):
        raise web.HTTPError(403, f"Stopping {owner}'s servers needs delete:servers for {owner}.")
