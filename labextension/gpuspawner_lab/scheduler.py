"""jupyter-scheduler's "Create Job" dialog and job list, on the hub's GPU jobs.

JupyterLab's own way to run a notebook unattended is jupyter-scheduler. In a server that a
gpuspawner hub started, its backend is the hub: the dialog's environments are the user's
GPU profiles, "Create" submits the notebook to run on the one picked, the list shows the
user's jobs as the hub has them (also those submitted with curl or `gpuspawner job`), and
stop and delete cancel through the hub. The hub runs the notebook where the user saved
it, in the home, not a staged copy: the files beside it are there, and a job that gave way
runs it again. Its outputs are already in the home (`jobs/job-<id>/`), so nothing is
staged or downloaded.

Outside a hub (a plain `jupyter lab`), both classes make jupyter-scheduler's own, which run
notebooks in this server: the config that names them (etc/jupyter/
jupyter_jupyter_scheduler_config.json, the file jupyter-scheduler's extension app reads its
traits from) comes with this package, wherever it is installed.

Schedules (job definitions) are refused: the hub runs each job once, when GPUs are free.
jupyter-scheduler's own database (in the home) keeps only what the hub does not: the name
given in the dialog, and which jobs were deleted from JupyterLab's list.
"""

from __future__ import annotations

import os
from typing import Any

from jupyter_scheduler.environments import (
    CondaEnvironmentManager,
    EnvironmentManager,
    EnvironmentRetrievalError,
)
from jupyter_scheduler.exceptions import InputUriError, SchedulerError
from jupyter_scheduler.models import (
    CountJobsQuery,
    CreateJob,
    DescribeJob,
    ListJobsQuery,
    ListJobsResponse,
    RuntimeEnvironment,
    SortDirection,
    UpdateJob,
)
from jupyter_scheduler.orm import Job
from jupyter_scheduler.scheduler import Scheduler

from .hub_jobs import JOB_PREFIX, NOTEBOOK_FORMAT, Hub, HubRefused, describe, hub_number

NO_SCHEDULES = (
    "GPU jobs run once, as soon as GPUs are free: schedules are not supported here. "
    "Choose 'Run now'."
)
KEPT, DELETED = "GPU_JOB", "DELETED"  # the local row's status: the hub has the real one
FINAL = {"done", "failed", "cancelled"}


class GPUProfiles(EnvironmentManager):
    """The user's GPU profiles as jupyter-scheduler's environments: a job's profile is
    where it runs, as an environment is for jupyter-scheduler's own jobs."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if Hub.from_environ(os.environ) is None:
            return CondaEnvironmentManager()
        return super().__new__(cls)

    def __init__(self) -> None:
        hub = Hub.from_environ(os.environ)
        assert hub is not None  # __new__ made a stock one otherwise
        self.hub = hub

    async def list_environments(self) -> list[RuntimeEnvironment]:  # type: ignore[override]
        try:
            profiles = await self.hub.profiles()
        except HubRefused as refused:  # shown in the dialog, where a bare 500 says nothing
            raise EnvironmentRetrievalError(f"Your GPU profiles: {refused}") from None
        return [environment(p) for p in profiles]

    def manage_environments_command(self) -> str:
        return ""

    def output_formats_mapping(self) -> dict[str, str]:
        return {NOTEBOOK_FORMAT: "Notebook"}


def environment(profile: dict[str, Any]) -> RuntimeEnvironment:
    return RuntimeEnvironment(
        name=profile["slug"],
        # jupyter-scheduler's dialog submits an environment's label as its name: the slug
        label=profile["slug"],
        description=" — ".join(
            text for text in (profile.get("display_name"), profile.get("description")) if text
        )
        or "A GPU profile: the job waits for free GPUs and gives way to people's starts",
        file_extensions=[NOTEBOOK_FORMAT],
        output_formats=[NOTEBOOK_FORMAT],
        metadata={"slug": profile["slug"]},
    )


class GPUJobScheduler(Scheduler):
    """jupyter-scheduler's scheduler with the hub as its backend (see the module's doc)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if Hub.from_environ(os.environ) is None:
            return Scheduler(*args, **kwargs)
        return super().__new__(cls, *args, **kwargs)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.task_runner = None  # it runs schedules, and there are none
        hub = Hub.from_environ(os.environ)
        assert hub is not None  # __new__ made a stock one otherwise
        self.hub = hub
        self.home = os.path.expanduser("~")

    async def create_job(self, model: CreateJob) -> str:  # type: ignore[override]
        if model.job_definition_id:
            raise SchedulerError(NO_SCHEDULES)
        if model.parameters:
            raise SchedulerError(
                "A GPU job runs the notebook as it is saved: it takes no parameters."
            )
        if not self.file_exists(model.input_uri):
            raise InputUriError(model.input_uri)
        path = self._in_home(model.input_uri)
        kind = "notebook" if path.endswith(f".{NOTEBOOK_FORMAT}") else "script"
        job = await self.hub.submit({"profile": model.runtime_environment_name, kind: path})
        self._remember(job, model.name)
        return str(job["server"])

    async def list_jobs(self, query: ListJobsQuery) -> ListJobsResponse:  # type: ignore[override]
        rows = self._rows()
        jobs = [
            self._describe(job, rows.get(job["server"]))
            for job in await self.hub.every_job()
            if getattr(rows.get(job["server"]), "status", None) != DELETED
        ]
        jobs = [job for job in jobs if matches(job, query)]
        for field in reversed(query.sort_by):
            jobs.sort(
                key=lambda job, name=field.name: sort_key(getattr(job, name, None)),
                reverse=field.direction == SortDirection.desc,
            )
        start = int(query.next_token or 0)
        page = jobs[start : start + int(query.max_items or len(jobs))]
        following = start + len(page)
        return ListJobsResponse(
            jobs=page,
            total_count=len(jobs),
            next_token=str(following) if following < len(jobs) else None,
        )

    async def count_jobs(self, query: CountJobsQuery) -> int:  # type: ignore[override]
        listed = await self.list_jobs(ListJobsQuery(status=query.status, max_items=None))
        return listed.total_count

    async def get_job(self, job_id: str, job_files: bool | None = True) -> DescribeJob:  # type: ignore[override]
        job = await self.hub.job(hub_number(job_id))
        return self._describe(job, self._rows().get(job_id))

    def update_job(self, job_id: str, model: UpdateJob) -> None:
        """Only the name is JupyterLab's to change; stopping comes as stop_job."""
        if model.name:
            with self.db_session() as session:
                session.query(Job).filter(Job.job_id == job_id).update({"name": model.name})
                session.commit()

    async def stop_job(self, job_id: str) -> None:  # type: ignore[override]
        await self.hub.cancel(hub_number(job_id))

    async def delete_job(self, job_id: str) -> None:  # type: ignore[override]
        """Cancels the job if it has not ended, and takes it off JupyterLab's list. The hub
        keeps its record, and its outputs stay in the home."""
        job = await self.hub.job(hub_number(job_id))
        if job["state"] not in FINAL:
            await self.hub.cancel(hub_number(job_id))
        self._remember(job, None, status=DELETED)

    def create_job_definition(self, model: Any) -> str:
        raise SchedulerError(NO_SCHEDULES)

    def update_job_definition(self, job_definition_id: str, model: Any) -> None:
        raise SchedulerError(NO_SCHEDULES)

    def create_job_from_definition(self, job_definition_id: str, model: Any) -> str:
        raise SchedulerError(NO_SCHEDULES)

    def get_staging_paths(self, model: Any) -> dict[str, str]:
        raise SchedulerError("A GPU job's outputs are in your home already, under jobs/.")

    def _in_home(self, input_uri: str) -> str:
        """The file's path relative to the home, as the hub wants it."""
        absolute = os.path.normpath(os.path.join(self.root_dir, input_uri))
        path = os.path.relpath(absolute, self.home)
        if path.startswith(".."):
            raise SchedulerError(f"{input_uri} is not in your home: a GPU job runs files there")
        return path

    def _located(self, home_path: str) -> str | None:
        path = os.path.relpath(os.path.join(self.home, home_path), self.root_dir)
        return path if self.file_exists(path) else None

    def _describe(self, job: dict[str, Any], row: Any) -> DescribeJob:
        return describe(job, getattr(row, "name", None), self._located)

    def _rows(self) -> dict[str, Any]:
        with self.db_session() as session:
            rows = session.query(Job).filter(Job.job_id.like(f"{JOB_PREFIX}%")).all()
            session.expunge_all()
        return {row.job_id: row for row in rows}

    def _remember(self, job: dict[str, Any], name: str | None, status: str = KEPT) -> None:
        """What the hub does not keep: the dialog's name, and a deletion from the list."""
        path = job.get("notebook") or job.get("script") or ""
        with self.db_session() as session:
            kept = session.get(Job, job["server"])
            if kept is None:
                kept = Job(
                    job_id=job["server"],
                    name=name,
                    input_filename=os.path.basename(path),
                    runtime_environment_name=job["profile"],
                )
                session.add(kept)
            kept.status = status
            session.commit()


def matches(job: DescribeJob, query: ListJobsQuery) -> bool:
    """jupyter-scheduler's list filters, as its own scheduler applies them."""
    return (
        (query.status is None or job.status == query.status)
        and query.job_definition_id is None  # no job here comes from a definition
        and (not query.name or job.name.startswith(query.name))
        and (not query.start_time or (job.start_time or 0) >= query.start_time)
        and all(tag in (job.tags or []) for tag in query.tags or [])
    )


def sort_key(value: Any) -> tuple[bool, Any]:
    return (value is None, value if value is not None else 0)
