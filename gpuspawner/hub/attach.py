"""gpuspawner attached to JupyterHub: the one module that touches JupyterHub's internals.

JupyterHub 6 gives a spawner no start-up hook: the only moments a spawner class can act
with the hub's whole config are steps of `JupyterHub.initialize`. Public seams serve
wherever one exists: gpuspawner's scopes go into `custom_scopes`, the user role's jobs
scope into `extra_user_scopes`, its templates into `template_paths` (each a config trait,
set before JupyterHub reads it), and spawners are reached through the Spawner API only.
What no public seam serves is below, each touch marked `TOUCH` with its reason:

1. `JupyterHub.init_role_creation` is wrapped: the one step before the roles are loaded
   (the config's roles may grant our scopes) and before the templates are read.
2. `roles.get_default_roles` is wrapped: the admin role gets `custom:gpus:admin`.
3. `JupyterHub.init_spawners` is wrapped: the one step with the database and the web
   application, before any spawn is served; the broker starts there.
4. `app.tornado_application.add_handlers`: the GPU pages and APIs are served by the hub.
5. `app.start` is wrapped on the running hub: the jobs start once the proxy routes.
6. `app.cleanup` is wrapped on the running hub: the line and the jobs close first.

`check_start_sequence` checks, before anything is wrapped, that the installed JupyterHub
starts the way this module was written for; a test runs it, so an upgrade that moves a
step fails loudly rather than quietly skipping gpuspawner's start.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from traitlets import TraitError

from ..core.errors import GPUConfigError
from ..core.pool import DeviceState
from ..core.units import tally
from ..core.words import server_name
from .base import access
from .books.broker import Broker, BrokerNotRunning
from .books.refusals import RefusalsAreNotFaults
from .books.served import Route
from .calendar import api as calendar_api
from .homes import api as homes_api
from .jobs import api as jobs_api
from .line import slow_starts
from .parts import Parts, build_parts, configure, recover, start
from .spawn import notices
from .web import lease, pages

SUPPORTED_MAJOR_VERSIONS = (6,)
# (step, the steps `initialize` must run before it): what the wrappers rely on
ORDER = (
    ("init_role_creation", ("init_db",)),
    ("init_tornado_settings", ("init_role_creation",)),
    ("init_spawners", ("init_role_creation", "init_tornado_application")),
)


class UnsupportedJupyterHub(RuntimeError):
    """This JupyterHub does not start the way gpuspawner's start-up adapter expects."""


def check_start_sequence(app_class: type, version: tuple[int, ...]) -> None:
    """UnsupportedJupyterHub unless `init_spawners` and `init_role_creation` are coroutines
    that `initialize` runs, the roles first (so gpuspawner's scopes are defined before the
    config's roles grant them) and before the templates are read, and the spawners after
    the web application exists (so the GPU pages can be added there)."""
    if version[0] not in SUPPORTED_MAJOR_VERSIONS:
        raise UnsupportedJupyterHub(
            f"gpuspawner's start-up adapter supports JupyterHub "
            f"{', '.join(map(str, SUPPORTED_MAJOR_VERSIONS))}.x, not {'.'.join(map(str, version))}"
        )
    for step in ("init_role_creation", "init_spawners"):
        if not inspect.iscoroutinefunction(getattr(app_class, step, None)):
            raise UnsupportedJupyterHub(f"JupyterHub.{step} is no longer a coroutine method")
    # TOUCH: JupyterHub states its start sequence nowhere but in `initialize`'s body.
    source = inspect.getsource(getattr(app_class, "initialize"))  # noqa: B009
    web_app, spawners = source.find("init_tornado_application()"), source.find("init_spawners()")
    if web_app < 0 or spawners < 0 or web_app > spawners:
        raise UnsupportedJupyterHub(
            "JupyterHub.initialize no longer runs init_spawners after init_tornado_application"
        )
    roles = source.find("init_role_creation()")
    if not 0 <= roles < spawners:
        raise UnsupportedJupyterHub(
            "JupyterHub.initialize no longer loads its roles (init_role_creation) before "
            "init_spawners"
        )
    settings = source.find("init_tornado_settings()")
    if 0 <= settings < roles:
        raise UnsupportedJupyterHub(
            "JupyterHub.initialize now reads its templates (init_tornado_settings) before "
            "it loads its roles (init_role_creation)"
        )


def install(spawner_class: type) -> None:
    """Have a hub whose spawner is a `spawner_class` define gpuspawner's scopes before its
    roles load, and start the broker before its spawners. Once per process."""
    from jupyterhub import version_info
    from jupyterhub.app import JupyterHub

    original = JupyterHub.init_spawners
    if getattr(original, "gpuspawner", False):
        return
    check_start_sequence(JupyterHub, tuple(version_info[:3]))

    def ours(app: Any) -> bool:
        configured = app.spawner_class
        return isinstance(configured, type) and issubclass(configured, spawner_class)

    # TOUCH 3: no hook runs with the database and the web application before spawns are
    # served but this step (`extra_handlers` is deprecated and read before either exists).
    @functools.wraps(original)
    async def init_spawners(app: Any) -> Any:
        if ours(app):
            await start_broker(app)
        return await original(app)

    load_roles = JupyterHub.init_role_creation

    # TOUCH 1: the config traits below must be set before JupyterHub reads them, and a
    # spawner class is first consulted after the config is loaded: this is the first step
    # after that which precedes the roles' loading.
    @functools.wraps(load_roles)
    async def init_role_creation(app: Any) -> Any:
        if ours(app):
            before_roles(app)
        return await load_roles(app)

    init_spawners.gpuspawner = True  # type: ignore[attr-defined]
    JupyterHub.init_spawners = init_spawners
    JupyterHub.init_role_creation = init_role_creation


def before_roles(app: Any) -> None:
    """Through public config traits: define the scopes the config does not (so `load_roles`
    may grant them), give every user their own jobs, and let the hub find gpuspawner's
    templates after the admin's own. Then grant admins `custom:gpus:admin`."""
    app.custom_scopes = {**access.DEFINITIONS, **app.custom_scopes}
    app.extra_user_scopes = {*app.extra_user_scopes, access.USER_SCOPE}
    app.template_paths = with_ours(app.template_paths, app.data_files_path)
    from jupyterhub import roles

    if not getattr(roles.get_default_roles, "gpuspawner", False):
        roles.get_default_roles = with_admins_granted(roles.get_default_roles)


def with_ours(template_paths: list[str], data_files_path: str) -> list[str]:
    """The admin's template folders, then gpuspawner's (its `page.html` adds the GPUs link to
    JupyterHub's), then JupyterHub's own: before it where the admin listed it."""
    if pages.TEMPLATES in template_paths:
        return list(template_paths)
    own = os.path.join(data_files_path, "templates")  # JupyterHub's default template_paths
    at = template_paths.index(own) if own in template_paths else len(template_paths)
    return [*template_paths[:at], pages.TEMPLATES, *template_paths[at:]]


def with_admins_granted(default_roles: Callable[[], list[dict[str, Any]]]) -> Any:
    """JupyterHub's default roles, the admin role with `custom:gpus:admin` added.

    TOUCH 2: JupyterHub refuses a config that changes the admin role (`create_role`
    compares it with this function's), and that role follows the admin flag however it is
    set (config, admin page, REST API): the scope must be in the role's own definition."""

    @functools.wraps(default_roles)
    def granted() -> list[dict[str, Any]]:
        found = default_roles()
        for role in found:
            if role["name"] == "admin" and access.ADMIN not in role["scopes"]:
                role["scopes"] = [*role["scopes"], access.ADMIN]
        return found

    granted.gpuspawner = True  # type: ignore[attr-defined]
    return granted


async def start_broker(app: Any, spawner_class: Any = None) -> Broker:
    """Check the config, build the parts and read the books back from Docker, start them,
    and serve the GPU pages and APIs.

    A config error stops the hub with one line that says what to fix. Once per
    hub process: while a broker runs, this returns it and starts nothing more.
    """
    with contextlib.suppress(BrokerNotRunning):
        return Broker.current()
    # the devices' and the engine's own lines, in the hub's log (as JupyterHub hooks up
    # tornado's): without this their info never showed, and their warnings bare on stderr
    ours = logging.getLogger("gpuspawner")
    ours.propagate, ours.parent = True, app.log
    ours.setLevel(app.log.level)
    try:
        configured = configure(app.config, spawner_class or app.spawner_class)
    except (GPUConfigError, TraitError) as error:
        app.log.critical("gpuspawner: %s", error)
        app.exit(1)
        raise  # app.exit raises SystemExit; a test's app may not
    parts = build_parts(configured, app)
    broker = parts.broker
    _end_previous_line(app, broker)
    started = time.perf_counter()
    read = await recover(parts, app.db)
    app.log.info(
        "gpuspawner: books rebuilt from %d container(s) in %.3f s",
        read,
        time.perf_counter() - started,
    )
    broker.install()  # where the spawners find it: JupyterHub makes them, not we
    start(parts)
    _follow_the_hub(app, parts)
    _filter_the_log(app, broker)
    _serve(app.tornado_application, routes(app.hub_prefix, broker), broker)
    shown = broker.calendar.states(broker.pool)  # drained GPUs are not free
    app.log.info(
        "gpuspawner: %d GPU(s) in the pool (%s), %d free, %d drained",
        len(configured.site.gpus),
        tally(configured.site.units),
        list(shown.values()).count(DeviceState.FREE),
        len(broker.calendar.drained()),
    )
    return broker


def routes(hub_prefix: str, broker: Broker) -> list[Route]:
    """Every page and API gpuspawner serves, each handler given the broker."""
    return [
        *pages.handlers(hub_prefix, broker),
        *lease.handlers(hub_prefix, broker),
        *calendar_api.handlers(hub_prefix, broker),
        *homes_api.handlers(hub_prefix, broker),
        *jobs_api.handlers(hub_prefix, broker),
    ]


def _serve(web_app: Any, served: list[Route], broker: Broker) -> None:
    """The pages and APIs, served by the hub's web application while `broker` runs (a test
    that starts another broker in the same hub gets pages that read that one).

    TOUCH 4: they need the broker, which lives in this process: a service runs in its own
    (and answers under /services/, not at these URLs); `extra_handlers` is deprecated, and
    read before the broker exists. Tornado's own `add_handlers` puts them before the hub's."""
    rules = web_app.default_router.rules
    before = list(rules)
    web_app.add_handlers(".*$", served)
    added = [rule for rule in rules if not any(rule is old for old in before)]

    def unserve() -> None:
        for rule in added:
            rules.remove(rule)

    broker.on_stop(unserve)


def _follow_the_hub(app: Any, parts: Parts) -> None:
    """The jobs start once the hub runs (its proxy must route to them); at shutdown, before
    JupyterHub's `cleanup` stops servers (if `cleanup_servers`) and cancels every task (the
    waiting starts among them), the line stops starting anyone and keeps its written record
    (so the next hub tells each person), and the jobs' board starts nothing more and puts
    back in line each job the cleanup stops."""
    broker, jobs = parts.broker, parts.jobs
    # TOUCH 5: JupyterHub offers no hook for "the hub now serves".
    start_hub = app.start

    @functools.wraps(start_hub)
    async def start_then_open_jobs(*args: Any, **kwargs: Any) -> Any:
        begun = await start_hub(*args, **kwargs)
        jobs.open()
        return begun

    app.start = start_then_open_jobs
    # TOUCH 6: nor one for "the hub is shutting down", before its cleanup.
    cleanup = app.cleanup

    @functools.wraps(cleanup)
    async def close_then_clean_up(*args: Any, **kwargs: Any) -> Any:
        broker.close_line()
        jobs.close()
        return await cleanup(*args, **kwargs)

    app.cleanup = close_then_clean_up


def _filter_the_log(app: Any, broker: Broker) -> None:
    """The hub's log: a start waiting in line is not slow, a refused start not a fault."""
    not_slow = slow_starts.install(app.log, broker.line)
    broker.on_stop(lambda: app.log.removeFilter(not_slow))
    not_faults = RefusalsAreNotFaults()
    app.log.addFilter(not_faults)
    broker.on_stop(lambda: app.log.removeFilter(not_faults))


def _end_previous_line(app: Any, broker: Broker) -> None:
    """Who was waiting when the hub before this one ended learns, on their next spawn page,
    that their start ended: JupyterHub has already forgotten it."""
    for entry in notices.end_waiting_starts(app.db, broker.line_before_restart(), time.time()):
        app.log.warning(
            "gpuspawner: %s was waiting in line for %s when the hub stopped; that start has "
            "ended and their next spawn page says so",
            server_name(entry.user, entry.server),
            entry.asks_for,
        )
