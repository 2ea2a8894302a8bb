"""Docker's inspects of the containers a look reads, kept from one look to the next.

What a look reads of a container (its labels, device requests, devices, mounts, runtime and
environment) cannot change in the container's life; its state and name can, and are checked
against `docker ps`'s line for it at each look. Anything else Docker does to a container (a
start, a stop, a rename, an update) comes as an event, and its inspect is asked again. Without
this a look at 500 containers took 1.2 s, nearly all of it one inspect per container
(benchmarks/monitor_tick.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Mapping
from typing import Any

import docker.errors
import requests

# Docker answers a question about past events from the last 256 it keeps (moby's
# daemon/events). Each look reads them from a little before the last look's end, so that an
# engine whose clock runs up to that much behind this one's misses none.
EVENTS_KEPT = 256
EVENTS_OVERLAP = 5  # seconds


class KeptInspects:
    def __init__(self, client: Any) -> None:
        self.client = client
        self._kept: dict[str, Mapping[str, Any]] = {}
        self._events_read_to: int | None = None  # when the last look read Docker's events to

    def forget_changed(self) -> None:
        """Drops the inspects of the containers Docker's events tell of since the last look,
        or all of them where the events cannot say: Docker did not answer, or as many came
        as it keeps. Asked at the start of a look, before `docker ps`."""
        read_to, self._events_read_to = self._events_read_to, int(time.time())
        if read_to is None or not self._kept:
            return
        try:
            events = self._events(read_to - EVENTS_OVERLAP, self._events_read_to)
        except (requests.exceptions.RequestException, ValueError):
            events = None  # no answer, an error, or not JSON
        if events is None or len(events) >= EVENTS_KEPT:
            self._kept.clear()
            return
        for event in events:
            self._kept.pop(str((event.get("Actor") or {}).get("ID") or event.get("id")), None)

    def _events(self, since: int, until: int) -> list[dict[str, Any]]:
        """Docker's events about containers in [since, until], asked with the client's own
        timeout: docker-py's `events()` waits for ever, and an engine that holds the question
        would stop every look after it."""
        client = self.client
        answer = client.get(
            f"{client.base_url}/v{client.api_version}/events",
            params={"since": since, "until": until, "filters": json.dumps({"type": ["container"]})},
            timeout=client.timeout,
        )
        answer.raise_for_status()
        return [json.loads(line) for line in answer.text.splitlines() if line.strip()]

    def keep_only(self, listed: Collection[str]) -> None:
        """Forgets the containers `docker ps` no longer lists."""
        self._kept = {i: c for i, c in self._kept.items() if i in listed}

    def of(self, summary: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The inspect of the container of this `docker ps` line: the kept one while it still
        matches the line, else Docker's answer now; None if the container is gone."""
        container_id = summary["Id"]
        kept = self._kept.get(container_id)
        if kept is not None and _matches(kept, summary):
            return kept
        try:
            inspected: Mapping[str, Any] = self.client.inspect_container(container_id)
        except docker.errors.NotFound:
            return None  # gone between the list and the inspect
        self._kept[container_id] = inspected
        return inspected


def _matches(inspected: Mapping[str, Any], summary: Mapping[str, Any]) -> bool:
    names = summary.get("Names") or [""]
    state = (inspected.get("State") or {}).get("Status")
    return state == summary.get("State") and inspected.get("Name") == names[0]
