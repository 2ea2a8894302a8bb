"""gpuspawner-job, the runner in a job's container (labextension/gpuspawner_lab/job.py).

The CPU notebook image as the hub would start a job's container (`tini -g --
gpuspawner-job <singleuser args>`, a named volume as the home), but without a hub: the
progress reports go to a small HTTP server in this process, on the address the hub has on
docker0. What the user sees afterwards is read from the home volume: the executed
notebook, the log, the checkpoint their code saved on `docker stop`.
"""

from __future__ import annotations

import io
import json
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import PurePosixPath
from typing import Any

import docker
import jupyterhub
import pytest
import requests
from in_container import read_file
from realhub import CPU_IMAGE, unique_prefix

from gpuspawner.engine.docker import bridge_gateway

pytestmark = pytest.mark.docker

HOME = "/home/jovyan"
USER = "ann@lab"  # quoted in the report's URL
TOKEN = "job-runner-test-token"
SINGLEUSER_ARGS = ["--ip=0.0.0.0", "--port=8888"]


@dataclass
class Report:
    path: str
    authorization: str | None
    body: dict[str, Any]


class HubAPI(ThreadingHTTPServer):
    """Stands in for the hub's API: records each POST, answers 200."""

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, RecordingHandler)
        self.reports: list[Report] = []

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/hub/api"

    def of(self, server: str) -> list[Report]:
        return [r for r in self.reports if f"/servers/{server}/" in r.path]


class RecordingHandler(BaseHTTPRequestHandler):
    server: HubAPI

    def do_GET(self) -> None:
        """The single-user server's check of its hub, at start: it exits if that fails."""
        self.send_response(200)
        self.send_header("X-JupyterHub-Version", jupyterhub.__version__)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.reports.append(Report(self.path, self.headers["Authorization"], body))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def hub_api() -> Iterator[HubAPI]:
    server = HubAPI((bridge_gateway(docker.from_env()), 0))  # any port: bound, not guessed
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@dataclass
class Run:
    """One job container: started, then read once it has exited (or while it runs)."""

    container: Any
    server: str
    hub_api: HubAPI
    exit_code: int | None = None

    def wait(self) -> int:
        self.exit_code = self.container.wait(timeout=180)["StatusCode"]
        return self.exit_code

    def read(self, path: str) -> str:
        text = read_file(self.container, f"{HOME}/{path}")
        assert text is not None, f"no file {path}"
        return text

    def exists(self, path: str) -> bool:
        try:
            self.container.get_archive(f"{HOME}/{path}")
        except docker.errors.NotFound:
            return False
        return True

    def wait_for_file(self, path: str, timeout: float = 90) -> None:
        """Until the job's own code writes `path` (it is then where the test wants it)."""
        deadline = time.monotonic() + timeout
        while not self.exists(path):
            self.container.reload()
            assert self.container.status == "running", self.container.logs().decode()
            assert time.monotonic() < deadline, f"no {path} in {timeout} s"
            time.sleep(0.2)

    def wait_until_served(self, timeout: float = 90) -> None:
        """Until the job's single-user server answers at its prefix, in the container."""
        self.container.reload()
        address = self.container.attrs["NetworkSettings"]["IPAddress"]
        url = f"http://{address}:8888{prefix_of(self.server)}api"
        deadline = time.monotonic() + timeout
        while True:
            try:
                if requests.get(url, timeout=2).ok:
                    return
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, f"{url} did not answer:\n{self.logs()}"
            time.sleep(0.3)

    def notebook(self, path: str) -> dict[str, Any]:
        return json.loads(self.read(path))

    @property
    def reports(self) -> list[dict[str, Any]]:
        return [r.body for r in self.hub_api.of(self.server)]

    @property
    def final(self) -> dict[str, Any]:
        """The last report, less the CPU share it measured (a fraction, or None unmeasured)."""
        report = dict(self.reports[-1])
        busy = report.pop("cpu_busy")
        assert busy is None or 0 <= busy <= 1, busy
        return report

    def logs(self) -> str:
        return self.container.logs().decode()


@dataclass
class Home:
    """A user's home volume, and the job containers started on it."""

    volume: str
    hub_api: HubAPI
    client: Any = field(default_factory=docker.from_env)
    containers: list[Any] = field(default_factory=list)

    def start(
        self, job: dict[str, Any], files: dict[str, str] | None = None, served: bool = False
    ) -> Run:
        """A job's container as the hub starts it, with `files` put into the home first.
        Its server is named after the home: another test's reports are not its own.
        `served`: with what the single-user server needs to come up (without it, it fails
        at once and the job runs on)."""
        server = f"{self.volume}-{job['id']}"
        serving = {
            "JUPYTERHUB_SERVICE_URL": f"http://0.0.0.0:8888{prefix_of(server)}",
            "JUPYTERHUB_SERVICE_PREFIX": prefix_of(server),
            "JUPYTERHUB_CLIENT_ID": f"jupyterhub-user-ann-{server}",
            "JUPYTERHUB_BASE_URL": "/",
        }
        container = self.client.containers.create(
            CPU_IMAGE,
            ["gpuspawner-job", *SINGLEUSER_ARGS],
            name=f"{server}-{len(self.containers)}",
            environment={
                "GPUSPAWNER_JOB": json.dumps(job),
                "JUPYTERHUB_API_URL": self.hub_api.url,
                "JUPYTERHUB_API_TOKEN": TOKEN,
                "JUPYTERHUB_USER": USER,
                "JUPYTERHUB_SERVER_NAME": server,
                **(serving if served else {}),
            },
            volumes={self.volume: {"bind": HOME, "mode": "rw"}},
        )
        self.containers.append(container)
        if files:
            container.put_archive(HOME, tar_of(files))
        container.start()
        return Run(container, server, self.hub_api)


def prefix_of(server: str) -> str:
    return f"/user/ann/{server}/"


def tar_of(files: dict[str, str]) -> bytes:
    """The files, and their folders, as a tar owned by jovyan, for put_archive."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        folders = {str(p) for name in files for p in PurePosixPath(name).parents} - {"."}
        for folder in sorted(folders):
            info = tarfile.TarInfo(folder)
            info.type, info.uid, info.gid, info.mode = tarfile.DIRTYPE, 1000, 1000, 0o755
            tar.addfile(info)
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.uid, info.gid, info.mode = len(data), 1000, 1000, 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def home(hub_api: HubAPI) -> Iterator[Home]:
    client = docker.from_env()
    volume = client.volumes.create(unique_prefix("job"))
    home = Home(volume.name, hub_api, client)
    yield home
    for container in home.containers:
        container.remove(force=True)
    volume.remove(force=True)


MARKDOWN = {"cell_type": "markdown", "id": "m", "metadata": {}, "source": "# A job"}


def notebook(*cells: str) -> str:
    """A notebook with these code cells (and a markdown cell first, which is not counted)."""
    code = [
        {"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": None,
         "outputs": [], "source": source}
        for i, source in enumerate(cells)
    ]  # fmt: skip
    return json.dumps(
        {
            "nbformat": 4,
            "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
            "cells": [MARKDOWN, *code],
        }
    )


def texts(cell: dict[str, Any]) -> list[str]:
    """What a cell shows: its streams' text, its result, its error."""
    shown = []
    for output in cell["outputs"]:
        if output["output_type"] == "stream":
            shown.append("".join(output["text"]))
        elif output["output_type"] == "error":
            shown.append(f"{output['ename']}: {output['evalue']}")
        else:
            shown.append("".join(output["data"]["text/plain"]))
    return shown


def code_cells(nb: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def test_a_notebook_runs_cell_by_cell_and_is_saved_with_every_output(home: Home):
    job = {"id": "job-1", "notebook": "work/three.ipynb", "outputs": "jobs/job-1", "attempt": 1}
    three = notebook("print('one')", "21 * 2", "import sys\nprint('three', file=sys.stderr)")
    run = home.start(job, {"work/three.ipynb": three})
    assert run.wait() == 0, run.logs()

    executed = run.notebook("jobs/job-1/three.ipynb")
    assert [texts(c) for c in code_cells(executed)] == [["one\n"], ["42"], ["three\n"]]
    assert [c["execution_count"] for c in code_cells(executed)] == [1, 2, 3]
    assert run.read("work/three.ipynb") == three  # the notebook itself is left as it was

    reports = run.reports
    assert [(r["state"], r["cells"]) for r in reports] == [
        ("running", {"done": 0, "total": 3}),
        ("running", {"done": 1, "total": 3}),
        ("running", {"done": 2, "total": 3}),
        ("running", {"done": 3, "total": 3}),
        ("done", {"done": 3, "total": 3}),
    ]
    assert run.final == {
        "state": "done",
        "attempt": 1,
        "cells": {"done": 3, "total": 3},
        "tail": ["one", "42", "three"],
        "error": None,
        "output": "jobs/job-1/three.ipynb",
    }
    [report, *_] = run.hub_api.of(run.server)
    assert report.path == f"/hub/api/users/ann%40lab/servers/{run.server}/gpu-job"
    assert report.authorization == f"token {TOKEN}"

    log = run.read("jobs/job-1/log.txt").splitlines()
    assert log[0].startswith("attempt 1 started at ")
    assert log[1:-1:2] == [f"cell {n} of 3 started" for n in (1, 2, 3)]
    assert log[-1].startswith("attempt 1 done at ")


def test_a_failing_cell_keeps_its_error_and_ends_the_run(home: Home):
    job = {"id": "job-2", "notebook": "fails.ipynb", "outputs": "out", "attempt": 1}
    failing = notebook("print('one')", "raise ValueError('boom')", "print('three')")
    run = home.start(job, {"fails.ipynb": failing})
    assert run.wait() == 1, run.logs()

    one, two, three = code_cells(run.notebook("out/fails.ipynb"))
    assert texts(one) == ["one\n"]
    assert texts(two) == ["ValueError: boom"]
    assert three["outputs"] == [] and three["execution_count"] is None  # not run

    assert run.final["state"] == "failed"
    assert run.final["error"] == "cell 2 of 3 failed: ValueError: boom"
    assert run.final["cells"] == {"done": 1, "total": 3}
    assert run.final["tail"] == ["one", "ValueError: boom"]
    assert "cell 2 of 3 failed: ValueError: boom" in run.read("out/log.txt")


def test_a_scripts_output_goes_to_the_log_and_its_tail_to_the_hub(home: Home):
    script = """import sys
for n in range(25):
    print("line", n)
print("to stderr", sys.argv[1:], file=sys.stderr)
"""
    job = {"id": "job-3", "script": "count.py", "args": ["--epochs", "3"], "outputs": "o"}
    job["attempt"] = 1
    run = home.start(job, {"count.py": script})
    assert run.wait() == 0, run.logs()

    lines = [*(f"line {n}" for n in range(25)), "to stderr ['--epochs', '3']"]
    log = run.read("o/log.txt").splitlines()
    assert log[1:-1] == lines and log[-1].startswith("attempt 1 done at ")
    assert run.final == {
        "state": "done",
        "attempt": 1,
        "cells": None,
        "tail": lines[-20:],
        "error": None,
        "output": "o/log.txt",
    }
    assert isinstance(run.reports[-1]["cpu_busy"], float)  # the container's cgroup says
    # reports are timed, not one per line: the start, perhaps one while it printed, the end
    assert run.reports[0]["state"] == "running" and len(run.reports) <= 3
    assert "line 24" in run.logs()  # the container's log shows it too


def test_a_script_that_fails_fails_the_job(home: Home):
    job = {"id": "job-4", "script": "run.sh", "outputs": "o", "attempt": 1}
    run = home.start(job, {"run.sh": "echo half way\nexit 3\n"})
    assert run.wait() == 1, run.logs()
    assert run.final["state"] == "failed"
    assert run.final["error"] == "run.sh exited with code 3"
    assert run.final["tail"] == ["half way"]


TRAPS_SIGTERM = """
import pathlib, signal, sys, time

def save_checkpoint(signum, frame):
    print("saving a checkpoint", flush=True)
    pathlib.Path("checkpoint.txt").write_text("epoch 7")
    sys.exit(0)

signal.signal(signal.SIGTERM, save_checkpoint)
print("training", flush=True)
pathlib.Path("ready").touch()
while True:
    time.sleep(0.05)
"""


@pytest.mark.parametrize(
    "script",
    [
        "train.py",
        "train.sh",  # bash running python: SIGTERM reaches the python too
    ],
)
def test_docker_stop_lets_a_script_save_a_checkpoint(home: Home, script: str):
    job = {"id": "job-5", "script": script, "outputs": "o", "attempt": 1}
    run = home.start(
        job, {"train.py": TRAPS_SIGTERM, "train.sh": "python3 train.py\necho after python\n"}
    )
    run.wait_for_file("ready")
    run.container.stop(timeout=10)
    assert run.wait() == 143, run.logs()

    assert run.read("checkpoint.txt") == "epoch 7"
    assert run.final["state"] == "stopped" and run.final["error"] is None
    log = run.read("o/log.txt")
    assert "training\nsaving a checkpoint\n" in log
    assert log.splitlines()[-1].startswith("attempt 1 stopped at ")


def test_docker_stop_lets_a_notebook_cell_save_a_checkpoint(home: Home):
    job = {"id": "job-6", "notebook": "train.ipynb", "outputs": "o", "attempt": 1}
    train = notebook(
        "print('setup')",
        """import signal, time
from pathlib import Path
stopping = False

def save_checkpoint(signum, frame):
    global stopping
    Path("checkpoint.txt").write_text("epoch 3")
    stopping = True

signal.signal(signal.SIGTERM, save_checkpoint)
Path("ready").touch()
while not stopping:
    time.sleep(0.05)
print("checkpoint saved")""",
        "print('evaluate')",
    )
    run = home.start(job, {"train.ipynb": train}, served=True)
    run.wait_for_file("ready")
    run.wait_until_served()  # the user can open the job's server while it runs
    run.container.stop(timeout=10)
    assert run.wait() == 143, run.logs()

    assert run.read("checkpoint.txt") == "epoch 3"
    setup, training, evaluate = code_cells(run.notebook("o/train.ipynb"))
    assert texts(setup) == ["setup\n"] and texts(training) == ["checkpoint saved\n"]
    assert evaluate["outputs"] == []  # the run stops after the cell that had the SIGTERM
    assert run.final["state"] == "stopped" and run.final["cells"] == {"done": 2, "total": 3}
    assert run.read("o/log.txt").splitlines()[-1].startswith("attempt 1 stopped at ")


def test_a_second_attempt_keeps_the_first_attempts_notebook(home: Home):
    flaky = notebook(
        "import json, os\nattempt = json.loads(os.environ['GPUSPAWNER_JOB'])['attempt']\n"
        "print('attempt', attempt)",
        "assert attempt > 1, 'flaky'",
    )
    first = {"id": "job-7", "notebook": "flaky.ipynb", "outputs": "jobs/job-7", "attempt": 1}
    run = home.start(first, {"flaky.ipynb": flaky})
    assert run.wait() == 1, run.logs()
    again = home.start({**first, "attempt": 2})
    assert again.wait() == 0, again.logs()

    kept = code_cells(again.notebook("jobs/job-7/flaky.attempt-1.ipynb"))
    assert [texts(c) for c in kept] == [["attempt 1\n"], ["AssertionError: flaky"]]
    latest = code_cells(again.notebook("jobs/job-7/flaky.ipynb"))
    assert [texts(c) for c in latest] == [["attempt 2\n"], []]
    log = again.read("jobs/job-7/log.txt")
    assert "attempt 1 started at " in log and "attempt 2 started at " in log
    assert [r["attempt"] for r in again.reports if r["state"] != "running"] == [1, 2]
    assert again.final["state"] == "done" and again.final["output"] == "jobs/job-7/flaky.ipynb"


@pytest.mark.parametrize(
    ("job", "error", "output"),
    [
        ({"notebook": "/etc/train.ipynb", "outputs": "o"},
         "the job's notebook '/etc/train.ipynb' is not inside the home folder", None),
        ({"script": "train.py", "outputs": "work/../../o"},
         "the job's outputs folder 'work/../../o' is not inside the home folder", None),
        ({"notebook": "missing.ipynb", "outputs": "o"},
         "no notebook missing.ipynb in the home folder", "o/log.txt"),
    ],
)  # fmt: skip
def test_a_bad_job_fails_and_says_why(home: Home, job: dict[str, Any], error: str, output):
    run = home.start({"id": "job-8", "attempt": 1, **job})
    assert run.wait() == 1, run.logs()
    [report] = run.reports
    assert report["state"] == "failed" and report["error"] == error
    assert report["output"] == output
    if output:
        assert error in run.read(output)
