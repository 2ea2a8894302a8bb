"""The doctor's judgement without Docker: the toolkit's version, the driver and GPUs, the config."""

import json
import textwrap
from pathlib import Path

import pynvml
import pytest
from nvml_double import FakeGPU, FakeNVML

from gpuspawner.admin import hubconfig, toolkit
from gpuspawner.admin.checks import (
    Status,
    judge_config,
    judge_container_settings,
    judge_gpu_settings,
    judge_logins,
    judge_origins,
    judge_toolkit,
    judge_users_outside_groups,
    nvml_findings,
    simulated_gpu_findings,
)
from gpuspawner.devices.nvml import NvmlSource
from gpuspawner.devices.simulated import SimulatedSource

HOOK = "/usr/bin/nvidia-container-runtime-hook"


def hook_says(version: str) -> str:
    return f"NVIDIA Container Runtime Hook version {version}\ncommit: 1a2b3c4\n"


def test_no_hook_fails_and_says_to_install_the_toolkit_and_restart_docker():
    finding = judge_toolkit(None, "")
    assert finding.status is Status.FAIL
    assert "nvidia-container-runtime-hook is not on PATH" in finding.detail
    assert "install nvidia-container-toolkit" in finding.fix
    assert "systemctl restart docker" in finding.fix


def test_a_hook_without_a_version_is_a_warning_naming_the_safe_version():
    finding = judge_toolkit(HOOK, "")
    assert finding.status is Status.WARN
    assert "does not report a version" in finding.detail
    assert "1.17.8 or newer" in finding.fix


@pytest.mark.parametrize(
    ("version", "open_cves"),
    [
        ("1.16.1", ["CVE-2024-0132", "CVE-2025-23359", "CVE-2025-23266"]),
        ("1.16.2", ["CVE-2025-23359", "CVE-2025-23266"]),
        ("1.17.3", ["CVE-2025-23359", "CVE-2025-23266"]),
        ("1.17.4", ["CVE-2025-23266"]),
        ("1.17.7", ["CVE-2025-23266"]),
    ],
)
def test_vulnerable_toolkits_fail_with_each_open_cve(version, open_cves):
    finding = judge_toolkit(HOOK, hook_says(version))
    assert finding.status is Status.FAIL
    named = [a.cve for a in toolkit.ADVISORIES if a.cve in finding.detail]
    assert named == open_cves
    assert f"version {version}" in finding.detail
    assert "upgrade nvidia-container-toolkit to 1.17.8" in finding.fix


@pytest.mark.parametrize("version", ["1.17.8", "1.18.0", "2.0.0"])
def test_patched_toolkits_pass(version):
    finding = judge_toolkit(HOOK, hook_says(version))
    assert finding.status is Status.PASS
    assert f"{HOOK}, version {version}" in finding.detail


def test_version_parsing():
    assert toolkit.parse_version(hook_says("1.17.8")) == (1, 17, 8)
    assert toolkit.parse_version("NVIDIA Container Toolkit CLI version v1.18.0-rc.5") == (1, 18, 0)
    assert toolkit.parse_version("usage: nvidia-container-runtime-hook") is None


def test_the_hook_is_found_on_the_given_path_only(tmp_path):
    hook = tmp_path / toolkit.HOOK
    hook.write_text("#!/bin/sh\necho 'NVIDIA Container Runtime Hook version 1.17.8'\n")
    hook.chmod(0o755)
    assert toolkit.find_hook(str(tmp_path)) == str(hook)
    assert toolkit.parse_version(toolkit.hook_version_output(str(hook))) == (1, 17, 8)
    assert toolkit.find_hook(str(tmp_path / "elsewhere")) is None


def test_nvml_reports_driver_cuda_and_each_gpus_health():
    nvml = FakeNVML([FakeGPU("GPU-aaa", temperature=61), FakeGPU("GPU-bbb", reset_required=True)])
    # GPU-bbb is unreadable when listed, so it is left out of the list; make it fail later instead
    nvml.gpus[1].reset_required = False
    NvmlSource(nvml).list_gpus()
    nvml.gpus[1].ecc_uncorrected = 2
    findings, cuda = nvml_findings(nvml)
    assert cuda == (12, 4)
    driver, first, second = findings
    assert driver.status is Status.PASS
    assert driver.detail.startswith("550.54.15 (CUDA 12.4), NVML sees 2 × NVIDIA A100")
    assert (first.status, first.subject) == (Status.PASS, "GPU 0")
    assert first.detail.endswith("GPU-aaa, NVIDIA A100-SXM4-80GB · 80 GiB: healthy, 61 °C")
    assert (second.status, second.subject) == (Status.FAIL, "GPU 1")
    assert second.detail.endswith(": 2 uncorrectable ECC error(s)")
    assert "nvidia-smi -r -i INDEX" in second.fix


def test_without_nvml_the_driver_check_fails_with_the_install_step():
    findings, cuda = nvml_findings(FakeNVML(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    [finding] = findings
    assert cuda is None
    assert finding.status is Status.FAIL
    assert "NVML could not start" in finding.detail
    assert "install the driver" in finding.fix and "--simulate N" in finding.fix


def test_a_driver_without_gpus_fails():
    findings, _ = nvml_findings(FakeNVML([]))
    [finding] = findings
    assert finding.status is Status.FAIL and "NVML sees no GPU" in finding.detail


def test_simulated_gpus_report_the_simulated_pool_and_its_health(tmp_path):
    load = tmp_path / "load.json"
    load.write_text(json.dumps({"2": {"health": "lost: the GPU has fallen off the bus"}}))
    summary, *gpus = simulated_gpu_findings(SimulatedSource(3, load_file=str(load)))
    assert summary.status is Status.PASS
    assert "simulated: 3 × NVIDIA H100 80GB HBM3 · 80 GiB (simulate_gpus = 3)" in summary.detail
    assert [g.status for g in gpus] == [Status.PASS, Status.PASS, Status.FAIL]
    assert gpus[2].detail.endswith("lost: the GPU has fallen off the bus")


def config_file(tmp_path, body: str):
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(
        'c = get_config()\nc.JupyterHub.spawner_class = "gpu"\n' + textwrap.dedent(body)
    )
    return path


def test_a_config_error_fails_with_its_reason(tmp_path):
    path = config_file(tmp_path, "c.GPUSpawner.simulate_gpus = 'four'\n")
    with pytest.raises(hubconfig.ConfigError) as error:
        hubconfig.load(path)
    finding = judge_config(path, error.value)
    assert finding.status is Status.FAIL
    assert "simulate_gpus" in finding.detail and "expected an int" in finding.detail
    assert "-f PATH" in finding.fix


def test_valid_profiles_and_limits_pass(tmp_path):
    site = hubconfig.load(
        config_file(
            tmp_path,
            """
            c.GPUSpawner.profiles = [
                {"display_name": "CPU", "slug": "cpu", "gpus": 0},
                {"display_name": "Two", "slug": "two", "gpus": 2, "default": True},
            ]
            c.GPUSpawner.group_limits = {"students": {"max_gpus_per_user": 1}}
            """,
        )
    )
    assert judge_config(site.path, site).status is Status.PASS
    finding = judge_gpu_settings(site, SimulatedSource(4))
    assert finding.status is Status.PASS
    assert finding.detail == ("4 GPU(s) in the pool; profiles cpu, two; group limits for students")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            'c.GPUSpawner.profiles = [{"display_name": "Eight", "slug": "eight", "gpus": 8}]',
            "asks for 8 GPUs, but the pool has only 4",
        ),
        (
            'c.GPUSpawner.group_limits = {"students": {"profiles": ["no-such-profile"]}}',
            "no-such-profile",
        ),
        ("c.GPUSpawner.exclude_gpus = [9]", "exclude_gpus names GPUs this machine does not have"),
    ],
)
def test_invalid_gpu_settings_fail_with_the_hubs_own_message(tmp_path, body, message):
    site = hubconfig.load(config_file(tmp_path, body))
    finding = judge_gpu_settings(site, SimulatedSource(4))
    assert finding.status is Status.FAIL
    assert message in finding.detail
    assert str(site.path) in finding.fix


def test_gpu_settings_are_not_checked_without_gpus(tmp_path):
    site = hubconfig.load(config_file(tmp_path, ""))
    source = NvmlSource(FakeNVML(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    finding = judge_gpu_settings(site, source)
    assert finding.status is Status.WARN
    assert finding.detail.startswith("not checked: no GPUs to check them against")


GROUPS = 'c.GPUSpawner.group_limits = {"students": {"max_gpus_group": 4}, "staff": {}}\n'


@pytest.mark.parametrize(
    "default",
    [
        "",  # left out: {}
        "{}",
        '{"max_gpus_per_user": None, "gpu_idle_timeout": 3600}',  # no GPU limit among them
    ],
)
def test_users_outside_every_listed_group_unlimited_are_warned_about(tmp_path, default):
    body = GROUPS + (f"c.GPUSpawner.default_limits = {default}\n" if default else "")
    site = hubconfig.load(config_file(tmp_path, body))
    finding = judge_users_outside_groups(site)
    assert finding.status is Status.WARN
    assert finding.detail == (
        "users in none of staff, students are unlimited: default_limits sets no GPU limit "
        "(max_gpus_per_server, max_gpus_per_user, max_gpus_group, profiles), so any of them "
        "may take every GPU"
    )
    assert finding.fix.startswith(
        f'set their limits in {site.path}: c.GPUSpawner.default_limits = {{"max_gpus_per_user": 1}}'
    )


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (
            GROUPS + 'c.GPUSpawner.default_limits = {"max_gpus_per_user": 1}',
            "users in none of staff, students get default_limits' max_gpus_per_user",
        ),
        (GROUPS + 'c.GPUSpawner.default_limits = {"max_gpus_group": 0}', "max_gpus_group"),
        (GROUPS + 'c.GPUSpawner.default_limits = {"profiles": ["cpu"]}', "profiles"),
        ("", "no group_limits: default_limits applies to everyone"),
    ],
)
def test_users_outside_every_listed_group_with_a_gpu_limit_pass(tmp_path, body, words):
    finding = judge_users_outside_groups(hubconfig.load(config_file(tmp_path, body)))
    assert finding.status is Status.PASS, finding
    assert words in finding.detail


# Each way an admin's settings could hand notebooks GPUs or the host, as the hub checks it
# at start and doctor reports it: one line, naming the setting.
UNSAFE_SETTINGS = [
    ('c.GPUSpawner.extra_host_config = {"privileged": True}', "c.GPUSpawner.extra_host_config"),
    (
        'c.GPUSpawner.extra_create_kwargs = {"host_config": {"PRIVILEGED": True}}',
        "c.GPUSpawner.extra_create_kwargs sets privileged=True",
    ),
    ('c.GPUSpawner.extra_host_config = {"cap_add": ["SYS_ADMIN"]}', "cap_add ['SYS_ADMIN']"),
    ('c.GPUSpawner.extra_host_config = {"pid_mode": "host"}', "pid_mode='host'"),
    ('c.GPUSpawner.volumes = {"//dev": "/mnt/dev"}', "c.GPUSpawner.volumes sets mounts of /dev"),
    ('c.GPUSpawner.read_only_volumes = {"/": "/host"}', "read_only_volumes sets mounts of /"),
    (
        'c.GPUSpawner.volumes = {"/var/run/docker.sock": "/var/run/docker.sock"}',
        "mounts of /var/run/docker.sock",
    ),
    (
        """c.GPUSpawner.mounts = [{"type": "volume", "source": "devs", "target": "/d",
             "volume_options": {"driver_config": {"name": "local",
                "options": {"type": "none", "o": "bind", "device": "/dev"}}}}]""",
        "c.GPUSpawner.mounts sets mounts of /dev",
    ),
    (
        """c.GPUSpawner.profiles = [{"display_name": "X", "slug": "x", "gpus": 1,
             "spawner_override": {"extra_host_config": {"device_requests": [{"count": -1}]}}}]""",
        "c.GPUSpawner.profiles[x].spawner_override.extra_host_config sets device_requests",
    ),
    (
        """c.Spawner.group_overrides = {"tas": {"groups": ["tas"],
             "spawner_override": {"extra_host_config": {"runtime": "nvidia"}}}}""",
        "c.Spawner.group_overrides[tas].spawner_override.extra_host_config sets runtime='nvidia'",
    ),
]


@pytest.mark.parametrize(("body", "named"), UNSAFE_SETTINGS)
def test_settings_that_reach_gpus_or_the_host_fail_naming_the_setting(tmp_path, body, named):
    finding = judge_container_settings(hubconfig.load(config_file(tmp_path, body)))
    assert finding.status is Status.FAIL
    assert named in finding.detail
    assert len(finding.detail.splitlines()) == 1


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ('{"mem_limt": {"x": 1}}', "spawner_override: 'mem_limt' is not a setting of GPUSpawner"),
        ('{"mem_limt": "4G"}', "spawner_override: 'mem_limt' is not a setting of GPUSpawner"),
        ('{"remove": False}', "spawner_override['remove']: GPUSpawner needs remove=True"),
        ('{"cpu_limit": "two"}', "spawner_override['cpu_limit']"),
    ],
)
def test_an_override_every_start_would_fail_on_fails_naming_it(tmp_path, override, named):
    body = f"""c.GPUSpawner.profiles = [
        {{"display_name": "CPU", "slug": "cpu", "gpus": 0, "spawner_override": {override}}}]"""
    finding = judge_container_settings(hubconfig.load(config_file(tmp_path, body)))
    assert finding.status is Status.FAIL
    assert f"c.GPUSpawner.profiles[cpu].{named}" in finding.detail


def test_ordinary_container_settings_pass(tmp_path):
    body = """
        c.GPUSpawner.volumes = {"gpuspawner-home-{username}": "/home/jovyan/work"}
        c.GPUSpawner.read_only_volumes = {"/data": "/home/jovyan/data"}
        c.GPUSpawner.extra_host_config = {"shm_size": "8g", "cap_add": ["SYS_PTRACE"]}
        c.GPUSpawner.profiles = [{"display_name": "CPU", "slug": "cpu", "gpus": 0,
            "spawner_override": {"mem_limit": "4G", "environment": {"X": "1"},
                                 "cpu_limit": lambda spawner: 2}}]
    """
    assert judge_container_settings(hubconfig.load(config_file(tmp_path, body))).status is (
        Status.PASS
    )


DEMO = (
    'c.JupyterHub.authenticator_class = "dummy"\n'
    'c.DummyAuthenticator.password = "gpu-demo"\n'
    "c.Authenticator.allow_all = True\n"
)


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (DEMO + 'c.JupyterHub.bind_url = "http://127.0.0.1:8000"', Status.PASS, "127.0.0.1"),
        (DEMO + 'c.JupyterHub.bind_url = "http://0.0.0.0:8000"', Status.FAIL, "0.0.0.0"),
        (DEMO, Status.FAIL, "every interface"),  # JupyterHub's default bind_url: all of them
        ('c.JupyterHub.authenticator_class = "shared-password"', Status.FAIL, "one password"),
        (
            'c.Authenticator.allow_all = True\nc.JupyterHub.ip = "10.0.0.5"',
            Status.FAIL,
            "allow_all",
        ),
        ('c.JupyterHub.authenticator_class = "pam"', Status.PASS, "PAMAuthenticator"),
    ],
)
def test_demo_logins_fail_unless_only_this_machine_can_reach_them(tmp_path, body, status, words):
    finding = judge_logins(hubconfig.load(config_file(tmp_path, body)))
    assert finding.status is status, finding
    assert words in finding.detail
    if status is Status.FAIL:
        assert "anyone who can reach it logs in" in finding.detail
        assert (
            "DummyAuthenticator" in finding.detail
            or "allow_all" in finding.detail
            or ("SharedPassword" in finding.detail)
        )
        assert "authenticator" in finding.fix


def test_the_example_config_is_safe_as_shipped(monkeypatch):
    """scripts/hub's demo: dummy logins, but on 127.0.0.1 unless GPUSPAWNER_BIND_URL says so."""
    monkeypatch.setenv("GPUSPAWNER_HUB_IP", "172.17.0.1")  # no dockerd needed to judge it
    site = hubconfig.load(Path(__file__).parents[2] / "jupyterhub_config.py", simulate_gpus=2)
    assert judge_logins(site).status is Status.PASS
    assert judge_container_settings(site).status is Status.PASS
    assert judge_users_outside_groups(site).status is Status.PASS


SUBDOMAINS = 'c.JupyterHub.subdomain_host = "https://hub.example.org"\n'
CULLER_ROLE = '{"name": "culler", "scopes": ["admin:servers"], "services": ["culler"]}'


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ('c.Authenticator.admin_users = {"admin"}', Status.WARN, "admin (admin_users) share"),
        (
            'c.JupyterHub.load_roles = [{"name": "admin", "users": ["ta"]}]',
            Status.WARN,
            "ta (role 'admin')",
        ),
        (
            'c.JupyterHub.load_roles = [{"name": "ops", "scopes": ["admin:servers"],'
            ' "groups": ["staff"]}]',
            Status.WARN,
            "group staff (role 'ops')",
        ),
        (
            'c.JupyterHub.authenticator_class = "dummy"\n'
            'c.DummyAuthenticator.admin_users = {"root"}',
            Status.WARN,
            "root (admin_users)",
        ),
        (SUBDOMAINS + 'c.Authenticator.admin_users = {"admin"}', Status.PASS, "hub.example.org"),
        (f"c.JupyterHub.load_roles = [{CULLER_ROLE}]", Status.PASS, "no admin"),  # a service
        ("", Status.PASS, "no admin"),
    ],
)
def test_admins_on_the_hubs_origin_are_warned_about_users_pages(tmp_path, body, status, words):
    finding = judge_origins(hubconfig.load(config_file(tmp_path, body)))
    assert finding.status is status, finding
    assert words in finding.detail
    if status is Status.WARN:
        assert "a page on /user/NAME/ that an admin opens can act as that admin" in finding.detail
        assert "c.JupyterHub.subdomain_host" in finding.fix
