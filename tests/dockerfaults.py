"""A fault-injecting proxy in front of the Docker API, for tests of the GPU books.

Docker's real failures (a 500 on stop, a 409 on remove, an inspect that errs,
a request still in flight when a user cancels) are hard to provoke on demand,
so a hub under test talks to Docker through this proxy (`DOCKER_HOST` set to
`docker_host`), and the test sets rules while the hub runs: answer a request
with an error as dockerd would, or hold it, unseen by dockerd, until the test
lets it go (so it reaches Docker only after, say, the user cancelled). It also
notes every request it sees (`seen`), for counting what a step asks of Docker.

Everything else passes through to the real dockerd unchanged, except that each
request is rewritten to `Connection: close`: one request per connection, so
the proxy never has to frame a response.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import socketserver
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

DOCKER_SOCKET = "/var/run/docker.sock"
API_VERSION = re.compile(r"^/v\d+\.\d+(?=/)")
HOLD_LIMIT_SECONDS = 120  # a test that forgets to release must not hang the hub forever


@dataclass
class Rule:
    """Requests with this method whose path (without version and query) matches `path`."""

    method: str
    path: str
    status: int = 0  # answer with this status, or 0 to forward
    message: str = ""
    hold: bool = False  # hold the request, unseen by dockerd, until released
    after: int = 0  # let this many matching requests through first
    arrived: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        return method == self.method and re.fullmatch(self.path, path) is not None

    def release(self) -> None:
        self.released.set()

    def wait_arrived(self, timeout: float = 30) -> None:
        if not self.arrived.wait(timeout):
            raise TimeoutError(f"no {self.method} {self.path} reached Docker in {timeout}s")


@dataclass
class Request:
    method: str
    path: str  # without the API version and query: "/containers/create"
    head: bytes  # request line and headers, rewritten to Connection: close
    body: bytes


class DockerFaults:
    """The proxy, serving in a thread of the test process. Use as a context manager."""

    def __init__(self, upstream: str = DOCKER_SOCKET) -> None:
        self.upstream = upstream
        self.folder = Path(tempfile.mkdtemp(prefix="dockerfaults-"))
        self.socket_path = self.folder / "docker.sock"
        self.rules: list[Rule] = []
        self.seen: list[tuple[str, str]] = []  # every request, (method, path), in arrival order
        self.lock = threading.Lock()
        faults = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                faults._serve(self.request)

        self.server = socketserver.ThreadingUnixStreamServer(str(self.socket_path), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket_path}"

    # --- rules, set by the test ---------------------------------------------
    def fail(self, method: str, path: str, status: int = 500, message: str = "") -> Rule:
        """Answer matching requests with `status` and Docker's {"message": …}, until cleared."""
        return self._add(Rule(method, path, status, message or f"injected fault {status}"))

    def hold(self, method: str, path: str, after: int = 0) -> Rule:
        """Hold matching requests, unseen by dockerd, until `rule.release()` or `clear`;
        the first `after` of them go through."""
        return self._add(Rule(method, path, hold=True, after=after))

    def clear(self, *rules: Rule) -> None:
        """Lift rules (all of them if none named); held requests go on."""
        with self.lock:
            lifted = list(rules) or list(self.rules)
            self.rules = [r for r in self.rules if r not in lifted]
        for rule in lifted:
            rule.release()

    def _add(self, rule: Rule) -> Rule:
        with self.lock:
            self.rules.append(rule)
        return rule

    def _rule_for(self, request: Request) -> Rule | None:
        with self.lock:
            for rule in self.rules:
                if rule.matches(request.method, request.path):
                    rule.hits += 1
                    if rule.hits > rule.after:
                        return rule
        return None

    def close(self) -> None:
        self.clear()
        self.server.shutdown()
        self.server.server_close()
        with contextlib.suppress(OSError):
            self.socket_path.unlink()
            self.folder.rmdir()

    def __enter__(self) -> DockerFaults:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- one connection: one request -------------------------------------------
    def _serve(self, client: socket.socket) -> None:
        request = _read_request(client)
        if request is None:
            return
        with self.lock:
            self.seen.append((request.method, request.path))
        rule = self._rule_for(request)
        if rule is not None:
            rule.arrived.set()
            if rule.status:
                client.sendall(_answer(rule.status, rule.message))
                return
            if rule.hold:
                rule.released.wait(HOLD_LIMIT_SECONDS)
        with socket.socket(socket.AF_UNIX) as upstream:
            upstream.connect(self.upstream)
            upstream.sendall(request.head + request.body)
            while chunk := upstream.recv(65536):
                client.sendall(chunk)


def _read_request(client: socket.socket) -> Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ", 2)
    headers = [line for line in lines[1:] if line.split(":", 1)[0].lower() != "connection"]
    length = next(
        (int(h.split(":", 1)[1]) for h in headers if h.lower().startswith("content-length:")), 0
    )
    if any(h.lower().startswith("transfer-encoding:") for h in headers):
        raise NotImplementedError("chunked request bodies: docker-py sends none the hub uses")
    while len(body) < length:
        chunk = client.recv(65536)
        if not chunk:
            return None
        body += chunk
    path = API_VERSION.sub("", target.split("?", 1)[0])
    rewritten = "\r\n".join([f"{method} {target} {version}", *headers, "Connection: close"])
    return Request(method, path, rewritten.encode("latin-1") + b"\r\n\r\n", body)


def _answer(status: int, message: str) -> bytes:
    body = json.dumps({"message": message}).encode()
    return (
        f"HTTP/1.1 {status} Injected\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
