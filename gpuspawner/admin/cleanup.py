"""`gpuspawner cleanup`: remove what old spawns left behind; only a list unless --yes.

GPUSpawner removes a server's container when the server stops, but one that
stopped while the hub was not watching (the hub killed, the host rebooted)
stays, and each rebuild of a notebook image leaves the old one dangling.
Only our own stopped containers go (label gpuspawner.user), and only
dangling images that they used or that were built from images/ (label
gpuspawner.image); an image that any other container uses stays.

Users' homes are never part of a cleanup. Homes whose user is no longer in
the hub are listed on their own, and one is deleted only when the admin names
it (`--delete-home NAME`, with `--yes`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial

import docker
from docker.errors import APIError, DockerException
from docker.models.containers import Container
from docker.models.images import Image

from ..engine.docker import seen
from ..engine.labels import LABEL_SERVER, LABEL_USER
from . import homes, hubconfig

IMAGE_LABEL = "gpuspawner.image"  # set by the Dockerfiles in images/
STOPPED = ["created", "exited", "dead"]


@dataclass(frozen=True)
class Plan:
    containers: list[Container]
    images: list[Image]


def main(args: argparse.Namespace) -> int:
    try:
        client = docker.from_env()
        plan = make_plan(client, args.prefix, args.label)
        census = homes.take_census(client.api, args.config, args.db_url, args.prefix)
    except (DockerException, hubconfig.ConfigError) as error:
        print(f"gpuspawner cleanup: {error}", file=sys.stderr)
        return 1
    print(plan_in_words(plan))
    print(orphans_in_words(census))
    refused = homes.deletable(census, args.delete_home)
    if refused:
        print("\nNothing was removed. Not deleted:", *refused, sep="\n  ", file=sys.stderr)
        return 1
    if not (plan.containers or plan.images or args.delete_home):
        return 0
    if not args.yes:
        print("\nDry run: nothing was removed. Run again with --yes to remove them.")
        return 0
    return 0 if carry_out(client, plan, args.delete_home) else 1


def make_plan(client: docker.DockerClient, prefix: str = "", labels: Iterable[str] = ()) -> Plan:
    """The stopped containers of the hub whose c.DockerSpawner.prefix is `prefix` (""; of any
    hub), told as the hub tells its own (`Seen.of_hub`), and the images to go with them.

    `labels` ("KEY" or "KEY=VALUE") narrow both to those that carry them too.
    """
    labels = list(labels)
    stopped = [
        c
        for c in client.containers.list(
            all=True,
            filters={"label": [LABEL_USER, *labels], "status": STOPPED},
            ignore_removed=True,
        )
        if not prefix or seen(c.attrs).of_hub(prefix)
    ]
    going = {c.id for c in stopped}
    in_use = {
        c.attrs["ImageID"]
        for c in client.containers.list(all=True, sparse=True)
        if c.id not in going
    }
    dangling = client.images.list(filters={"dangling": True, "label": labels})
    keep = pick_images(
        {image.id: image.labels for image in dangling},
        freed={c.attrs["Image"] for c in stopped},
        in_use=in_use,
    )
    return Plan(stopped, [image for image in dangling if image.id in keep])


def pick_images(
    dangling: Mapping[str, Mapping[str, str]], freed: set[str], in_use: set[str]
) -> set[str]:
    """Of the dangling images (id → labels), those that are ours and that nothing else uses."""
    return {
        image
        for image, labels in dangling.items()
        if image not in in_use and (image in freed or IMAGE_LABEL in labels)
    }


def plan_in_words(plan: Plan) -> str:
    if not (plan.containers or plan.images):
        return "Nothing to clean up: no stopped gpuspawner containers, no dangling images of ours."
    lines = []
    if plan.containers:
        lines.append(f"Stopped gpuspawner containers ({len(plan.containers)}):")
        for container in plan.containers:
            labels = container.labels
            server = labels.get(LABEL_USER, "") + (
                f"/{labels[LABEL_SERVER]}" if labels.get(LABEL_SERVER) else ""
            )
            state = container.attrs["State"]
            when = state.get("FinishedAt", "")[:16].replace("T", " ")
            ended = state["Status"] + (
                f" {when} UTC" if when and not when.startswith("0001") else ""
            )
            image = container.attrs["Image"].removeprefix("sha256:")[:10]
            lines.append(f"  {container.name}  server {server}  {ended}  image {image}")
    if plan.images:
        lines.append(f"Dangling images ({len(plan.images)}):")
        for image in plan.images:
            built = image.attrs.get("Created", "")[:16].replace("T", " ")
            size = image.attrs.get("Size", 0) / 1e6
            lines.append(f"  {_short(image)}  {size:.0f} MB  built {built} UTC")
    return "\n".join(lines)


def orphans_in_words(census: homes.Census) -> str:
    """The homes of users no longer in the hub: listed apart, never removed unasked."""
    if census.users_unknown:
        return f"Homes: kept; cannot tell whose users are gone ({census.users_unknown})."
    orphans = census.orphans()
    if not orphans:
        return "Homes: every home belongs to a user of the hub; homes are never cleaned up."
    lines = [
        f"Homes of users no longer in the hub ({len(orphans)}), kept; back one up, then delete "
        "it with --delete-home NAME --yes:"
    ]
    for home in orphans:
        kind = "folder" if home.on_host else "volume"
        lines.append(
            f"  {home.name}  {kind} of {home.user}  {homes.size_in_words(home.size)}"
            + (f"  used by {', '.join(home.used_by)}" if home.used_by else "")
        )
    return "\n".join(lines)


def carry_out(client: docker.DockerClient, plan: Plan, homes: Iterable[str] = ()) -> bool:
    """Remove the plan's containers, then its images, then the home volumes the admin named
    (checked by homes.deletable first); False if any could not be removed."""
    removals: list[tuple[str, Callable[[], object]]] = [
        (f"container {c.name}", c.remove) for c in plan.containers
    ]
    removals += [(f"image {_short(i)}", partial(client.images.remove, i.id)) for i in plan.images]
    removals += [(f"home {name}", partial(client.api.remove_volume, name)) for name in homes]
    done = True
    for what, remove in removals:
        try:
            remove()
        except APIError as error:
            print(f"Could not remove {what}: {error.explanation or error}", file=sys.stderr)
            done = False
        else:
            print(f"Removed {what}")
    return done


def _short(image: Image) -> str:
    return image.short_id.removeprefix("sha256:")
