"""Hub start: the one place gpuspawner hooks into JupyterHub itself.

JupyterHub 6 gives spawners no start-up hook, and `JupyterHub.extra_handlers`
is deprecated. The one moment with the whole config, the database and the web
application, before any spawn is served, is the hub's own `init_spawners`
step. `install` wraps that one method, once, after checking that this
JupyterHub starts the way the adapter was written for (`check_start_sequence`;
a test runs the check, so an upgrade that moves the step fails loudly). The
wrapper does nothing in a hub whose spawner is not a GPUSpawner.

`start_broker` is what the wrapper runs: check the config, rebuild the books
from Docker, start the monitor and the reclaimer, and serve the GPU pages and
the lease API.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import sqlite3
import time
from collections.abc import Mapping
from typing import Any

from jupyterhub import orm
from traitlets import TraitError

from ..config.parking import memory_limit
from ..config.site import GPUSite, check_container_settings, check_overrides
from ..core.culling import Busyness
from ..core.errors import GPUConfigError
from ..core.job_rules import JobRules, job_rules
from ..core.limits import UserLimits
from ..core.pool import DeviceState
from ..core.units import tally
from ..core.words import gib, server_name
from ..devices.checkpoint import HostOf
from ..records.calendar import CalendarRecord
from ..records.homes import HomeRecord
from ..records.jobs import JobRecord
from ..records.ledger import Ledger
from ..records.line import LineRecord
from .base import access
from .books import budgets
from .books.broker import Broker, BrokerNotRunning
from .books.recovery import KnownServers
from .books.refusals import RefusalsAreNotFaults
from .calendar import api as calendar_api
from .homes import api as homes_api
from .jobs import api as jobs_api
from .jobs.board import JobBoard
from .jobs.launch import Launcher
from .line import slow_starts
from .reclaim.parking import Parker
from .reclaim.reclaimer import Reclaimer
from .spawn import notices
from .watch import metrics
from .watch.monitor import Monitor
from .web import lease as lease_api
from .web import pages

SUPPORTED_MAJOR_VERSIONS = (6,)


class UnsupportedJupyterHub(RuntimeError):
    """This JupyterHub does not start the way gpuspawner's start-up adapter expects."""


def check_start_sequence(app_class: type, version: tuple[int, ...]) -> None:
    """UnsupportedJupyterHub unless `init_spawners` and `init_role_creation` are coroutines
    that `initialize` runs, the roles first (so gpuspawner's scopes are defined before the
    config's roles grant them) and the spawners after the web application exists (so the
    GPU pages can be added there)."""
    if version[0] not in SUPPORTED_MAJOR_VERSIONS:
        raise UnsupportedJupyterHub(
            f"gpuspawner's start-up adapter supports JupyterHub "
            f"{', '.join(map(str, SUPPORTED_MAJOR_VERSIONS))}.x, not {'.'.join(map(str, version))}"
        )
    for step in ("init_role_creation", "init_spawners"):
        if not inspect.iscoroutinefunction(getattr(app_class, step, None)):
            raise UnsupportedJupyterHub(f"JupyterHub.{step} is no longer a coroutine method")
    source = inspect.getsource(getattr(app_class, "initialize"))  # noqa: B009
    web_app, spawners = source.find("init_tornado_application()"), source.find("init_spawners()")
    if web_app < 0 or spawners < 0 or web_app > spawners:
        raise UnsupportedJupyterHub(
            "JupyterHub.initialize no longer runs init_spawners after init_tornado_application"
        )
    if not 0 <= source.find("init_role_creation()") < spawners:
        raise UnsupportedJupyterHub(
            "JupyterHub.initialize no longer loads its roles (init_role_creation) before "
            "init_spawners"
        )


def install(spawner_class: type) -> None:
    """Have a hub whose spawner is a `spawner_class` start the broker before its spawners."""
    from jupyterhub import version_info
    from jupyterhub.app import JupyterHub

    original = JupyterHub.init_spawners
    if getattr(original, "gpuspawner", False):
        return
    check_start_sequence(JupyterHub, tuple(version_info[:3]))

    def ours(app: Any) -> bool:
        configured = app.spawner_class
        return isinstance(configured, type) and issubclass(configured, spawner_class)

    @functools.wraps(original)
    async def init_spawners(app: Any) -> Any:
        if ours(app):
            await start_broker(app)
        return await original(app)

    load_roles = JupyterHub.init_role_creation

    @functools.wraps(load_roles)
    async def init_role_creation(app: Any) -> Any:
        if ours(app):
            access.register(app)
        return await load_roles(app)

    init_spawners.gpuspawner = True  # type: ignore[attr-defined]
    JupyterHub.init_spawners = init_spawners
    JupyterHub.init_role_creation = init_role_creation


async def start_broker(app: Any, spawner_class: Any = None) -> Broker:
    """Check the config, rebuild the books from Docker, start the monitor, add the GPU pages
    and the lease API.

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
    spawner_class = spawner_class or app.spawner_class
    try:
        spawner = spawner_class.from_config(app.config)
        check_container_settings(spawner, spawner.group_overrides)
        check_overrides(lambda: spawner_class.from_config(app.config), spawner.group_overrides)
        spawner.check_storage()
        engine = spawner.make_engine()
        site = GPUSite.from_config(spawner, spawner.make_gpu_source(engine))
        ledger = _open_ledger(spawner.usage_ledger_file)
        parks = _parking(spawner, site)
    except (GPUConfigError, TraitError) as error:
        app.log.critical("gpuspawner: %s", error)
        app.exit(1)
        raise  # app.exit raises SystemExit; a test's app may not
    broker = Broker(
        site,
        engine,
        spawner.prefix,
        app.log,
        ignore_containers=spawner.ignore_gpu_containers,
        ledger=ledger,
        reserve_after=spawner.line_reserve_after,
        half_life=spawner.usage_half_life_days * 24 * 3600,
        calendar=CalendarRecord(spawner.usage_ledger_file),
        homes=HomeRecord(spawner.usage_ledger_file) if spawner.homes_on_nodes else None,
        home_mover=spawner.home_mover(engine) if spawner.homes_on_nodes else None,
        groups_of=functools.partial(_groups_of, app),
    )
    _end_previous_line(app, broker)
    parker = _parker(broker, parks, app.log)
    record = JobRecord(spawner.usage_ledger_file)
    started = time.perf_counter()
    containers = await _blocking(broker, lambda: engine.containers(broker.look_past))
    parked: dict[int, tuple[int, ...]] = {}
    if parker is not None:
        parked = await _blocking(broker, functools.partial(parker.read_back, containers))
    known = _known_servers(app.db, {(j.user_id, j.server) for j in record.unfinished()}, parked)
    broker.recover(containers, known, await _stopped_meanwhile(broker))
    if parker is not None:
        parker.adopted(parked)
    app.log.info(
        "gpuspawner: books rebuilt from %d container(s) in %.3f s",
        len(containers),
        time.perf_counter() - started,
    )
    broker.install()
    monitor = Monitor(
        broker,
        app.log,
        spawner.monitor_interval,
        spawner.avoid_gpus_with_foreign_processes,
        Busyness(spawner.gpu_busy_threshold, spawner.gpu_processes_count_as_busy),
        spawner.usage_retention_days * 24 * 3600,
        owners=site.source.process_owners,
    )
    if parker is not None:
        monitor.listeners.append(parker.observed)
        broker.on_stop(parker.close)
    jobs = _serve_jobs(app, broker, record, parker)
    monitor.listeners.append(Reclaimer(app, broker, app.log, parker, spawner.park_after))
    monitor.listeners.append(lambda observation: _jobs_tick(jobs, broker))
    monitor.listeners.append(metrics.UsageCounters(broker))
    monitor.listeners.append(metrics.BookingCounters(broker))
    monitor.listeners.append(metrics.count_engine_errors)
    monitor.start()
    broker.line.limits_of = functools.partial(_limits_of, app, broker)
    _close_at_shutdown(app, broker, jobs)
    not_slow = slow_starts.install(app.log, broker.line)
    broker.on_stop(lambda: app.log.removeFilter(not_slow))
    not_faults = RefusalsAreNotFaults()
    app.log.addFilter(not_faults)
    broker.on_stop(lambda: app.log.removeFilter(not_faults))
    metrics.register_once()
    pages.install(app)
    lease_api.install(app)
    calendar_api.install(app)
    homes_api.install(app)
    jobs_api.install(app)
    shown = broker.calendar.states(broker.pool)  # drained GPUs are not free
    app.log.info(
        "gpuspawner: %d GPU(s) in the pool (%s), %d free, %d drained",
        len(site.gpus),
        tally(site.units),
        list(shown.values()).count(DeviceState.FREE),
        len(broker.calendar.drained()),
    )
    return broker


Parking = tuple[HostOf, int, float]  # where driver calls are made, host-memory cap, turn


def _parker(broker: Broker, parks: Parking | None, log: Any) -> Parker | None:
    if parks is None:
        return None
    hosts, limit, turn_quantum = parks
    on_swarm = broker.site.source.on_nodes() is not None
    log.info(
        "gpuspawner: jobs give way by parking (%s, up to %d GiB of host memory%s)",
        "by each node's agent" if on_swarm else "on this host",
        gib(limit),
        " on each node" if on_swarm else "",
    )
    return Parker(broker, hosts, limit, log, turn_quantum)


def _parking(spawner: Any, site: GPUSite) -> Parking | None:
    """Parking's hosts, host-memory cap and turn quantum, checked (GPUConfigError); None:
    parking off."""
    if not spawner.parking:
        in_turns = [p.slug for p in site.profiles if p.turns]
        if in_turns:
            raise GPUConfigError(
                f"c.GPUSpawner.profiles: {', '.join(in_turns)} shares GPUs in turns, which "
                "parks each person's work for the other's turn: set c.GPUSpawner.parking = "
                "True, or remove turns"
            )
        return None
    on_swarm = site.source.on_nodes() is not None
    hosts = site.source.checkpoint_hosts(spawner.checkpoint_driver)
    return hosts, memory_limit(spawner.park_memory_limit, on_swarm), spawner.turn_quantum


def _serve_jobs(app: Any, broker: Broker, record: JobRecord, parker: Parker | None) -> JobBoard:
    """The jobs, read back and checked against Docker's books; they start once the hub
    runs (its proxy must route to them)."""

    def rules_of(user_id: int) -> tuple[UserLimits, JobRules] | None:
        limits = _limits_of(app, broker, user_id)
        if limits is None:
            return None
        groups = {g.name for g in app.users[user_id].groups}
        return limits, job_rules(broker.site.limits, groups)

    def budget_refusal(user_id: int, limits: UserLimits) -> str | None:
        refusal = budgets.standing_of(broker, app.db, user_id, limits).refusal(broker.clock())
        return None if refusal is None else str(refusal)

    launcher = Launcher(app, app.log)
    jobs = JobBoard(broker, launcher, record, rules_of, budget_refusal, app.log, parker)
    jobs.recover()
    broker.serve_jobs(jobs)
    broker.on_stop(jobs.close)
    start = app.start

    @functools.wraps(start)
    async def start_then_open_jobs(*args: Any, **kwargs: Any) -> Any:
        started = await start(*args, **kwargs)
        jobs.open()
        return started

    app.start = start_then_open_jobs
    return jobs


async def _jobs_tick(jobs: JobBoard, broker: Broker) -> None:
    jobs.tick(broker.clock())


async def _stopped_meanwhile(broker: Broker) -> dict[int, float]:
    """When Docker says servers stopped since the ledger last saw them running (a minute's
    margin: a container may die just before the hub's last look), for the ledger's recovery."""
    since = broker.ledger.last_seen_open() if broker.ledger is not None else None
    if since is None:
        return {}
    stops = functools.partial(broker.engine.stopped_since, broker.hub, since - 60)
    return await _blocking(broker, stops)


async def _blocking(broker: Broker, call: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(broker.executor, call)


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


def _close_at_shutdown(app: Any, broker: Broker, jobs: JobBoard) -> None:
    """At shutdown JupyterHub runs `cleanup` (stopping servers, if `cleanup_servers`), then
    cancels every task, the waiting starts among them. Before either, the line stops
    starting anyone and keeps its written record, so the next hub tells each person; and
    the jobs' board starts nothing more, and puts back in line each job the cleanup stops."""
    cleanup = app.cleanup

    @functools.wraps(cleanup)
    async def close_then_clean_up(*args: Any, **kwargs: Any) -> Any:
        broker.close_line()
        jobs.close()
        return await cleanup(*args, **kwargs)

    app.cleanup = close_then_clean_up


def _limits_of(app: Any, broker: Broker, user_id: int) -> UserLimits | None:
    """A user's limits, by id (the waiting line's estimates read holders' culling clocks)."""
    try:
        user = app.users[user_id]
    except KeyError:
        return None
    return broker.limits_for(user)


def _groups_of(app: Any, user: str) -> frozenset[str]:
    """A user's groups, by name (a booking for a group serves its members)."""
    found = orm.User.find(app.db, user)
    return frozenset(g.name for g in found.groups) if found is not None else frozenset()


def _open_ledger(path: str) -> Ledger:
    """The usage ledger, once every table of its file is at this gpuspawner's version
    (upgraded, or refused as newer: records.sqlite) before the hub serves."""
    try:
        for record in (LineRecord, JobRecord, CalendarRecord, HomeRecord):
            record(path).close()
        return Ledger(path)
    except (sqlite3.Error, OSError) as error:
        raise GPUConfigError(
            f"c.GPUSpawner.usage_ledger_file {path!r} cannot be used ({error}): it must be an "
            "SQLite file the hub can write, in a folder that exists"
        ) from None


def _known_servers(db: Any, jobs: set[tuple[int, str]], parked: Mapping[int, Any]) -> KnownServers:
    running = db.query(orm.Spawner).filter(orm.Spawner.server_id.isnot(None)).all()
    return KnownServers(
        ids=frozenset((s.id, s.user_id) for s in running),
        by_name={(s.user.name, s.name): (s.id, s.user_id) for s in running},
        jobs=frozenset(jobs),
        parked=frozenset(parked),
    )
