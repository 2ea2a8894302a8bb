"""The doctor's lines for a Swarm: one per node, as the swarm's manager sees it.

On a Swarm the hub's GPUs are on other machines, and the manager is the only
view of them the hub has: whether each node is up and takes new servers, its
Docker version, and the GPUs it advertises (daemon.json's
`node-generic-resources`). What a node's GPUs need beyond that — NVIDIA as its
default runtime (a service cannot choose one, and only that runtime reads the
GPUs gpuspawner names for a server) and a toolkit that reads them where
gpuspawner puts them (engine/swarmspec.py) — is in files on the node that the
manager cannot read, so every node's line says what to check there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..core.nodes import Node
from ..devices.wire import AgentAnswer
from ..engine.shared_homes import NOT_WRITABLE, why_not_shared
from .checks import Finding, Status, failed, passed, warning

DockerVersion = tuple[int, int, int]

# moby#44378: an older engine kills the tasks holding generic resources when its node is updated
# (gpuspawner's never hold any: a warning for the node's other services).
FIXED_DOCKER: DockerVersion = (23, 0, 2)
TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"


def docker_version(text: str) -> DockerVersion | None:
    """(23, 0, 2) from "23.0.2" or "23.0.2-ce"; None from "" or a development build's name."""
    found = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text)
    if found is None:
        return None
    return int(found[1]), int(found[2]), int(found[3] or 0)


def judge_nodes(nodes: Sequence[Node]) -> list[Finding]:
    return [judge_node(node) for node in nodes]


def judge_node(node: Node) -> Finding:
    """The node's worst problem sets its status; the line names every one, each with its fix."""
    name = node.hostname or node.id
    problems: list[tuple[Status, str, str]] = []
    if not node.ready:
        problems.append(
            (
                Status.FAIL,
                "its GPUs are out of the pool until it is back",
                f"start {name}, or Docker on it (systemctl start docker), and let it reach a "
                "manager (TCP 2377 and 7946, UDP 7946 and 4789); `docker node ls` shows it "
                "Ready once it is back",
            )
        )
    version = docker_version(node.engine_version)
    fixed = _dotted(FIXED_DOCKER)
    if version is None:
        problems.append(
            (
                Status.WARN,
                f"its Docker version is unknown, so it was not checked for moby#44378 "
                f"(fixed in {fixed})",
                f"check `docker version` on {name}: it must be {fixed} or newer",
            )
        )
    elif version < FIXED_DOCKER:
        problems.append(
            (
                Status.WARN,
                "this Docker kills the tasks holding generic resources when the node is "
                f"updated (moby#44378, fixed in {fixed}); gpuspawner's servers hold none, "
                "but any other service reserving GPUs there would be killed",
                f"upgrade Docker on {name} to {fixed} or newer",
            )
        )
    if node.availability == "drain":
        problems.append(
            (
                Status.WARN,
                "drained: Swarm stops the servers on it and places no new one there",
                f"`docker node update --availability active {name}` when it should take "
                "servers again",
            )
        )
    elif node.availability == "pause":
        problems.append(
            (
                Status.WARN,
                "paused: its servers run on, but no new one is placed there",
                f"`docker node update --availability active {name}` when it should take "
                "servers again",
            )
        )
    if not node.gpus:
        problems.append(
            (
                Status.WARN,
                "no GPU server is placed there",
                f"list its GPUs in {name}'s /etc/docker/daemon.json as "
                '"node-generic-resources": ["NVIDIA-GPU=<UUID>", …] (`nvidia-smi -L` shows '
                "the UUIDs) and restart Docker; a node without GPUs is fine for CPU-only servers",
            )
        )
    subject, facts, unseen = f"Node {name}", _facts(node), _unseen_settings(name)
    if not problems:
        return passed(subject, f"{facts}. {unseen}")
    status = Status.FAIL if any(s is Status.FAIL for s, _, _ in problems) else Status.WARN
    return Finding(
        status,
        subject,
        f"{facts}: " + "; ".join(reason for _, reason, _ in problems),
        "; ".join(fix for _, _, fix in problems) + f". {unseen}",
    )


def _facts(node: Node) -> str:
    """ "ready, active, Docker 24.0.7, 2 GPUs advertised (GPU-…, GPU-…), manager"."""
    gpus = len(node.gpus)
    advertised = (
        f"{gpus} GPU{'s' if gpus > 1 else ''} advertised ({', '.join(node.gpus)})"
        if gpus
        else "no GPU advertised"
    )
    version = f"Docker {node.engine_version}" if node.engine_version else "Docker ?"
    role = ", manager" if node.manager else ""
    return f"{node.state}, {node.availability}, {version}, {advertised}{role}"


def _unseen_settings(name: str) -> str:
    """What a GPU node needs that only a look on the node itself shows."""
    return (
        "The manager cannot see its runtime or toolkit settings, so check on "
        f"{name} that it can give servers their GPUs: "
        "`docker info` must show Default Runtime: nvidia (a service cannot choose one), and "
        f"{TOOLKIT_CONFIG} must set accept-nvidia-visible-devices-as-volume-mounts = true, "
        "leave swarm-resource unset, and keep nvidia-container-runtime.mode at one that "
        'honours those mounts ("legacy" where a jit-cdi mode ignores them)'
    )


def judge_agent(node: Node, answer: AgentAnswer | None, error: str = "") -> Finding:
    """Whether the node's agent (`gpuspawner agent`) answers the hub with its GPUs."""
    subject = f"Agent on {node.hostname}"
    if answer is None:
        return warning(
            subject,
            f"does not answer ({error}): the hub sees no telemetry or health of its GPUs, so "
            "GPU-aware culling falls back to JupyterHub's activity there",
            f'run `gpuspawner agent` on {node.hostname} (docs/swarm.md, "Each node\'s eyes"), '
            "reachable from the hub on agent_port, with the hub's agent_token",
        )
    sick = {u: s.health for u, s in answer.samples.items() if s.health}
    said = f"answers for {len(answer.samples)} GPU(s)"
    if sick:
        return failed(
            subject,
            f"{said}; unhealthy: " + ", ".join(f"{u} ({why})" for u, why in sorted(sick.items())),
            "the hub gives these GPUs to no new server; check them with nvidia-smi on "
            f"{node.hostname}",
        )
    return passed(subject, f"{said}, all healthy")


def judge_shared_homes(node: Node, path: str, uid: int, answer: int | str) -> Finding:
    """Whether the node mounts the hub's shared storage for homes (`shared_homes.probe_node`
    found the hub's marker there, and wrote as the notebook user)."""
    subject = f"Shared homes on {node.hostname}"
    if answer == 0:
        return passed(subject, f"{path} is the hub's shared storage, writable by uid {uid}")
    fix = (
        f"mount the shared storage at {path} on {node.hostname} (as on the hub's host), so "
        "that it holds the hub's marker file (.gpuspawner-shared-homes); until then servers "
        "there would find an empty home"
    )
    if answer == NOT_WRITABLE:
        fix = (
            f"let uid {uid} keep its uid on {node.hostname}'s mount of {path} (NFSv4 id "
            "mapping, or an export that squashes all users, turns it into nobody)"
        )
    return failed(subject, why_not_shared(answer, path, uid), fix)


def judge_swarm_unreachable(error: str) -> Finding:
    return failed(
        "Swarm manager",
        f"cannot list the swarm's nodes, so none was checked: {error}",
        "point the hub at a manager of the swarm (DOCKER_HOST, or the spawner's client_kwargs "
        "and tls_config) and check that `docker node ls` answers there",
    )


def _dotted(version: DockerVersion) -> str:
    return ".".join(map(str, version))
