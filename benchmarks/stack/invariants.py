"""What must hold on the real stack at every moment of a replay, checked on samples: the
pool as the hub reports it (`GET /hub/api/gpus`) and the containers as Docker lists them.

- never two holders on one GPU, unless the books say the others are parked there;
- no running container on a GPU the pool calls free, or free to take (`parked`: nobody
  holds it, parked work waits on it) but for the parked work's own; and none on a GPU the
  pool calls free at all, parked or not (`parked_on_free`: the report must say parked);
- no GPU held after its container is gone (past `GONE_GRACE`: the books release a GPU
  when Docker says its container is gone, which the monitor learns within its tick);
- at the end (and after a hub restart) the books equal Docker's word: each GPU's holder
  and parked work are exactly the running containers on it.

A sample reads the pool, then Docker, then the pool again: a GPU counts as free only
where both reads say so, so that a start granted between two reads is not a breach. Each
sample in breach counts once per kind (the counts are breach-seconds at one sample a
second).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuspawner.engine.base import Seen

GONE_GRACE = 5.0  # seconds from a container's end to its GPUs' release, at most
DETAILS = 50  # breaches said in words, the first ones of a run
KINDS = ("two_holders", "running_on_free", "parked_on_free", "held_after_gone")
Who = tuple[str, str]  # (user, server)


@dataclass(frozen=True)
class Gpu:
    """One GPU of the pool's report, as the checks read it."""

    uuid: str
    state: str
    holder: Who | None
    parked: tuple[Who, ...] = ()
    busy: bool = False  # the hub's telemetry: utilisation at or over the busy threshold


@dataclass(frozen=True)
class Running:
    """A running container of the hub's server, as Docker says."""

    user: str
    server: str
    uuids: tuple[str, ...]


@dataclass(frozen=True)
class Sample:
    at: float  # Unix seconds
    before: tuple[Gpu, ...]  # the pool, read before Docker
    docker: tuple[Running, ...]
    after: tuple[Gpu, ...]  # the pool, read after Docker


def gpus_of(report: Mapping[str, Any], threshold: float) -> tuple[Gpu, ...]:
    """The pool report's GPUs (`GET /hub/api/gpus`); busy where the hub's telemetry is."""

    def who(entry: Mapping[str, Any] | None) -> Who | None:
        return None if not entry else (str(entry["user"]), str(entry["server"]))

    found = []
    for g in report.get("gpus", []):
        telemetry = g.get("telemetry") or {}
        use = telemetry.get("utilization_percent")
        found.append(
            Gpu(
                str(g["uuid"]),
                str(g["state"]),
                who(g.get("holder")),
                tuple(w for p in g.get("parked") or [] if (w := who(p)) is not None),
                use is not None and float(use) >= threshold,
            )
        )
    return tuple(found)


def running_of(containers: Iterable[Seen], hub: str) -> tuple[Running, ...]:
    """The hub's running servers that hold GPUs, from gpuspawner's one reader of labels."""
    return tuple(
        Running(c.server.user, c.server.server, tuple(c.server.uuids))
        for c in containers
        if c.running and c.server is not None and c.of_hub(hub) and c.server.uuids
    )


def on_gpus(docker: Sequence[Running]) -> dict[str, set[Who]]:
    """GPU → who runs a container on it."""
    found: dict[str, set[Who]] = {}
    for r in docker:
        for uuid in r.uuids:
            found.setdefault(uuid, set()).add((r.user, r.server))
    return found


class Watch:
    """The checks over a run's samples, in order: the third needs to have seen a container
    before it can say that it is gone."""

    def __init__(self, grace: float = GONE_GRACE, origin: float = 0.0) -> None:
        self.grace, self.origin = grace, origin  # origin: the run's start, for its words
        self.seen: set[tuple[str, Who]] = set()  # (GPU, holder) whose container Docker showed
        self.missing_since: dict[tuple[str, Who], float] = {}
        self.counts: Counter[str] = Counter({kind: 0 for kind in KINDS})
        self.details: list[str] = []  # the first DETAILS breaches, for the run's reader

    def check(self, sample: Sample) -> Counter[str]:
        found: Counter[str] = Counter()
        running = on_gpus(sample.docker)
        before = {g.uuid: g for g in sample.before}
        for gpu in sample.after:
            there = running.get(gpu.uuid, set())
            parked = set(gpu.parked) | set(before[gpu.uuid].parked if gpu.uuid in before else ())
            earlier = before.get(gpu.uuid)

            def reads(*states: str, gpu: Gpu = gpu, earlier: Gpu | None = earlier) -> bool:
                return gpu.state in states and (earlier is None or earlier.state in states)

            free = reads("free")
            nobodys = reads("free", "parked")  # parked: free to take, parked work on it
            breached = [
                ("two_holders", len(there) > 1 + len(parked & there)),
                ("running_on_free", nobodys and bool(there - parked)),
                ("parked_on_free", free and bool(there) and there <= parked),
                ("held_after_gone", gpu.holder is not None
                 and self._gone_too_long(gpu, there, sample.at)),
            ]  # fmt: skip
            for kind in (kind for kind, breach in breached if breach):
                found[kind] += 1
                self._say(sample.at, kind, gpu, earlier, there)
        self.counts.update(found)
        return found

    def _say(self, at: float, kind: str, gpu: Gpu, earlier: Gpu | None, there: set[Who]) -> None:
        if len(self.details) < DETAILS:
            self.details.append(
                f"{at - self.origin:.2f} s: {kind} on {gpu.uuid}: pool {gpu.state} (before: "
                f"{earlier.state if earlier else '?'}), holder {gpu.holder}, parked "
                f"{list(gpu.parked)}; Docker runs {sorted(there)}"
            )

    def _gone_too_long(self, gpu: Gpu, there: set[Who], at: float) -> bool:
        assert gpu.holder is not None
        key = (gpu.uuid, gpu.holder)
        if gpu.holder in there:
            self.seen.add(key)
            self.missing_since.pop(key, None)
            return False
        if key not in self.seen:
            return False  # not started yet: a grant comes before its container
        since = self.missing_since.setdefault(key, at)
        return at - since > self.grace


def books_differ(gpus: Sequence[Gpu], docker: Sequence[Running]) -> list[str]:
    """Where the books and Docker's word differ, GPU by GPU, said for a reader; [] if none."""
    running = on_gpus(docker)
    differences = []
    for gpu in gpus:
        booked = ({gpu.holder} if gpu.holder else set()) | set(gpu.parked)
        there = running.pop(gpu.uuid, set())
        if booked != there:
            differences.append(f"{gpu.uuid}: books {sorted(booked)}, Docker {sorted(there)}")
    differences += [f"{uuid}: not in the books, Docker {sorted(w)}" for uuid, w in running.items()]
    return differences


ROW = ("at", "free", "held", "busy", "parked", "containers", *KINDS)


def row(sample: Sample, breaches: Mapping[str, int], origin: float) -> dict[str, Any]:
    """One line of the samples' CSV: seconds from the start, the pool's counts, breaches."""
    return {
        "at": round(sample.at - origin, 2),
        "free": sum(g.state == "free" for g in sample.after),
        "held": sum(g.holder is not None for g in sample.after),
        "busy": sum(g.busy for g in sample.after),
        "parked": sum(len(g.parked) for g in sample.after),
        "containers": len(sample.docker),
        **{kind: breaches.get(kind, 0) for kind in KINDS},
    }
