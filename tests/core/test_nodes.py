"""One pool over several machines (nodes): grants on one machine, placement across them,
machines a profile or group allows, free counts per machine, and unreachable machines."""

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from gpuspawner.core.errors import LimitsConfigError, ProfileConfigError
from gpuspawner.core.gpus import GPU, MigInstance
from gpuspawner.core.limits import LimitsTable
from gpuspawner.core.nodes import Count, counts_by_node
from gpuspawner.core.placement import Topology
from gpuspawner.core.pool import AlreadyHolding, DeviceState, Holder, NotEnoughGPUs, Pool
from gpuspawner.core.profiles import parse_profiles
from gpuspawner.core.units import Kind, Request, Sharing, all_units, units_of

GIB = 2**30
H100 = "NVIDIA H100 80GB HBM3"
SLOT = Request(shared=True)


def machine(node: str, size: int, model: str = H100) -> list[GPU]:
    return [GPU(f"GPU-{node}-{i}", i, model, 80 * GIB, node=node) for i in range(size)]


def a100_in_mig_mode(uuid: str, index: int, instances: int, node: str) -> GPU:
    """An A100 split into `instances` 1g.10gb MIG instances, on machine `node`."""
    mig = tuple(MigInstance(f"MIG-{i}", "1g.10gb", 10 * GIB, 1, 7, i) for i in range(instances))
    return GPU(uuid, index, "A100", 80 * GIB, True, mig, node=node)


def server(n: int) -> Holder:
    return Holder(n, n, f"user{n}")


def cluster(free: dict[str, int], size: int = 4, policy: str = "packed") -> Pool:
    """Machines of `size` whole GPUs each, with `free` of them free (the rest held)."""
    pool = Pool(all_units([g for node in free for g in machine(node, size)], {}), policy)
    for n, node in enumerate(free):
        busy = [f"GPU-{node}-{i}" for i in range(size - free[node])]
        if busy:
            pool.adopt(server(1000 + n), busy)
    return pool


def node_of(grant) -> str:
    (node,) = {u.node for u in grant.units}
    return node


def refusal(pool: Pool, request: Request) -> NotEnoughGPUs:
    with pytest.raises(NotEnoughGPUs) as refused:
        pool.allocate(server(99), request)
    return refused.value


# --- what belongs to which machine ----------------------------------------------------------
@pytest.mark.parametrize(
    ("gpu", "sharing"),
    [
        (GPU("GPU-0", 0, H100, 80 * GIB, node="b"), None),
        (GPU("GPU-0", 0, H100, 80 * GIB, node="b"), Sharing(4)),
        (a100_in_mig_mode("GPU-0", 0, instances=3, node="b"), None),
    ],
)
def test_every_unit_of_a_gpu_is_on_its_machine(gpu, sharing):
    units = units_of(gpu, sharing)
    assert units and {u.node for u in units} == {"b"}


def test_a_single_host_is_one_machine_named_empty():
    pool = Pool(["GPU-0", "GPU-1"])
    assert {u.node for u in pool.units} == {""}
    assert counts_by_node(pool.units, pool.states()) == {"": {Kind.GPU: Count(2, 2)}}


# --- placement across machines ------------------------------------------------------------
@pytest.mark.parametrize(
    ("free", "count", "policy", "node"),
    [
        # packed: the machine with the fewest free that still fits
        ({"a": 4, "b": 2}, 2, "packed", "b"),
        ({"a": 4, "b": 2}, 3, "packed", "a"),
        ({"a": 3, "b": 1, "c": 2}, 1, "packed", "b"),
        ({"a": 1, "b": 4}, 2, "packed", "b"),
        # spread: the one with the most free
        ({"a": 2, "b": 4}, 1, "spread", "b"),
        ({"a": 3, "b": 1, "c": 2}, 2, "spread", "a"),
        # ties go to the name
        ({"b": 2, "a": 2}, 2, "packed", "a"),
        ({"b": 3, "a": 3}, 1, "spread", "a"),
    ],
)
def test_a_grant_comes_from_one_machine_chosen_by_policy(free, count, policy, node):
    grant = cluster(free, policy=policy).allocate(server(1), count)
    assert len(grant.units) == count and node_of(grant) == node


@pytest.mark.parametrize(
    ("free", "count", "why"),
    [
        (
            {"a": 1, "b": 1, "c": 2},
            3,
            "4 GPUs are free, but no single machine has 3 free: at most 2 on one machine.",
        ),
        (
            {"a": 1, "b": 1, "c": 1, "d": 1},
            2,
            "4 GPUs are free, but no single machine has 2 free: at most 1 on one machine.",
        ),
        ({"a": 1, "b": 1}, 3, ""),  # too few in all: said as before
    ],
)
def test_free_gpus_spread_over_machines_are_refused_in_words(free, count, why):
    pool = cluster(free)
    short = refusal(pool, Request(gpus=count))
    assert short.why == why and short.free == sum(free.values()) and short.total == 4 * len(free)
    assert str(short) == (why or f"{count} requested, {sum(free.values())} of {4 * len(free)} free")
    assert pool.grant_of(99) is None


def test_a_filtered_request_counts_only_its_kind_when_refused():
    units = all_units([*machine("a", 1), *machine("b", 1), *machine("c", 2, "L4")], {})
    short = refusal(Pool(units), Request(gpus=2, gpu_model="*H100*"))
    assert short.why.startswith("2 GPUs (model *H100*) are free, but no single machine has 2")


def test_within_a_machine_the_wiring_still_decides():
    """Machine b: NVLink pairs 0–3 and 1–2; a pair follows the links, as on one host."""
    gpus = [*machine("a", 4), *machine("b", 4)]
    links = {frozenset({"GPU-b-0", "GPU-b-3"}), frozenset({"GPU-b-1", "GPU-b-2"})}
    wiring = Topology.from_scores(
        [g.uuid for g in gpus], lambda x, y: 1 if frozenset({x, y}) in links else 0
    )
    pool = Pool(all_units(gpus, {}), topology=wiring)
    pool.adopt(server(100), ["GPU-b-2"])
    assert pool.allocate(server(1), 2).ids == ("GPU-b-0", "GPU-b-3")
    assert pool.allocate(server(2), 1).ids == ("GPU-b-1",)  # the busy GPU's partner


def test_without_wiring_each_machine_pairs_by_its_own_index():
    pool = cluster({"a": 8, "b": 7}, size=8)  # b's GPU 0 is held
    assert pool.allocate(server(1), 3).ids == ("GPU-b-1", "GPU-b-2", "GPU-b-3")
    assert pool.allocate(server(2), 2).ids == ("GPU-b-4", "GPU-b-5")
    assert pool.allocate(server(3), 4).ids == tuple(f"GPU-a-{i}" for i in range(4))


@pytest.mark.parametrize(("policy", "node"), [("packed", "a"), ("spread", "b")])
def test_a_slot_goes_to_the_fullest_or_emptiest_machine(policy, node):
    """Machine a's shared GPU has 3 of its 4 slots taken, machine b's none."""
    gpus = [GPU(f"GPU-{n}", 0, "L40S", 48 * GIB, node=n) for n in ("a", "b")]
    pool = Pool(all_units(gpus, {g.uuid: Sharing(4) for g in gpus}), policy)
    for slot in (1, 2, 3):
        pool.adopt(server(100 + slot), [f"GPU-a#{slot}"])
    assert node_of(pool.allocate(server(1), SLOT)) == node


# --- machines a profile or group allows -----------------------------------------------------
@pytest.mark.parametrize(
    ("profile", "group", "allowed"),
    [
        (None, None, None),
        ({"a"}, None, {"a"}),
        (None, {"b"}, {"b"}),
        ({"a", "b"}, {"b", "c"}, {"b"}),
        ({"a"}, {"b"}, set()),
    ],
)
def test_profile_and_group_machines_both_apply(profile, group, allowed):
    request = Request(gpus=1, nodes=None if profile is None else frozenset(profile))
    assert request.only_on(group).nodes == (None if allowed is None else frozenset(allowed))


def test_a_request_is_placed_only_on_its_machines():
    pool = cluster({"a": 1, "b": 4})
    assert node_of(pool.allocate(server(1), Request(gpus=1, nodes=frozenset({"b"})))) == "b"
    assert node_of(pool.allocate(server(2), Request(gpus=1).only_on(["a", "b"]))) == "a"
    short = refusal(pool, Request(gpus=4, nodes=frozenset({"b"})))
    assert (short.free, short.total, short.why) == (3, 4, "")  # b is there, only too full


@pytest.mark.parametrize(
    ("nodes", "unreachable", "why"),
    [
        ({"x"}, (), "2 GPUs may come only from machine x, which is not available now."),
        (
            {"y", "x"},
            (),
            "2 GPUs may come only from machines x, y, none of which is available now.",
        ),
        ({"a", "x"}, ("a",), "none of which is available now."),
        (
            set(),
            (),
            "2 GPUs may come from no machine: the profile's machines and your groups' have "
            "none in common.",
        ),
    ],
)
def test_a_request_whose_machines_are_all_away_is_refused_in_words(nodes, unreachable, why):
    pool = cluster({"a": 4, "b": 4})
    for node in unreachable:
        pool.mark_unreachable(node, "dockerd does not answer")
    short = refusal(pool, Request(gpus=2, nodes=frozenset(nodes)))
    assert short.why.endswith(why) and short.free == 0


def test_a_profile_names_its_machines_and_one_not_there_is_no_error():
    (profile,) = parse_profiles(
        [{"display_name": "Course", "gpus": 1, "nodes": ["old-1", "old-2"]}], pool=4
    )
    assert profile.nodes == {"old-1", "old-2"} and profile.request.nodes == profile.nodes
    (anywhere,) = parse_profiles([{"display_name": "Any", "gpus": 1, "nodes": None}], pool=4)
    assert anywhere.nodes is None and anywhere.request == Request(gpus=1)


BAD_NODES = ["old-1", [], [""], [" old-1"], [3], {"old-1": True}, 2]


@pytest.mark.parametrize("value", BAD_NODES)
def test_bad_profile_machines_name_the_profile_and_key(value):
    message = r"profiles\[0\] \(course\): nodes must be a list of one or more machine names"
    with pytest.raises(ProfileConfigError, match=message):
        parse_profiles([{"display_name": "Course", "gpus": 1, "nodes": value}], pool=4)


@pytest.mark.parametrize("value", BAD_NODES)
def test_bad_group_machines_name_the_group_and_key(value):
    with pytest.raises(LimitsConfigError, match=r"group_limits\['course'\]\['nodes'\] must be"):
        LimitsTable.parse({"course": {"nodes": value}}, {}, [])
    with pytest.raises(LimitsConfigError, match=r"default_limits\['nodes'\] must be"):
        LimitsTable.parse({}, {"nodes": value}, [])


@pytest.mark.parametrize(
    ("groups", "admin", "allowed"),
    [
        ({"course"}, False, {"old-1"}),
        ({"course", "lab"}, False, {"old-1", "new-1"}),
        ({"course", "staff"}, False, None),  # one group may use any machine
        ({"someone"}, False, {"old-1", "old-2"}),  # default_limits
        ({"inherits"}, False, {"old-1", "old-2"}),  # a group without the key takes the default
        ({"course"}, True, None),  # admins go anywhere unless limit_admins
    ],
)
def test_a_users_machines_are_those_any_of_their_groups_allows(groups, admin, allowed):
    table = LimitsTable.parse(
        {
            "course": {"nodes": ["old-1"]},
            "lab": {"nodes": ["new-1"]},
            "staff": {"nodes": None},
            "inherits": {"max_gpus_per_user": 2},
        },
        {"nodes": ["old-1", "old-2"]},
        [],
    )
    nodes = table.for_user(groups, admin=admin).nodes.value
    assert nodes == (None if allowed is None else frozenset(allowed))


# --- free counts per machine, and machines that cannot be reached ----------------------------
def test_counts_per_machine_and_kind():
    a100 = a100_in_mig_mode("GPU-m", 2, instances=2, node="a")
    l40s = GPU("GPU-l", 0, "L40S", 48 * GIB, node="b")
    pool = Pool(all_units([*machine("a", 2), a100, l40s], {"GPU-l": Sharing(2)}))
    pool.allocate(server(1), 1)
    pool.mark_unreachable("b", "dockerd does not answer")
    assert counts_by_node(pool.units, pool.states()) == {
        "a": {Kind.GPU: Count(1, 2), Kind.MIG: Count(2, 2)},
        "b": {Kind.SHARED: Count(0, 2)},
    }


def test_an_unreachable_machine_gives_nothing_and_keeps_its_grants_until_released():
    pool = cluster({"a": 2, "b": 4}, size=4)
    on_b = pool.allocate(server(1), 3)
    assert node_of(on_b) == "b"
    pool.mark_unreachable("b", "machine b cannot be reached: dockerd does not answer")
    assert pool.unreachable() == {"b": "machine b cannot be reached: dockerd does not answer"}
    assert pool.free_count() == 2 and pool.on_one_machine(Request(gpus=1), usable=True) == 4  # a's
    assert pool.grant_of(1) == on_b
    assert all(pool.states()[i] is DeviceState.UNHEALTHY for i in on_b.ids)
    assert pool.unhealthy_reason("GPU-b-3").startswith("machine b cannot be reached")
    assert node_of(pool.allocate(server(2), 1)) == "a"  # b's free GPU is not handed out
    assert refusal(pool, Request(gpus=2)).free == 1
    pool.begin_release(1)
    pool.release(1)
    assert pool.free_count() == 1  # released, but still on an unreachable machine
    pool.mark_reachable("b")
    assert pool.free_count() == 5 and pool.unreachable() == {}
    assert node_of(pool.allocate(server(3), 4)) == "b"


# --- no unit is ever in two grants --------------------------------------------------------
SIZES = {"a": 4, "b": 2, "c": 2}
NODE_SETS = [None, frozenset({"a"}), frozenset({"b", "c"}), frozenset({"c", "x"}), frozenset()]


def sharing_pool() -> Pool:
    gpus = [*machine("a", 4), *machine("b", 2), *machine("c", 2)]
    return Pool(all_units(gpus, {"GPU-c-1": Sharing(2)}))


class NodesMachine(RuleBasedStateMachine):
    """Random spawns on allowed machines, stops, releases and machines coming and going: no
    unit is in two grants, every grant is on one allowed machine, chosen as "packed" says,
    and nothing on an unreachable machine is handed out."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = sharing_pool()
        self.allowed: dict[int, frozenset[str] | None] = {}
        self.away: set[str] = set()

    servers = st.integers(1, 10)

    @rule(
        key=servers,
        request=st.sampled_from([Request(gpus=1), Request(gpus=2), Request(gpus=3), SLOT]),
        nodes=st.sampled_from(NODE_SETS),
    )
    def allocate(self, key: int, request: Request, nodes: frozenset[str] | None) -> None:
        request = request.only_on(nodes)
        states = self.pool.states()
        free: dict[str, int] = {}
        for unit in self.pool.units:
            if request.matches(unit) and states[unit.id] is DeviceState.FREE:
                free[unit.node] = free.get(unit.node, 0) + 1
        fits = {n: f for n, f in free.items() if f >= request.count}
        try:
            grant = self.pool.allocate(server(key), request)
        except AlreadyHolding:
            assert key in self.allowed
            return
        except NotEnoughGPUs:
            assert not fits
            return
        assert fits and key not in self.allowed
        assert node_of(grant) == min(fits, key=lambda n: (fits[n], n))
        self.allowed[key] = nodes

    @rule(key=servers)
    def server_ends(self, key: int) -> None:
        self.pool.begin_release(key)

    @rule(key=servers)
    def docker_confirms_gone(self, key: int) -> None:
        grant = self.pool.grant_of(key)
        if grant is not None and grant.stopping:
            self.pool.release(key)
            del self.allowed[key]

    @rule(node=st.sampled_from(sorted(SIZES)), reachable=st.booleans())
    def machine_comes_and_goes(self, node: str, reachable: bool) -> None:
        if reachable:
            self.pool.mark_reachable(node)
            self.away.discard(node)
        else:
            self.pool.mark_unreachable(node, "test")
            self.away.add(node)

    @invariant()
    def books_match(self) -> None:
        grants = self.pool.grants()
        assert {g.key for g in grants} == set(self.allowed)
        held = [u.id for g in grants for u in g.units]
        assert len(held) == len(set(held)), "a unit is in two grants"
        for grant in grants:
            nodes = self.allowed[grant.key]
            assert nodes is None or node_of(grant) in nodes
        states = self.pool.states()
        free = [u for u in self.pool.units if states[u.id] is DeviceState.FREE]
        assert not {u.id for u in free} & set(held)
        assert not {u.node for u in free} & self.away
        by_node = counts_by_node(self.pool.units, states)
        assert sum(c.free for kinds in by_node.values() for c in kinds.values()) == len(free)


TestNodesMachine = NodesMachine.TestCase
TestNodesMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
