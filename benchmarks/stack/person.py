"""One person of the trace, as a client of the hub with their own API token.

They start the server their trace row says with its profile (`POST /hub/api/users/NAME/
servers/SERVER` with `user_options`), and record for each start, separately: when they
asked, when the hub granted GPUs, and when the server was ready. The grant and the ready
come from the hub's progress stream (`GET …/progress`, the pending page's own), read
while the start goes on: gpuspawner's spawner says "Reserved 1 GPU: …" (or "CPU only")
the moment the line grants, JupyterHub "Server ready" when it answers. A start granted
before the stream opened (a free GPU, granted within milliseconds) is recorded as
granted when the stream opened: late by at most that connection's time.

They make their kernel busy or idle through the load board (`stack.load`), are at the
notebook (`touch`: the activity JupyterLab reports), run a cell (the documented wake of a
parked server: `POST …/gpu-lease/wake`, what the images' kernels ask before each cell),
stop their server, and submit jobs through the jobs API.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import requests

from .load import LoadBoard

GRANTED = ("Reserved ", "CPU only")  # gpuspawner's progress messages once a start has its GPUs


@dataclass
class Start:
    """One start, in Unix seconds of this machine's clock."""

    server: str
    profile: str
    requested: float
    granted: float | None = None  # None: never granted, or ready before the stream opened
    ready: float | None = None
    failed: str | None = None  # the hub's reason
    events: list[tuple[float, str]] = field(default_factory=list)  # (when, message)

    def read(self, lines: Iterable[bytes], clock: Callable[[], float] = time.time) -> Start:
        """The progress stream's lines, each event stamped as it arrives."""
        for line in lines:
            if not line.startswith(b"data:"):
                continue  # the hub's keepalives
            event = json.loads(line[5:])
            now, message = clock(), str(event.get("message", ""))
            self.events.append((now, message))
            if self.granted is None and message.startswith(GRANTED):
                self.granted = now
            if event.get("ready"):
                self.ready = now
                break
            if event.get("failed"):
                self.failed = message
                break
        return self

    @property
    def wait_for_gpus(self) -> float | None:
        return None if self.granted is None else self.granted - self.requested

    @property
    def wait_for_ready(self) -> float | None:
        return None if self.ready is None else self.ready - self.requested


class Person:
    def __init__(self, hub_url: str, name: str, token: str, board: LoadBoard | None = None):
        self.hub_url, self.name, self.board = hub_url.rstrip("/"), name, board
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"token {token}"
        self.starts: list[Start] = []

    @classmethod
    def log_in(cls, hub_url: str, name: str, password: str, **kwargs: Any) -> Person:
        """A person who logged in and made themselves a token (as on the hub's Token page)."""
        session = requests.Session()
        session.get(f"{hub_url}/hub/login", timeout=30)
        xsrf = str(session.cookies["_xsrf"])
        form = {"username": name, "password": password, "_xsrf": xsrf}
        session.post(f"{hub_url}/hub/login", data=form, timeout=30, allow_redirects=False)
        made = session.post(
            f"{hub_url}/hub/api/users/{name}/tokens",
            json={"note": "the replay's scripted person"},
            headers={"X-XSRFToken": str(session.cookies["_xsrf"])},  # as set once logged in
            timeout=30,
        )
        made.raise_for_status()
        return cls(hub_url, name, made.json()["token"], **kwargs)

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", 30)
        return self.http.request(
            method, f"{self.hub_url}/hub/api/users/{self.name}{path}", **kwargs
        )

    # --- servers ------------------------------------------------------------------------
    def start(self, server: str = "", profile: str = "", timeout: float = 300) -> Start:
        """Ask for the server and follow its start to the end: the start, as recorded."""
        begun = Start(server, profile, time.time())
        self.starts.append(begun)
        answer: dict[str, requests.Response] = {}
        asking = threading.Thread(target=self._ask, args=(server, profile, answer), daemon=True)
        asking.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            said = answer.get("response")
            if said is not None and said.status_code not in (201, 202):
                begun.failed = f"{said.status_code}: {said.text[:500]}"
                return begun
            with self.api("GET", f"/servers/{server}/progress", stream=True,
                          timeout=(30, timeout)) as stream:  # fmt: skip
                if stream.ok:
                    return begun.read(stream.iter_lines())
            time.sleep(0.05)  # its record is not made yet: the request is on its way
        begun.failed = f"no progress within {timeout} s"
        return begun

    def _ask(self, server: str, profile: str, answer: dict[str, requests.Response]) -> None:
        body = {"user_options": {"profile": profile} if profile else {}}
        answer["response"] = self.api("POST", f"/servers/{server}", json=body, timeout=300)

    def model(self, server: str = "") -> dict[str, Any] | None:
        response = self.api("GET", "")
        response.raise_for_status()
        found: dict[str, Any] | None = response.json()["servers"].get(server)
        return found

    def stop(self, server: str = "", timeout: float = 120) -> None:
        response = self.api("DELETE", f"/servers/{server}", timeout=timeout)
        if response.status_code not in (202, 204):
            raise RuntimeError(f"{self.name} could not stop {server!r}: {response.text[:300]}")
        deadline = time.monotonic() + timeout
        while self.model(server) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}'s {server!r} did not stop in {timeout} s")
            time.sleep(0.2)

    # --- at the notebook ------------------------------------------------------------------
    def kernel(self, server: str, busy: bool) -> None:
        if self.board is None:
            raise RuntimeError("this person has no load board to make their kernel busy")
        self.board.kernel(self.name, server, busy)

    def touch(self, server: str = "") -> None:
        """Activity, as JupyterLab's server reports it for a person at the notebook."""
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        body = {"last_activity": now, "servers": {server: {"last_activity": now}}}
        self.api("POST", "/activity", json=body).raise_for_status()

    def residency(self, server: str = "") -> str:
        path = f"/servers/{server}/gpu-lease" if server else "/server/gpu-lease"
        response = self.api("GET", path)
        response.raise_for_status()
        return str(response.json()["residency"]["state"])

    def run_cell(self, server: str = "", busy: bool = True, timeout: float = 120) -> float:
        """A cell run: a parked server is woken first (the images' kernels ask the hub before
        each cell) and the cell waits until its GPU work is back. The seconds it waited."""
        asked = time.time()
        path = f"/servers/{server}/gpu-lease/wake" if server else "/server/gpu-lease/wake"
        self.api("POST", path).raise_for_status()
        deadline = time.monotonic() + timeout
        while self.residency(server) != "resident":
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}'s {server!r} not back in {timeout} s")
            time.sleep(0.2)
        waited = time.time() - asked
        if busy and self.board is not None:
            self.kernel(server, True)
        return waited

    # --- jobs -----------------------------------------------------------------------------
    def submit(self, body: dict[str, Any]) -> dict[str, Any]:
        response = self.api("POST", "/gpu-jobs", json=body)
        if response.status_code != 201:
            raise RuntimeError(f"{self.name}'s job was refused: {response.text[:500]}")
        job: dict[str, Any] = response.json()
        return job

    def job(self, job_id: int) -> dict[str, Any]:
        response = self.api("GET", f"/gpu-jobs/{job_id}")
        response.raise_for_status()
        job: dict[str, Any] = response.json()
        return job
