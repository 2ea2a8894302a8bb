"""GPU profiles: what admins offer, and what a user picked.

Pure standard library. Admin config is checked once at hub start
(`parse_profiles`); a user's choice is checked on every start
(`choose_profile`), because the REST API skips the form and the hub reuses
stored `user_options` on later spawns.

A profile asks for one kind of GPU: `gpus` whole GPUs (as ever), one MIG
instance of a `mig_profile`, or one slot of a `shared` GPU; `gpu_model` (a
shell-style pattern) and `min_gpu_memory` narrow down which, and `nodes` on
which machines.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from .errors import ProfileConfigError
from .nodes import parse_nodes
from .schema import known_keys_only
from .units import MIG_PROFILE, Kind, Request, Unit, bare, parse_memory, tally
from .words import count_gpus, listed, quoted

SLUG = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,62})$")
PROFILE_KEYS = (
    "display_name",
    "slug",
    "description",
    "default",
    "gpus",
    "mig_profile",
    "shared",
    "gpu_model",
    "min_gpu_memory",
    "nodes",
    "turns",
    "spawner_override",
)
KINDS_FIX = (
    "set only one: gpus (whole GPUs), mig_profile (one MIG instance) or shared (one slot "
    "of a shared GPU)"
)
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
    mig_profile: str = ""
    shared: bool = False
    gpu_model: str = ""
    min_gpu_memory: int = 0
    nodes: frozenset[str] | None = None  # the machines it may run on; None: any
    turns: bool = False  # when every GPU is taken, share one with one other person in turns

    @property
    def request(self) -> Request:
        """What this profile asks the pool for."""
        return Request(
            self.gpus,
            self.mig_profile,
            self.shared,
            self.gpu_model,
            self.min_gpu_memory,
            nodes=self.nodes,
            turns=self.turns,
        )


Offered = int | Sequence[Unit]
"""What profiles are checked against: the pool's units, or a number of whole GPUs."""


def _units(pool: Offered) -> list[Unit]:
    if isinstance(pool, int):
        return [bare(f"GPU-{i}", i) for i in range(pool)]
    return list(pool)


def default_profiles(pool: Offered) -> list[Profile]:
    """CPU only; 1, 2, 4 and all whole GPUs of a machine, as far as the pool's largest
    machine has them (a server never spans machines); one MIG instance of each profile the
    pool has; a shared GPU's slot, if any GPU is shared."""
    units = _units(pool)
    whole = max(Counter(u.node for u in units if u.kind is Kind.GPU).values(), default=0)
    profiles = [Profile("cpu", "CPU only", 0, "No GPU: for editing, data work and small jobs.")]
    counts = sorted({n for n in (1, 2, 4, whole) if 0 < n <= whole})
    for n in counts:
        profiles.append(Profile(f"gpu-{n}", count_gpus(n), n, default=(n == 1)))
    for mig in dict.fromkeys(u.profile for u in units if u.kind is Kind.MIG):
        profiles.append(Profile(f"mig-{mig}", f"MIG {mig}", 0, mig_profile=mig))
    if any(u.kind is Kind.SHARED for u in units):
        profiles.append(
            Profile("shared", "Shared GPU", 0, "A GPU used by others at once.", shared=True)
        )
    if not counts and len(profiles) > 1:
        profiles[1] = replace(profiles[1], default=True)
    return profiles


def parse_profiles(raw: Sequence[Any], pool: Offered) -> list[Profile]:
    """Check the admin's profile list against the pool; an empty list means `default_profiles`."""
    if not raw:
        return default_profiles(pool)
    units = _units(pool)
    profiles = [_parse_profile(entry, i, units) for i, entry in enumerate(raw)]
    slugs = [p.slug for p in profiles]
    duplicates = sorted({s for s in slugs if slugs.count(s) > 1})
    if duplicates:
        raise ProfileConfigError(
            f"c.GPUSpawner.profiles: slug(s) used twice: {', '.join(duplicates)}"
        )
    if sum(p.default for p in profiles) > 1:
        raise ProfileConfigError("c.GPUSpawner.profiles: only one profile may have default=True")
    return profiles


def _parse_profile(entry: Any, position: int, units: Sequence[Unit]) -> Profile:
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
    where = f"{where} ({slug})"
    request = _request(entry, where)
    _check_capacity(request, where, units)  # on any machine: machines come and go
    nodes = entry.get("nodes")
    if nodes is not None:
        nodes = parse_nodes(nodes, f"{where}: nodes", ProfileConfigError)
    override = entry.get("spawner_override", {})
    if not isinstance(override, Mapping):
        raise ProfileConfigError(f"{where}: spawner_override must be a dict")
    return Profile(
        slug=slug,
        display_name=display_name,
        gpus=request.gpus,
        description=str(entry.get("description", "")),
        default=bool(entry.get("default", False)),
        spawner_override=MappingProxyType(dict(override)),
        mig_profile=request.mig_profile,
        shared=request.shared,
        gpu_model=request.gpu_model,
        min_gpu_memory=request.min_gpu_memory,
        nodes=nodes,
        turns=request.turns,
    )


def _request(entry: Mapping[str, Any], where: str) -> Request:
    """The profile's GPU keys, each checked, and checked together."""
    gpus = entry.get("gpus", 0)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise ProfileConfigError(f"{where}: gpus must be a whole number ≥ 0, got {gpus!r}")
    mig = entry.get("mig_profile", "")
    if not isinstance(mig, str) or (mig and not MIG_PROFILE.match(mig)):
        raise ProfileConfigError(
            f"{where}: mig_profile must name a MIG profile as nvidia-smi does, such as "
            f"'1g.10gb' or '3g.40gb', got {mig!r}"
        )
    shared = entry.get("shared", False)
    if not isinstance(shared, bool):
        raise ProfileConfigError(f"{where}: shared must be true or false, got {shared!r}")
    model = entry.get("gpu_model", "")
    if not isinstance(model, str):
        raise ProfileConfigError(
            f"{where}: gpu_model must be a model name or pattern such as '*A100*', got {model!r}"
        )
    memory = parse_memory(
        entry.get("min_gpu_memory", 0), f"{where}: min_gpu_memory", ProfileConfigError
    )
    kinds = [
        key for key, value in (("gpus", gpus), ("mig_profile", mig), ("shared", shared)) if value
    ]
    if len(kinds) > 1:
        raise ProfileConfigError(f"{where} sets {' and '.join(kinds)}; {KINDS_FIX}")
    if not kinds and (model or memory):
        raise ProfileConfigError(
            f"{where}: gpu_model and min_gpu_memory choose among GPUs, but this profile asks "
            f"for none; {KINDS_FIX}"
        )
    turns = entry.get("turns", False)
    if not isinstance(turns, bool):
        raise ProfileConfigError(f"{where}: turns must be true or false, got {turns!r}")
    if turns and (gpus != 1 or mig or shared):
        raise ProfileConfigError(
            f"{where}: turns is for profiles of one whole GPU (gpus: 1): two people take "
            "turns on one GPU, parking each other's work"
        )
    return Request(gpus, mig, shared, model, memory, turns=turns)


def _check_capacity(request: Request, where: str, units: Sequence[Unit]) -> None:
    """A profile the pool can never serve stops the hub: it would only ever be refused."""
    if request.kind is None:
        return
    matching = sum(request.matches(u) for u in units)
    if matching >= request.count:
        return
    if request.plain:
        raise ProfileConfigError(
            f"{where} asks for {request.gpus} GPUs, but the pool has only {matching}"
        )
    has = tally(units)
    fix = request.kind.facts.to_have_some
    wider = _wider_pattern(request, units)
    if wider:
        pattern, found = wider
        fix = f"set gpu_model to {pattern!r}, or change gpus or min_gpu_memory"
        has += (
            f". gpu_model is a shell-style pattern for the whole model name (case-insensitive), "
            f"so {request.gpu_model!r} matches only a GPU named exactly that; {pattern!r} "
            f"would match {found} here"
        )
    raise ProfileConfigError(
        f"{where} asks for {request.what}, but the pool has {matching} such; it has {has}. "
        f"Fix: {fix}"
    )


def _wider_pattern(request: Request, units: Sequence[Unit]) -> tuple[str, int] | None:
    """For a gpu_model written as part of a name ("H100"), the pattern around it that
    matches ("*H100*"), and how many units it matches; None where that would not help."""
    model = request.gpu_model
    if not model or any(char in model for char in "*?["):
        return None
    pattern = f"*{model}*"
    found = sum(replace(request, gpu_model=pattern).matches(u) for u in units)
    return (pattern, found) if found >= request.count else None


def _slugify(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:63]


def default_profile(profiles: Sequence[Profile]) -> Profile:
    return next((p for p in profiles if p.default), profiles[0])


def choose_profile(
    user_options: Any,
    profiles: Sequence[Profile],
    images: Collection[str] = (),
    more: Collection[str] = (),
) -> Profile:
    """The profile `user_options` names, or InvalidUserOptions saying what is wrong.

    No `profile` key means the default profile. `images` are the images the
    admin lets users pick (DockerSpawner's `allowed_images`; `"*"` for any):
    with them, `image` is accepted too; `more`: other options the hub reads (a swarm's
    `away_from_home`). Anything else is refused, never ignored.
    """
    if user_options is None:
        user_options = {}
    if not isinstance(user_options, Mapping):
        raise InvalidUserOptions(
            f'user_options must be an object such as {{"profile": "{profiles[0].slug}"}}, '
            f"got {_kind(user_options)}"
        )
    accepted = ("profile", "image", *more) if images else ("profile", *more)
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
