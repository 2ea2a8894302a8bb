"""A command run in a container, with what it printed read back reliably.

Docker's exec streams a command's output back over its attach connection, and for a command
that ends fast that output sometimes comes back empty (moby/moby#27289, docker/docker-py#2042):
a `cat` that printed the file read as ''. The exit code (from the exec's inspect) is never
lost. So the command writes what it prints into a file in the container, and the file comes
back through Docker's archive API, as `docker cp` reads it.
"""

from __future__ import annotations

import io
import secrets
import shlex
import tarfile
from dataclasses import dataclass
from typing import Any

import docker


@dataclass(frozen=True)
class Ran:
    exit_code: int
    output: str  # stdout and stderr, as they came


def run_in(container: Any, command: list[str] | str) -> Ran:
    """`command` (an argument list, or a line for `sh -c`) in a running container, as its
    user: its exit code and what it printed."""
    argv = ["sh", "-c", command] if isinstance(command, str) else list(command)
    printed = f"/tmp/.gpuspawner-tests-{secrets.token_hex(6)}"
    line = f"{shlex.join(argv)} >{printed} 2>&1"
    result = container.exec_run(["sh", "-c", line])
    return Ran(result.exit_code, read_file(container, printed) or "")


def read_file(container: Any, path: str) -> str | None:
    """A file's text in a container, through Docker's archive API; None where there is none."""
    try:
        chunks, _ = container.get_archive(path)
    except docker.errors.NotFound:
        return None
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as archive:
        member = archive.next()
        found = archive.extractfile(member) if member is not None else None
        return found.read().decode() if found is not None else None
