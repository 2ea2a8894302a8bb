"""Event-loop lag of the hub while the GPU monitor samples 64 GPUs every 2 seconds.

Runs the hub's Monitor on an asyncio loop, over NVML answering like a driver does (the test
double, slowed to 100 µs a call, which is slow for a real driver) and the real dockerd, with a
Prometheus scrape of the pool every 5 s, and measures how late a 5 ms ticker on that loop
wakes up. For contrast, the same with the sampling done on the loop itself.

    .venv/bin/python benchmarks/event_loop_lag.py [seconds=30]
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time

import docker
from figures import machine, percentile
from nvml_double import FakeGPU, FakeNVML

from gpuspawner.config.settings import GPUSettings
from gpuspawner.config.site import GPUSite
from gpuspawner.devices.nvml import NvmlSource
from gpuspawner.engine.docker import DockerEngine
from gpuspawner.hub.books.broker import Broker
from gpuspawner.hub.watch.metrics import PoolCollector
from gpuspawner.hub.watch.monitor import Monitor

GPUS = 64
CALL_SECONDS = 100e-6
TICK = 0.005


class DriverPacedNVML(FakeNVML):
    def _check(self) -> None:
        time.sleep(CALL_SECONDS)
        super()._check()


async def lag_while(
    monitor: Monitor, collector: PoolCollector, seconds: float, on_loop: bool
) -> list[float]:
    lags: list[float] = []

    async def sample_on_loop() -> None:
        while True:
            monitor.apply(monitor.observe())
            await asyncio.sleep(monitor.interval_seconds)

    async def scrape() -> None:
        while True:
            list(collector.collect())
            await asyncio.sleep(5)

    tasks = [asyncio.create_task(scrape())]
    if on_loop:
        tasks.append(asyncio.create_task(sample_on_loop()))
    else:
        monitor.start()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        before = time.perf_counter()
        await asyncio.sleep(TICK)
        lags.append(time.perf_counter() - before - TICK)
    monitor.stop()
    for task in tasks:
        task.cancel()
    return lags


async def main(seconds: float) -> None:
    nvml = DriverPacedNVML(
        [FakeGPU(f"GPU-{i:08d}-0000-0000-0000-000000000000") for i in range(GPUS)]
    )
    site = GPUSite.from_config(GPUSettings(), source=NvmlSource(nvml))
    log = logging.getLogger("bench")
    broker = Broker(site, DockerEngine(docker.APIClient()), "bench", log)
    broker.install()
    monitor = Monitor(broker, log, interval_seconds=2.0)
    collector = PoolCollector()
    started = time.perf_counter()
    monitor.observe()
    per_sample = time.perf_counter() - started
    print(
        f"machine: {machine()}; {GPUS} GPUs, NVML at {CALL_SECONDS * 1e6:.0f} µs a call, "
        f"one sample of all GPUs + Docker takes {per_sample * 1e3:.0f} ms"
    )
    for title, on_loop in (("in a worker thread (as the hub does)", False), ("on the loop", True)):
        lags = await lag_while(monitor, collector, seconds, on_loop)
        print(
            f"sampling {title}: loop lag p50 {percentile(lags, 0.5) * 1e3:.2f} ms, "
            f"p99 {percentile(lags, 0.99) * 1e3:.2f} ms, max {max(lags) * 1e3:.1f} ms "
            "(target max < 20 ms)"
        )


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1]) if len(sys.argv) > 1 else 30))
