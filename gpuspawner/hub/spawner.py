"""GPUSpawner: DockerSpawner plus exclusive GPUs from the hub's shared pool.

Wiring only. The books belong to the broker (one per hub), the rules to the
core, the Docker specifics to the engine. A start reserves GPUs from the
broker; every container the spawner creates gets exactly the reservation
(`engine.docker.isolate`, at the one place containers are created). Every way
a server ends reaches `clear_state`, which the hub calls even when `stop()`
raised: the GPUs then go back only once Docker confirms the container gone.
Containers are removed when their server stops, so users' files live in homes
(DockerSpawner's `volumes`, a home per user by default) that the engine makes
ready before a start reserves GPUs.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import docker
from dockerspawner import DockerSpawner
from jupyterhub.spawner import SpawnException
from jupyterhub.utils import url_escape_path, url_path_join, utcnow
from traitlets import Bool, Float, TraitError, default, validate

from ..config.settings import GPUSettings
from ..core.culling import notice
from ..core.errors import UnsafeContainerConfig
from ..core.limits import Limited, UserLimits
from ..core.pool import Grant, Holder
from ..core.profiles import ANY_IMAGE, InvalidUserOptions, Profile, choose_profile
from ..core.units import units_in_words
from ..core.words import duration, from_group, your_server
from ..devices.source import GPUSource
from ..engine import storage
from ..engine.base import Engine
from ..engine.docker import DockerEngine, isolate
from . import budgets, form, notices, startup
from .broker import Broker
from .counters import SPAWNS_REFUSED
from .liveness import DockersWord
from .refusals import Refused
from .waiting import progress_in_line

LINKS_CANNOT_START = (
    "A link cannot start a server: check the choice below and press Start. "
    "(GPU servers start only from this form, or through the REST API with a token.)"
)


RESTART_ON = "restart_on"  # the form button of a stop notice: start that server on this profile


class QueryCannotSpawn(Exception):
    """GET /hub/spawn?… tried to start a server: only a form POST or the API may."""


class GPUSpawner(GPUSettings, DockersWord, DockerSpawner):
    stop_notice: str | None = None  # why a policy stopped this server, for its next spawn page
    restart_on_cpu = False  # the server a policy stopped held GPUs: offer a CPU-only start
    idle_limit: Limited | None = None  # the group's idle timeout, for jupyterhub-idle-culler
    _start_timeout_base = 0  # start_timeout before this start's time in the waiting line
    _start_timeout_given: int | None = None  # what allow_for_waiting set it to

    @classmethod
    def from_config(cls, config: Any) -> GPUSpawner:
        """The spawner's settings outside any user's spawn: hub start, CLI tools.

        DockerSpawner renders container names from a user as its config
        loads, so this one gets a stand-in user name.
        """
        return cls(config=config, user=SimpleNamespace(name="gpuspawner"))

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
        homes = storage.homes(self._mounts())
        return homes[0].target if homes else ""

    @default("options_form")
    def _default_options_form(self) -> Any:
        return GPUSpawner._render_form

    @default("apply_user_options")
    def _default_apply_user_options(self) -> Any:
        # start() checks and applies user_options itself, on every start; this tells
        # JupyterHub they are handled (else it warns of "unhandled user_options"), and gives
        # the start its time in the waiting line on top of start_timeout.
        return lambda spawner, user_options: spawner.allow_for_waiting()

    def allow_for_waiting(self) -> None:
        """start_timeout plus the user's max_wait, for this start: JupyterHub gives up on a
        start after start_timeout, and reads it before start() runs. An admin's own
        `apply_user_options` should call this too."""
        try:
            offered = self.broker.site.profiles
            profile = choose_profile(self.user_options, offered, self._images_offered())
        except InvalidUserOptions:
            profile = None  # start() refuses it at once
        gpus = profile is not None and profile.request.kind is not None
        wait = self._user_limits().max_wait.value if gpus else 0
        current = int(getattr(self, "start_timeout"))  # noqa: B009 (a trait mypy cannot see)
        if current != self._start_timeout_given:  # the config's, or a group override's
            self._start_timeout_base = current
        self._start_timeout_given = self._start_timeout_base + math.ceil(wait or 0)
        self.start_timeout = self._start_timeout_given

    @default("options_from_form")
    def _default_options_from_form(self) -> Any:
        return _options_from_form

    def options_from_query(self, query_data: dict[str, Any]) -> dict[str, Any]:
        """Never: a GET carries no XSRF token, so a link on any site could start a server.

        The hub then shows the form, with the link's profile chosen, for the user to confirm.
        """
        raise QueryCannotSpawn(LINKS_CANNOT_START)

    # --- who this server is, to the broker ----------------------------------
    @property
    def broker(self) -> Broker:
        return Broker.current()

    @property
    def holder(self) -> Holder:
        return Holder(self.orm_spawner.id, self.user.id, self.user.name, self.name)

    def _user_limits(self) -> UserLimits:
        groups = {g.name for g in self.user.groups}
        return self.broker.site.limits.for_user(groups, admin=bool(self.user.admin))

    def _images_offered(self) -> list[str]:
        """The images users may pick (DockerSpawner's allowed_images); ["*"] for any."""
        allowed = self._get_allowed_images()
        return [ANY_IMAGE] if allowed == ANY_IMAGE else list(allowed or ())

    # --- the form -------------------------------------------------------------
    def _render_form(self) -> str:
        pool = self.broker.pool
        units = pool.units
        limits = self._user_limits()
        budget = budgets.standing_of(self.broker, self.user.db, self.user.id, limits)
        available = form.availability(pool, limits.nodes.value)  # on the user's machines
        return form.render(
            self.form_template_paths,
            free=sum(a.free for a in available),
            total=sum(a.total for a in available),
            model=units[0].label if available else "",
            availability=available,
            machines=form.by_machine(pool, limits.nodes.value),
            rows=form.profile_rows(
                self.broker.site.profiles,
                limits,
                self.user.id,
                pool,
                self._preselected(),
                self.broker.line.waiting_by_profile(),
                over_budget=str(budget.refusal(self.broker.clock()) or ""),
                may_wait=self.broker.line.may_wait(self.user.id, limits),
            ),
            holdings=form.holdings(limits, self.user.id, pool),
            budget=budget.words(),
            images=self._images_offered(),
            notices=notices.rows(
                notices.stop_notices(
                    self.user.orm_user.orm_spawners,
                    notices.cpu_profile(self.broker.site.profiles, limits, self.user.id, pool),
                ),
                url_path_join(self.hub.base_url, "spawn", url_escape_path(self.user.name)),
                getattr(self.handler, "xsrf_token", None),
            ),
        )

    def _preselected(self) -> str | None:
        """The profile a link asked for, else the one this server had last time, else the one
        the user's latest start had: a new named server has no options of its own (JupyterHub
        6 creates its record as its form opens), and people start one after another on the
        profile they use."""
        request = getattr(self.handler, "request", None)
        query = request.query_arguments if request is not None else {}
        asked = query.get("opt-profile") or query.get("profile")  # JupyterHub's new style, or old
        if asked:
            return asked[0].decode("utf-8", "replace")
        chosen = [s for s in self.user.orm_user.orm_spawners.values() if s.user_options]
        latest = max(
            chosen,
            key=lambda s: s.last_activity.timestamp() if s.last_activity else 0.0,
            default=None,
        )
        own = self.orm_spawner if self.orm_spawner.user_options else latest
        return (own.user_options or {}).get("profile") if own is not None else None

    # --- start ------------------------------------------------------------------
    def _chosen_profile(self) -> Profile:
        try:
            profile = choose_profile(
                self.user_options, self.broker.site.profiles, self._images_offered()
            )
        except InvalidUserOptions as invalid:
            raise _refused(str(invalid), "invalid_options", 400) from None
        limits = self._user_limits()
        if not limits.may_pick(profile.slug):
            allowed = ", ".join(sorted(limits.profiles.value or ()))
            raise _refused(
                f"Profile {profile.slug!r} is not available to you "
                f"(group {limits.profiles.group} may pick: {allowed}).",
                "limit",
                403,
            )
        return profile

    async def _reserve(self, profile: Profile) -> Grant:
        """GPUs from the broker; a GPU start goes through the waiting line (`hub.waiting`)."""
        try:
            return await self.broker.take(self.holder, profile, self._user_limits())
        except Refused as no:
            raise (_refused if no.counted else _failed)(no.message, no.reason, no.status) from None

    def _check_budget(self, profile: Profile) -> None:
        """A GPU start with a used-up GPU-hour budget is refused before anything is reserved,
        and without a place in the waiting line: waiting gives no budget back (use leaves the
        window by the hour, not when a GPU frees up). CPU-only profiles are never refused."""
        if profile.request.kind is None:
            return
        limits = self._user_limits()
        standing = budgets.standing_of(self.broker, self.user.db, self.user.id, limits)
        refusal = standing.refusal(self.broker.clock())
        if refusal is not None:
            raise _refused(str(refusal), "budget", 403)

    async def start(self) -> Any:
        profile = self._chosen_profile()
        self._check_budget(profile)
        if not await self.broker.settled(self.orm_spawner.id):
            raise _refused(
                f"The container of {your_server(self.name)} has not been confirmed gone yet, so "
                "its GPUs are still held. Try again in a minute; if this persists, ask an admin "
                "(the GPUs page shows it as stopping).",
                "capacity",
                409,
            )
        self._apply_overrides(dict(profile.spawner_override))
        await self._prepare_storage()  # before the GPUs: a storage problem takes nothing
        await self._prepare_image()  # and so does an image that is not here
        grant = await self._reserve(profile)
        self.stop_notice = None
        self.restart_on_cpu = False
        limits = self._user_limits()
        gpu_server = profile.request.kind is not None
        self.idle_limit = limits.duration("idle_timeout" if gpu_server else "cpu_idle_timeout")
        self._reserved.set()
        self.log.info(
            "gpuspawner: %s gets %s (%s)",
            self._log_name,
            profile.slug,
            ", ".join(grant.uuids) or "no GPU",
        )
        return await self._start_container()

    async def _start_container(self) -> Any:
        """DockerSpawner's start, within start_timeout from here: JupyterHub's own clock
        also counts the time this start may wait in line, which must not let a stuck
        Docker call hold GPUs for that much longer."""
        timeout = self._start_timeout_base or int(getattr(self, "start_timeout"))  # noqa: B009
        try:
            return await asyncio.wait_for(super().start(), timeout)
        except TimeoutError:  # its GPUs return once Docker's stuck call ends and the container goes
            raise _failed(
                f"{your_server(self.name).capitalize()} did not start within {duration(timeout)} "
                "of getting its GPUs (start_timeout); they go back to the pool. Try again; if "
                "this persists, ask an admin.",
                "timeout",
                500,
            ) from None
        except Exception:
            await self._remove_failed_start()
            raise

    async def _remove_failed_start(self) -> None:
        """A start Docker refused answers its user only once its container is confirmed gone
        and its GPUs are back: JupyterHub stops a server that failed to start only if it runs."""
        removal = self._release_when_gone(self.object_id, getattr(self, "_create_in_flight", None))
        if removal is not None:
            await asyncio.wait([removal])

    def _mounts(self) -> list[storage.Mount]:
        return storage.mounts(
            self.volumes,
            self.read_only_volumes,
            lambda template: str(self.format_volume_name(template, self)),
        )

    async def _prepare_storage(self) -> None:
        """Homes and shared folders ready before Docker sees them, in a worker thread."""
        owner = storage.Owner(
            self.user.name, self.user.id, self.prefix, self.notebook_uid, self.notebook_gid
        )
        work = self.executor.submit(storage.prepare, self.client, self._mounts(), owner)
        try:
            await asyncio.wrap_future(work)
        except storage.StorageProblem as problem:
            raise _failed(str(problem), "storage", 500) from None

    async def _prepare_image(self) -> None:
        """The start's image on this machine before its GPUs are reserved: a pull can take
        minutes, and one that fails then holds nothing. DockerSpawner's start looks again."""
        chosen = self.user_options.get("image")
        await self.pull_image(await self.check_allowed(chosen) if chosen else self.image)

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
            raise _failed(
                f"Image {image!r} is not on this machine, {why}. Pick another image, or ask "
                "an admin to make it available here.",
                "image",
                status,
            ) from None

    @property
    def _reserved(self) -> asyncio.Event:
        """Set once this start has its GPUs: what the progress stream waits for."""
        if not hasattr(self, "_reserved_event"):
            self._reserved_event = asyncio.Event()
        return self._reserved_event

    def docker(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if method != f"create_{self.object_type}":
            return super().docker(method, *args, **kwargs)
        holder = self.holder
        grant = self.broker.grant_of(holder.spawner_id) or Grant(holder, (), time.time())

        def create() -> Any:
            try:
                isolated = self.isolate(kwargs, grant)
            except UnsafeContainerConfig as unsafe:
                raise _failed(str(unsafe), "config", 500) from None
            return self._docker(method, *args, **isolated)

        # Kept until the server ends: a cancelled start must wait for this create to finish
        # before the container can be confirmed gone.
        self._create_in_flight: Future[Any] | None = self.executor.submit(create)
        return asyncio.wrap_future(self._create_in_flight)

    # --- where notebooks run: one host's Docker (SwarmGPUSpawner: a swarm's) -------------
    def isolate(self, create_kwargs: dict[str, Any], grant: Grant) -> dict[str, Any]:
        """The create call's arguments with exactly the grant's GPUs (`engine.docker.isolate`);
        in a worker thread. UnsafeContainerConfig for a config that reaches more."""
        return isolate(create_kwargs, grant, self.prefix)

    def make_engine(self) -> Engine:
        """The books' view of where notebooks run, on a client of its own (at hub start)."""
        return DockerEngine.connect(self.client_kwargs, self.tls_config)

    def make_gpu_source(self, engine: Engine) -> GPUSource | None:
        """Where the GPUs are listed: None for the config's (NVML, or simulated GPUs)."""
        return None

    async def progress(self) -> Any:
        line, key = self.broker.line, self.orm_spawner.id
        first = None
        async for status in line.watch(key, self._reserved):
            place = line.place_of(key) or 1
            first = first or place
            yield {"progress": progress_in_line(first, place), "message": status}
        await self._reserved.wait()
        grant = self.broker.grant_of(self.orm_spawner.id)
        if grant is None:
            yield {"progress": 30, "message": "CPU only: no GPU reserved"}
            return
        yield {
            "progress": 30,
            "message": f"Reserved {units_in_words(grant.units)}: {', '.join(grant.ids)}",
        }

    # --- end ----------------------------------------------------------------------
    def clear_state(self) -> None:
        container_id = self.object_id
        in_flight = getattr(self, "_create_in_flight", None)
        super().clear_state()
        self._create_in_flight = None
        self._reserved.clear()
        self.idle_limit = None
        self._release_when_gone(container_id, in_flight)

    def _release_when_gone(
        self, container_id: str, in_flight: Future[object] | None = None
    ) -> asyncio.Future[None] | None:
        """Ask the broker to free this server's GPUs once Docker confirms its container gone;
        the removal under way, if any, to wait for."""
        return self._books_call(
            lambda broker: broker.release_when_gone(self.orm_spawner.id, container_id, in_flight)
        )

    async def stop(self, now: bool = False) -> None:
        self._note_idle_cull()
        await super().stop(now)
        # The hub lists the server as stopped once this returns: by then its GPUs are back,
        # unless Docker could not confirm the container gone (then they show as stopping).
        removal = self._release_when_gone(self.object_id)
        if removal is not None:
            await asyncio.wait([removal])

    def note_stop(self, stopped_at: float, reason: str) -> None:
        """Why a policy stops this server, for its user's next spawn page: that the files are
        kept (where a home keeps them) and, for a GPU server, the offer to go on without GPUs."""
        homes = storage.homes(self._mounts())
        self.stop_notice = notice(self.name, stopped_at, reason, homes[0].target if homes else None)
        grant = self._grant_if_known()
        self.restart_on_cpu = bool(grant and grant.uuids)

    def _note_idle_cull(self) -> None:
        """A stop past the group's idle timeout is jupyterhub-idle-culler's: say so."""
        limit, last = self.idle_limit, self.orm_spawner.last_activity
        if self.stop_notice or limit is None or limit.value is None or last is None:
            return
        idle = (utcnow(with_tz=False) - last).total_seconds()
        if idle >= limit.value:
            reason = f"it was idle for {duration(idle)} (idle_timeout{from_group(limit.group)})"
            self.note_stop(time.time(), reason)

    # --- state ------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """DockerSpawner's state, the culling details, and (for API readers) the GPUs held.

        The GPUs here are information only: the books are the broker's, rebuilt
        from Docker at hub start.
        """
        state = super().get_state()
        grant = self._grant_if_known()
        if grant is not None and not grant.stopping:  # the GPUs of a server that runs
            state["gpus"] = list(grant.uuids)
        if self.idle_limit is not None and self.idle_limit.value is not None:
            state["idle_timeout"] = self.idle_limit.value
            state["idle_timeout_group"] = self.idle_limit.group
        if self.stop_notice:
            state[notices.STATE_NOTICE] = self.stop_notice
            if self.restart_on_cpu:
                state[notices.STATE_CPU_RESTART] = True
        return state

    def _grant_if_known(self) -> Grant | None:
        return self._books_call(lambda broker: broker.grant_of(self.orm_spawner.id))

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self.stop_notice = state.get(notices.STATE_NOTICE)
        self.restart_on_cpu = bool(state.get(notices.STATE_CPU_RESTART))
        if "idle_timeout" in state:
            self.idle_limit = Limited(state["idle_timeout"], state.get("idle_timeout_group"))


def _refused(message: str, reason: str, status_code: int) -> SpawnException:
    """A spawn refused before any container: counted, and shown to the user as is."""
    SPAWNS_REFUSED.labels(reason).inc()
    return _failed(message, reason, status_code)


def _failed(message: str, reason: str, status_code: int) -> SpawnException:
    """A spawn that ends with `message` for the user: as is on the spawn page and in the
    progress stream, which otherwise prefix it with "409 SpawnException(reason=…):"."""
    failure = SpawnException(message, reason=reason, status_code=status_code)
    failure.jupyterhub_message = message
    return failure


def _options_from_form(formdata: dict[str, list[str]]) -> dict[str, Any]:
    """Form fields as user_options, unchecked: validation happens at every start.

    An image field left empty means the default image. A stop notice's "start again on
    CPU" button (`restart_on`) names the profile itself, whatever else the form had chosen.
    """
    if formdata.get(RESTART_ON):
        return {"profile": formdata[RESTART_ON][0]}
    return {
        key: values[0] if len(values) == 1 else values
        for key, values in formdata.items()
        if key != "_xsrf" and not (key == "image" and values == [""])
    }


if "jupyterhub.app" in sys.modules:  # loaded by a hub: start the broker before any spawn
    startup.install(GPUSpawner)
