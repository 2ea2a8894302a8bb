"""Prometheus metrics, in the hub's default registry, so they appear at /hub/metrics (the
counters and histograms are counted where things happen: `counters`).

Gauges are read from the pool and the monitor's latest sample at scrape
time (a collector), so they are never stale or half-updated. Labels are
bounded: per GPU (uuid, index, model), per MIG instance or shared slot, per
quota group, per refusal reason; never per user.

GPUs are counted in GPU-equivalents, as limits count them: a MIG instance is
its share of its GPU, a shared GPU's slot 1/slots. On a pool of whole GPUs
that is simply the number of GPUs; `gpuspawner_units` counts units as such.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ...core.jobs import FINAL, IGNORED, JobState
from ...core.pool import DeviceState
from ...core.pool_view import with_parked
from ...core.units import Kind
from ...core.words import NO_GROUP
from ..base.counters import BOOKED_GPU_SECONDS, ENGINE_ERRORS, GPU_SECONDS_BUSY, GPU_SECONDS_HELD
from ..books.broker import Broker
from ..line import status as line_status
from .monitor import Observation

GPU_LABELS = ["uuid", "index", "model"]


@dataclass(eq=False)  # a registry keys its collectors by identity
class PoolCollector(Collector):
    """A broker's books, read at scrape time."""

    broker: Broker

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        pool = broker.pool
        states = with_parked(broker.calendar.states(pool), pool)  # drained, parked: not free
        units = pool.units
        by_state = GaugeMetricFamily(
            "gpuspawner_gpus",
            "GPUs in the pool by state, in GPU-equivalents (a MIG instance: its share of its "
            "GPU; a shared GPU's slot: 1/slots). Stopping: the server ended, Docker has not "
            "yet confirmed its container gone. Drained: free, but a drain of the calendar "
            "holds it out. Parked: free to take, with parked work waiting on it.",
            labels=["state"],
        )
        by_kind = GaugeMetricFamily(
            "gpuspawner_units",
            "What the pool hands out, by kind (gpu: a whole GPU, mig: a MIG instance, "
            "shared: a slot of a shared GPU) and state.",
            labels=["kind", "state"],
        )
        for state in DeviceState:
            now_in = [u for u in units if states[u.id] is state]
            by_state.add_metric([state.value], float(sum(u.weight for u in now_in)))
            for kind in Kind:
                by_kind.add_metric([kind.value, state.value], sum(u.kind is kind for u in now_in))
        by_state.add_metric(["excluded"], len(broker.site.excluded))
        yield by_state
        yield by_kind

        held = GaugeMetricFamily(
            "gpuspawner_gpus_held",
            "GPUs held, in GPU-equivalents, by the quota group charged.",
            labels=["group"],
        )
        groups: dict[str, Fraction] = {}
        for grant in pool.grants():
            group = grant.quota_group or NO_GROUP
            groups[group] = groups.get(group, Fraction(0)) + grant.weight
        for group, amount in sorted(groups.items()):
            held.add_metric([group], float(amount))
        yield held

        yield from self._per_gpu(broker)
        yield from self._per_unit(broker)

    def _per_gpu(self, broker: Broker) -> Iterator[Metric]:
        families = {
            name: GaugeMetricFamily(f"gpuspawner_gpu_{name}", text, labels=GPU_LABELS)
            for name, text in [
                (
                    "allocated",
                    "The share of this GPU servers hold (running or stopping): 1 or 0 for a "
                    "whole GPU; for a MIG or shared GPU, the GPU-equivalents held on it.",
                ),
                ("healthy", "1 if NVML reports this GPU healthy, else 0."),
                ("utilization_ratio", "GPU utilisation, 0 to 1, at the last sample."),
                ("memory_used_bytes", "GPU memory in use at the last sample."),
                ("memory_total_bytes", "GPU memory in all."),
                ("temperature_celsius", "GPU temperature at the last sample."),
                ("power_watts", "GPU power draw at the last sample, where the board reports it."),
                (
                    "idle_seconds",
                    "How long every server holding (part of) this GPU has had its GPUs idle.",
                ),
                (
                    "parked",
                    "Servers and jobs bound to this GPU whose work is parked in host memory "
                    "(with parking; the one on it, if any, is in gpu_allocated).",
                ),
            ]
        }
        pool = broker.pool
        now = broker.clock()
        parked = [{u.gpu for u in g.units} for g in pool.grants() if g.parked and not g.stopping]
        for gpu in broker.site.gpus:
            labels = [gpu.uuid, str(gpu.index), gpu.model]
            sample = broker.telemetry.get(gpu.uuid)
            grants = pool.holders_on(gpu.uuid)
            share = sum(
                (u.weight for g in grants for u in g.units if u.gpu == gpu.uuid), Fraction(0)
            )
            idle = [broker.idle_since(g.key) for g in grants]
            since = [t for t in idle if t is not None]
            values = {
                "allocated": float(share),
                "healthy": float(not pool.marked_unhealthy(gpu.uuid)),
                "memory_total_bytes": float(gpu.memory_total_bytes),
                "idle_seconds": now - max(since) if since and len(since) == len(idle) else 0.0,
                "parked": float(sum(gpu.uuid in gpus for gpus in parked)),
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

    def _per_unit(self, broker: Broker) -> Iterator[Metric]:
        """MIG instances and shared slots, each: held or not; a MIG instance's memory."""
        allocated = GaugeMetricFamily(
            "gpuspawner_unit_allocated",
            "1 if a server holds this MIG instance or shared GPU's slot, else 0.",
            labels=["unit", "kind", "index", "model", "mig_profile"],
        )
        memory = GaugeMetricFamily(
            "gpuspawner_mig_memory_used_bytes",
            "A MIG instance's memory in use at the last sample.",
            labels=["uuid", "index", "model", "mig_profile"],
        )
        for unit in broker.pool.units:
            if unit.kind.facts.whole:
                continue
            labels = [unit.id, unit.kind.value, str(unit.index), unit.model, unit.profile]
            allocated.add_metric(labels, float(broker.pool.holder_of(unit.id) is not None))
            sample = broker.telemetry.get(unit.device)
            if unit.kind.facts.own_memory and sample and sample.memory_used_bytes is not None:
                memory.add_metric(labels[:1] + labels[2:], float(sample.memory_used_bytes))
        yield allocated
        yield memory


@dataclass(eq=False)  # a registry keys its collectors by identity
class LineCollector(Collector):
    """A broker's waiting line, read at scrape time."""

    broker: Broker

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        waiting = GaugeMetricFamily(
            "gpuspawner_waiting_spawns",
            "GPU starts waiting in line, by the group they wait as (their priority's).",
            labels=["group"],
        )
        for group, count in sorted(line_status.waiting_by_group(broker.line).items()):
            waiting.add_metric([group], count)
        yield waiting


@dataclass(eq=False)  # a registry keys its collectors by identity
class JobsCollector(Collector):
    """The running hub's jobs that have not ended, by state, read at scrape time."""

    broker: Broker

    def collect(self) -> Iterator[Metric]:
        jobs = self.broker.jobs
        counts = {str(state): 0 for state in JobState if state not in FINAL}
        for job in jobs.unfinished() if jobs is not None else []:
            counts[str(job.state)] += 1
        gauge = GaugeMetricFamily(
            "gpuspawner_jobs",
            f"Jobs that have not ended, by state: {', '.join(counts)}.",
            labels=["state"],
        )
        for state, count in counts.items():
            gauge.add_metric([state], count)
        yield gauge
        parked = jobs.parked_bytes() if jobs is not None else 0
        yield GaugeMetricFamily(
            "gpuspawner_parked_bytes", "Host memory that parked GPU work holds now.", parked
        )
        ignored = CounterMetricFamily(
            "gpuspawner_job_events_ignored",
            "Events a job's state did not move on (core.jobs.step), by state and event: a "
            "late report of an ended job is expected; others mean the books were out of step.",
            labels=["state", "event"],
        )
        for (state, event), count in sorted(IGNORED.items()):
            ignored.add_metric([str(state), str(event)], count)
        yield ignored


class UsageCounters:
    """A monitor listener: each tick adds the GPU-seconds every grant held since the last
    tick, and its busy ones where the tick judged its GPUs busy (as the usage ledger counts).

    A grant seen first counts from its start or from this hub's start, whichever is later:
    counters begin at zero with each hub process.
    """

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.started = broker.clock()
        self._counted: dict[int, float] = {}  # grant key → counted up to

    def __call__(self, observation: Observation) -> None:
        now = self.broker.clock()
        counted, self._counted = self._counted, {}
        for grant in self.broker.pool.grants():
            since = max(counted.get(grant.key, self.started), grant.since)  # the server's
            # last grant may have ended and a new one begun since the last tick
            self._counted[grant.key] = now
            seconds = float(grant.weight) * max(0.0, now - since)
            if not seconds:
                continue
            group = grant.quota_group or NO_GROUP
            GPU_SECONDS_HELD.labels(group).inc(seconds)
            if observation.busy.get(grant.key):
                GPU_SECONDS_BUSY.labels(group).inc(seconds)


class BookingCounters:
    """A monitor listener: each tick adds each open booking's GPU-seconds since the last
    tick, used where a holder's server held the GPU, unused where it was kept idle."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._last = broker.clock()

    def __call__(self, observation: Observation) -> None:
        now, since = self.broker.clock(), self._last
        self._last = now
        calendar = self.broker.calendar
        users = {
            u.gpu: g.holder.user for g in self.broker.pool.grants() if not g.parked for u in g.units
        }
        for window in calendar.windows():
            seconds = min(now, window.end) - max(since, window.start)
            if window.drain or seconds <= 0:
                continue
            for gpu in window.gpus:
                holder = users.get(gpu)
                used = holder is not None and window.serves(holder, calendar.groups_of(holder))
                BOOKED_GPU_SECONDS.labels(str(window.id), "used" if used else "unused").inc(seconds)


@dataclass(eq=False)  # a registry keys its collectors by identity
class CalendarCollector(Collector):
    """The calendar's drains in effect, read at scrape time."""

    broker: Broker

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        drained = GaugeMetricFamily(
            "gpuspawner_drained_gpus",
            "GPUs taken out by a drain of the calendar now: no start lands on them.",
        )
        drained.add_metric([], len(broker.calendar.drained()))
        yield drained


def count_engine_errors(observation: Observation) -> None:
    """A monitor listener: a tick whose container list Docker did not answer."""
    if observation.containers is None:
        ENGINE_ERRORS.labels("list").inc()


def serve(broker: Broker) -> None:
    """Add the books' gauges to the hub's /hub/metrics while `broker` runs (a test's next hub
    in the same process adds its own)."""
    collectors = [
        PoolCollector(broker),
        LineCollector(broker),
        JobsCollector(broker),
        CalendarCollector(broker),
    ]
    for collector in collectors:
        REGISTRY.register(collector)

    def unregister() -> None:
        for collector in collectors:
            REGISTRY.unregister(collector)

    broker.on_stop(unregister)
