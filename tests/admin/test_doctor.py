"""gpuspawner doctor against the real dockerd: its lines and exit status, ready and broken.

dockerd here registered its nvidia driver at start, from the stand-in hook in
testbed/ (TESTBED.md). Doctor's own PATH decides what it finds of the toolkit,
so each test gives it one: with the stand-in, without any hook, or with a hook
that reports a version.
"""

import functools
import json
import os
import secrets
from pathlib import Path

import docker
import pytest
from admintools import gpuspawner
from realhub import CPU_IMAGE, NOTEBOOK_IMAGE, Hub, free_port

from gpuspawner.admin import dockerchecks, toolkit
from gpuspawner.admin.checks import Status
from gpuspawner.engine.docker import bridge_gateway

pytestmark = pytest.mark.docker

STAND_IN = Path(__file__).parents[2] / "testbed"


@functools.cache
def gateway() -> str:
    """This host on Docker's bridge: where the set-up guide (docs/setup.md) has the hub listen."""
    return bridge_gateway(docker.from_env())


def path_without_hook() -> str:
    """This PATH, less every folder holding an nvidia-container-runtime-hook."""
    folders = os.environ["PATH"].split(os.pathsep)
    return os.pathsep.join(f for f in folders if not (Path(f) / toolkit.HOOK).exists())


def with_hook(folder: Path) -> dict[str, str]:
    return {"PATH": os.pathsep.join([str(folder), path_without_hook()])}


def write_config(tmp_path: Path, extra: str = "", images: tuple[str, ...] = (CPU_IMAGE,)) -> Path:
    """A hub config as docs/setup.md has the admin write it, on 4 simulated GPUs."""
    default, *others = images
    cpu_profile = {"display_name": "CPU only", "slug": "cpu", "gpus": 0}
    if others:
        cpu_profile["spawner_override"] = {"image": others[0]}
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(
        f"""c = get_config()
c.JupyterHub.spawner_class = "gpu"
c.GPUSpawner.simulate_gpus = 4
c.GPUSpawner.image = {default!r}
c.GPUSpawner.profiles = [
    {cpu_profile!r},
    {{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True}},
]
c.JupyterHub.hub_ip = {gateway()!r}
c.JupyterHub.hub_port = {free_port()}
{extra}"""
    )
    return path


def doctor(tmp_path: Path, *args: str, env: dict[str, str] | None = None):
    return gpuspawner("doctor", *args, cwd=tmp_path, env={**with_hook(STAND_IN), **(env or {})})


def line(output: str, subject: str) -> str:
    """The one line doctor printed for `subject`."""
    [found] = [x for x in output.splitlines() if x[6:].startswith(f"{subject}: ")]
    return found


def statuses(output: str) -> dict[str, str]:
    return {x[6:].split(": ")[0]: x[:4] for x in output.splitlines() if x[:4] in Status.__members__}


def test_a_ready_host_passes_with_the_stand_in_hook(tmp_path):
    done = doctor(tmp_path, "-f", str(write_config(tmp_path, images=(NOTEBOOK_IMAGE, CPU_IMAGE))))
    out = done.stdout
    assert done.returncode == 0, out
    assert line(out, "Docker").startswith("PASS  Docker: Engine ")
    assert line(out, "NVIDIA Container Toolkit") == (
        f"WARN  NVIDIA Container Toolkit: {STAND_IN / toolkit.HOOK} does not report a version, "
        "so it was not checked for CVE-2024-0132, CVE-2025-23359, CVE-2025-23266"
    )
    assert line(out, "Docker's nvidia device driver").startswith(
        "PASS  Docker's nvidia device driver: registered: a container with a GPU device request"
    )
    assert line(out, "Docker's default runtime").startswith("PASS  Docker's default runtime: runc")
    assert line(out, "GPUs").startswith("PASS  GPUs: simulated: 4 × NVIDIA H100")
    for image in (NOTEBOOK_IMAGE, CPU_IMAGE):
        assert line(out, f"Image {image}").endswith(
            "jupyterhub-singleuser 6.1.1 (hub 6.1.1), runs as 1000"
        )
    assert line(out, "Hub reachable from containers").endswith(
        f"connected to {gateway()}:{_port(tmp_path)} (a stand-in: the hub is not running)"
    )
    assert line(out, "Container settings").startswith("PASS  Container settings: no setting gives")
    assert line(out, "Logins").startswith("PASS  Logins: PAMAuthenticator")
    assert set(statuses(out).values()) == {"PASS", "WARN"}
    assert out.rstrip().endswith("0 failed")


def _port(tmp_path: Path) -> str:
    text = (tmp_path / "jupyterhub_config.py").read_text()
    return text.split("hub_port = ")[1].split()[0]


def test_without_the_hook_on_path_doctor_fails_and_names_it(tmp_path):
    config = write_config(tmp_path)
    done = gpuspawner("doctor", "-f", str(config), cwd=tmp_path, env={"PATH": path_without_hook()})
    assert done.returncode == 1
    assert line(done.stdout, "NVIDIA Container Toolkit").startswith(
        "FAIL  NVIDIA Container Toolkit: nvidia-container-runtime-hook is not on PATH"
    )
    assert "install nvidia-container-toolkit" in done.stdout
    # dockerd found the stand-in when it started, and doctor says so apart
    assert line(done.stdout, "Docker's nvidia device driver").startswith("PASS")
    assert [s for s in statuses(done.stdout).values() if s == "FAIL"] == ["FAIL"]


def test_a_toolkit_with_open_cves_fails(tmp_path):
    folder = tmp_path / "bin"
    folder.mkdir()
    hook = folder / toolkit.HOOK
    hook.write_text("#!/bin/sh\necho 'NVIDIA Container Runtime Hook version 1.17.3'\n")
    hook.chmod(0o755)
    done = doctor(tmp_path, "-f", str(write_config(tmp_path)), env=with_hook(folder))
    assert done.returncode == 1
    found = line(done.stdout, "NVIDIA Container Toolkit")
    assert found.startswith(f"FAIL  NVIDIA Container Toolkit: {hook} is version 1.17.3, open to")
    assert "CVE-2025-23359" in found and "CVE-2025-23266" in found
    assert "CVE-2024-0132" not in found


def test_a_missing_image_is_named_and_fails(tmp_path):
    missing = f"gpuspawner-test-missing-{secrets.token_hex(4)}:latest"
    done = doctor(tmp_path, "-f", str(write_config(tmp_path, images=(missing, CPU_IMAGE))))
    assert done.returncode == 1
    assert line(done.stdout, f"Image {missing}") == f"FAIL  Image {missing}: not on this host"
    assert f"docker pull {missing}" in done.stdout
    assert line(done.stdout, f"Image {CPU_IMAGE}").startswith("PASS")
    # the other checks run in the image that is there
    assert line(done.stdout, "Hub reachable from containers").startswith("PASS")


def test_a_config_that_does_not_load_fails_with_its_line(tmp_path):
    config = write_config(tmp_path, "raise RuntimeError('the LDAP server is down')\n")
    done = doctor(tmp_path, "-f", str(config))
    assert done.returncode == 1
    assert line(done.stdout, "jupyterhub_config.py") == (
        f"FAIL  jupyterhub_config.py: cannot be used: {config}, line 11: "
        "RuntimeError: the LDAP server is down"
    )
    assert line(done.stdout, "Images and hub address").startswith("WARN")


def test_a_missing_config_fails(tmp_path):
    done = doctor(tmp_path)  # no -f, and no jupyterhub_config.py where it runs
    assert done.returncode == 1
    assert line(done.stdout, "jupyterhub_config.py").endswith("jupyterhub_config.py does not exist")


def test_invalid_gpu_limits_fail_as_the_hub_would(tmp_path):
    limits = 'c.GPUSpawner.group_limits = {"students": {"profiles": ["gpu-8"]}}\n'
    done = doctor(tmp_path, "-f", str(write_config(tmp_path, limits)))
    assert done.returncode == 1
    found = line(done.stdout, "GPU profiles and limits")
    assert found.startswith("FAIL") and "gpu-8" in found
    assert line(done.stdout, "jupyterhub_config.py").startswith("PASS")


def test_a_hub_on_loopback_fails_without_a_probe(tmp_path):
    config = write_config(tmp_path, "c.JupyterHub.hub_ip = '127.0.0.1'\n")
    done = doctor(tmp_path, "-f", str(config))
    assert done.returncode == 1
    assert line(done.stdout, "Hub reachable from containers").startswith(
        "FAIL  Hub reachable from containers: containers would connect to the hub at 127.0.0.1:"
    )
    assert f"c.JupyterHub.hub_ip = '{gateway()}'" in done.stdout


def test_a_hub_listening_only_on_loopback_is_refused_to_containers(tmp_path):
    extra = f"c.JupyterHub.hub_ip = '127.0.0.1'\nc.JupyterHub.hub_connect_ip = {gateway()!r}\n"
    done = doctor(tmp_path, "-f", str(write_config(tmp_path, extra)))
    assert done.returncode == 1
    found = line(done.stdout, "Hub reachable from containers")
    assert found.startswith("FAIL  Hub reachable from containers: a container could not connect")
    assert "Connection refused" in found
    assert "the hub listens on 127.0.0.1:" in done.stdout


def test_a_running_hub_is_reached_from_a_container(hub_factory, tmp_path):
    hub: Hub = hub_factory("c.GPUSpawner.simulate_gpus = 2\n")
    done = doctor(tmp_path, "-f", str(hub.config_file))
    assert line(done.stdout, "Hub reachable from containers").endswith("(the running hub)")
    assert done.returncode == 0, done.stdout


def test_without_nvml_doctor_fails_unless_simulating(tmp_path):
    done = doctor(tmp_path, "-f", str(write_config(tmp_path)), "--simulate", "0")
    assert done.returncode == 1
    assert line(done.stdout, "NVIDIA driver").startswith(
        "FAIL  NVIDIA driver: No GPUs found: NVML could not start"
    )
    assert line(done.stdout, "GPU profiles and limits").startswith("WARN")


def test_an_unhealthy_simulated_gpu_fails(tmp_path):
    load = tmp_path / "load.json"
    load.write_text(json.dumps({"2": {"health": "needs a reset"}}))
    config = str(write_config(tmp_path))
    done = doctor(tmp_path, "-f", config, "--simulated-load", str(load))
    assert done.returncode == 1
    assert line(done.stdout, "GPU 2").startswith("FAIL  GPU 2: GPU-")
    assert line(done.stdout, "GPU 2").endswith(": needs a reset")
    assert line(done.stdout, "GPU 1").startswith("PASS")


def test_an_unreachable_docker_fails_and_skips_what_needs_it(tmp_path):
    done = doctor(
        tmp_path, "-f", str(write_config(tmp_path)), env={"DOCKER_HOST": "unix:///nonexistent"}
    )
    assert done.returncode == 1
    assert line(done.stdout, "Docker").startswith("FAIL  Docker: cannot reach the Docker engine")
    for skipped in ("Docker's nvidia device driver", "Images and hub address"):
        assert line(done.stdout, skipped).startswith("WARN") and "not checked" in done.stdout


def test_a_device_driver_dockerd_does_not_know_fails_with_the_restart_fix():
    """As on a host where the toolkit came after dockerd: the same error, for another driver."""
    client = docker.from_env()
    error = dockerchecks.probe_device_driver(client, CPU_IMAGE, driver="gpuspawner-test-none")
    assert 'could not select device driver "gpuspawner-test-none"' in error
    finding = dockerchecks.judge_device_driver(CPU_IMAGE, error)
    assert finding.status is Status.FAIL and "restart Docker" in finding.fix
    assert dockerchecks.probe_device_driver(client, CPU_IMAGE) == ""
    probes = client.containers.list(all=True, filters={"label": dockerchecks.PROBE_LABEL})
    drivers = {r["Driver"] for p in probes for r in p.attrs["HostConfig"]["DeviceRequests"] or []}
    assert "gpuspawner-test-none" not in drivers  # the probe that failed to start is gone too


def test_a_setting_that_reaches_the_host_fails_naming_it(tmp_path):
    extra = 'c.GPUSpawner.extra_create_kwargs = {"host_config": {"privileged": True}}\n'
    done = doctor(tmp_path, "-f", str(write_config(tmp_path, extra)))
    assert done.returncode == 1
    assert line(done.stdout, "Container settings").startswith(
        "FAIL  Container settings: c.GPUSpawner.extra_create_kwargs sets privileged=True"
    )


def test_a_volume_linked_to_the_hosts_root_fails_naming_where_it_leads(tmp_path):
    """The review's case: /srv/link -> / passed as a plain folder and gave notebooks the host."""
    link = tmp_path / "link"
    link.symlink_to("/")
    extra = (
        f'c.GPUSpawner.volumes = {{"gpuspawner-home-{{username}}": "/home/jovyan", '
        f'{str(link)!r}: "/host"}}\n'
    )
    done = doctor(tmp_path, "-f", str(write_config(tmp_path, extra)))
    assert done.returncode == 1
    assert line(done.stdout, "Container settings") == (
        f"FAIL  Container settings: c.GPUSpawner.volumes sets mounts of {link} (a link to /), "
        "which expose host devices, processes or Docker. A notebook gets GPUs only from the "
        "pool: remove these."
    )


EXAMPLE = Path(__file__).parents[2] / "jupyterhub_config.py"


def doctor_on_the_example(tmp_path: Path, bind_url: str, extra: str = ""):
    """Doctor on the shipped example config (its demo login), bound where `bind_url` says."""
    config = tmp_path / "jupyterhub_config.py"
    config.write_text(EXAMPLE.read_text() + extra)
    env = {
        "GPUSPAWNER_SIMULATE_GPUS": "4",
        "GPUSPAWNER_NOTEBOOK_IMAGE": NOTEBOOK_IMAGE,
        "GPUSPAWNER_CPU_IMAGE": CPU_IMAGE,
        "GPUSPAWNER_BIND_URL": bind_url,
    }
    return doctor(tmp_path, "-f", str(config), env=env)


def test_the_example_demo_login_on_a_public_address_fails_doctor(tmp_path):
    done = doctor_on_the_example(tmp_path, "http://0.0.0.0:8000")
    assert done.returncode == 1, done.stdout
    assert line(done.stdout, "Logins") == (
        "FAIL  Logins: DummyAuthenticator (any username logs in), a shared demo password, "
        "allow_all = True (everyone who can log in gets GPUs), while the hub listens on "
        "0.0.0.0: anyone who can reach it logs in and gets GPUs"
    )
    assert "fix: use your site's authenticator (OAuthenticator, LDAP, PAM …)" in done.stdout


def test_the_example_demo_login_on_loopback_passes(tmp_path):
    done = doctor_on_the_example(tmp_path, "http://127.0.0.1:8000")
    assert line(done.stdout, "Logins").startswith(
        "PASS  Logins: DummyAuthenticator (any username logs in), a shared demo password, "
        "allow_all = True (everyone who can log in gets GPUs): only reachable from this machine"
    )


def test_the_examples_admin_on_the_users_origin_warns_until_subdomain_host(tmp_path):
    single = doctor_on_the_example(tmp_path, "http://127.0.0.1:8000")
    assert line(single.stdout, "Admins and users' pages") == (
        "WARN  Admins and users' pages: admin (admin_users) share the hub's origin with every "
        "user's server: a page on /user/NAME/ that an admin opens can act as that admin "
        "(no subdomain_host)"
    )
    assert 'fix: give each server its own origin: c.JupyterHub.subdomain_host = "https://' in (
        single.stdout
    )
    extra = 'c.JupyterHub.subdomain_host = "https://hub.example.org"\n'
    subdomains = doctor_on_the_example(tmp_path, "http://127.0.0.1:8000", extra)
    assert line(subdomains.stdout, "Admins and users' pages").startswith(
        "PASS  Admins and users' pages: each server has its own origin under https://hub.example.org"
    )
