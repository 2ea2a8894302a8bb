"""`gpuspawner agent`: a GPU node's eyes and hands, for a hub that runs on another machine.

A hub over a Docker Swarm (`SwarmGPUSpawner`) cannot ask NVML on its nodes.
This agent runs on each GPU node, as a global Swarm service or under systemd,
and answers the hub's monitor: `GET /v1/sample?uuid=GPU-…&uuid=…` gives each
GPU's telemetry (NVML's, or simulated GPUs' load file) and, for the processes
on them, the container each runs in, from `/proc/<pid>/cgroup` (the host's
/proc: mount it at `--proc` when the agent runs in a container). With a token
(GPUSPAWNER_AGENT_TOKEN, the hub's `agent_token`) it answers only a request that
carries it.

With parking on, the hub asks it for the driver's calls on this node's processes
(`devices.agent_host`): `POST /v1/park`, `/v1/unpark` and `/v1/parked`. Those change
what runs, so the agent makes them only with a token set, only on processes that run
in a container, and one at a time; the driver's refusal is answered with its CUresult.

The standard library's threaded HTTP server is enough here: one hub asks every
`monitor_interval` seconds, and the agent must start on a node with nothing but
gpuspawner installed.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..devices import processes
from ..devices.agent_host import PARK_PATH, PARKED_PATH, REFUSED, UNPARK_PATH, refusal_json
from ..devices.checkpoint import CheckpointError, CheckpointHost, CudaDriver, OnThisHost
from ..devices.simulated import SimulatedSource
from ..devices.simulated_checkpoint import SimulatedCheckpointDriver
from ..devices.source import GPUSource
from ..devices.swarm import SAMPLE_PATH, TOKEN_VARIABLE
from ..devices.wire import telemetry_json

MAX_BODY = 1 << 20  # bytes of a hub's request: PIDs and container names


class Agent:
    """What the node answers: telemetry of the GPUs asked for, and their processes' owners;
    with parking, the driver's calls on its containers' processes (`host`, made on the
    first such call: a node without a driver that can park still answers the monitor)."""

    def __init__(
        self,
        source: GPUSource,
        owners: Callable[[Iterable[int]], dict[int, str]],
        token: str,
        host: Callable[[], CheckpointHost] | None = None,
    ) -> None:
        self.source = source
        self.owners = owners
        self.token = token
        self._make_host = host
        self._host: CheckpointHost | None = None
        self._lock = threading.Lock()  # NVML is asked one request at a time
        self._parking = threading.Lock()  # and the driver one call at a time, beside it

    def answer(self, uuids: Sequence[str]) -> dict[str, Any]:
        with self._lock:
            samples = self.source.sample(uuids)
            pids = [pid for sample in samples.values() for pid in sample.processes]
            owners = self.owners(pids)
        return {
            "node": socket.gethostname(),
            "gpus": {uuid: telemetry_json(sample) for uuid, sample in samples.items()},
            "owners": {str(pid): owner for pid, owner in owners.items()},
        }

    def call(self, path: str, body: Any) -> tuple[HTTPStatus | int, dict[str, Any]]:
        """A driver call the hub asks for, and its answer: (status, body)."""
        if not isinstance(body, dict):
            return HTTPStatus.BAD_REQUEST, {"error": "the body must be a JSON object"}
        if path == PARKED_PATH:
            containers, settle = body.get("containers"), bool(body.get("settle"))
            if not isinstance(containers, dict) or not all(
                isinstance(names, list) and all(isinstance(n, str) for n in names)
                for names in containers.values()
            ):
                return HTTPStatus.BAD_REQUEST, {"error": "containers must map keys to names"}

            def parked(host: CheckpointHost) -> dict[str, Any]:
                return {"parked": host.parked(containers, settle)}

            return self._with_host(parked)
        pids, timeout_ms = body.get("pids"), body.get("timeout_ms", 0)
        if not isinstance(pids, list) or not pids or not all(_is_pid(p) for p in pids):
            return HTTPStatus.BAD_REQUEST, {"error": "pids must be a list of process IDs"}
        if not (timeout_ms == 0 or _is_pid(timeout_ms)):
            return HTTPStatus.BAD_REQUEST, {"error": "timeout_ms must be milliseconds"}
        strangers = sorted(set(pids) - set(self.owners(pids)))
        if strangers:
            return HTTPStatus.FORBIDDEN, {
                "error": f"process {strangers[0]} runs in no container: the agent parks "
                "only containers' processes"
            }

        def moved(host: CheckpointHost) -> dict[str, Any]:
            if path == PARK_PATH:
                host.park(pids, timeout_ms)
            else:
                host.unpark(pids)
            return {}

        return self._with_host(moved)

    def _with_host(
        self, call: Callable[[CheckpointHost], dict[str, Any]]
    ) -> tuple[HTTPStatus | int, dict[str, Any]]:
        if self._make_host is None:
            return HTTPStatus.NOT_IMPLEMENTED, {"error": "this agent parks nothing"}
        with self._parking:
            try:
                if self._host is None:
                    self._host = self._make_host()
                return HTTPStatus.OK, call(self._host)
            except CheckpointError as error:
                return REFUSED, refusal_json(error)

    def allows(self, authorization: str | None) -> bool:
        if not self.token:
            return True
        expected = f"Bearer {self.token}".encode()
        return hmac.compare_digest((authorization or "").encode(errors="replace"), expected)


def handler_for(agent: Agent) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            if url.path != SAMPLE_PATH:
                self._reply(HTTPStatus.NOT_FOUND, {"error": f"only {SAMPLE_PATH} is served"})
            elif not agent.allows(self.headers.get("Authorization")):
                self._reply(HTTPStatus.UNAUTHORIZED, {"error": "a valid agent token is needed"})
            else:
                self._reply(HTTPStatus.OK, agent.answer(parse_qs(url.query).get("uuid", [])))

        def do_POST(self) -> None:
            if self.path not in (PARK_PATH, UNPARK_PATH, PARKED_PATH):
                self._reply(HTTPStatus.NOT_FOUND, {"error": f"{self.path} is not served"})
            elif not agent.token:
                self._reply(
                    HTTPStatus.FORBIDDEN,
                    {"error": f"the agent parks work only with a token: set {TOKEN_VARIABLE}"},
                )
            elif not agent.allows(self.headers.get("Authorization")):
                self._reply(HTTPStatus.UNAUTHORIZED, {"error": "a valid agent token is needed"})
            else:
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                    body = json.loads(self.rfile.read(max(0, min(length, MAX_BODY))))
                except (ValueError, RecursionError):  # not JSON, or nested past reason
                    body = None
                self._reply(*agent.call(self.path, body))

        def _reply(self, status: HTTPStatus | int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one request a monitor tick: nothing worth a line

    return Handler


def _is_pid(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def serve(agent: Agent, host: str, port: int) -> ThreadingHTTPServer:
    return ThreadingHTTPServer((host, port), handler_for(agent))


def this_node(
    args: argparse.Namespace,
) -> tuple[GPUSource, Callable[[Iterable[int]], dict[int, str]], Callable[[], CheckpointHost]]:
    """This node's GPUs, its GPU processes' containers, and where its driver calls are made:
    NVML, the host's /proc and the CUDA driver; or simulated GPUs and the driver's stand-in,
    made at once (what it holds parked leaves the GPUs' samples)."""
    if args.simulated_load:
        simulated = SimulatedSource(load_file=args.simulated_load)
        stand_in = SimulatedCheckpointDriver(
            host=simulated, state_file=f"{args.simulated_load}.checkpoints"
        )
        on_node = OnThisHost(stand_in, simulated.container_pids)
        return simulated, simulated.process_owners, lambda: on_node
    from ..devices.nvml import NvmlSource  # only where the driver is

    proc = Path(args.proc)

    def on_host() -> CheckpointHost:
        return OnThisHost(CudaDriver(), lambda names: processes.container_pids(names, proc))

    return NvmlSource(), lambda pids: processes.owners(pids, proc), on_host


def main(args: argparse.Namespace) -> int:
    source, owners, host = this_node(args)
    token = os.environ.get(TOKEN_VARIABLE, "")
    server = serve(Agent(source, owners, token, host), args.host, args.port)
    print(f"gpuspawner agent: answering on {args.host}:{args.port}{SAMPLE_PATH}", flush=True)
    if not token:
        print(
            f"gpuspawner agent: warning: no {TOKEN_VARIABLE}, so anyone who reaches this port "
            "reads this node's GPU processes and their containers, and the hub cannot have "
            "their work parked; set one, here and in the hub's agent_token",
            file=sys.stderr,
            flush=True,
        )
    server.serve_forever()
    return 0
