"""The idle culler's process, as the hub runs it (`python -m gpuspawner.hub.culler_process`):
jupyterhub-idle-culler's own main, with two guards.

- It ends on the SIGINT the hub stops it with even where the hub was started with SIGINT
  ignored (as a shell's background job is, and every child inherits): the hub would
  otherwise wait its 30 s interrupt_timeout for it at every stop.
- It ends when its hub does. JupyterHub starts a managed service in a session of its own,
  so a hub ended by `kill -9` (or the OOM killer) leaves it running, and every restart adds
  another culler. Linux's parent-death signal (prctl PR_SET_PDEATHSIG) ends it the moment
  the process that started it is gone.

It imports no more of gpuspawner than the culler's hook needs (the core).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def end_with_parent(parent: int) -> None:
    """SIGTERM this process when `parent` (its starter) ends; at once if it already has."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # it ended before the signal was asked for
        os.kill(os.getpid(), signal.SIGTERM)


def main() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    end_with_parent(int(os.environ.get("GPUSPAWNER_HUB_PID", os.getppid())))
    from jupyterhub_idle_culler import main as cull

    cull()


if __name__ == "__main__":
    main()
