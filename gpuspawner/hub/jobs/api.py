"""The jobs' REST API: what JupyterLab, `gpuspawner job` and scripts speak, in JSON.

    GET    /hub/api/users/NAME/gpu-jobs          NAME's jobs: every one not ended, newest first,
                                                 then the 50 that ended latest; ?limit=N (1 to
                                                 500) for N of those, ?after=ID for the page of
                                                 ended jobs after job ID ("next_after" of the
                                                 page before; null on the last)
    POST   /hub/api/users/NAME/gpu-jobs          submit {"profile", "notebook"} or
                                                 {"profile", "script", "args"}: 201, or 400
                                                 with what to fix (nothing is held)
    GET    /hub/api/users/NAME/gpu-jobs/ID       one job
    DELETE /hub/api/users/NAME/gpu-jobs/ID       cancel it (outputs kept)
    GET    /hub/api/users/NAME/gpu-jobs/profiles the GPU profiles NAME's jobs may use
    GET    /hub/api/gpu-jobs                     every unfinished job (custom:gpus:read)
    POST   /hub/api/users/NAME/servers/job-ID/gpu-job   the runner's progress report

An ID in a path that no job could have (more digits than SQLite's integers hold) is 404,
as is any other ID that names no job of NAME's.

Who may: `custom:gpu-jobs` for that user, which every user holds for
themselves and their servers' own tokens hold too (`access`), so JupyterLab
submits with the server's token; or JupyterHub's `read:servers` to read and
`servers` to submit and cancel, for that user (admins, services). Another
user's jobs are 403 whether or not they exist. A report needs
`access:servers` on the job's own server, which exactly its own token holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from jupyterhub.scopes import has_scope
from jupyterhub.utils import url_path_join
from tornado import web

from ...core.ids import as_id
from ...core.jobs import SERVER_PREFIX, InvalidJob, job_id_of, parse_submission
from ...core.words import quoted
from ...records.jobs import Job
from ..base import access
from ..base.answers import JSONHandler, id_in_url
from ..books.broker import Broker
from ..books.served import Route, Served, routes
from .board import JobBoard
from .view import job_view

REPORT_STATES = ("running", "done", "failed", "stopped")
TAIL_LINES, LINE_CHARS, ERROR_CHARS = 20, 500, 4000
ENDED_PER_PAGE, MOST_PER_PAGE = 50, 500  # ended jobs in a page of a user's list


class JobsHandler(Served, JSONHandler):
    def board(self) -> JobBoard:
        jobs = self.broker.jobs
        if not isinstance(jobs, JobBoard):
            raise web.HTTPError(503, "This hub does not run jobs")
        return jobs

    def _owner(self, user_name: str) -> Any:
        user = self.find_user(user_name)
        if user is None:
            raise web.HTTPError(404, f"No such user: {quoted(user_name)}")
        return user

    def _job(self, user: Any, job_id: str) -> Job:
        number = id_in_url(job_id, "job")
        job = self.board().job(number)
        if job is None or job.user_id != user.id:
            raise web.HTTPError(404, f"{user.name} has no job {number}")
        return job

    def as_json(self, job: Job, places: Mapping[int, int] | None = None) -> dict[str, Any]:
        return job_view(job, self.board(), self.base_url, places)

    def as_list(self, jobs: Iterable[Job]) -> list[dict[str, Any]]:
        places = self.board().places()
        return [self.as_json(j, places) for j in jobs]


class UserJobsHandler(JobsHandler):
    def get(self, user_name: str) -> None:
        access.require_jobs(self, user_name, read=True)
        user = self._owner(user_name)
        page = self.board().jobs_of(user.id, self._limit(), self._after(user))
        self._answer({"jobs": self.as_list(page.jobs), "next_after": page.next_after})

    def _limit(self) -> int:
        text = self.get_argument("limit", str(ENDED_PER_PAGE))
        limit = as_id(text)  # (a whole number in ASCII digits)
        if limit is None or not 1 <= limit <= MOST_PER_PAGE:
            raise web.HTTPError(
                400, f'"limit" must be a number from 1 to {MOST_PER_PAGE}, not {quoted(text)}'
            )
        return limit

    def _after(self, user: Any) -> Job | None:
        """The ended job a page follows (its cursor), or None for the first page."""
        text = self.get_argument("after", None)
        if text is None:
            return None
        number = as_id(text)
        job = self.board().job(number) if number is not None else None
        if job is None or job.user_id != user.id or not job.final:
            raise web.HTTPError(
                400,
                f'"after" must be one of {user.name}\'s ended jobs, as a page\'s "next_after" '
                f"names it, not {quoted(text)}",
            )
        return job

    def post(self, user_name: str) -> None:
        access.require_jobs(self, user_name, read=False)
        user = self._owner(user_name)
        if not self.allow_named_servers:
            raise web.HTTPError(
                400,
                "Jobs run as named servers: the admin must set "
                "c.JupyterHub.allow_named_servers = True",
            )
        try:
            job = self.board().submit(user.id, user.name, parse_submission(self.get_json_body()))
        except InvalidJob as invalid:
            raise web.HTTPError(400, str(invalid)) from None
        self._answer(self.as_json(job), 201)


class UserJobHandler(JobsHandler):
    def get(self, user_name: str, job_id: str) -> None:
        access.require_jobs(self, user_name, read=True)
        self._answer(self.as_json(self._job(self._owner(user_name), job_id)))

    def delete(self, user_name: str, job_id: str) -> None:
        access.require_jobs(self, user_name, read=False)
        job = self._job(self._owner(user_name), job_id)
        if job.final:
            raise web.HTTPError(409, f"Job {job_id} has already ended ({job.state})")
        self._answer(self.as_json(self.board().cancel(job)))


class ProfilesHandler(JobsHandler):
    """The GPU profiles a user's jobs may run on, in the form's order (JupyterLab's Create
    Job dialog offers them)."""

    def get(self, user_name: str) -> None:
        access.require_jobs(self, user_name, read=True)
        user = self._owner(user_name)
        limits = self.broker.limits_for(user)
        offered = [
            {"slug": p.slug, "display_name": p.display_name, "description": p.description}
            for p in self.broker.site.profiles
            if p.request.kind is not None and limits.may_pick(p.slug)
        ]
        self._answer({"profiles": offered})


class AllJobsHandler(JobsHandler):
    def get(self) -> None:
        access.require(self, access.READ)
        self._answer({"jobs": self.as_list(self.board().unfinished())})


class ReportHandler(JobsHandler):
    """The runner inside a job's container says how its run goes."""

    def post(self, user_name: str, server: str) -> None:
        if self.current_user is None:
            raise web.HTTPError(403, "Missing or invalid credentials.")
        named = f"{user_name}/{server}"
        if not has_scope(f"access:servers!server={named}", self.parsed_scopes, db=self.db):
            raise web.HTTPError(403, f"This token may not report for server {named}.")
        user = self._owner(user_name)
        number = job_id_of(server)
        job = self.board().job(number) if number is not None else None
        if job is None or job.user_id != user.id or job.server != server:
            raise web.HTTPError(404, f"{named} is not a job")
        progress = _report(self.get_json_body())
        if progress.get("attempt") != job.attempts:
            raise web.HTTPError(409, f"Attempt {job.attempts} of this job runs now")
        self._answer(self.as_json(self.board().report(job, progress)))


def _report(body: Any) -> dict[str, Any]:
    """A report, checked and trimmed to what the pages show."""
    if not isinstance(body, dict) or body.get("state") not in REPORT_STATES:
        raise web.HTTPError(400, f'A report is JSON with "state" one of {", ".join(REPORT_STATES)}')
    cells = body.get("cells")
    if cells is not None and not (
        isinstance(cells, dict)
        and all(isinstance(cells.get(k), int) and cells[k] >= 0 for k in ("done", "total"))
    ):
        raise web.HTTPError(400, '"cells" must be {"done": n, "total": m}')
    tail = body.get("tail") or []
    if not isinstance(tail, list) or not all(isinstance(line, str) for line in tail):
        raise web.HTTPError(400, '"tail" must be a list of lines')
    error, output = body.get("error"), body.get("output")
    return {
        "state": body["state"],
        "attempt": body.get("attempt"),
        "cells": {"done": cells["done"], "total": cells["total"]} if cells else None,
        "tail": [line[:LINE_CHARS] for line in tail[-TAIL_LINES:]],
        "error": error[:ERROR_CHARS] if isinstance(error, str) else None,
        "output": output[:LINE_CHARS] if isinstance(output, str) else None,
        "cpu_busy": _fraction(body.get("cpu_busy")),
    }


def _fraction(value: Any) -> float | None:
    """The share of its CPUs a job's container used lately, as its runner measured it."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        return None
    return float(value)


def handlers(hub_prefix: str, broker: Broker) -> list[Route]:
    user = url_path_join(hub_prefix, "api/users/([^/]+)")
    return routes(
        broker,
        (url_path_join(hub_prefix, "api/gpu-jobs"), AllJobsHandler),
        (f"{user}/gpu-jobs", UserJobsHandler),
        (f"{user}/gpu-jobs/profiles", ProfilesHandler),
        (rf"{user}/gpu-jobs/(\d+)", UserJobHandler),
        (rf"{user}/servers/({SERVER_PREFIX}\d+)/gpu-job", ReportHandler),
    )
