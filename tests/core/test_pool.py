import threading

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gpuspawner.core.placement import Topology
from gpuspawner.core.pool import AlreadyHolding, DeviceState, Holder, NotEnoughGPUs, Pool

UUIDS = [f"GPU-{i}" for i in range(8)]


def server(spawner_id: int, user_id: int | None = None, name: str = "") -> Holder:
    """Server `spawner_id` of user `user_id` (by default, a user of its own)."""
    user_id = spawner_id if user_id is None else user_id
    return Holder(spawner_id, user_id, f"user{user_id}", name)


def test_allocation_is_exclusive_and_release_returns_the_gpus():
    pool = Pool(UUIDS[:4])
    first = pool.allocate(server(1), 2)
    second = pool.allocate(server(2), 2)
    assert set(first.uuids).isdisjoint(second.uuids)
    with pytest.raises(NotEnoughGPUs):
        pool.allocate(server(3), 1)
    pool.release(first.key)
    third = pool.allocate(server(3), 2)
    assert set(third.uuids) == set(first.uuids)


def test_release_is_idempotent():
    pool = Pool(UUIDS[:2])
    grant = pool.allocate(server(1), 1)
    assert pool.release(grant.key) == grant
    assert pool.release(grant.key) is None
    assert pool.free_count() == 2


def test_a_stopping_server_keeps_its_gpus_until_released():
    pool = Pool(UUIDS[:2])
    grant = pool.allocate(server(1), 2)
    stopping = pool.begin_release(grant.key)
    assert stopping is not None and stopping.stopping and stopping.uuids == grant.uuids
    assert pool.free_count() == 0
    assert set(pool.states().values()) == {DeviceState.STOPPING}
    with pytest.raises(NotEnoughGPUs):
        pool.allocate(server(2), 1)
    # a stopping server no longer counts against its user's limits
    assert pool.usage().by_user == {}
    assert pool.begin_release(grant.key) == stopping  # asking twice changes nothing
    pool.release(grant.key)
    assert pool.free_count() == 2


def test_a_refused_allocation_takes_nothing():
    pool = Pool(UUIDS[:2])
    with pytest.raises(NotEnoughGPUs):
        pool.allocate(server(1), 3)

    def refuse(weight, user_id, usage):
        raise PermissionError("over the limit")

    with pytest.raises(PermissionError):
        pool.allocate(server(1), 1, admit=refuse)
    assert pool.free_count() == 2 and pool.grants() == []


def test_a_server_cannot_allocate_twice():
    pool = Pool(UUIDS[:4])
    pool.allocate(server(1, name="train"), 1)
    with pytest.raises(AlreadyHolding):
        pool.allocate(server(1, name="train"), 1)
    pool.allocate(server(2, user_id=1, name="other"), 1)


def test_usage_is_counted_by_user_id_so_a_rename_changes_nothing():
    pool = Pool(UUIDS[:4])
    pool.allocate(Holder(1, 7, "ann", "a"), 1, admit=lambda *_: "students")
    pool.allocate(Holder(2, 7, "ann-renamed", "b"), 1, admit=lambda *_: "students")
    pool.allocate(Holder(3, 8, "bob"), 1)
    usage = pool.usage()
    assert usage.by_group == {"students": 2}
    assert usage.by_user == {7: 2, 8: 1}


def test_cpu_only_servers_hold_nothing():
    pool = Pool(UUIDS[:1])
    grant = pool.allocate(server(1), 0)
    assert grant.uuids == () and pool.grants() == [] and pool.free_count() == 1


def test_unhealthy_and_external_gpus_are_not_handed_out():
    pool = Pool(UUIDS[:3])
    pool.mark_unhealthy("GPU-0", "XID 79: fallen off the bus")
    pool.set_external({"GPU-1": "container preprocess"})
    assert pool.allocate(server(1), 1).uuids == ("GPU-2",)
    assert pool.states() == {
        "GPU-0": DeviceState.UNHEALTHY,
        "GPU-1": DeviceState.EXTERNAL,
        "GPU-2": DeviceState.ALLOCATED,
    }
    pool.mark_healthy("GPU-0")
    assert pool.allocate(server(2), 1).uuids == ("GPU-0",)


def test_adopt_records_running_servers_and_refuses_conflicts():
    pool = Pool(UUIDS[:4])
    pool.adopt(server(1), ["GPU-1", "GPU-0"], since=5.0, quota_group="students")
    assert pool.grant_of(1).since == 5.0
    assert pool.usage().by_group == {"students": 2}
    with pytest.raises(AlreadyHolding, match="user1"):
        pool.adopt(server(2), ["GPU-1"])
    # adopting again (state and Docker agree) is harmless
    pool.adopt(server(1), ["GPU-0", "GPU-1"], quota_group="students")
    assert pool.free_count() == 2


def test_a_pool_of_the_machine_minus_excluded_gpus_places_by_real_index():
    """GPU 0 excluded: pairs and quads still follow the board's wiring, by NVML index."""
    wiring = Topology.by_index({u: i for i, u in enumerate(UUIDS)})
    pool = Pool(UUIDS[1:], topology=wiring)
    assert pool.allocate(server(1), 2).uuids == ("GPU-2", "GPU-3")
    assert pool.allocate(server(2), 4).uuids == ("GPU-4", "GPU-5", "GPU-6", "GPU-7")
    assert pool.allocate(server(3), 1).uuids == ("GPU-1",)


def test_threads_never_share_a_gpu():
    pool = Pool(UUIDS)
    held: list[tuple[str, ...]] = []
    errors: list[BaseException] = []

    def churn(user: int) -> None:
        for i in range(200):
            try:
                grant = pool.allocate(Holder(user * 1000 + i, user, f"u{user}"), 1 + i % 3)
            except NotEnoughGPUs:
                continue
            except BaseException as error:  # pragma: no cover - reported below
                errors.append(error)
                return
            held.append(grant.uuids)
            snapshot = [u for g in pool.grants() for u in g.uuids]
            if len(snapshot) != len(set(snapshot)):
                errors.append(AssertionError(f"shared GPU in {snapshot}"))
            pool.begin_release(grant.key)
            pool.release(grant.key)

    threads = [threading.Thread(target=churn, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert held and pool.free_count() == len(UUIDS)


class PoolMachine(RuleBasedStateMachine):
    """Random allocate / stop / confirm / adopt / fail sequences keep the books exact."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = Pool(UUIDS, policy="packed")
        self.running: dict[int, set[str]] = {}
        self.stopping: dict[int, set[str]] = {}
        self.unhealthy: set[str] = set()

    servers = st.integers(1, 12)

    def held(self) -> set[str]:
        return {u for uuids in (*self.running.values(), *self.stopping.values()) for u in uuids}

    @rule(key=servers, count=st.integers(0, 9))
    def allocate(self, key: int, count: int) -> None:
        available = len(UUIDS) - len(self.unhealthy | self.held())
        try:
            grant = self.pool.allocate(server(key, key % 4), count)
        except AlreadyHolding:
            assert key in self.running or key in self.stopping
            return
        except NotEnoughGPUs:
            assert count > available
            return
        assert count <= available and key not in self.running
        assert len(grant.uuids) == count
        if count:
            self.running[key] = set(grant.uuids)

    @rule(key=servers)
    def server_ends(self, key: int) -> None:
        """The hub says the server ended: its GPUs stay held until Docker confirms."""
        self.pool.begin_release(key)
        if key in self.running:
            self.stopping[key] = self.running.pop(key)

    @rule(key=servers)
    def docker_confirms_gone(self, key: int) -> None:
        if key in self.stopping:
            self.pool.release(key)
            del self.stopping[key]

    @rule(key=servers, failing=st.booleans())
    def spawn_that_may_fail(self, key: int, failing: bool) -> None:
        """A spawn whose container then fails to start gives everything back, once gone."""
        if key in self.running or key in self.stopping:
            return
        try:
            grant = self.pool.allocate(server(key, key % 4), 1)
        except NotEnoughGPUs:
            return
        if failing:
            self.pool.begin_release(grant.key)
            self.pool.release(grant.key)
        else:
            self.running[key] = set(grant.uuids)

    @precondition(lambda self: self.running)
    @rule()
    def hub_restart_adopts(self) -> None:
        """A restarted hub adopts every running container, stopping ones included."""
        restarted = Pool(UUIDS)
        for key, uuids in {**self.running, **self.stopping}.items():
            restarted.adopt(server(key, key % 4), sorted(uuids))
        self.running.update(self.stopping)
        self.stopping.clear()
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
        grants = {g.key: set(g.uuids) for g in self.pool.grants()}
        assert grants == {**self.running, **self.stopping}
        assert {g.key for g in self.pool.grants() if g.stopping} == set(self.stopping)
        held = [u for g in self.pool.grants() for u in g.uuids]
        assert len(held) == len(set(held)), "a GPU is held twice"
        states = self.pool.states()
        free = [u for u, s in states.items() if s is DeviceState.FREE]
        assert self.pool.free_count() == len(free)
        assert set(free) == set(UUIDS) - set(held) - self.unhealthy


TestPoolMachine = PoolMachine.TestCase
TestPoolMachine.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
