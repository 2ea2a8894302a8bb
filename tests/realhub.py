"""A real JupyterHub (its own process, configurable-http-proxy, dockerd) for the tests.

Each hub gets its own folder, ports and container prefix, so hubs in one test run never
see each other's servers. Tests talk to it as users and admins do: the REST API, the
login and spawn pages, `docker inspect`.

Under pytest-xdist the workers share one dockerd. Each worker's names start with its own
tag (`unique_prefix`), its ports come from its own range (`free_port`), and its hubs
simulate a machine of their own (`SIMULATED_MACHINE`: GPU UUIDs no other worker has, so
their servers reach none of each other's GPUs) and ignore the other workers' containers
(`OTHER_WORKERS`): a container started by hand with `--gpus all` or a GPU index would
reach every simulated machine's GPUs by index, though it is use on another machine.
Within a worker, hubs see each other's containers as they would on one GPU server.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import requests
from artefacts import track_hub
from prometheus_client.parser import text_string_to_metric_families

from gpuspawner.engine.docker import bridge_gateway

# The GPU and CPU images scripts/testbed builds from images/ (the same variables name them there).
NOTEBOOK_IMAGE = os.environ.get("GPUSPAWNER_NOTEBOOK_IMAGE", "gpuspawner-notebook:latest")
CPU_IMAGE = os.environ.get("GPUSPAWNER_CPU_IMAGE", "gpuspawner-notebook-cpu:latest")
BASE_IMAGE = "gpuspawner-base:bookworm"  # plain Debian, for containers started by hand
PASSWORD = "test-password"
# A server that only holds its GPUs: a tiny HTTP server instead of JupyterLab, for tests of
# the books and the line, where a dozen JupyterLabs would crowd two cores.
LIGHT_SERVER = {
    "cmd": ["python3", "-m", "http.server", "8888"],
    "mem_limit": "64M",
    "extra_host_config": {"init": True},  # stops at once on SIGTERM
}

# A hub whose every server is the light one, for tests of what the hub does (the books, the
# line, limits, budgets, the calendar), not of JupyterLab: a JupyterLab's start takes 2 s of
# CPU more. A profile's own spawner_override still wins.
LIGHT_SERVERS = "".join(
    f"\nc.DockerSpawner.{key} = {value!r}" for key, value in LIGHT_SERVER.items()
)

# What this test session made, so its leftovers can be told from another run's (conftest.py).
SESSION_PREFIXES: set[str] = set()
SESSION_PROXY_PORTS: set[str] = set()
SESSION_WORKDIRS: set[Path] = set()

# pytest-xdist's worker of this process ("gw0", "gw1", …), and how many there are.
WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def worker_tag(worker: int) -> str:
    """What starts the names of `worker`'s containers, volumes and folders: "gs" alone
    without xdist, "gsw3x" for worker 3 (the x ends the number: w1x is not w10x)."""
    return f"gsw{worker}x" if WORKERS > 1 else "gs"


# Containers of the other workers, as c.GPUSpawner.ignore_gpu_containers names them.
OTHER_WORKERS = [f"{worker_tag(w)}*" for w in range(WORKERS) if w != WORKER]
# This worker's simulated machine (c.GPUSpawner.simulated_machine): GPU UUIDs of its own.
SIMULATED_MACHINE = f"tests-{worker_tag(WORKER)}"


def of_this_worker(container_name: str) -> bool:
    """Whether a container is this worker's (or, without xdist, any on the engine)."""
    return WORKERS == 1 or container_name.startswith(worker_tag(WORKER))


def unique_prefix(kind: str) -> str:
    """A container and volume prefix no other hub or test of the run has: `kind` says
    whose ("t": a real hub, "i": an in-process one, "homes": a test of `gpuspawner homes`)."""
    prefix = f"{worker_tag(WORKER)}{kind}{secrets.token_hex(3)}"
    SESSION_PREFIXES.add(prefix)
    return prefix


def processes_in(folders: set[Path]) -> dict[int, str]:
    """Processes running in one of `folders` (pid → command line): a hub's managed services,
    such as the idle culler, which JupyterHub starts in a session of their own."""
    found = {}
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            if proc.name.isdigit() and Path(os.readlink(proc / "cwd")) in folders:
                found[int(proc.name)] = (
                    (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                )
    return found


# Each worker takes ports from a range of its own, below Linux's ephemeral ports
# (32768 and up), so that neither another worker nor an outgoing connection takes a port
# between the moment it is chosen and the moment a hub or proxy binds it.
PORTS_PER_WORKER = 1000
FIRST_PORT = 20000 + WORKER * PORTS_PER_WORKER
_ports = itertools.cycle(range(FIRST_PORT, FIRST_PORT + PORTS_PER_WORKER))


def free_port() -> int:
    """A port nothing listens on, on any address (a hub binds the docker0 one), from this
    worker's range."""
    for port in itertools.islice(_ports, PORTS_PER_WORKER):
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in worker {WORKER}'s range")


def base_config(token: str, prefix: str, hub_ip: str) -> str:
    return textwrap.dedent(
        f"""
        c = get_config()
        c.JupyterHub.spawner_class = "gpu"
        c.DockerSpawner.image = {NOTEBOOK_IMAGE!r}
        c.DockerSpawner.prefix = {prefix!r}
        c.DockerSpawner.pull_policy = "never"
        c.DockerSpawner.remove = True
        # Homes as GPUSpawner's default keeps them, named for this hub (the session check and
        # remove_volumes find them by the prefix), so no test touches a real user's home.
        c.DockerSpawner.volumes = {{"{{prefix}}-home-{{username}}": "/home/jovyan"}}
        # JupyterHub polls each server at its default 30 s, as on a site; a module whose servers
        # end where only that poll sees them sets its own: a poll a second of every server by
        # every hub kept the hubs and dockerd busy on two cores shared by the whole suite.
        c.DockerSpawner.start_timeout = 60
        c.DockerSpawner.http_timeout = 60
        c.JupyterHub.hub_ip = {hub_ip!r}
        c.JupyterHub.hub_port = {free_port()}
        c.JupyterHub.bind_url = "http://127.0.0.1:{free_port()}"
        c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{free_port()}"
        c.JupyterHub.allow_named_servers = True
        c.JupyterHub.named_server_limit_per_user = 20
        c.JupyterHub.authenticator_class = "dummy"
        c.DummyAuthenticator.password = {PASSWORD!r}
        c.Authenticator.allow_all = True
        c.Authenticator.admin_users = {{"admin"}}
        c.JupyterHub.services = [{{"name": "tests", "api_token": {token!r}}}]
        c.JupyterHub.load_roles = [
            {{"name": "tests", "scopes": ["admin:users", "admin:servers", "admin:groups",
              "read:metrics", "access:servers", "custom:gpus:admin"], "services": ["tests"]}},
        ]
        # Other pytest-xdist workers' servers hold their own simulated GPUs (module docstring).
        c.GPUSpawner.simulated_machine = {SIMULATED_MACHINE!r}
        c.GPUSpawner.ignore_gpu_containers = {OTHER_WORKERS!r}
        """
    )


def polled(condition: Any, timeout: float) -> Any:
    """What `condition()` returns once it is true, or its last answer at `timeout` seconds.
    Asked at once, then less and less often (0.1 s apart, growing to 1 s): a wait that ends
    soon ends promptly, and a long one does not keep the hub (on two busy cores) answering
    the same question several times a second."""
    deadline = time.monotonic() + timeout
    pause = 0.1
    while not (result := condition()) and time.monotonic() < deadline:
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 1.5, 1.0)
    return result


RUNNING = "JupyterHub is now running"  # the hub's log line just before it sets its signal handlers


def restart_dockerd(timeout: float = 60) -> None:
    """Restart the Docker engine the way it was started (systemd, or by scripts/testbed)."""
    systemd = subprocess.run(["systemctl", "is-active", "--quiet", "docker"], capture_output=True)
    if systemd.returncode == 0:
        subprocess.run(["systemctl", "restart", "docker"], check=True)
    else:
        pid = int(Path("/var/run/docker.pid").read_text())
        os.kill(pid, signal.SIGTERM)
        assert _exited(pid, timeout), "dockerd did not stop"
        with open("/var/log/dockerd.log", "a") as log:
            subprocess.Popen(["dockerd"], stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + timeout
    while subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        assert time.monotonic() < deadline, "dockerd did not come back"
        time.sleep(0.3)


def _exited(pid: int, timeout: float) -> bool:
    """Whether the process ended; a dockerd this test session started is reaped, not left
    a zombie that /proc still lists (the second Docker restart in a session waits for it)."""
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists():
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
            if not Path(f"/proc/{pid}").exists():
                break
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@dataclass
class Hub:
    workdir: Path
    config: str
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    prefix: str = field(default_factory=lambda: unique_prefix("t"))
    env: dict[str, str] = field(default_factory=dict)  # for the hub process: DOCKER_HOST, …
    process: subprocess.Popen | None = None
    _runs_before: int = 0  # how often the log said the hub runs, before this start

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_file = self.workdir / "jupyterhub_config.py"
        hub_ip = bridge_gateway(docker.from_env())
        full = base_config(self.token, self.prefix, hub_ip) + textwrap.dedent(self.config)
        self.config_file.write_text(full)
        self.url = re.search(r'bind_url = "([^"]+)"', full).group(1)
        SESSION_WORKDIRS.add(self.workdir.resolve())
        SESSION_PROXY_PORTS.add(re.search(r'api_url = "http://127.0.0.1:(\d+)"', full).group(1))
        self.log_file = self.workdir / "hub.log"
        self.docker = docker.from_env()
        track_hub(self)  # its log in a failure's artefacts

    # --- process -----------------------------------------------------------
    def start(self, wait: bool = True) -> Hub:
        self._runs_before = self.log().count(RUNNING)
        log = self.log_file.open("a")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(self.config_file), "--debug"],
            cwd=self.workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **self.env},
        )
        if wait:
            self.wait_until_up()
        return self

    def wait_until_up(self, timeout: float = 60) -> None:
        """Until the hub has said it runs and then answered: it sets its SIGTERM handler
        right after saying so, and answers only after that, so a stop from here on is a
        graceful one (the API answers earlier, while a SIGTERM would still kill it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"hub exited with {self.process.returncode}:\n{self.log()}")
            try:
                running = self.log().count(RUNNING) > self._runs_before
                if running and requests.get(f"{self.url}/hub/api/", timeout=2).ok:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"hub did not answer in {timeout}s:\n{self.log()}")

    def stop(self) -> None:
        """A graceful stop: SIGTERM, as systemd does; then nothing of the hub's may remain."""
        if self.process and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            if not self._exited(60):
                os.kill(self.process.pid, signal.SIGKILL)
                self._exited(10)
            self._end_session()
        self._reap()

    def kill(self) -> None:
        """kill -9 of the hub and its proxy: nothing gets to clean up."""
        if self.process and self.process.poll() is None:
            self._end_session()
        self._reap()

    def _exited(self, timeout: float) -> bool:
        """Whether the hub exited within `timeout`, leaving it unreaped: until it is reaped,
        its pid is its session's and no other process's (Linux reuses a pid once it is free,
        and with pid_max 32768 a busy run frees thousands)."""
        deadline = time.monotonic() + timeout
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        while os.waitid(os.P_PID, self.process.pid, flags) is None:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _end_session(self) -> None:
        """SIGKILL to the hub's session, then its reaping. Only while the hub is not yet
        reaped: a session id of a reaped hub may be another worker's hub's now, or a
        browser's pasta (CI: a browser's connection closed mid-test on a loaded run)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def _reap(self) -> None:
        """Whatever the hub started outside its session goes with it, as systemd's
        KillMode=control-group does: its managed services (a culler), each in a session of
        its own and running in the hub's folder; and its proxy, which JupyterHub starts in
        a session of its own and names in jupyterhub-proxy.pid. A proxy that outlives its
        hub holds a port."""
        if self.process is None:
            return
        for pid in processes_in({self.workdir.resolve()}):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        pid_file = self.workdir / "jupyterhub-proxy.pid"
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text())
            if b"configurable-http-proxy" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)

    def remove_containers(self) -> None:
        """Every container of this hub gone: removed here, or, where Docker is removing one
        already (a job's --rm as the stopping hub ended it), once Docker says it is removed."""
        for container in self.containers(all=True):
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                continue
            except docker.errors.APIError as error:
                if "already in progress" not in str(error):
                    raise
                with contextlib.suppress(docker.errors.NotFound):
                    container.wait(condition="removed", timeout=60)

    def remove_volumes(self) -> None:
        """The homes this hub's users got (after remove_containers: Docker keeps a used one)."""
        for volume in self.volumes():
            volume.remove(force=True)

    def volumes(self) -> list:
        found = self.docker.volumes.list(filters={"name": self.prefix})
        return [v for v in found if v.name.startswith(self.prefix)]

    def home_of(self, user: str) -> str:
        """The name of `user`'s home volume, as base_config names it."""
        return f"{self.prefix}-home-{user}"

    def log(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    # --- REST API ----------------------------------------------------------
    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"token {self.token}", **kwargs.pop("headers", {})}
        url = f"{self.url}/hub/api{path}"
        response = requests.request(method, url, headers=headers, timeout=30, **kwargs)
        if method == "GET" and response.status_code == 503:
            # the proxy's kept connection to the hub was reset (a restart of dockerd takes
            # down the bridge the hub listens on): it answers 503 once, then reconnects
            response = requests.request(method, url, headers=headers, timeout=30, **kwargs)
        return response

    def add_users(self, *names: str, groups: dict[str, list[str]] | None = None) -> None:
        self.api("POST", "/users", json={"usernames": list(names)})
        for group, members in (groups or {}).items():
            self.api("POST", f"/groups/{group}")
            self.api("POST", f"/groups/{group}/users", json={"users": members})

    def pool(self) -> dict:
        """The pool as the hub reports it to admins (GET /hub/api/gpus)."""
        response = self.api("GET", "/gpus")
        response.raise_for_status()
        return response.json()

    def metrics(self) -> dict[tuple[str, tuple], float]:
        """/hub/metrics as Prometheus scrapes it: (name, sorted labels) → value."""
        response = self.api("GET", "/../metrics")
        response.raise_for_status()
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples
        }

    def held_by(self, user: str) -> list[str]:
        """UUIDs the pool says `user` holds, across all their servers."""
        return [g["uuid"] for g in self.pool()["gpus"] if (g["holder"] or {}).get("user") == user]

    def spawn(self, user: str, server: str = "", **user_options: Any) -> requests.Response:
        path = f"/users/{user}/servers/{server}"
        return self.api("POST", path, json={"user_options": user_options})

    def spawn_ready(self, user: str, server: str = "", **user_options: Any) -> dict:
        response = self.spawn(user, server, **user_options)
        assert response.status_code in (201, 202), response.text
        return self.wait_ready(user, server)

    def wait_started_by_browser(self, user: str, server: str = "") -> dict:
        """After a click on Start: the form's POST reaches the hub, then the server is ready."""
        self.wait_for(lambda: self.server_model(user, server), what=f"{user}/{server} listed")
        return self.wait_ready(user, server)

    def wait_ready(self, user: str, server: str = "", timeout: float = 90) -> dict:
        """The server's model once the hub's progress events (its pending page's own stream)
        say it is ready: one request that the hub answers as the start goes, rather than a
        question every moment. AssertionError where its start failed or none is under way."""
        url = f"{self.url}/hub/api/users/{user}/servers/{server}/progress"
        headers = {"Authorization": f"token {self.token}"}
        said: list[dict] = []
        try:  # (the hub writes a keepalive every 8 s: the read timeout is between those)
            with requests.get(url, headers=headers, stream=True, timeout=(30, timeout)) as events:
                for line in events.iter_lines() if events.ok else ():
                    if line.startswith(b"data:"):
                        said.append(json.loads(line[5:]))
                        if said[-1].get("ready") or said[-1].get("failed"):
                            break
        except requests.ReadTimeout:
            raise TimeoutError(f"{user}/{server} not ready in {timeout}s: {said[-3:]}") from None
        model = self.server_model(user, server)
        if model and model.get("ready"):
            return model
        raise AssertionError(
            f"{user}/{server} is not starting: {said[-1:] or events.text}\n{self.log()[-4000:]}"
        )

    def message_in_line(self, user: str, server: str = "") -> str:
        """The first message of a waiting start's pending page (its progress stream)."""
        path = f"/users/{user}/servers/{server}/progress"
        with self.api("GET", path, stream=True) as stream:
            for raw in stream.iter_lines():
                said = json.loads(raw[5:])["message"] if raw.startswith(b"data:") else ""
                if "in line" in said:
                    return said
        raise AssertionError(f"{user}/{server}'s start never waited in line")

    def server_model(self, user: str, server: str = "") -> dict | None:
        response = self.api("GET", f"/users/{user}")
        if not response.ok:  # what the hub was doing, for the failure's reader
            alive = "running" if self.process and self.process.poll() is None else "exited"
            raise AssertionError(
                f"GET /hub/api/users/{user}: {response.status_code} {response.text[:300]}; "
                f"the hub process is {alive}; its log ends:\n{self.log()[-4000:]}"
            )
        return response.json()["servers"].get(server)

    def stop_server(self, user: str, server: str = "", timeout: float = 60) -> None:
        response = self.api("DELETE", f"/users/{user}/servers/{server}")
        assert response.status_code in (202, 204), response.text
        stopped = polled(lambda: self.server_model(user, server) is None, timeout)
        assert stopped, f"{user}/{server} did not stop"

    def wait_gone(self, user: str, server: str = "", timeout: float = 30) -> None:
        gone = polled(lambda: self.server_model(user, server) is None, timeout)
        assert gone, f"{user}/{server} still listed"

    # --- As a person in a browser session ----------------------------------
    def login(self, user: str) -> requests.Session:
        """A logged-in session, as after the login page (with its XSRF cookie)."""
        session = requests.Session()
        session.get(f"{self.url}/hub/login", timeout=30)
        response = session.post(
            f"{self.url}/hub/login",
            data={"username": user, "password": PASSWORD, "_xsrf": session.cookies["_xsrf"]},
            timeout=30,
            allow_redirects=False,  # not on to the user's server: it may be coming or going
        )
        assert response.status_code == 302, response.text
        return session

    def submit_form(self, session: requests.Session, user: str, server: str = "", **fields: str):
        """Post the spawn form as the browser does, with the page's XSRF token."""
        path = f"/hub/spawn/{user}/{server}" if server else f"/hub/spawn/{user}"
        return session.post(
            f"{self.url}{path}",
            data={**fields, "_xsrf": session.cookies["_xsrf"]},
            timeout=60,
        )

    # --- Docker ------------------------------------------------------------
    def wait_for(self, condition: Any, timeout: float = 30, what: str = "condition") -> Any:
        """`condition()` once it returns something true (`polled`): what the hub does on its
        own ticks (the monitor, a cull, a job's pass) has no event to wait for."""
        result = polled(condition, timeout)
        if not result:
            raise TimeoutError(f"{what} not met in {timeout}s:\n{self.log()[-3000:]}")
        return result

    def gpu_states(self) -> dict[str, str]:
        return {g["uuid"]: g["state"] for g in self.pool()["gpus"]}

    def used_outside(self) -> dict[str, str]:
        """GPU → who uses it outside JupyterHub, for the GPUs the pool keeps out as external."""
        gpus = self.pool()["gpus"]
        return {g["uuid"]: g["used_outside_hub_by"] for g in gpus if g["state"] == "external"}

    def docker_run(self, name: str, *options: str, image: str = BASE_IMAGE) -> str:
        """A container started by hand with the docker command, as a colleague would. Named
        after the hub: the other workers' hubs ignore it only so (one started with an index
        or `--gpus all` would reach their GPUs too)."""
        command = ["docker", "run", "-d", "--rm", "--name", f"{self.prefix}-{name}", *options]
        return subprocess.run(
            [*command, image, "sleep", "300"], check=True, capture_output=True, text=True
        ).stdout.strip()

    def containers(self, all: bool = False) -> list:
        """This hub's containers (by its name prefix)."""
        found = self.docker.containers.list(all=all, filters={"name": self.prefix})
        return [c for c in found if c.name.startswith(self.prefix)]

    def container_of(self, user: str, server: str = "") -> Any:
        for container in self.containers():
            labels = container.labels
            if labels.get("gpuspawner.user") == user and labels.get("gpuspawner.server") == server:
                return container
        raise AssertionError(f"no running container for {user}/{server}")

    def visible_devices(self, user: str, server: str = "") -> str | None:
        """NVIDIA_VISIBLE_DEVICES as the container's init process has it (Docker sets it there)."""
        container = self.container_of(user, server)
        container.reload()
        environ = Path(f"/proc/{container.attrs['State']['Pid']}/environ").read_bytes()
        for entry in environ.split(b"\0"):
            name, _, value = entry.decode().partition("=")
            if name == "NVIDIA_VISIBLE_DEVICES":
                return value
        return None

    def held_uuids(self, user: str, server: str = "") -> list[str]:
        value = self.visible_devices(user, server)
        return [] if value in (None, "void") else value.split(",")
