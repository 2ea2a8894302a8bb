"""The label schema: what gpuspawner writes on every container it makes, and reads back.

The labels are the durable record of who holds what. They travel with the container, so
they are right after a hub crash, a hub restart or a database restore, and a container and
its record can never part; the hub's database only says which servers it believes run.
`gpuspawner.units` names each unit held (a MIG instance, a shared GPU's slot): the device
request says which GPU a container reaches, never which of a shared GPU's slots it holds.

Every engine writes them with `labels` and reads them with `read_labels` (through `Seen`),
whatever it runs containers with: this module imports no Docker client, so a new engine
(docs/architecture.md, "Adding an engine") needs none to write them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from ..core.pool import Grant
from .base import ServerLabels

LABEL_PREFIX = "gpuspawner."
LABEL_HUB = LABEL_PREFIX + "hub"
LABEL_SPAWNER_ID = LABEL_PREFIX + "spawner-id"
LABEL_USER_ID = LABEL_PREFIX + "user-id"
LABEL_USER = LABEL_PREFIX + "user"
LABEL_SERVER = LABEL_PREFIX + "server"
LABEL_GPUS = LABEL_PREFIX + "gpus"
LABEL_QUOTA_GROUP = LABEL_PREFIX + "quota-group"
LABEL_SINCE = LABEL_PREFIX + "since"
LABEL_UNITS = LABEL_PREFIX + "units"
LABEL_JOB = LABEL_PREFIX + "job"  # a job's id, on its server's container (hub.jobs)
LABEL_TURNS = LABEL_PREFIX + "turns"  # "1": a person's server that shares its GPU in turns
# A grant's start must be a moment the admin page and the culler can work with.
LATEST_TIME = datetime(9999, 12, 31, tzinfo=UTC).timestamp()


def labels(grant: Grant, hub: str) -> dict[str, str]:
    holder = grant.holder
    return {
        LABEL_HUB: hub,
        LABEL_SPAWNER_ID: str(holder.spawner_id),
        LABEL_USER_ID: str(holder.user_id),
        LABEL_USER: holder.user,
        LABEL_SERVER: holder.server,
        LABEL_GPUS: ",".join(grant.uuids),
        LABEL_UNITS: ",".join(grant.ids),
        LABEL_QUOTA_GROUP: grant.quota_group or "",
        LABEL_SINCE: f"{grant.since:.3f}",
        **({LABEL_TURNS: "1"} if grant.turns else {}),
    }


def read_labels(container_labels: Mapping[str, str]) -> ServerLabels | None:
    """Our server in a container's labels; None if not ours; ValueError if unreadable."""
    if LABEL_USER not in container_labels:
        return None
    since_text = container_labels.get(LABEL_SINCE) or ""
    since = float(since_text) if since_text else None
    if since is not None and not 0 <= since <= LATEST_TIME:  # NaN fails the test too
        raise ValueError(f"{LABEL_SINCE}={since_text!r} is not a time")
    return ServerLabels(
        hub=container_labels.get(LABEL_HUB, ""),
        spawner_id=_id(container_labels, LABEL_SPAWNER_ID),
        user_id=_id(container_labels, LABEL_USER_ID),
        user=container_labels[LABEL_USER],
        server=container_labels.get(LABEL_SERVER, ""),
        uuids=tuple(u for u in container_labels.get(LABEL_GPUS, "").split(",") if u),
        since=since,
        quota_group=container_labels.get(LABEL_QUOTA_GROUP) or None,
        units=tuple(u for u in container_labels.get(LABEL_UNITS, "").split(",") if u),
        turns=container_labels.get(LABEL_TURNS) == "1",
    )


def _id(container_labels: Mapping[str, str], key: str) -> int | None:
    text = container_labels.get(key)
    if text is None:
        return None
    if not text.isdigit():
        raise ValueError(f"{key}={text!r} is not an id")
    return int(text)
