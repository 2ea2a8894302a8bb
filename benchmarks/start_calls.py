"""Start calls: the Docker API requests of one server's start, GPUSpawner with 1 GPU against
plain DockerSpawner, same image, counted by a proxy in front of dockerd (tests/dockerfaults.py)
from the spawn request until the server is ready. Deterministic where spawn_overhead.py's
times are noisy: prints each start's calls in order, then their counts side by side.

    .venv/bin/python benchmarks/start_calls.py
"""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from figures import machine
from realhub import Hub
from spawn_overhead import GPU_HUB, PLAIN_HUB, spawn_ready, stop_settled

if TYPE_CHECKING:
    from dockerfaults import DockerFaults

# No poll of the server and no monitor tick within the window: only the start's own calls.
QUIET = "\nc.DockerSpawner.poll_interval = 3600\nc.GPUSpawner.monitor_interval = 3600\n"


def start_calls(proxy: DockerFaults, hub: Hub, **options: str) -> list[str]:
    """The requests Docker saw from `hub` between a spawn request and the server's ready."""
    first = len(proxy.seen)
    spawn_ready(hub, "bench", **options)
    calls = [f"{method} {_generic(path)}" for method, path in proxy.seen[first:]]
    stop_settled(hub, "bench")
    return calls


GENERIC = [  # the names and ids in a path, as placeholders: the same for both hubs
    (re.compile(r"^/containers/[0-9a-f]{64}(?=/)"), "/containers/{id}"),
    (re.compile(r"^/containers/(?!{id}/)[^/]+(?=/)"), "/containers/{name}"),
    (re.compile(r"^/images/.+/json$"), "/images/{image}/json"),
    (re.compile(r"^/volumes/(?!create$)[^/]+$"), "/volumes/{name}"),
]


def _generic(path: str) -> str:
    for pattern, placeholder in GENERIC:
        path = pattern.sub(placeholder, path)
    return path


def main() -> None:
    from dockerfaults import DockerFaults  # from tests/, which importing figures put on the path

    workdir = Path(tempfile.mkdtemp(prefix="gpuspawner-bench-"))
    with DockerFaults() as proxy:
        env = {"DOCKER_HOST": proxy.docker_host}
        gpu = Hub(workdir / "gpu", GPU_HUB + QUIET, env=env)
        plain = Hub(workdir / "plain", PLAIN_HUB + QUIET, env=env)
        try:
            for hub in (gpu, plain):
                hub.start()
                hub.add_users("bench")
            found = {"GPUSpawner": start_calls(proxy, gpu, profile="gpu-1")}
            found["DockerSpawner"] = start_calls(proxy, plain)
        finally:
            for hub in (gpu, plain):
                hub.stop()
                hub.remove_containers()
                hub.remove_volumes()
    print(f"machine: {machine()}; one start each, spawn request to ready")
    for name, calls in found.items():
        print(f"\n{name}: {len(calls)} Docker API calls")
        for number, call in enumerate(calls, 1):
            print(f"  {number:2}. {call}")
    counts = {name: Counter(calls) for name, calls in found.items()}
    print(f"\n{'call':44} {'GPUSpawner':>10} {'DockerSpawner':>13}")
    for call in sorted(set().union(*counts.values())):
        print(f"{call:44} {counts['GPUSpawner'][call]:>10} {counts['DockerSpawner'][call]:>13}")
    totals = [len(calls) for calls in found.values()]
    print(f"{'total':44} {totals[0]:>10} {totals[1]:>13}")


if __name__ == "__main__":
    main()
