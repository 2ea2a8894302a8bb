"""Which free GPUs a server gets: placement by how the GPUs are wired.

A `Topology` is the machine's GPUs in nested groups, tightest first: an
NVLink pair, the GPUs behind one PCIe switch, one CPU socket's, the whole
machine. It comes from a score per pair of GPUs (higher: better connected),
as NVIDIA's gpuallocator scores links: each distinct score is a level, and a
level's groups are the GPUs joined by links at least that good, so groups
nest by construction. Where the driver reports no wiring, neighbours by NVML
index share a switch, as on DGX/HGX boards: GPUs 0–1 are a pair, 0–3 a quad.

A request for n GPUs is served from the tightest group that has n free, and
filled group by group inside it, so a 2-GPU server gets a pair and a 4-GPU
server a quad whenever one is free. Among groups of the same level the
policy decides:
- "packed" (default) takes the group whose surroundings are most used, which
  keeps whole free groups for later multi-GPU requests;
- "spread" takes the one whose surroundings are least used, which keeps
  servers apart (cooler, less shared bandwidth) at the cost of fragmenting.

A pool may span several machines (nodes); a server's units all come from one,
since a container runs on one machine. The policy picks that machine too,
among those with enough free: "packed" the one with the fewest free, so one
machine fills before the next (keeping others whole for big requests);
"spread" the one with the most. Within it, the wiring decides as above.

Wiring matters only between whole GPUs. A MIG instance or a shared GPU's slot
is one unit on one GPU, so `pack` only chooses the GPU: "packed" fills the GPU
already most used (keeping other GPUs whole for whoever needs one), "spread"
the least used.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from .units import Request, Unit
from .words import listed

# A policy turns "free GPUs in the candidate group and in each group around it" into a
# sort key: the smallest key wins.
PLACEMENT_POLICIES: dict[str, Callable[[tuple[int, ...]], tuple[int, ...]]] = {
    "packed": lambda free_around: free_around,
    "spread": lambda free_around: tuple(-n for n in free_around),
}

LinkScore = Callable[[str, str], int]


# The same for one unit on a shared or MIG GPU: from "GPU-equivalents already used on its
# GPU", a sort key (the smallest wins).
SHARE_POLICIES: dict[str, Callable[[Fraction], Fraction]] = {
    "packed": lambda used: -used,
    "spread": lambda used: used,
}


# The same for a machine with enough free units for a request: from how many it has free, a
# sort key (the smallest wins; ties go to the machine's name).
NODE_POLICIES: dict[str, Callable[[int], int]] = {
    "packed": lambda free: free,
    "spread": lambda free: -free,
}


class NotEnoughGPUs(Exception):
    """`requested` units, of which `free` of `total` are free; `needs` says what, in words
    ("2", "a MIG instance 1g.10gb"). `why`, for a user, where freeing units anywhere would
    not do: no machine has enough, or none it may use is there."""

    def __init__(
        self, requested: int, free: int, total: int, needs: str = "", why: str = ""
    ) -> None:
        self.requested, self.free, self.total = requested, free, total
        self.needs = needs or str(requested)
        self.why = why
        super().__init__(why or f"{self.needs} requested, {free} of {total} free")


@dataclass(frozen=True)
class Topology:
    """GPUs (by UUID) in nested groups. `levels[0]` has one group per GPU, the last one group."""

    order: tuple[str, ...]  # by NVML index: ties go to the lower index
    levels: tuple[tuple[frozenset[str], ...], ...]

    @classmethod
    def from_scores(cls, order: Sequence[str], score: LinkScore) -> Topology:
        """Groups of GPUs joined by links scoring at least each distinct score, best first."""
        order = tuple(order)
        pairs = [(a, b) for i, a in enumerate(order) for b in order[i + 1 :]]
        thresholds = sorted({score(a, b) for a, b in pairs}, reverse=True)
        levels = [tuple(frozenset([u]) for u in order)]
        for threshold in thresholds:
            groups = _components(order, [(a, b) for a, b in pairs if score(a, b) >= threshold])
            if len(groups) < len(levels[-1]):
                levels.append(groups)
        if len(levels[-1]) > 1:  # no link joins everything: the machine is the last group
            levels.append((frozenset(order),))
        return cls(order, tuple(levels))

    @classmethod
    def by_index(cls, indices: Mapping[str, int]) -> Topology:
        """Without wiring information: aligned blocks of 2, 4, 8 … GPUs by NVML index."""
        order = sorted(indices, key=indices.__getitem__)
        return cls.from_scores(order, lambda a, b: -(indices[a] ^ indices[b]).bit_length())

    def restricted_to(self, members: Collection[str]) -> Topology:
        """The same wiring among `members` only (the GPUs of the pool, not the excluded)."""
        kept = set(members)
        levels: list[tuple[frozenset[str], ...]] = []
        for level in self.levels:
            groups = tuple(g & kept for g in level if g & kept)
            if not levels or len(groups) < len(levels[-1]):
                levels.append(groups)
        return Topology(tuple(u for u in self.order if u in kept), tuple(levels))


class Placer:
    """Chooses GPUs on one topology; built once per pool, used under its lock."""

    def __init__(self, topology: Topology, policy: str = "packed") -> None:
        if policy not in PLACEMENT_POLICIES:
            raise ValueError(f"unknown placement policy {policy!r}: {sorted(PLACEMENT_POLICIES)}")
        self.topology = topology
        self.rank = PLACEMENT_POLICIES[policy]
        self._position = {uuid: i for i, uuid in enumerate(topology.order)}
        # group_of[level][uuid]: the index of the uuid's group at that level
        self._group_of = [
            {uuid: g for g, group in enumerate(level) for uuid in group}
            for level in topology.levels
        ]

    def place(self, free: Collection[str], count: int) -> list[str]:
        """`count` of the `free` GPUs, in index order; NotEnoughGPUs if there are fewer."""
        free = set(free)
        if count > len(free):
            raise NotEnoughGPUs(count, len(free), len(self.topology.order))
        if count == 0:
            return []
        levels = self.topology.levels
        free_in = [[len(group & free) for group in level] for level in levels]
        for depth, level in enumerate(levels):
            fitting = [g for g, n in enumerate(free_in[depth]) if n >= count]
            if fitting:
                best = min(fitting, key=lambda g: self._key(depth, level[g], free_in))
                chosen = self._fill(depth, level[best], free, count)
                return sorted(chosen, key=self._position.__getitem__)
        raise AssertionError("the last level holds every GPU")  # pragma: no cover

    def _key(
        self, depth: int, group: frozenset[str], free_in: list[list[int]]
    ) -> tuple[tuple[int, ...], int]:
        """Free GPUs in the group and in each group around it, ranked by policy; then index."""
        member = next(iter(group))
        around = tuple(free_in[d][self._group_of[d][member]] for d in range(depth, len(free_in)))
        return (self.rank(around), min(self._position[u] for u in group))

    def _fill(self, depth: int, group: frozenset[str], free: set[str], count: int) -> list[str]:
        """`count` free GPUs of `group`, taken sub-group by sub-group, tightest first."""
        available = group & free
        if len(available) == count or depth == 0:
            return sorted(available, key=self._position.__getitem__)[:count]
        children = [child for child in self.topology.levels[depth - 1] if child & available]
        first = {c: min(self._position[u] for u in c) for c in children}
        fits = [c for c in children if len(c & available) >= count]
        if fits:  # one sub-group can serve it all: the one with the fewest to spare
            tightest = min(fits, key=lambda c: (len(c & available), first[c]))
            return self._fill(depth - 1, tightest, free, count)
        children.sort(key=lambda c: (-len(c & available), first[c]))
        chosen: list[str] = []
        for child in children:
            take = min(count - len(chosen), len(child & available))
            chosen += self._fill(depth - 1, child, free, take)
            if len(chosen) == count:
                break
        return chosen


def one_node(
    request: Request, free: Sequence[Unit], total: int, policy: str = "packed"
) -> list[Unit]:
    """The `free` units (of `total` matching) of the one machine `request` goes to, chosen
    by policy among those with enough; NotEnoughGPUs if none has."""
    if request.count > len(free):
        raise NotEnoughGPUs(request.count, len(free), total, request.needs)
    on: dict[str, list[Unit]] = {}
    for unit in free:
        on.setdefault(unit.node, []).append(unit)
    fitting = [node for node, units in on.items() if len(units) >= request.count]
    if not fitting:
        most = max(len(units) for units in on.values())
        why = (
            f"{replace(request, gpus=len(free)).what} are free, but no single machine has "
            f"{request.count} free: at most {most} on one machine."
        )
        raise NotEnoughGPUs(request.count, len(free), total, request.needs, why)
    rank = NODE_POLICIES[policy]
    return on[min(fitting, key=lambda node: (rank(len(on[node])), node))]


def no_machine(request: Request, total: int) -> NotEnoughGPUs:
    """The refusal of a request whose machines (`Request.nodes`) are all absent or
    unreachable; `total`: its units on them."""
    allowed = sorted(request.nodes or ())
    if not allowed:
        why = (
            "may come from no machine: the profile's machines and your groups' have none in common"
        )
    elif len(allowed) == 1:
        why = f"may come only from machine {allowed[0]}, which is not available now"
    else:
        why = f"may come only from machines {listed(allowed)}, none of which is available now"
    return NotEnoughGPUs(request.count, 0, total, request.needs, f"{request.what} {why}.")


def pack(free: Sequence[Unit], used: Mapping[str, Fraction], policy: str = "packed") -> Unit:
    """One of the `free` units (non-empty), on the GPU the policy prefers by what is `used`
    on each (GPU-equivalents, by GPU UUID); ties go to the lower index, then position."""
    rank = SHARE_POLICIES[policy]
    return min(free, key=lambda u: (rank(used.get(u.gpu, Fraction(0))), u.index, u.position))


def _components(order: Sequence[str], links: list[tuple[str, str]]) -> tuple[frozenset[str], ...]:
    """Connected components of `links`, in `order` of their first member."""
    parent = {u: u for u in order}

    def root(u: str) -> str:
        while parent[u] != u:
            parent[u] = parent[parent[u]]
            u = parent[u]
        return u

    for a, b in links:
        parent[root(a)] = root(b)
    groups: dict[str, set[str]] = {}
    for u in order:
        groups.setdefault(root(u), set()).add(u)
    return tuple(frozenset(g) for g in groups.values())
