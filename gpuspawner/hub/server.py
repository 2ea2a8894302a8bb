"""A GPU server, whatever engine runs it: the part of every gpuspawner spawner that is the same.

The form, the profile a start asks for, the user's limits and budget, taking
GPUs from the broker (through the waiting line), the pending page's progress,
stop notices, the state JupyterHub keeps, and the release that waits for the
engine's word. An engine adapter (`hub.engines`) puts `GPUServer` before its
engine's spawner class and adds only what is the engine's: where the
container runs, how it is given exactly its grant, its storage and image, and
whether it still runs. See docs/architecture.md, "Adding an engine".

One start's values are worked out once as it begins (the user's limits and the
profile, passed on from there); what the engine's part and the end of the server
need of them (the profile, the timeout, the grant, a create in flight) is kept in
a `Start` until the server ends.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TypeVar

from jupyterhub.utils import utcnow
from traitlets import default

from ..config.settings import GPUSettings
from ..core.culling import notice
from ..core.homes import AWAY, away_chosen
from ..core.limits import Limited, UserLimits
from ..core.pool import Grant, Holder
from ..core.profiles import InvalidUserOptions, Profile, choose_profile
from ..core.units import units_in_words
from ..core.words import duration, from_group, your_server
from . import attach
from .base import access
from .books import budgets
from .books.broker import Broker, BrokerNotRunning
from .books.refusals import Refused, failed_start, refused_start
from .homes import nodes as homes
from .jobs import launch
from .jobs.launch import Launch
from .line import status as line_status
from .spawn import notices
from .spawn import page as spawn_page

T = TypeVar("T")

if TYPE_CHECKING:  # what GPUServer is put before; at run time a mixin, as JupyterHub wants
    from jupyterhub.spawner import Spawner as EngineSpawner  # its subclasses to define poll
else:
    EngineSpawner = object


@dataclass
class Start:
    """One start, from its first step until its server ends."""

    profile: Profile
    timeout: int  # start_timeout without the time in line: for the engine's own start
    grant: Grant | None = None  # once the broker gave it
    creating: Future[Any] | None = None  # the engine's create call, while it may be in flight
    job: Launch | None = None  # the job this server runs, if it is a job's


class GPUServer(GPUSettings, EngineSpawner):
    """The engine-neutral spawner: put it before an engine's spawner class.

    What an engine adapter provides: `object_id` (its container's id, "" when none),
    `images_offered()`, `home()`, `prepare_storage()`, `prepare_image()`, `make_engine()`,
    `make_gpu_source(engine)`, and a create call that gives the container exactly
    `self.current_start.grant`, noting the call in `self.current_start.creating`.
    """

    object_id: str  # the engine adapter's
    current_start: Start | None = None  # the start under way or running; None once the server ended
    stop_notice: str | None = None  # why a policy stopped this server, for its next spawn page
    restart_on_cpu = False  # the server a policy stopped held GPUs: offer a CPU-only start
    idle_limit: Limited | None = None  # the group's idle timeout, for jupyterhub-idle-culler
    _timeout_without_wait = 0  # start_timeout as configured, before the time in line
    _timeout_given: int | None = None  # what allow_for_waiting set start_timeout to

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reserved = asyncio.Event()  # set once a start has its GPUs: progress waits on it

    @classmethod
    def from_config(cls, config: Any) -> Any:
        """The spawner's settings outside any user's spawn: hub start, CLI tools.

        DockerSpawner renders container names from a user as its config
        loads, so this one gets a stand-in user name.
        """
        return cls(config=config, user=SimpleNamespace(name="gpuspawner"))

    @default("server_token_scopes")
    def _default_server_token_scopes(self) -> list[str]:
        return access.server_token_scopes()

    @default("options_form")
    def _default_options_form(self) -> Any:
        return GPUServer._render_form

    @default("apply_user_options")
    def _default_apply_user_options(self) -> Any:
        # start() checks and applies user_options itself, on every start; this tells
        # JupyterHub they are handled (else it warns of "unhandled user_options"), and gives
        # the start its time in the waiting line on top of start_timeout.
        return lambda spawner, user_options: spawner.allow_for_waiting()

    @default("options_from_form")
    def _default_options_from_form(self) -> Any:
        return spawn_page.options_from_form

    def allow_for_waiting(self) -> None:
        """start_timeout plus the user's max_wait, for this start: JupyterHub gives up on a
        start after start_timeout, and reads it before start() runs. An admin's own
        `apply_user_options` should call this too."""
        try:
            profile = self.profile_chosen()
        except InvalidUserOptions:
            profile = None  # start() refuses it at once
        gpus = profile is not None and profile.request.kind is not None
        wait = self.user_limits().max_wait.value if gpus else 0
        current = int(getattr(self, "start_timeout"))  # noqa: B009 (a trait mypy cannot see)
        if current != self._timeout_given:  # the config's, or a group override's
            self._timeout_without_wait = current
        self._timeout_given = self._timeout_without_wait + math.ceil(wait or 0)
        self.start_timeout = self._timeout_given

    def options_from_query(self, query_data: dict[str, Any]) -> dict[str, Any]:
        """Never: a GET carries no XSRF token, so a link on any site could start a server.

        The hub then shows the form, with the link's profile chosen, for the user to confirm.
        """
        raise spawn_page.QueryCannotSpawn(spawn_page.LINKS_CANNOT_START)

    # --- who this server is, to the broker ----------------------------------
    @property
    def broker(self) -> Broker:
        return Broker.current()

    @property
    def holder(self) -> Holder:
        return Holder(self.orm_spawner.id, self.user.id, self.user.name, self.name)

    def user_limits(self) -> UserLimits:
        return self.broker.limits_for(self.user)

    # --- the form -------------------------------------------------------------
    def _render_form(self) -> str:
        return spawn_page.render(
            self.broker,
            self.user,
            self.user_limits(),
            self.form_template_paths,
            self.images_offered(),
            spawn_page.preselected(self.handler, self.user, self.orm_spawner),
            getattr(self.handler, "xsrf_token", None),
            self.hub.base_url,
            self.turn_quantum,
        )

    # --- start ------------------------------------------------------------------
    async def start(self) -> Any:
        limits = self.user_limits()
        profile = self.permitted_profile(limits)
        jobs = self.broker.jobs
        job = jobs.launching(self.orm_spawner.id) if jobs is not None else None
        if job is None and jobs and (why := jobs.refuses_by_hand(self.user.id, self.name)):
            raise refused_start(why, "job_server", 409)
        if job is None:  # (a job's GPUs were taken, and its budget checked, as it was dispatched)
            await self._may_start(profile, limits)
        self._apply_overrides(dict(profile.spawner_override))
        timeout = self._timeout_without_wait or int(getattr(self, "start_timeout"))  # noqa: B009
        self.current_start = begun = Start(profile, timeout, job=job)
        try:
            await self.prepare_storage()  # before the GPUs: a storage problem takes nothing
            await self.prepare_image()  # and so does an image that is not here
        except BaseException:
            if job is not None:
                self._release_when_gone(self.object_id)
            raise
        if job is None:  # (a user may choose to start elsewhere if their home's node is full)
            limits = homes.away_if_full(limits, profile, self.user_options, self.broker.pool)
        begun.grant = job.grant if job is not None else await self._take(profile, limits)
        self.stop_notice = None
        self.restart_on_cpu = False
        gpu_server = begun.profile.request.kind is not None
        self.idle_limit = limits.duration("idle_timeout" if gpu_server else "cpu_idle_timeout")
        if job is not None:  # the images' runner runs it; it is never idle, it ends by itself
            self.cmd, self.idle_limit = [launch.RUNNER], None
        self.reserved.set()
        self.log.info(
            "gpuspawner: %s gets %s (%s)%s",
            self._log_name,
            begun.profile.slug,
            ", ".join(begun.grant.uuids) or "no GPU",
            f" for {job.job.spec.path}" if job is not None else "",
        )
        return await self._start_container(begun)

    async def _may_start(self, profile: Profile, limits: UserLimits) -> None:
        over_budget = budgets.start_refusal(self.broker, self.user, profile, limits)
        if over_budget is not None:
            raise refused_start(over_budget, "budget", 403)
        if not await self.broker.settled(self.orm_spawner.id):
            raise refused_start(
                f"The container of {your_server(self.name)} has not been confirmed gone yet, so "
                "its GPUs are still held. Try again in a minute; if this persists, ask an admin "
                "(the GPUs page shows it as stopping).",
                "capacity",
                409,
            )

    def get_env(self) -> dict[str, str]:
        env: dict[str, str] = super().get_env()
        begun = self.current_start
        if begun is not None and begun.job is not None:
            env.update(launch.runner_environment(begun.job.job))
        return env

    def profile_chosen(self, options: dict[str, Any] | None = None) -> Profile:
        """The profile `options` (else its user_options) name; InvalidUserOptions where
        they are not valid."""
        more = (AWAY,) if self.broker.homes.on_nodes else ()
        chosen = self.user_options if options is None else options
        return choose_profile(chosen, self.broker.site.profiles, self.images_offered(), more)

    def permitted_profile(
        self, limits: UserLimits, options: dict[str, Any] | None = None
    ) -> Profile:
        """The profile `options` (else its user_options) name, if valid and `limits` let its
        user pick it; else the start's refusal (counted), which says why."""
        options = self.user_options if options is None else options
        try:
            profile = self.profile_chosen(options)
            away_chosen(options)
        except InvalidUserOptions as invalid:
            raise refused_start(str(invalid), "invalid_options", 400) from None
        if not limits.may_pick(profile.slug):
            allowed = ", ".join(sorted(limits.profiles.value or ()))
            raise refused_start(
                f"Profile {profile.slug!r} is not available to you "
                f"(group {limits.profiles.group} may pick: {allowed}).",
                "limit",
                403,
            )
        return profile

    async def _take(self, profile: Profile, limits: UserLimits) -> Grant:
        """GPUs from the broker; a GPU start goes through the waiting line (`hub.line.waiting`)."""
        try:
            return await self.broker.take(self.holder, profile, limits)
        except Refused as no:
            raise (refused_start if no.counted else failed_start)(
                no.message, no.reason, no.status
            ) from None

    async def _start_container(self, begun: Start) -> Any:
        """The engine's start, within start_timeout from here: JupyterHub's own clock
        also counts the time this start may wait in line, which must not let a stuck
        engine call hold GPUs for that much longer."""
        try:
            return await asyncio.wait_for(super().start(), begun.timeout)
        except TimeoutError:  # its GPUs return once the stuck call ends and the container goes
            raise failed_start(
                f"{your_server(self.name).capitalize()} did not start within "
                f"{duration(begun.timeout)} of getting its GPUs (start_timeout); they go back "
                "to the pool. Try again; if this persists, ask an admin.",
                "timeout",
                500,
            ) from None
        except Exception:
            # answered only once the container is confirmed gone and its GPUs are back:
            # JupyterHub stops a server that failed to start only if it runs
            await self._released(begun.creating)
            raise

    async def progress(self) -> Any:
        line, key = self.broker.line, self.orm_spawner.id
        first = None
        limits = self.user_limits()
        async for status in line_status.watch(line, key, self.reserved):
            place = line.place_of(key) or 1
            first = first or place
            message = " ".join([status, *self.broker.said_to(self.user.name, limits)])
            yield {"progress": line_status.progress_in_line(first, place), "message": message}
        await self.reserved.wait()
        grant = self.current_start.grant if self.current_start is not None else None
        if grant is None or not grant.units:
            yield {"progress": 30, "message": "CPU only: no GPU reserved"}
            return
        yield {
            "progress": 30,
            "message": f"Reserved {units_in_words(grant.units)}: {', '.join(grant.ids)}",
        }

    # --- end ----------------------------------------------------------------------
    def clear_state(self) -> None:
        container_id = self.object_id
        creating = self.current_start.creating if self.current_start is not None else None
        super().clear_state()
        self.current_start = None
        self.reserved.clear()
        self.idle_limit = None
        # JupyterHub clears the state as a spawn begins: a job's GPUs, taken as it was
        # dispatched, are for the start that follows, not a leftover to release
        if not self.books_call(lambda broker: broker.job_awaits_start(self.orm_spawner.id)):
            self._release_when_gone(container_id, creating)

    async def stop(self, now: bool = False) -> None:
        self._note_idle_cull()
        await super().stop(now)
        # The hub lists the server as stopped once this returns: by then its GPUs are back,
        # unless the engine could not confirm the container gone (then they show as stopping).
        await self._released()

    async def _released(self, creating: Future[Any] | None = None) -> None:
        """Until the broker has freed this server's GPUs on the engine's word (or given up
        for now: they show as stopping, and the monitor asks again)."""
        removal = self._release_when_gone(self.object_id, creating)
        if removal is not None:
            await asyncio.wait([removal])

    def _release_when_gone(
        self, container_id: str, creating: Future[Any] | None = None
    ) -> asyncio.Future[None] | None:
        """Ask the broker to free this server's GPUs once the engine confirms its container
        gone; the removal under way, if any, to wait for."""
        return self.books_call(
            lambda broker: broker.release_when_gone(self.orm_spawner.id, container_id, creating)
        )

    def note_stop(self, stopped_at: float, reason: str) -> None:
        """Why a policy stops this server, for its user's next spawn page: that the files are
        kept (where a home keeps them) and, for a GPU server, the offer to go on without GPUs."""
        self.stop_notice = notice(self.name, stopped_at, reason, self.home())
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
        """The engine's state, the culling details, and (for API readers) the GPUs held.

        The GPUs here are information only: the books are the broker's, rebuilt
        from the engine at hub start.
        """
        state: dict[str, Any] = super().get_state()
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
        return self.books_call(lambda broker: broker.grant_of(self.orm_spawner.id))

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self.stop_notice = state.get(notices.STATE_NOTICE)
        self.restart_on_cpu = bool(state.get(notices.STATE_CPU_RESTART))
        if "idle_timeout" in state:
            self.idle_limit = Limited(state["idle_timeout"], state.get("idle_timeout_group"))

    def books_call(self, call: Callable[[Broker], T]) -> T | None:
        """`call(broker)`, or None in a process without one, or for a server without a
        record (nothing was reserved there)."""
        if self.orm_spawner is None:
            return None
        try:
            return call(Broker.current())
        except BrokerNotRunning:
            return None


if "jupyterhub.app" in sys.modules:  # loaded by a hub: start the broker before any spawn
    attach.install(GPUServer)
