"""The broker's books from what Docker reports: recovery and the GPUs used outside the hub.

These take containers as `docker inspect` shows them (through the engine's own
reader); the broker's calls to Docker itself are tested in-process on the real
engine (tests/hub/test_inprocess.py) and on the real stack (tests/stack).
"""

import asyncio
import dataclasses
import logging

import pytest
from brokers import a_broker
from doubles import Removals

from gpuspawner.config.settings import GPUSettings
from gpuspawner.core.limits import Limited
from gpuspawner.core.placement import NotEnoughGPUs
from gpuspawner.core.pool import DeviceState, Grant, Holder
from gpuspawner.core.units import Request, bare
from gpuspawner.engine import docker as engine
from gpuspawner.hub.books.broker import Broker
from gpuspawner.hub.books.recovery import KnownServers
from gpuspawner.hub.books.refusals import Refused
from gpuspawner.records.ledger import Ledger

LOG = logging.getLogger("test")
HUB = "jupyter"


def broker_with(gpus: int = 4, ignore: tuple[str, ...] = ()) -> Broker:
    return a_broker(gpus=gpus, ignore_containers=ignore)


def ours(holder: Holder, uuids: tuple[str, ...], name: str, hub: str = HUB, **labels) -> object:
    grant = Grant(holder, tuple(map(bare, uuids)), 100.0)
    return engine.seen(
        {
            "Id": name,
            "Name": f"/{name}",
            "Config": {"Labels": {**engine.labels(grant, hub), **labels}, "Image": "notebook"},
            "State": {"Running": True},
            "HostConfig": {"DeviceRequests": engine.device_requests(uuids)},
        }
    )


def foreign(name: str, *device_ids: str, image: str = "job") -> object:
    return engine.seen(
        {
            "Id": name,
            "Name": f"/{name}",
            "Config": {"Labels": {}, "Image": image},
            "State": {"Running": True},
            "HostConfig": {"DeviceRequests": [{"Driver": "nvidia", "DeviceIDs": list(device_ids)}]},
        }
    )


ANN = Holder(1, 10, "ann")
BOB = Holder(2, 11, "bob", "train")


def known(*holders: Holder) -> KnownServers:
    return KnownServers(
        frozenset((h.spawner_id, h.user_id) for h in holders),
        {(h.user, h.server): (h.spawner_id, h.user_id) for h in holders},
    )


def test_recovery_adopts_known_servers_and_keeps_everything_else_out():
    broker = broker_with(4)
    u = broker.pool.ids
    running = [
        ours(ANN, (u[0], u[1]), "jupyter-ann"),
        ours(Holder(9, 19, "zed"), (u[2],), "other-zed", hub="other"),  # another hub's server
        foreign("preprocess", "3"),  # by index
    ]
    broker.recover(running, known(ANN))
    assert broker.pool.grant_of(ANN.spawner_id).uuids == (u[0], u[1])
    assert broker.pool.grant_of(9) is None
    assert broker.pool.states() == {
        u[0]: DeviceState.ALLOCATED,
        u[1]: DeviceState.ALLOCATED,
        u[2]: DeviceState.EXTERNAL,
        u[3]: DeviceState.EXTERNAL,
    }
    assert broker.pool.external_user(u[2]) == "container other-zed"


async def test_a_server_the_database_says_ended_is_removed_its_gpus_held_until_gone():
    """Its removal was never confirmed before the hub stopped: the new hub goes on with it."""
    engine_calls = Removals()
    broker = a_broker(gpus=2, engine=engine_calls)
    u = broker.pool.ids
    broker.recover([ours(ANN, (u[0],), "jupyter-ann")], known())
    [grant] = broker.pool.grants()
    assert grant.stopping and grant.holder == ANN
    assert broker.pool.states()[u[0]] is DeviceState.STOPPING
    broker.retry_removals()  # as each monitor tick does
    assert not await broker.settled(ANN.spawner_id)  # waits for that removal: not confirmed
    assert engine_calls.asked == [(HUB, ANN.spawner_id, ("jupyter-ann",))]
    assert broker.pool.states()[u[0]] is DeviceState.STOPPING  # Docker did not confirm it
    broker.executor.shutdown(wait=False)


async def test_a_stale_container_listed_first_never_takes_a_live_servers_gpu(caplog):
    """After a restart, a container of an ended server (stale, or forged by someone with
    access to Docker) on a GPU a running job holds: Docker lists it first, yet the job keeps
    its GPU, and the stale one is removed, holding nothing."""
    engine_calls = Removals()
    broker = a_broker(gpus=2, engine=engine_calls)
    u = broker.pool.ids
    job = Holder(3, 11, "bob", "job-7", job=True)
    stale = Holder(8, 11, "bob", "job-6")
    broker.recover(
        [ours(stale, (u[0],), "jupyter-bob--job-6"), ours(job, (u[0],), "job")], known(job)
    )
    assert broker.pool.grant_of(job.spawner_id).uuids == (u[0],)
    assert not broker.pool.grant_of(job.spawner_id).stopping
    assert broker.pool.grant_of(stale.spawner_id) is None
    assert "container jupyter-bob--job-6 runs, but JupyterHub says bob/job-6 ended" in caplog.text
    assert await asyncio.to_thread(engine_calls.was_asked.wait, 10)
    assert engine_calls.asked == [(HUB, stale.spawner_id, ("jupyter-bob--job-6",))]
    broker.note_containers([ours(stale, (u[0],), "jupyter-bob--job-6")], {})
    assert broker.pool.states()[u[0]] is DeviceState.ALLOCATED  # the job's, as before
    broker.executor.shutdown(wait=False)


def test_unreadable_labels_are_logged_and_their_gpus_kept_out(caplog):
    broker = broker_with(2)
    u = broker.pool.ids
    broken = ours(ANN, (u[0],), "jupyter-ann", **{"gpuspawner.since": "inf"})
    broker.recover([broken], known(ANN))
    assert broker.pool.grants() == []
    assert broker.pool.states()[u[0]] is DeviceState.EXTERNAL
    [line] = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
    assert "container jupyter-ann has unreadable labels (gpuspawner.since='inf' is not a time)" in (
        line
    )


def test_two_servers_claiming_one_gpu_leave_it_out_of_the_pool(caplog):
    broker = broker_with(2)
    u = broker.pool.ids
    broker.recover(
        [ours(ANN, (u[0],), "jupyter-ann"), ours(BOB, (u[0],), "jupyter-bob--train")],
        known(ANN, BOB),
    )
    assert broker.pool.grant_of(ANN.spawner_id).uuids == (u[0],)
    assert broker.pool.grant_of(BOB.spawner_id) is None
    assert broker.pool.free_count() == 1
    assert "container jupyter-bob--train not adopted: bob/train claims GPUs held by others" in (
        caplog.text
    )
    broker.pool.begin_release(ANN.spawner_id)
    broker.pool.release(ANN.spawner_id)  # ann's server goes; bob's container still has the GPU
    broker.note_containers([ours(BOB, (u[0],), "jupyter-bob--train")], {})
    assert broker.pool.states()[u[0]] is DeviceState.EXTERNAL


def test_containers_of_gpuspawner_0_1_are_matched_by_name():
    broker = broker_with(2)
    u = broker.pool.ids
    old = engine.seen(
        {
            "Id": "old",
            "Name": f"/{HUB}-ann",
            "Config": {"Labels": {"gpuspawner.user": "ann", "gpuspawner.server": ""}},
            "State": {"Running": True},
            "HostConfig": {"DeviceRequests": engine.device_requests([u[1]])},
        }
    )
    broker.recover([old], known(ANN))
    assert broker.pool.grant_of(ANN.spawner_id).uuids == (u[1],)


def test_gpus_come_back_when_the_outside_containers_go():
    broker = broker_with(2)
    u = broker.pool.ids
    broker.recover([foreign("job", u[0])], known())
    assert broker.pool.free_count() == 1
    broker.note_containers([], {})
    assert broker.pool.free_count() == 2


def test_a_container_holding_more_than_its_grant_keeps_the_extra_out():
    broker = broker_with(2)
    u = broker.pool.ids
    granted = broker.take_now(ANN, 1).uuids
    other = next(x for x in u if x not in granted)
    broker.note_containers([ours(ANN, (*granted, other), "jupyter-ann")], {})
    assert broker.pool.states()[other] is DeviceState.EXTERNAL


def test_monitoring_containers_the_admin_names_keep_nothing_out():
    broker = broker_with(2, ignore=("*/k8s/dcgm-exporter:*",))
    broker.note_containers(
        [foreign("dcgm", "all", image="registry.example/nvidia/k8s/dcgm-exporter:3.3.5")], {}
    )
    assert broker.pool.free_count() == 2
    broker.note_containers([foreign("train", "all")], {})
    assert broker.pool.free_count() == 0


def test_recovery_keeps_the_ledger_through_a_hub_crash(tmp_path):
    """An adopted grant goes on in its row, without the time away counted as busy; a grant
    whose container stopped meanwhile ends when Docker says it did."""
    clock = [1000.123456]
    path = tmp_path / "usage.sqlite"

    def hub() -> Broker:
        return a_broker(gpus=4, clock=lambda: clock[0], ledger=Ledger(path))

    def container(grant, name: str, **state) -> object:
        return engine.seen(
            {
                "Id": name,
                "Name": f"/{name}",
                "Config": {"Labels": engine.labels(grant, HUB)},
                "State": state,
                "HostConfig": {"DeviceRequests": engine.device_requests(grant.uuids)},
            }
        )

    before = hub()
    ann = before.take_now(ANN, 2)
    bob = before.take_now(BOB, 1)
    clock[0] += 60
    before.ledger.seen(clock[0], {ANN.spawner_id: True, BOB.spawner_id: True})  # then kill -9
    clock[0] += 540
    after = hub()
    stopped_at = "1970-01-01T00:20:00.000000001Z"  # 1200 s, as Docker writes it
    after.recover(
        [
            container(ann, "jupyter-ann", Running=True),
            container(bob, "jupyter-bob--train", Running=False, FinishedAt=stopped_at),
        ],
        known(ANN),
    )
    clock[0] += 10
    after.ledger.seen(clock[0], {ANN.spawner_id: True})
    records = after.ledger.records(since=0)
    by_user = {r.user: r for r in records}
    assert len(records) == 2
    assert by_user["ann"].end is None
    assert by_user["ann"].busy_seconds == pytest.approx(70)  # 60 + 10; not the 540 away
    assert by_user["bob"].end == 1200.0  # when Docker says its container stopped


async def test_one_call_takes_a_servers_gpus_or_says_in_words_why_not():
    profiles = [
        {"display_name": "CPU only", "slug": "cpu", "gpus": 0},
        {"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1},
        {"display_name": "2 GPUs", "slug": "gpu-2", "gpus": 2},
    ]
    broker = a_broker(GPUSettings(simulate_gpus=2, profiles=profiles))
    site = broker.site
    cpu, one, two = site.profiles
    anyone = site.limits.for_user(set())
    students = dataclasses.replace(anyone, max_gpus_per_server=Limited(1, "students"))
    assert (await broker.take(ANN, cpu, anyone)).units == ()  # CPU only: held nothing
    assert not broker.pool.grants()
    assert len((await broker.take(ANN, one, anyone)).units) == 1
    with pytest.raises(Refused) as over:
        await broker.take(BOB, two, students)
    assert (over.value.reason, over.value.status, over.value.counted) == ("limit", 403, True)
    assert "one server may hold at most 1 GPU (max_gpus_per_server of group students)" in str(
        over.value
    )
    with pytest.raises(Refused) as short:
        await broker.take(BOB, two, anyone)
    assert (short.value.reason, short.value.status) == ("capacity", 409)
    assert str(short.value).startswith("Not enough free GPUs: profile '2 GPUs' needs 2, 1 of 2")
    assert [g.holder for g in broker.pool.grants()] == [ANN]  # refusals took nothing


def test_a_job_that_could_not_give_a_parked_persons_gpu_back_at_once_is_not_lent_it():
    """A 2-GPU job (an NCCL program, which the driver cannot park) would make the person who
    comes back wait for its grace: the board asks without borrowing, and it waits."""
    broker = a_broker(gpus=2)
    person = broker.take_now(Holder(2, 20, "carol"), 1)
    broker.parked(person.key)
    nccl = Holder(3, 30, "bob", "job-1", job=True)
    with pytest.raises(NotEnoughGPUs):
        broker.take_now(nccl, Request(2), borrows=False)
    assert len(broker.take_now(nccl, Request(2)).units) == 2  # one that parks may borrow
