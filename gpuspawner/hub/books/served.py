"""How a page or an API handler reaches the hub's broker: tornado passes it to the handler's
`initialize`, as the handler's route says (`routes`), so no handler looks it up in a global
and a test serves a handler with the broker it built."""

from __future__ import annotations

from typing import Any

from .broker import Broker

Route = tuple[str, type, dict[str, Any]]


class Served:
    """A handler given the broker by its route (put before JupyterHub's handler class)."""

    broker: Broker

    def initialize(self, broker: Broker) -> None:
        self.broker = broker


def routes(broker: Broker, *patterns: tuple[str, type]) -> list[Route]:
    """Each (pattern, handler) as tornado's route, its handler given `broker`."""
    return [(pattern, handler, {"broker": broker}) for pattern, handler in patterns]
