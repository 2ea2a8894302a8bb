"""The books on a mixed machine: whole GPUs, MIG instances and shared GPUs' slots in one pool."""

from fractions import Fraction

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gpuspawner.core.gpus import GPU, MigInstance
from gpuspawner.core.pool import GONE, AlreadyHolding, DeviceState, Holder, NotEnoughGPUs, Pool
from gpuspawner.core.units import Kind, Request, Sharing, Unit, all_units, units_of

GIB = 2**30


def mig(gpu: str, profile: str, slices: int, count: int, first: int = 0) -> tuple[MigInstance, ...]:
    return tuple(
        MigInstance(f"MIG-{gpu}-{profile}-{i}", profile, slices * 10 * GIB, slices, 7, i)
        for i in range(first, first + count)
    )


def machine(a100_layout: tuple[MigInstance, ...] | None = None) -> list[Unit]:
    """2 exclusive H100s, an A100 in MIG mode (7 × 1g.10gb), an L40S shared by 4."""
    gpus = [
        GPU("GPU-h0", 0, "NVIDIA H100 80GB HBM3", 80 * GIB),
        GPU("GPU-h1", 1, "NVIDIA H100 80GB HBM3", 80 * GIB),
        GPU(
            "GPU-a", 2, "NVIDIA A100-SXM4-80GB", 80 * GIB, True, a100_layout or mig("a", "1g", 1, 7)
        ),
        GPU("GPU-l", 3, "NVIDIA L40S", 48 * GIB),
    ]
    return all_units(gpus, {"GPU-l": Sharing(4)})


def server(n: int, user: int | None = None) -> Holder:
    return Holder(n, n if user is None else user, f"user{n if user is None else user}")


WHOLE, SLICE, SLOT = Request(gpus=1), Request(mig_profile="1g"), Request(shared=True)


def test_thirteen_servers_fit_and_a_fourteenth_of_each_kind_is_refused():
    pool = Pool(machine())
    grants = [
        pool.allocate(server(n), r) for n, r in enumerate([WHOLE] * 2 + [SLICE] * 7 + [SLOT] * 4)
    ]
    devices = [d for g in grants for d in g.uuids]
    assert devices.count("GPU-l") == 4 and len(set(devices)) == 2 + 7 + 1
    assert len({i for g in grants for i in g.ids}) == 13
    for n, request in enumerate([WHOLE, SLICE, SLOT], start=100):
        with pytest.raises(NotEnoughGPUs) as short:
            pool.allocate(server(n), request)
        assert short.value.free == 0 and short.value.needs == request.needs
    assert pool.free_count() == 0
    assert sum(g.weight for g in grants) == 4  # every GPU, counted once, whatever its kind


def test_whole_gpus_come_from_whole_gpus_only_and_filters_narrow_them():
    pool = Pool(machine())
    with pytest.raises(NotEnoughGPUs) as short:
        pool.allocate(server(1), Request(gpus=3))
    assert (short.value.free, short.value.total) == (2, 2)
    with pytest.raises(NotEnoughGPUs) as short:
        pool.allocate(server(1), Request(gpus=1, gpu_model="*A100*"))
    assert short.value.total == 0 and short.value.needs == "1 GPU (model *A100*)"
    assert pool.allocate(server(1), Request(gpus=2, gpu_model="*h100*")).ids == ("GPU-h0", "GPU-h1")


def test_slices_and_slots_are_packed_onto_the_fullest_gpu_or_spread():
    layout = mig("a", "1g", 1, 4)
    gpus = [
        GPU("GPU-a", 0, "A100", 80 * GIB, True, layout),
        GPU("GPU-b", 1, "A100", 80 * GIB, True, mig("b", "1g", 1, 4)),
        GPU("GPU-s", 2, "L4", 24 * GIB),
        GPU("GPU-t", 3, "L4", 24 * GIB),
    ]
    units = all_units(gpus, {"GPU-s": Sharing(2), "GPU-t": Sharing(2)})
    packed = Pool(units)
    picks = [packed.allocate(server(n), SLICE).units[0].gpu for n in range(3)]
    assert picks == ["GPU-a"] * 3
    slots = [packed.allocate(server(n), SLOT).units[0].id for n in range(10, 13)]
    assert slots == ["GPU-s#1", "GPU-s#2", "GPU-t#1"]
    spread = Pool(units, policy="spread")
    assert [spread.allocate(server(n), SLICE).units[0].gpu for n in range(3)] == [
        "GPU-a",
        "GPU-b",
        "GPU-a",
    ]


def test_limits_see_gpu_equivalents_before_the_choice_is_kept():
    pool = Pool(machine())
    seen = []
    pool.allocate(server(1), SLICE, admit=lambda weight, *_: seen.append(weight))
    pool.allocate(server(2, user=1), SLOT, admit=lambda weight, *_: seen.append(weight))
    assert seen == [Fraction(1, 7), Fraction(1, 4)]
    assert pool.usage().by_user == {1: Fraction(11, 28)}

    def refuse(weight, user_id, usage):
        raise PermissionError(f"{weight} over the limit")

    with pytest.raises(PermissionError, match="1/7 over"):
        pool.allocate(server(3), SLICE, admit=refuse)
    # a limit is decided before capacity, even when nothing of that kind is free
    for n in range(4, 10):
        pool.allocate(server(n), SLICE)
    with pytest.raises(PermissionError, match="1/7 over"):
        pool.allocate(server(11), SLICE, admit=refuse)
    assert len(pool.grants()) == 8


def test_a_sick_gpu_takes_its_instances_and_slots_with_it():
    pool = Pool(machine())
    pool.mark_unhealthy("GPU-a", "needs a reset")
    pool.mark_unhealthy("GPU-l", "lost")
    assert pool.free_count(SLICE) == 0 and pool.free_count(SLOT) == 0
    assert pool.unhealthy_reason("MIG-a-1g-3") == "needs a reset"
    assert pool.marked_unhealthy("MIG-a-1g-3") is None  # the instance itself was not marked
    pool.mark_healthy("GPU-a")
    assert pool.free_count(SLICE) == 7


def test_reaching_a_gpu_reaches_all_it_gives_and_an_instance_only_itself():
    pool = Pool(machine())
    pool.set_external({"GPU-a": "container job", "GPU-l": "container other"})
    assert pool.free_count(SLICE) == pool.free_count(SLOT) == 0
    assert pool.external_user("GPU-l#3") == "container other"
    pool.set_external({"MIG-a-1g-2": "container job", "GPU-nope": "x"})
    assert pool.states()["MIG-a-1g-2"] is DeviceState.EXTERNAL
    assert pool.free_count(SLICE) == 6 and pool.externals() == {"MIG-a-1g-2": "container job"}


def test_recovery_adopts_slots_and_instances_by_their_ids():
    pool = Pool(machine())
    pool.adopt(server(1), ["GPU-l#2"], since=5.0)
    pool.adopt(server(2), ["MIG-a-1g-4"], quota_group="students")
    with pytest.raises(AlreadyHolding, match="user1"):
        pool.adopt(server(3), ["GPU-l#2"])
    assert pool.holder_of("GPU-l#2").key == 1
    assert [g.key for g in pool.holders_on("GPU-l")] == [1]
    assert pool.usage().by_group == {"students": Fraction(1, 7)}
    assert pool.allocate(server(4), SLOT).ids == ("GPU-l#1",)


def test_a_new_mig_layout_is_followed_and_held_instances_wait_for_their_servers():
    pool = Pool(machine())
    held = pool.allocate(server(1), SLICE).units[0]
    assert not pool.follow_layout("GPU-a", units_of(machine_gpu(mig("a", "1g", 1, 7))))
    new = units_of(machine_gpu(mig("a", "3g", 3, 2)))
    assert pool.follow_layout("GPU-a", new)
    assert pool.unhealthy_reason(held.id) == GONE
    assert pool.states()[held.id] is DeviceState.UNHEALTHY
    assert pool.free_count(Request(mig_profile="3g")) == 2 and pool.on_one_machine(SLICE) == 1
    assert not pool.follow_layout("GPU-a", new)  # nothing new: nothing to say
    pool.begin_release(1)
    pool.release(1)
    assert held.id not in pool.ids and pool.on_one_machine(SLICE) == 0
    assert not pool.follow_layout("GPU-nope", new)


def machine_gpu(layout: tuple[MigInstance, ...]) -> GPU:
    return GPU("GPU-a", 2, "NVIDIA A100-SXM4-80GB", 80 * GIB, True, layout)


LAYOUTS = [
    mig("a", "1g", 1, 7),
    mig("a", "3g", 3, 2),
    (*mig("a", "3g", 3, 1), *mig("a", "1g", 1, 3, 4)),
]
REQUESTS = [Request(gpus=1), Request(gpus=2), SLICE, Request(mig_profile="3g"), SLOT, Request()]


class MixedPoolMachine(RuleBasedStateMachine):
    """Random spawns of every kind, stops, restarts, sickness and MIG layout changes: no unit
    is held twice, no shared GPU is in more servers than it has slots, nothing gone or sick
    is handed out, and the weights add up."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = Pool(machine())
        self.held: dict[int, tuple[str, ...]] = {}
        self.stopping: set[int] = set()
        self.sick: set[str] = set()

    servers = st.integers(1, 16)

    @rule(key=servers, request=st.sampled_from(REQUESTS))
    def allocate(self, key: int, request: Request) -> None:
        free_before = self.pool.free_count(request)
        try:
            grant = self.pool.allocate(server(key, key % 5), request)
        except AlreadyHolding:
            assert key in self.held
            return
        except NotEnoughGPUs:
            assert request.count > free_before
            return
        assert key not in self.held and len(grant.units) == request.count
        assert all(request.matches(u) for u in grant.units)
        assert not {u.gpu for u in grant.units} & self.sick
        if grant.units:
            self.held[key] = grant.ids

    @rule(key=servers)
    def server_ends(self, key: int) -> None:
        self.pool.begin_release(key)
        if key in self.held:
            self.stopping.add(key)

    @rule(key=servers)
    def docker_confirms_gone(self, key: int) -> None:
        if key in self.stopping:
            self.pool.release(key)
            self.stopping.discard(key)
            del self.held[key]

    @precondition(lambda self: self.held)
    @rule()
    def hub_restart_adopts(self) -> None:
        """The labels name each unit; a restarted hub adopts them all, stopping ones too."""
        before = {u.id: u for u in self.pool.units}
        restarted = Pool(machine())
        a100 = [u for u in before.values() if u.gpu == "GPU-a"]
        restarted.follow_layout("GPU-a", a100)
        for key, ids in self.held.items():
            restarted.adopt(server(key, key % 5), ids)
        self.stopping.clear()
        self.pool = restarted
        for gpu in self.sick:
            self.pool.mark_unhealthy(gpu, "test")

    @rule(gpu=st.sampled_from(["GPU-h0", "GPU-a", "GPU-l"]), healthy=st.booleans())
    def health_changes(self, gpu: str, healthy: bool) -> None:
        if healthy:
            self.pool.mark_healthy(gpu)
            self.sick.discard(gpu)
        else:
            self.pool.mark_unhealthy(gpu, "test")
            self.sick.add(gpu)

    @rule(layout=st.sampled_from(LAYOUTS))
    def admin_changes_the_mig_layout(self, layout: tuple[MigInstance, ...]) -> None:
        self.pool.follow_layout("GPU-a", units_of(machine_gpu(layout)))

    @invariant()
    def books_match(self) -> None:
        grants = {g.key: g for g in self.pool.grants()}
        assert {k: g.ids for k, g in grants.items()} == self.held
        held = [u for g in grants.values() for u in g.units]
        assert len({u.id for u in held}) == len(held), "a unit is held twice"
        for device in {u.device for u in held}:
            containers = sum(device in g.uuids for g in grants.values())
            slots = max(u.slots for u in held if u.device == device) or 1
            assert containers <= slots, f"{device} is in {containers} containers"
        states = self.pool.states()
        free = {i for i, s in states.items() if s is DeviceState.FREE}
        units = {u.id: u for u in self.pool.units}
        assert not free & {u.id for u in held}
        assert all(units[i].gpu not in self.sick for i in free)
        assert all(self.pool.unhealthy_reason(i) != GONE for i in free)
        assert self.pool.free_count() == len(free)
        by_user: dict[int, Fraction] = {}
        for g in grants.values():
            if not g.stopping:
                by_user[g.holder.user_id] = by_user.get(g.holder.user_id, 0) + g.weight
        assert self.pool.usage().by_user == by_user
        assert all(u.kind is Kind.MIG for u in units.values() if u.gpu == "GPU-a")


TestMixedPoolMachine = MixedPoolMachine.TestCase
TestMixedPoolMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
