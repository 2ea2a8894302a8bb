"""What the broker tells the hub's jobs, and asks of them: a seam, so that the broker (the
books) does not import the jobs' board, which acts on the books through the broker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ...core.pool import Grant

if TYPE_CHECKING:
    from ...records.jobs import Job
    from ..jobs.launch import Launch


class JobsPart(Protocol):
    """What the broker tells the hub's jobs (`hub.jobs.board`), which act on the books only
    through the broker's methods."""

    def line_ran(self) -> None: ...

    def released(self, grant: Grant) -> None: ...

    def launching(self, server_id: int) -> Launch | None: ...

    def awaiting_start(self, server_id: int) -> bool: ...

    def is_job(self, user_id: int, server: str) -> bool: ...

    def refuses_by_hand(self, user_id: int, server: str) -> str | None: ...

    def unfinished(self) -> list[Job]: ...

    def parked_bytes(self) -> int: ...

    def wake(self, grant: Grant) -> str: ...

    def residency(self, key: int) -> str: ...

    def work_lost(self, key: int) -> bool: ...

    def leave(self, grant: Grant, reason: str) -> None: ...
