"""`gpuspawner agent`: a GPU node's eyes, for a hub that runs on another machine.

A hub over a Docker Swarm (`SwarmGPUSpawner`) cannot ask NVML on its nodes.
This agent runs on each GPU node, as a global Swarm service or under systemd,
and answers the hub's monitor: `GET /v1/sample?uuid=GPU-…&uuid=…` gives each
GPU's telemetry (NVML's, or simulated GPUs' load file) and, for the processes
on them, the container each runs in, from `/proc/<pid>/cgroup` (the host's
/proc: mount it at `--proc` when the agent runs in a container). It answers
nothing else, changes nothing, and with a token (GPUSPAWNER_AGENT_TOKEN, the
hub's `agent_token`) answers only a request that carries it.

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

from ..devices.simulated import SimulatedSource
from ..devices.source import GPUSource
from ..devices.swarm import SAMPLE_PATH, TOKEN_VARIABLE
from ..devices.wire import telemetry_json
from ..engine import processes


class Agent:
    """What the node answers: telemetry of the GPUs asked for, and their processes' owners."""

    def __init__(
        self, source: GPUSource, owners: Callable[[Iterable[int]], dict[int, str]], token: str
    ) -> None:
        self.source = source
        self.owners = owners
        self.token = token
        self._lock = threading.Lock()  # NVML is asked one request at a time

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

        def _reply(self, status: HTTPStatus, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one request a monitor tick: nothing worth a line

    return Handler


def serve(agent: Agent, host: str, port: int) -> ThreadingHTTPServer:
    return ThreadingHTTPServer((host, port), handler_for(agent))


def main(args: argparse.Namespace) -> int:
    source: GPUSource
    if args.simulated_load:
        simulated = SimulatedSource(load_file=args.simulated_load)
        source, owners = simulated, simulated.process_owners
    else:
        from ..devices.nvml import NvmlSource  # only where the driver is

        proc = Path(args.proc)
        source, owners = NvmlSource(), lambda pids: processes.owners(pids, proc)
    token = os.environ.get(TOKEN_VARIABLE, "")
    server = serve(Agent(source, owners, token), args.host, args.port)
    print(f"gpuspawner agent: answering on {args.host}:{args.port}{SAMPLE_PATH}", flush=True)
    if not token:
        print(
            f"gpuspawner agent: warning: no {TOKEN_VARIABLE}, so anyone who reaches this port "
            "reads this node's GPU processes and their containers; set one, here and in the "
            "hub's agent_token",
            file=sys.stderr,
            flush=True,
        )
    server.serve_forever()
    return 0
