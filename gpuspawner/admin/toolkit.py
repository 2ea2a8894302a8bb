"""The NVIDIA Container Toolkit on this host: is its hook there, and is its version safe.

Docker gives a container GPUs by running the toolkit's
`nvidia-container-runtime-hook` (Docker registers its `nvidia` device driver
only if that hook is on dockerd's PATH when dockerd starts). The hook reports
the toolkit's version with `-version`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

HOOK = "nvidia-container-runtime-hook"

Version = tuple[int, int, int]


@dataclass(frozen=True)
class Advisory:
    """A published toolkit vulnerability: versions below `fixed_in` have it."""

    cve: str
    fixed_in: Version
    risk: str


# NVIDIA's security bulletins for the toolkit, the ones a notebook server must care about:
# each lets a crafted container image reach the host.
ADVISORIES = (
    Advisory("CVE-2024-0132", (1, 16, 2), "a crafted image can escape to the host"),
    Advisory("CVE-2025-23359", (1, 17, 4), "a crafted image can escape to the host"),
    Advisory("CVE-2025-23266", (1, 17, 8), "a crafted image can run code on the host as root"),
)


def find_hook(search_path: str | None = None) -> str | None:
    """The hook's path on `search_path` (default: this process's PATH), or None."""
    return shutil.which(HOOK, path=search_path)


def hook_version_output(hook: str) -> str:
    """What `HOOK -version` prints; "" if it printed nothing, failed or hung."""
    try:
        done = subprocess.run(
            [hook, "-version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout


def parse_version(output: str) -> Version | None:
    """1.17.8 from "NVIDIA Container Runtime Hook version 1.17.8\\ncommit: …"."""
    found = re.search(r"\bversion\s+v?(\d+)\.(\d+)\.(\d+)", output)
    return (int(found[1]), int(found[2]), int(found[3])) if found else None


def open_advisories(version: Version) -> list[Advisory]:
    return [advisory for advisory in ADVISORIES if version < advisory.fixed_in]


def dotted(version: Version) -> str:
    return ".".join(map(str, version))
