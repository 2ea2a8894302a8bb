"""The hub's parts, built from the admin's config: the broker and what runs beside it (the
monitor, parking, the jobs' board, the reclaimer).

`configure` reads and checks the config; `build_parts` builds every part from it, each
given what it needs in its constructor, so nothing is set on a part afterwards and a test
builds them all without a hub; `recover` reads the books back from Docker. Only `attach`
touches JupyterHub itself: the parts see the hub through the application object they are
given (its users, database and proxy, as JupyterHub's own handlers use them).
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jupyterhub import orm

from ..config.parking import memory_limit
from ..config.site import GPUSite, check_container_settings, check_overrides
from ..core.culling import Busyness
from ..core.errors import GPUConfigError
from ..core.job_rules import JobRules, job_rules
from ..core.limits import UserLimits
from ..core.words import gib
from ..devices.checkpoint import HostOf
from ..engine.base import Engine
from ..records.calendar import CalendarRecord
from ..records.homes import HomeRecord
from ..records.jobs import JobRecord
from ..records.ledger import Ledger
from ..records.line import LineRecord
from .books import budgets
from .books.broker import Broker
from .books.recovery import KnownServers
from .jobs.board import JobBoard
from .jobs.launch import Launcher
from .reclaim.parking import Parker
from .reclaim.reclaimer import Reclaimer
from .watch import metrics
from .watch.monitor import Monitor

Parking = tuple[HostOf, int, float]  # where driver calls are made, host-memory cap, turn


@dataclass(frozen=True)
class Configured:
    """The admin's config, read and checked: the spawner's settings, the engine, the site."""

    spawner: Any  # a GPUServer configured as the hub's spawners are: the settings
    engine: Engine
    site: GPUSite
    ledger: Ledger
    parking: Parking | None


@dataclass(frozen=True)
class Parts:
    broker: Broker
    monitor: Monitor
    jobs: JobBoard
    reclaimer: Reclaimer
    parker: Parker | None
    record: JobRecord  # the jobs written down (its unfinished jobs' servers are known)


def configure(config: Any, spawner_class: Any) -> Configured:
    """The config, checked: GPUConfigError (or TraitError) says what to fix."""
    spawner = spawner_class.from_config(config)
    check_container_settings(spawner, spawner.group_overrides)
    check_overrides(lambda: spawner_class.from_config(config), spawner.group_overrides)
    spawner.check_storage()
    engine = spawner.make_engine()
    site = GPUSite.from_config(spawner, spawner.make_gpu_source(engine))
    ledger = open_ledger(spawner.usage_ledger_file)
    return Configured(spawner, engine, site, ledger, _parking(spawner, site))


def build_parts(configured: Configured, app: Any) -> Parts:
    """Every part, wired through its constructor. `app`: the JupyterHub application the
    reclaimer stops servers through and the launcher starts jobs' servers through (its
    `log`, `users`, `db` and `proxy`); nothing of it is read here."""
    spawner, engine, site, log = configured.spawner, configured.engine, configured.site, app.log

    def limits_of(user_id: int) -> UserLimits | None:
        """A user's limits, by id (the line's estimates read holders' culling clocks)."""
        try:
            user = app.users[user_id]
        except KeyError:
            return None
        return broker.limits_for(user)  # (called only once the broker below exists)

    broker = Broker(
        site,
        engine,
        spawner.prefix,
        log,
        ignore_containers=spawner.ignore_gpu_containers,
        ledger=configured.ledger,
        reserve_after=spawner.line_reserve_after,
        half_life=spawner.usage_half_life_days * 24 * 3600,
        limits_of=limits_of,
        calendar=CalendarRecord(spawner.usage_ledger_file),
        homes=HomeRecord(spawner.usage_ledger_file) if spawner.homes_on_nodes else None,
        home_mover=spawner.home_mover(engine) if spawner.homes_on_nodes else None,
        groups_of=functools.partial(_groups_of, app),
    )
    parker = _parker(broker, configured.parking, log)
    record = JobRecord(spawner.usage_ledger_file)

    def rules_of(user_id: int) -> tuple[UserLimits, JobRules] | None:
        limits = limits_of(user_id)
        if limits is None:
            return None
        groups = {g.name for g in app.users[user_id].groups}
        return limits, job_rules(broker.site.limits, groups)

    def budget_refusal(user_id: int, limits: UserLimits) -> str | None:
        refusal = budgets.standing_of(broker, app.db, user_id, limits).refusal(broker.clock())
        return None if refusal is None else str(refusal)

    jobs = JobBoard(broker, Launcher(app, log), record, rules_of, budget_refusal, log, parker)
    reclaimer = Reclaimer(app, broker, log, parker, spawner.park_after)

    async def jobs_tick(observation: Any) -> None:
        jobs.tick(broker.clock())

    monitor = Monitor(
        broker,
        log,
        spawner.monitor_interval,
        spawner.avoid_gpus_with_foreign_processes,
        Busyness(spawner.gpu_busy_threshold, spawner.gpu_processes_count_as_busy),
        spawner.usage_retention_days * 24 * 3600,
        listeners=[
            *([parker.observed] if parker is not None else []),
            reclaimer,
            jobs_tick,
            metrics.UsageCounters(broker),
            metrics.BookingCounters(broker),
            metrics.count_engine_errors,
        ],
        owners=site.source.process_owners,
    )
    return Parts(broker, monitor, jobs, reclaimer, parker, record)


async def recover(parts: Parts, db: Any) -> int:
    """The books read back from Docker, parked work from the driver, then the jobs checked
    against them; the number of containers read."""
    broker, parker = parts.broker, parts.parker
    containers = await _blocking(broker, lambda: broker.engine.containers(broker.look_past))
    parked: dict[int, tuple[int, ...]] = {}
    if parker is not None:
        parked = await _blocking(broker, functools.partial(parker.read_back, containers))
    jobs = {(j.user_id, j.server) for j in parts.record.unfinished()}
    broker.recover(containers, _known_servers(db, jobs, parked), await _stopped_meanwhile(broker))
    if parker is not None:
        parker.adopted(parked)
    return len(containers)


def start(parts: Parts) -> None:
    """The jobs read back, the monitor ticking, the gauges served: the parts run (the jobs
    start waiting ones only once the hub serves: `JobBoard.open`)."""
    broker = parts.broker
    if parts.parker is not None:
        broker.on_stop(parts.parker.close)
    parts.jobs.recover()
    broker.serve_jobs(parts.jobs)  # from now on the jobs hear of the line and of releases
    broker.on_stop(parts.jobs.close)
    parts.monitor.start()
    metrics.serve(broker)


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


def _groups_of(app: Any, user: str) -> frozenset[str]:
    """A user's groups, by name (a booking for a group serves its members)."""
    found = orm.User.find(app.db, user)
    return frozenset(g.name for g in found.groups) if found is not None else frozenset()


def open_ledger(path: str) -> Ledger:
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
    """The servers the database says run, read in one query: reading each one's user after
    took 4.8 s at 1,000 (a query per server)."""
    running = (
        db.query(orm.Spawner.id, orm.Spawner.user_id, orm.User.name, orm.Spawner.name)
        .join(orm.User, orm.Spawner.user_id == orm.User.id)
        .filter(orm.Spawner.server_id.isnot(None))
        .all()
    )
    return KnownServers(
        ids=frozenset((spawner, user) for spawner, user, _, _ in running),
        by_name={(name, server): (spawner, user) for spawner, user, name, server in running},
        jobs=frozenset(jobs),
        parked=frozenset(parked),
    )
