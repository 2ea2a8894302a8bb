"""`gpuspawner doctor`: can this host run the hub, and if not, what to fix.

The checks follow the setup guide's order — Docker, the NVIDIA Container
Toolkit, the driver and GPUs, the hub's config, its Swarm's nodes where it
has one, its images, the hub's address — and each prints one PASS, WARN or
FAIL line, with the fix under every WARN and FAIL. Any FAIL makes the exit
status 1, so doctor can gate a deploy.
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import docker
import jupyterhub
from docker.errors import DockerException
from requests.exceptions import RequestException

from ..config.adapter import EngineAdapter
from ..core.errors import GPUConfigError
from ..core.nodes import Node
from ..devices.source import GPUSource, NodeAgents
from ..devices.swarm import SwarmSource
from ..engine import shared_homes
from ..engine.docker import api_client, bridge_gateway
from . import dockerchecks, hubconfig, swarmchecks, toolkit
from .checks import (
    Finding,
    Status,
    failed,
    judge_config,
    judge_container_settings,
    judge_gpu_settings,
    judge_logins,
    judge_origins,
    judge_toolkit,
    judge_users_outside_groups,
    not_checked,
    nvml_findings,
    passed,
    simulated_gpu_findings,
)

NO_DOCKER = "Docker is unreachable (see the Docker line)"
NO_CONFIG = "jupyterhub_config.py cannot be used (see its line)"
NO_IMAGE = "none of the configured images is on this host to test with (see the Image lines)"


def main(args: argparse.Namespace) -> int:
    findings = examine(args.config or hubconfig.DEFAULT_PATH, args.simulate, args.simulated_load)
    report(findings, sys.stdout)
    return 1 if any(f.status is Status.FAIL for f in findings) else 0


def examine(config_path: Path, simulate: int | None, simulated_load: str) -> list[Finding]:
    """Every check, in the setup guide's order."""
    client, engine = dockerchecks.connect()
    hook = toolkit.find_hook()
    findings = [engine, judge_toolkit(hook, toolkit.hook_version_output(hook) if hook else "")]

    site: hubconfig.HubConfig | None = None
    try:
        site = hubconfig.load(config_path, simulate)
        config_finding = judge_config(config_path, site)
    except hubconfig.ConfigError as unusable:
        config_finding = judge_config(config_path, unusable)
    nodes, swarm_findings = _swarm(site.spawner) if site else (None, [])
    images = []
    if client and site:
        # each asks its image's jupyterhub-singleuser, which takes seconds: ask them all at once
        with ThreadPoolExecutor() as pool:
            images = list(pool.map(partial(dockerchecks.image_facts, client), site.images))
    probe_image = next((i.name for i in images if i.attrs is not None), None)

    driver = "Docker's nvidia device driver"
    if client is None:
        findings += [
            not_checked(driver, NO_DOCKER),
            not_checked("Docker's default runtime", NO_DOCKER),
        ]
    else:
        if probe_image:
            probe_error = dockerchecks.probe_device_driver(client, probe_image)
            findings.append(dockerchecks.judge_device_driver(probe_image, probe_error))
        else:
            findings.append(not_checked(driver, NO_CONFIG if site is None else NO_IMAGE))
        if nodes is None:  # a swarm's nodes need nvidia as theirs: their lines say so
            findings.append(dockerchecks.judge_default_runtime(client.info()))

    source: GPUSource | None = None
    driver_cuda = None
    if nodes is not None:  # the GPUs are on the nodes: this host's driver is not asked
        source = SwarmSource(lambda: nodes)
        advertised = sum(len(n.gpus) for n in nodes)
        findings.append(
            passed("GPUs", f"{advertised} advertised by {len(nodes)} Swarm node(s), below")
        )
    elif swarm_findings:
        findings.append(not_checked("GPUs", "the Swarm manager does not answer (see its line)"))
    else:  # the config says which: simulated GPUs, or the driver's
        simulated = hubconfig.simulated_source(site, simulate, simulated_load)
        source = simulated or hubconfig.gpu_source(site, simulate, simulated_load)
        if simulated is not None:
            findings += simulated_gpu_findings(simulated)
        else:
            gpu_findings, driver_cuda = nvml_findings()
            findings += gpu_findings

    findings.append(config_finding)
    if site is None:
        return [*findings, not_checked("Images and hub address", NO_CONFIG)]
    findings += [
        judge_gpu_settings(site, source)
        if source
        else not_checked("GPU profiles and limits", "no GPUs to check them against"),
        judge_users_outside_groups(site),
        judge_container_settings(site),
        judge_logins(site),
        judge_origins(site),
        *swarm_findings,
    ]
    if client is None:
        return [*findings, not_checked("Images and hub address", NO_DOCKER)]
    findings += [dockerchecks.judge_image(i, jupyterhub.__version__, driver_cuda) for i in images]
    return [*findings, _hub_finding(client, site, probe_image)]


def _swarm(spawner: EngineAdapter) -> tuple[list[Node] | None, list[Finding]]:
    """The nodes, and a line per node, when the hub's servers run on a Swarm; (None, [])
    on one host, and (None, [its FAIL]) when the manager does not answer."""
    try:
        engine = spawner.make_engine()
    except (DockerException, RequestException) as error:
        if spawner.runs_on_nodes:
            return None, [swarmchecks.judge_swarm_unreachable(str(error))]
        return None, []  # one host's engine: the Docker line says whether Docker answers
    try:
        nodes = engine.cluster_nodes()
    except (DockerException, RequestException) as error:  # no answer, or not a manager
        return None, [swarmchecks.judge_swarm_unreachable(str(error))]
    if nodes is None:  # one host
        return None, []
    findings = swarmchecks.judge_nodes(nodes)
    try:
        source = spawner.make_gpu_source(engine)
    except GPUConfigError:  # the config's own line says what is wrong
        return nodes, findings
    agents = source.on_nodes() if source is not None else None
    if agents is not None and agents.agents.port:
        findings += [_agent_finding(agents, n) for n in nodes if n.ready and n.gpus]
    if spawner.shared_homes:
        findings += _shared_homes_findings(spawner, nodes)
    return nodes, findings


def _shared_homes_findings(spawner: Any, nodes: list[Node]) -> list[Finding]:
    """A line per ready node: whether it mounts the hub's shared storage for homes, asked by
    a task on it (all nodes at once), as the hub asks them."""
    path, uid = spawner.shared_homes, spawner.notebook_uid
    try:
        shared_homes.ready(path, uid, spawner.notebook_gid)
    except GPUConfigError as error:
        return [failed("Shared homes", str(error), "mount the shared storage on this host too")]
    by_name = {n.hostname: n for n in nodes}
    manager = api_client(spawner.client_kwargs, spawner.tls_config)  # as the hub's engine's
    answers = shared_homes.ask(shared_homes.prober(manager, spawner.image, path, uid), nodes)
    return [
        swarmchecks.judge_shared_homes(by_name[name], path, uid, answer)
        for name, answer in answers.items()
    ]


def _agent_finding(source: NodeAgents, node: Node) -> Finding:
    try:
        return swarmchecks.judge_agent(node, source.ask(node, node.gpus))
    except (OSError, ValueError) as error:
        return swarmchecks.judge_agent(node, None, str(error))


def _hub_finding(
    client: docker.DockerClient, site: hubconfig.HubConfig, image: str | None
) -> Finding:
    address = site.hub_address()
    network = site.spawner.network_name
    impossible = dockerchecks.judge_hub_address(address, network, bridge_gateway(client))
    if impossible is not None:
        return impossible
    if image is None:
        return not_checked("Hub reachable from containers", NO_IMAGE)
    probe = dockerchecks.probe_hub(client, image, address, network)
    return dockerchecks.judge_hub_reach(address, network, probe)


COLOURS = {Status.PASS: "\033[32m", Status.WARN: "\033[33m", Status.FAIL: "\033[31m"}


def report(findings: list[Finding], out: TextIO) -> None:
    colour = out.isatty() and "NO_COLOR" not in os.environ
    for finding in findings:
        status = finding.status.value
        if colour:
            status = f"{COLOURS[finding.status]}{status}\033[0m"
        print(f"{status}  {finding.subject}: {finding.detail}", file=out)
        if finding.fix:
            print(f"      fix: {finding.fix}", file=out)
    counts = {status: sum(f.status is status for f in findings) for status in Status}
    print(
        f"\n{counts[Status.PASS]} passed, {counts[Status.WARN]} warning(s), "
        f"{counts[Status.FAIL]} failed",
        file=out,
    )
