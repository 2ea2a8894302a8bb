"""Allocation under contention: 10,000 allocate/release operations from 200 users at once on a
64-GPU pool, through the spawner's code path (group limits checked inside the pool's lock).

Run twice: as the hub runs it (200 concurrent tasks on one asyncio loop), and from 32 OS
threads at once (the worst case: the monitor's thread shares the pool). Prints decision
latency p50/p99 and checks, against a ledger of its own, that no GPU was ever held twice.

    .venv/bin/python benchmarks/allocation.py
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from dataclasses import dataclass, field

from figures import machine, percentile

from gpuspawner.core.limits import LimitExceeded, LimitsTable
from gpuspawner.core.pool import Holder, NotEnoughGPUs, Pool

GPUS = 64
OPERATIONS = 10_000
USERS = 200
THREADS = 32
LIMITS = LimitsTable.parse(
    {
        "students": {"max_gpus_per_server": 1, "max_gpus_per_user": 1, "max_gpus_group": 24},
        "researchers": {"max_gpus_per_user": 8},
    },
    {"max_gpus_per_user": 2},
    [],
)


@dataclass
class Run:
    pool: Pool = field(default_factory=lambda: Pool([f"GPU-{i:04d}" for i in range(GPUS)]))
    latencies: list[float] = field(default_factory=list)
    outcomes: dict[str, int] = field(
        default_factory=lambda: {"granted": 0, "capacity": 0, "limit": 0}
    )
    owner: dict[str, int] = field(default_factory=dict)  # uuid -> server, our own ledger
    violations: list[str] = field(default_factory=list)
    ledger: threading.Lock = field(default_factory=threading.Lock)

    def step(self, rng: random.Random, held: list[int], server: int) -> None:
        """One operation: release one of ours, or ask for GPUs as a random user."""
        if held and rng.random() < 0.5:
            self.release(held.pop(rng.randrange(len(held))))
            return
        user = rng.randrange(USERS)
        limits = LIMITS.for_user({"students" if user % 3 else "researchers"})
        count = rng.choice((1, 1, 1, 2, 4))
        holder = Holder(server, user, f"user{user:03d}")
        started = time.perf_counter()
        try:
            grant = self.pool.allocate(holder, count, admit=limits.admit)
        except NotEnoughGPUs:
            self.outcomes["capacity"] += 1
        except LimitExceeded:
            self.outcomes["limit"] += 1
        else:
            self.outcomes["granted"] += 1
            held.append(grant.key)
            with self.ledger:
                for uuid in grant.uuids:
                    if uuid in self.owner:
                        self.violations.append(f"{uuid}: {self.owner[uuid]} and {grant.key}")
                    self.owner[uuid] = grant.key
        finally:
            self.latencies.append(time.perf_counter() - started)

    def release(self, key: int) -> None:
        """A server ends: stopping, then released once its container is gone, as in the hub."""
        self.pool.begin_release(key)
        grant = self.pool.release(key)
        with self.ledger:
            for uuid in grant.uuids if grant else ():
                del self.owner[uuid]

    def report(self, title: str, wall: float) -> None:
        lat = self.latencies
        print(f"{title}: {OPERATIONS} operations ({len(lat)} allocations) in {wall:.2f} s")
        print(f"  outcomes {self.outcomes}")
        print(
            f"  decision latency p50 {percentile(lat, 0.5) * 1e6:.0f} µs, "
            f"p99 {percentile(lat, 0.99) * 1e6:.0f} µs, max {max(lat) * 1e6:.0f} µs "
            "(target p99 < 1000 µs)"
        )
        print(
            f"  GPUs held twice: {len(self.violations)}; free at the end: "
            f"{self.pool.free_count()} of {GPUS}"
        )
        if self.violations or self.pool.free_count() != GPUS:
            raise SystemExit("FAILED: " + "; ".join(self.violations[:5]))


async def on_one_loop() -> None:
    run = Run()

    async def user_task(seed: int) -> None:
        rng, held = random.Random(seed), []
        for n in range(OPERATIONS // USERS):
            run.step(rng, held, seed * OPERATIONS + n)
            await asyncio.sleep(0)  # other spawns interleave here, as in the hub
        for key in held:
            run.release(key)

    started = time.perf_counter()
    await asyncio.gather(*(user_task(seed) for seed in range(USERS)))
    run.report(
        f"asyncio, {USERS} concurrent tasks on the hub's one loop", time.perf_counter() - started
    )


def from_threads() -> None:
    run = Run()

    def worker(seed: int) -> None:
        rng, held = random.Random(seed), []
        for n in range(OPERATIONS // THREADS):
            run.step(rng, held, seed * OPERATIONS + n)
        for key in held:
            run.release(key)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(THREADS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    run.report(
        f"{THREADS} OS threads at once (latency includes GIL hand-offs)",
        time.perf_counter() - started,
    )


if __name__ == "__main__":
    print(f"machine: {machine()}; pool of {GPUS} GPUs, {USERS} users in two groups")
    asyncio.run(on_one_loop())
    from_threads()
