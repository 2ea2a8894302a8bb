"""The three-node Docker Swarm of scripts/swarm-testbed, as tests across GPU servers see it:
a Docker client for each node, the manager's view of them, and services that clean up after
themselves (the fixtures are in tests/swarm/conftest.py)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import docker
from docker.models.containers import Container
from docker.models.services import Service
from docker.types import RestartPolicy
from realhub import NOTEBOOK_IMAGE, polled

BED = Path(__file__).resolve().parents[1] / "scripts" / "swarm-testbed"
SOCKETS = Path("/run/gpuspawner-swarm")
NODES = ("n1", "n2", "n3")  # n1 is the manager
CANNOT_START = 77  # scripts/swarm-testbed up where the bed cannot run here; why, on stderr
T = TypeVar("T")


def bed(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BED), *args], capture_output=True, text=True, timeout=900)


def wait_for(condition: Callable[[], T | None], what: str, timeout: float = 60) -> T:
    """`condition()` once it is truthy, polled for at most `timeout` seconds: a node's state
    and a task's have no event to wait on."""
    value = polled(condition, timeout)
    assert value, f"not within {timeout:.0f} s: {what}"
    return value


@dataclass
class Swarm:
    """The bed's nodes: a Docker client for each, and the manager's view of them."""

    clients: dict[str, docker.DockerClient]

    @property
    def manager(self) -> docker.DockerClient:
        return self.clients["n1"]

    def node(self, name: str) -> dict[str, Any]:
        return self.manager.api.inspect_node(name)  # by hostname: the nodes are n1..n3

    def node_id(self, name: str) -> str:
        return self.node(name)["ID"]

    def state(self, name: str) -> str:
        """What the manager says of the node: "ready", "down", …"""
        return self.node(name)["Status"]["State"]

    @staticmethod
    def address(name: str) -> str:
        """The node's address, where its host-mode ports are published."""
        return f"10.250.0.1{name.removeprefix('n')}"

    def gpus(self, name: str) -> list[str]:
        """The UUIDs of the node's simulated GPUs (its NVIDIA-GPU generic resources)."""
        resources = self.node(name)["Description"]["Resources"].get("GenericResources") or []
        return sorted(
            r["NamedResourceSpec"]["Value"]
            for r in resources
            if r.get("NamedResourceSpec", {}).get("Kind") == "NVIDIA-GPU"
        )

    def containers(self, name: str, service: Service) -> list[Container]:
        """The service's containers on the node, as its own dockerd lists them."""
        label = f"com.docker.swarm.service.id={service.id}"
        return self.clients[name].containers.list(all=True, filters={"label": label})

    def kill(self, name: str) -> None:
        """Crash the node as a power cut would: its dockerd and everything it runs."""
        killed = bed("kill", name)
        assert killed.returncode == 0, killed.stderr

    def restart(self) -> None:
        """Start again whatever node is down, and wait until all three are ready."""
        up = bed("up")
        assert up.returncode == 0, up.stderr


@dataclass
class Services:
    """Services a test creates on the swarm; removed after it, their containers gone."""

    swarm: Swarm
    created: list[Service] = field(default_factory=list)

    def create(self, node: str, **kwargs: Any) -> Service:
        """A service of one task pinned to `node`, never restarted, on the notebook image."""
        kwargs.setdefault("restart_policy", RestartPolicy(condition="none"))
        service = self.swarm.manager.services.create(
            NOTEBOOK_IMAGE,
            constraints=[f"node.id=={self.swarm.node_id(node)}"],
            **kwargs,
        )
        self.created.append(service)
        return service

    def wait_running(self, service: Service, timeout: float = 60) -> dict[str, Any]:
        """The service's one task, once the manager reports it running."""

        def running() -> dict[str, Any] | None:
            tasks = service.tasks()
            failed = [t["Status"] for t in tasks if t["Status"]["State"] in ("failed", "rejected")]
            assert not failed, f"{service.name}: {failed}"
            return next((t for t in tasks if t["Status"]["State"] == "running"), None)

        return wait_for(running, f"{service.name} running", timeout)

    def remove_all(self) -> None:
        for service in self.created:
            service.remove()

        def gone() -> bool:
            for name in NODES:
                with contextlib.suppress(docker.errors.DockerException):  # a node left down
                    if any(self.swarm.containers(name, s) for s in self.created):
                        return False
            return True

        wait_for(gone, "the test's services' containers removed", timeout=60)
