"""`gpuspawner doctor`: can this host run the hub, and if not, what to fix.

The checks follow the setup guide's order — Docker, the NVIDIA Container
Toolkit, the driver and GPUs, the hub's config, its images, the hub's
address — and each prints one PASS, WARN or FAIL line, with the fix under
every WARN and FAIL. Any FAIL makes the exit status 1, so doctor can gate a
deploy.
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TextIO

import docker
import jupyterhub

from ..devices.simulated import SimulatedSource
from ..engine.docker import bridge_gateway
from . import dockerchecks, hubconfig, toolkit
from .checks import (
    Finding,
    Status,
    judge_config,
    judge_container_settings,
    judge_gpu_settings,
    judge_logins,
    judge_toolkit,
    not_checked,
    nvml_findings,
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
        findings.append(dockerchecks.judge_default_runtime(client.info()))

    source = hubconfig.gpu_source(site, simulate, simulated_load)
    driver_cuda = None
    if isinstance(source, SimulatedSource):
        findings += simulated_gpu_findings(source)
    else:
        gpu_findings, driver_cuda = nvml_findings()
        findings += gpu_findings

    findings.append(config_finding)
    if site is None:
        return [*findings, not_checked("Images and hub address", NO_CONFIG)]
    findings += [
        judge_gpu_settings(site, source),
        judge_container_settings(site),
        judge_logins(site),
    ]
    if client is None:
        return [*findings, not_checked("Images and hub address", NO_DOCKER)]
    findings += [dockerchecks.judge_image(i, jupyterhub.__version__, driver_cuda) for i in images]
    return [*findings, _hub_finding(client, site, probe_image)]


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
