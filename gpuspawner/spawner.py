"""GPUSpawner: DockerSpawner plus exclusive GPUs from the hub's shared pool.

Wiring only. The decisions live in pool, limits and profiles; the Docker
specifics in containers. GPUs are released in `clear_state`, which the hub
calls on every path where a server ends (stop, failed spawn, container
gone), and which may run more than once.
"""

from __future__ import annotations

import asyncio
import functools
import sys
from types import SimpleNamespace
from typing import Any

from dockerspawner import DockerSpawner
from jupyterhub.spawner import SpawnException
from traitlets import (
    Bool,
    Dict,
    Enum,
    Float,
    Integer,
    List,
    TraitError,
    Unicode,
    Union,
    default,
    validate,
)

from . import containers, form, handlers, hubgpus
from .devices import NoGPUSourceError, describe
from .limits import LimitExceeded, UserLimits
from .monitor import Monitor
from .pool import PLACEMENT_POLICIES, Grant, Holder, NotEnoughGPUs
from .profiles import InvalidUserOptions, Profile, choose_profile


class GPUSpawner(DockerSpawner):
    simulate_gpus = Integer(
        0,
        config=True,
        help="""Run on this many simulated GPUs instead of asking NVML.

        For demos and tests on machines without GPUs: the pool, the form, the
        limits and the Docker device requests work as on a GPU server. Leave at
        0 on a real GPU server. Example: `c.GPUSpawner.simulate_gpus = 8`.
        """,
    )
    simulated_load_file = Unicode(
        "",
        config=True,
        help="""With simulate_gpus: a JSON file that makes simulated GPUs look busy, hot or broken.

        An object from GPU UUID or index to any of `utilization_percent`,
        `memory_used_gib`, `temperature_celsius`, `power_watts`, `processes`
        (a list of PIDs) and `health` (a reason: the GPU is then unhealthy).
        Read on every monitor tick. Example: `{"0": {"utilization_percent": 95}}`.
        """,
    )
    monitor_interval = Float(
        10.0,
        config=True,
        help="""Seconds between two looks at Docker and NVML (telemetry, health,
        GPUs used outside JupyterHub, GPU activity).""",
    )
    avoid_gpus_with_foreign_processes = Bool(
        False,
        config=True,
        help="""Keep a free GPU out of new allocations while NVML shows compute
        processes on it that no server of the hub runs (a colleague's job
        started outside JupyterHub). GPUs named in other containers' device
        requests are always kept out.""",
    )
    exclude_gpus = List(
        Union([Unicode(), Integer()]),
        config=True,
        help="""GPUs to keep out of the pool, by UUID ("GPU-…") or NVML index.

        For a GPU reserved for the host's display or for jobs outside
        JupyterHub. Example: `c.GPUSpawner.exclude_gpus = [7]`.
        """,
    )
    placement = Enum(
        list(PLACEMENT_POLICIES),
        "packed",
        config=True,
        help="""How to choose GPUs for a server.

        "packed" (default) fills partly used GPU pairs and quads first, keeping
        whole aligned blocks free for multi-GPU servers; "spread" keeps
        servers apart instead.
        """,
    )
    profiles = List(
        Dict(),
        config=True,
        help="""The choices on the spawn form, in KubeSpawner's profile_list shape.

        Each entry: `display_name`, `slug`, `description`, `default`, `gpus`
        (a count), `spawner_override` (settings for that profile, such as
        `image`, `mem_limit`, `cpu_limit`). Empty: CPU only, 1, 2, 4 and all
        GPUs. Example::

            c.GPUSpawner.profiles = [
                {"display_name": "CPU only", "slug": "cpu", "gpus": 0},
                {"display_name": "1 × H100", "slug": "gpu-1", "gpus": 1, "default": True,
                 "spawner_override": {"mem_limit": "64G"}},
            ]
        """,
    )
    group_limits = Dict(
        config=True,
        help="""Limits per JupyterHub group: group name → dict of limits.

        Keys: `max_gpus_per_server`, `max_gpus_per_user`, `max_gpus_group` (all
        members together), `profiles` (slugs the group may pick). A key left
        out takes its value from `default_limits`. A user in several groups
        gets the most generous value of each. Example::

            c.GPUSpawner.group_limits = {
                "students": {"max_gpus_per_user": 1, "max_gpus_group": 4},
                "researchers": {"max_gpus_per_user": 4},
            }
        """,
    )
    default_limits = Dict(
        config=True,
        help="""Limits for users in no group listed in `group_limits`, and the
        defaults for keys a listed group leaves out. Same keys as
        `group_limits`; `max_gpus_group` here caps all users in no listed group
        together. Empty: unlimited.
        """,
    )
    limit_admins = Bool(
        False,
        config=True,
        help="Apply group limits to hub admins too. By default admins are unlimited.",
    )
    form_template_paths = List(
        Unicode(),
        config=True,
        help="""Folders searched for `gpuspawner_form.html` before the packaged
        template, to restyle the spawn form.""",
    )

    gpu_grant: Grant | None = None

    @classmethod
    def from_config(cls, config: Any) -> GPUSpawner:
        """The spawner's settings outside any user's spawn: hub start, CLI tools.

        DockerSpawner renders container names from a user as its config
        loads, so this one gets a stand-in user name.
        """
        return cls(config=config, user=SimpleNamespace(name="gpuspawner"))

    @default("remove")
    def _default_remove(self) -> bool:
        return True

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
        if not hub.recovered:
            hub.recover(containers.running_gpu_containers(self.client), self.log)
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
            notices=[],
        )

    def _chosen_profile(self) -> Profile:
        hub = self.hub_gpus
        try:
            profile = choose_profile(self.user_options, hub.profiles, self._extra_option_keys())
        except InvalidUserOptions as invalid:
            raise SpawnException(str(invalid), reason="invalid_options") from None
        limits = self._user_limits()
        if not limits.may_pick(profile.slug):
            allowed = ", ".join(sorted(limits.profiles.value or ()))
            raise SpawnException(
                f"Profile {profile.slug!r} is not available to you "
                f"(group {limits.profiles.group} may pick: {allowed}).",
                reason="limit",
                status_code=403,
            )
        return profile

    def _allocate(self, profile: Profile) -> Grant:
        limits = self._user_limits()
        try:
            return self.hub_gpus.pool.allocate(
                self.user.name,
                self.name,
                profile.gpus,
                admit=lambda usage: limits.admit(profile.gpus, self.user.name, usage),
            )
        except LimitExceeded as exceeded:
            raise SpawnException(str(exceeded), reason="limit", status_code=403) from None
        except NotEnoughGPUs as short:
            raise SpawnException(
                f"Not enough free GPUs: profile {profile.display_name!r} needs {short.requested}, "
                f"{short.free} of {short.total} are free right now. Try again when another "
                "server stops, or pick a profile with fewer GPUs.",
                reason="capacity",
                status_code=409,
            ) from None

    async def start(self) -> Any:
        profile = self._chosen_profile()
        self._apply_overrides(dict(profile.spawner_override))
        self.gpu_grant = self._allocate(profile)
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

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        if self.gpu_grant is not None:
            state["gpus"] = list(self.gpu_grant.uuids)
            state["gpu_quota_group"] = self.gpu_grant.holder.quota_group
            state["gpu_since"] = self.gpu_grant.since
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        if "gpus" not in state:
            return
        pool = self.hub_gpus.pool
        self.gpu_grant = pool.grant_of(self.holder_key) or pool.adopt(
            Holder(self.user.name, self.name, state.get("gpu_quota_group")),
            state["gpus"],
            state.get("gpu_since"),
        )


def _options_from_form(formdata: dict[str, list[str]]) -> dict[str, Any]:
    """Form fields as user_options, unchecked: validation happens at every start."""
    return {
        key: values[0] if len(values) == 1 else values
        for key, values in formdata.items()
        if key != "_xsrf"
    }


def _prepare_hub(app: Any) -> None:
    """Check the GPU config and rebuild the pool, before the hub serves anyone.

    A config error stops the hub with one line that says what to fix.
    """
    spawner = app.spawner_class.from_config(app.config)
    try:
        hub = hubgpus.current(spawner)
    except (ValueError, NoGPUSourceError) as error:
        app.log.critical("gpuspawner: %s", error)
        app.exit(1)
    hub.recover(containers.running_gpu_containers(spawner.client), app.log)
    Monitor(
        hub,
        spawner.client,
        app.log,
        spawner.monitor_interval,
        spawner.avoid_gpus_with_foreign_processes,
    ).start()
    app.tornado_application.add_handlers(".*$", handlers.handlers(app.hub_prefix))
    app.log.info(
        "gpuspawner: %d GPU(s) in the pool (%s), %d free",
        len(hub.gpus),
        describe(hub.gpus),
        hub.pool.free_count(),
    )


def _run_at_hub_start() -> None:
    """Have a hub that uses GPUSpawner call `_prepare_hub` before it sets up its spawners.

    JupyterHub has no start-up hook for spawners, and it imports this module
    while it constructs itself, before its config is read. So the one place
    with the whole config, before any spawn is served, is the hub's own
    `init_spawners` step: wrapped here once, and doing nothing in a hub
    that uses another spawner.
    """
    from jupyterhub.app import JupyterHub

    original = JupyterHub.init_spawners
    if getattr(original, "gpuspawner", False):
        return

    @functools.wraps(original)
    async def init_spawners(app: Any) -> Any:
        if isinstance(app.spawner_class, type) and issubclass(app.spawner_class, GPUSpawner):
            _prepare_hub(app)
        return await original(app)

    init_spawners.gpuspawner = True  # type: ignore[attr-defined]
    JupyterHub.init_spawners = init_spawners  # type: ignore[method-assign]


if "jupyterhub.app" in sys.modules:
    _run_at_hub_start()
