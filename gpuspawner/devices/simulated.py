"""Simulated GPUs, for demos and tests on machines without GPUs: the pool, the form, the
limits and Docker's device requests work as on a GPU server."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core.gpus import GPU, Telemetry
from ..core.placement import Topology


class SimulatedSource:
    """N GPUs that look real: stable UUIDs, an H100's name and memory.

    They idle at 0 % unless `load_file` says otherwise: a JSON object from
    UUID or index to any of utilization_percent, memory_used_gib,
    temperature_celsius, power_watts, processes (a list of PIDs) and health,
    so demos and tests can make a GPU look busy, hot or broken.
    """

    MODEL = "NVIDIA H100 80GB HBM3"
    MEMORY_BYTES = 80 * 2**30
    IDLE = Telemetry(0.0, 0, 34.0, 70.0)

    def __init__(self, count: int, seed: str = "gpuspawner", load_file: str = "") -> None:
        self.count = count
        self.seed = seed
        self.load_file = load_file

    def list_gpus(self) -> list[GPU]:
        return [GPU(self.uuid(i), i, self.MODEL, self.MEMORY_BYTES) for i in range(self.count)]

    def topology(self, gpus: Sequence[GPU]) -> Topology:
        """Wired like a DGX board: NVLink pairs (0–1, 2–3 …) under PCIe switches of four."""
        return Topology.by_index({g.uuid: g.index for g in gpus})

    def uuid(self, index: int) -> str:
        digest = hashlib.sha256(f"{self.seed}:{index}".encode()).hexdigest()
        return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"

    def sample(self, uuids: Sequence[str]) -> dict[str, Telemetry]:
        loads = self._loads()
        index = {self.uuid(i): str(i) for i in range(self.count)}
        samples = {}
        for uuid in uuids:
            load = loads.get(uuid) or loads.get(index.get(uuid, "")) or {}
            changes: dict[str, Any] = {k: v for k, v in load.items() if k in _SIMULATED_FIELDS}
            if "memory_used_gib" in load:
                changes["memory_used_bytes"] = int(load["memory_used_gib"] * 2**30)
            changes["processes"] = tuple(load.get("processes", ()))
            samples[uuid] = replace(self.IDLE, **changes)
        return samples

    def _loads(self) -> dict[str, Any]:
        if not self.load_file:
            return {}
        try:
            loads = json.loads(Path(self.load_file).read_text())
        except (OSError, ValueError):
            return {}
        return loads if isinstance(loads, dict) else {}


_SIMULATED_FIELDS = {"utilization_percent", "temperature_celsius", "power_watts", "health"}
