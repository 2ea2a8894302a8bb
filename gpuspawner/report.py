"""The pool as admins and scripts see it: one row per GPU, with its holder.

Plain data for the admin page, its JSON twin and the metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from .devices import Telemetry
from .hubgpus import HubGPUs
from .pool import DeviceState

LastActivity = Callable[[str, str], datetime | None]


def pool_report(
    hub: HubGPUs,
    telemetry: Mapping[str, Telemetry],
    last_activity: LastActivity = lambda user, server: None,
) -> dict[str, Any]:
    states = hub.pool.states()
    holders = {uuid: grant for grant in hub.pool.grants() for uuid in grant.uuids}
    rows = []
    for gpu in hub.gpus:
        grant = holders.get(gpu.uuid)
        sample = telemetry.get(gpu.uuid)
        holder = None
        if grant is not None:
            activity = last_activity(grant.holder.user, grant.holder.server)
            holder = {
                "user": grant.holder.user,
                "server": grant.holder.server,
                "quota_group": grant.holder.quota_group,
                "since": _iso(datetime.fromtimestamp(grant.since, UTC)),
                "last_activity": _iso(activity),
            }
        rows.append(
            {
                "uuid": gpu.uuid,
                "index": gpu.index,
                "model": gpu.model,
                "memory_total_bytes": gpu.memory_total_bytes,
                "state": states[gpu.uuid].value,
                "health": hub.pool.unhealthy_reason(gpu.uuid),
                "holder": holder,
                "used_outside_hub_by": hub.pool.external_user(gpu.uuid),
                "telemetry": asdict(sample) if sample else None,
            }
        )
    counts = {state.value: 0 for state in DeviceState}
    for state in states.values():
        counts[state.value] += 1
    return {
        "total": len(hub.gpus),
        "free": hub.pool.free_count(),
        "by_state": {**counts, "excluded": len(hub.excluded)},
        "gpus": rows,
        "excluded": [{"uuid": g.uuid, "index": g.index, "model": g.model} for g in hub.excluded],
    }


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # the hub's database stores naive UTC
    return moment.isoformat().replace("+00:00", "Z")
