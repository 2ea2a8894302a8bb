"""Jobs' servers as JupyterHub lists them: each job is its user's named server `job-<id>`,
and every name `job-<digits>` is the hub's, whether or not such a job exists yet.

Were one such name a person's to start, a user could start `job-<the next id>` by hand:
her next submission would get that id, its GPUs would be asked for a server that already
holds some, and (before this rule) every user's submission failed with it. So a start by
hand of any such name is refused, in words that fit what the name is (a job that waits or
runs, one that ran, one that never ran, or none yet); and once such a server is stopped
and runs no job, the hub removes it, whether its job ended or a refused start made it.
"""

from __future__ import annotations

from ...core.jobs import SERVER_PREFIX, is_job_name, job_id_of
from ...records.jobs import Job
from . import words
from .restoring import Restoring


class JobServers(Restoring):
    _removing = False  # a removal pass is under way (`_remove_ended_servers`)

    def is_job(self, user_id: int, server: str) -> bool:
        """Whether `server` runs (or waits to run) one of this user's jobs."""
        return self._by_server(user_id, server) is not None

    def refuses_by_hand(self, user_id: int, server: str) -> str | None:
        """Why a start by hand of this user's `server` is refused (a job's name is the hub's
        to start); None for any other name."""
        if not is_job_name(server):
            return None
        return words.started_by_hand(server, self._job_named(user_id, server))

    def _job_named(self, user_id: int, server: str) -> Job | None:
        """This user's job that `server` names, unfinished or ended; None if there is none
        (a name past SQLite's integers included: no record is asked for it)."""
        job = self._by_server(user_id, server)
        if job is not None:
            return job
        number = job_id_of(server)
        ended = self.record.get(number) if number is not None else None
        return ended if ended is not None and ended.user_id == user_id else None

    def _remove_ended_servers_later(self) -> None:
        if not self._removing:
            self._removing = True
            self._spawn(self._remove_ended_servers())

    async def _remove_ended_servers(self) -> None:
        """Every stopped server named as a job's that runs no job leaves JupyterHub: its
        user's Home lists no server that cannot start again, whenever it was left (its job
        ended, before this hub, or a start by hand that was refused made it). Each server is
        its own try: one that cannot be removed is logged and the others go on. The jobs'
        records and outputs stay."""
        try:
            for user_id, server in self.launcher.named_servers(SERVER_PREFIX):
                try:
                    if is_job_name(server) and not self.is_job(user_id, server):
                        await self.launcher.remove(user_id, server)  # (not while it runs)
                except Exception:
                    self.log.exception(
                        "gpuspawner: removing server %s of user %d failed", server, user_id
                    )
        except Exception:
            self.log.exception("gpuspawner: listing the jobs' servers to remove failed")
        finally:
            self._removing = False
