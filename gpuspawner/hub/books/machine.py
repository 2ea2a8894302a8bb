"""The broker's part that puts what the machine says onto the books, each monitor tick.

A MIG layout an admin changed, GPUs that fell ill or recovered, machines that went
down or came back, and GPUs that containers outside the hub's books reach: each
changes what the pool may hand out, never a running server's grant.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ...config.site import GPUSite
from ...core.gpus import Telemetry
from ...core.pool import GONE, Pool
from ...core.units import Kind, Unit
from ...engine.base import LookPast, Seen


class Machine:
    def __init__(
        self, site: GPUSite, pool: Pool, hub: str, look_past: LookPast, log: logging.Logger
    ) -> None:
        self.site, self.pool, self.hub, self.look_past, self.log = site, pool, hub, look_past, log

    def follow_layout(self, layout: Mapping[str, tuple[Unit, ...]]) -> None:
        """What each GPU gives now (`GPUSite.layout_now`): a MIG layout an admin changed is
        followed, GPU by GPU, without touching the servers on other GPUs."""
        for gpu, units in layout.items():
            if not self.pool.follow_layout(gpu, units):
                continue
            index = next((u.index for u in self.pool.units if u.gpu == gpu), "")
            profiles = [u.profile for u in units if u.kind is Kind.MIG]
            now = ", ".join(f"{profiles.count(p)} × {p}" for p in dict.fromkeys(profiles))
            gone = [
                f"{u.id} ({g.holder.name})"
                for g in self.pool.holders_on(gpu)
                for u in g.units
                if self.pool.unhealthy_reason(u.id) == GONE
            ]
            self.log.warning(
                "gpuspawner: GPU %s (%s) changed: it now gives %s%s",
                index,
                gpu,
                now or ("itself, whole" if units else "nothing (MIG mode, no instance)"),
                f"; gone but still held until their servers stop: {', '.join(gone)}"
                if gone
                else "",
            )

    def note_containers(self, containers: list[Seen], foreign_processes: dict[str, str]) -> None:
        """Keep GPUs and MIG instances that running containers reach out of the pool, unless
        the pool gave them to that container's server; and free ones with
        `foreign_processes` (id → who). Reaching a GPU reaches everything on it: its MIG
        instances, and every slot of a shared GPU for a container that holds none."""
        external = dict(foreign_processes)
        for container in containers:
            if not container.running or self.look_past.skips(container):
                continue
            grant = None
            if container.server and container.server.spawner_id and container.of_hub(self.hub):
                grant = self.pool.grant_of(container.server.spawner_id)
            for device in self.site.inventory.reached(container.reach, container.node):
                if grant is None or device not in grant.uuids:
                    external[device] = f"container {container.name}"
        before = self.pool.externals()
        self.pool.set_external(external)
        now = self.pool.externals()
        for device in sorted({*before, *now}):
            if now.get(device) == before.get(device):
                continue
            if now.get(device):
                self.log.warning(
                    "gpuspawner: %s is used outside JupyterHub (%s)", device, now[device]
                )
            else:
                self.log.info("gpuspawner: %s is no longer used outside JupyterHub", device)

    def follow_reachability(self, unreachable: Mapping[str, str] | None) -> None:
        """Machines that went down (or were drained) give no new server their GPUs, and those
        back give them again; servers there keep their grants until the engine confirms
        them gone. Unknown while the engine does not answer: as last seen."""
        if unreachable is None:
            return
        pool, now = self.pool, unreachable
        before = pool.unreachable()
        for node in sorted({*before, *now}):
            if before.get(node) == now.get(node):
                continue
            if node in now:
                pool.mark_unreachable(node, now[node])
                self.log.warning(
                    "gpuspawner: %s: its GPUs go to no new server until it is back", now[node]
                )
            else:
                pool.mark_reachable(node)
                self.log.info("gpuspawner: node %s is back: its free GPUs can be given", node)

    def follow_health(self, telemetry: Mapping[str, Telemetry]) -> None:
        """Mark GPUs and MIG instances unhealthy and healthy again as NVML says. A MIG
        instance reports its GPU's health too; only its own (it vanished) is its own mark."""
        pool = self.pool
        for device, sample in telemetry.items():
            health = sample.health
            unit = pool.unit(device)
            if unit is not None and unit.device != unit.gpu:  # a MIG instance, on its GPU
                gpu = telemetry.get(unit.gpu)
                health = None if gpu is not None and gpu.health == health else health
            was = pool.marked_unhealthy(device)
            if health == was:
                continue
            if health:
                pool.mark_unhealthy(device, health)
                names = [g.holder.name for g in pool.holders_on(device)]
                verb = "holds it and keeps" if len(names) == 1 else "hold it and keep"
                held = f"; {', '.join(names)} {verb} running" if names else ""
                self.log.warning(
                    "gpuspawner: %s is unhealthy (%s): no new server gets it%s",
                    device,
                    health,
                    held,
                )
            else:
                pool.mark_healthy(device)
                self.log.info("gpuspawner: %s is healthy again (was: %s)", device, was)
