"""A GPU start waiting its turn in the line is not slow, and the hub's log says so.

JupyterHub logs "User … is slow to start" at a warning once a start has taken
`slow_spawn_timeout` (10 s): an admin reading that for every start in the line
would look for a fault where there is none. The line's own words replace it.
"""

from __future__ import annotations

import logging

from . import status as line_status
from .waiting import Line

SLOW = "User %s is slow to start (timeout=%s)"  # JupyterHub 6.1's words (handlers/base.py)
WAITING = "User %s is waiting in line for GPUs (place %d), not slow to start"


class WaitingIsNotSlow(logging.Filter):
    """On the hub's logger: JupyterHub's "slow to start" for a start that waits in line."""

    def __init__(self, line: Line) -> None:
        super().__init__()
        self.line = line

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != SLOW or not isinstance(record.args, tuple) or not record.args:
            return True
        name = str(record.args[0])  # JupyterHub's user:server, or the user alone
        user, _, server = name.partition(":")
        place = line_status.place_by_name(self.line, user, server)
        if place is not None:
            record.msg, record.args = WAITING, (name, place)
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        return True


def install(log: logging.Logger, line: Line) -> WaitingIsNotSlow:
    waiting = WaitingIsNotSlow(line)
    log.addFilter(waiting)
    return waiting
