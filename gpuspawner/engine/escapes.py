"""Container settings that would hand a notebook GPUs, or the host, outside its grant.

A notebook gets GPUs only through the device request gpuspawner writes. Any
other way in is refused: privileged mode, another runtime, device requests,
GPU device nodes and cgroup rules, CDI names and annotations, capabilities and
security options that lift the confinement, the host's PID namespace, and
mounts of the host's `/`, `/dev`, `/proc`, `/sys`, Docker's socket or data,
or the NVIDIA toolkit's volume-mount device requests.

dockerd matches JSON field names case-insensitively and docker-py passes a raw
`host_config` through unchanged, so keys are compared the way dockerd reads
them: lower case, without underscores (`cap_add`, `CapAdd` and `CAPADD` are
one key). Host paths are judged twice: as written (after `//`, `.` and `..`
are resolved), and as the kernel will open them, every link on the way
followed. A link is checked when the hub starts and again at every start,
because whoever can write where it lives can point it elsewhere in between:
`/srv/data -> /` would otherwise hand every notebook the host's root.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

# Host paths no notebook may mount: a mount of one of them, inside one, or of a folder that
# holds one (the host's "/" holds them all) is refused.
FORBIDDEN_SOURCES = (
    "/dev",
    "/proc",
    "/sys",
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/containerd",
    "/var/run/containerd",
    "/var/lib/docker",
)
# Where the NVIDIA Container Toolkit reads device requests made as volume mounts.
DEVICE_REQUEST_TARGETS = ("/var/run/nvidia-container-devices", "/run/nvidia-container-devices")
GPU_DEVICE = re.compile(r"^/dev/(nvidia|dri(/|$)|char/195:)")
CDI_NAME = re.compile(r"^[a-z0-9.-]+/[a-z0-9._-]+=")
RISKY_CAPABILITIES = {"ALL", "SYS_ADMIN", "SYS_MODULE", "SYS_RAWIO"}


def normalised(value: Any) -> Any:
    """`value` with every mapping's keys as dockerd matches them (lower case, no '_')."""
    if isinstance(value, Mapping):
        return {_key(k): normalised(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalised(v) for v in value]
    return value


def _key(key: Any) -> str:
    return str(key).lower().replace("_", "")


def find_escapes(create: Mapping[str, Any]) -> list[str]:
    """What in a container's create arguments reaches GPUs or the host, in words; [] if nothing.

    `create` is what reaches `docker.APIClient.create_container` (its
    keyword arguments, with `host_config` as a dict), before gpuspawner adds
    its own device request.
    """
    top = normalised(dict(create))
    host = top.get("hostconfig") or {}
    if not isinstance(host, Mapping):
        return [f"host_config is {type(host).__name__}, not a dict"]
    problems = []
    if host.get("privileged"):
        problems.append("privileged=True (a privileged container sees every GPU)")
    for runtime in (top.get("runtime"), host.get("runtime")):
        if runtime not in (None, "", "runc"):
            problems.append(f"runtime={runtime!r} (GPUs are given by device requests)")
    if host.get("devicerequests"):
        problems.append("device_requests (gpuspawner sets them from the pool)")
    devices = [_device_path(d) for d in host.get("devices") or []]
    gpu_devices = [named(d) for d in devices if CDI_NAME.match(d) or _judged(d, GPU_DEVICE.match)]
    if gpu_devices:
        problems.append(f"devices {gpu_devices} (GPU devices)")
    if host.get("devicecgrouprules"):
        problems.append("device_cgroup_rules (they can open GPU devices)")
    capabilities = {str(c).upper().removeprefix("CAP_") for c in host.get("capadd") or []}
    if capabilities & RISKY_CAPABILITIES:
        problems.append(f"cap_add {sorted(capabilities & RISKY_CAPABILITIES)} (lifts confinement)")
    unconfined = [
        str(o)
        for o in host.get("securityopt") or []
        if re.search(r"unconfined|label.disable", str(o))
    ]
    if unconfined:
        problems.append(f"security_opt {unconfined} (lifts confinement)")
    pid_mode = str(host.get("pidmode") or "").lower()
    if pid_mode == "host" or pid_mode.startswith("container:"):
        problems.append(f"pid_mode={pid_mode!r} (processes outside the container, and their GPUs)")
    if host.get("volumesfrom"):
        problems.append("volumes_from (another container's mounts, which gpuspawner cannot check)")
    annotations = {**(top.get("annotations") or {}), **(host.get("annotations") or {})}
    cdi = sorted(str(k) for k in annotations if str(k).startswith("cdi.k8s.io"))
    if cdi:
        problems.append(f"annotations {cdi} (CDI device requests)")
    problems += _mount_problems(host)
    return problems


def _device_path(device: Any) -> str:
    """The host side of a device: "/dev/x:/dev/y:rwm", or {"PathOnHost": …} in any case."""
    if isinstance(device, Mapping):
        return clean_path(str(device.get("pathonhost", "")))
    return clean_path(str(device).split(":", 1)[0])


def _mount_problems(host: Mapping[str, Any]) -> list[str]:
    sources: list[str] = []
    targets: list[str] = []
    for bind in host.get("binds") or []:
        source, _, rest = str(bind).partition(":")
        sources.append(source)
        targets.append(rest.split(":", 1)[0])
    problems = []
    for mount in host.get("mounts") or []:
        if not isinstance(mount, Mapping):
            continue
        targets.append(str(mount.get("target", "")))
        if str(mount.get("type", "volume")).lower() == "bind":
            sources.append(str(mount.get("source", "")))
        options: Any = mount
        for key in ("volumeoptions", "driverconfig", "options"):
            options = options.get(key) or {}
            if not isinstance(options, Mapping):
                problems.append(f"a mount whose {key} is a {type(options).__name__}, not a dict")
                break
        else:
            sources += bound_devices(options)
    bad = exposing_host(sources)
    if bad:
        problems.append(
            f"mounts of {', '.join(bad)}, which expose host devices, processes or Docker"
        )
    requests = sorted({t for t in map(clean_path, targets) if _under(t, DEVICE_REQUEST_TARGETS)})
    if requests:
        problems.append(f"mounts at {', '.join(requests)} (NVIDIA device requests)")
    return problems


def bound_devices(options: Mapping[str, Any]) -> list[str]:
    """The host path a local volume binds (`o=bind` or `rbind`, `device=/x`), as Docker's local
    driver reads its options; [] for any other volume."""
    options = normalised(options)
    if not {"bind", "rbind"} & set(str(options.get("o", "")).split(",")):
        return []
    return [str(options.get("device", ""))]


def forbidden_source(path: str) -> bool:
    """A host path whose mount would expose devices, host processes or Docker."""
    path = clean_path(path)
    return any(
        path == f or path.startswith(f + "/") or f.startswith(path.rstrip("/") + "/")
        for f in FORBIDDEN_SOURCES
    )


def exposing_host(sources: Iterable[str]) -> list[str]:
    """The host paths among `sources` whose mount exposes host devices, processes or Docker,
    as an error names them: "/dev", or "/srv/data (a link to /)"."""
    return sorted({named(s) for s in sources if s.startswith("/") and _judged(s, forbidden_source)})


def _judged(path: str, refused: Callable[[str], object]) -> bool:
    """Whether `refused` holds for a host path as written, or where its links lead."""
    return bool(refused(clean_path(path)) or refused(resolved(path)))


def resolved(path: str) -> str:
    """The host path the kernel opens for `path` here: each link on the way followed."""
    path = clean_path(path)
    return os.path.realpath(path) if path.startswith("/") else path


def named(path: str) -> str:
    """A host path as an error names it, with where it really leads when a link is on the way."""
    written, real = clean_path(path), resolved(path)
    return written if written == real else f"{written} (a link to {real})"


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)


def clean_path(path: str) -> str:
    """ "//dev/./x" → "/dev/x": the path the kernel opens."""
    if not path.startswith("/"):
        return path
    return posixpath.normpath("/" + path.lstrip("/"))


def settings_escapes(settings: Mapping[str, Any], where: str) -> list[str]:
    """Escapes in spawner settings (DockerSpawner's trait names), each naming its setting.

    Callables are skipped: they depend on the user and are checked at every
    container create, with everything else.
    """
    found = []
    for name, value in settings.items():
        if value is None or callable(value) or name not in _AS_CREATE:
            continue
        found += [
            f"{where}{name} sets {problem}" for problem in find_escapes(_AS_CREATE[name](value))
        ]
    return found


def _binds(volumes: Any) -> dict[str, Any]:
    """DockerSpawner's `volumes` ({host path or volume: container path}) as Docker binds."""
    if not isinstance(volumes, Mapping):
        return {}
    binds = []
    for source, target in volumes.items():
        if isinstance(target, Mapping):
            target = target.get("bind", "")
        binds.append(f"{source}:{target}")
    return {"host_config": {"binds": binds}}


_AS_CREATE: dict[str, Any] = {
    "extra_host_config": lambda value: {"host_config": value},
    "extra_create_kwargs": lambda value: value if isinstance(value, Mapping) else {},
    "volumes": _binds,
    "read_only_volumes": _binds,
    "mounts": lambda value: {"host_config": {"mounts": list(value or [])}},
}
