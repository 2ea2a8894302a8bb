"""The monitor's look at Docker at scale: N running GPU containers of a hub on a 64-GPU
machine, and the time and CPU of one look (`DockerEngine.containers`, what each monitor tick
asks of Docker: `docker ps -a`, the events since the last look, and an inspect of each
container that is new or changed); the first look, which inspects them all, and a tick's.

The containers are labelled as the hub labels its servers and ask for their GPUs by UUID as
it does (simulated UUIDs, through the testbed's stand-in hook), and run `sleep`, so that 500
fit on a small machine; the look reads only their labels and host configs.

    .venv/bin/python benchmarks/monitor_tick.py [containers=500] [looks=10]
"""

from __future__ import annotations

import concurrent.futures
import os
import sys
import time

from figures import machine, summary

from gpuspawner.core.pool import Grant, Holder
from gpuspawner.core.units import bare
from gpuspawner.engine.docker import DockerEngine, api_client, device_requests
from gpuspawner.engine.inspects import EVENTS_OVERLAP
from gpuspawner.engine.labels import labels

GPUS = [f"GPU-bench-tick-{i:02d}" for i in range(64)]
HUB = "bench-tick"
BASE_IMAGE = "gpuspawner-base:bookworm"


def cpu_seconds() -> float:
    """The machine's CPU time so far (every process: the hub side and dockerd's)."""
    with open("/proc/stat") as stat:
        user, nice, system, _idle, _iowait, irq, softirq, *_ = map(int, stat.readline().split()[1:])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def start(client, n: int) -> str:
    grant = Grant(Holder(n + 1, n + 1, f"u{n:03d}", ""), (bare(GPUS[n % len(GPUS)]),), time.time())
    container = client.create_container(
        BASE_IMAGE,
        ["sleep", "infinity"],
        name=f"{HUB}-u{n:03d}",
        labels=labels(grant, HUB),
        host_config=client.create_host_config(
            init=True, device_requests=device_requests(grant.uuids), mem_limit="16m"
        ),
    )
    client.start(container["Id"])
    return container["Id"]


def look(engine: DockerEngine, containers: int) -> tuple[float, float]:
    """One look at the containers: its seconds, and the machine's CPU-seconds."""
    cpu_before, started = cpu_seconds(), time.perf_counter()
    seen = engine.containers()
    seconds, cpu = time.perf_counter() - started, cpu_seconds() - cpu_before
    ours = [c for c in seen if c.server and c.server.hub == HUB]
    assert len(ours) == containers, f"{len(ours)} of {containers} seen"
    return seconds, cpu


def main(containers: int, looks: int) -> None:
    client = api_client({})
    engine = DockerEngine(client)
    made: list[str] = []
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            made = list(pool.map(lambda n: start(client, n), range(containers)))
        cold, cold_cpu = look(engine, containers)  # the first look inspects every container
        time.sleep(EVENTS_OVERLAP + 1)  # a tick's interval: the starts' events behind it
        warm = [look(engine, containers) for _ in range(looks)]
    finally:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda c: client.remove_container(c, force=True), made))
    print(f"machine: {machine()}; {containers} running GPU containers on {len(GPUS)} GPUs")
    print(f"first look (the hub's first tick):  {cold:.3g} s, {cold_cpu:.3g} CPU-s")
    print(f"a tick's look, nothing changed:     {summary([s for s, _ in warm])}")
    print(f"  machine CPU per look:             {summary([c for _, c in warm], 'CPU-s')}")


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    main(*(args + [500, 10][len(args) :]))
