"""Prometheus metrics, in the hub's default registry, so they appear at /hub/metrics.

Gauges are read from the pool and the monitor's latest sample at scrape
time (a collector), so they are never stale or half-updated. Labels are
bounded: per GPU (uuid, index, model), per quota group, per refusal reason;
never per user.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..core.pool import DeviceState
from .broker import Broker, BrokerNotRunning

SPAWNS_REFUSED = Counter(
    "gpuspawner_spawns_refused_total",
    "Spawns refused before a container was made, by reason: capacity (not enough free "
    "GPUs), limit (a group limit), invalid_options (bad user_options).",
    ["reason"],
)
for _reason in ("capacity", "limit", "invalid_options"):
    SPAWNS_REFUSED.labels(_reason)  # at zero from the start, so rate() sees the first one

ALLOCATION_SECONDS = Histogram(
    "gpuspawner_allocation_duration_seconds",
    "Time to decide an allocation: limits checked and GPUs chosen, under the pool's lock.",
    buckets=(0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05),
)

GPU_LABELS = ["uuid", "index", "model"]
NO_GROUP = "(none)"


class PoolCollector(Collector):
    """The running broker's books, read at scrape time."""

    def collect(self) -> Iterator[Metric]:
        try:
            broker = Broker.current()
        except BrokerNotRunning:
            return
        pool = broker.pool
        states = pool.states()
        by_state = GaugeMetricFamily(
            "gpuspawner_gpus",
            "GPUs in the pool by state (stopping: the server ended, Docker has not yet "
            "confirmed its container gone).",
            labels=["state"],
        )
        for state in DeviceState:
            by_state.add_metric([state.value], sum(s is state for s in states.values()))
        by_state.add_metric(["excluded"], len(broker.site.excluded))
        yield by_state

        held = GaugeMetricFamily(
            "gpuspawner_gpus_held", "GPUs held, by the quota group charged.", labels=["group"]
        )
        groups: dict[str, int] = {}
        for grant in pool.grants():
            group = grant.quota_group or NO_GROUP
            groups[group] = groups.get(group, 0) + len(grant.uuids)
        for group, count in sorted(groups.items()):
            held.add_metric([group], count)
        yield held

        yield from self._per_gpu(broker, states)

    def _per_gpu(self, broker: Broker, states: dict[str, DeviceState]) -> Iterator[Metric]:
        families = {
            name: GaugeMetricFamily(f"gpuspawner_gpu_{name}", text, labels=GPU_LABELS)
            for name, text in [
                ("allocated", "1 if a server holds this GPU (running or stopping), else 0."),
                ("healthy", "1 if NVML reports this GPU healthy, else 0."),
                ("utilization_ratio", "GPU utilisation, 0 to 1, at the last sample."),
                ("memory_used_bytes", "GPU memory in use at the last sample."),
                ("memory_total_bytes", "GPU memory in all."),
                ("temperature_celsius", "GPU temperature at the last sample."),
                ("power_watts", "GPU power draw at the last sample, where the board reports it."),
                ("idle_seconds", "How long the server holding this GPU has had all its GPUs idle."),
            ]
        }
        idle_since = {
            u: broker.idle.idle_since.get(g.key) for g in broker.pool.grants() for u in g.uuids
        }
        now = broker.clock()
        for gpu in broker.site.gpus:
            labels = [gpu.uuid, str(gpu.index), gpu.model]
            sample = broker.telemetry.get(gpu.uuid)
            idle = idle_since.get(gpu.uuid)
            values = {
                "allocated": float(gpu.uuid in idle_since),
                "healthy": float(states[gpu.uuid] is not DeviceState.UNHEALTHY),
                "memory_total_bytes": float(gpu.memory_total_bytes),
                "idle_seconds": now - idle if idle is not None else 0.0,
            }
            if sample is not None:
                readings = {
                    "utilization_ratio": (
                        None
                        if sample.utilization_percent is None
                        else sample.utilization_percent / 100
                    ),
                    "memory_used_bytes": sample.memory_used_bytes,
                    "temperature_celsius": sample.temperature_celsius,
                    "power_watts": sample.power_watts,
                }
                values.update({k: float(v) for k, v in readings.items() if v is not None})
            for name, value in values.items():
                families[name].add_metric(labels, value)
        yield from families.values()


_registered = False


def register_once() -> None:
    """Add the pool's gauges to the hub's /hub/metrics, once per process."""
    global _registered
    if not _registered:
        REGISTRY.register(PoolCollector())
        _registered = True
