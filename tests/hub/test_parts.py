"""The hub's parts are a plain function of the config: built, wired through their
constructors and read back from Docker without a hub (`hub/parts.py`)."""

from types import SimpleNamespace

import pytest
from doubles import GoneEngine
from jupyterhub import orm
from traitlets.config import Config

from gpuspawner.core.errors import GPUConfigError
from gpuspawner.hub.engines.docker import GPUSpawner
from gpuspawner.hub.parts import Configured, build_parts, open_ledger, recover, start
from gpuspawner.hub.reclaim.reclaimer import Reclaimer
from gpuspawner.hub.watch import metrics


def configured(tmp_path, **settings) -> Configured:
    """The config as `parts.configure` reads it, on an engine with nothing running."""
    from gpuspawner.config.site import GPUSite
    from gpuspawner.hub.parts import _parking

    c = Config()
    c.GPUSpawner.simulate_gpus = 2
    c.GPUSpawner.usage_ledger_file = str(tmp_path / "usage.sqlite")
    c.GPUSpawner.update(settings)
    spawner = GPUSpawner.from_config(c)
    site = GPUSite.from_config(spawner, None)
    ledger = open_ledger(spawner.usage_ledger_file)
    return Configured(spawner, GoneEngine(), site, ledger, _parking(spawner, site))


def an_app(**users) -> SimpleNamespace:
    """What the parts are given of a hub: its log, its users by id, its database."""
    import logging

    return SimpleNamespace(
        log=logging.getLogger("test"), users=users, db=orm.new_session_factory("sqlite://")()
    )


ANN = SimpleNamespace(name="ann", admin=False, groups=[])


async def test_every_part_is_built_from_the_config_and_wired_to_the_one_broker(tmp_path):
    parts = build_parts(configured(tmp_path, monitor_interval=7), an_app(**{"7": ANN}))
    broker = parts.broker
    assert len(broker.site.gpus) == 2
    assert parts.monitor.broker is broker and parts.monitor.interval_seconds == 7
    assert parts.jobs.broker is broker and parts.reclaimer.broker is broker
    assert parts.parker is None  # parking is off unless the config turns it on
    assert [type(x) for x in parts.monitor.listeners][:1] == [Reclaimer]
    assert metrics.count_engine_errors in parts.monitor.listeners
    await broker.shutdown()


async def test_the_lines_limits_come_from_the_hubs_users_by_id(tmp_path):
    app = an_app()
    app.users = {7: ANN}
    parts = build_parts(configured(tmp_path), app)
    assert parts.broker.line.limits_of(7) == parts.broker.limits_for(ANN)
    assert parts.broker.line.limits_of(8) is None  # a user deleted meanwhile
    await parts.broker.shutdown()


async def test_the_parts_read_back_start_and_stop_twice_in_one_process(tmp_path):
    for _ in range(2):  # the gauges are served while a broker runs, and no longer after
        app = an_app()
        parts = build_parts(configured(tmp_path), app)
        assert await recover(parts, app.db) == 0
        start(parts)
        assert parts.broker.jobs is parts.jobs
        await parts.broker.shutdown()


def test_parking_off_with_turns_is_a_config_error(tmp_path):
    profile = {"slug": "turns", "display_name": "In turns", "gpus": 1, "turns": True}
    with pytest.raises(GPUConfigError, match=r"set c\.GPUSpawner\.parking = True"):
        configured(tmp_path, profiles=[profile])


def test_the_servers_the_database_says_run_are_known_by_id_and_by_name():
    """What the rebuild adopts (a named server too); a stopped server is not known."""
    from gpuspawner.hub.parts import _known_servers

    db = an_app().db
    for name, servers in {"ann": ["", "train"], "bob": [""]}.items():
        user = orm.User(name=name)
        db.add(user)
        db.flush()
        for server in servers:
            running = orm.Server() if (name, server) != ("bob", "") else None
            db.add_all([running] if running else [])
            db.flush()
            db.add(orm.Spawner(user=user, name=server, server=running))
    db.commit()
    spawners = {(s.user.name, s.name): (s.id, s.user_id) for s in db.query(orm.Spawner)}
    known = _known_servers(db, {(1, "train")}, {})
    running = [spawners["ann", ""], spawners["ann", "train"]]
    assert known.by_name == {("ann", ""): running[0], ("ann", "train"): running[1]}
    assert known.ids == frozenset(running)
    assert known.jobs == {(1, "train")}
