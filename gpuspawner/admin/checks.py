"""What `gpuspawner doctor` concludes, and its checks that need no Docker.

A check turns facts (a path, a version string, an NVML library, a loaded
config) into Findings: a status, what was found, and for WARN and FAIL the
fix, written for the admin at the terminal.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import pynvml

from ..config.site import GPUSite, check_container_settings, check_overrides
from ..core.errors import GPUConfigError, NoGPUSourceError
from ..core.gpus import GPU, Telemetry, gpus_in_words
from ..core.limit_keys import Concern, named
from ..core.units import all_units, tally
from ..devices.nvml import NvmlSource
from ..devices.simulated import SimulatedSource
from ..devices.source import GPUSource
from . import toolkit
from .hubconfig import ConfigError, HubConfig

CudaVersion = tuple[int, int]

SETUP_GUIDE = 'docs/setup.md, "Set up a GPU server"'


class Status(Enum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"


@dataclass(frozen=True)
class Finding:
    status: Status
    subject: str
    detail: str
    fix: str = ""


def passed(subject: str, detail: str) -> Finding:
    return Finding(Status.PASS, subject, detail)


def warning(subject: str, detail: str, fix: str) -> Finding:
    return Finding(Status.WARN, subject, detail, fix)


def failed(subject: str, detail: str, fix: str) -> Finding:
    return Finding(Status.FAIL, subject, detail, fix)


def not_checked(subject: str, reason: str) -> Finding:
    return warning(
        subject, f"not checked: {reason}", "fix the failure above, then run doctor again"
    )


def judge_toolkit(hook: str | None, version_output: str) -> Finding:
    subject = "NVIDIA Container Toolkit"
    restart = "then restart Docker (systemctl restart docker)"
    if hook is None:
        return failed(
            subject,
            f"{toolkit.HOOK} is not on PATH: Docker cannot give containers GPUs",
            f"install nvidia-container-toolkit ({SETUP_GUIDE}, step 4), {restart}",
        )
    version = toolkit.parse_version(version_output)
    known = ", ".join(advisory.cve for advisory in toolkit.ADVISORIES)
    if version is None:
        return warning(
            subject,
            f"{hook} does not report a version, so it was not checked for {known}",
            f"make sure it is NVIDIA's hook, version {toolkit.dotted(_safe_version())} or newer "
            "(dpkg -l nvidia-container-toolkit)",
        )
    vulnerable = toolkit.open_advisories(version)
    if vulnerable:
        return failed(
            subject,
            f"{hook} is version {toolkit.dotted(version)}, open to "
            + "; ".join(
                f"{a.cve} ({a.risk}; fixed in {toolkit.dotted(a.fixed_in)})" for a in vulnerable
            ),
            f"upgrade nvidia-container-toolkit to {toolkit.dotted(_safe_version())} or newer, "
            + restart,
        )
    return passed(subject, f"{hook}, version {toolkit.dotted(version)}: not open to {known}")


def _safe_version() -> toolkit.Version:
    return max(advisory.fixed_in for advisory in toolkit.ADVISORIES)


HEALTH_FIX = (
    "the hub hands it out again once NVML reports it healthy; see `nvidia-smi -q -i INDEX` and "
    "`dmesg | grep -i xid`; a reset (`nvidia-smi -r -i INDEX` with no process on it) or a reboot "
    "usually clears it"
)


def health_findings(gpus: list[GPU], samples: Mapping[str, Telemetry]) -> list[Finding]:
    findings = []
    for gpu in gpus:
        sample = samples[gpu.uuid]
        subject = f"GPU {gpu.index}"
        if sample.health:
            findings.append(
                failed(subject, f"{gpu.uuid}, {gpu.label}: {sample.health}", HEALTH_FIX)
            )
        else:
            temperature = (
                f", {sample.temperature_celsius:.0f} °C"
                if sample.temperature_celsius is not None
                else ""
            )
            findings.append(passed(subject, f"{gpu.uuid}, {gpu.label}: healthy{temperature}"))
    return findings


def simulated_gpu_findings(source: SimulatedSource) -> list[Finding]:
    gpus = source.list_gpus()
    setting = "simulated_host" if source.host else f"simulate_gpus = {source.count}"
    fix = "remove simulated_host" if source.host else "set simulate_gpus = 0"
    summary = passed(
        "GPUs",
        f"simulated: {tally(all_units(gpus, {}))} ({setting}); NVML not asked. "
        f"On a GPU server, {fix}.",
    )
    return [summary, *health_findings(gpus, source.sample([g.uuid for g in gpus]))]


def nvml_findings(nvml: Any = pynvml) -> tuple[list[Finding], CudaVersion | None]:
    """The driver and each GPU's health, and the CUDA version the driver supports."""
    subject = "NVIDIA driver"
    source = NvmlSource(nvml)
    try:
        gpus = source.list_gpus()
    except NoGPUSourceError as error:
        return [
            failed(
                subject,
                str(error),
                f"install the driver ({SETUP_GUIDE}, step 2) and check `nvidia-smi`; "
                "on a machine without GPUs run doctor with --simulate N",
            )
        ], None
    driver = str(nvml.nvmlSystemGetDriverVersion())
    cuda_number = nvml.nvmlSystemGetCudaDriverVersion()
    cuda = (cuda_number // 1000, cuda_number % 1000 // 10)
    detail = f"{driver} (CUDA {cuda[0]}.{cuda[1]}), NVML sees {gpus_in_words(gpus)}"
    if not gpus:
        return [
            failed(
                subject,
                detail,
                "check that `nvidia-smi -L` lists the GPUs; if not, reinstall the driver or "
                "reseat the GPUs",
            )
        ], cuda
    samples = source.sample([g.uuid for g in gpus])
    return [passed(subject, detail), *health_findings(gpus, samples)], cuda


def judge_config(path: Path, loaded: HubConfig | ConfigError) -> Finding:
    subject = "jupyterhub_config.py"
    if isinstance(loaded, ConfigError):
        return failed(
            subject,
            f"cannot be used: {loaded}",
            "fix it there (pass the hub's config with -f PATH), then run doctor again",
        )
    return passed(subject, f"{path} loads and uses {type(loaded.spawner).__name__}")


def judge_gpu_settings(site: HubConfig, source: GPUSource) -> Finding:
    subject = "GPU profiles and limits"
    try:
        hub = GPUSite.from_config(site.spawner, source)
    except NoGPUSourceError:
        return not_checked(subject, "no GPUs to check them against (see the NVIDIA driver line)")
    except GPUConfigError as error:
        return failed(
            subject,
            str(error),
            f"edit the GPUSpawner settings in {site.path}; the hub would not start with them",
        )
    groups = sorted(site.spawner.group_limits)
    return passed(
        subject,
        f"{len(hub.gpus)} GPU(s) in the pool; profiles {', '.join(p.slug for p in hub.profiles)}; "
        f"group limits for {', '.join(groups) if groups else 'no group'}",
    )


GPU_LIMIT_KEYS = named(Concern.GPUS)  # what bounds the GPUs a user may take


def judge_users_outside_groups(site: HubConfig) -> Finding:
    """Users in no group that `group_limits` lists get `default_limits`, which, left without
    a GPU limit, lets each of them take every GPU: easy to miss where groups are listed."""
    subject = "Users outside group_limits"
    groups = ", ".join(sorted(site.spawner.group_limits))
    if not groups:
        return passed(subject, "no group_limits: default_limits applies to everyone")
    default = site.spawner.default_limits
    set_keys = [key for key in GPU_LIMIT_KEYS if default.get(key) is not None]
    if set_keys:
        return passed(
            subject, f"users in none of {groups} get default_limits' {', '.join(set_keys)}"
        )
    return warning(
        subject,
        f"users in none of {groups} are unlimited: default_limits sets no GPU limit "
        f"({', '.join(GPU_LIMIT_KEYS)}), so any of them may take every GPU",
        f'set their limits in {site.path}: c.GPUSpawner.default_limits = {{"max_gpus_per_user": '
        "1}, or 0 for CPU only; a listed group that leaves a key out takes default_limits' "
        'value too (docs/configuration.md, "Limits per group")',
    )


def judge_container_settings(site: HubConfig) -> Finding:
    """The check the hub makes at start: no setting hands notebooks GPUs or the host."""
    subject = "Container settings"
    try:
        check_container_settings(site.spawner, site.spawner.group_overrides)
        check_overrides(
            lambda: type(site.spawner).from_config(site.config), site.spawner.group_overrides
        )
    except GPUConfigError as unsafe:
        return failed(
            subject,
            str(unsafe),
            f"fix them in {site.path}; the hub would not start with them",
        )
    return passed(
        subject,
        "no setting gives notebooks GPUs or the host outside the pool's grants "
        "(privileged, runtimes, devices, capabilities, host mounts)",
    )


DEMO_AUTHENTICATORS = {
    "DummyAuthenticator": "DummyAuthenticator (any username logs in)",
    "SharedPasswordAuthenticator": "SharedPasswordAuthenticator (one password for everyone)",
}


def judge_logins(site: HubConfig) -> Finding:
    """A demo login is fine on 127.0.0.1, and a hole anywhere else: anyone who reaches the
    hub logs in and takes GPUs. So it fails there, and a deploy gated on doctor stops."""
    subject = "Logins"
    authenticator = site.authenticator_class()
    risks = []
    if authenticator.__name__ in DEMO_AUTHENTICATORS:
        risks.append(DEMO_AUTHENTICATORS[authenticator.__name__])
        if site.authenticator_setting("password", authenticator):
            risks.append("a shared demo password")
    if site.authenticator_setting("allow_all", authenticator):
        risks.append("allow_all = True (everyone who can log in gets GPUs)")
    host = site.public_host()
    where = f"{host}" if host else "every interface"
    if not risks:
        return passed(subject, f"{authenticator.__name__}; the hub listens on {where}")
    if is_loopback(host):
        return passed(subject, f"{', '.join(risks)}: only reachable from this machine ({host})")
    return failed(
        subject,
        f"{', '.join(risks)}, while the hub listens on {where}: anyone who can reach it "
        "logs in and gets GPUs",
        "use your site's authenticator (OAuthenticator, LDAP, PAM …) with an allow list or "
        "groups, or keep the demo on 127.0.0.1 (c.JupyterHub.bind_url)",
    )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


ORIGINS_FIX = (
    'give each server its own origin: c.JupyterHub.subdomain_host = "https://hub.example.org" '
    "(wildcard DNS and a TLS certificate for *.hub.example.org) and "
    'c.JupyterHub.cookie_host_prefix_enabled = True; see docs/setup.md, "Admins and users\' pages"'
)


def judge_origins(site: HubConfig) -> Finding:
    """Without subdomain_host the hub and every user's server share one origin, so script on a
    user's page can read the hub's XSRF token and act as whoever opens it: JupyterHub's
    documented single-origin limit. That matters once someone who opens it is an admin."""
    subject = "Admins and users' pages"
    subdomain_host = site.hub_setting("subdomain_host")
    if subdomain_host:
        return passed(subject, f"each server has its own origin under {subdomain_host}")
    admins = admins_named(site)
    if not admins:
        return passed(subject, "no admin is configured; servers share the hub's origin")
    return warning(
        subject,
        f"{', '.join(admins)} share the hub's origin with every user's server: a page on "
        "/user/NAME/ that an admin opens can act as that admin (no subdomain_host)",
        ORIGINS_FIX,
    )


def admins_named(site: HubConfig) -> list[str]:
    """Who the config makes an admin: admin_users, an authenticator's admin_groups, and
    load_roles members of the admin role or of any role with an admin scope."""
    authenticator = site.authenticator_class()
    found = []
    for setting, kind in (("admin_users", ""), ("admin_groups", "group ")):
        members = site.authenticator_setting(setting, authenticator) or ()
        found += [f"{kind}{name} ({setting})" for name in members]
    for role in site.config.JupyterHub.get("load_roles") or ():
        if isinstance(role, Mapping) and _grants_admin(role):
            for members, kind in (("users", ""), ("groups", "group ")):
                found += [
                    f"{kind}{name} (role {role.get('name')!r})" for name in role.get(members) or ()
                ]
    return sorted(set(found))


def _grants_admin(role: Mapping[str, Any]) -> bool:
    return role.get("name") == "admin" or any(
        str(scope).startswith("admin") for scope in role.get("scopes") or ()
    )
