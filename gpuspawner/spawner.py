"""GPUSpawner: DockerSpawner plus exclusive GPUs from the hub's shared pool.

Wiring only. The decisions live in pool, limits and profiles; the Docker
specifics in containers. GPUs are released in `clear_state`, which the hub
calls on every path where a server ends (stop, failed spawn, container
gone), and which may run more than once.
"""

from __future__ import annotations

import asyncio
import sys
import time
from types import SimpleNamespace
from typing import Any

from dockerspawner import DockerSpawner
from jupyterhub.spawner import SpawnException
from jupyterhub.utils import utcnow
from traitlets import Bool, TraitError, default, validate

from . import containers, form, hubgpus
from .culling import duration, notice
from .devices import describe
from .hubstart import run_at_hub_start
from .limits import Limited, LimitExceeded, UserLimits, from_group
from .metrics import ALLOCATION_SECONDS, SPAWNS_REFUSED
from .pool import Grant, Holder, NotEnoughGPUs
from .profiles import InvalidUserOptions, Profile, choose_profile
from .settings import GPUSettings


class GPUSpawner(GPUSettings, DockerSpawner):
    gpu_grant: Grant | None = None
    stop_notice: str | None = None  # why a policy stopped this server, for its next spawn page
    idle_limit: Limited | None = None  # the group's idle timeout, for jupyterhub-idle-culler

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
        pool may have given to someone else; setting False stops the hub.""",
    )

    @validate("remove")
    def _require_remove(self, proposal: Any) -> bool:
        if not proposal.value:
            raise TraitError(
                "GPUSpawner needs remove=True: a kept container would restart later "
                "with the GPUs it had, which the pool may have given to someone else."
            )
        return True

    @default("options_form")
    def _default_options_form(self) -> Any:
        return GPUSpawner._render_form

    @default("apply_user_options")
    def _default_apply_user_options(self) -> Any:
        # start() checks and applies user_options itself, on every start; this only
        # tells JupyterHub they are handled (else it warns of "unhandled user_options").
        return lambda spawner, user_options: None

    @default("options_from_form")
    def _default_options_from_form(self) -> Any:
        return _options_from_form

    @property
    def hub_gpus(self) -> hubgpus.HubGPUs:
        hub = hubgpus.current(self)
        if not hub.recovered:  # a hub that skipped hubstart: adopt nothing, keep out all in use
            hub.recover(containers.running_gpu_containers(self.client), set(), self.log)
        return hub

    @property
    def holder_key(self) -> str:
        return Holder(self.user.name, self.name).key

    def _user_limits(self) -> UserLimits:
        groups = {g.name for g in self.user.groups}
        return self.hub_gpus.limits.for_user(groups, admin=bool(self.user.admin))

    def _extra_option_keys(self) -> tuple[str, ...]:
        return ("image",) if self._get_allowed_images() else ()

    def _render_form(self) -> str:
        hub = self.hub_gpus
        usage = hub.pool.usage()
        free = hub.pool.free_count()
        limits = self._user_limits()
        previous = (self.orm_spawner.user_options or {}).get("profile")
        return form.render(
            self.form_template_paths,
            free=free,
            total=len(hub.gpus),
            model=hub.gpus[0].label if hub.gpus else "",
            rows=form.profile_rows(
                hub.profiles, limits, self.user.name, usage, free, hub.gpus, previous
            ),
            holdings=form.holdings(limits, self.user.name, usage, hub.pool.grants()),
            images=list(self._get_allowed_images()),
            notices=[
                spawner.state["stop_notice"]
                for spawner in self.user.orm_user.orm_spawners.values()
                if spawner.server is None and (spawner.state or {}).get("stop_notice")
            ],
        )

    def _chosen_profile(self) -> Profile:
        hub = self.hub_gpus
        try:
            profile = choose_profile(self.user_options, hub.profiles, self._extra_option_keys())
        except InvalidUserOptions as invalid:
            raise refusal(str(invalid), "invalid_options", 400) from None
        limits = self._user_limits()
        if not limits.may_pick(profile.slug):
            allowed = ", ".join(sorted(limits.profiles.value or ()))
            raise refusal(
                f"Profile {profile.slug!r} is not available to you "
                f"(group {limits.profiles.group} may pick: {allowed}).",
                "limit",
                403,
            )
        return profile

    def _allocate(self, profile: Profile) -> Grant:
        limits = self._user_limits()
        try:
            with ALLOCATION_SECONDS.time():
                return self.hub_gpus.pool.allocate(
                    self.user.name,
                    self.name,
                    profile.gpus,
                    admit=lambda usage: limits.admit(profile.gpus, self.user.name, usage),
                )
        except LimitExceeded as exceeded:
            raise refusal(str(exceeded), "limit", 403) from None
        except NotEnoughGPUs as short:
            raise refusal(
                f"Not enough free GPUs: profile {profile.display_name!r} needs {short.requested}, "
                f"{short.free} of {short.total} are free right now. Try again when another "
                "server stops, or pick a profile with fewer GPUs.",
                "capacity",
                409,
            ) from None

    async def start(self) -> Any:
        profile = self._chosen_profile()
        self._apply_overrides(dict(profile.spawner_override))
        self.gpu_grant = self._allocate(profile)
        self.stop_notice = None
        key = "idle_timeout" if profile.gpus else "cpu_idle_timeout"
        self.idle_limit = self._user_limits().durations[key]
        self.log.info(
            "gpuspawner: %s gets %s (%s)",
            self.holder_key,
            profile.slug,
            ", ".join(self.gpu_grant.uuids) or "no GPU",
        )
        try:
            return await super().start()
        except BaseException:
            await self._discard_container()
            self._release()
            raise

    async def _discard_container(self) -> None:
        """Remove a container a failed start created: it must not linger, nor restart later."""
        if not self.object_id:
            return
        try:
            await self.remove_object()
        except Exception:
            self.log.exception(
                "gpuspawner: could not remove %s after a failed start", self.object_id
            )
        self.object_id = ""

    def docker(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if method == "create_container":
            grant = self.gpu_grant or Grant(Holder(self.user.name, self.name), (), 0.0)
            try:
                kwargs = containers.isolate(kwargs, grant)
            except containers.UnsafeContainerConfig as unsafe:
                raise SpawnException(str(unsafe), reason="config", status_code=500) from None
        return super().docker(method, *args, **kwargs)

    async def progress(self) -> Any:
        while self.gpu_grant is None and self._spawn_pending:
            await asyncio.sleep(0.1)
        grant = self.gpu_grant
        if grant is not None:
            gpus = [g for g in self.hub_gpus.gpus if g.uuid in grant.uuids]
            yield {
                "progress": 30,
                "message": f"Reserved {describe(gpus)}: {', '.join(grant.uuids)}"
                if gpus
                else "CPU only: no GPU reserved",
            }

    def _release(self) -> None:
        released = hubgpus.current(self).pool.release(self.holder_key)
        if released is not None and released.uuids:
            self.log.info("gpuspawner: %s returned %s", self.holder_key, ", ".join(released.uuids))
        self.gpu_grant = None

    def clear_state(self) -> None:
        super().clear_state()
        self._release()

    async def stop(self, now: bool = False) -> None:
        self._note_idle_cull()
        await super().stop(now)

    def _note_idle_cull(self) -> None:
        """A stop past the group's idle timeout is jupyterhub-idle-culler's: say so."""
        limit, last = self.idle_limit, self.orm_spawner.last_activity
        if self.stop_notice or limit is None or limit.value is None or last is None:
            return
        idle = (utcnow(with_tz=False) - last).total_seconds()
        if idle >= limit.value:
            reason = f"it was idle for {duration(idle)} (idle_timeout{from_group(limit.group)})"
            self.stop_notice = notice(self.name, time.time(), reason)

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        if self.gpu_grant is not None:
            state["gpus"] = list(self.gpu_grant.uuids)
            state["gpu_quota_group"] = self.gpu_grant.holder.quota_group
            state["gpu_since"] = self.gpu_grant.since
        if self.idle_limit is not None and self.idle_limit.value is not None:
            state["idle_timeout"] = self.idle_limit.value
            state["idle_timeout_group"] = self.idle_limit.group
        if self.stop_notice:
            state["stop_notice"] = self.stop_notice
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self.stop_notice = state.get("stop_notice")
        if "idle_timeout" in state:
            self.idle_limit = Limited(state["idle_timeout"], state.get("idle_timeout_group"))
        if "gpus" not in state:
            return
        pool = self.hub_gpus.pool
        self.gpu_grant = pool.grant_of(self.holder_key) or pool.adopt(
            Holder(self.user.name, self.name, state.get("gpu_quota_group")),
            state["gpus"],
            state.get("gpu_since"),
        )


def refusal(message: str, reason: str, status_code: int) -> SpawnException:
    """A spawn refused before any container: counted, and shown to the user as is."""
    SPAWNS_REFUSED.labels(reason).inc()
    return SpawnException(message, reason=reason, status_code=status_code)


def _options_from_form(formdata: dict[str, list[str]]) -> dict[str, Any]:
    """Form fields as user_options, unchecked: validation happens at every start."""
    return {
        key: values[0] if len(values) == 1 else values
        for key, values in formdata.items()
        if key != "_xsrf"
    }


if "jupyterhub.app" in sys.modules:  # loaded by a hub: check and rebuild before it serves
    run_at_hub_start(GPUSpawner)
