"""A user's home on a swarm whose homes are each node's own, and what they are told of it.

A named volume lives on the node that made it. Where homes are not on shared storage, a
user's servers go where their home is, so that nobody opens JupyterLab to an empty home:
their first server's node becomes their home's, and every later start (a job's too) may
take GPUs only there. Pure: the hub keeps the homes (`hub.homes.nodes`), the records write them
down (`records.homes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .profiles import InvalidUserOptions

AWAY = "away_from_home"  # the form's choice: elsewhere, if the home's machine has no room now


@dataclass(frozen=True)
class Home:
    user: str
    volume: str  # the home volume's name on its node
    node: str  # the node's hostname, as the pool names machines
    made: float  # when its first server ran there
    last_used: float  # when a server of its user last ran there

    def used(self, at: float) -> Home:
        return replace(self, last_used=max(self.last_used, at))


def said_of(home: Home) -> str:
    """Why a user's start may take GPUs only on their home's node."""
    return (
        f"Your files are on {home.node} (home {home.volume}), so your servers start there; "
        "homes on this hub are each node's own."
    )


def away_chosen(user_options: Any) -> bool:
    """Whether the user chose to start on another machine should their home's have no room
    (a form's checkbox sends "on"; the REST API true or false)."""
    value = user_options.get(AWAY, False) if isinstance(user_options, Mapping) else False
    if value in (True, "on", "true"):
        return True
    if value in (False, None, "", "off", "false"):
        return False
    raise InvalidUserOptions(f"{AWAY} must be true or false, got {value!r}")
