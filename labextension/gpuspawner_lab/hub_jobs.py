"""The hub's GPU jobs as jupyter-scheduler shows jobs: a client that submits, reads and
cancels them with this server's own token, and how a hub job reads as a `DescribeJob`.

Why the hub and not this server runs them: a job must outlive the server it was submitted
from, wait for GPUs nobody waits for, and give way to people's starts, which only the hub
can arrange. The server's own `JUPYTERHUB_API_TOKEN` holds `custom:gpu-jobs!user`: it may
submit, list and cancel its user's jobs, and nothing more.

A hub job `7` is jupyter-scheduler's job `job-7`, its server's name (jupyter-scheduler's
routes want a job id with a dash in it). Its outputs are already in the home, under
`jobs/job-7/`: nothing is staged or downloaded.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from jupyter_scheduler.exceptions import SchedulerError
from jupyter_scheduler.models import DescribeJob, JobFile, Status
from tornado.httpclient import AsyncHTTPClient

HUB_TIMEOUT_SECONDS = 10
MOST_PER_PAGE = 500  # ended jobs the hub lists in one page at most
JOB_PREFIX = "job-"
NOTEBOOK_FORMAT = "ipynb"

# The hub's states as jupyter-scheduler's: a job that waits (also after giving way) is
# queued; one that starts, runs or gives way right now is in progress.
STATUSES = {
    "waiting": Status.QUEUED,
    "starting": Status.IN_PROGRESS,
    "running": Status.IN_PROGRESS,
    "giving way": Status.IN_PROGRESS,
    "done": Status.COMPLETED,
    "failed": Status.FAILED,
    "cancelled": Status.STOPPED,
}


class HubRefused(SchedulerError):
    """The hub said no, or did not answer: the message is what JupyterLab shows."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def hub_number(job_id: str) -> int:
    """`job-7` → 7; anything else is no job of the hub's."""
    number = job_id.removeprefix(JOB_PREFIX)
    if not job_id.startswith(JOB_PREFIX) or not number.isdigit():
        raise HubRefused(404, f"{job_id} is not a GPU job of the hub's")
    return int(number)


@dataclass(frozen=True)
class Hub:
    """The hub's jobs API for this server's user, with this server's token."""

    api: str
    user: str
    token: str

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Hub | None:
        """The hub that started this server, from the variables it gives every server."""
        api = environ.get("JUPYTERHUB_API_URL")
        user, token = environ.get("JUPYTERHUB_USER"), environ.get("JUPYTERHUB_API_TOKEN")
        if not api or not user or not token:
            return None
        return cls(api.rstrip("/"), user, token)

    async def jobs(self) -> list[dict[str, Any]]:
        """The first page of the user's list: every job that has not ended, then the ones
        that ended latest (enough for the notices: a job that just ended is at its top)."""
        return list((await self._call("GET"))["jobs"])

    async def every_job(self, per_page: int = MOST_PER_PAGE) -> list[dict[str, Any]]:
        """Every job of the user's, each page of ended ones followed: jupyter-scheduler's
        list sorts, filters and counts them all itself."""
        page = await self._call("GET", f"?limit={per_page}")
        found = list(page["jobs"])
        while page.get("next_after") is not None:
            page = await self._call("GET", f"?limit={per_page}&after={page['next_after']}")
            found += page["jobs"]
        return found

    async def job(self, number: int) -> dict[str, Any]:
        return dict(await self._call("GET", f"/{number}"))

    async def submit(self, body: dict[str, Any]) -> dict[str, Any]:
        return dict(await self._call("POST", body=body))

    async def cancel(self, number: int) -> None:
        try:
            await self._call("DELETE", f"/{number}")
        except HubRefused as refused:
            if refused.code != 409:  # 409: it has ended already, as stopping wants
                raise

    async def profiles(self) -> list[dict[str, Any]]:
        """The GPU profiles the user may submit to, in the spawn form's order."""
        return list((await self._call("GET", "/profiles"))["profiles"])

    async def _call(self, method: str, path: str = "", body: Any = None) -> Any:
        url = f"{self.api}/users/{quote(self.user, safe='')}/gpu-jobs{path}"
        response = await AsyncHTTPClient().fetch(
            url,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
            body=None if body is None else json.dumps(body),
            request_timeout=HUB_TIMEOUT_SECONDS,
            raise_error=False,
        )
        if response.code == 599:
            raise HubRefused(502, f"The hub did not answer: {response.error}")
        if response.code >= 400:
            raise HubRefused(response.code, _message(response.body, response.code))
        return json.loads(response.body)


def _message(body: bytes, code: int) -> str:
    try:
        message = json.loads(body).get("message")
    except (ValueError, AttributeError):
        message = None
    return message if isinstance(message, str) and message else f"The hub answered {code}."


# A path in the home → the path of that file from the server's root, None while it is not
# there. The hub's paths are relative to the home, jupyter-scheduler's to the root.
Locate = Callable[[str], str | None]


def describe(job: dict[str, Any], name: str | None, locate: Locate) -> DescribeJob:
    """A hub job (its JSON) as jupyter-scheduler describes a job; `name` is the one given
    in JupyterLab's dialog, if it was submitted from there."""
    path = job.get("notebook") or job.get("script") or ""
    notebook = bool(job.get("notebook"))
    moments = [_ms(job.get(k)) for k in ("submitted", "started", "ended")]
    created = moments[0] or 0
    return DescribeJob(
        job_id=job["server"],
        name=name or posixpath.splitext(posixpath.basename(path))[0] or job["server"],
        input_filename=posixpath.basename(path),
        runtime_environment_name=job["profile"],
        output_formats=[NOTEBOOK_FORMAT] if notebook else [],
        url=job.get("url") or f"/jobs/{job['server']}",
        create_time=created,
        update_time=max(m or 0 for m in moments),
        start_time=moments[1],
        end_time=moments[2],
        status=STATUSES.get(job["state"], Status.IN_PROGRESS),
        status_message=status_message(job),
        job_files=job_files(job, path, notebook, locate),
        downloaded=True,  # the outputs are in the home already: nothing to download
    )


def job_files(job: dict[str, Any], path: str, notebook: bool, locate: Locate) -> list[JobFile]:
    outputs = job["outputs"]
    files = [("Log", "log", posixpath.join(outputs, "log.txt")), ("Input", "input", path)]
    if notebook:
        executed = posixpath.join(outputs, posixpath.basename(path))
        files.insert(0, ("Notebook", NOTEBOOK_FORMAT, executed))
    return [
        JobFile(display_name=shown, file_format=kind, file_path=locate(where))
        for shown, kind, where in files
    ]


def status_message(job: dict[str, Any]) -> str | None:
    """Why the job waits, gives way or ended as it did, in the hub's words. JupyterLab
    shows it as an alert on the job's details, so a job that simply runs or is done has
    none."""
    state, reason = job["state"], job.get("reason") or ""
    said = {
        "waiting": f"Waits for free GPUs (number {job.get('place')} in line)",
        "giving way": "Gives way to a person's start: it stops, then waits and runs again",
        "failed": "Failed",
        "cancelled": "Cancelled",
    }.get(state)
    if said is None:
        return None
    return f"{said}: {reason}" if reason else said


def _ms(moment: Any) -> int | None:
    """An ISO time from the hub as jupyter-scheduler's milliseconds since the epoch."""
    if not isinstance(moment, str):
        return None
    return int(datetime.fromisoformat(moment).timestamp() * 1000)
