"""The doctor's judgement of what dockerd reports, from literal facts (no Docker needed)."""

import pytest

from gpuspawner.admin.checks import Status
from gpuspawner.admin.dockerchecks import (
    HubProbe,
    ImageFacts,
    judge_default_runtime,
    judge_device_driver,
    judge_engine,
    judge_hub_address,
    judge_hub_reach,
    judge_image,
)
from gpuspawner.admin.hubconfig import HubAddress

IMAGE = "gpuspawner-notebook:latest"
CUDA_ENV = "NVIDIA_REQUIRE_CUDA=cuda>=12.6 brand=tesla,driver>=470,driver<471"


def test_a_reachable_engine_passes_with_its_version():
    finding = judge_engine({"Version": "24.0.7", "ApiVersion": "1.43"})
    assert (finding.status, finding.detail) == (Status.PASS, "Engine 24.0.7 (API 1.43)")


def test_an_engine_too_old_for_device_requests_fails():
    finding = judge_engine({"Version": "18.09.1", "ApiVersion": "1.39"})
    assert finding.status is Status.FAIL
    assert "too old" in finding.detail and "19.03" in finding.fix


def test_an_unreachable_engine_fails_with_how_to_start_it():
    finding = judge_engine(None, "Error while fetching server API version: Connection refused")
    assert finding.status is Status.FAIL
    assert finding.detail.endswith("Connection refused")
    assert "systemctl enable --now docker" in finding.fix


def test_the_device_driver_passes_when_a_gpu_request_starts():
    finding = judge_device_driver(IMAGE, "")
    assert finding.status is Status.PASS and IMAGE in finding.detail


def test_an_unregistered_device_driver_fails_and_says_dockerd_must_restart():
    error = 'could not select device driver "nvidia" with capabilities: [[gpu]]'
    finding = judge_device_driver(IMAGE, error)
    assert finding.status is Status.FAIL
    assert finding.detail.startswith("not registered")
    assert "restart Docker" in finding.fix and "when it starts" in finding.fix


def test_other_device_request_errors_fail_with_the_error():
    error = "nvidia-container-cli: initialization error: driver rpc error"
    finding = judge_device_driver(IMAGE, error)
    assert finding.status is Status.FAIL and finding.detail.endswith(error)
    assert f"docker run --rm --gpus all {IMAGE} true" in finding.fix


def test_runc_as_default_runtime_passes():
    finding = judge_default_runtime({"DefaultRuntime": "runc", "Runtimes": {"runc": {}}})
    assert finding.status is Status.PASS


def test_nvidia_as_default_runtime_warns_and_explains_the_leak():
    finding = judge_default_runtime({"DefaultRuntime": "nvidia"})
    assert finding.status is Status.WARN
    assert "NVIDIA_VISIBLE_DEVICES=all" in finding.detail
    assert "NVIDIA_VISIBLE_DEVICES=void" in finding.detail  # what keeps our CPU servers safe
    assert '"default-runtime": "nvidia"' in finding.fix


def image(user="jovyan", env=(), singleuser="6.1.1", problem="") -> ImageFacts:
    attrs = {"Size": 672_000_000, "Config": {"User": user, "Env": list(env)}}
    return ImageFacts(IMAGE, attrs, singleuser, problem)


def test_a_matching_non_root_image_passes():
    finding = judge_image(image(), "6.1.1", None)
    assert finding.status is Status.PASS
    assert finding.subject == f"Image {IMAGE}"
    assert finding.detail == "672 MB, jupyterhub-singleuser 6.1.1 (hub 6.1.1), runs as jovyan"


def test_a_missing_image_fails_with_how_to_build_it():
    finding = judge_image(ImageFacts(IMAGE, None), "6.1.1", None)
    assert (finding.status, finding.detail) == (Status.FAIL, "not on this host")
    assert "step 5" in finding.fix and f"docker pull {IMAGE}" in finding.fix


def test_an_image_without_singleuser_fails():
    problem = 'exec: "jupyterhub-singleuser": executable file not found in $PATH'
    finding = judge_image(image(singleuser="", problem=problem), "6.1.1", None)
    assert finding.status is Status.FAIL and problem in finding.detail
    assert "jupyterhub==6.1.1" in finding.fix


@pytest.mark.parametrize(
    ("version", "status"),
    [("6.1.0", Status.PASS), ("6.0.2", Status.WARN), ("5.3.0", Status.FAIL)],
)
def test_singleuser_must_match_the_hubs_major_and_should_match_its_minor(version, status):
    finding = judge_image(image(singleuser=version), "6.1.1", None)
    assert finding.status is status
    if status is not Status.PASS:
        assert "JUPYTERHUB_VERSION=6.1.1" in finding.fix


@pytest.mark.parametrize("user", ["", "root", "0", "0:0"])
def test_root_images_warn(user):
    finding = judge_image(image(user=user), "6.1.1", None)
    assert finding.status is Status.WARN and finding.detail.endswith("runs as root")


def test_an_image_needing_a_newer_cuda_than_the_driver_fails():
    finding = judge_image(image(env=[CUDA_ENV]), "6.1.1", (12, 4))
    assert finding.status is Status.FAIL
    assert "needs CUDA 12.6; the driver supports CUDA 12.4" in finding.detail
    assert "BASE_IMAGE=nvidia/cuda" in finding.fix


@pytest.mark.parametrize(
    ("env", "driver"),
    [
        ([CUDA_ENV], (12, 6)),
        ([CUDA_ENV], (13, 0)),
        ([CUDA_ENV], None),  # simulated GPUs: no driver to compare with
        ([CUDA_ENV, "NVIDIA_DISABLE_REQUIRE=true"], (12, 4)),
    ],
)
def test_cuda_requirements_the_driver_meets_pass(env, driver):
    assert judge_image(image(env=env), "6.1.1", driver).status is Status.PASS


BRIDGE = HubAddress("172.17.0.1", 8081, "172.17.0.1", 8081)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.1.1", "localhost", "::1"])
def test_a_loopback_hub_address_fails_for_bridge_containers(host):
    finding = judge_hub_address(HubAddress(host, 8081, host, 8081), "bridge", "172.17.0.1")
    assert finding.status is Status.FAIL
    assert "inside a container is the container itself" in finding.detail
    assert "c.JupyterHub.hub_ip = '172.17.0.1'" in finding.fix


@pytest.mark.parametrize(
    ("address", "network"),
    [(BRIDGE, "bridge"), (HubAddress("127.0.0.1", 8081, "127.0.0.1", 8081), "host")],
)
def test_other_hub_addresses_are_left_to_the_probe(address, network):
    assert judge_hub_address(address, network, "172.17.0.1") is None


def test_a_container_that_connects_passes_and_says_to_what():
    running = judge_hub_reach(BRIDGE, "bridge", HubProbe(hub_running=True))
    assert running.status is Status.PASS
    assert running.detail.endswith("connected to 172.17.0.1:8081 (the running hub)")
    stand_in = judge_hub_reach(BRIDGE, "bridge", HubProbe(hub_running=False))
    assert stand_in.detail.endswith("(a stand-in: the hub is not running)")


@pytest.mark.parametrize(
    ("probe", "fix"),
    [
        (HubProbe(False, "ConnectionRefusedError: [Errno 111] Connection refused"), "hub_ip"),
        (HubProbe(True, "TimeoutError: timed out"), "ufw allow in on docker0 to any port 8081"),
        (HubProbe(False, "OSError: [Errno 113] No route to host"), "a firewall drops traffic"),
        (HubProbe(False, "socket.gaierror: [Errno -2] Name or service not known"), "connect_ip"),
        (HubProbe(False, "cannot listen on 10.9.9.9:8081", cannot_listen=True), "address of"),
    ],
)
def test_a_container_that_cannot_connect_fails_with_the_likely_fix(probe, fix):
    finding = judge_hub_reach(BRIDGE, "bridge", probe)
    assert finding.status is Status.FAIL
    assert probe.error in finding.detail
    assert fix in finding.fix
