"""A hub's start: the books rebuilt from the engine's word (the broker's `recover`).

The durable record of who holds what is the containers' labels and device requests: each
running server of this hub keeps the GPUs it holds; a server JupyterHub says ended is
removed, its GPUs held (stopping) until the engine confirms it gone; anything else that
reaches a GPU keeps it out of the pool. The servers JupyterHub says run are adopted
first, so that a stale container of an ended server (or one forged with access to
Docker) never takes a live server's GPUs: it is removed, holding nothing. A server whose
GPU work the checkpoint driver holds parked (its word, read by `hub.reclaim.parking` before
this) is adopted parked: bound to its GPUs, which another server may hold meanwhile. The
usage ledger closes the grants that ended while the hub was away.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from ...config.site import GPUSite
from ...core.pool import AlreadyHolding, Holder, Pool
from ...core.words import at_clock
from ...engine.base import Seen
from ...records.ledger import Ledger
from .removals import Removals


@dataclass(frozen=True)
class KnownServers:
    """The servers the hub's database says run: by (spawner id, user id), and by
    (user name, server name) for containers gpuspawner 0.1 labelled with names only."""

    ids: frozenset[tuple[int, int]] = frozenset()
    by_name: Mapping[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    jobs: frozenset[tuple[int, str]] = frozenset()  # (user id, server) of unfinished jobs
    parked: frozenset[int] = frozenset()  # spawner ids whose work the driver holds parked

    def ids_of(self, seen: Seen) -> tuple[int, int] | None:
        labels = seen.server
        if labels is None:
            return None
        if labels.spawner_id is not None and labels.user_id is not None:
            ids = (labels.spawner_id, labels.user_id)
            return ids if ids in self.ids else None
        return self.by_name.get((labels.user, labels.server))


def adopt(
    containers: list[Seen],
    known: KnownServers,
    site: GPUSite,
    pool: Pool,
    hub: str,
    removals: Removals,
    log: logging.Logger,
) -> None:
    """Adopt the GPUs of `hub`'s running servers (see `Broker.recover`)."""
    units = {u.id: u for u in pool.units}
    for container in sorted(containers, key=lambda seen: known.ids_of(seen) is None):
        if container.label_problem:
            log.error(
                "gpuspawner: container %s has unreadable labels (%s): not adopted; "
                "the GPUs it can reach stay out of the pool while it runs",
                container.name,
                container.label_problem,
            )
            continue
        if not (container.running and container.of_hub(hub)):
            continue
        labels = container.server
        assert labels is not None
        ids = known.ids_of(container)
        ending = ids is None  # JupyterHub says it ended: a removal Docker never confirmed
        if ids is None:  # (or a start the hub before this one forgot)
            if labels.spawner_id is None or labels.user_id is None:
                continue  # labelled by gpuspawner 0.1: kept out while it runs
            ids = (labels.spawner_id, labels.user_id)
        job = (ids[1], labels.server) in known.jobs
        holder = Holder(ids[0], ids[1], labels.user, labels.server, job)
        try:
            held = container.units_held(
                site.inventory.reached(container.reach, container.node), units
            )
            parked = ids[0] in known.parked
            grant = pool.adopt(
                holder, held, labels.since, labels.quota_group, parked, labels.turns and not job
            )
        except AlreadyHolding as conflict:
            if ending:
                removals.remove_stray(ids[0], container.id)
                log.warning(
                    "gpuspawner: container %s runs, but JupyterHub says %s ended, and %s: it is "
                    "removed, and holds nothing meanwhile",
                    container.name,
                    holder.name,
                    conflict,
                )
                continue
            log.error(
                "gpuspawner: container %s not adopted: %s; those GPUs stay out of the "
                "pool while it runs",
                container.name,
                conflict,
            )
            continue
        removals.note(grant.key, container.id)
        if ending:
            pool.begin_release(grant.key)
            log.warning(
                "gpuspawner: container %s runs, but JupyterHub says %s ended: it is "
                "removed, and GPU(s) %s stay held (stopping) until Docker confirms it gone",
                container.name,
                holder.name,
                ", ".join(grant.ids) or "none",
            )
            continue
        log.info(
            "gpuspawner: %s keeps GPU(s) %s (running container %s%s)",
            holder.name,
            ", ".join(grant.ids) or "none",
            container.name,
            ", its GPU work parked, as the driver says" if grant.parked else "",
        )


def recover_ledger(
    ledger: Ledger,
    pool: Pool,
    containers: list[Seen],
    hub: str,
    stopped_at: Mapping[int, float],
    now: float,
    log: logging.Logger,
) -> None:
    """Grants that ended while the hub was away end when Docker says their container
    stopped (else when the hub last saw them); those that go on keep their row, and the
    time away counts as held, not as busy: nobody watched it."""
    for grant in pool.grants():
        ledger.opened(grant, float(grant.weight))
    stopped = dict(stopped_at)
    for container in containers:
        labels = container.server
        if container.finished_at is None or labels is None or not labels.spawner_id:
            continue
        if container.of_hub(hub):
            key = labels.spawner_id
            stopped[key] = max(stopped.get(key, 0.0), container.finished_at)
    running = [g.key for g in pool.grants()]
    for record in ledger.close_all_but(running, stopped):
        log.info(
            "gpuspawner: %s's grant of %s GPU(s) ended while the hub was away; recorded as "
            "ending at %s",
            record.user,
            f"{record.gpus:g}",
            at_clock(record.end or 0.0, now),
        )
    ledger.seen(now, {})
