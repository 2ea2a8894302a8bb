"""SwarmGPUSpawner: GPUSpawner on a Docker Swarm whose nodes are GPU servers.

The books, the limits, the line and the form are GPUSpawner's; only where a
notebook runs changes. The pool lists every node's GPUs as the node advertises
them (`devices.swarm`), a grant is on one node (the placement policy picks it),
and the notebook is dockerspawner's SwarmSpawner service made safe by
`engine.swarmspec.isolate_service`: pinned to the grant's node by ID, given
exactly its UUIDs, never restarted. The books read the swarm through
`engine.swarm.SwarmEngine`: a server's GPUs come back only once Swarm lists
no task of it, and a node that is down gives no new server its GPUs.

Swarm without IPVS (and the hub outside the swarm's networks) reaches a
notebook at a port published on its own node (host mode), so a service's
endpoint is DNS round-robin with that port unless `network_name` puts the
hub and the notebooks on one overlay network (`use_internal_ip`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pprint import pformat
from typing import Any

import docker.errors
from docker.types import EndpointSpec, Mount
from dockerspawner import SwarmSpawner
from traitlets import Bool, Float, Integer, Unicode, default

from ...core.errors import GPUConfigError
from ...core.homes import away_chosen, said_of
from ...core.nodes import Node, counts_by_node
from ...core.pool import Grant
from ...core.pool_view import DeviceState, PoolView
from ...devices.agent_host import AgentAccess
from ...devices.source import GPUSource
from ...devices.swarm import TOKEN_VARIABLE, SwarmSource
from ...engine import home_move, shared_homes, storage
from ...engine.base import Engine
from ...engine.docker import api_client
from ...engine.labels import LABEL_JOB
from ...engine.swarm import HOLDING, SwarmEngine, isolate_service, read_node
from ...engine.swarmspec import job_service
from ..books.refusals import failed_start
from ..jobs.launch import Launch
from .docker import GPUSpawner


class SwarmGPUSpawner(GPUSpawner, SwarmSpawner):
    runs_on_nodes = True  # for the doctor: a line per node, and the manager's own
    _down_since: float | None = None  # since when this server's node has been down
    _allowed: frozenset[str] | None = None  # the machines this start's user may use
    device_mounts = Bool(
        True,
        config=True,
        help="""Also name a notebook's GPUs as the NVIDIA toolkit's volume-mount requests
        (/dev/null bound at /var/run/nvidia-container-devices/<UUID>).

        On a node whose toolkit has `accept-nvidia-visible-devices-as-volume-mounts =
        true` these outrank NVIDIA_VISIBLE_DEVICES, an image's "all" included; elsewhere
        they are harmless and NVIDIA_VISIBLE_DEVICES (always set) names the GPUs. Set
        False only for a node setup that refuses such binds.""",
    )

    node_down_grace = Float(
        30.0,
        config=True,
        help="""Seconds a server's node must stay down before the hub ends the server.

        Swarm calls a node down once it misses its heartbeats (about 5 s); a short network
        blip should not end the notebooks there. Until then, and until the node is back
        and Swarm confirms the server's task gone, its GPUs stay held.""",
    )

    agent_port = Integer(
        0,
        config=True,
        help="""The port of the agent on each GPU node (`gpuspawner agent`, 9401 by default);
        0 for none.

        The hub cannot ask NVML on the nodes: each node's agent answers the monitor with its
        GPUs' utilisation, memory, temperature, power and health, and which container runs
        each GPU process. Without agents the GPUs' telemetry is unknown, so GPU-aware
        culling falls back to JupyterHub's own activity and no GPU is marked unhealthy.""",
    )

    agent_token = Unicode(
        config=True,
        help="""The token the nodes' agents want (their GPUSPAWNER_AGENT_TOKEN); by default
        this hub's GPUSPAWNER_AGENT_TOKEN environment variable.""",
    )

    shared_homes = Unicode(
        "",
        config=True,
        help="""A folder on shared storage that every node, and the hub's host, mounts at
        this same path (NFS, CephFS, …): users' homes are kept there, one folder per user,
        so their files are on whichever node runs their server. "" (the default): homes
        are named volumes that each node keeps for itself, and a user's servers go to the
        node that holds theirs.

        The hub makes each user's folder, owned by the notebook user, and writes a marker
        at the top that `gpuspawner doctor` looks for on every node. A path the hub's host
        cannot write stops the hub. Example: `c.SwarmGPUSpawner.shared_homes =
        "/mnt/homes"`.""",
    )

    @default("volumes")
    def _default_volumes(self) -> dict[str, Any]:
        """The shared storage's folder per user, where there is one; else, as on one host,
        a named volume per user."""
        if self.shared_homes:
            home = f"{self.shared_homes.rstrip('/')}/{{username}}"
            return {home: storage.DEFAULT_HOME_DIR}
        return super()._default_volumes()

    def check_storage(self) -> None:
        """At hub start: the shared storage is there and the hub can write in it (its marker
        written), and `volumes` keeps no home elsewhere; GPUConfigError where not."""
        if not self.shared_homes:
            return
        elsewhere = [m.source for m in storage.node_homes(self.volumes)]
        if elsewhere:
            raise GPUConfigError(
                f"{shared_homes.SETTING} is set, but c.DockerSpawner.volumes keeps homes in "
                f"named volumes each node makes for itself ({', '.join(elsewhere)}): remove "
                "them from volumes (shared_homes alone keeps each user's home at "
                f"{self.shared_homes.rstrip('/')}/{{username}}), or unset shared_homes"
            )
        shared_homes.ready(self.shared_homes, self.notebook_uid, self.notebook_gid)

    def home_mover(self, engine: Engine) -> NodeHomes:
        """How the hub moves a home between nodes (`hub.homes.nodes.Homes.move`): by tasks the
        manager (a client of the mover's own) places on the engine's nodes."""
        client = api_client(self.client_kwargs, self.tls_config)
        return NodeHomes(client, lambda: engine.cluster_nodes() or [], self.image)

    @default("agent_token")
    def _default_agent_token(self) -> str:
        return os.environ.get(TOKEN_VARIABLE, "")

    @default("use_internal_ip")
    def _default_use_internal_ip(self) -> bool:
        """On the notebooks' overlay network only when there is one to share with the hub."""
        return bool(self.network_name)

    def make_engine(self) -> Engine:
        """The manager's view; with `shared_homes`, nodes that do not mount that storage
        (each asked every few minutes) are kept out of new starts."""
        client = api_client(self.client_kwargs, self.tls_config)
        if not self.shared_homes:
            return SwarmEngine(client)
        uid, path = self.notebook_uid, self.shared_homes
        probe = shared_homes.prober(client, self.image, path, uid)
        return SwarmEngine(client, also_unreachable=shared_homes.MountWatch(probe, path, uid).lost)

    def make_gpu_source(self, engine: Engine) -> GPUSource:
        if self.simulate_gpus or self.simulated_host:
            raise GPUConfigError(
                "c.GPUSpawner.simulate_gpus and simulated_host describe one host: on a swarm, "
                "the GPUs are those each node advertises (node-generic-resources)"
            )
        nodes = engine.cluster_nodes  # the manager's word, each time it is asked
        return SwarmSource(lambda: nodes() or [], AgentAccess(self.agent_port, self.agent_token))

    @property
    def homes_on_nodes(self) -> bool:
        """Whether users' homes are named volumes that each node makes for itself (no
        `volume_driver` reaching shared storage): then a user's servers go where their
        home is (`hub.homes.nodes`). A home bound from a path every node mounts moves freely."""
        return not self.volume_driver and bool(storage.node_homes(self.volumes))

    # --- the service ---------------------------------------------------------------
    def isolate(self, create_kwargs: dict[str, Any], grant: Grant) -> dict[str, Any]:
        """The service on its GPUs' node, with exactly them, reached at a host-mode port; a
        CPU-only server on its user's home node, where homes are each node's own."""
        node = self._node(grant.units[0].node) if grant.units else self._home_node()
        isolated = isolate_service(
            create_kwargs, grant, self.prefix, node.id if node else None, self.device_mounts
        )
        if not self.use_internal_ip and not self.extra_endpoint_spec:
            isolated["endpoint_spec"] = EndpointSpec(
                mode="dnsrr", ports={None: (self.port, "tcp", "host")}
            )
        return isolated

    def for_job(self, create_kwargs: dict[str, Any], launch: Launch) -> dict[str, Any]:
        """A job's service: its task gets the job's grace between SIGTERM and SIGKILL."""
        return job_service(create_kwargs, launch.grace, {LABEL_JOB: str(launch.job.id)})

    def _home_node(self) -> Node | None:
        """Where a CPU-only server runs where homes are each node's own: its user's home's
        node; for their first server, the node with the most free GPUs of those they may
        use (a home where their GPU servers can follow); None elsewhere, or where its user
        chose to start away from a home node that is not there."""
        if not self.broker.homes.on_nodes:
            return None
        nodes = {node.hostname: node for node in SwarmEngine(self.client).nodes()}
        home = self.broker.homes.of(self.user.name)
        if home is None:
            states = self.broker.calendar.states(self.broker.pool)  # drained GPUs: not free
            first = first_home(self.broker.pool, states, self._allowed, nodes)
            return nodes[first] if first else None
        node = nodes.get(home.node)
        if node is not None and node.ready:
            return node
        if away_chosen(self.user_options):
            return None  # as its user chose: anywhere, with that node's copy of the home
        state = node.state if node is not None else "no longer in the swarm"
        raise failed_start(
            f"{said_of(home)} {home.node} is {state} now: start again once it is back, or ask "
            "an admin to move your home (gpuspawner move-home).",
            "node",
            503,
        )

    def _node(self, hostname: str) -> Node:
        for node in SwarmEngine(self.client).nodes():
            if node.hostname == hostname:
                return node
        raise RuntimeError(f"node {hostname} is no longer in the swarm")

    @property
    def mounts(self) -> list[Mount]:
        """`volumes` as service mounts: a named volume (a home) is made on the node by Swarm
        (with `volume_driver` where one is set: homes that follow a user across nodes
        need a driver that reaches shared storage), a host path is bound."""
        driver = self.mount_driver_config
        return [
            Mount(
                target=volume["bind"],
                source=source,
                type="bind" if source.startswith("/") else "volume",
                read_only=volume["mode"] == "ro",
                driver_config=None if source.startswith("/") else driver,
            )
            for source, volume in self.volume_binds.items()
        ]

    async def prepare_storage(self) -> None:
        """On shared storage, the user's folder made from the hub's host (a bind whose source
        is missing fails the task on its node). A named volume is Swarm's to make, on the
        node that runs the task, the image's files copied in as Docker does on one host
        (a first CPU-only server's node is chosen among the user's machines: `_home_node`)."""
        self._allowed = self.user_limits().machines  # read here, not in isolate's thread
        if self.shared_homes:
            shared = self.shared_homes.rstrip("/") + "/"
            await self.prepare_mounts([m for m in self._mounts() if m.source.startswith(shared)])

    # --- while it starts and runs ----------------------------------------------------
    async def start_object(self) -> None:
        """Wait until the task runs; a task Swarm gave up on (rejected: an image missing on
        the node, a bad mount) fails the start at once, with Swarm's reason."""
        while True:
            task = await self.get_task()
            if not task:
                raise RuntimeError(f"Service {self.service_name} not found")
            status = task["Status"]
            state = status["State"].lower()
            if state == "running":
                self._down_since = None
                await self._settle_home(task["NodeID"])
                return
            if state not in HOLDING:
                raise RuntimeError(
                    f"Service {self.service_name} did not start ({state}): "
                    f"{status.get('Err') or status.get('Message') or pformat(status)}"
                )
            await asyncio.sleep(0.5)  # Swarm gives no event for a task's state

    async def _settle_home(self, node_id: str) -> None:
        """Where homes are each node's own, the node Swarm ran this server on holds its
        user's home (made there by its first server)."""
        if not self.broker.homes.on_nodes:
            return
        homes = [m for m in storage.homes(self._mounts()) if not m.on_host]
        node = read_node(await self.docker("inspect_node", node_id))
        if homes:
            self.broker.homes.settled(
                self.user.name, homes[0].source, node.hostname, self.broker.clock()
            )

    async def get_ip_and_port(self) -> tuple[str, int]:
        """Inside the overlay network, the service's name; else the host-mode port its task
        published on its node, at the node's address."""
        if self.use_internal_ip or self.use_internal_hostname:
            return await super().get_ip_and_port()
        task = await self.get_task()
        ports = ((task or {}).get("Status") or {}).get("PortStatus", {}).get("Ports") or []
        published = [p["PublishedPort"] for p in ports if p.get("TargetPort") == self.port]
        if not task or not published:
            raise RuntimeError(f"Service {self.service_name} published no port {self.port}")
        node = read_node(await self.docker("inspect_node", task["NodeID"]))
        return node.address, int(published[0])

    async def engine_poll(self) -> int | str | None:
        """A server whose node has been down for `node_down_grace` has ended as far as its
        user can tell: say so (a manager that errs instead says nothing). Its GPUs stay
        held until Swarm confirms its task gone (`SwarmEngine.remove_server`). Only
        "down" counts: Swarm calls every node "unknown" for a moment whenever a manager
        takes over, and "disconnected" while it looks for one, and the notebooks there
        run on."""
        task = await self.get_task()
        if task and task.get("NodeID"):
            down = await self._node_down(task["NodeID"])
            if down is None:
                self._down_since = None
            else:
                self._down_since = self._down_since or time.monotonic()
                if time.monotonic() - self._down_since >= self.node_down_grace:
                    return down
        return await super().engine_poll()

    async def _node_down(self, node_id: str) -> str | None:
        """Why the node is gone, in words; None while it is not down."""
        try:
            node = read_node(await self.docker("inspect_node", node_id))
        except docker.errors.NotFound:
            return f"its node {node_id} has left the swarm"
        return f"its node {node.hostname} is down" if node.state == "down" else None


def first_home(
    pool: PoolView,
    states: Mapping[str, DeviceState],
    allowed: Collection[str] | None,
    nodes: Mapping[str, Node],
) -> str | None:
    """The ready node, of those `allowed`, with the most free GPUs (ties to the name);
    `states`: each unit's as the calendar has it, so that a drained node draws no homes."""
    counts = counts_by_node(pool.units, states)
    free = {
        name: sum(count.free for count in kinds.values())
        for name, kinds in counts.items()
        if (allowed is None or name in allowed) and name in nodes and nodes[name].ready
    }
    return min(free, key=lambda name: (-free[name], name)) if free else None


@dataclass(frozen=True)
class NodeHomes:
    """A home volume's copy between nodes, and its old copy's end, by one-off tasks that
    the manager places on the nodes (`engine.home_move`), in the notebooks' image."""

    client: Any  # the manager's
    nodes: Callable[[], list[Node]]
    image: str

    def copy(self, volume: str, source: str, target: str) -> int | str:
        nodes = self._ready(source, target)
        if isinstance(nodes, str):
            return nodes
        old, new = nodes
        return home_move.copy_home(self.client, self.image, volume, old, new)

    def empty(self, volume: str, node: str) -> int | str:
        nodes = self._ready(node)
        if isinstance(nodes, str):
            return nodes
        return home_move.empty_home(self.client, self.image, volume, nodes[0])

    def _ready(self, *names: str) -> list[Node] | str:
        by_name = {n.hostname: n for n in self.nodes()}
        for name in names:
            node = by_name.get(name)
            if node is None or not node.ready:
                return f"node {name} is {'not in the swarm' if node is None else node.state}"
        return [by_name[name] for name in names]
