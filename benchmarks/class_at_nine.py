"""Class at 9:00: 50 users press Start at the same moment, through the real hub and dockerd,
on 8 simulated GPUs. Prints the time until every one has a running server or a clear
refusal, over repeated runs, and checks that no GPU went to two servers.

    .venv/bin/python benchmarks/class_at_nine.py [runs=3]
"""

from __future__ import annotations

import concurrent.futures
import sys
import tempfile
import time
from pathlib import Path

from figures import machine, summary
from realhub import Hub

CONFIG = """
c.GPUSpawner.simulate_gpus = 8
c.GPUSpawner.profiles = [{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1}]
c.JupyterHub.concurrent_spawn_limit = 100
"""
USERS = [f"student{i:02d}" for i in range(50)]


def one_class(hub: Hub) -> tuple[float, float]:
    """Seconds until the last refusal was answered, and until every winner was ready."""
    started = time.perf_counter()

    def press_start(user: str) -> tuple[object, float]:
        response = hub.spawn(user, profile="gpu-1")
        return response, time.perf_counter() - started

    with concurrent.futures.ThreadPoolExecutor(len(USERS)) as pool:
        answers = list(pool.map(press_start, USERS))
    responses = [response for response, _ in answers]
    answered = max(t for response, t in answers if response.status_code == 409)
    winners = [u for u, r in zip(USERS, responses, strict=True) if r.status_code in (201, 202)]
    refused = [r for r in responses if r.status_code == 409]
    assert len(winners) == 8 and len(refused) == 42, [r.status_code for r in responses]
    assert all("Not enough free GPUs" in r.json()["message"] for r in refused)
    for user in winners:
        hub.wait_ready(user)
    ready = time.perf_counter() - started
    held = [uuid for user in winners for uuid in hub.held_uuids(user)]
    assert len(held) == len(set(held)) == 8, f"a GPU given twice: {held}"
    for user in winners:
        hub.stop_server(user)
    return answered, ready


def main(runs: int) -> None:
    hub = Hub(Path(tempfile.mkdtemp(prefix="gpuspawner-bench-")), CONFIG)
    try:
        hub.start()
        hub.add_users(*USERS)
        results = [one_class(hub) for _ in range(runs)]
    finally:
        hub.stop()
        hub.remove_containers()
    print(f"machine: {machine()}; 50 users, 8 simulated GPUs, real hub and dockerd")
    print(f"42 refusals, the last one answered after: {summary([a for a, _ in results])}")
    print(f"8 servers, the last one ready after:      {summary([r for _, r in results])}")
    print("GPUs given to two servers: 0 (checked against each container's device request)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
