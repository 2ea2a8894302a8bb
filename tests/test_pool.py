import threading

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gpuspawner.pool import AlreadyHolding, DeviceState, Holder, NotEnoughGPUs, Pool, place

UUIDS = [f"GPU-{i}" for i in range(8)]


@pytest.mark.parametrize(
    ("free", "size", "count", "policy", "expected"),
    [
        # one GPU goes next to a busy one, keeping whole pairs free
        ({1, 2, 3, 4, 5, 6, 7}, 8, 1, "packed", [1]),
        ({0, 2, 3, 4, 5, 6, 7}, 8, 1, "packed", [0]),
        # ... and away from busy ones when spreading
        ({1, 2, 3, 4, 5, 6, 7}, 8, 1, "spread", [4]),
        # a pair comes from one aligned pair, in the most used quad when packing
        ({0, 1, 3, 4, 5, 6, 7}, 8, 2, "packed", [0, 1]),
        ({0, 1, 3, 4, 5, 6, 7}, 8, 2, "spread", [4, 5]),
        # three GPUs are served from one quad
        ({1, 2, 3, 4, 5, 6, 7}, 8, 3, "packed", [1, 2, 3]),
        ({1, 2, 3, 4, 5, 6, 7}, 8, 3, "spread", [4, 5, 6]),
        # no aligned block has room: any free GPUs will do
        ({1, 2, 5, 6}, 8, 4, "packed", [1, 2, 5, 6]),
        # pools that are not a power of two: the short last quad goes first,
        # so the whole quad 0-3 stays free for a 4-GPU server
        ({0, 1, 2, 3, 4, 5}, 6, 2, "packed", [4, 5]),
        ({0, 1, 2}, 3, 3, "packed", [0, 1, 2]),
        ({0, 1, 2, 3}, 4, 0, "packed", []),
    ],
)
def test_placement_table(free, size, count, policy, expected):
    assert place(free, size, count, policy) == expected


def test_placement_refuses_more_than_free():
    with pytest.raises(NotEnoughGPUs) as refused:
        place({0, 1}, 8, 3)
    assert (refused.value.requested, refused.value.free, refused.value.total) == (3, 2, 8)


def test_allocation_is_exclusive_and_release_returns_the_gpus():
    pool = Pool(UUIDS[:4])
    first = pool.allocate("ann", "", 2)
    second = pool.allocate("bob", "", 2)
    assert set(first.uuids).isdisjoint(second.uuids)
    with pytest.raises(NotEnoughGPUs):
        pool.allocate("cat", "", 1)
    pool.release(first.holder.key)
    third = pool.allocate("cat", "", 2)
    assert set(third.uuids) == set(first.uuids)


def test_release_is_idempotent():
    pool = Pool(UUIDS[:2])
    grant = pool.allocate("ann", "", 1)
    assert pool.release(grant.holder.key) == grant
    assert pool.release(grant.holder.key) is None
    assert pool.free_count() == 2


def test_a_refused_allocation_takes_nothing():
    pool = Pool(UUIDS[:2])
    with pytest.raises(NotEnoughGPUs):
        pool.allocate("ann", "", 3)

    def refuse(usage):
        raise PermissionError("over the limit")

    with pytest.raises(PermissionError):
        pool.allocate("ann", "", 1, admit=refuse)
    assert pool.free_count() == 2 and pool.grants() == []


def test_a_server_cannot_allocate_twice():
    pool = Pool(UUIDS[:4])
    pool.allocate("ann", "train", 1)
    with pytest.raises(AlreadyHolding):
        pool.allocate("ann", "train", 1)
    pool.allocate("ann", "other", 1)


def test_admission_decides_the_quota_group_charged():
    pool = Pool(UUIDS[:4])
    pool.allocate("ann", "", 2, admit=lambda usage: "students")
    pool.allocate("bob", "", 1, admit=lambda usage: None)
    usage = pool.usage()
    assert usage.by_group == {"students": 2}
    assert usage.by_user == {"ann": 2, "bob": 1}


def test_cpu_only_servers_hold_nothing():
    pool = Pool(UUIDS[:1])
    grant = pool.allocate("ann", "", 0)
    assert grant.uuids == () and pool.grants() == [] and pool.free_count() == 1


def test_unhealthy_and_external_gpus_are_not_handed_out():
    pool = Pool(UUIDS[:3])
    pool.mark_unhealthy("GPU-0", "XID 79: fallen off the bus")
    pool.set_external({"GPU-1": "container preprocess"})
    assert pool.allocate("ann", "", 1).uuids == ("GPU-2",)
    assert pool.states() == {
        "GPU-0": DeviceState.UNHEALTHY,
        "GPU-1": DeviceState.EXTERNAL,
        "GPU-2": DeviceState.ALLOCATED,
    }
    pool.mark_healthy("GPU-0")
    assert pool.allocate("bob", "", 1).uuids == ("GPU-0",)


def test_adopt_records_running_servers_and_refuses_conflicts():
    pool = Pool(UUIDS[:4])
    pool.adopt(Holder("ann", "", "students"), ["GPU-1", "GPU-0"], since=5.0)
    assert pool.grant_of("ann/").since == 5.0
    assert pool.usage().by_group == {"students": 2}
    with pytest.raises(AlreadyHolding):
        pool.adopt(Holder("bob"), ["GPU-1"])
    # adopting again (state and Docker agree) is harmless
    pool.adopt(Holder("ann", "", "students"), ["GPU-0", "GPU-1"])
    assert pool.free_count() == 2


def test_threads_never_share_a_gpu():
    pool = Pool(UUIDS)
    held: list[tuple[str, ...]] = []
    errors: list[BaseException] = []

    def churn(name: str) -> None:
        for i in range(200):
            try:
                grant = pool.allocate(name, str(i), 1 + i % 3)
            except NotEnoughGPUs:
                continue
            except BaseException as error:  # pragma: no cover - reported below
                errors.append(error)
                return
            held.append(grant.uuids)
            snapshot = [u for g in pool.grants() for u in g.uuids]
            if len(snapshot) != len(set(snapshot)):
                errors.append(AssertionError(f"shared GPU in {snapshot}"))
            pool.release(grant.holder.key)

    threads = [threading.Thread(target=churn, args=(f"user{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert held and pool.free_count() == len(UUIDS)


class PoolMachine(RuleBasedStateMachine):
    """Random allocate / release / adopt / fail sequences keep the books exact."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = Pool(UUIDS, policy="packed")
        self.expected: dict[str, set[str]] = {}
        self.unhealthy: set[str] = set()

    servers = st.sampled_from([f"u{i}/{s}" for i in range(4) for s in ("", "a", "b")])

    @rule(server=servers, count=st.integers(0, 9))
    def allocate(self, server: str, count: int) -> None:
        user, name = server.split("/")
        available = len(UUIDS) - len(
            self.unhealthy | {u for s in self.expected.values() for u in s}
        )
        try:
            grant = self.pool.allocate(user, name, count)
        except AlreadyHolding:
            assert server in self.expected
            return
        except NotEnoughGPUs:
            assert count > available
            return
        assert count <= available and server not in self.expected
        assert len(grant.uuids) == count
        if count:
            self.expected[server] = set(grant.uuids)

    @rule(server=servers)
    def release(self, server: str) -> None:
        self.pool.release(server)
        self.expected.pop(server, None)

    @rule(server=servers, failing=st.booleans())
    def spawn_that_may_fail(self, server: str, failing: bool) -> None:
        """A spawn whose container then fails to start gives everything back."""
        user, name = server.split("/")
        if server in self.expected:
            return
        try:
            grant = self.pool.allocate(user, name, 1)
        except NotEnoughGPUs:
            return
        if failing:
            self.pool.release(grant.holder.key)
        else:
            self.expected[server] = set(grant.uuids)

    @precondition(lambda self: self.expected)
    @rule(data=st.data())
    def hub_restart_adopts(self, data: st.DataObject) -> None:
        """A restarted hub adopts every running server: nothing changes hands."""
        restarted = Pool(UUIDS)
        for server, uuids in self.expected.items():
            user, name = server.split("/")
            restarted.adopt(Holder(user, name), sorted(uuids))
        self.pool = restarted
        for uuid in self.unhealthy:
            self.pool.mark_unhealthy(uuid, "test")

    @rule(index=st.integers(0, 7), healthy=st.booleans())
    def health_changes(self, index: int, healthy: bool) -> None:
        uuid = UUIDS[index]
        if healthy:
            self.pool.mark_healthy(uuid)
            self.unhealthy.discard(uuid)
        else:
            self.pool.mark_unhealthy(uuid, "test")
            self.unhealthy.add(uuid)

    @invariant()
    def books_match(self) -> None:
        grants = {g.holder.key: set(g.uuids) for g in self.pool.grants()}
        assert grants == self.expected
        held = [u for g in self.pool.grants() for u in g.uuids]
        assert len(held) == len(set(held)), "a GPU is held twice"
        states = self.pool.states()
        free = [u for u, s in states.items() if s is DeviceState.FREE]
        assert self.pool.free_count() == len(free)
        assert set(free) == set(UUIDS) - set(held) - self.unhealthy


TestPoolMachine = PoolMachine.TestCase
TestPoolMachine.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
