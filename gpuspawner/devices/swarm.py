"""The GPUs of a Docker Swarm's nodes, as each node advertises them to the manager.

The hub runs beside a manager, not on the GPU servers, so NVML on the hub's
host sees none of them. What the manager can read of a node is what its
dockerd advertises: the GPUs in daemon.json's `node-generic-resources`
("NVIDIA-GPU=GPU-…", as NVIDIA's Swarm guide sets them up; gpuspawner reads
them as an inventory and never asks Swarm to schedule them), and the node's
labels. Model and memory are not advertised: an admin gives them as node labels
(`docker node update --label-add gpuspawner.gpu-model="NVIDIA A100-SXM4-80GB"
--label-add gpuspawner.gpu-memory=80G`), or the GPUs are listed as "NVIDIA GPU"
of unknown memory (0), which profiles asking for memory then never match.

Telemetry comes from each node's agent (`gpuspawner agent`, on `agent_port`),
asked from the broker's worker thread each monitor tick, all nodes at once,
each with a short timeout, never through the hub's HTTP proxy. Without agents,
each GPU's sample is "unknown" (no utilisation, never marked unhealthy). With
them, a node that is down or whose agent does not answer gives no sample: its
GPUs' health marks stay as last reported, and GPU-aware culling there falls back
to JupyterHub's own activity.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from http.client import HTTPException
from urllib.parse import urlencode
from urllib.request import Request

from ..core.errors import GPUConfigError, InventoryConfigError
from ..core.gpus import GPU, Telemetry
from ..core.nodes import Node
from ..core.placement import Topology
from ..core.units import parse_memory
from .agent_host import DIRECT, NO_AGENTS, AgentAccess, AgentHost
from .checkpoint import CheckpointHost, HostOf
from .wire import AgentAnswer

SAMPLE_PATH = "/v1/sample"  # the agent's (admin/agent.py)
TOKEN_VARIABLE = "GPUSPAWNER_AGENT_TOKEN"  # the agent's token, in its environment
MAX_ASKED_AT_ONCE = 32  # nodes whose agents are asked in parallel, each tick

MODEL_LABEL = "gpuspawner.gpu-model"
MEMORY_LABEL = "gpuspawner.gpu-memory"
UNKNOWN_MODEL = "NVIDIA GPU"

log = logging.getLogger("gpuspawner")


class SwarmSource:
    """Every node's advertised GPUs, each on its node (`GPU.node`, the node's hostname),
    indexed in the order the node lists them (daemon.json's, which NVIDIA's guide writes
    in nvidia-smi's order); their telemetry from each node's agent."""

    names_only = False  # the nodes' GPUs are real ones (see NvmlSource)

    def __init__(
        self, nodes: Callable[[], Iterable[Node]], agents: AgentAccess = NO_AGENTS
    ) -> None:
        self.nodes = nodes  # blocking: asks the manager
        self.agents = agents
        self._owners: dict[int, str] = {}  # the last sample's GPU processes → container
        self._silent: dict[str, str] = {}  # nodes whose agent did not answer → why

    def list_gpus(self) -> list[GPU]:
        found = []
        for node in sorted(self.nodes(), key=lambda n: n.hostname):
            model, memory = _described(node)
            found += [
                GPU(uuid, index, model, memory, node=node.hostname)
                for index, uuid in enumerate(node.gpus)
            ]
        return found

    def topology(self, gpus: Sequence[GPU]) -> Topology:
        """Without wiring from afar: blocks by index, within each node (a grant never spans
        nodes, so pairs across them are never weighed)."""
        return Topology.by_index({g.uuid: g.index for g in gpus})

    def sample(self, uuids: Sequence[str]) -> dict[str, Telemetry]:
        """Each GPU's sample from its node's agent, all nodes asked at once. Without agents,
        every GPU's is "unknown"; with them, a GPU whose node is down or whose agent does
        not answer has none, so whatever the last answer said of its health stands."""
        if not self.agents.port:
            return {uuid: Telemetry() for uuid in uuids}
        wanted = set(uuids)
        asked = [
            (node, [u for u in node.gpus if u in wanted])
            for node in self.nodes()
            if node.ready and wanted.intersection(node.gpus)
        ]
        with ThreadPoolExecutor(max(1, min(len(asked), MAX_ASKED_AT_ONCE))) as pool:
            answers = list(pool.map(lambda pair: self._answer(*pair), asked))
        samples: dict[str, Telemetry] = {}
        owners: dict[int, str | None] = {}
        for (_, theirs), answer in zip(asked, answers, strict=True):
            if answer is None:
                continue
            samples.update({u: s for u, s in answer.samples.items() if u in theirs})
            # A PID is a node's own: one that two nodes report is nobody's for sure.
            for pid in (p for sample in answer.samples.values() for p in sample.processes):
                owner = answer.owners.get(pid)
                owners[pid] = owner if owners.get(pid, owner) == owner else None
        self._owners = {pid: owner for pid, owner in owners.items() if owner}
        return samples

    def _answer(self, node: Node, uuids: Sequence[str]) -> AgentAnswer | None:
        try:
            answer = self.ask(node, uuids)
        except (OSError, ValueError, HTTPException) as error:
            self._note_silent(node.hostname, str(error) or type(error).__name__)
            return None
        self._note_silent(node.hostname, None)
        return answer

    def address_of(self, hostname: str) -> str:
        """Where node `hostname`'s agent is reached (blocking: asks the manager); OSError
        when the manager lists no such node."""
        for node in self.nodes():
            if node.hostname == hostname:
                return node.address
        raise OSError(f"the manager lists no node {hostname}")

    # --- its abilities on the seam (`source.GPUSource`) -----------------------------------
    def process_owners(self, pids: Iterable[int]) -> dict[int, str]:
        """The container of each GPU process, as the last sample's agents said."""
        return {pid: self._owners[pid] for pid in pids if pid in self._owners}

    def container_pids(self, containers: Mapping[str, Iterable[str]]) -> dict[str, list[int]]:
        """None here: the hub's host runs none of the nodes' containers (each node's agent
        finds its own)."""
        return {key: [] for key in containers}

    def checkpoint_hosts(self, driver: str) -> HostOf:
        """Each node's driver calls, made by its agent (with its node's own driver, whatever
        `driver` says); GPUConfigError without the agents' port and token."""
        if not (self.agents.port and self.agents.token):
            raise GPUConfigError(
                "c.GPUSpawner.parking on a swarm: each node's agent parks its containers' "
                "work, and only for a hub with its token: set c.SwarmGPUSpawner.agent_port "
                "and agent_token (docs/swarm.md)"
            )
        hosts: dict[str, AgentHost] = {}

        def host_of(node: str) -> CheckpointHost:
            if node not in hosts:
                hosts[node] = AgentHost(node, lambda: self.address_of(node), self.agents)
            return hosts[node]

        return host_of

    def on_nodes(self) -> SwarmSource:
        """Its GPUs are on the swarm's nodes, each with an agent to ask."""
        return self

    def ask(self, node: Node, uuids: Sequence[str]) -> AgentAnswer:
        """One node's agent's answer (blocking, `agents.timeout` at most); OSError when it
        does not answer, ValueError when what answers is not an agent."""
        query = urlencode([("uuid", u) for u in uuids])
        request = Request(f"http://{node.address}:{self.agents.port}{SAMPLE_PATH}?{query}")
        if self.agents.token:
            request.add_header("Authorization", f"Bearer {self.agents.token}")
        with DIRECT.open(request, timeout=self.agents.timeout) as reply:
            return AgentAnswer.read(json.loads(reply.read()))

    def _note_silent(self, node: str, why: str | None) -> None:
        """Log once when a node's agent stops answering, and once when it answers again."""
        if why is not None and node not in self._silent:
            log.warning(
                "gpuspawner: the agent on node %s does not answer (%s): no word on its GPUs "
                "until it does (their health marks stand)",
                node,
                why,
            )
        elif why is None and node in self._silent:
            log.info("gpuspawner: the agent on node %s answers again", node)
        if why is None:
            self._silent.pop(node, None)
        else:
            self._silent[node] = why


def _described(node: Node) -> tuple[str, int]:
    labels = node.labels
    where = f"node {node.hostname}'s label {MEMORY_LABEL}"
    memory = parse_memory(labels.get(MEMORY_LABEL, 0), where, InventoryConfigError)
    return labels.get(MODEL_LABEL) or UNKNOWN_MODEL, memory
