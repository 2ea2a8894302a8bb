"""Prometheus' GPU-seconds held and busy by group, counted from the monitor's ticks."""

from brokers import a_broker
from prometheus_client import REGISTRY

from gpuspawner.config.settings import GPUSettings
from gpuspawner.core.pool import Holder
from gpuspawner.core.units import Request
from gpuspawner.hub.watch.metrics import UsageCounters
from gpuspawner.hub.watch.monitor import Observation


def counted(kind: str, group: str) -> float:
    value = REGISTRY.get_sample_value(f"gpuspawner_gpu_seconds_{kind}_total", {"group": group})
    return value or 0.0


def counting(**settings):
    """A broker on simulated GPUs with a clock the test moves, and its counters."""
    clock = [1000.0]
    broker = a_broker(GPUSettings(**settings), clock=lambda: clock[0])
    return clock, broker, UsageCounters(broker)


def test_each_tick_adds_the_gpu_seconds_held_and_the_busy_ones_by_quota_group():
    clock, broker, counters = counting(simulate_gpus=4)
    before = {(k, g): counted(k, g) for k in ("held", "busy") for g in ("class-a", "(none)")}
    ann = broker.take_now(Holder(1, 10, "ann"), 2, admit=lambda *_: "class-a")
    bob = broker.take_now(Holder(2, 11, "bob"), 1)
    broker.take_now(Holder(3, 12, "cid"), 0)  # CPU only: nothing
    clock[0] = 1010.0
    counters(Observation({}, [], busy={ann.key: True, bob.key: None}))
    clock[0] = 1020.0
    counters(Observation({}, [], busy={ann.key: False, bob.key: True}))

    def delta(kind: str, group: str) -> float:
        return counted(kind, group) - before[(kind, group)]

    assert delta("held", "class-a") == 40  # 2 GPUs × 20 s
    assert delta("busy", "class-a") == 20  # busy in the first tick only
    assert delta("held", "(none)") == 20 and delta("busy", "(none)") == 10


def test_a_shared_slot_counts_its_share_of_a_gpu():
    """GPU-seconds are GPU-equivalents × seconds: a slot of a GPU shared by 4 counts 1/4."""
    clock, broker, counters = counting(simulate_gpus=1, shared_gpus={0: 4})
    before = counted("held", "slots")
    slot = broker.take_now(Holder(1, 10, "ann"), Request(shared=True), admit=lambda *_: "slots")
    clock[0] = 1020.0
    counters(Observation({}, [], busy={slot.key: True}))
    assert counted("held", "slots") - before == 5


def test_a_server_restarted_between_two_ticks_counts_only_what_it_held():
    clock, broker, counters = counting(simulate_gpus=1)
    before = counted("held", "restarts")
    ann = Holder(1, 10, "ann")
    first = broker.take_now(ann, 1, admit=lambda *_: "restarts")
    clock[0] = 1010.0
    counters(Observation({}, [], busy={}))  # 10 s held
    broker.pool.release(first.key)
    clock[0] = 1016.0
    broker.take_now(ann, 1, admit=lambda *_: "restarts")  # the same server again
    clock[0] = 1020.0
    counters(Observation({}, [], busy={}))  # 4 s of the new grant; nothing was held for 6 s
    assert counted("held", "restarts") - before == 14
