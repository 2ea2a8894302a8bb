"""The doctor's checks that ask dockerd: the engine, its GPU support, the images, the hub's address.

Some checks run a short-lived probe container (labelled `gpuspawner.doctor`,
no GPU, removed at once): only a container start shows whether Docker's
nvidia device driver is registered, what an image's jupyterhub-singleuser
is, and whether a container can open a connection to the hub.
"""

from __future__ import annotations

import errno
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import docker
from docker.errors import APIError, DockerException, ImageNotFound
from docker.types import DeviceRequest

from ..engine.docker import NO_GPU
from .checks import SETUP_GUIDE, CudaVersion, Finding, failed, is_loopback, passed, warning
from .hubconfig import HubAddress

PROBE_LABEL = "gpuspawner.doctor"
MIN_API = (1, 40)  # device requests (`docker run --gpus`) arrived in Docker 19.03, API 1.40
PROBE_SECONDS = 60
CONNECT_SECONDS = 5


class ProbeFailed(Exception):
    """A probe container could not start, or exited non-zero; the text says why."""


def connect() -> tuple[docker.DockerClient | None, Finding]:
    """A client for the engine DOCKER_HOST names (default: the local socket), and its finding."""
    try:
        client = docker.from_env()
        return client, judge_engine(client.version())
    except DockerException as error:
        return None, judge_engine(None, str(error))


def judge_engine(version: Mapping[str, Any] | None, error: str = "") -> Finding:
    subject = "Docker"
    if version is None:
        return failed(
            subject,
            f"cannot reach the Docker engine: {error}",
            "start it (systemctl enable --now docker) and run doctor as a user who may use it "
            "(root or the docker group); DOCKER_HOST selects another engine",
        )
    api = version.get("ApiVersion", "0.0")
    detail = f"Engine {version.get('Version', '?')} (API {api})"
    if tuple(int(part) for part in api.split(".")[:2]) < MIN_API:
        return failed(
            subject,
            f"{detail} is too old to give containers GPUs by device request",
            "install Docker 19.03 or newer (Debian/Ubuntu: apt-get install docker.io)",
        )
    return passed(subject, detail)


def run_probe(
    client: docker.DockerClient,
    image: str,
    command: Sequence[str],
    *,
    network: str = "none",
    device_requests: Sequence[DeviceRequest] = (),
) -> str:
    """Run `command` (as the entrypoint) in a throwaway container; its output, or ProbeFailed."""
    try:
        container = client.containers.create(
            image,
            entrypoint=list(command),
            environment={"NVIDIA_VISIBLE_DEVICES": NO_GPU},
            labels={PROBE_LABEL: "probe"},
            network=network,
            device_requests=list(device_requests),
        )
    except APIError as error:
        raise ProbeFailed(str(error.explanation or error)) from None
    try:
        container.start()
        status = container.wait(timeout=PROBE_SECONDS)["StatusCode"]
        output = container.logs().decode(errors="replace").strip()
    except APIError as error:
        raise ProbeFailed(str(error.explanation or error)) from None
    except Exception as error:  # the wait timed out: requests' own exceptions
        raise ProbeFailed(f"no answer in {PROBE_SECONDS}s ({type(error).__name__})") from None
    finally:
        container.remove(force=True)
    if status != 0:
        raise ProbeFailed(output.splitlines()[-1] if output else f"exit status {status}")
    return output


def probe_device_driver(client: docker.DockerClient, image: str, driver: str = "nvidia") -> str:
    """ "" if dockerd starts a container with a GPU device request, else its error.

    The request names no GPU and the container says NVIDIA_VISIBLE_DEVICES=void,
    so the toolkit's hook runs and hands out nothing.
    """
    request = DeviceRequest(driver=driver, count=0, capabilities=[["gpu"]])
    try:
        run_probe(client, image, ["true"], device_requests=[request])
    except ProbeFailed as error:
        return str(error)
    return ""


def judge_device_driver(image: str, error: str) -> Finding:
    subject = "Docker's nvidia device driver"
    if not error:
        return passed(
            subject, f"registered: a container with a GPU device request started ({image})"
        )
    if "could not select device driver" in error:
        return failed(
            subject,
            f"not registered: dockerd refused a GPU device request ({error})",
            "install nvidia-container-toolkit, then restart Docker (systemctl restart docker): "
            "dockerd registers its nvidia driver only if nvidia-container-runtime-hook is on its "
            "PATH when it starts",
        )
    return failed(
        subject,
        f"a container with a GPU device request did not start: {error}",
        f"try `docker run --rm --gpus all {image} true` and fix what it reports",
    )


def judge_default_runtime(info: Mapping[str, Any]) -> Finding:
    subject = "Docker's default runtime"
    default = str(info.get("DefaultRuntime", "runc"))
    if "nvidia" not in default:
        return passed(subject, f"{default}: only containers that ask for GPUs get them")
    return warning(
        subject,
        f"{default}: every container runs through NVIDIA's runtime, so one started without a GPU "
        "device request still gets every GPU when its image sets NVIDIA_VISIBLE_DEVICES=all, as "
        "NVIDIA's CUDA images do. gpuspawner's own CPU-only servers are safe (it sets "
        "NVIDIA_VISIBLE_DEVICES=void for them), but any other such container on this host can "
        "use GPUs the pool has given to someone",
        'remove "default-runtime": "nvidia" from /etc/docker/daemon.json and restart Docker; '
        "gpuspawner needs only Docker's nvidia device driver, not the nvidia runtime",
    )


@dataclass(frozen=True)
class ImageFacts:
    name: str
    attrs: Mapping[str, Any] | None  # `docker image inspect`; None: not on this host
    singleuser: str = ""  # what `jupyterhub-singleuser --version` printed in it
    problem: str = ""  # why that could not be asked


def image_facts(client: docker.DockerClient, name: str) -> ImageFacts:
    try:
        attrs = client.images.get(name).attrs
    except ImageNotFound:
        return ImageFacts(name, None)
    except APIError as error:  # e.g. an invalid reference
        return ImageFacts(name, None, problem=str(error.explanation or error))
    try:
        return ImageFacts(
            name, attrs, run_probe(client, name, ["jupyterhub-singleuser", "--version"])
        )
    except ProbeFailed as error:
        return ImageFacts(name, attrs, problem=str(error))


def judge_image(facts: ImageFacts, hub_version: str, driver_cuda: CudaVersion | None) -> Finding:
    subject = f"Image {facts.name}"
    if facts.attrs is None:
        return failed(
            subject,
            f"not on this host{f' ({facts.problem})' if facts.problem else ''}",
            f"build it ({SETUP_GUIDE}, step 5) or `docker pull {facts.name}`",
        )
    config = facts.attrs.get("Config") or {}
    size = f"{facts.attrs.get('Size', 0) / 1e6:.0f} MB"
    if not facts.singleuser:
        return failed(
            subject,
            f"{size}, but jupyterhub-singleuser does not run in it: {facts.problem}",
            f"install jupyterhub=={hub_version} in the image (the Dockerfiles in images/ do)",
        )
    version = facts.singleuser.splitlines()[-1].strip()
    detail = f"{size}, jupyterhub-singleuser {version} (hub {hub_version})"
    required = _required_cuda(config.get("Env") or [])
    if required and driver_cuda and required > driver_cuda:
        return failed(
            subject,
            f"{detail}, needs CUDA {_dotted(required)}; the driver supports CUDA "
            f"{_dotted(driver_cuda)}, so its containers would not start",
            "build it on an older CUDA base (--build-arg BASE_IMAGE=nvidia/cuda:…) or update "
            "the NVIDIA driver",
        )
    if version.split(".")[0] != hub_version.split(".")[0]:
        return failed(
            subject,
            f"{detail}: a different major version, so servers may not talk to the hub",
            f"rebuild it with --build-arg JUPYTERHUB_VERSION={hub_version}",
        )
    if version.split(".")[:2] != hub_version.split(".")[:2]:
        return warning(
            subject, detail, f"rebuild it with --build-arg JUPYTERHUB_VERSION={hub_version}"
        )
    user = str(config.get("User") or "root")
    if user.split(":")[0] in ("root", "0"):
        return warning(
            subject,
            f"{detail}, runs as root",
            "give the image a non-root USER (the Dockerfiles in images/ use jovyan, uid 1000)",
        )
    return passed(subject, f"{detail}, runs as {user}")


def _required_cuda(env: Sequence[str]) -> CudaVersion | None:
    """The CUDA version NVIDIA_REQUIRE_CUDA asks the driver for, unless the image turns it off."""
    values = dict(item.split("=", 1) for item in env if "=" in item)
    if values.get("NVIDIA_DISABLE_REQUIRE", "").lower() in ("1", "true", "yes"):
        return None
    found = re.search(r"cuda>=(\d+)\.(\d+)", values.get("NVIDIA_REQUIRE_CUDA", ""))
    return (int(found[1]), int(found[2])) if found else None


def _dotted(version: CudaVersion) -> str:
    return f"{version[0]}.{version[1]}"


def judge_hub_address(address: HubAddress, network: str, gateway: str) -> Finding | None:
    """A FAIL if containers cannot possibly reach the hub's connect address; None to probe it."""
    if network == "host" or not is_loopback(address.connect_host):
        return None
    return failed(
        "Hub reachable from containers",
        f"containers would connect to the hub at {address.connect_host}:"
        f"{address.connect_port}, which inside a container is the container itself",
        f"in jupyterhub_config.py set c.JupyterHub.hub_ip = {gateway!r} (this host on Docker's "
        "bridge; the example config asks gpuspawner.docker_bridge_gateway()), "
        "or hub_ip = '0.0.0.0' "
        f"with hub_connect_ip = {gateway!r}",
    )


@dataclass(frozen=True)
class HubProbe:
    hub_running: bool  # something listened where the hub binds (else a stand-in did)
    error: str = ""  # why the container could not connect; "" if it did
    cannot_listen: bool = False  # the hub's bind address is not one of this host's


def probe_hub(
    client: docker.DockerClient, image: str, address: HubAddress, network: str
) -> HubProbe:
    """Have a container connect to the hub's connect address, as a single-user server will.

    If the hub is not running, a stand-in listens where the hub would, so
    routing and firewalls are tested the same way before the hub's first start.
    """
    try:
        listener = _listen(address)
    except OSError as error:
        where = f"{address.bind_host}:{address.bind_port}"
        return HubProbe(False, f"cannot listen on {where} here ({error})", cannot_listen=True)
    connect = (
        "import socket, sys; "
        f"socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout={CONNECT_SECONDS})"
    )
    command = ["python3", "-c", connect, address.connect_host, str(address.connect_port)]
    try:
        run_probe(client, image, command, network=network)
    except ProbeFailed as error:
        return HubProbe(listener is None, str(error))
    finally:
        if listener is not None:
            listener.close()
    return HubProbe(listener is None)


def _listen(address: HubAddress) -> socket.socket | None:
    """A socket listening where the hub binds, or None if something (the hub) already does."""
    family = socket.AF_INET6 if ":" in address.bind_host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((address.bind_host, address.bind_port))
    except OSError as error:
        listener.close()
        if error.errno == errno.EADDRINUSE:
            return None
        raise
    listener.listen()
    return listener


def judge_hub_reach(address: HubAddress, network: str, probe: HubProbe) -> Finding:
    subject = "Hub reachable from containers"
    target = f"{address.connect_host}:{address.connect_port}"
    listener = "the running hub" if probe.hub_running else "a stand-in: the hub is not running"
    if not probe.error:
        return passed(
            subject, f"a container on network {network!r} connected to {target} ({listener})"
        )
    if probe.cannot_listen:
        return failed(
            subject,
            probe.error,
            "set c.JupyterHub.hub_ip to an address of this host, or '0.0.0.0'",
        )
    if "refused" in probe.error:
        fix = (
            f"the hub listens on {address.bind_host or '0.0.0.0'}:{address.bind_port}: make "
            "c.JupyterHub.hub_ip an address containers reach (Docker's bridge gateway or '0.0.0.0')"
        )
    elif "timed out" in probe.error or "No route" in probe.error:
        fix = (
            f"a firewall drops traffic from containers: allow port {address.connect_port} from "
            f"Docker's bridge, e.g. `ufw allow in on docker0 to any port {address.connect_port}`"
        )
    else:
        fix = "check c.JupyterHub.hub_connect_ip / hub_connect_url in jupyterhub_config.py"
    detail = f"a container could not connect to {target} ({listener}): {probe.error}"
    return failed(subject, detail, fix)
