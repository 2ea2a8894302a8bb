import pytest

from gpuspawner.core.placement import NotEnoughGPUs, Placer, Topology


def by_index(size: int) -> Topology:
    return Topology.by_index({f"GPU-{i}": i for i in range(size)})


def place(free: set[int], size: int, count: int, policy: str = "packed") -> list[int]:
    chosen = Placer(by_index(size), policy).place({f"GPU-{i}" for i in free}, count)
    return [int(u.removeprefix("GPU-")) for u in chosen]


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
        # no quad has room: the machine serves it, filling the fullest quad first
        # and keeping what is left as whole as it can (here the pair 4-5)
        ({1, 2, 5, 6}, 8, 4, "packed", [1, 2, 5, 6]),
        ({0, 1, 2, 4, 5, 6}, 8, 4, "packed", [0, 1, 2, 6]),
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


def test_index_blocks_nest_pairs_in_quads_in_the_machine():
    levels = by_index(8).levels
    assert [len(level) for level in levels] == [8, 4, 2, 1]
    assert frozenset({"GPU-2", "GPU-3"}) in levels[1]
    assert frozenset({"GPU-4", "GPU-5", "GPU-6", "GPU-7"}) in levels[2]


def test_wiring_beats_index_order():
    """NVLink pairs 0–3 and 1–2 (as some boards wire them): a pair follows the links."""
    links = {frozenset({"GPU-0", "GPU-3"}), frozenset({"GPU-1", "GPU-2"})}
    wiring = Topology.from_scores(
        [f"GPU-{i}" for i in range(4)], lambda a, b: 1 if frozenset({a, b}) in links else 0
    )
    placer = Placer(wiring)
    assert placer.place({"GPU-0", "GPU-1", "GPU-3"}, 2) == ["GPU-0", "GPU-3"]
    assert placer.place({"GPU-0", "GPU-1", "GPU-2"}, 1) == ["GPU-0"]  # next to a busy partner


def test_groups_are_nested_whatever_the_scores():
    """Components under more links are unions of components under fewer: levels nest."""
    order = [f"GPU-{i}" for i in range(6)]
    scores = {frozenset({"GPU-0", "GPU-5"}): 3, frozenset({"GPU-5", "GPU-2"}): 2}
    wiring = Topology.from_scores(order, lambda a, b: scores.get(frozenset({a, b}), 0))
    for finer, coarser in zip(wiring.levels, wiring.levels[1:], strict=False):
        for group in finer:
            assert any(group <= bigger for bigger in coarser)
    assert wiring.levels[-1] == (frozenset(order),)


def test_restricting_to_the_pool_keeps_the_wiring_of_the_rest():
    wiring = by_index(8).restricted_to([f"GPU-{i}" for i in range(1, 8)])
    assert frozenset({"GPU-1"}) in wiring.levels[1]  # GPU 0's partner stands alone
    assert frozenset({"GPU-1", "GPU-2", "GPU-3"}) in wiring.levels[2]
