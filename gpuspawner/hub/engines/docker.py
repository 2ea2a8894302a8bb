"""GPUSpawner: DockerSpawner plus exclusive GPUs from the hub's shared pool.

The Docker adapter: the form, the limits, taking GPUs and releasing them are
`GPUServer`'s; this adds what is Docker's. Every container it creates gets
exactly its start's grant (`engine.docker.isolate`, at the one place containers
are created); only Docker's word ends a server (`liveness.DockersWord`).
Containers are removed when their server stops, so users' files live in homes
(DockerSpawner's `volumes`, a home per user by default) that the engine makes
ready before a start takes GPUs.
"""

from __future__ import annotations

import asyncio
import math
from concurrent.futures import Future
from typing import Any

import docker
from dockerspawner import DockerSpawner
from traitlets import Bool, Float, TraitError, default, validate

from ...config.adapter import Mover
from ...core.errors import UnsafeContainerConfig
from ...core.pool import Grant
from ...core.profiles import ANY_IMAGE
from ...devices.source import GPUSource
from ...engine import storage
from ...engine.base import Engine
from ...engine.docker import DockerEngine, isolate
from ...engine.labels import LABEL_JOB
from ..books.refusals import failed_start
from ..jobs.launch import Launch
from ..server import GPUServer
from .liveness import DockersWord


class NoGrant(RuntimeError):
    """A container create outside a start that holds its grant: nothing may reach GPUs so."""


class GPUSpawner(GPUServer, DockersWord, DockerSpawner):
    runs_on_nodes = False  # one host (SwarmGPUSpawner: a swarm's nodes)
    shared_homes = ""  # homes are this host's volumes or folders (SwarmGPUSpawner's may be on
    # storage every node mounts)
    remove = Bool(
        True,
        config=True,
        help="""Always True for GPUSpawner: containers are removed when their server stops.

        A kept container would restart later with the GPUs it had, which the
        pool may have given to someone else; setting False stops the hub.
        Users' files belong in volumes (see `volumes`), which outlive containers.""",
    )

    @validate("remove")
    def _require_remove(self, proposal: Any) -> bool:
        if not proposal.value:
            raise TraitError(
                "GPUSpawner needs remove=True: a kept container would restart later "
                "with the GPUs it had, which the pool may have given to someone else."
            )
        return True

    tell_user_docker_silent_after = Float(
        120.0,
        config=True,
        help="""Seconds of errors from Docker about a running server before its user is told.

        Only Docker's word ends a server: its container is gone (404) or has exited. Any
        other error (a 500, a timeout, no connection) leaves the server running, logged,
        counted in `gpuspawner_engine_errors_total` and shown on the GPUs page as "Docker
        not answering"; after this long the server's user also reads it in JupyterLab's
        GPU status, as a warning that the hub cannot see the server. Example:
        `c.GPUSpawner.tell_user_docker_silent_after = 300`.""",
    )

    @default("volumes")
    def _default_volumes(self) -> dict[str, Any]:
        """A home per user that outlives every container: without one, each stop (every
        cull included) would delete the user's work along with the container."""
        return {storage.DEFAULT_HOME_VOLUME: storage.DEFAULT_HOME_DIR}

    @default("notebook_dir")
    def _default_notebook_dir(self) -> str:
        """The home: the file browser opens where files are kept, whatever the image's WORKDIR."""
        return self.home() or ""

    # --- what GPUServer asks of an engine -------------------------------------------------
    def images_offered(self) -> list[str]:
        """The images users may pick (DockerSpawner's allowed_images); ["*"] for any."""
        allowed = self._get_allowed_images()
        return [ANY_IMAGE] if allowed == ANY_IMAGE else list(allowed or ())

    @property
    def homes_on_nodes(self) -> bool:
        """Whether each machine keeps its own copy of a user's home (a swarm's nodes may):
        never on one host, whose homes serve all its servers."""
        return False

    def home(self) -> str | None:
        """Where the user's home is mounted, if a volume keeps one."""
        homes = storage.homes(self._mounts())
        return homes[0].target if homes else None

    def make_engine(self) -> Engine:
        """The books' view of where notebooks run, on a client of its own (at hub start)."""
        return DockerEngine.connect(self.client_kwargs, self.tls_config)

    def make_gpu_source(self, engine: Engine) -> GPUSource | None:
        """Where the GPUs are listed: None for the config's (NVML, or simulated GPUs)."""
        return None

    def check_storage(self) -> None:
        """At hub start: nothing to check on one host (each start makes its storage ready)."""

    def home_mover(self, engine: Engine) -> Mover | None:
        """None: one host's homes serve all its servers, and never move."""
        return None

    async def prepare_storage(self) -> None:
        """Homes and shared folders ready before Docker sees them, in a worker thread."""
        await self.prepare_mounts(self._mounts())

    async def prepare_mounts(self, mounts: list[storage.Mount]) -> None:
        """`mounts` made ready (`engine.storage.prepare`); a problem fails the start."""
        owner = storage.Owner(
            self.user.name, self.user.id, self.prefix, self.notebook_uid, self.notebook_gid
        )
        work = self.executor.submit(storage.prepare, self.client, mounts, owner)
        try:
            await asyncio.wrap_future(work)
        except storage.StorageProblem as problem:
            raise failed_start(str(problem), "storage", 500) from None

    async def prepare_image(self) -> None:
        """The start's image on this machine before its GPUs are taken: a pull can take
        minutes, and one that fails then holds nothing. DockerSpawner's start looks again."""
        chosen = self.user_options.get("image")
        await self.pull_image(await self.check_allowed(chosen) if chosen else self.image)

    def _mounts(self) -> list[storage.Mount]:
        return storage.mounts(
            self.volumes,
            self.read_only_volumes,
            lambda template: str(self.format_volume_name(template, self)),
        )

    # --- DockerSpawner's steps, made safe -------------------------------------------------
    async def pull_image(self, image: str) -> None:
        """DockerSpawner's pull (by pull_policy), its failure said in words: which image, that
        it is not on this machine, and why it could not be pulled. A 400 where the user chose
        the image, a 500 where the admin's config did."""
        try:
            await super().pull_image(image)
        except docker.errors.APIError as error:
            status = 400 if self.user_options.get("image") else 500
            if isinstance(error, docker.errors.NotFound) and self.pull_policy == "never":
                why = "and pull_policy 'never' forbids pulling it"
            else:
                why = f"and could not be pulled: {error.explanation or error}"
            raise failed_start(
                f"Image {image!r} is not on this machine, {why}. Pick another image, or ask "
                "an admin to make it available here.",
                "image",
                status,
            ) from None

    def docker(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if method != f"create_{self.object_type}":
            return super().docker(method, *args, **kwargs)
        begun = self.current_start
        if begun is None or begun.grant is None:
            raise NoGrant(f"{self._log_name}: a container is created only by a start with GPUs")
        grant = begun.grant

        def create() -> Any:
            try:
                isolated = self.isolate(kwargs, grant)
            except UnsafeContainerConfig as unsafe:
                raise failed_start(str(unsafe), "config", 500) from None
            if begun.job is not None:
                isolated = self.for_job(isolated, begun.job)
            return self._docker(method, *args, **isolated)

        # Kept until the server ends: a cancelled start must wait for this create to finish
        # before the container can be confirmed gone.
        creating: Future[Any] = self.executor.submit(create)
        begun.creating = creating
        return asyncio.wrap_future(creating)

    def isolate(self, create_kwargs: dict[str, Any], grant: Grant) -> dict[str, Any]:
        """The create call's arguments with exactly the grant's GPUs (`engine.docker.isolate`);
        in a worker thread. UnsafeContainerConfig for a config that reaches more."""
        return isolate(create_kwargs, grant, self.prefix)

    def for_job(self, create_kwargs: dict[str, Any], launch: Launch) -> dict[str, Any]:
        """A job's container: SIGTERM, then its grace to save a checkpoint; its id labelled."""
        return {
            **create_kwargs,
            "stop_timeout": math.ceil(launch.grace),
            "labels": {**create_kwargs["labels"], LABEL_JOB: str(launch.job.id)},
        }
