"""Culling stops beside the monitor's ticks: on the server they were judged on, never on one
that started since, and with a fresh idle clock for every new grant."""

import asyncio
import logging
import sqlite3
from types import SimpleNamespace

from brokers import HUB, a_broker

from gpuspawner.config.settings import GPUSettings
from gpuspawner.core.pool import DeviceState, Grant, Holder
from gpuspawner.engine import docker as engine
from gpuspawner.hub.books.broker import Broker
from gpuspawner.hub.reclaim.reclaimer import Reclaimer
from gpuspawner.hub.watch.monitor import Monitor, Observation
from gpuspawner.records.ledger import Ledger

LOG = logging.getLogger("test")
ANN = Holder(1, 10, "ann")
HOUR = 3600.0


def broker_at(now: list[float], **limits) -> Broker:
    return a_broker(GPUSettings(simulate_gpus=2, default_limits=limits), clock=lambda: now[0])


def running(*grants: Grant) -> Observation:
    """A tick at which Docker lists these servers' containers running."""
    return Observation({}, [container(grant) for grant in grants])


def container(grant: Grant, running: bool = True) -> object:
    return engine.seen(
        {
            "Id": f"c{grant.key}",
            "Name": f"/jupyter-{grant.holder.user}",
            "Config": {"Labels": engine.labels(grant, HUB), "Image": "notebook"},
            "State": {"Running": running},
            "HostConfig": {"DeviceRequests": engine.device_requests(grant.uuids)},
        }
    )


class Hub:
    """JupyterHub as the reclaimer sees it: users, their spawners, and stops it can hold."""

    def __init__(self):
        self.stops, self.release = [], asyncio.Event()
        self.polls = 0
        self.spawner = SimpleNamespace(
            ready=True, _log_name="ann", note_stop=lambda *a: None, poll_and_notify=self.poll
        )
        user = SimpleNamespace(
            id=ANN.user_id, name="ann", groups=[], admin=False, spawners={"": self.spawner}
        )
        user.stop = self.stop
        self.users = {ANN.user_id: user}
        self.proxy = SimpleNamespace(delete_user=self.nothing)

    async def nothing(self, *args):
        return None

    async def poll(self):
        self.polls += 1
        await self.release.wait()

    async def stop(self, server):
        self.stops.append(server)
        await self.release.wait()


async def test_a_stop_runs_beside_the_ticks_and_only_once():
    now = [1000.0]
    broker = broker_at(now, max_age=HOUR)
    hub = Hub()
    reclaimer = Reclaimer(hub, broker, LOG)
    grant = broker.take_now(ANN, 1)
    now[0] += 2 * HOUR
    await asyncio.wait_for(reclaimer(running(grant)), 1)  # returns with the stop running
    await asyncio.sleep(0)
    await asyncio.wait_for(reclaimer(running(grant)), 1)  # the next tick: no second stop
    await asyncio.sleep(0)
    assert hub.stops == [""]
    hub.release.set()
    await asyncio.sleep(0)
    broker.executor.shutdown(wait=False)


async def test_a_server_that_started_again_since_the_verdict_is_not_stopped():
    now = [1000.0]
    broker = broker_at(now, max_age=HOUR)
    hub = Hub()
    hub.release.set()
    reclaimer = Reclaimer(hub, broker, LOG)
    old = broker.take_now(ANN, 1)
    now[0] += 2 * HOUR
    await reclaimer(running(old))  # judged over its max_age; its stop is on its way
    broker.pool.release(old.key)  # meanwhile it stopped, and started again
    broker.take_now(ANN, 1)
    await asyncio.sleep(0)
    assert hub.stops == []
    broker.executor.shutdown(wait=False)


async def test_a_server_whose_container_exited_or_is_gone_is_asked_about_once_at_once():
    """Docker lists the container stopped, or no longer at all (removed as it exited):
    JupyterHub is asked about the server on this tick (its poll stops it), not at its
    next poll_interval, and not twice while the first question is under way."""
    for listed in (True, False):
        broker = broker_at([1000.0])
        hub = Hub()
        reclaimer = Reclaimer(hub, broker, LOG)
        grant = broker.take_now(ANN, 1)
        observation = Observation({}, [container(grant, running=False)] if listed else [])
        await reclaimer(observation)
        await asyncio.sleep(0)
        await reclaimer(observation)
        await asyncio.sleep(0)
        assert (hub.polls, hub.stops) == (1, [])
        hub.release.set()
        await asyncio.sleep(0)
        broker.executor.shutdown(wait=False)


async def test_a_server_is_not_asked_about_when_docker_did_not_answer_or_it_is_not_ready():
    broker = broker_at([1000.0])
    hub = Hub()
    reclaimer = Reclaimer(hub, broker, LOG)
    broker.take_now(ANN, 1)
    await reclaimer(Observation({}, None))  # Docker did not answer: nothing is known
    hub.spawner.ready = False  # starting: its container may not exist yet
    await reclaimer(Observation({}, []))
    await asyncio.sleep(0)
    assert hub.polls == 0
    broker.executor.shutdown(wait=False)


def test_a_new_grant_of_the_same_server_starts_a_fresh_idle_clock():
    now = [1000.0]
    broker = broker_at(now)
    old = broker.take_now(ANN, 1)
    broker.note_busy({old.key: False}, now[0])  # idle since 1000
    assert broker.idle_since(old.key) == 1000.0
    broker.pool.release(old.key)  # stopped and started again between two ticks
    broker.take_now(ANN, 1)
    assert broker.idle_since(old.key) is None


class FullDisk(Ledger):
    def seen(self, *args):
        raise sqlite3.OperationalError("database or disk is full")


def test_a_ledger_that_fails_costs_the_tick_nothing_else(tmp_path):
    """A full disk under the ledger: GPUs used outside JupyterHub are still kept out."""
    broker = a_broker(gpus=2, ledger=FullDisk(str(tmp_path / "usage.sqlite")))
    outside = engine.seen(
        {
            "Id": "job",
            "Name": "/job",
            "Config": {"Labels": {}, "Image": "job"},
            "State": {"Running": True},
            "HostConfig": {"DeviceRequests": engine.device_requests([broker.pool.ids[0]])},
        }
    )
    Monitor(broker, LOG).apply(Observation({}, [outside]))
    assert broker.pool.states()[broker.pool.ids[0]] is DeviceState.EXTERNAL
