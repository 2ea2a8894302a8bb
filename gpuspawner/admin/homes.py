"""`gpuspawner homes`: every user's home, its size, who uses it, and whether its user exists;
on a swarm whose homes are each node's own, the node that holds it and when it was last used.

Homes are what users keep; the admin tools list them and never delete one
unasked (`gpuspawner cleanup --delete-home NAME` is the only way, for a home
whose user is gone). Home volumes are found by the label the hub gives each
one it creates (`engine.storage`), whatever the name template; homes in host
folders from the config's `volumes` (with `"/srv/home/{username}"`: the
folders in /srv/home). Whether a home's user still exists comes from the
hub's database (`hubusers`); when it cannot be read, no home is called
orphaned.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
from docker.errors import DockerException

from ..core.words import iso_utc
from ..engine.labels import LABEL_HUB
from ..engine.storage import LABEL_HOME
from ..records.homes import HomeRecord
from . import hubconfig, hubusers

# A home in host folders: a rw `volumes` entry whose source is "<folder>/{username}".
HOST_HOMES = re.compile(r"^(/.*)/\{(username|raw_username|safe_username)\}$")
HEADERS = ("HOME", "USER", "SIZE", "USED BY")


@dataclass(frozen=True)
class Home:
    name: str  # a volume's name, or a host folder's path
    user: str  # whose home it is, as the hub names them (or the folder's name)
    on_host: bool
    size: int | None  # bytes; None where unknown
    used_by: tuple[str, ...] = ()  # containers that mount it, running or not
    user_exists: bool | None = None  # None: the hub's users could not be read
    node: str = ""  # on a swarm whose homes are each node's own: the node that holds it
    last_used: float | None = None  # when a server of its user last ran there (swarm)


@dataclass
class Census:
    homes: list[Home] = field(default_factory=list)
    users_unknown: str = ""  # why the hub's users could not be read

    def orphans(self) -> list[Home]:
        return [h for h in self.homes if h.user_exists is False]


def main(args: argparse.Namespace) -> int:
    try:
        census = take_census(docker.from_env().api, args.config, args.db_url, args.prefix)
    except (hubconfig.ConfigError, DockerException) as error:
        print(f"gpuspawner homes: {error}", file=sys.stderr)
        return 1
    print(render(census))
    return 0


def take_census(client: Any, config_path: Path | None, db_url: str, prefix: str = "") -> Census:
    """Every home: volumes labelled by the hub (of hubs whose prefix starts with `prefix`) and
    host folders the config's `volumes` name, each with its size, users and owner's status."""
    site = _site(config_path)
    try:
        users: set[str] | None = set(
            hubusers.users(db_url or hubusers.db_url_of(site.config if site else None)).values()
        )
        why = ""
    except hubusers.UsersUnknown as unknown:
        users, why = None, str(unknown)
    mounted = _mounts_by_container(client)
    found = volume_homes(client, users, mounted, prefix)
    if site is not None:
        found += folder_homes(site.spawner.volumes, site.spawner.escape, users, mounted)
        if site.spawner.homes_on_nodes:
            found += node_homes(Path(site.spawner.usage_ledger_file), users)
    return Census(found, why)


def node_homes(ledger: Path, users: set[str] | None) -> list[Home]:
    """On a swarm whose homes are each node's own: each user's home and its node, as the
    hub wrote them down (`records.homes`); none before the hub's first start."""
    if not ledger.is_file():
        return []
    record = HomeRecord(ledger)
    try:
        kept = record.all()
    finally:
        record.close()
    return [
        Home(
            home.volume,
            home.user,
            on_host=False,
            size=None,  # on its node's engine, which the manager does not ask
            user_exists=None if users is None else home.user in users,
            node=home.node,
            last_used=home.last_used,
        )
        for home in sorted(kept.values(), key=lambda h: h.user)
    ]


def _site(config_path: Path | None) -> hubconfig.HubConfig | None:
    path = config_path or hubconfig.DEFAULT_PATH
    return hubconfig.load(path) if config_path or path.is_file() else None


def _mounts_by_container(client: Any) -> dict[str, list[str]]:
    """Volume names and host paths each container mounts (by container name)."""
    return {
        (summary.get("Names") or ["?"])[0].lstrip("/"): [
            m.get("Name") or m.get("Source", "") for m in summary.get("Mounts") or []
        ]
        for summary in client.containers(all=True)
    }


def _users_of(source: str, mounted: Mapping[str, list[str]]) -> tuple[str, ...]:
    return tuple(sorted(name for name, sources in mounted.items() if source in sources))


def volume_homes(
    client: Any, users: set[str] | None, mounted: Mapping[str, list[str]], prefix: str = ""
) -> list[Home]:
    volumes = client.volumes(filters={"label": LABEL_HOME})["Volumes"] or []
    volumes = [v for v in volumes if (v.get("Labels") or {}).get(LABEL_HUB, "").startswith(prefix)]
    sizes = {}
    if volumes:
        for entry in client.df().get("Volumes") or []:
            size = (entry.get("UsageData") or {}).get("Size", -1)
            sizes[entry["Name"]] = size if size >= 0 else None
    homes = []
    for volume in volumes:
        user = volume["Labels"][LABEL_HOME]
        homes.append(
            Home(
                volume["Name"],
                user,
                on_host=False,
                size=sizes.get(volume["Name"]),
                used_by=_users_of(volume["Name"], mounted),
                user_exists=None if users is None else user in users,
            )
        )
    return sorted(homes, key=lambda h: h.name)


def folder_homes(
    volumes: Mapping[str, Any],
    escape: Callable[[str], str],
    users: set[str] | None,
    mounted: Mapping[str, list[str]],
) -> list[Home]:
    """The folders in each host folder that `volumes` keeps homes in ("/srv/home/{username}")."""
    homes = []
    for source, target in volumes.items():
        read_only = isinstance(target, Mapping) and target.get("mode") == "ro"
        match = HOST_HOMES.match(str(source))
        if read_only or match is None:
            continue
        parent, placeholder = Path(match.group(1)), match.group(2)
        owners = {}
        if users is not None:
            owners = {(n if placeholder == "raw_username" else escape(n)): n for n in users}
        for folder in sorted(parent.iterdir() if parent.is_dir() else []):
            if not folder.is_dir() or folder.is_symlink():
                continue
            homes.append(
                Home(
                    str(folder),
                    owners.get(folder.name, folder.name),
                    on_host=True,
                    size=folder_size(folder),
                    used_by=_users_of(str(folder), mounted),
                    user_exists=None if users is None else folder.name in owners,
                )
            )
    return homes


def folder_size(folder: Path) -> int:
    """Bytes in a folder's files, as `du --apparent-size` counts them (links not followed)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue  # gone while counting
    return total


def size_in_words(size: int | None) -> str:
    if size is None:
        return "?"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def render(census: Census) -> str:
    if not census.homes:
        lines = ["No homes yet: the hub makes each user's home at their first start."]
        return "\n".join(lines + _unknown(census))
    on_nodes = any(home.node for home in census.homes)
    rows = [HEADERS + (("NODE", "LAST USED") if on_nodes else ())] + [
        (
            home.name,
            home.user + (" (not in the hub)" if home.user_exists is False else ""),
            size_in_words(home.size),
            ", ".join(home.used_by) or "–",
            *((home.node or "–", iso_utc(home.last_used) or "–") if on_nodes else ()),
        )
        for home in census.homes
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    sizes = [h.size for h in census.homes if h.size is not None]
    total = f", {size_in_words(sum(sizes))}" if sizes else ""
    unsized = len(census.homes) - len(sizes)
    total += f" ({unsized} of unknown size)" if sizes and unsized else ""
    lines += ["", f"{len(census.homes)} home(s){total}."]
    orphans = census.orphans()
    if orphans:
        lines.append(
            f"{len(orphans)} home(s) of users no longer in the hub: kept until you delete "
            "one by name (gpuspawner cleanup)."
        )
    return "\n".join(lines + _unknown(census))


def _unknown(census: Census) -> list[str]:
    if not census.users_unknown:
        return []
    return [f"Cannot tell whose users still exist ({census.users_unknown}); every home is kept."]


def deletable(census: Census, names: Iterable[str]) -> list[str]:
    """Why each named home may not be deleted; [] if all may. Only an orphaned home volume
    that no running container mounts may go."""
    by_name = {h.name: h for h in census.homes}
    problems = []
    for name in names:
        home = by_name.get(name)
        if home is None:
            problems.append(f"{name}: not a home gpuspawner knows (see gpuspawner homes)")
        elif home.user_exists is None:
            problems.append(f"{name}: cannot confirm that {home.user} is gone from the hub")
        elif home.user_exists:
            problems.append(f"{name}: {home.user} is still a user of the hub")
        elif home.node:
            problems.append(
                f"{name}: it is on node {home.node}; archive it, then remove it there "
                "(docker volume rm on that node)"
            )
        elif home.on_host:
            problems.append(
                f"{name}: gpuspawner does not delete folders; archive it, then remove it yourself"
            )
    return problems
