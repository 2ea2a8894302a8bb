"""A GPU's telemetry as JSON, between a node's agent (`gpuspawner agent`) and the hub.

Read strictly: a value of the wrong type is a `ValueError`, so a reply that is
not an agent's (another service on its port) is refused as a whole rather than
read as idle GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ..core.gpus import Telemetry

NUMBERS = ("utilization_percent", "temperature_celsius", "power_watts")


def telemetry_json(sample: Telemetry) -> dict[str, Any]:
    return asdict(sample)


def telemetry_of(raw: Any) -> Telemetry:
    if not isinstance(raw, Mapping):
        raise ValueError(f"a GPU's sample must be an object, not {type(raw).__name__}")
    for name in NUMBERS:
        _check(raw, name, (int, float))
    _check(raw, "memory_used_bytes", (int,))
    _check(raw, "health", (str,))
    processes = raw.get("processes") or []
    shares = raw.get("process_utilization")
    if not isinstance(processes, list) or not all(_is_int(p) for p in processes):
        raise ValueError(f"processes must be a list of PIDs, not {processes!r}")
    if shares is not None and not (
        isinstance(shares, list)
        and all(
            isinstance(s, list) and len(s) == 2 and _is_int(s[0]) and _is_number(s[1])
            for s in shares
        )
    ):
        raise ValueError(f"process_utilization must be [PID, percent] pairs, not {shares!r}")
    return Telemetry(
        raw.get("utilization_percent"),
        raw.get("memory_used_bytes"),
        raw.get("temperature_celsius"),
        raw.get("power_watts"),
        tuple(processes),
        raw.get("health"),
        None if shares is None else tuple((int(p), float(u)) for p, u in shares),
    )


def _check(raw: Mapping[str, Any], name: str, types: tuple[type, ...]) -> None:
    value = raw.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, types)):
        raise ValueError(f"{name} must be {' or '.join(t.__name__ for t in types)}: {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class AgentAnswer:
    samples: dict[str, Telemetry]
    owners: dict[int, str]

    @classmethod
    def read(cls, raw: Any) -> AgentAnswer:
        """ValueError for anything but an agent's answer."""
        if not isinstance(raw, Mapping) or not isinstance(raw.get("gpus"), Mapping):
            raise ValueError("the answer is not a gpuspawner agent's")
        owners = raw.get("owners") or {}
        if not isinstance(owners, Mapping) or not all(
            str(p).isdigit() and isinstance(o, str) for p, o in owners.items()
        ):
            raise ValueError("the agent's owners must map PIDs to containers")
        return cls(
            {str(uuid): telemetry_of(sample) for uuid, sample in raw["gpus"].items()},
            {int(pid): owner for pid, owner in owners.items()},
        )
