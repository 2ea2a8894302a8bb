"""Whether a server still runs: on Docker's word alone.

JupyterHub ends a server whose poll says it stopped (and, at hub start, one whose
poll raised), and DockerSpawner then removes its container. DockerSpawner's own
poll takes a 500 on inspect for "gone, on an unhealthy node", so one error from
Docker ended running servers and their users' work. Here only "no such container"
(404) or an inspect that says it exited ends one; any other error is silence,
kept on the broker (`core.silence`) for the GPUs page, the metric and, past a
bound, the server's user.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import docker

from ...core.words import duration
from ..base.counters import ENGINE_ERRORS


class DockersWord:
    """A mixin before DockerSpawner (or SwarmSpawner) in a GPUSpawner's bases."""

    # DockerSpawner's, as this mixin uses them
    orm_spawner: Any
    object_id: str
    object_id_key: str
    object_name: str
    object_type: str
    _log_name: str
    log: Any
    docker: Callable[..., Any]
    books_call: Callable[..., Any]  # GPUServer's

    async def poll(self) -> int | str | None:
        """None while the server runs, or why it ended, on Docker's word alone.

        JupyterHub ends a server whose poll says so (and at hub start, one whose poll
        raised), and DockerSpawner then removes its container: an error from Docker is
        not its word, so the server runs on while Docker does not answer.
        """
        try:
            ended = await self.engine_poll()
        except Exception as error:
            self._note_docker_silent(error)
            return None
        self.books_call(lambda broker: broker.answered(self.orm_spawner.id))
        return ended

    async def engine_poll(self) -> int | str | None:
        """The engine's poll (DockerSpawner's, SwarmSpawner's), raising on any error."""
        ended: int | str | None = await super().poll()  # type: ignore[misc]  # next in the MRO
        return ended

    async def get_object(self) -> dict[str, Any] | None:
        """The container, or None only when Docker says there is none (404).

        DockerSpawner also takes a 500 for "on an unhealthy node" and forgets the
        container: a poll then ends a server that runs on. Here every other error raises.
        """
        try:
            found: dict[str, Any] = await self.docker(
                f"inspect_{self.object_type}", self.object_name
            )
        except docker.errors.NotFound:
            self.log.info("%s %s is gone", self.object_type.title(), self.object_name)
            self.object_id = ""
            return None
        self.object_id = found[self.object_id_key]
        return found

    def _note_docker_silent(self, error: Exception) -> None:
        ENGINE_ERRORS.labels("poll").inc()
        question = f"is {self._log_name} running?"
        lasted = self.books_call(
            lambda broker: broker.unanswered(self.orm_spawner.id, question, error).lasted(
                broker.clock()
            )
        )
        self.log.warning(
            "gpuspawner: Docker gave an error, not an answer, about %s for %s (%s): "
            "it runs on as far as the hub knows, and the hub asks again",
            self._log_name,
            duration(lasted or 0.0),
            error,
        )
