"""Starting and stopping a job's server from inside the hub, without a person's request.

JupyterHub starts servers from request handlers (`spawn_single_user`): they
create the server's record, spawn it, add its route to the proxy and watch
for it to die. A job starts when GPUs free up, long after its submission's
request ended, so this does those steps the same way for one server: the
route once the server is up, a stop (route first, as the hub's own poll
does) when its container ends by itself.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from jupyterhub import orm

from ...core.pool import Grant
from ...records.jobs import Job

RUNNER = "gpuspawner-job"  # in the notebook images (labextension/gpuspawner_lab/job.py)
JOB_ENV = "GPUSPAWNER_JOB"  # what it runs, as JSON (core.jobs.JobSpec.for_runner)


def runner_environment(job: Job) -> dict[str, str]:
    """What a job's server's runner is told."""
    return {JOB_ENV: json.dumps(job.spec.for_runner(job.id, job.attempts))}


@dataclass(frozen=True)
class Launch:
    """A job's start under way: what its server's spawner reads as it starts."""

    job: Job
    grant: Grant
    grace: float  # seconds from SIGTERM to SIGKILL (the container's stop timeout)


class Launcher:
    def __init__(self, app: Any, log: logging.Logger) -> None:
        self.app, self.log = app, log

    def user(self, user_id: int) -> Any:
        """The hub's user by id, or KeyError (deleted meanwhile)."""
        return self.app.users[user_id]

    def server_id(self, user_id: int, server: str) -> int:
        """The id of the user's named server `server`, made if it does not exist yet: a
        job's GPUs are taken for it before it starts."""
        user = self.user(user_id)
        orm_spawner = user.orm_spawners.get(server)
        if orm_spawner is None:
            orm_spawner = user._new_orm_spawner(server, server)
        return int(orm_spawner.id)

    async def start(self, user_id: int, server: str, options: dict[str, Any]) -> None:
        """Start the server and route to it; what the start raised, if it failed."""
        user = self.user(user_id)
        spawner = user.get_or_create_spawner(server, server, replace_failed=True)
        spawner._spawn_pending = True
        try:
            await user.spawn(server, server, options)
            spawner._proxy_pending = True
            try:
                await self.app.proxy.add_user(user, server)
            except Exception:
                self.log.exception("gpuspawner: could not route to %s; stopping it", server)
                await user.stop(server)
                raise
            finally:
                spawner._proxy_pending = False
            spawner.add_poll_callback(self._ended_by_itself, user, server)
        finally:
            spawner._spawn_pending = False

    async def stop(self, user_id: int, server: str) -> None:
        """Stop the server if it runs (the hub's own stop: the container goes, its GPUs come
        back once Docker confirms it). One still starting is stopped once up (`board`)."""
        user = self.user(user_id)
        spawner = user.spawners.get(server)
        if spawner is not None and spawner.ready:
            await self.app.proxy.delete_user(user, server)
            await user.stop(server)

    def named_servers(self, prefix: str) -> list[tuple[int, str]]:
        """(user id, name) of every named server whose name starts with `prefix`."""
        rows = self.app.db.query(orm.Spawner.user_id, orm.Spawner.name).filter(
            orm.Spawner.name.startswith(prefix)
        )
        return [(int(user_id), str(name)) for user_id, name in rows]

    async def remove(self, user_id: int, server: str) -> bool:
        """Remove the user's named server `server` from JupyterHub, as its REST API's
        `DELETE .../servers/NAME` with `remove` does: True once it is gone (or its user is),
        False while it still runs or stops."""
        try:
            user = self.user(user_id)
        except KeyError:
            return True
        if server not in user.orm_spawners:
            return True
        spawner = user.spawners[server]
        if spawner.active:
            return False
        await user._delete_spawner(spawner)
        self.app.db.delete(spawner.orm_spawner)
        user.spawners.pop(server, None)
        self.app.db.commit()
        self.log.info("gpuspawner: %s's %s ended; its server is removed", user.name, server)
        return True

    async def _ended_by_itself(self, user: Any, server: str) -> None:
        self.log.info("gpuspawner: %s's %s ended by itself", user.name, server)
        await self.app.proxy.delete_user(user, server)
        await user.stop(server)
