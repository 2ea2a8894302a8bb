"""GPU profiles: what admins offer, and what a user picked.

Pure standard library. Admin config is checked once at hub start
(`parse_profiles`); a user's choice is checked on every start
(`choose_profile`), because the REST API skips the form and the hub reuses
stored `user_options` on later spawns.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .errors import ProfileConfigError
from .schema import known_keys_only
from .words import count_gpus, listed, quoted

SLUG = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,62})$")
PROFILE_KEYS = ("display_name", "slug", "description", "default", "gpus", "spawner_override")
ANY_IMAGE = "*"  # DockerSpawner's allowed_images = "*": any image the user names
# A Docker image reference: [registry[:port]/]name[/name…][:tag][@digest], at most 255 characters.
IMAGE_REFERENCE = re.compile(
    r"^(?=.{1,255}$)[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)


class InvalidUserOptions(ValueError):
    """The user's options cannot be served; the message is for the user."""


@dataclass(frozen=True)
class Profile:
    slug: str
    display_name: str
    gpus: int
    description: str = ""
    default: bool = False
    spawner_override: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


def default_profiles(pool_size: int) -> list[Profile]:
    """CPU only, then 1, 2, 4 and all GPUs, as far as the pool has them."""
    profiles = [Profile("cpu", "CPU only", 0, "No GPU: for editing, data work and small jobs.")]
    counts = sorted({n for n in (1, 2, 4, pool_size) if 0 < n <= pool_size})
    for n in counts:
        profiles.append(Profile(f"gpu-{n}", count_gpus(n), n, default=(n == 1)))
    return profiles


def parse_profiles(raw: Sequence[Any], pool_size: int) -> list[Profile]:
    """Check the admin's profile list; an empty list means `default_profiles`."""
    if not raw:
        return default_profiles(pool_size)
    profiles = [_parse_profile(entry, i, pool_size) for i, entry in enumerate(raw)]
    slugs = [p.slug for p in profiles]
    duplicates = sorted({s for s in slugs if slugs.count(s) > 1})
    if duplicates:
        raise ProfileConfigError(
            f"c.GPUSpawner.profiles: slug(s) used twice: {', '.join(duplicates)}"
        )
    if sum(p.default for p in profiles) > 1:
        raise ProfileConfigError("c.GPUSpawner.profiles: only one profile may have default=True")
    return profiles


def _parse_profile(entry: Any, position: int, pool_size: int) -> Profile:
    where = f"c.GPUSpawner.profiles[{position}]"
    entry = known_keys_only(entry, where, PROFILE_KEYS, ProfileConfigError)
    display_name = entry.get("display_name")
    if not isinstance(display_name, str) or not display_name.strip():
        raise ProfileConfigError(f"{where} needs a display_name (text)")
    slug = entry.get("slug") or _slugify(display_name)
    if not isinstance(slug, str) or not SLUG.match(slug):
        raise ProfileConfigError(
            f"{where}: slug {slug!r} must be lowercase letters, digits, '.', '_' or '-' "
            "(at most 63), starting with a letter or digit"
        )
    gpus = entry.get("gpus", 0)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise ProfileConfigError(f"{where} ({slug}): gpus must be a whole number ≥ 0, got {gpus!r}")
    if gpus > pool_size:
        raise ProfileConfigError(
            f"{where} ({slug}) asks for {gpus} GPUs, but the pool has only {pool_size}"
        )
    override = entry.get("spawner_override", {})
    if not isinstance(override, Mapping):
        raise ProfileConfigError(f"{where} ({slug}): spawner_override must be a dict")
    return Profile(
        slug=slug,
        display_name=display_name,
        gpus=gpus,
        description=str(entry.get("description", "")),
        default=bool(entry.get("default", False)),
        spawner_override=MappingProxyType(dict(override)),
    )


def _slugify(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:63]


def default_profile(profiles: Sequence[Profile]) -> Profile:
    return next((p for p in profiles if p.default), profiles[0])


def choose_profile(
    user_options: Any, profiles: Sequence[Profile], images: Collection[str] = ()
) -> Profile:
    """The profile `user_options` names, or InvalidUserOptions saying what is wrong.

    No `profile` key means the default profile. `images` are the images the
    admin lets users pick (DockerSpawner's `allowed_images`; `"*"` for any):
    with them, `image` is accepted too. Anything else is refused, never ignored.
    """
    if user_options is None:
        user_options = {}
    if not isinstance(user_options, Mapping):
        raise InvalidUserOptions(
            f'user_options must be an object such as {{"profile": "{profiles[0].slug}"}}, '
            f"got {_kind(user_options)}"
        )
    accepted = ("profile", "image") if images else ("profile",)
    unknown = sorted(str(k) for k in user_options if k not in accepted)
    if unknown:
        raise InvalidUserOptions(
            f"Unknown option(s): {listed([quoted(k) for k in unknown])}. "
            f"Accepted: {', '.join(accepted)}."
        )
    if "image" in user_options:
        check_image(user_options["image"], images)
    slug = user_options.get("profile")
    if slug is None:
        return default_profile(profiles)
    if not isinstance(slug, str):
        raise InvalidUserOptions(
            f"profile must be a profile's slug (text such as {profiles[0].slug!r}), "
            f"got {_kind(slug)}"
        )
    for profile in profiles:
        if profile.slug == slug:
            return profile
    raise InvalidUserOptions(
        f"There is no profile {quoted(slug)}. Choose one of: {', '.join(p.slug for p in profiles)}."
    )


def check_image(image: Any, images: Collection[str]) -> None:
    """An image the user picked: text, and one the admin allows (or a valid name, for "*")."""
    if not isinstance(image, str):
        raise InvalidUserOptions(f"image must be an image name (text), got {_kind(image)}")
    if ANY_IMAGE in images:
        if not IMAGE_REFERENCE.match(image):
            raise InvalidUserOptions(
                f"image {quoted(image)} is not a Docker image name such as 'repo/name:tag'."
            )
    elif image not in images:
        raise InvalidUserOptions(
            f"image {quoted(image)} is not offered. Choose one of: {listed(sorted(images))}."
        )


JSON_KINDS = {bool: "true/false", int: "a number", float: "a number", str: "text", list: "a list"}


def _kind(value: Any) -> str:
    """What a JSON value is, in the words of someone writing JSON."""
    if value is None:
        return "null"
    return JSON_KINDS.get(type(value), "an object" if isinstance(value, Mapping) else "a list")
