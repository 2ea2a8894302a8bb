"""JupyterHub's own MockHub with GPUSpawner, in the test process: a real hub, proxy and dockerd.

The hub is configured for GPUSpawner before it initialises, so gpuspawner's
start-up adapter runs as in a real hub and starts the broker. Each hub has
its own container prefix and proxy port, registered with `realhub` so the
session's check for leftovers covers them.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import docker
from jupyterhub.tests.mocking import MockHub
from realhub import (
    OTHER_WORKERS,
    SESSION_PROXY_PORTS,
    SIMULATED_MACHINE,
    free_port,
    unique_prefix,
)
from traitlets.config import Config

from gpuspawner.engine.docker import bridge_gateway
from gpuspawner.hub import attach
from gpuspawner.hub.books.broker import Broker, BrokerNotRunning
from gpuspawner.hub.engines.docker import GPUSpawner

# A notebook stand-in that starts in a blink: any answer but a 5xx tells the hub a server is up.
# DockerSpawner appends its arguments (--port=8888 …), which `python3 -c` ignores.
HTTP_STUB = [
    "python3",
    "-c",
    "import http.server as h; h.ThreadingHTTPServer(('', 8888), h.SimpleHTTPRequestHandler)"
    ".serve_forever()",
]


def gpu_hub_config(*, reachable_from_containers: bool = False, **gpuspawner: Any) -> Config:
    """A MockHub's config with GPUSpawner, its own container prefix and proxy port, and
    `gpuspawner` as c.GPUSpawner settings (4 simulated GPUs unless they say otherwise)."""
    c = Config()
    c.JupyterHub.spawner_class = GPUSpawner
    c.JupyterHub.allow_named_servers = True
    c.JupyterHub.named_server_limit_per_user = 10
    proxy_port = free_port()
    c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{proxy_port}"
    if reachable_from_containers:  # a real jupyterhub-singleuser calls the hub back
        c.JupyterHub.hub_ip = bridge_gateway(docker.from_env())
    prefix = unique_prefix("i")
    c.DockerSpawner.prefix = prefix
    # Homes named by the prefix, so no test touches a real user's home and all go after.
    c.DockerSpawner.volumes = {f"{prefix}-home-{{username}}": "/home/jovyan"}
    c.GPUSpawner.simulate_gpus = 4
    c.GPUSpawner.simulated_machine = SIMULATED_MACHINE  # the other workers' are others
    c.GPUSpawner.ignore_gpu_containers = OTHER_WORKERS  # (realhub)
    c.GPUSpawner.update(gpuspawner)
    SESSION_PROXY_PORTS.add(str(proxy_port))
    return c


@contextlib.asynccontextmanager
async def running_hub(config: Config) -> AsyncIterator[MockHub]:
    """A started MockHub and its broker, working in a folder of its own (the proxy's pid
    file, the usage ledger); afterwards none of them, nor its containers and homes."""
    # In a hub, importing the spawner installs the adapter; here the test run may have
    # imported it before JupyterHub's app module, so install it explicitly (it is idempotent).
    attach.install(GPUSpawner)
    app = MockHub.instance(config=config)
    with tempfile.TemporaryDirectory() as workdir, contextlib.chdir(workdir):
        try:
            await app.initialize([])
            await app.start()
            yield app
        finally:
            with contextlib.suppress(BrokerNotRunning):
                await Broker.current().shutdown()
            await app.stop()
            MockHub.clear_instance()
            remove_containers_and_homes(config.DockerSpawner.prefix)


def remove_containers_and_homes(prefix: str) -> None:
    client = docker.from_env()
    for container in client.containers.list(all=True, filters={"name": prefix}):
        if container.name.startswith(prefix):
            container.remove(force=True)
    for volume in client.volumes.list(filters={"name": prefix}):
        if volume.name.startswith(prefix):
            volume.remove(force=True)
