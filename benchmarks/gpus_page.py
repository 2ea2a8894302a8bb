"""The admin's view at scale: `GET /hub/api/gpus` and the GPUs page (`/hub/gpus`) on a hub
with 200 users, 64 GPUs each held by a running server, and 100 jobs waiting for them;
each asked N times, one after another, through the proxy as an admin's browser and a
dashboard ask. Prints p50 and p99 (and the answer's size), and checks what they show.

The servers run `figures.TINY_SERVER`; the jobs wait (no GPU is free), so none runs.

    .venv/bin/python benchmarks/gpus_page.py [requests=200]
"""

from __future__ import annotations

import concurrent.futures
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import requests
from figures import TINY_SERVER, machine, percentile
from realhub import Hub

USERS, GPUS, JOBS = 200, 64, 100
CONFIG = f"""
c.GPUSpawner.simulate_gpus = {GPUS}
c.GPUSpawner.profiles = [{{
    "display_name": "1 GPU, light", "slug": "light", "gpus": 1,
    "spawner_override": {TINY_SERVER!r},
}}]
c.GPUSpawner.default_limits = {{"max_wait": 86400}}
c.JupyterHub.concurrent_spawn_limit = 100
"""


def timed(ask: Callable[[], requests.Response], times: int) -> tuple[list[float], int]:
    """Each answer's seconds, and the last answer's size in bytes."""
    seconds, size = [], 0
    for _ in range(times):
        started = time.perf_counter()
        answer = ask()
        seconds.append(time.perf_counter() - started)
        answer.raise_for_status()
        size = len(answer.content)
    return seconds, size


def figure(seconds: list[float], size: int) -> str:
    return (
        f"p50 {percentile(seconds, 0.5) * 1000:.1f} ms, p99 {percentile(seconds, 0.99) * 1000:.1f}"
        f" ms, max {max(seconds) * 1000:.1f} ms (n={len(seconds)}; {size / 1024:.0f} KiB)"
    )


def main(times: int) -> None:
    hub = Hub(Path(tempfile.mkdtemp(prefix="gpuspawner-bench-")), CONFIG)
    users = [f"u{i:03d}" for i in range(USERS)]
    holders, submitters = users[:GPUS], users[USERS - JOBS :]
    try:
        hub.start()
        hub.add_users("admin", *users)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda user: hub.spawn_ready(user, profile="light"), holders))
        for user in submitters:
            body = {"profile": "light", "script": "train.py"}
            hub.api("POST", f"/users/{user}/gpu-jobs", json=body).raise_for_status()
        report = hub.pool()
        assert report["by_state"]["allocated"] == GPUS and report["free"] == 0, report["by_state"]
        assert len(report["jobs"]) == JOBS, len(report["jobs"])
        admin = hub.login("admin")
        page = admin.get(f"{hub.url}/hub/gpus", timeout=30)
        assert all(user in page.text for user in holders + submitters), "the page misses some"
        for _ in range(5):  # warm: templates compiled, connections open
            hub.pool()
        api = timed(lambda: hub.api("GET", "/gpus"), times)
        html = timed(lambda: admin.get(f"{hub.url}/hub/gpus", timeout=30), times)
    finally:
        hub.stop()
        hub.remove_containers()
        hub.remove_volumes()
    print(f"machine: {machine()}; {USERS} users, {GPUS} GPUs held by {GPUS} servers, "
          f"{JOBS} jobs waiting")  # fmt: skip
    print(f"GET /hub/api/gpus (a token):        {figure(*api)}")
    print(f"GET /hub/gpus (an admin's session): {figure(*html)}")


if __name__ == "__main__":
    main(*[int(a) for a in sys.argv[1:2]] or [200])
