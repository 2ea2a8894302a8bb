"""Before a cell runs, bring this server's GPU work back if the hub parked it (docs/parking.md).

An IPython extension, loaded into every kernel of the notebook images (the images'
`ipython_kernel_config.json`). Before each cell it asks the hub for this server's lease,
with the server's own token (the kernel inherits it); where the lease says the server's GPU
work is parked, it asks the hub to bring it back (`POST …/gpu-lease/wake`: the job lent
the GPU gives way), says so in the cell's output, and lets the cell run once the work is
back. The CUDA driver would hold the cell's GPU calls anyway until then; this is what asks
for the GPU, and what tells the user why the cell waits.

Outside a JupyterHub, or where the hub does not answer, the cell runs as it would: a
parked kernel's GPU calls then wait until something else wakes it.

It acts in the kernel rather than in the notebook server: the kernel is where a cell
starts, whatever client sent it (JupyterLab, VS Code, nbclient), and it needs no
hook into the server's websocket channels.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from typing import Any

from .hub_urls import lease_url

ASK_SECONDS = 2.0  # how long a cell waits for the hub's answer before it runs regardless
LONGEST_SECONDS = 600.0  # how long a cell waits for its GPU work to come back
EVERY_SECONDS = 1.0


def load_ipython_extension(ipython: Any) -> None:
    ipython.events.register("pre_run_cell", before_cell)


def unload_ipython_extension(ipython: Any) -> None:
    ipython.events.unregister("pre_run_cell", before_cell)


def before_cell(info: object = None) -> None:
    url, token = lease_url(os.environ), os.environ.get("JUPYTERHUB_API_TOKEN")
    if url is None or not token:
        return
    lease = _ask("GET", url, token)
    state = _residency(lease)
    if state in (None, "resident"):
        return
    started = time.monotonic()
    if lease["residency"].get("turn"):
        _say(
            "You share this GPU in turns, and it is the other person's turn; "
            "yours comes once their GPU is idle, or when their turn ends …"
        )
    else:
        _say("Your GPU work was parked while your GPU was idle; bringing it back …")
    while time.monotonic() - started < LONGEST_SECONDS:
        state = _residency(_ask("POST", f"{url}/wake", token))
        if state in (None, "resident"):
            _say(f"Restored in {time.monotonic() - started:.0f} s; the cell runs.")
            return
        time.sleep(EVERY_SECONDS)
    _say(f"Not back after {LONGEST_SECONDS:.0f} s: the cell runs, and its GPU calls wait.")


def _ask(method: str, url: str, token: str) -> Any:
    request = urllib.request.Request(
        url, method=method, headers={"Authorization": f"token {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=ASK_SECONDS) as response:
            return json.load(response)
    except (OSError, ValueError):  # urllib's errors are OSErrors; ValueError: not JSON
        return None


def _residency(lease: Any) -> str | None:
    if not isinstance(lease, dict) or not isinstance(lease.get("residency"), dict):
        return None
    state = lease["residency"].get("state")
    return state if isinstance(state, str) else None


def _say(text: str) -> None:
    print(f"[gpuspawner] {text}", file=sys.stderr, flush=True)
