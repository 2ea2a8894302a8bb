"""The pool as admins and scripts see it: one row per unit (a whole GPU, a MIG instance,
a shared GPU's slot), with its holder; and what each user and group held and used in the
last 7 days.

Plain data for the admin page and its JSON twin. A row's `uuid` is what Docker
gives its holder (a GPU's or MIG instance's UUID); `unit` is the books' key,
which tells a shared GPU's slots apart; `gpu_uuid` and `index` name the GPU it
is on; `node` the machine it is on ("" on a single host); `telemetry` is that
device's last sample (a MIG instance's own memory and processes; its GPU's
temperature and power are on the GPU's rows' `gpu`). `by_node` counts each
machine's units by kind, and `unreachable` says why a machine gives nothing now.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from ...core.nodes import counts_by_node
from ...core.pool import DeviceState, Grant
from ...core.pool_view import with_parked
from ...core.usage import WEEK, report_rows
from ..books import budgets
from ..books.broker import Broker


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
    states = with_parked(broker.calendar.states(pool), pool)  # drained, parked: not free
    drained = broker.calendar.drained()
    rows = []
    for unit in pool.units:
        grant = pool.holder_of(unit.id)
        sample = telemetry.get(unit.device)
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
                "uuid": unit.device,
                "unit": unit.id,
                "name": unit.name,
                "kind": unit.kind.value,
                "index": unit.index,
                "node": unit.node,
                "gpu_uuid": unit.gpu,
                "model": unit.model,
                "mig_profile": unit.profile or None,
                "slot": unit.position if unit.kind.facts.shares_gpu else None,
                "slots": unit.slots or None,
                "gpu_equivalents": str(unit.weight),
                "memory_total_bytes": unit.memory_bytes,
                "state": states[unit.id].value,
                "health": pool.unhealthy_reason(unit.id),
                "drained": drained[unit.gpu].reason if unit.gpu in drained else None,
                "holder": holder,
                "parked": [  # whose GPU work waits in host memory, to come back on this unit
                    {"user": now.user, "server": now.server, "job": g.holder.job}
                    for g in pool.bound_to(unit.id)
                    for now in (holder_now(g),)
                ],
                "used_outside_hub_by": pool.external_user(unit.id),
                "telemetry": asdict(sample) if sample else None,
            }
        )
    counts = {state.value: 0 for state in DeviceState}
    for state in states.values():
        counts[state.value] += 1
    by_node: dict[str, dict[str, dict[str, int]]] = {}
    by_kind: dict[str, dict[str, int]] = {}
    for node, kinds in counts_by_node(pool.units, states).items():
        for kind, count in kinds.items():
            by_node.setdefault(node, {})[kind.value] = {"total": count.total, "free": count.free}
            summed = by_kind.setdefault(kind.value, {"total": 0, "free": 0})
            summed["total"] += count.total
            summed["free"] += count.free
    return {
        "total": len(states),
        "free": counts[DeviceState.FREE.value],
        "by_state": {**counts, "excluded": len(broker.site.excluded)},
        "by_kind": by_kind,
        "by_node": by_node,
        "unreachable": pool.unreachable(),
        "gpus": rows,
        "excluded": [
            {"uuid": g.uuid, "index": g.index, "model": g.model} for g in broker.site.excluded
        ],
        "waiting": waiting_report(broker),
        "docker": docker_report(broker),
    }


def docker_report(broker: Broker) -> dict[str, Any]:
    """Whether Docker answers the hub. While it does not, every server runs on as last seen
    (only Docker's word ends one): since when, the question, and Docker's last error."""
    silence = broker.longest_silence()
    if silence is None:
        return {"answering": True, "since": None, "question": None, "error": None}
    return {
        "answering": False,
        "since": _iso(datetime.fromtimestamp(silence.since, UTC)),
        "question": silence.question,
        "error": silence.error,
    }


def waiting_report(broker: Broker) -> list[dict[str, Any]]:
    """The waiting line in order: who waits, for what, since when, until when at the most."""
    rows = []
    for standing in broker.line.standings():
        row = asdict(standing)
        row["since"] = _iso(datetime.fromtimestamp(row.pop("arrived"), UTC))
        row["gives_up_at"] = _iso(datetime.fromtimestamp(standing.gives_up_at, UTC))
        row["waited_seconds"] = round(broker.clock() - standing.arrived, 1)
        rows.append(row)
    return rows


def usage_report(broker: Broker) -> dict[str, Any]:
    """GPU-hours held and busy in the last 7 days, by quota group and by user, from the usage
    ledger: the same figures as `gpuspawner usage --since 7d`."""
    now = broker.clock()
    records = budgets.last_week(broker, now)
    return {
        "since": _iso(datetime.fromtimestamp(now - WEEK, UTC)),
        "until": _iso(datetime.fromtimestamp(now, UTC)),
        "by_group": report_rows(records, now - WEEK, now, "group"),
        "by_user": report_rows(records, now - WEEK, now, "user"),
    }


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # the hub's database stores naive UTC
    return moment.isoformat().replace("+00:00", "Z")
