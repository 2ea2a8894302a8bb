"""Running the `gpuspawner` admin command as an admin does, and servers for it to find.

The servers are containers made as GPUSpawner makes them (engine.docker.isolate),
with names under a prefix the test owns, so a test sees and removes only its own.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, redirect_stderr, redirect_stdout, suppress
from pathlib import Path
from typing import Any

import docker
from realhub import unique_prefix

from gpuspawner.admin import cli
from gpuspawner.core.pool import Grant
from gpuspawner.engine import docker as engine

GPUSPAWNER = Path(sys.executable).with_name("gpuspawner")  # the console script


def gpuspawner(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The admin command as an admin runs it, in `cwd` (where it looks for
    jupyterhub_config.py) with `env`: its main, run in this test's process, so that each of
    the suite's many commands does not import JupyterHub again (2 s of CPU each). The console
    script itself runs as a process where another user runs it (test_usage_report.py), and
    in the release check."""
    out, err = io.StringIO(), io.StringIO()
    before, here = dict(os.environ), os.getcwd()
    os.environ.update({"NO_COLOR": "1", **(env or {})})
    os.chdir(cwd)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = cli.main(list(args))
    except SystemExit as exit:  # argparse's refusal of the arguments
        code = exit.code if isinstance(exit.code, int) else 2
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(before)
    return subprocess.CompletedProcess(["gpuspawner", *args], code, out.getvalue(), err.getvalue())


class Servers:
    """Containers this test creates; all removed at the end."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.api = docker.from_env().api
        self.ids: list[str] = []

    def create(
        self,
        name: str,
        image: str,
        grant: Grant | None,
        *,
        start: bool = True,
        labels: Mapping[str, str] | None = None,
        device_requests: list[dict[str, Any]] | None = None,
        binds: list[str] | None = None,
    ) -> str:
        """A container named prefix-name: a server of ours for `grant`, else a plain container."""
        kwargs: dict[str, Any] = {
            "host_config": {"NetworkMode": "none"},
            "labels": dict(labels or {}),
        }
        if grant is not None:
            kwargs = engine.isolate(kwargs, grant, self.prefix)
        if device_requests:
            kwargs["host_config"]["DeviceRequests"] = device_requests
        if binds:
            kwargs["host_config"]["Binds"] = binds
        created = self.api.create_container(
            image, command=["sleep", "600"], name=f"{self.prefix}-{name}", **kwargs
        )
        self.ids.append(created["Id"])
        if start:
            self.api.start(created["Id"])
        return created["Id"]

    def remove_all(self) -> None:
        for container in self.ids:
            with suppress(docker.errors.NotFound):
                self.api.remove_container(container, force=True)


@contextmanager
def servers(kind: str) -> Iterator[Servers]:
    made = Servers(unique_prefix(kind))
    try:
        yield made
    finally:
        made.remove_all()
