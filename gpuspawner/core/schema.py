"""The one check every admin-written dict in the config gets: a dict, with known keys only."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any


def known_keys_only(
    raw: Any, where: str, known: Collection[str], error: type[ValueError]
) -> Mapping[str, Any]:
    """`raw` itself, or `error` naming the setting (`where`) and what is wrong with it."""
    if not isinstance(raw, Mapping):
        raise error(f"{where} must be a dict, got {type(raw).__name__}")
    unknown = set(raw) - set(known)
    if unknown:
        raise error(
            f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
            f"known keys: {', '.join(known)}"
        )
    return raw
