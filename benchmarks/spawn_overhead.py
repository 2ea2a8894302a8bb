"""Spawn overhead: time from the spawn request to a ready server, GPUSpawner with 1 GPU
against plain DockerSpawner, same image, same machine, two hubs side by side, alternating
runs. Prints medians, ranges and the ratios, the median ratio within a pair with its 95 %
bootstrap interval (target ≤ 1.02).

Both hubs check that a started server answers every 20 ms (`STEADY_READY_CHECK`), where
JupyterHub waits a random 0–0.2 s, then 0–0.4 s, … up to 0–5 s between tries: that wait
alone spreads a 4-second start by about a second either way, a spread that hid any
difference of a few percent (over 20 pairs, a median pair ratio anywhere in 0.88–1.13 with
the same spawner on both sides).

    .venv/bin/python benchmarks/spawn_overhead.py [pairs=20]
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from figures import machine, summary
from realhub import Hub

STEADY_READY_CHECK = """
import jupyterhub.utils
_backoff = jupyterhub.utils.exponential_backoff
def _steady(*args, **kwargs):
    kwargs.update(start_wait=0.02, scale_factor=1, max_wait=0.02)
    return _backoff(*args, **kwargs)
jupyterhub.utils.exponential_backoff = _steady  # what wait_for_http_server calls
"""
GPU_HUB = (
    STEADY_READY_CHECK
    + """
c.GPUSpawner.simulate_gpus = 8
c.GPUSpawner.profiles = [{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1}]
"""
)
PLAIN_HUB = (
    STEADY_READY_CHECK
    + """
c.JupyterHub.spawner_class = "docker"
# The tests' role without gpuspawner's own scope: only a hub with a GPUSpawner defines it.
c.JupyterHub.load_roles[0]["scopes"].remove("custom:gpus:admin")
"""
)
SETTLE_SECONDS = 2


def time_to_ready(hub: Hub, user: str, **options: str) -> float:
    elapsed = spawn_ready(hub, user, **options)
    stop_settled(hub, user)
    return elapsed


def spawn_ready(hub: Hub, user: str, **options: str) -> float:
    """Seconds from the spawn request until `user`'s server is ready."""
    started = time.perf_counter()
    response = hub.spawn(user, **options)
    assert response.status_code in (201, 202), response.text
    hub.wait_ready(user)
    return time.perf_counter() - started


def stop_settled(hub: Hub, user: str) -> None:
    hub.stop_server(user)
    time.sleep(SETTLE_SECONDS)  # let the removed container's teardown finish before the next run


def main(pairs: int) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="gpuspawner-bench-"))
    gpu, plain = Hub(workdir / "gpu", GPU_HUB), Hub(workdir / "plain", PLAIN_HUB)
    try:
        for hub in (gpu, plain):
            hub.start()
            hub.add_users("bench")
        time_to_ready(gpu, "bench", profile="gpu-1")  # warm both: page cache, image layers
        time_to_ready(plain, "bench")
        gpu_times, plain_times = [], []
        for pair in range(pairs):
            order = [(gpu, gpu_times, {"profile": "gpu-1"}), (plain, plain_times, {})]
            for hub, times, options in order if pair % 2 == 0 else reversed(order):
                times.append(time_to_ready(hub, "bench", **options))
    finally:
        for hub in (gpu, plain):
            hub.stop()
            hub.remove_containers()
    ratios = [g / p for g, p in zip(gpu_times, plain_times, strict=True)]
    print(f"machine: {machine()}; {pairs} alternating pairs, request to ready")
    print(f"GPUSpawner (1 GPU):  {summary(gpu_times)}")
    print(f"DockerSpawner:       {summary(plain_times)}")
    medians = statistics.median(gpu_times) / statistics.median(plain_times)
    low, high = bootstrap_interval(ratios)
    print(f"ratio of medians:    {medians:.3f}")
    print(
        f"ratio within a pair: median {statistics.median(ratios):.3f} (95 % interval "
        f"{low:.3f} – {high:.3f}; target ≤ 1.02), range {min(ratios):.2f} – {max(ratios):.2f}"
    )


def bootstrap_interval(ratios: list[float], rounds: int = 10_000) -> tuple[float, float]:
    """The 95 % interval of the median pair ratio, from the pairs resampled (seeded)."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(rounds))
    return medians[round(0.025 * rounds)], medians[round(0.975 * rounds) - 1]


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
