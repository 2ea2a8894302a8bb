"""The hub's users, read from its database: which homes still have their user.

The admin tools work while the hub is down, so they ask the database, not the
hub: JupyterHub's own tables through its own orm, at the `db_url` the config
sets (JupyterHub's default: `jupyterhub.sqlite` in the hub's working
directory). Read-only: an SQLite file is opened in read-only mode, and a
missing one is an error rather than a new, empty database (which would make
every home look orphaned).
"""

from __future__ import annotations

import os
from typing import Any

from jupyterhub import orm
from jupyterhub.app import JupyterHub
from sqlalchemy import create_engine, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

DEFAULT_DB_URL = str(JupyterHub.class_traits()["db_url"].default_value)


class UsersUnknown(Exception):
    """The hub's users cannot be read; the message says why and what to pass instead."""


def db_url_of(config: Any) -> str:
    """The config's `c.JupyterHub.db_url`, or JupyterHub's default."""
    if config is not None and "db_url" in config.JupyterHub:
        return str(config.JupyterHub.db_url)
    return DEFAULT_DB_URL


def users(db_url: str) -> dict[int, str]:
    """Every user of the hub, id → name."""
    try:
        url = make_url(db_url)
    except ArgumentError:
        raise UsersUnknown(f"{db_url!r} is not a database URL") from None
    shown = url.render_as_string(hide_password=True)
    if url.get_backend_name() == "sqlite":
        path = url.database or ""
        if path in ("", ":memory:"):
            raise UsersUnknown(f"the hub's database {shown} lives only in the hub's memory")
        if not os.path.isfile(path):
            raise UsersUnknown(
                f"no hub database at {os.path.abspath(path)}: run this in the hub's working "
                "directory or pass --db-url (e.g. sqlite:////var/lib/jupyterhub/jupyterhub.sqlite)"
            )
        url = make_url(f"sqlite:///file:{os.path.abspath(path)}?mode=ro&uri=true")
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(select(orm.User.id, orm.User.name))
            return {int(user_id): str(name) for user_id, name in rows}
    except SQLAlchemyError as error:
        raise UsersUnknown(f"cannot read the hub's users from {shown}: {error}") from None
    finally:
        engine.dispose()
