"""Every implementation and test double of gpuspawner's seams, held to its protocol.

mypy checks this module (pyproject.toml's `files`): each function below is a conversion it
must accept, as k8s-device-plugin's `var _ ResourceManager = &resourceManager{}` is one the
Go compiler must, so an implementation or a double that lacks a member of its seam, or
whose method cannot be called as the seam says, fails `mypy`. `SEAMS` names the same pairs
for test_conformance.py, which checks them at run time too: the spawners' bases
(DockerSpawner, JupyterHub's Spawner) are untyped, and mypy takes a class with an untyped
base to have every member.
"""

from __future__ import annotations

from doubles import Adapter, Cluster, GoneEngine, Removals

from gpuspawner.config.adapter import EngineAdapter, Mover
from gpuspawner.devices.agent_host import AgentHost
from gpuspawner.devices.checkpoint import CheckpointDriver, CheckpointHost, CudaDriver, OnThisHost
from gpuspawner.devices.nvml import NvmlSource
from gpuspawner.devices.simulated import SimulatedSource
from gpuspawner.devices.simulated_checkpoint import SimulatedCheckpointDriver, SimulatedHost
from gpuspawner.devices.source import GPUSource, NodeAgents
from gpuspawner.devices.swarm import SwarmSource
from gpuspawner.engine.base import Engine
from gpuspawner.engine.docker import DockerEngine
from gpuspawner.engine.swarm import SwarmEngine
from gpuspawner.hub.books.jobs_part import JobsPart
from gpuspawner.hub.engines.docker import GPUSpawner
from gpuspawner.hub.engines.swarm import NodeHomes, SwarmGPUSpawner
from gpuspawner.hub.jobs.board import JobBoard
from gpuspawner.hub.line import status as line_status
from gpuspawner.hub.line import waiting as line


# --- where containers run: the engines, and the tests' -------------------------------------
def docker_engine(engine: DockerEngine) -> Engine:
    return engine


def swarm_engine(engine: SwarmEngine) -> Engine:
    return engine


def gone_engine(engine: GoneEngine) -> Engine:
    return engine


def removals(engine: Removals) -> Engine:
    return engine


def cluster(engine: Cluster) -> Engine:
    return engine


# --- where the GPUs come from --------------------------------------------------------------
def nvml(source: NvmlSource) -> GPUSource:
    return source


def simulated(source: SimulatedSource) -> GPUSource:
    return source


def swarm_source(source: SwarmSource) -> GPUSource:
    return source


def swarm_agents(source: SwarmSource) -> NodeAgents:
    return source


def simulated_host(source: SimulatedSource) -> SimulatedHost:
    return source


# --- the checkpoint driver, and where its calls are made --------------------------------
def cuda(driver: CudaDriver) -> CheckpointDriver:
    return driver


def stand_in(driver: SimulatedCheckpointDriver) -> CheckpointDriver:
    return driver


def this_host(host: OnThisHost) -> CheckpointHost:
    return host


def agent_host(host: AgentHost) -> CheckpointHost:
    return host


# --- the engine adapters, and the doctor's double ---------------------------------------
def docker_adapter(adapter: GPUSpawner) -> EngineAdapter:
    return adapter


def swarm_adapter(adapter: SwarmGPUSpawner) -> EngineAdapter:
    return adapter


def adapter_double(adapter: Adapter) -> EngineAdapter:
    return adapter


def node_homes(mover: NodeHomes) -> Mover:
    return mover


# --- inside the hub -------------------------------------------------------------------------
def jobs(board: JobBoard) -> JobsPart:
    return board


def waiting_line(waiting: line.Line) -> line_status.Line:
    return waiting


SEAMS: list[tuple[type, list[type]]] = [
    (Engine, [DockerEngine, SwarmEngine, GoneEngine, Removals, Cluster]),
    (GPUSource, [NvmlSource, SimulatedSource, SwarmSource]),
    (NodeAgents, [SwarmSource]),
    (SimulatedHost, [SimulatedSource]),
    (CheckpointDriver, [CudaDriver, SimulatedCheckpointDriver]),
    (CheckpointHost, [OnThisHost, AgentHost]),
    (EngineAdapter, [GPUSpawner, SwarmGPUSpawner, Adapter]),
    (Mover, [NodeHomes]),
    (JobsPart, [JobBoard]),
    (line_status.Line, [line.Line]),
]
