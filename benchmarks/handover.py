"""Handover in the waiting line: with 100 starts waiting on a full pool, how long from a
server's end until the next in line has its GPUs, and until its container is created.

Two measurements:

1. In the hub's own code: the broker, its pool and its line on one event loop, 100 waiters
   on 4 GPUs; from the hub's word that a server ended, through the removal in the broker's
   worker thread (the engine stand-in confirms it at once), until the next waiter's start
   has its GPUs. This is all that
   gpuspawner adds to a handover; the target is 100 ms.
2. On the real stack: a real hub and dockerd, 4 simulated GPUs held, 100 users waiting (each
   a pending spawn in JupyterHub); a server is stopped, and Docker's own event stream times
   its container's `destroy` and the next waiter's container `create`. Between the two lie
   gpuspawner's confirmation and handover, and DockerSpawner's and Docker's calls to create
   the container (the waiters' home volumes exist already, as for returning users).

    .venv/bin/python benchmarks/handover.py [waiters=100] [handovers=4]
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import queue
import sys
import tempfile
import threading
import time
from pathlib import Path

import docker
from doubles import GoneEngine  # every container already gone (tests/doubles.py)
from figures import machine, summary
from realhub import Hub

from gpuspawner.config.settings import GPUSettings
from gpuspawner.config.site import GPUSite
from gpuspawner.core.pool import Grant, Holder
from gpuspawner.core.units import Request
from gpuspawner.hub.books.broker import Broker

GPUS = 4
WAIT = {"max_wait": 3600}
CONFIG = f"""
c.GPUSpawner.simulate_gpus = {GPUS}
c.GPUSpawner.default_limits = {{"max_wait": 3600}}
c.GPUSpawner.monitor_interval = 3600  # the line moves on events alone
c.GPUSpawner.profiles = [{{
    "display_name": "1 GPU, light", "slug": "light", "gpus": 1,
    "spawner_override": {{"cmd": ["python3", "-m", "http.server", "8888"], "mem_limit": "64M",
                          "extra_host_config": {{"init": True}}}},
}}]
c.JupyterHub.concurrent_spawn_limit = 0  # a waiting start is a pending spawn to JupyterHub
c.DockerSpawner.start_timeout = 60
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 0.5}}  # 202 at once for a waiter
"""


async def in_the_hub(waiters: int, handovers: int) -> list[float]:
    site = GPUSite.from_config(GPUSettings(simulate_gpus=GPUS, default_limits=WAIT))
    broker = Broker(site, GoneEngine(), "jupyter", logging.getLogger("bench"))
    limits = site.limits.for_user(set())
    one = Request(gpus=1)

    def start(key: int) -> asyncio.Future[Grant]:
        holder = Holder(key, key, f"u{key}")
        return asyncio.ensure_future(broker.line.take(holder, "light", "1 GPU", one, limits))

    held = collections.deque([await start(key) for key in range(GPUS)])
    line = [start(GPUS + i) for i in range(waiters)]
    await asyncio.sleep(0)  # every start has joined the line
    assert len(broker.line.standings()) == waiters
    times = []
    for nxt in line[:handovers]:
        ended = held.popleft()
        begun = time.perf_counter()
        broker.release_when_gone(ended.key)  # removal (answered at once) and handover
        grant = await nxt
        times.append(time.perf_counter() - begun)
        assert grant.ids == ended.ids, "the next in line got other GPUs than those freed"
        held.append(grant)
    for waiter in line[handovers:]:
        waiter.cancel()
    await asyncio.gather(*line[handovers:], return_exceptions=True)
    broker.executor.shutdown(wait=False)
    return times


def docker_events(client: docker.DockerClient, prefix: str, into: queue.Queue) -> threading.Event:
    """Docker's container events for this hub's containers, with Docker's own timestamps."""
    stop = threading.Event()

    def follow() -> None:
        stream = client.events(decode=True, filters={"type": "container"})
        for event in stream:
            name = event.get("Actor", {}).get("Attributes", {}).get("name", "")
            if name.startswith(prefix):
                into.put((event["Action"], name, event["timeNano"] / 1e9))
            if stop.is_set():
                stream.close()
                return

    threading.Thread(target=follow, daemon=True).start()
    return stop


def on_the_stack(waiters: int, handovers: int) -> list[float]:
    hub = Hub(Path(tempfile.mkdtemp(prefix="gpuspawner-bench-")), CONFIG)
    holders = [f"h{i}" for i in range(GPUS)]
    users = [f"w{i:03d}" for i in range(waiters)]
    client = docker.from_env()
    times = []
    try:
        hub.start()
        hub.add_users(*holders, *users)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            # every waiter's home first (a returning user's), then the GPUs taken
            list(pool.map(lambda u: hub.spawn_ready(u, profile="light"), users[:GPUS]))
            for user in users[:GPUS]:
                hub.stop_server(user)
            list(pool.map(lambda u: hub.spawn_ready(u, profile="light"), holders))
            statuses = list(pool.map(lambda u: hub.spawn(u, profile="light").status_code, users))
        assert set(statuses) == {202}, statuses
        hub.wait_for(lambda: len(hub.pool()["waiting"]) == waiters, 120, "everyone in line")
        events: queue.Queue = queue.Queue()
        stop = docker_events(client, hub.prefix, events)
        for ended in holders[:handovers]:
            head = hub.pool()["waiting"][0]["user"]
            hub.api("DELETE", f"/users/{ended}/servers/")
            destroyed = created = None
            while created is None:
                action, name, at = events.get(timeout=60)
                if action == "destroy" and ended in name:
                    destroyed = at
                elif action == "create" and head in name:
                    created = at
            assert destroyed is not None and destroyed <= created, (destroyed, created)
            times.append(created - destroyed)
            hub.wait_ready(head)
        stop.set()
    finally:
        hub.stop()
        hub.remove_containers()
        hub.remove_volumes()
    return times


def main(waiters: int, handovers: int) -> None:
    print(f"machine: {machine()}; {GPUS} GPUs held, {waiters} starts waiting")
    hub_times = asyncio.run(in_the_hub(waiters, min(waiters, handovers * 4)))
    print(
        f"in the hub: a server ends → the next in line holds its GPUs: "
        f"{summary(hub_times, 'ms', 1000)}  (target < 100 ms)"
    )
    stack_times = on_the_stack(waiters, handovers)
    print(
        f"real stack: Docker's destroy of the ended server → create of the next one's container: "
        f"{summary(stack_times, 'ms', 1000)}"
    )


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    main(*(args + [100, 4][len(args) :]))
