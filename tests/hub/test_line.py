"""The hub's waiting line, in-process: the broker's real pool, ledger and line on the hub's
event loop. Containers are the one stand-in (every container is already gone when asked);
tests/stack/test_queue_hub.py runs the same on a real hub and dockerd."""

import asyncio
import dataclasses
import logging
import sqlite3
from collections import Counter
from fractions import Fraction

import pytest
from brokers import a_broker
from prometheus_client import REGISTRY

from gpuspawner.config.settings import GPUSettings
from gpuspawner.core.limits import Limited, LimitExceeded
from gpuspawner.core.placement import NotEnoughGPUs
from gpuspawner.core.pool import Grant, Holder
from gpuspawner.core.units import Request, bare
from gpuspawner.core.usage import HOUR
from gpuspawner.hub.base.counters import WAIT_OUTCOMES
from gpuspawner.hub.line import status as line_status
from gpuspawner.hub.line.waiting import WaitEnded
from gpuspawner.records.ledger import Ledger
from gpuspawner.records.line import LineRecord

LOG = logging.getLogger("test")
LIMITS = {
    "vip": {"priority": 10, "max_wait": 60},
    "researchers": {"max_wait": 60, "max_gpus_per_user": 2},
    "students": {"max_wait": 60, "max_gpus_group": 1},
    "impatient": {"max_wait": 0.2},
    "solo": {"max_wait": 60, "max_waiting_per_user": 1},
}


@pytest.fixture
def broker(tmp_path):
    ledger = Ledger(tmp_path / "usage.sqlite")
    settings = GPUSettings(simulate_gpus=4, group_limits=LIMITS)
    broker = a_broker(settings, ledger=ledger, reserve_after=600)
    yield broker
    broker.executor.shutdown(wait=False)
    broker.line.close()


def start(broker, key, group, gpus=1, user_id=None, request=None, server=""):
    """A GPU start as GPUSpawner makes it, as a task: it holds GPUs or waits in line."""
    user_id = key if user_id is None else user_id
    holder = Holder(key, user_id, f"user{user_id}", server)
    limits = broker.site.limits.for_user({group} if group else set())
    request = request or Request(gpus=gpus)

    line = broker.line.take(holder, f"gpu-{gpus}", f"{gpus} GPU", request, limits)
    return asyncio.ensure_future(line)


async def settle():
    """Let every task that can run now run (no time passes on any clock that matters here)."""
    for _ in range(5):
        await asyncio.sleep(0)


async def fill(broker, n=4, group="researchers", first_key=100):
    tasks = [start(broker, first_key + i, group) for i in range(n)]
    return [await t for t in tasks]


def waiting_keys(broker):
    return [s.key for s in broker.line.standings()]


async def test_a_start_that_fits_starts_at_once(broker):
    grant = await start(broker, 1, "researchers", gpus=2)
    assert isinstance(grant, Grant) and len(grant.uuids) == 2
    assert waiting_keys(broker) == []


async def test_without_max_wait_a_full_pool_refuses_at_once_as_before(broker):
    await fill(broker)
    with pytest.raises(NotEnoughGPUs):
        await start(broker, 1, None)
    assert waiting_keys(broker) == []


async def test_a_confirmed_release_starts_the_next_in_line_in_that_step(broker):
    """No monitor runs here: only the release's own event can start the waiter."""
    held = await fill(broker)
    waiter = start(broker, 1, "researchers")
    await settle()
    assert not waiter.done() and waiting_keys(broker) == [1]
    broker.release_when_gone(held[2].key)
    grant = await asyncio.wait_for(waiter, 10)
    assert grant.uuids == held[2].uuids
    assert waiting_keys(broker) == [] and broker.pool.free_count() == 0


async def test_the_line_goes_by_priority_then_recent_use_then_arrival(broker):
    history = Ledger(broker.ledger.path)
    now = broker.clock()
    heavy = Grant(Holder(50, 2, "user2"), (bare("GPU-x"),), now - 30 * HOUR)
    history.opened(heavy, gpus=8)  # 8 GPUs for 20 hours, yesterday
    history.ended(50, now - 10 * HOUR)
    held = await fill(broker)
    tasks = [start(broker, key, group) for key, group in [(2, "researchers"), (3, "researchers")]]
    await settle()
    tasks.append(start(broker, 4, "vip"))
    await settle()
    assert waiting_keys(broker) == [4, 3, 2]  # vip first; then the one who used less
    assert [s.recent_gpu_hours > 100 for s in broker.line.standings()] == [False, False, True]
    for grant in held[:3]:
        broker.release_when_gone(grant.key)
    started = await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert [len(g.uuids) for g in started] == [1, 1, 1]


async def test_a_cancelled_waiter_leaves_at_once_and_holds_nothing(broker, tmp_path):
    held = await fill(broker)
    waiter, behind = start(broker, 1, "researchers"), start(broker, 2, "researchers")
    await settle()
    waiter.cancel()  # as JupyterHub does on DELETE of a pending server
    await settle()
    assert waiter.cancelled() and waiting_keys(broker) == [2]
    broker.release_when_gone(held[0].key)
    await asyncio.wait_for(behind, 10)
    assert broker.pool.grant_of(1) is None
    assert LineRecord(broker.ledger.path).take_all() == []  # nothing left to tell after a restart


async def test_a_waiter_whose_max_wait_passes_is_told_why(broker):
    await fill(broker)
    with pytest.raises(WaitEnded) as ended:
        await start(broker, 1, "impatient")
    assert ended.value.outcome == "max_wait"
    assert str(ended.value) == (
        "Your default server waited 0 s in line for 1 GPU, the longest it may wait (max_wait of "
        "group impatient), and no GPU came free for it (it was 1st in line). Nothing is held for "
        "it: start it again to join the line anew, or pick a profile with fewer GPUs."
    )
    assert waiting_keys(broker) == [] and broker.pool.grant_of(1) is None


async def test_limits_waiting_cannot_change_refuse_at_once(broker):
    await start(broker, 1, "researchers", gpus=2, user_id=7)
    await fill(broker, n=2)
    with pytest.raises(LimitExceeded) as refused:  # a third GPU for one researcher
        await start(broker, 2, "researchers", gpus=1, user_id=7)
    assert refused.value.key == "max_gpus_per_user"
    assert waiting_keys(broker) == []


async def test_one_user_waits_for_at_most_one_server_per_gpu_they_could_still_take(broker):
    """Each waiting start holds one of JupyterHub's concurrent_spawn_limit slots: unset,
    max_waiting_per_user is what the user could still take (researchers: 2 GPUs each)."""
    held = await fill(broker)
    first, second = (start(broker, k, "researchers", user_id=7, server=f"s{k}") for k in (1, 2))
    await settle()
    with pytest.raises(LimitExceeded) as refused:
        await start(broker, 3, "researchers", user_id=7, server="s3")
    assert str(refused.value) == (
        "You already wait in line for 2 servers (user7/s1, user7/s2); you may have at most 2 "
        "waiting at once (max_waiting_per_user, unset: 1 per GPU you could still take), so "
        "this start, which cannot begin now, is refused. Nothing is held for it: cancel one "
        "of those starts, or start this one again once one of them has begun."
    )
    assert refused.value.key == "max_waiting_per_user"
    assert waiting_keys(broker) == [1, 2] and broker.pool.grant_of(3) is None
    broker.release_when_gone(held[0].key)
    assert (await asyncio.wait_for(first, 10)).uuids == held[0].uuids
    # holding 1 of their 2 GPUs, user 7 may have 1 start waiting: the one still in line
    with pytest.raises(
        LimitExceeded, match=r"wait in line for 1 server \(user7/s2\); you may have at most 1"
    ):
        await start(broker, 4, "researchers", user_id=7, server="s4")
    assert waiting_keys(broker) == [2] and not second.done()


async def test_a_start_that_fits_now_is_never_refused_a_place(broker):
    await start(broker, 100, None)
    big = start(broker, 1, "solo", gpus=4, user_id=8, server="big")
    await settle()
    assert waiting_keys(broker) == [1]
    small = await start(broker, 2, "solo", gpus=1, user_id=8, server="small")  # fits now
    assert len(small.uuids) == 1
    with pytest.raises(LimitExceeded) as refused:  # would wait: no place left
        await start(broker, 3, "solo", gpus=3, user_id=8, server="three")
    assert (
        "(user8/big); you may have at most 1 waiting at once (max_waiting_per_user of "
        "group solo)" in str(refused.value)
    )
    assert waiting_keys(broker) == [1] and broker.pool.free_count() == 2 and not big.done()


async def test_a_start_bigger_than_its_groups_whole_quota_is_refused_at_once(broker):
    """Waiting would never change it: no group member can give back more than the quota."""
    with pytest.raises(LimitExceeded) as refused:
        await start(broker, 1, "students", gpus=2)
    assert str(refused.value).startswith(
        "This profile asks for 2 GPUs, but members of group students may hold at most 1 GPU"
    )
    assert waiting_keys(broker) == [] and broker.pool.free_count() == 4


async def test_a_start_over_its_groups_quota_waits_and_blocks_nobody(broker):
    broker.line.reserve_after = 0  # even a head that has waited reserves nothing for a quota
    first = await start(broker, 1, "students")
    second = start(broker, 2, "students")
    await settle()
    [standing] = broker.line.standings()
    assert standing.waiting_for == "quota" and not standing.kept_for
    assert "within the quota of group students (max_gpus_group)" in broker.line.status(2)
    await start(broker, 3, "researchers")  # free GPUs still go to whoever can use them
    broker.release_when_gone(first.key)
    assert len((await asyncio.wait_for(second, 10)).uuids) == 1


async def test_freed_gpus_gather_for_a_head_that_has_waited_reserve_after(broker):
    broker.line.reserve_after = 0
    held = await fill(broker)
    big = start(broker, 1, "researchers", gpus=2)
    await settle()
    small = start(broker, 2, "researchers")
    await settle()
    broker.release_when_gone(held[0].key)
    assert await asyncio.wait_for(broker.settled(held[0].key), 10)
    assert not small.done() and broker.pool.free_count() == 1  # kept for the 2-GPU head
    assert [s.kept_for for s in broker.line.standings()] == [True, False]
    assert "GPUs that free up are kept for you." in broker.line.status(1)
    broker.release_when_gone(held[1].key)
    assert len((await asyncio.wait_for(big, 10)).uuids) == 2
    small.cancel()


async def test_a_head_asking_more_than_the_healthy_gpus_keeps_nothing_for_itself(broker):
    """With one GPU broken, 4 GPUs cannot start until it heals: freed GPUs go to others."""
    broker.line.reserve_after = 0
    broker.pool.mark_unhealthy(broker.pool.gpus[3], "XID 79")
    held = await fill(broker, n=3)
    big = start(broker, 1, "vip", gpus=4)
    small = start(broker, 2, "researchers")
    await settle()
    head = broker.line.standings()[0]
    assert (head.key, head.kept_for) == (1, False)
    broker.release_when_gone(held[0].key)
    assert (await asyncio.wait_for(small, 10)).uuids == held[0].uuids
    assert not big.done()
    big.cancel()


async def test_a_reservation_never_idles_a_gpu_its_head_could_not_use():
    """The head waits for 2 H100s; a plain 1-GPU start behind it gets the L40S that frees."""
    host = [{"model": m, "memory": "80G"} for m in ("H100", "H100", "L40S", "L40S")]
    settings = GPUSettings(simulated_host=host, group_limits=LIMITS)
    broker = a_broker(settings)
    broker.line.reserve_after = 0
    held = await fill(broker)
    head = start(broker, 1, "vip", request=Request(gpus=2, gpu_model="H100"))
    plain = start(broker, 2, "researchers")
    await settle()
    assert [s.kept_for for s in broker.line.standings()] == [True, False]
    assert broker.line.status(2).startswith("Waiting for 1 GPU — you are 2nd in line")
    assert "GPUs that free up are kept for a start ahead of you" in broker.line.status(2)
    l40s = next(g for g in held if g.units[0].model == "L40S")
    broker.release_when_gone(l40s.key)
    assert (await asyncio.wait_for(plain, 10)).uuids == l40s.uuids
    h100 = next(g for g in held if g.units[0].model == "H100")
    broker.release_when_gone(h100.key)
    assert await asyncio.wait_for(broker.settled(h100.key), 10)
    assert not head.done() and broker.pool.free_count() == 1  # kept for the head
    head.cancel()
    broker.executor.shutdown(wait=False)


async def test_a_ledger_that_cannot_be_read_does_not_stop_the_line(broker):
    """Recent use orders the line; without it (a locked file) the line still moves."""

    def unreadable(now):
        raise sqlite3.OperationalError("database is locked")

    broker.line.recent_use = unreadable
    held = await fill(broker)
    waiters = [start(broker, key, "researchers") for key in (1, 2)]
    await settle()
    assert waiting_keys(broker) == [1, 2]  # by arrival, the one order left
    broker.release_when_gone(held[0].key)
    assert (await asyncio.wait_for(waiters[0], 10)).uuids == held[0].uuids
    waiters[1].cancel()


async def test_the_pending_page_says_where_one_stands_and_what_frees_up_when(broker):
    held = await fill(broker)
    runs_3h = {"max_age": Limited(3 * HOUR, "marathon")}
    marathon = dataclasses.replace(broker.site.limits.for_user(set()), durations=runs_3h)
    broker.line.limits_of = lambda user_id: marathon if user_id == held[0].holder.user_id else None
    start(broker, 1, "vip"), start(broker, 2, "researchers")
    await settle()
    status = broker.line.status(2)
    assert status.startswith("Waiting for 1 GPU — you are 2nd in line (group researchers). ")
    assert "1 GPU frees up when user100's server reaches its max_age at " in status
    assert status.endswith("at the most (max_wait of group researchers).")
    reserved = asyncio.Event()
    seen = []

    async def watch():
        async for text in line_status.watch(broker.line, 2, reserved):
            seen.append(text)

    watcher = asyncio.ensure_future(watch())
    await settle()
    broker.line.remove(1)  # the one ahead goes: the page moves up without a reload
    await settle()
    reserved.set()
    await asyncio.wait_for(watcher, 5)
    assert [t.split(" — ")[1][:21] for t in seen] == [
        "you are 2nd in line (",
        "you are 1st in line (",
    ]


async def test_an_admin_can_remove_an_entry_and_its_start_is_told(broker):
    await fill(broker)
    waiter = start(broker, 1, "researchers")
    await settle()
    assert broker.line.remove(1) and not broker.line.remove(1)
    with pytest.raises(WaitEnded) as ended:
        await waiter
    assert ended.value.outcome == "removed"
    assert str(ended.value).startswith("An admin removed the start of your default server from")


def waits_measured() -> Counter[str]:
    """gpuspawner_wait_duration_seconds' count by outcome, as /hub/metrics has it."""
    return Counter(
        {
            outcome: int(
                REGISTRY.get_sample_value(
                    "gpuspawner_wait_duration_seconds_count", {"outcome": outcome}
                )
                or 0
            )
            for outcome in WAIT_OUTCOMES
        }
    )


async def test_every_wait_is_measured_with_how_it_ended(broker):
    before = waits_measured()
    held = await fill(broker)
    cancelled, started = start(broker, 1, "researchers"), start(broker, 2, "researchers")
    await settle()
    cancelled.cancel()
    await settle()
    broker.release_when_gone(held[0].key)
    await asyncio.wait_for(started, 10)
    with pytest.raises(NotEnoughGPUs):
        await start(broker, 3, None)
    assert waits_measured() - before == Counter(started=5, cancelled=1, refused=1)


async def test_a_slice_waits_for_a_slice_and_is_told_so():
    """On a mixed host (an H100, an A100 cut in two 3g.40gb), a MIG start waits for a MIG
    instance: a whole GPU coming free does not start it, nor is it an estimate for it."""
    host = [
        {"model": "NVIDIA H100 80GB HBM3", "memory": "80G"},
        {"model": "NVIDIA A100-SXM4-80GB", "memory": "80G", "mig": ["3g.40gb"] * 2},
    ]
    settings = GPUSettings(simulated_host=host, group_limits=LIMITS)
    broker = a_broker(settings)
    slice_ = Request(mig_profile="3g.40gb")
    whole_gpu = await start(broker, 1, "researchers")
    slices = [await start(broker, k, "researchers", request=slice_) for k in (2, 3)]
    runs_1h = {"max_age": Limited(HOUR, "marathon")}
    marathon = dataclasses.replace(broker.site.limits.for_user(set()), durations=runs_1h)
    broker.line.limits_of = lambda user_id: marathon
    gpu_waiter = start(broker, 5, "researchers")  # ahead in line, but for a whole GPU
    await settle()
    waiter = start(broker, 4, "researchers", request=slice_)
    await settle()
    status = broker.line.status(4)
    assert status.startswith("Waiting for a MIG instance 3g.40gb — you are 1st in line")
    assert "1 MIG instance frees up when user2's server reaches its max_age" in status
    assert [s.asks_for for s in broker.line.standings()] == ["1 GPU", "a MIG instance 3g.40gb"]
    broker.release_when_gone(whole_gpu.key)
    assert (await asyncio.wait_for(gpu_waiter, 10)).uuids == whole_gpu.uuids
    assert not waiter.done()  # a whole GPU is no MIG instance
    broker.release_when_gone(slices[0].key)
    grant = await asyncio.wait_for(waiter, 10)
    assert grant.ids == slices[0].ids and grant.weight == Fraction(3, 7)
    broker.executor.shutdown(wait=False)


async def test_a_slice_waiting_long_keeps_slices_not_whole_gpus():
    """A MIG start that has waited reserve_after keeps MIG instances for itself; a whole-GPU
    start behind it still gets a free whole GPU, which the slice could never use."""
    host = [
        {"model": "NVIDIA H100 80GB HBM3", "memory": "80G", "count": 2},
        {"model": "NVIDIA A100-SXM4-80GB", "memory": "80G", "mig": ["3g.40gb"] * 2},
    ]
    settings = GPUSettings(simulated_host=host, group_limits=LIMITS)
    broker = a_broker(settings, reserve_after=0)
    slice_ = Request(mig_profile="3g.40gb")
    await start(broker, 1, "researchers")
    for key in (2, 3):
        await start(broker, key, "researchers", request=slice_)
    head = start(broker, 4, "researchers", request=slice_)
    await settle()
    assert [s.kept_for for s in broker.line.standings()] == [True]
    grant = await asyncio.wait_for(start(broker, 5, "researchers"), 5)
    assert grant.units[0].kind.value == "gpu" and not head.done()
    head.cancel()
    broker.executor.shutdown(wait=False)


async def test_a_line_that_cannot_write_itself_down_still_works(broker):
    """A full disk costs the notice after a restart, never a start: the line goes on."""
    broker.line.record.close()  # every write now fails with sqlite3.ProgrammingError
    held = await fill(broker)
    waiter = start(broker, 1, "researchers")
    await settle()
    assert waiting_keys(broker) == [1]
    broker.release_when_gone(held[0].key)
    assert (await asyncio.wait_for(waiter, 10)).uuids == held[0].uuids
    assert waiting_keys(broker) == []
    broker.line.record = None  # closed already: nothing for the fixture to close


async def test_a_change_while_the_page_is_being_told_is_not_missed(broker):
    await fill(broker)
    start(broker, 1, "vip"), start(broker, 2, "researchers")
    await settle()
    reserved, seen = asyncio.Event(), []
    watching = line_status.watch(broker.line, 2, reserved)
    seen.append(await anext(watching))  # the page has its first status, and is sending it
    broker.line.remove(1)  # the line moves before the page asks again
    seen.append(await asyncio.wait_for(anext(watching), 1))
    assert [t.split(" — ")[1][:20] for t in seen] == [
        "you are 2nd in line ",
        "you are 1st in line ",
    ]
    reserved.set()


async def test_at_shutdown_the_line_starts_nobody_and_keeps_its_record(broker):
    """JupyterHub's shutdown stops servers (cleanup_servers) and then cancels every task: a
    GPU freed then must not start a waiter, and the record must outlive the cancel."""
    held = await fill(broker)
    waiter = start(broker, 1, "researchers")
    await settle()
    broker.line.shut_down()
    broker.release_when_gone(held[0].key)
    assert await asyncio.wait_for(broker.settled(held[0].key), 10)
    assert not waiter.done() and broker.pool.free_count() == 1
    waiter.cancel()
    await settle()
    [kept] = LineRecord(broker.ledger.path).take_all()
    assert kept.spawner_id == 1 and kept.asks_for == "1 GPU"
