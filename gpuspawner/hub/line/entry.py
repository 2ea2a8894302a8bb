"""One start waiting in the line: what it asks for, for whom, within which limits, and the
future its start waits on. The line keeps them (`waiting`); what people are told of them is
`status`'s, which reads the line through its own protocol and so never imports it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ...core.limits import LimitExceeded, UserLimits
from ...core.line import Waiting
from ...core.pool import Grant, Holder
from ...core.units import Request


@dataclass(eq=False)
class Entry:
    waiting: Waiting
    holder: Holder
    slug: str  # the profile asked for
    profile: str  # its display name
    request: Request  # what it asks the pool for
    limits: UserLimits
    result: asyncio.Future[Grant]
    blocked: Exception | None = None  # why it could not start at its last try

    @property
    def deadline(self) -> float:
        return self.waiting.arrived + float(self.limits.max_wait.value or 0)

    @property
    def quota(self) -> str | None:
        """The group whose quota it waits for, if that is what holds it back."""
        over = self.blocked
        return over.group if isinstance(over, LimitExceeded) and over.waitable else None
