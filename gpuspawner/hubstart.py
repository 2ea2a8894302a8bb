"""Hub start-up: check the GPU config and rebuild the pool before the hub serves anyone.

JupyterHub has no start-up hook for spawners, and it imports the spawner
while it constructs itself, before its config is read. So the one place
with the whole config, before any spawn is served, is the hub's own
`init_spawners` step: wrapped here once, and doing nothing in a hub that
uses another spawner.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from jupyterhub import orm
from traitlets import TraitError

from . import containers, handlers, hubgpus, metrics
from .culling import Busyness
from .devices import NoGPUSourceError, describe
from .monitor import Monitor
from .reclaim import Reclaimer


def prepare_hub(app: Any) -> None:
    """Check the config, rebuild the pool from Docker, start the monitor, add the GPU pages.

    A config error stops the hub with one line that says what to fix.
    """
    try:
        spawner = app.spawner_class.from_config(app.config)
        hub = hubgpus.current(spawner)
    except (ValueError, TraitError, NoGPUSourceError) as error:
        app.log.critical("gpuspawner: %s", error)
        app.exit(1)
    started = time.perf_counter()
    known = {
        (orm_spawner.user.name, orm_spawner.name)
        for orm_spawner in app.db.query(orm.Spawner).filter(orm.Spawner.server_id.isnot(None))
    }
    running = containers.running_gpu_containers(spawner.client)
    hub.recover(running, known, app.log)
    app.log.info(
        "gpuspawner: pool rebuilt from %d running GPU container(s) in %.3f s",
        len(running),
        time.perf_counter() - started,
    )
    monitor = Monitor(
        hub,
        spawner.client,
        app.log,
        spawner.monitor_interval,
        spawner.avoid_gpus_with_foreign_processes,
    )
    busyness = Busyness(spawner.gpu_busy_threshold, spawner.gpu_processes_count_as_busy)
    reclaimer = Reclaimer(app, hub, busyness, app.log)
    monitor.listeners.append(reclaimer)
    monitor.start()
    metrics.register(metrics.PoolCollector(hub, reclaimer.idle.idle_since.get, time.time))
    handlers.install(app)
    app.log.info(
        "gpuspawner: %d GPU(s) in the pool (%s), %d free",
        len(hub.gpus),
        describe(hub.gpus),
        hub.pool.free_count(),
    )


def run_at_hub_start(spawner_class: type) -> None:
    """Have a hub whose spawner is a `spawner_class` call `prepare_hub` before its spawners."""
    from jupyterhub.app import JupyterHub

    original = JupyterHub.init_spawners
    if getattr(original, "gpuspawner", False):
        return

    @functools.wraps(original)
    async def init_spawners(app: Any) -> Any:
        configured = app.spawner_class
        if isinstance(configured, type) and issubclass(configured, spawner_class):
            prepare_hub(app)
        return await original(app)

    init_spawners.gpuspawner = True  # type: ignore[attr-defined]
    JupyterHub.init_spawners = init_spawners  # type: ignore[method-assign]
