"""Users' storage on this host: homes that outlive containers, and shared data read-only.

Containers come and go (GPUSpawner removes each one when its server stops),
so everything a user keeps lives in what DockerSpawner's `volumes` and
`read_only_volumes` mount. This module gets those sources ready before a
container is created, because Docker would otherwise make them itself, and
wrongly for us:

- a missing host folder becomes an empty folder owned by root, which the
  notebook user (uid 1000) cannot write; a missing *read-only* one becomes an
  empty folder where the admin meant data. So writable host folders are
  created owned by the notebook user, and a missing read-only one is an error.
- a host folder reached through a link is made where the link leads: a link
  an admin (or a user, from inside a mounted folder) points at /dev would have
  the hub create and chown folders there. So every host path is judged where
  its links lead before anything is made, as the container create judges it.
- a named volume made on the fly carries no owner. A per-user volume (its
  name holds `{username}`) is created with labels naming its user and hub,
  so `gpuspawner homes` and `gpuspawner cleanup` find homes whatever the
  name template, and a home is never mistaken for scratch space.

Named volumes get their ownership from the image: the first time Docker
mounts an empty volume it copies the image's folder there (owner included),
so /home/jovyan stays jovyan's. Nothing here ever deletes or empties anything.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .escapes import clean_path, exposing_host
from .labels import LABEL_HUB, LABEL_USER_ID

# GPUSpawner's default `volumes`: one home per user, for all their servers and profiles.
DEFAULT_HOME_VOLUME = "gpuspawner-home-{username}"
DEFAULT_HOME_DIR = "/home/jovyan"
LABEL_HOME = "gpuspawner.home-of"  # on a home volume: the user's name as the hub spells it
PER_USER_FIELDS = ("{username}", "{raw_username}", "{safe_username}")


class StorageProblem(Exception):
    """A mount cannot be made ready; the message says which and what to do."""


@dataclass(frozen=True)
class Mount:
    source: str  # a named volume, or an absolute host path
    target: str  # where the notebook sees it
    read_only: bool
    per_user: bool  # its template names the user: a home

    @property
    def on_host(self) -> bool:
        return self.source.startswith("/")


@dataclass(frozen=True)
class Owner:
    """Whose storage this is: the hub's user, and the notebook user inside the container."""

    user: str
    user_id: int
    hub: str  # the spawner's prefix, as on its containers
    uid: int
    gid: int


def mounts(
    volumes: Mapping[str, Any], read_only_volumes: Mapping[str, Any], render: Callable[[str], str]
) -> list[Mount]:
    """DockerSpawner's two volume settings as mounts, each template rendered by `render`
    (the spawner's `format_volume_name`, which escapes the user's name)."""
    found = []
    for templates, read_only in ((volumes, False), (read_only_volumes, True)):
        for source, target in templates.items():
            mode = "rw"
            if isinstance(target, Mapping):
                mode = str(target.get("mode", "rw"))
                target = target.get("bind", "")
            found.append(
                Mount(
                    render(str(source)),
                    render(str(target)),
                    read_only or mode == "ro",
                    any(field in str(source) for field in PER_USER_FIELDS),
                )
            )
    return found


def homes(found: Iterable[Mount]) -> list[Mount]:
    """The writable per-user mounts: where a user's files are kept."""
    return [m for m in found if m.per_user and not m.read_only]


def node_homes(volumes: Mapping[str, Any]) -> list[Mount]:
    """The homes in DockerSpawner's `volumes` that are named volumes (templates unrendered):
    on a swarm, each node makes its own copy of such a volume."""
    return [m for m in homes(mounts(volumes, {}, str)) if not m.on_host]


def home_labels(owner: Owner) -> dict[str, str]:
    return {LABEL_HOME: owner.user, LABEL_USER_ID: str(owner.user_id), LABEL_HUB: owner.hub}


def prepare(client: Any, found: Iterable[Mount], owner: Owner) -> None:
    """Make every mount's source ready (blocking: run it in a worker thread).

    StorageProblem if one cannot be, before anything else is done for the spawn.
    """
    found = list(found)
    for mount in found:
        exposed = exposing_host([mount.source])
        if exposed:
            raise StorageProblem(
                f"{mount.target} would mount the host's {exposed[0]}, which exposes the host's "
                "devices, processes or Docker. Ask an admin to fix volumes or read_only_volumes."
            )
        if mount.on_host and clean_path(mount.source) != mount.source:
            raise StorageProblem(
                f"The host path {mount.source!r} (mounted at {mount.target}) is not a plain "
                "absolute path; ask an admin to fix the volumes setting."
            )
        if mount.on_host and mount.read_only and not os.path.exists(mount.source):
            raise StorageProblem(
                f"The shared folder {mount.source} (read-only at {mount.target}) does not exist "
                "on this host. Ask an admin to create it or to remove it from read_only_volumes."
            )
    for mount in found:
        if mount.read_only:
            continue
        if mount.on_host:
            make_folder(mount.source, owner.uid, owner.gid)
        elif mount.per_user:
            # Idempotent: an existing volume is returned as it is, labels and contents untouched.
            client.create_volume(mount.source, labels=home_labels(owner))


def make_folder(path: str, uid: int, gid: int) -> bool:
    """Create a writable host folder owned by the notebook user; True if it was created.

    An existing folder is left exactly as it is: its owner is the admin's choice.
    """
    try:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        os.mkdir(path, mode=0o700)
    except FileExistsError:
        return False
    except OSError as error:
        raise StorageProblem(
            f"Could not create the folder {path} for your files: {error.strerror}. "
            "Ask an admin (the hub must run as root to create users' folders)."
        ) from None
    try:
        os.chown(path, uid, gid)
    except OSError as error:
        raise StorageProblem(
            f"Created {path} but could not give it to uid {uid}: {error.strerror}. "
            "Ask an admin (the hub must run as root to create users' folders)."
        ) from None
    return True
