"""The pool as admins and scripts see it: one row per GPU, with its holder.

Plain data for the admin page and its JSON twin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from ..core.pool import DeviceState, Grant
from .broker import Broker


@dataclass(frozen=True)
class HolderNow:
    """A holder as the hub's database says now (a user may have been renamed since)."""

    user: str
    server: str
    last_activity: datetime | None = None


def as_labelled(grant: Grant) -> HolderNow:
    return HolderNow(grant.holder.user, grant.holder.server)


def pool_report(
    broker: Broker, holder_now: Callable[[Grant], HolderNow] = as_labelled
) -> dict[str, Any]:
    pool, telemetry = broker.pool, broker.telemetry
    states = pool.states()
    holders = {uuid: grant for grant in pool.grants() for uuid in grant.uuids}
    rows = []
    for gpu in broker.site.gpus:
        grant = holders.get(gpu.uuid)
        sample = telemetry.get(gpu.uuid)
        holder = None
        if grant is not None:
            now = holder_now(grant)
            holder = {
                "user": now.user,
                "server": now.server,
                "quota_group": grant.quota_group,
                "since": _iso(datetime.fromtimestamp(grant.since, UTC)),
                "last_activity": _iso(now.last_activity),
                "stopping": grant.stopping,
            }
        rows.append(
            {
                "uuid": gpu.uuid,
                "index": gpu.index,
                "model": gpu.model,
                "memory_total_bytes": gpu.memory_total_bytes,
                "state": states[gpu.uuid].value,
                "health": pool.unhealthy_reason(gpu.uuid),
                "holder": holder,
                "used_outside_hub_by": pool.external_user(gpu.uuid),
                "telemetry": asdict(sample) if sample else None,
            }
        )
    counts = {state.value: 0 for state in DeviceState}
    for state in states.values():
        counts[state.value] += 1
    return {
        "total": len(broker.site.gpus),
        "free": pool.free_count(),
        "by_state": {**counts, "excluded": len(broker.site.excluded)},
        "gpus": rows,
        "excluded": [
            {"uuid": g.uuid, "index": g.index, "model": g.model} for g in broker.site.excluded
        ],
    }


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # the hub's database stores naive UTC
    return moment.isoformat().replace("+00:00", "Z")
