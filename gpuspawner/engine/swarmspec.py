"""A notebook's Swarm service spec: made to hold exactly its GPUs, and read back for its reach.

Swarm gives a service no devices and no device requests (moby#40133), and its
generic resources are fragile (moby#44378) and never mixed in here: gpuspawner
chooses the GPUs, as on one host, and the spec carries them to the node's
NVIDIA runtime. `isolate_service` pins the service to its node with a
`node.id==…` constraint, names the GPUs in `NVIDIA_VISIBLE_DEVICES` (the
runtime reads it where it is the node's default runtime: the swarm executor
never sets one) and, where the node's toolkit accepts them
(`accept-nvidia-visible-devices-as-volume-mounts = true`), as binds of
/dev/null to /var/run/nvidia-container-devices/<UUID>, which outrank any
NVIDIA_VISIBLE_DEVICES, the image's "all" included. It never restarts (a task
started again elsewhere, or after its grant ended, would reach GPUs the books
gave away) and runs one task.

dockerd reads the spec's JSON case-insensitively, so it is read here as
escapes.py reads container settings (`normalised`), and each field set here
replaces every spelling of it.
"""

from __future__ import annotations

import copy
import posixpath
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..core.errors import UnsafeContainerConfig
from ..core.grants import Grant
from ..core.reach import Reach, from_ids
from .docker import env_dict, exposes_devices, guarded_environment
from .escapes import DEVICE_REQUEST_TARGETS, bound_devices, clean_path, find_escapes, normalised
from .labels import labels

DEVICE_MOUNT_ROOT = DEVICE_REQUEST_TARGETS[0]
# A Swarm placement constraint: swarmkit trims both sides and compares keys and values
# case-insensitively.
CONSTRAINT = re.compile(r"^\s*([^=!]+?)\s*(==|!=)\s*(.*?)\s*$")
GPU_NAME = re.compile(r"^(GPU|MIG)-", re.IGNORECASE)


def device_mounts(uuids: Iterable[str]) -> list[dict[str, Any]]:
    """The NVIDIA toolkit's volume-mount device requests: /dev/null bound at each UUID."""
    return [
        {
            "Type": "bind",
            "Source": "/dev/null",
            "Target": f"{DEVICE_MOUNT_ROOT}/{u}",
            "ReadOnly": True,
        }
        for u in uuids
    ]


def isolate_service(
    service_kwargs: Mapping[str, Any],
    grant: Grant,
    hub: str,
    node_id: str | None,
    volume_mounts: bool,
) -> dict[str, Any]:
    """`docker.APIClient.create_service`'s arguments, with exactly the granted GPUs, on the
    grant's node (`node_id`, its Swarm node ID; None only for a CPU-only server, which
    Swarm may place anywhere), never restarted. `volume_mounts`: the node's NVIDIA toolkit
    takes device requests as volume mounts.

    UnsafeContainerConfig if the config would reach GPUs or the host another way, or
    place the service on another node.
    """
    if grant.uuids and not node_id:
        raise ValueError("a server with GPUs runs on their node: node_id is required")
    hostname = grant.units[0].node if grant.units else ""
    problems = service_escapes(service_kwargs)
    template = normalised(service_kwargs.get("task_template") or {})
    if isinstance(template, Mapping):
        constraints = (template.get("placement") or {}).get("constraints") or []
        problems += contradictions(constraints, node_id, hostname)
    if problems:
        raise UnsafeContainerConfig(
            "Refusing to start: the service config sets " + "; ".join(problems) + ". "
            "Remove it from extra_container_spec, extra_placement_spec, extra_resources_spec, "
            "extra_task_spec, extra_create_kwargs, volumes, mounts, group_overrides or the "
            "profile's spawner_override."
        )
    kwargs = copy.deepcopy(dict(service_kwargs))
    ours = labels(grant, hub)
    template = dict(kwargs.get("task_template") or {})
    spec = dict(_get(template, "ContainerSpec") or {})
    environment = guarded_environment(_get(spec, "Env"), grant, name_devices=True)
    _put(spec, "Env", [f"{k}={v}" for k, v in environment.items()])
    _put(spec, "Labels", {**(_get(spec, "Labels") or {}), **ours})
    mounts = list(_get(spec, "Mounts") or [])
    _put(spec, "Mounts", mounts + (device_mounts(grant.uuids) if volume_mounts else []))
    _put(template, "ContainerSpec", spec)
    placement = dict(_get(template, "Placement") or {})
    constraints = list(_get(placement, "Constraints") or [])
    if node_id:
        constraints.append(f"node.id=={node_id}")
    _put(placement, "Constraints", constraints)
    _put(template, "Placement", placement)
    _put(template, "RestartPolicy", {"Condition": "none"})
    kwargs["task_template"] = template
    kwargs["labels"] = {**(kwargs.get("labels") or {}), **ours}
    kwargs["mode"] = {"Replicated": {"Replicas": 1}}
    return kwargs


def job_service(
    service_kwargs: Mapping[str, Any], grace: float, more_labels: Mapping[str, str]
) -> dict[str, Any]:
    """A job's service (after `isolate_service`): SIGTERM, then `grace` seconds before
    SIGKILL (its task's StopGracePeriod), and `more_labels` on the service and its
    container, as a job's container has them on one host."""
    kwargs = copy.deepcopy(dict(service_kwargs))
    template = dict(kwargs.get("task_template") or {})
    spec = dict(_get(template, "ContainerSpec") or {})
    _put(spec, "StopGracePeriod", int(grace * 1_000_000_000))  # nanoseconds
    _put(spec, "Labels", {**(_get(spec, "Labels") or {}), **more_labels})
    _put(template, "ContainerSpec", spec)
    kwargs["task_template"] = template
    kwargs["labels"] = {**(kwargs.get("labels") or {}), **more_labels}
    return kwargs


def _get(spec: Mapping[str, Any], key: str) -> Any:
    """A field as dockerd reads it, whatever its spelling (the last spelling wins)."""
    found = None
    for name, value in spec.items():
        if _same(name, key):
            found = value
    return found


def _put(spec: dict[str, Any], key: str, value: Any) -> None:
    """Set a field, dropping its other spellings, which dockerd would read too."""
    for name in [n for n in spec if _same(n, key)]:
        del spec[name]
    spec[key] = value


def _same(name: Any, key: str) -> bool:
    return str(name).lower().replace("_", "") == key.lower()


def service_escapes(service_kwargs: Mapping[str, Any]) -> list[str]:
    """What in a service's create arguments reaches GPUs or the host, in words; [] if nothing.

    A service cannot be privileged, nor have devices, device requests, another OCI runtime
    or the host's PID namespace; what it can have is checked as escapes.py checks a
    container's: mounts, added capabilities, lifted confinement. Beyond those: generic
    resources, plugin tasks, and more than one task (each would reach the same GPUs).
    """
    top = normalised(dict(service_kwargs))
    template = top.get("tasktemplate") or {}
    if not isinstance(template, Mapping):
        return [f"task_template is {type(template).__name__}, not a dict"]
    spec = template.get("containerspec") or {}
    if not isinstance(spec, Mapping):
        return [f"ContainerSpec is {type(spec).__name__}, not a dict"]
    privileges = spec.get("privileges") or {}
    unconfined = []
    if (privileges.get("selinuxcontext") or {}).get("disable"):
        unconfined.append("label=disable")
    for profile in ("seccomp", "apparmor"):
        confinement = str((privileges.get(profile) or {}).get("mode") or "").lower()
        if confinement in ("unconfined", "disabled"):
            unconfined.append(f"{profile}=unconfined")
    as_container = {
        "host_config": {
            "mounts": spec.get("mounts") or [],
            "cap_add": spec.get("capabilityadd") or [],
            "security_opt": unconfined,
        }
    }
    problems = find_escapes(as_container)
    resources = template.get("resources") or {}
    if any(
        (resources.get(part) or {}).get("genericresources") for part in ("reservations", "limits")
    ):
        problems.append("generic resources (gpuspawner chooses the GPUs, by UUID)")
    runtime = template.get("runtime")
    if runtime not in (None, "", "container") or template.get("pluginspec"):
        problems.append(f"runtime={runtime!r} or a plugin (a notebook is a container)")
    service_mode = top.get("mode") or {}
    if service_mode and not (
        isinstance(service_mode, Mapping)
        and set(service_mode) == {"replicated"}
        and (service_mode["replicated"] or {}).get("replicas") in (None, 1)
    ):
        problems.append(
            f"mode={service_mode!r} (one task holds a grant; more would share its GPUs)"
        )
    return problems


def contradictions(constraints: Iterable[Any], node_id: str | None, hostname: str) -> list[str]:
    """The placement constraints that keep a task off its grant's node (or cannot be read)."""
    problems = []
    for constraint in constraints:
        match = CONSTRAINT.match(str(constraint))
        if not match:
            problems.append(f"placement constraint {constraint!r}, which is not key==value")
            continue
        key, operator, value = match.groups()
        actual = {"node.id": node_id, "node.hostname": hostname}.get(key.lower())
        if actual and (value.lower() == actual.lower()) != (operator == "=="):
            problems.append(
                f"placement constraint {constraint!r}, but its GPUs are on node "
                f"{hostname or node_id}"
            )
    return problems


def pinned_node(spec: Mapping[str, Any]) -> str:
    """The node ID a task spec's `node.id==…` constraint names; "" if none."""
    constraints = (normalised(spec).get("placement") or {}).get("constraints") or []
    for constraint in constraints:
        match = CONSTRAINT.match(str(constraint))
        if match and match[1].lower() == "node.id" and match[2] == "==":
            return match[3]
    return ""


def spec_reach(spec: Mapping[str, Any], assigned: Iterable[Mapping[str, Any]] = ()) -> Reach:
    """The GPUs a task can reach, from its spec and its assigned generic resources, assuming
    the worst of its node: that nvidia is its default runtime and its toolkit takes volume
    mounts. What its image's environment says (an "all") the manager cannot see."""
    container = normalised(spec).get("containerspec") or {}
    env = env_dict(container.get("env"))
    found = from_ids([env.get("NVIDIA_VISIBLE_DEVICES", "")])
    for name, value in env.items():
        if name.startswith("DOCKER_RESOURCE_"):
            found |= _gpus(name, value.split(","))
    for mount in container.get("mounts") or []:
        if not isinstance(mount, Mapping):
            continue
        target = clean_path(str(mount.get("target", "")))
        if target in DEVICE_REQUEST_TARGETS:
            found |= Reach(every=True)  # a folder of requests: which, the node knows
        elif posixpath.dirname(target) in DEVICE_REQUEST_TARGETS:
            found |= from_ids([posixpath.basename(target)])
        elif str(mount.get("type", "volume")).lower() == "bind":
            found |= Reach(every=exposes_devices(str(mount.get("source", ""))))
        else:
            options = ((mount.get("volumeoptions") or {}).get("driverconfig") or {}).get("options")
            if isinstance(options, Mapping):
                found |= Reach(every=any(map(exposes_devices, bound_devices(options))))
    for resource in normalised(list(assigned)):
        named = resource.get("namedresourcespec") or {}
        discrete = resource.get("discreteresourcespec") or {}
        if named:
            found |= _gpus(str(named.get("kind", "")), [str(named.get("value", ""))])
        elif "GPU" in str(discrete.get("kind", "")).upper() and discrete.get("value"):
            found |= Reach(every=True)  # a count of GPUs: which ones, the node's runtime says
    return found


def _gpus(kind: str, values: Iterable[str]) -> Reach:
    """A generic resource's values (or DOCKER_RESOURCE_<kind>'s): GPUs if they are named as
    GPUs or the kind says GPU; another resource's (an SSD's) otherwise."""
    gpu_kind = "GPU" in kind.upper()
    return from_ids(v for v in values if gpu_kind or GPU_NAME.match(v.strip()))
