"""Hub restart recovery: 100 running GPU containers, then kill -9 of the hub and a restart.
Prints how long gpuspawner's rebuild of the pool takes (target < 2 s beyond the hub's own
start), how long the whole restart takes, and checks the rebuilt pool is exact.

The servers run a tiny HTTP server instead of JupyterLab (`figures.TINY_SERVER`), so that
1,000 fit on a small machine; the rebuild reads only their labels and device requests,
which are the same.

    .venv/bin/python benchmarks/restart_recovery.py [servers=100] [restarts=3]
    .venv/bin/python benchmarks/restart_recovery.py 1000 1   # about 12 GB here
"""

from __future__ import annotations

import concurrent.futures
import re
import sys
import tempfile
import time
from pathlib import Path

from figures import TINY_SERVER, machine, summary
from realhub import Hub

CONFIG = """
c.GPUSpawner.simulate_gpus = {gpus}
c.GPUSpawner.profiles = [{{
    "display_name": "1 GPU, light", "slug": "light", "gpus": 1,
    "spawner_override": {server!r},
}}]
c.JupyterHub.cleanup_servers = False
c.JupyterHub.concurrent_spawn_limit = 200
c.JupyterHub.init_spawners_timeout = 120
"""
REBUILT = re.compile(r"books rebuilt from (\d+) container\(s\) in ([0-9.]+) s")


def main(servers: int, restarts: int) -> None:
    config = CONFIG.format(gpus=servers, server=TINY_SERVER)
    hub = Hub(Path(tempfile.mkdtemp(prefix="gpuspawner-bench-")), config)
    users = [f"u{i:03d}" for i in range(servers)]
    rebuilds, restarts_s = [], []
    try:
        hub.start()
        hub.add_users(*users)
        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            list(pool.map(lambda user: hub.spawn_ready(user, profile="light"), users))
        for _ in range(restarts):
            hub.kill()
            hub.log_file.write_text("")
            started = time.perf_counter()
            hub.start(wait=False)
            hub.wait_until_up(timeout=60 + servers)  # JupyterHub checks every server first
            restarts_s.append(time.perf_counter() - started)
            count, seconds = REBUILT.search(hub.log()).groups()
            assert int(count) == servers, count
            rebuilds.append(float(seconds))
            pool_now = hub.pool()
            assert pool_now["by_state"]["allocated"] == servers and pool_now["free"] == 0
            held = [g["holder"]["user"] for g in pool_now["gpus"]]
            assert sorted(held) == users, "a server lost or gained a GPU in the restart"
    finally:
        hub.stop()
        hub.remove_containers()
        hub.remove_volumes()
    print(f"machine: {machine()}; {servers} running GPU containers, kill -9 then restart")
    print(f"pool rebuilt by gpuspawner:        {summary(rebuilds)}  (target < 2 s)")
    print(f"hub restart to API answering:      {summary(restarts_s)}")
    print("rebuilt pool exact each time: every server kept its GPU, none free, none twice")


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    main(*(args + [100, 3][len(args) :]))
